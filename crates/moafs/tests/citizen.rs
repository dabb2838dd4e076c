//! A good citizen of mount(8), umount(8), fsck and the page cache, through real FUSE mounts:
//! the mount reads as `fuse.moafs` of its image, `umount` returns only when the image is whole
//! and free, remounts change the VFS flags, a second mount shows the same file system,
//! buffered reads see what O_DIRECT wrote, and a listing ends while its entries are renamed.
//!
//! `mount`/`umount` of util-linux run the helpers in /sbin: `./run test` installs them
//! (`moafs install-helpers`) before the tests, and the tests check that they are this build's.

use nix::sys::signal::Signal;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

mod common;
use common::*;

/// A new image of `size` in a temporary directory, and a mount point path beside it.
fn fresh_image(size: &str) -> (TempDir, PathBuf, PathBuf) {
    let tmp = TempDir::new().unwrap();
    let img = tmp.path().join("img");
    mkfs(&img, size);
    let dir = tmp.path().join("mnt");
    (tmp, img, dir)
}

/// The helpers umount(8) and mount(8) run must be this build's binary.
fn require_helpers() {
    let bin = Path::new(BIN).canonicalize().unwrap();
    for name in [
        "mount.fuse.moafs",
        "umount.fuse.moafs",
        "mount.fuseblk.moafs",
        "umount.fuseblk.moafs",
    ] {
        let link = Path::new("/sbin").join(name);
        let target = fs::canonicalize(&link).unwrap_or_default();
        assert_eq!(
            target,
            bin,
            "{} must point at this build ({}): run `{} install-helpers`",
            link.display(),
            bin.display(),
            bin.display()
        );
    }
}

/// The mountinfo line of the newest mount on `dir`: (source, type, mount options).
fn mount_entry(dir: &Path) -> Option<(String, String, String)> {
    let dir = dir.canonicalize().ok()?;
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().rev().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let f: Vec<&str> = pre.split(' ').collect();
        if Path::new(f.get(4)?) != dir {
            return None;
        }
        let mut post = post.split(' ');
        let fstype = post.next()?.to_string();
        let source = post.next()?.to_string();
        Some((source, fstype, f.get(5)?.to_string()))
    })
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

fn content(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (j * 31 + i * 7 + j / 4096) as u8)
        .collect()
}

#[test]
fn mount_reads_as_moafs_of_its_image_with_its_vfs_options() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, dir) = fresh_image("32M");
    let abs = img.canonicalize().unwrap();
    // As root the image is mounted through a loop device over it, as `fuseblk.moafs` (which
    // the kernel sends sync to), as mount(8)'s `-o loop` would show it; the kernel detaches
    // the device at the unmount.
    let m = Mounted::new(&img, &dir, "noatime,nodiratime,noexec");
    let (source, fstype, opts) = mount_entry(&dir).expect("mounted");
    assert!(source.starts_with("/dev/loop"), "{source}");
    let backing = fs::read_to_string(format!(
        "/sys/block/{}/loop/backing_file",
        source.trim_start_matches("/dev/")
    ))
    .unwrap();
    assert_eq!(backing.trim_end(), p(&abs));
    assert_eq!(fstype, "fuseblk.moafs");
    for o in ["rw", "noatime", "nodiratime", "noexec", "nosuid", "nodev"] {
        assert!(opts.split(',').any(|x| x == o), "{o} not in {opts}");
    }
    m.unmount();
    let attached = run(Command::new("losetup").args(["-n", "-j", p(&abs)]));
    assert_eq!(
        text(&attached.stdout),
        "",
        "the loop device outlived the mount"
    );
    // fuseblk=off: the image itself is the source of a fuse.moafs mount, and findmnt (what
    // xfstests uses) finds it by the image
    let m = Mounted::new(&img, &dir, "fuseblk=off");
    let (source, fstype, _) = mount_entry(&dir).expect("mounted");
    assert_eq!(source, p(&abs));
    assert_eq!(fstype, "fuse.moafs");
    let out = run(Command::new("findmnt").args(["-n", "-o", "TARGET", "-S", p(&img)]));
    assert_eq!(text(&out.stdout).trim(), p(&dir.canonicalize().unwrap()));
    m.unmount();
    let m = Mounted::new(&img, &dir, "strictatime,dev,suid");
    let (_, _, opts) = mount_entry(&dir).unwrap();
    for o in ["nosuid", "nodev", "noatime", "relatime"] {
        assert!(!opts.split(',').any(|x| x == o), "{o} in {opts}");
    }
    m.unmount();
    assert_fsck_clean(&img);
}

