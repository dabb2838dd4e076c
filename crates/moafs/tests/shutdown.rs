//! The shutdown ioctl through a real mount (`FS_IOC_SHUTDOWN`, sent by `xfs_io -x -c
//! shutdown [-f]` as by xfstests' godown): with or without a log flush, every operation fails
//! with EIO after it, nothing more reaches the image (not even at unmount), and the next
//! mount recovers exactly what was durable — every fsync acknowledged before, under load
//! (xfstests' fsstress when it is built, else threads of our own that create, rename and
//! delete). Needs root, /dev/fuse and xfs_io (skipped otherwise).
mod common;

use common::*;
use nix::sys::signal::Signal;
use std::fs;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::Duration;

fn have_xfs_io() -> bool {
    let ok = Command::new("xfs_io").arg("-V").output().is_ok();
    if !ok {
        eprintln!("skipping: no xfs_io (xfsprogs)");
    }
    ok
}

/// `xfs_io -x -c "shutdown [-f]" DIR`: its exit status and stderr.
fn shutdown(dir: &Path, flush: bool) -> (bool, String) {
    let cmd = if flush { "shutdown -f" } else { "shutdown" };
    let out = Command::new("xfs_io")
        .args(["-x", "-c", cmd])
        .arg(dir)
        .output()
        .unwrap();
    (out.status.success(), text(&out.stderr))
}

/// Everything in the image, to see that nothing more is written to it.
fn image_bytes(img: &Path) -> Vec<u8> {
    fs::read(img).unwrap()
}

fn errno_of(r: std::io::Result<impl Sized>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// Unmounts a shut-down mount (which must work and write nothing: the image still reads
/// `frozen`), checks the image with `fsck -n` and mounts it again.
fn unmount_unchanged_and_remount(m: Mounted, img: &Path, frozen: &[u8]) -> Mounted {
    let dir = m.dir.clone();
    let pid = m.unmount_with(&["umount"]);
    assert!(
        wait_gone(pid, Duration::from_secs(20)),
        "daemon still alive"
    );
    assert!(
        image_bytes(img) == frozen,
        "the image changed after the shutdown"
    );
    let (code, out) = fsck(img);
    assert_eq!(code, 0, "fsck -n after the shutdown:\n{out}");
    Mounted::new(img, &dir, "")
}

/// After a shutdown: a create, a write, a listing and a read all fail with EIO.
fn assert_everything_fails(dir: &Path, existing: &Path) {
    assert_eq!(
        errno_of(fs::write(dir.join("after-shutdown"), b"x")),
        Some(libc::EIO),
        "create after shutdown"
    );
    assert_eq!(
        errno_of(fs::read_dir(dir).and_then(|d| d.collect::<Result<Vec<_>, _>>())),
        Some(libc::EIO),
        "listing after shutdown"
    );
    // (an open may still succeed: the kernel asks nothing of a FUSE file system that
    // declined OPEN and whose attributes it caches)
    let synced = fs::OpenOptions::new()
        .append(true)
        .open(existing)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, b"more")?;
            f.sync_all()
        });
    assert_eq!(
        errno_of(synced),
        Some(libc::EIO),
        "write and fsync after shutdown"
    );
}

#[test]
fn a_shutdown_flushes_the_log_or_not_and_then_everything_fails() {
    if !can_mount() || !have_xfs_io() {
        return;
    }
    for flush in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("img");
        let mnt = tmp.path().join("mnt");
        mkfs(&img, "64M");
        let m = Mounted::new(&img, &mnt, "");
        fs::write(mnt.join("synced"), b"durable").unwrap();
        fs::File::open(mnt.join("synced"))
            .unwrap()
            .sync_all()
            .unwrap();
        // closed, so its data reached the daemon (close writes dirty pages back), but no
        // fsync: durable only if the shutdown flushes the log
        fs::write(mnt.join("closed"), b"written").unwrap();
        fs::create_dir(mnt.join("dir")).unwrap();

        // an unprivileged caller may not shut the file system down
        let st = as_nobody(&[
            "xfs_io".as_ref(),
            "-x".as_ref(),
            "-c".as_ref(),
            "shutdown".as_ref(),
            mnt.as_os_str(),
        ]);
        assert!(!st.success(), "shutdown by nobody succeeded");
        assert!(mnt.join("synced").exists());

        let (ok, err) = shutdown(&mnt, flush);
        assert!(ok, "shutdown failed: {err}");
        let frozen = image_bytes(&img);
        assert_everything_fails(&mnt, &mnt.join("synced"));
        // (a second shutdown through xfs_io cannot be asked: its stat fails with EIO first;
        // the engine test shuts down twice)
        // unmounting works and writes nothing
        let m = unmount_unchanged_and_remount(m, &img, &frozen);
        assert_eq!(fs::read(mnt.join("synced")).unwrap(), b"durable");
        if flush {
            assert_eq!(fs::read(mnt.join("closed")).unwrap(), b"written");
            assert!(mnt.join("dir").is_dir());
        }
        fs::write(mnt.join("after"), b"usable again").unwrap();
        m.unmount();
        assert_fsck_clean(&img);
    }
}

