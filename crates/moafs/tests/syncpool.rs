//! The sync pools of the io_uring transport (`moafs-fuse/src/uring/pool.rs`): fsyncs from
//! several threads are handed to a pool, a lone thread's are served in the queue's thread,
//! and what an fsync acknowledged through the pool survives a SIGKILL of the daemon. Needs
//! root and /dev/fuse (skipped otherwise); the counts are checked where io_uring serves.
mod common;

use common::*;
use nix::sys::signal::Signal;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::Duration;

/// A fresh 64 MiB image mounted with `opts` and the daemon's log at info level: (the
/// temporary directory, the image, the log, the mount).
fn logged_mount(opts: &str) -> (tempfile::TempDir, PathBuf, PathBuf, Mounted) {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let log = tmp.path().join("log");
    mkfs(&img, "64M");
    let m = Mounted::logged(&img, &tmp.path().join("mnt"), opts, &log);
    (tmp, img, log, m)
}

/// `threads` threads, each writing its own file with an fsync after every 4 KiB, `rounds`
/// times, on a fresh mount with the daemon's log at info level; returns the logged counts.
fn fsyncs_with(threads: usize, rounds: u64, opts: &str) -> (u64, u64, bool) {
    let (_tmp, img, log, m) = logged_mount(opts);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let path = m.dir.join(format!("f{t}"));
            std::thread::spawn(move || {
                let f = fs::File::create(&path).unwrap();
                for r in 0..rounds {
                    f.write_all_at(&[t as u8 + 1; 4096], r * 4096).unwrap();
                    f.sync_all().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    for t in 0..threads {
        let got = fs::read(m.dir.join(format!("f{t}"))).unwrap();
        assert_eq!(got, vec![t as u8 + 1; 4096 * rounds as usize]);
    }
    m.unmount();
    assert_fsck_clean(&img);
    syncs_logged(&fs::read_to_string(&log).unwrap())
}

#[test]
fn several_syncing_threads_use_the_pool_and_a_lone_one_does_not() {
    if !can_mount() {
        return;
    }
    let (pooled, inline, uring) = fsyncs_with(8, 40, "");
    if !uring {
        eprintln!("no io_uring here: no sync pools ({pooled} pooled, {inline} inline)");
        return;
    }
    eprintln!("8 threads: {pooled} pooled, {inline} inline");
    assert!(
        pooled + inline >= 8 * 40,
        "{pooled} + {inline} sync requests"
    );
    assert!(pooled > 0, "8 syncing threads: none handed to a pool");
    // one thread alone: every fsync in the queue's thread, none handed over
    let (pooled, inline, _) = fsyncs_with(1, 40, "");
    assert_eq!(pooled, 0, "a lone syncing thread's fsyncs were handed over");
    assert!(inline >= 40, "{inline} sync requests served inline");
    // without pools, all of them inline
    let (pooled, inline, _) = fsyncs_with(8, 20, "sync_threads=0");
    assert_eq!(pooled, 0);
    assert!(inline >= 8 * 20, "{inline} sync requests served inline");
}

/// Each thread appends 4 KiB records to its own file with an fsync after each and notes what
/// was acknowledged, until the daemon is gone.
fn sync_until_gone(path: PathBuf, tag: u8, stop: Arc<AtomicBool>) -> u64 {
    let Ok(f) = fs::File::create(&path) else {
        return 0;
    };
    let mut acked = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let rec = [tag.wrapping_add(acked as u8); 4096];
        if f.write_all_at(&rec, acked * 4096).is_err() || f.sync_all().is_err() {
            break;
        }
        acked += 1;
    }
    acked
}

/// Eight threads run `work(mount point, thread number, stop)` on a fresh 64 MiB mount until
/// the daemon is SIGKILLed after 1.5 s: (the temporary directory, the image, the mount
/// point, the dead mount, what each thread returned).
fn killed_while<T: Send + 'static>(
    work: fn(PathBuf, u8, Arc<AtomicBool>) -> T,
) -> (tempfile::TempDir, PathBuf, PathBuf, Mounted, Vec<T>) {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    mkfs(&img, "64M");
    let m = Mounted::new(&img, &mnt, "");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..8u8)
        .map(|t| {
            let (dir, stop) = (mnt.clone(), stop.clone());
            std::thread::spawn(move || work(dir, t, stop))
        })
        .collect();
    sleep(Duration::from_millis(1500));
    kill(m.pid, Signal::SIGKILL).expect("signal the daemon");
    stop.store(true, Ordering::Relaxed);
    let done = workers.into_iter().map(|w| w.join().unwrap()).collect();
    (tmp, img, mnt, m, done)
}