/// `umount` (util-linux, through umount.fuse.moafs), `moafs umount` and `fusermount3 -u`
/// (where the kernel returns first and `fsck`/`mount` wait for the daemon), each followed at
/// once by `fsck -n`, a new mount, or a copy of the image: 100 of 100 must find the image
/// whole, free and holding the last file written.
#[test]
fn umount_then_at_once_fsck_mount_or_copy() {
    if !can_mount() {
        return;
    }
    require_helpers();
    let tmp = TempDir::new().unwrap();
    let img = tmp.path().join("img");
    let copy = tmp.path().join("copy");
    mkfs(&img, "64M");
    let dir = tmp.path().join("mnt");
    for i in 0..100 {
        let m = Mounted::new(&img, &dir, "");
        // enough dirty data that the daemon's last commit takes a moment
        let data = content(i, (1 + i % 4) << 20);
        fs::write(dir.join(format!("f{}", i % 5)), &data).unwrap();
        let how: &[&str] = match i % 3 {
            0 => &["umount"],
            1 => &[BIN, "umount"],
            _ => &["fusermount3", "-u"],
        };
        m.unmount_with(how);
        let check = match i % 3 {
            0 => "fsck",
            1 => "mount",
            _ => "copy",
        };
        match (check, how[0]) {
            // a copy is only promised by the commands that wait for the daemon
            ("copy", "fusermount3") | ("fsck", _) => {
                let (code, out) = fsck(&img);
                assert_eq!(code, 0, "try {i}: fsck -n right after {how:?}: {out}");
            }
            ("copy", _) => {
                fs::copy(&img, &copy).unwrap();
                let (code, out) = fsck(&copy);
                assert_eq!(
                    code, 0,
                    "try {i}: fsck -n of a copy made after {how:?}: {out}"
                );
            }
            _ => {
                let m = Mounted::new(&img, &dir, "");
                let back = fs::read(dir.join(format!("f{}", i % 5))).unwrap();
                assert!(
                    back == data,
                    "try {i}: contents differ after {how:?} and mount"
                );
                m.unmount();
            }
        }
    }
    assert_fsck_clean(&img);
}

