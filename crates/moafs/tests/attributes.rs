//! Inode attributes beyond stat(2)'s through the kernel: the birth time (statx, FUSE_STATX)
//! and chattr/lsattr (FS_IOC_GETFLAGS/SETFLAGS, xfs_io's FSGETXATTR/FSSETXATTR):
//! immutable and append-only files refuse what ext4 refuses, with `-o iflags` (OPEN is then
//! answered and checked) and on every later mount of the image; without it `chattr +i` is
//! refused rather than left unenforced. (Needs root and /dev/fuse.)

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

mod common;
use common::*;

fn chattr(args: &str, path: &Path) -> std::process::Output {
    Command::new("chattr")
        .args(args.split(' '))
        .arg(path)
        .output()
        .unwrap()
}

fn lsattr(path: &Path) -> String {
    let out = Command::new("lsattr").arg("-d").arg(path).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).split(' ').next().unwrap().to_string()
}

fn eperm<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    match r {
        Err(e)
            if e.kind() == ErrorKind::PermissionDenied && e.raw_os_error() == Some(libc::EPERM) => {
        }
        other => panic!("{what}: {other:?}, want EPERM"),
    }
}

#[test]
fn immutable_and_append_only_through_the_kernel() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, mnt) = fresh_image("64M");

    // without iflags: +i/+a refused (not enforceable), the other flags kept
    let m = Mounted::new(&img, &mnt, "");
    let f = mnt.join("f");
    fs::write(&f, b"fixed").unwrap();
    let out = chattr("+i", &f);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("Operation not supported"),
        "{}",
        text(&out.stderr)
    );
    assert!(chattr("+A +d", &f).status.success());
    assert_eq!(lsattr(&f), "------dA--------------");
    let sync = chattr("+S", &f); // not honoured: refused
    assert!(!sync.status.success());
    assert!(
        text(&sync.stderr).contains("Operation not supported"),
        "{}",
        text(&sync.stderr)
    );
    m.unmount();

    let m = Mounted::new(&img, &mnt, "iflags");
    let a = mnt.join("a");
    let d = mnt.join("d");
    fs::write(&a, b"log\n").unwrap();
    fs::create_dir(&d).unwrap();
    fs::write(d.join("in"), b"").unwrap();
    assert!(chattr("+i", &f).status.success(), "chattr +i with iflags");
    assert!(chattr("+a", &a).status.success());
    assert!(chattr("+i", &d).status.success());
    assert_eq!(lsattr(&f), "----i-dA--------------");
    // xfs_io sees the same flags through FSGETXATTR
    let x = Command::new("xfs_io")
        .args(["-r", "-c", "lsattr"])
        .arg(&a)
        .output()
        .unwrap();
    assert!(text(&x.stdout).starts_with("---a-"), "{}", text(&x.stdout));

    eperm(
        OpenOptions::new().write(true).open(&f),
        "open immutable for writing",
    );
    eperm(
        OpenOptions::new().append(true).open(&f),
        "append to immutable",
    );
    assert_eq!(fs::read(&f).unwrap(), b"fixed");
    eperm(fs::remove_file(&f), "unlink immutable");
    eperm(fs::rename(&f, mnt.join("g")), "rename immutable");
    eperm(fs::hard_link(&f, mnt.join("h")), "link immutable");
    eperm(
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)),
        "chmod immutable",
    );
    eperm(xattr::set(&f, "user.k", b"v"), "setxattr immutable");
    eperm(
        OpenOptions::new().write(true).open(&a),
        "open append-only without O_APPEND",
    );
    eperm(
        OpenOptions::new().write(true).truncate(true).open(&a),
        "truncate append-only",
    );
    let mut w = OpenOptions::new()
        .append(true)
        .open(&a)
        .expect("O_APPEND on append-only");
    w.write_all(b"more\n").unwrap();
    drop(w);
    eperm(fs::remove_file(&a), "unlink append-only");
    eperm(
        fs::write(d.join("new"), b""),
        "create in an immutable directory",
    );
    eperm(
        fs::remove_file(d.join("in")),
        "unlink in an immutable directory",
    );
    m.unmount();
    assert_fsck_clean(&img);

    // the image remembers: a mount without the option still checks opens
    let m = Mounted::new(&img, &mnt, "");
    assert_eq!(fs::read(&a).unwrap(), b"log\nmore\n");
    assert_eq!(lsattr(&a), "-----a----------------");
    eperm(
        OpenOptions::new().write(true).open(&f),
        "immutable after remount",
    );
    assert!(chattr("-i", &f).status.success());
    assert!(chattr("-i", &d).status.success());
    fs::write(&f, b"free").unwrap();
    fs::remove_file(&f).unwrap();
    fs::remove_file(d.join("in")).unwrap();
    // a non-owner may not set flags (the kernel's check)
    let st = as_nobody(&["chattr".as_ref(), "-a".as_ref(), a.as_os_str()]);
    assert!(!st.success());
    assert_eq!(lsattr(&a), "-----a----------------");
    m.unmount();
    assert_fsck_clean(&img);
}

/// statx(2)'s birth time (`stat -c %W`, FUSE_STATX): set at creation, kept by later writes
/// and renames, and across a remount.
#[test]
fn birth_time_through_statx() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, mnt) = fresh_image("64M");
    let birth = |path: &Path| {
        let out = Command::new("stat")
            .args(["-c", "%.9W"])
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    let m = Mounted::new(&img, &mnt, "");
    let f = mnt.join("f");
    let before = std::time::SystemTime::now();
    fs::write(&f, b"one").unwrap();
    let b = birth(&f);
    let secs: u64 = b
        .split('.')
        .next()
        .unwrap()
        .parse()
        .expect("a birth time, not '-'");
    let now = before
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs + 1 >= now && secs <= now + 1, "birth {b}, now {now}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    fs::write(&f, b"two").unwrap();
    fs::rename(&f, mnt.join("g")).unwrap();
    assert_eq!(
        birth(&mnt.join("g")),
        b,
        "writes and renames keep the birth time"
    );
    m.unmount();
    let m = Mounted::new(&img, &mnt, "");
    assert_eq!(birth(&mnt.join("g")), b);
    m.unmount();
}
