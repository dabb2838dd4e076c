//! The FUSE requests the kernel sends moafs (issue 29), counted at the kernel's own tracepoint
//! (`moafs_bench::fusetrace`): what the mount's transport options change, and that the data
//! and times stay right when requests are saved. Needs root, /dev/fuse, perf and a kernel
//! with the FUSE tracepoints (6.15+); skipped otherwise.
mod common;

use common::*;
use moafs_bench::fusetrace::{self, Counter};
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::thread::sleep;
use std::time::Duration;

fn can_count() -> bool {
    can_mount()
        && match fusetrace::available() {
            Ok(()) => true,
            Err(e) => {
                eprintln!("skipped: {e}");
                false
            }
        }
}

/// Ten 100-byte write() calls to one open file, counted before the close and after it.
fn writes_before_and_after_close(opts: &str) -> (u64, u64) {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    mkfs(&img, "64M");
    let m = Mounted::new(&img, &tmp.path().join("mnt"), opts);
    let path = m.dir.join("f");
    // Both counters start before the file is opened: starting one spawns perf, and a child
    // closing its inherited copy of an open descriptor (at exec) makes the kernel write that
    // file's dirty pages back, as any close does.
    let whole = Counter::start(&m.dir).unwrap();
    let writes = Counter::start(&m.dir).unwrap();
    let mut f = fs::File::create(&path).unwrap();
    let mut mtimes = Vec::new();
    for i in 0..10u8 {
        f.write_all(&[i; 100]).unwrap();
        let md = fs::metadata(&path).unwrap();
        mtimes.push((md.mtime(), md.mtime_nsec()));
        // the kernel's (and the engine's) clock ticks every few milliseconds
        sleep(Duration::from_millis(15));
    }
    let count = |c: &fusetrace::Counts| c.get("WRITE").copied().unwrap_or(0);
    let before = count(&writes.stop().unwrap());
    drop(f);
    let after = count(&whole.stop().unwrap()) - before;
    // whoever owns the times, each write moved mtime forward
    assert!(
        mtimes.windows(2).all(|w| w[1] > w[0]),
        "{opts}: mtime did not advance with every write: {mtimes:?}"
    );
    let want: Vec<u8> = (0..10u8).flat_map(|i| [i; 100]).collect();
    assert_eq!(fs::read(&path).unwrap(), want, "{opts}");
    m.unmount();
    assert_fsck_clean(&img);
    let m = Mounted::new(&img, &tmp.path().join("mnt"), "");
    assert_eq!(
        fs::read(m.dir.join("f")).unwrap(),
        want,
        "{opts}: after a remount"
    );
    m.unmount();
    (before, after)
}

#[test]
fn write_through_sends_each_write_at_once_and_the_writeback_cache_at_close() {
    if !can_count() {
        return;
    }
    let (before, after) = writes_before_and_after_close("writeback_cache=off");
    assert_eq!(
        (before, after),
        (10, 0),
        "write-through: one WRITE per write()"
    );
    let (before, after) = writes_before_and_after_close("");
    // the writeback cache gathers the ten writes (the kernel's background write-back may
    // take some before the close, under memory pressure from elsewhere)
    assert!(before + after >= 1, "the data reached the daemon");
    assert!(
        before + after < 10,
        "{before} WRITEs before close, {after} at it"
    );
}

/// `(FORGET requests, inodes)` from the daemon's log line at the end of its session.
fn forgets_logged(log: &str) -> Option<(u64, u64)> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("FORGET requests for"))?;
    let tail = &line[line.rfind('(')? + 1..];
    let mut words = tail.split_whitespace();
    let requests = words.next()?.parse().ok()?;
    let inodes = words.nth(3)?.parse().ok()?;
    Some((requests, inodes))
}

/// Creates and deletes `FILES` files on a fresh mount with `opts`; returns the FORGET
/// requests and inodes the daemon logged, and whether io_uring served the mount.
fn forgets_with(opts: &str) -> (u64, u64, bool) {
    const FILES: u64 = 2000;
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let log = tmp.path().join("log");
    mkfs(&img, "64M");
    let m = Mounted::logged(&img, &tmp.path().join("mnt"), opts, &log);
    for i in 0..FILES {
        fs::write(m.dir.join(format!("f{i}")), b"x").unwrap();
    }
    for i in 0..FILES {
        fs::remove_file(m.dir.join(format!("f{i}"))).unwrap();
    }
    m.unmount();
    let text = fs::read_to_string(&log).unwrap();
    let (requests, inodes) = forgets_logged(&text).unwrap_or_else(|| panic!("{text}"));
    eprintln!("{opts}: {requests} FORGET requests for {inodes} inodes");
    // (the kernel may still cache a few at the unmount, which sends no forgets)
    assert!(
        inodes >= FILES * 9 / 10,
        "{inodes} inodes forgotten of {FILES} deleted files"
    );
    assert_fsck_clean(&img);
    (
        requests,
        inodes,
        text.contains("serving FUSE over io_uring"),
    )
}

#[test]
fn forgets_of_deleted_files_come_in_batches_over_io_uring() {
    if !can_mount() {
        return;
    }
    let (requests, inodes, uring) = forgets_with("forget_pause_ms=3");
    if !uring {
        eprintln!("no io_uring here: forgets are served at once ({requests} for {inodes})");
        return;
    }
    assert!(
        requests * 4 <= inodes,
        "{requests} FORGET requests for {inodes} inodes"
    );
    // without the pause (the default), (nearly) one request per deleted file
    let (requests, inodes, _) = forgets_with("");
    assert!(
        requests * 2 > inodes,
        "default: {requests} FORGET requests for {inodes} inodes"
    );
}