#[test]
fn remount_read_only_refuses_writes_then_read_write_again() {
    if !can_mount() {
        return;
    }
    require_helpers();
    let (_tmp, img, dir) = fresh_image("32M");
    let m = Mounted::new(&img, &dir, "");
    let data = content(1, 300_000);
    fs::write(dir.join("a"), &data).unwrap();
    run(Command::new("mount").args(["-o", "remount,ro", p(&dir)]));
    let (_, _, opts) = mount_entry(&dir).unwrap();
    assert!(opts.starts_with("ro,"), "{opts}");
    let err = fs::write(dir.join("b"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = fs::OpenOptions::new()
        .append(true)
        .open(dir.join("a"))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert_eq!(fs::read(dir.join("a")).unwrap(), data);
    // An engine option cannot change on a remount: refused, the mount stays as it was.
    let out = Command::new("mount")
        .args(["-o", "remount,journal=data", p(&dir)])
        .output()
        .unwrap();
    assert!(!out.status.success());
    run(Command::new("mount").args(["-o", "remount,rw,noatime", p(&dir)]));
    let (_, _, opts) = mount_entry(&dir).unwrap();
    assert!(
        opts.starts_with("rw,") && opts.contains("noatime"),
        "{opts}"
    );
    // remount kept the mount's other flags
    assert!(opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
    fs::write(dir.join("b"), b"x").unwrap();
    m.unmount_with(&["umount"]);
    assert_fsck_clean(&img);
    let m = Mounted::new(&img, &dir, "");
    assert_eq!(fs::read(dir.join("a")).unwrap(), data);
    assert_eq!(fs::read(dir.join("b")).unwrap(), b"x");
    m.unmount();
    // Mounted read-only from the start, the mount can be made read-write: the loop device
    // an image file is mounted through is writable (the kernel refuses remount,rw of a file
    // system on a read-only block device with EACCES; xfstests generic/417).
    let m = Mounted::new(&img, &dir, "ro");
    // a second mount read-write beside it is refused, as for a block device (its writes
    // would all be EROFS); read-only it is a second view
    let dir2 = dir.with_file_name("second");
    fs::create_dir(&dir2).unwrap();
    let out = moafs(&["mount", "-o", "rw", p(&img), p(&dir2)]);
    assert!(!out.status.success() && !is_mounted(&dir2));
    assert!(
        text(&out.stderr).contains("mounted read-only"),
        "{}",
        text(&out.stderr)
    );
    let out = moafs(&["mount", p(&img), p(&dir2)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let second = Mounted::adopt(&dir2, 0);
    assert!(mount_entry(&dir2).unwrap().2.starts_with("ro,"));
    assert_eq!(fs::read(dir2.join("a")).unwrap(), data);
    second.unmount();
    run(Command::new("mount").args(["-o", "remount,rw", p(&dir)]));
    let (_, _, opts) = mount_entry(&dir).unwrap();
    assert!(opts.starts_with("rw,"), "{opts}");
    // and its engine writes (before, EROFS while the mount table said rw)
    fs::write(dir.join("c"), b"written after remount,rw").unwrap();
    m.unmount();
    assert_fsck_clean(&img);
    // A remount,rw without the helper (mount -i: the daemon is not told) is followed by the
    // daemon within its next tick.
    let m = Mounted::new(&img, &dir, "ro");
    run(Command::new("mount").args(["-i", "-o", "remount,rw", p(&dir)]));
    let start = std::time::Instant::now();
    while let Err(e) = fs::write(dir.join("d"), b"d") {
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        assert!(start.elapsed() < Duration::from_secs(10), "still EROFS");
        std::thread::sleep(Duration::from_millis(100));
    }
    m.unmount();
    assert_fsck_clean(&img);
    let m = Mounted::new(&img, &dir, "");
    assert_eq!(
        fs::read(dir.join("c")).unwrap(),
        b"written after remount,rw"
    );
    assert_eq!(fs::read(dir.join("d")).unwrap(), b"d");
    m.unmount();
}

/// After a crash, a read-only mount shows what the journal holds and writes nothing; `mount
/// -o remount,rw` then writes the replay home and takes writes. With norecovery the remount
/// is refused, saying why, and the mount stays read-only.
#[test]
fn a_read_only_mount_after_a_crash_becomes_read_write() {
    if !can_mount() {
        return;
    }
    require_helpers();
    let (_tmp, img, dir) = fresh_image("32M");
    let m = Mounted::new(&img, &dir, "");
    let data = content(2, 200_000);
    {
        let mut f = fs::File::create(dir.join("fsynced")).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    kill(m.pid, Signal::SIGKILL).unwrap();
    assert!(wait_gone(m.pid, Duration::from_secs(20)), "daemon alive");
    drop(m); // detaches the dead mount
    let image_before = fs::read(&img).unwrap();
    let m = Mounted::new(&img, &dir, "ro,norecovery");
    let out = Command::new("mount")
        .args(["-o", "remount,rw", p(&dir)])
        .output()
        .unwrap();
    assert!(!out.status.success(), "remount,rw of a norecovery mount");
    assert!(
        text(&out.stderr).contains("norecovery"),
        "{}",
        text(&out.stderr)
    );
    assert!(mount_entry(&dir).unwrap().2.starts_with("ro,"));
    m.unmount();
    let m = Mounted::new(&img, &dir, "ro");
    assert_eq!(fs::read(dir.join("fsynced")).unwrap(), data);
    assert!(
        fs::read(&img).unwrap() == image_before,
        "a read-only mount wrote"
    );
    run(Command::new("mount").args(["-o", "remount,rw", p(&dir)]));
    // before any write of its own: the remount itself wrote the replay home
    assert!(
        fs::read(&img).unwrap() != image_before,
        "the replay went home"
    );
    fs::write(dir.join("new"), b"after the remount").unwrap();
    m.unmount();
    assert_fsck_clean(&img);
    let m = Mounted::new(&img, &dir, "");
    assert_eq!(fs::read(dir.join("fsynced")).unwrap(), data);
    assert_eq!(fs::read(dir.join("new")).unwrap(), b"after the remount");
    m.unmount();
}

/// A second mount of a mounted image shows the same file system (as a second mount of a block
/// device does); the daemon stays until the last mount goes; fsck refuses meanwhile.
#[test]
fn second_mount_shows_the_same_file_system() {
    if !can_mount() {
        return;
    }
    require_helpers();
    let tmp = TempDir::new().unwrap();
    let img = tmp.path().join("img");
    mkfs(&img, "32M");
    let (d1, d2) = (tmp.path().join("m1"), tmp.path().join("m2"));
    let m = Mounted::new(&img, &d1, "");
    // a shared first mount: the second must not join its peer group (a new mount of a
    // device does not; xfstests generic/409, 411)
    run(Command::new("mount").args(["--make-shared", p(&d1)]));
    fs::create_dir(&d2).unwrap();
    run(Command::new("mount").args(["-t", "fuse.moafs", p(&img), p(&d2)]));
    let second = Mounted::adopt(&d2, 0);
    assert_eq!(
        mount_entry(&d2).map(|e| (e.0, e.1)),
        mount_entry(&d1).map(|e| (e.0, e.1))
    );
    let peer_group = |d: &Path| -> Option<String> {
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = info
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some(p(d)))?
            .to_string();
        line.split(' ')
            .find(|w| w.starts_with("shared:"))
            .map(str::to_string)
    };
    assert!(peer_group(&d1).is_some(), "the first mount is not shared");
    assert_ne!(
        peer_group(&d2),
        peer_group(&d1),
        "the second mount joined the first's peers"
    );
    fs::write(d1.join("f"), b"one").unwrap();
    assert_eq!(fs::read(d2.join("f")).unwrap(), b"one");
    fs::rename(d2.join("f"), d2.join("g")).unwrap();
    assert!(d1.join("g").exists() && !d1.join("f").exists());
    let (code, out) = fsck(&img);
    assert_eq!(code, 8, "{out}");
    assert!(out.contains("is mounted on"), "{out}");
    second.unmount_with(&["umount"]);
    // the first mount still serves
    assert_eq!(fs::read(d1.join("g")).unwrap(), b"one");
    m.unmount_with(&["umount"]);
    assert_fsck_clean(&img);
}

/// generic/451's race: buffered readers keep filling the page cache while asynchronous
/// O_DIRECT writes (libaio, through fio) replace the file; after each write a buffered read
/// must return the new bytes, not a page cached during the write.
#[test]
fn buffered_reads_after_async_direct_writes_see_new_bytes() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, dir) = fresh_image("32M");
    let m = Mounted::new(&img, &dir, "");
    const SIZE: usize = 655_360;
    let file = dir.join("dio");
    fs::write(&file, vec![0u8; SIZE]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, file) = (stop.clone(), file.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = fs::read(&file);
                }
            })
        })
        .collect();
    let mut stale = Vec::new();
    for i in 0..40u8 {
        let pattern = 0x10 + i;
        run(Command::new("fio").args([
            "--name=dio",
            &format!("--filename={}", p(&file)),
            "--rw=write",
            &format!("--bs={SIZE}"),
            &format!("--size={SIZE}"),
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=1",
            &format!("--buffer_pattern=0x{pattern:02x}"),
            "--output=/dev/null",
        ]));
        let back = fs::read(&file).unwrap();
        if back.iter().any(|&b| b != pattern) {
            stale.push(i);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        stale.is_empty(),
        "buffered reads returned stale bytes after writes {stale:?}"
    );
    m.unmount();
    assert_fsck_clean(&img);
}