#[test]
fn what_pooled_fsyncs_acknowledged_survives_a_kill() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, mnt, m, acked) =
        killed_while(|mnt, t, stop| sync_until_gone(mnt.join(format!("f{t}")), t * 31, stop));
    assert!(
        acked.iter().sum::<u64>() > 8,
        "the threads barely synced: {acked:?}"
    );
    let m = m.remount_after_crash(&img);
    for (t, &n) in acked.iter().enumerate() {
        check_records(&mnt.join(format!("f{t}")), t as u8 * 31, n);
    }
    m.unmount();
    assert_fsck_clean(&img);
}

/// Where fsyncs spend their time (issue 43 item 1): the `stats=` file has every fsync's
/// phases, the transport's (queue, reply) beside the engine's, and which way each was served.
#[test]
fn the_stats_file_says_where_each_fsync_spent_its_time() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let log = tmp.path().join("log");
    let stats = tmp.path().join("stats.json");
    mkfs(&img, "64M");
    let opts = format!("stats={}", stats.display());
    let m = Mounted::logged(&img, &tmp.path().join("mnt"), &opts, &log);
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 20;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let path = m.dir.join(format!("f{t}"));
            std::thread::spawn(move || {
                let f = fs::File::create(&path).unwrap();
                for r in 0..ROUNDS {
                    // appends (a commit each) and small overwrites (the byte log's)
                    let at = if r % 2 == 0 { r * 4096 } else { 100 };
                    f.write_all_at(&[t as u8 + 1; 512], at).unwrap();
                    f.sync_all().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    m.unmount();
    let (_, _, uring) = syncs_logged(&fs::read_to_string(&log).unwrap());
    let v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&stats).unwrap()).unwrap();
    let f = &v["fsync_phases"];
    let fsyncs = f["fsyncs"].as_u64().unwrap();
    assert!(fsyncs >= THREADS * ROUNDS, "{fsyncs} fsyncs recorded: {f}");
    let count = |group: &str, name: &str| f[group][name]["count"].as_u64().unwrap_or(0);
    assert_eq!(count("phases", "engine"), fsyncs, "{f}");
    // every fsync served one way, and some by a commit of their own (the appends)
    let served: u64 = ["bytelog", "bytelog_shared", "commit", "joined", "clean"]
        .iter()
        .map(|p| count("paths", p))
        .sum();
    assert_eq!(served, fsyncs, "{f}");
    assert!(count("paths", "commit") > 0, "{f}");
    for phase in ["lock", "plan", "write", "flush", "finish"] {
        assert!(count("phases", phase) > 0, "no {phase} phase: {f}");
    }
    // the transport's phases: the reply of each fsync; over io_uring its wait before too
    assert!(count("phases", "reply") >= fsyncs, "{f}");
    if uring {
        assert!(count("phases", "queue") >= fsyncs, "{f}");
    }
    // the engine's phases are parts of its time, never counted twice: their shares add up
    // to no more than the whole (histograms round each value by at most 1 %)
    let share = |p: &str| f["phases"][p]["per_fsync_us"].as_f64().unwrap_or(0.0);
    let parts: f64 = [
        "lock", "job", "batch", "wait", "plan", "write", "flush", "finish",
    ]
    .iter()
    .map(|p| share(p))
    .sum();
    assert!(share("plan") > 0.0, "{f}");
    assert!(
        parts <= share("engine") * 1.03,
        "the phases add up to more than the fsync: {parts} > {} µs: {f}",
        share("engine")
    );
    assert_fsck_clean(&img);
}