/// Appends 4 KiB records to `path` with an fsync after each until one fails (or `give_up`);
/// returns how many were acknowledged and whether one failed.
fn sync_until_refused(path: PathBuf, tag: u8, give_up: Arc<AtomicBool>) -> (u64, bool) {
    let Ok(f) = fs::File::create(&path) else {
        return (0, true);
    };
    let mut acked = 0u64;
    while !give_up.load(Ordering::Relaxed) {
        let rec = [tag.wrapping_add(acked as u8); 4096];
        if f.write_all_at(&rec, acked * 4096).is_err() || f.sync_all().is_err() {
            return (acked, true);
        }
        acked += 1;
    }
    (acked, false)
}

/// Churn without fsyncs beside the syncing threads: xfstests' fsstress when built, else
/// threads that create, write, rename and delete until `stop`.
enum Churn {
    Fsstress(std::process::Child),
    Threads(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>),
}

fn start_churn(dir: &Path) -> Churn {
    let fsstress = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/xfstests/ltp/fsstress");
    fs::create_dir_all(dir).unwrap();
    if fsstress.exists() {
        // a process group of its own: its worker processes end with it
        let child = Command::new(&fsstress)
            .args(["-d", p(dir), "-p", "4", "-n", "1000000", "-s", "1"])
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        return Churn::Fsstress(child);
    }
    eprintln!("no fsstress built (scripts/xfstests.sh builds it): churn of our own");
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..3)
        .map(|t| {
            let (dir, stop) = (dir.to_path_buf(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let a = dir.join(format!("c{t}-{}", i % 50));
                    let b = dir.join(format!("r{t}-{}", i % 37));
                    if fs::write(&a, vec![i as u8; (i % 9000) as usize]).is_err() {
                        break; // shut down
                    }
                    let _ = fs::rename(&a, &b);
                    if i.is_multiple_of(3) {
                        let _ = fs::remove_file(&b);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    Churn::Threads(stop, threads)
}

fn stop_churn(c: Churn) {
    match c {
        Churn::Fsstress(mut child) => {
            let group = -(child.id() as i32);
            let _ = kill(group, Signal::SIGKILL);
            let _ = child.wait();
            // its workers (reaped by init) hold the mount busy until they are gone
            for _ in 0..500 {
                if nix::sys::signal::kill(nix::unistd::Pid::from_raw(group), None).is_err() {
                    break;
                }
                sleep(Duration::from_millis(20));
            }
        }
        Churn::Threads(stop, threads) => {
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                t.join().unwrap();
            }
        }
    }
}

#[test]
fn a_shutdown_under_load_keeps_every_acknowledged_fsync() {
    if !can_mount() || !have_xfs_io() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    mkfs(&img, "256M");
    let m = Mounted::new(&img, &mnt, "");
    let churn = start_churn(&mnt.join("stress"));
    let give_up = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..6u8)
        .map(|t| {
            let (path, give_up) = (mnt.join(format!("f{t}")), give_up.clone());
            std::thread::spawn(move || sync_until_refused(path, t * 41, give_up))
        })
        .collect();
    sleep(Duration::from_millis(2000));
    let (ok, err) = shutdown(&mnt, false);
    assert!(ok, "shutdown failed: {err}");
    let frozen = image_bytes(&img);
    sleep(Duration::from_millis(2000));
    give_up.store(true, Ordering::Relaxed);
    let ended: Vec<(u64, bool)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    stop_churn(churn);
    assert!(
        ended.iter().all(|&(_, refused)| refused),
        "fsyncs still succeed 2 s after the shutdown: {ended:?}"
    );
    let acked: Vec<u64> = ended.iter().map(|&(n, _)| n).collect();
    assert!(
        acked.iter().sum::<u64>() > 6,
        "the threads barely synced: {acked:?}"
    );
    let m = unmount_unchanged_and_remount(m, &img, &frozen);
    for (t, &n) in acked.iter().enumerate() {
        check_records(&mnt.join(format!("f{t}")), t as u8 * 41, n);
    }
    m.unmount();
    assert_fsck_clean(&img);
}