/// generic/736: a listing of a directory whose entries are renamed (within it) as they are
/// read ends, and every name that is not renamed appears exactly once.
#[test]
fn listing_ends_while_its_entries_are_renamed() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, dir) = fresh_image("64M");
    let m = Mounted::new(&img, &dir, "");
    let d = dir.join("spool");
    fs::create_dir(&d).unwrap();
    const N: usize = 3000;
    for i in 0..N {
        fs::File::create(d.join(format!("f{i}"))).unwrap();
    }
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut listed = 0;
    for e in fs::read_dir(&d).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        listed += 1;
        assert!(listed <= 2 * N, "the listing does not end");
        *seen.entry(name.clone()).or_default() += 1;
        let i: usize = name[1..].split('_').next().unwrap().parse().unwrap();
        if i.is_multiple_of(2) {
            fs::rename(d.join(&name), d.join(format!("r{i}_{listed}"))).unwrap();
        }
    }
    for i in (1..N).step_by(2) {
        assert_eq!(seen.get(&format!("f{i}")), Some(&1), "f{i}");
    }
    assert!(listed <= N, "{listed} entries listed for {N} files");
    let names: Vec<PathBuf> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(names.len(), N);
    m.unmount();
    assert_fsck_clean(&img);
}

/// A file handle of `path` (name_to_handle_at(2)): the kernel's opaque bytes.
fn handle_of(path: &Path) -> Vec<u8> {
    let c = std::ffi::CString::new(p(path)).unwrap();
    // struct file_handle { u32 handle_bytes; i32 handle_type; u8 f_handle[]; }: 8 + 128 bytes,
    // u32-aligned.
    let mut buf = vec![0u32; (8 + 128) / 4];
    buf[0] = 128;
    let mut mount_id = 0;
    // SAFETY: `buf` is a writable, u32-aligned buffer of 136 bytes whose first field says
    // 128 bytes follow the 8-byte header, as name_to_handle_at(2) requires; `c` is a
    // NUL-terminated path and `mount_id` a valid int to write to.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    let len = 8 + buf[0] as usize;
    buf.iter().flat_map(|w| w.to_ne_bytes()).take(len).collect()
}

