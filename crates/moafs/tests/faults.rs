//! Device errors under the real mount: the image is a sparse file in a small tmpfs, and the
//! tmpfs is then filled, so that the daemon's writes of new image blocks fail (ENOSPC from
//! the backing file, as a thin-provisioned or failing disk). Through the kernel — FUSE
//! writeback cache, fsync — the application must get an error and never a 0 from fsync
//! after the loss, the daemon must say so once in its log and not die, and after the space
//! is back every file fsynced before the fault is exact and fsck is clean.

mod common;
use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;

/// A tmpfs of `size` mounted at a fresh directory; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(parent: &Path, size: &str) -> Tmpfs {
        let dir = parent.join("tmpfs");
        fs::create_dir_all(&dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` with `dir/filler` until ENOSPC.
fn fill(dir: &Path) {
    let mut f = fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0xeeu8; 1 << 20];
    loop {
        if f.write_all(&chunk).is_err() {
            break;
        }
    }
    let _ = f.sync_all();
}

#[test]
fn backing_write_errors_reach_fsync_and_lose_nothing_acknowledged() {
    if !can_mount() {
        return;
    }
    let tmp = TempDir::new().unwrap();
    let space = Tmpfs::new(tmp.path(), "40M");
    let img = space.0.join("img");
    mkfs(&img, "256M");
    let mnt = tmp.path().join("mnt");
    let log = tmp.path().join("daemon.log");
    let m = Mounted::new(&img, &mnt, &format!("log={}", p(&log)));
    // acknowledged before the fault
    let mut acked = Vec::new();
    for k in 0..4u8 {
        let path = mnt.join(format!("kept{k}"));
        let data = vec![k + 1; 300_000 + k as usize * 1000];
        let f = fs::File::create(&path).unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        acked.push((path, data));
    }
    // the disk under the image is full: new image blocks cannot be written
    fill(&space.0);
    let mut first_error = None;
    let f = fs::File::create(mnt.join("lost")).unwrap();
    for i in 0..64u64 {
        // written to the page cache (FUSE writeback cache), sent to the daemon, committed
        let w = f.write_all_at(&vec![9u8; 1 << 20], i << 20);
        let s = f.sync_all();
        match (w, s) {
            (Ok(()), Ok(())) => assert!(
                first_error.is_none(),
                "fsync returned 0 after a failed one (round {i})"
            ),
            (w, s) => {
                let e = w.err().or(s.err()).unwrap();
                first_error.get_or_insert((i, e.raw_os_error()));
            }
        }
        if first_error.is_some() {
            // later fsyncs of any file fail too: the file system lost what it had not written
            let k = fs::OpenOptions::new()
                .write(true)
                .open(&acked[0].0)
                .unwrap();
            let r = k.write_all_at(b"after", 0).and_then(|()| k.sync_all());
            assert!(r.is_err(), "an fsync after the failure returned 0");
            break;
        }
    }
    let (round, errno) = first_error.expect("the full disk under the image never showed");
    eprintln!("the first error came in round {round}: errno {errno:?}");
    assert!(
        matches!(
            errno,
            Some(libc::EIO) | Some(libc::EROFS) | Some(libc::ENOSPC)
        ),
        "round {round}: {errno:?}"
    );
    // the daemon is alive and says what happened
    assert!(!process_gone(m.pid), "the daemon died");
    assert!(is_mounted(&mnt));
    drop(f);
    m.unmount();
    let said = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        said.contains("read-only until it is remounted"),
        "no log line about the failure:\n{said}"
    );
    assert!(!said.contains("panicked"), "{said}");
    eprintln!("daemon log:\n{said}");
    // space back: every acknowledged byte is there
    fs::remove_file(space.0.join("filler")).unwrap();
    assert_fsck_clean(&img);
    let m = Mounted::new(&img, &mnt, "");
    for (path, data) in &acked {
        assert_eq!(&fs::read(path).unwrap(), data, "{}", path.display());
    }
    m.unmount();
    assert_fsck_clean(&img);
    drop(space);
}

/// Read errors and failing flushes switched on in a running daemon (`-o faults=PATH`):
/// a read of data the daemon must fetch gets EIO and nothing else changes (the same file
/// reads again once the fault is gone, another file is written and fsynced); a flush that
/// fails makes the application's fsync return EIO, and every later fsync too, the daemon
/// stays up and logs it; after a remount every fsynced file is exact and fsck is clean.
#[test]
fn read_errors_and_failing_flushes_under_the_mount() {
    if !can_mount() {
        return;
    }
    let tmp = TempDir::new().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    let ctl = tmp.path().join("faults");
    let log = tmp.path().join("daemon.log");
    mkfs(&img, "64M");
    let opts = format!("faults={},log={}", p(&ctl), p(&log));
    let switch = |text: &str| {
        fs::write(&ctl, text).unwrap();
        // the daemon looks at the file every few milliseconds
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let a_data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let m = Mounted::new(&img, &mnt, &opts);
    for (name, data) in [("a", &a_data), ("b", &vec![2u8; 50_000])] {
        let f = fs::File::create(mnt.join(name)).unwrap();
        f.write_all_at(data, 0).unwrap();
        f.sync_all().unwrap();
    }
    m.unmount();
    // a cold daemon: the data of a must come from the device
    let m = Mounted::new(&img, &mnt, &opts);
    assert_eq!(fs::metadata(mnt.join("a")).unwrap().len(), 1_000_000);
    switch("read all\n");
    let e = fs::read(mnt.join("a")).expect_err("a read of a failing device");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    switch("");
    assert_eq!(
        fs::read(mnt.join("a")).unwrap(),
        a_data,
        "a after the read fault"
    );
    let c = fs::File::create(mnt.join("c")).unwrap();
    c.write_all_at(b"after a read error", 0).unwrap();
    c.sync_all()
        .expect("the file system still works after a read error");
    // flushes fail: the fsync that needs one fails, and every later one
    switch("flush\n");
    let b = fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("b"))
        .unwrap();
    b.write_all_at(&[7u8; 8192], 0).unwrap();
    let e = b.sync_all().expect_err("fsync with failing flushes");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    switch("");
    c.write_all_at(b"later", 0).unwrap();
    let e = c.sync_all().expect_err("an fsync after a failed one");
    assert!(
        matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EROFS)),
        "{e}"
    );
    assert!(!process_gone(m.pid), "the daemon died");
    drop((b, c));
    m.unmount();
    let said = fs::read_to_string(&log).unwrap_or_default();
    assert!(said.contains("read-only until it is remounted"), "{said}");
    assert!(!said.contains("panicked"), "{said}");
    assert_fsck_clean(&img);
    let m = Mounted::new(&img, &mnt, "");
    assert!(fs::read(mnt.join("a")).unwrap() == a_data, "a changed");
    // a failed fsync promises nothing either way: its writes may have landed before the
    // flush failed, and the journal then replays them
    let b_new: Vec<u8> = [vec![7u8; 8192], vec![2u8; 50_000 - 8192]].concat();
    let b = fs::read(mnt.join("b")).unwrap();
    assert!(b == vec![2u8; 50_000] || b == b_new, "b is neither version");
    let c = fs::read(mnt.join("c")).unwrap();
    assert!(
        c == b"after a read error" || c == b"later a read error",
        "c is neither version: {:?}",
        String::from_utf8_lossy(&c)
    );
    m.unmount();
    assert_fsck_clean(&img);
}