/// `threads` threads, each creating and removing files in one directory `rounds` times, on
/// a fresh mount with `opts`; returns the times a queue thread left SCHED_IDLE and whether
/// io_uring served. The threads share CPU 0, so their requests share its queue (a queue
/// sees callers take turns only among its own: on many CPUs they might never meet).
fn namespace_turns_with(threads: usize, rounds: usize, opts: &str) -> (u64, bool) {
    let (_tmp, img, log, m) = logged_mount(opts);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let dir = m.dir.clone();
            std::thread::spawn(move || {
                let mut cpu0 = nix::sched::CpuSet::new();
                cpu0.set(0).unwrap();
                nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpu0).unwrap();
                for r in 0..rounds {
                    let p = dir.join(format!("t{t}-{r}"));
                    fs::write(&p, [t as u8; 100]).unwrap();
                    if r % 2 == 0 {
                        fs::remove_file(&p).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    for t in 0..threads {
        for r in 0..rounds {
            let p = m.dir.join(format!("t{t}-{r}"));
            assert_eq!(fs::read(&p).ok(), (r % 2 == 1).then(|| vec![t as u8; 100]));
        }
    }
    m.unmount();
    assert_fsck_clean(&img);
    let log = fs::read_to_string(&log).unwrap();
    (
        boosts_logged(&log),
        log.contains("serving FUSE over io_uring"),
    )
}

#[test]
fn queue_threads_leave_sched_idle_only_when_callers_take_turns_unless_off() {
    if !can_mount() {
        return;
    }
    let (boosted, uring) = namespace_turns_with(4, 200, "");
    if !uring {
        eprintln!("no io_uring here: no queue threads to boost");
        return;
    }
    eprintln!("4 threads creating and removing: queue threads boosted {boosted} times");
    assert!(boosted > 0, "callers took turns changing one directory");
    let (alone, _) = namespace_turns_with(1, 400, "queue_boost=-5");
    assert_eq!(alone, 0, "one caller never boosts");
    let (off, _) = namespace_turns_with(4, 200, "queue_boost=off");
    assert_eq!(off, 0, "queue_boost=off never boosts");
}

/// What varmail does, in one directory, until the daemon is gone: delete the file of two
/// rounds ago, create a new one and write and fsync a first record, append and fsync a second.
/// Returns the files this thread acknowledged and kept: (name, records acknowledged).
fn mail_until_gone(dir: PathBuf, t: u8, stop: Arc<AtomicBool>) -> Vec<(PathBuf, u64)> {
    let mut kept: Vec<(PathBuf, u64)> = Vec::new();
    let tag = |round: usize| t.wrapping_mul(37).wrapping_add(round as u8);
    for round in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if round >= 2 {
            // (its removal need not be durable: the file is no longer checked)
            let old = kept.remove(0).0;
            if fs::remove_file(&old).is_err() {
                break;
            }
        }
        let path = dir.join(format!("m{t}-{round}"));
        let Ok(f) = fs::File::create(&path) else {
            break;
        };
        let mut acked = 0u64;
        for r in 0..2u64 {
            let rec = [tag(round).wrapping_add(r as u8); 4096];
            if f.write_all_at(&rec, r * 4096).is_err() || f.sync_all().is_err() {
                break;
            }
            acked += 1;
        }
        if acked > 0 {
            kept.push((path, acked));
        }
        if acked < 2 {
            break;
        }
    }
    kept
}

/// Varmail's pattern (issue 43: "SIGKILL of the daemon under varmail keeps every acknowledged
/// fsync"): eight threads creating, fsyncing, appending and deleting in one directory — the
/// sync pools grouping their commits and the queue threads boosted (`boost.rs`) — then a
/// SIGKILL; after the remount every file a thread created, fsynced and did not delete is there
/// with every record acknowledged.
#[test]
fn what_varmail_threads_acknowledged_survives_a_kill() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, _mnt, m, kept) = killed_while(mail_until_gone);
    let files: usize = kept.iter().map(Vec::len).sum();
    assert!(files >= 8, "the threads barely synced: {kept:?}");
    eprintln!("{files} files acknowledged and kept by 8 threads at the kill");
    let m = m.remount_after_crash(&img);
    for (t, files) in kept.iter().enumerate() {
        for (path, acked) in files {
            let round: usize = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit('-').next())
                .and_then(|r| r.parse().ok())
                .unwrap();
            let tag = (t as u8).wrapping_mul(37).wrapping_add(round as u8);
            check_records(path, tag, *acked);
        }
    }
    m.unmount();
    assert_fsck_clean(&img);
}