/// open_by_handle_at(2) through the mount at `mnt`, then reads the whole file.
fn read_by_handle(mnt: &Path, handle: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    let dir = fs::File::open(mnt)?;
    let mut buf = vec![0u32; handle.len().div_ceil(4)];
    for (i, b) in handle.iter().enumerate() {
        let w = &mut buf[i / 4];
        let mut bytes = w.to_ne_bytes();
        bytes[i % 4] = *b;
        *w = u32::from_ne_bytes(bytes);
    }
    // SAFETY: `buf` holds a file handle as name_to_handle_at(2) wrote it (header + bytes),
    // u32-aligned; the kernel only reads it. `dir` is an open descriptor of the mount.
    let fd = unsafe {
        libc::open_by_handle_at(dir.as_raw_fd(), buf.as_mut_ptr().cast(), libc::O_RDONLY)
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open_by_handle_at and is owned by nobody else.
    let mut f = unsafe { fs::File::from_raw_fd(fd) };
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

/// Forget every cached dentry and inode, so a handle must be resolved by the daemon.
fn drop_dentries() {
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
}

/// Handles (open_by_handle_at) find files the kernel no longer caches, across a remount and
/// after links come and go; a handle of a file whose last link is gone is stale.
#[test]
fn file_handles_across_remount_and_links() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, dir) = fresh_image("32M");
    let m = Mounted::new(&img, &dir, "");
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("d/kept"), b"kept").unwrap();
    fs::write(dir.join("linked"), b"linked").unwrap();
    fs::write(dir.join("gone"), b"gone").unwrap();
    let (kept, linked, gone) = (
        handle_of(&dir.join("d/kept")),
        handle_of(&dir.join("linked")),
        handle_of(&dir.join("gone")),
    );
    drop_dentries();
    assert_eq!(read_by_handle(&dir, &kept).unwrap(), b"kept");
    // a second name, then the first goes: the inode lives on
    fs::hard_link(dir.join("linked"), dir.join("d/other")).unwrap();
    fs::remove_file(dir.join("linked")).unwrap();
    fs::remove_file(dir.join("gone")).unwrap();
    drop_dentries();
    assert_eq!(read_by_handle(&dir, &linked).unwrap(), b"linked");
    let err = read_by_handle(&dir, &gone).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ESTALE), "{err}");
    m.unmount();
    let m = Mounted::new(&img, &dir, "");
    assert_eq!(read_by_handle(&dir, &kept).unwrap(), b"kept");
    assert_eq!(read_by_handle(&dir, &linked).unwrap(), b"linked");
    let err = read_by_handle(&dir, &gone).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ESTALE), "{err}");
    // the inode number comes back for a new file: the old handle stays stale (generation)
    for i in 0..4 {
        fs::write(dir.join(format!("new{i}")), b"new").unwrap();
    }
    drop_dentries();
    let err = read_by_handle(&dir, &gone).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ESTALE), "{err}");
    m.unmount();
    assert_fsck_clean(&img);
}

