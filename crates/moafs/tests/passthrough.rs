//! `moafs passthrough` (the FUSE floor target): file operations through the mount reach the
//! backing directory, the transport is moafs's, the daemon ends on unmount and on SIGTERM,
//! and `moafs bench --target passthrough` runs a workload to the end.
mod common;

use common::*;
use moafs_bench::managed::leftovers;
use nix::sys::signal::Signal;
use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Mounts SRC on MNT with `moafs passthrough`; the guard unmounts and waits for the daemon.
fn passthrough(src: &Path, mnt: &Path, opts: &str) -> Mounted {
    fs::create_dir_all(mnt).unwrap();
    let pidfile = mnt.with_extension("pid");
    let mut o = format!("pidfile={}", p(&pidfile));
    if !opts.is_empty() {
        o = format!("{o},{opts}");
    }
    let out = moafs(&["passthrough", "-o", &o, p(src), p(mnt)]);
    match Mounted::after_mount(out, mnt, &pidfile) {
        Ok(m) => m,
        Err(out) => panic!(
            "passthrough failed ({:?}): {}",
            out.status,
            text(&out.stderr)
        ),
    }
}

#[test]
fn file_operations_reach_the_backing_directory() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    fs::create_dir(&src).unwrap();
    fs::write(src.join("before"), b"made before the mount").unwrap();
    let m = passthrough(&src, &mnt, "allow_other");
    let d = &m.dir;

    // what was there is visible, with the backing inode numbers
    assert_eq!(
        fs::read(d.join("before")).unwrap(),
        b"made before the mount"
    );
    assert_eq!(
        fs::metadata(d.join("before")).unwrap().ino(),
        fs::metadata(src.join("before")).unwrap().ino()
    );

    // create, write, fsync, read back (through the mount and in the backing directory)
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut f = fs::File::create(d.join("a")).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(
        fs::read(src.join("a")).unwrap(),
        data,
        "fsync reached the backing file"
    );
    let mut f = fs::File::open(d.join("a")).unwrap();
    let mut buf = vec![0u8; 4096];
    f.seek(SeekFrom::Start(1_000_000)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, data[1_000_000..1_004_096]);
    drop(f);

    // mkdir, rename into it, readdir
    fs::create_dir(d.join("dir")).unwrap();
    fs::rename(d.join("a"), d.join("dir/b")).unwrap();
    assert!(!src.join("a").exists());
    assert_eq!(fs::read(src.join("dir/b")).unwrap().len(), data.len());
    let names: BTreeSet<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["before", "dir"].map(String::from).into());

    // symlink and hard link
    std::os::unix::fs::symlink("b", d.join("dir/s")).unwrap();
    assert_eq!(fs::read_link(src.join("dir/s")).unwrap(), Path::new("b"));
    assert_eq!(fs::read_link(d.join("dir/s")).unwrap(), Path::new("b"));
    fs::hard_link(d.join("dir/b"), d.join("dir/h")).unwrap();
    assert_eq!(fs::metadata(src.join("dir/b")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(d.join("dir/h")).unwrap().ino(),
        fs::metadata(d.join("dir/b")).unwrap().ino()
    );

    // truncate, chmod, times
    fs::OpenOptions::new()
        .write(true)
        .open(d.join("dir/b"))
        .unwrap()
        .set_len(10)
        .unwrap();
    assert_eq!(fs::metadata(src.join("dir/h")).unwrap().len(), 10);
    assert_eq!(fs::read(d.join("dir/h")).unwrap(), &data[..10]);
    fs::set_permissions(d.join("dir/b"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        fs::metadata(src.join("dir/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o600
    );
    let t = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::open(d.join("dir/b"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    assert_eq!(
        fs::metadata(src.join("dir/b")).unwrap().mtime(),
        1_000_000_000
    );

    // extended attributes
    xattr::set(d.join("dir/b"), "user.k", b"v").unwrap();
    assert_eq!(
        xattr::get(src.join("dir/b"), "user.k").unwrap(),
        Some(b"v".to_vec())
    );

    // a file made by another user belongs to that user in the backing directory
    fs::set_permissions(d.join("dir"), fs::Permissions::from_mode(0o777)).unwrap();
    let st = as_nobody(&["touch".as_ref(), d.join("dir/theirs").as_os_str()]);
    assert!(st.success(), "touch as nobody");
    let md = fs::metadata(src.join("dir/theirs")).unwrap();
    assert_eq!((md.uid(), md.gid()), (65534, 65534));

    // unlink, rmdir
    for f in ["b", "h", "s", "theirs"] {
        fs::remove_file(d.join("dir").join(f)).unwrap();
    }
    assert_eq!(fs::read_dir(src.join("dir")).unwrap().count(), 0);
    fs::remove_dir(d.join("dir")).unwrap();
    assert!(!src.join("dir").exists());
    // the mount point's ".." does not lead out of the source
    assert!(fs::metadata(d.join("..")).is_ok());

    m.unmount();
    assert!(!is_mounted(&mnt));
    assert_eq!(
        fs::read(src.join("before")).unwrap(),
        b"made before the mount"
    );
}

/// The threads of daemon `pid` by name, numbers dropped (`moafs-uring-0` -> `moafs-uring-`).
fn thread_kinds(pid: i32) -> BTreeSet<String> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| {
            let comm = fs::read_to_string(t.unwrap().path().join("comm")).unwrap();
            comm.trim()
                .trim_end_matches(|c: char| c.is_ascii_digit())
                .to_string()
        })
        .collect()
}

/// The mount options of `dir` in /proc/self/mounts.
fn mount_options(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap();
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (Path::new(f[1]) == dir).then(|| format!("{} {}", f[2], f[3]))
        })
        .unwrap()
}

fn bdi(dir: &Path, file: &str) -> String {
    let dev = fs::metadata(dir).unwrap().dev();
    let (maj, min) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    fs::read_to_string(format!("/sys/class/bdi/{maj}:{min}/{file}"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn the_transport_is_moafss() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (src, img) = (tmp.path().join("src"), tmp.path().join("img"));
    fs::create_dir(&src).unwrap();
    mkfs(&img, "64M");
    // (a fuse mount of the image, as the passthrough's is, not root's default fuseblk one)
    let a = Mounted::new(&img, &tmp.path().join("moafs"), "fuseblk=off");
    let b = passthrough(&src, &tmp.path().join("pt"), "");
    // same mount flags and options (only the type differs)
    let (ma, mb) = (mount_options(&a.dir), mount_options(&b.dir));
    assert_eq!(
        ma.replace("fuse.moafs ", ""),
        mb.replace("fuse.moafs-passthrough ", "")
    );
    // same bdi tuning
    for f in ["read_ahead_kb", "max_ratio", "strict_limit"] {
        assert_eq!(bdi(&a.dir, f), bdi(&b.dir, f), "{f}");
    }
    // same serving threads (io_uring queues or /dev/fuse readers, poller, signals); moafs
    // has its engine's threads besides
    fs::write(a.dir.join("x"), b"x").unwrap();
    fs::write(b.dir.join("x"), b"x").unwrap();
    let mut ta = thread_kinds(a.pid);
    let tb = thread_kinds(b.pid);
    ta.remove("moafs-tick");
    ta.remove("moafs-behind");
    assert_eq!(ta, tb);
    a.unmount();
    b.unmount();
}

#[test]
fn sigterm_unmounts_and_engine_options_are_refused() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let out = moafs(&["passthrough", "-o", "cache_size=64M", p(&src), p(&mnt)]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not a transport option"),
        "{}",
        text(&out.stderr)
    );
    assert!(!is_mounted(&mnt));

    let m = passthrough(&src, &mnt, "uring=off,threads=1");
    fs::write(m.dir.join("f"), b"data").unwrap();
    let pid = m.pid;
    kill(pid, Signal::SIGTERM).unwrap();
    assert!(
        wait_gone(pid, Duration::from_secs(20)),
        "daemon still running"
    );
    assert!(!is_mounted(&mnt), "still mounted after SIGTERM");
    assert_eq!(fs::read(src.join("f")).unwrap(), b"data");
    assert!(!mnt.with_extension("pid").exists(), "pid file left behind");
    m.unmount();
}

fn bench(backing: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args([
            "bench",
            "--target",
            "passthrough",
            "--reps",
            "1",
            "--watch-ms",
            "0",
        ])
        .args(args)
        .arg("--backing")
        .arg(backing)
        .output()
        .unwrap()
}

#[test]
fn bench_runs_postmark_on_the_floor_target() {
    if !can_mount() {
        return;
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let json = backing.path().join("report.json");
    let out = bench(
        backing.path(),
        &[
            "--workload",
            "postmark-quick",
            "--scale",
            "0.05",
            "--size",
            "128M",
            "--json",
            p(&json),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let r = &v["results"][0]["reports"][0];
    assert_eq!(r["target"], "passthrough");
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    // the loop device under the passthrough saw the run; the daemon's CPU is counted
    assert!(
        runs[0]["device"]["write_bytes"].as_u64().unwrap() > 0,
        "{}",
        runs[0]
    );
    assert!(runs[0]["cost"]["daemon"].is_object(), "{}", runs[0]["cost"]);
    assert!(r["rate"]["mean"].as_f64().unwrap() > 0.0);
    // taken down: FUSE mount, ext4 mount, loop device, files — only the report is left
    fs::remove_file(&json).unwrap();
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());

    // a run that fails (ENOSPC on the small ext4 below) takes both mounts down too
    let out = bench(
        backing.path(),
        &[
            "--workload",
            "postmark-fsl",
            "--scale",
            "0.2",
            "--size",
            "16M",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("on passthrough"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}
