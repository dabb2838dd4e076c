//! open(O_TMPFILE) through the kernel (FUSE_TMPFILE): an unnamed file, named later by
//! `linkat`, or gone at its last close; one made with O_EXCL can never be named; one still
//! open when the daemon dies is an orphan the next mount frees. (Needs root and /dev/fuse.)

use nix::fcntl::AtFlags;
use nix::sys::signal::Signal;
use nix::sys::stat::{umask, Mode};
use nix::sys::statvfs::statvfs;
use nix::unistd::linkat;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

mod common;
use common::*;

fn tmpfile(dir: &Path, excl: bool) -> std::io::Result<File> {
    let mut flags = libc::O_TMPFILE;
    if excl {
        flags |= libc::O_EXCL;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .mode(0o640)
        .open(dir)
}

/// Names `file` as `path` (linkat with AT_EMPTY_PATH, which root may use).
fn name_it(file: &File, path: &Path) -> nix::Result<()> {
    linkat(
        Some(file.as_raw_fd()),
        Path::new(""),
        None,
        path,
        AtFlags::AT_EMPTY_PATH,
    )
}

fn used_inodes(dir: &Path) -> u64 {
    let s = statvfs(dir).unwrap();
    s.files() - s.files_free()
}

#[test]
fn tmpfiles_are_named_by_linkat_or_vanish() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, mnt) = fresh_image("64M");
    let m = Mounted::new(&img, &mnt, "");
    let dir = mnt.join("d");
    fs::create_dir(&dir).unwrap();
    let before = used_inodes(&mnt);

    // named: written, then linked, its bytes and mode under the name
    let data = b"unnamed until linked\n".repeat(1000);
    let mut f = tmpfile(&dir, false).expect("O_TMPFILE");
    f.write_all(&data).unwrap();
    let meta = f.metadata().unwrap();
    assert_eq!(meta.nlink(), 0, "an O_TMPFILE file has no name");
    let mask = umask(Mode::empty());
    umask(mask);
    assert_eq!(meta.mode() & 0o7777, 0o640 & !mask.bits());
    assert!(meta.is_file());
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        0,
        "listed before linkat"
    );
    name_it(&f, &dir.join("named")).expect("linkat of an O_TMPFILE file");
    assert_eq!(f.metadata().unwrap().nlink(), 1);
    // a second name is an ordinary link
    name_it(&f, &dir.join("again")).expect("second linkat");
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back, data);
    drop(f);
    assert_eq!(fs::read(dir.join("named")).unwrap(), data);

    // O_EXCL: never linkable (ENOENT, as the VFS answers for a file without a name)
    let f = tmpfile(&dir, true).expect("O_TMPFILE|O_EXCL");
    assert_eq!(
        name_it(&f, &dir.join("excl")),
        Err(nix::errno::Errno::ENOENT)
    );
    drop(f);

    // never named: gone with its last reference
    let mut f = tmpfile(&dir, false).unwrap();
    f.write_all(&vec![7u8; 4 << 20]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    m.unmount();
    assert_fsck_clean(&img);

    let m = Mounted::new(&img, &mnt, "");
    assert_eq!(fs::read(dir.join("named")).unwrap(), data);
    assert_eq!(fs::metadata(dir.join("again")).unwrap().nlink(), 2);
    let names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(
        used_inodes(&mnt),
        before + 1,
        "only the named tmpfile keeps an inode"
    );

    // open when the daemon dies: an orphan, freed by the next mount
    let used = used_inodes(&mnt);
    let mut f = tmpfile(&dir, false).unwrap();
    f.write_all(&vec![9u8; 1 << 20]).unwrap();
    f.sync_all().unwrap();
    kill(m.pid, Signal::SIGKILL).unwrap();
    drop(f);
    let m = m.remount_after_crash(&img);
    assert_eq!(used_inodes(&mnt), used, "the orphan was freed at mount");
    assert_eq!(fs::read(dir.join("named")).unwrap(), data);
    m.unmount();
    assert_fsck_clean(&img);
}