/// Runs `cmd args` as the unprivileged user nobody (65534:65534, no supplementary groups).
fn as_nobody(cmd: &str, args: &[&str]) {
    use std::os::unix::process::CommandExt;
    run(Command::new(cmd).args(args).uid(65534).gid(65534));
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).unwrap().mode() & 0o7777
}

/// Set-user-ID and set-group-ID as the kernel's own file systems keep them: an unprivileged
/// write, direct write, truncate, fallocate or hole punch drops both (set-group-ID of a file
/// that is not group-executable because nobody is not in its group), and `stat` sees it at
/// once; root's fallocate keeps them; an unprivileged chmod cannot set set-group-ID for a
/// group it is not in; a set-group-ID directory passes its group on, and the bit to new
/// directories.
#[test]
fn set_id_bits_cleared_and_inherited() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !can_mount() {
        return;
    }
    let (tmp, img, dir) = fresh_image("32M");
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let m = Mounted::new(&img, &dir, "allow_other");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let f = dir.join("f");
    let fp = p(&f);
    fs::write(&f, vec![7u8; 196_608]).unwrap();
    let of = format!("of={fp}");
    let dd = [
        "if=/dev/zero",
        &of,
        "bs=4096",
        "count=1",
        "conv=notrunc",
        "status=none",
    ];
    let ops: [(&str, Vec<&str>); 5] = [
        ("fallocate", vec!["-o", "65536", "-l", "65536", fp]),
        ("fallocate", vec!["-p", "-o", "65536", "-l", "65536", fp]),
        ("truncate", vec!["-s", "100000", fp]),
        ("dd", [&dd[..], &["oflag=direct"]].concat()),
        ("dd", dd.to_vec()),
    ];
    for (cmd, args) in &ops {
        fs::set_permissions(&f, fs::Permissions::from_mode(0o6666)).unwrap();
        assert_eq!(mode_of(&f), 0o6666);
        as_nobody(cmd, args);
        assert_eq!(mode_of(&f), 0o666, "{cmd} {args:?} by nobody");
    }
    // root (CAP_FSETID) keeps them
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6676)).unwrap();
    run(Command::new("fallocate").args(["-o", "0", "-l", "4096", fp]));
    assert_eq!(mode_of(&f), 0o6676);
    // chmod g+s by an owner outside the file's group: the bit is dropped
    let g = dir.join("g");
    fs::write(&g, b"g").unwrap();
    std::os::unix::fs::chown(&g, Some(65534), Some(0)).unwrap();
    as_nobody("chmod", &["2755", p(&g)]);
    assert_eq!(mode_of(&g), 0o755);
    std::os::unix::fs::chown(&g, Some(65534), Some(65534)).unwrap();
    as_nobody("chmod", &["2755", p(&g)]);
    assert_eq!(mode_of(&g), 0o2755);
    // inheritance from a set-group-ID directory
    let sd = dir.join("sgid");
    fs::create_dir(&sd).unwrap();
    std::os::unix::fs::chown(&sd, None, Some(4242)).unwrap();
    fs::set_permissions(&sd, fs::Permissions::from_mode(0o2777)).unwrap();
    fs::write(sd.join("file"), b"x").unwrap();
    fs::create_dir(sd.join("sub")).unwrap();
    as_nobody("mkdir", &[p(&sd.join("bynobody"))]);
    for (name, sgid) in [("file", false), ("sub", true), ("bynobody", true)] {
        let md = fs::metadata(sd.join(name)).unwrap();
        assert_eq!(md.gid(), 4242, "{name}");
        assert_eq!(md.mode() & 0o2000 != 0, sgid, "{name}");
    }
    m.unmount();
    assert_fsck_clean(&img);
}

fn getfacl(path: &Path) -> String {
    let out = run(Command::new("getfacl").args(["-c", "-n", "-E", p(path)]));
    text(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

/// POSIX ACLs: the kernel enforces them (a named user's entry opens a file its mode closes),
/// the mode follows the ACL and the ACL a chmod, an ACL that says no more than the mode is
/// not kept, and new files and directories inherit a directory's default ACL instead of the
/// umask — also after a remount.
#[test]
fn posix_acls_are_enforced_kept_in_step_and_inherited() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !can_mount() {
        return;
    }
    let (tmp, img, dir) = fresh_image("32M");
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let m = Mounted::new(&img, &dir, "allow_other");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let f = dir.join("secret");
    fs::write(&f, b"s").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    let nobody_reads = || {
        Command::new("cat")
            .arg(&f)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(!nobody_reads());
    run(Command::new("setfacl").args(["-m", "u:65534:r", p(&f)]));
    assert!(nobody_reads(), "the ACL entry is not enforced");
    assert_eq!(mode_of(&f), 0o640, "the mode's group bits show the mask");
    run(Command::new("chmod").args(["600", p(&f)]));
    assert_eq!(
        getfacl(&f),
        "user::rw-,user:65534:r--,group::---,mask::---,other::---"
    );
    assert!(!nobody_reads(), "chmod must narrow the ACL's mask");
    run(Command::new("setfacl").args(["-b", p(&f)]));
    assert_eq!(getfacl(&f), "user::rw-,group::---,other::---");
    assert!(xattr::get(&f, "system.posix_acl_access").unwrap().is_none());
    // inheritance
    let d = dir.join("shared");
    fs::create_dir(&d).unwrap();
    run(Command::new("setfacl").args(["-d", "-m", "u:65534:rx,g::rwx,o::-", p(&d)]));
    run(Command::new("sh").args([
        "-c",
        &format!("umask 077; touch {0}/file; mkdir {0}/sub", p(&d)),
    ]));
    assert_eq!(
        mode_of(&d.join("file")),
        0o660,
        "the default ACL, not the umask"
    );
    assert_eq!(mode_of(&d.join("sub")), 0o770);
    assert_eq!(
        getfacl(&d.join("file")),
        "user::rw-,user:65534:r-x,group::rwx,mask::rw-,other::---"
    );
    assert!(getfacl(&d.join("sub")).contains("default:user:65534:r-x"));
    // without a default ACL the umask applies as before
    run(Command::new("sh").args(["-c", &format!("umask 027; touch {}/plain", p(&dir))]));
    assert_eq!(mode_of(&dir.join("plain")), 0o640);
    m.unmount();
    let m = Mounted::new(&img, &dir, "allow_other");
    assert!(getfacl(&d.join("file")).contains("user:65534:r-x"));
    assert!(Command::new("cat")
        .arg(d.join("file"))
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap()
        .status
        .success());
    m.unmount();
    assert_fsck_clean(&img);
}

fn atime_ns(path: &Path) -> i128 {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).unwrap();
    i128::from(m.atime()) * 1_000_000_000 + i128::from(m.atime_nsec())
}

/// Reads and listings that reach the daemon update access times as the mount's flags say:
/// `relatime` once after a change, `strictatime` every time, `noatime` never, `nodiratime`
/// not for directories; a remount changes the policy. (Reads the kernel serves from its page
/// cache never reach a FUSE daemon; pages are dropped here so that each read does.)
#[test]
fn access_times_follow_the_mount_flags() {
    if !can_mount() {
        return;
    }
    let (_tmp, img, dir) = fresh_image("32M");
    let m = Mounted::new(&img, &dir, "relatime");
    let (f, d) = (dir.join("f"), dir.join("d"));
    fs::write(&f, b"data").unwrap();
    fs::create_dir(&d).unwrap();
    let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
    let read = || {
        fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
        fs::read(&f).unwrap();
        atime_ns(&f)
    };
    let list = || {
        fs::read_dir(&d).unwrap().count();
        atime_ns(&d)
    };
    pause();
    let a0 = atime_ns(&f);
    let a1 = read();
    assert!(a1 > a0, "relatime: the first read after a change updates");
    pause();
    assert_eq!(read(), a1, "relatime: a second read does not");
    let d0 = atime_ns(&d);
    pause();
    let d1 = list();
    assert!(d1 > d0, "relatime: the first listing updates the directory");
    // the daemon follows a remount within its next tick
    run(Command::new(BIN).args([
        "mount",
        "-o",
        "remount,strictatime,nodiratime",
        p(&img),
        p(&dir),
    ]));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    pause();
    let a2 = read();
    assert!(a2 > a1, "strictatime: every read updates");
    pause();
    assert!(read() > a2, "strictatime: every read updates");
    pause();
    assert_eq!(list(), d1, "nodiratime: listings leave the directory alone");
    run(Command::new(BIN).args(["mount", "-o", "remount,noatime", p(&img), p(&dir)]));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let a3 = atime_ns(&f);
    pause();
    assert_eq!(read(), a3, "noatime: reads leave it alone");
    m.unmount();
    assert_fsck_clean(&img);
}

/// `umount DIR &` then `mount IMAGE DIR` at once (xfstests generic/604): the mount waits for
/// the unmount in progress instead of failing; mounting where the image is mounted and stays
/// is refused.
#[test]
fn mount_right_after_a_background_umount() {
    if !can_mount() {
        return;
    }
    require_helpers();
    let (_tmp, img, dir) = fresh_image("64M");
    fs::create_dir(&dir).unwrap();
    for round in 0..5 {
        run(Command::new("mount").args(["-t", "fuse.moafs", p(&img), p(&dir)]));
        for i in 0..300 {
            fs::write(dir.join(format!("f{i}")), format!("{round} {i}")).unwrap();
        }
        let mut bg = Command::new("umount").arg(&dir).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
        let again = Command::new("mount")
            .args(["-t", "fuse.moafs", p(&img), p(&dir)])
            .output()
            .unwrap();
        assert!(bg.wait().unwrap().success(), "round {round}: umount failed");
        assert!(
            again.status.success(),
            "round {round}: {}",
            text(&again.stderr)
        );
        let m = Mounted::adopt(&dir, 0);
        assert_eq!(
            fs::read_to_string(dir.join("f299")).unwrap(),
            format!("{round} 299")
        );
        m.unmount_with(&["umount"]);
    }
    run(Command::new("mount").args(["-t", "fuse.moafs", p(&img), p(&dir)]));
    let m = Mounted::adopt(&dir, 0);
    let twice = Command::new("mount")
        .args(["-t", "fuse.moafs", p(&img), p(&dir)])
        .output()
        .unwrap();
    assert!(!twice.status.success());
    assert!(
        text(&twice.stderr).contains("already mounted"),
        "{}",
        text(&twice.stderr)
    );
    m.unmount_with(&["umount"]);
    assert_fsck_clean(&img);
}
