//! `moafs memfs` (the FUSE ceiling target): a real FUSE mount of the in-memory file system
//! behaves as a file system (data, names, links, errors, capacity), its contents go at
//! unmount, and `moafs bench --target memfs` runs a workload to the end with nothing left.
mod common;

use common::*;
use moafs_bench::managed::leftovers;
use nix::fcntl::{renameat2, RenameFlags};
use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// Mounts a memfs on MNT; the guard unmounts and waits for the daemon.
fn memfs(mnt: &Path, opts: &str) -> Mounted {
    fs::create_dir_all(mnt).unwrap();
    let pidfile = mnt.with_extension("pid");
    let o = format!("pidfile={},{opts}", p(&pidfile));
    let out = moafs(&["memfs", "-o", &o, p(mnt)]);
    match Mounted::after_mount(out, mnt, &pidfile) {
        Ok(m) => m,
        Err(out) => panic!("memfs failed ({:?}): {}", out.status, text(&out.stderr)),
    }
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[test]
fn memfs_behaves_as_a_file_system_and_forgets_at_unmount() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let m = memfs(&mnt, "size=16M,allow_other");
    let d = &m.dir;
    assert!(fs::read_dir(d).unwrap().next().is_none(), "starts empty");

    // data: a large write read back in full and at an offset, a sparse file
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut f = fs::File::create(d.join("a")).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(fs::read(d.join("a")).unwrap(), data);
    let mut f = fs::File::open(d.join("a")).unwrap();
    let mut buf = vec![0u8; 10_000];
    f.seek(SeekFrom::Start(1_234_567)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, data[1_234_567..1_244_567]);
    drop(f);
    let sparse = fs::File::create(d.join("sparse")).unwrap();
    sparse.set_len(1 << 40).unwrap();
    let md = fs::metadata(d.join("sparse")).unwrap();
    assert_eq!(
        (md.len(), md.blocks()),
        (1 << 40, 0),
        "a hole holds no pages"
    );
    drop(sparse);

    // truncation zeroes what a later extension shows
    let f = fs::OpenOptions::new()
        .write(true)
        .open(d.join("a"))
        .unwrap();
    f.set_len(5).unwrap();
    f.set_len(9000).unwrap();
    drop(f);
    let back = fs::read(d.join("a")).unwrap();
    assert_eq!(&back[..5], &data[..5]);
    assert!(back[5..].iter().all(|&b| b == 0));

    // names: mkdir, rename over a file, exchange, hard and symbolic links, a second process
    fs::create_dir(d.join("dir")).unwrap();
    fs::write(d.join("dir/old"), b"old").unwrap();
    fs::write(d.join("new"), b"new").unwrap();
    fs::rename(d.join("new"), d.join("dir/old")).unwrap();
    assert_eq!(fs::read(d.join("dir/old")).unwrap(), b"new");
    fs::write(d.join("x"), b"x").unwrap();
    renameat2(
        None,
        &d.join("x"),
        None,
        &d.join("dir/old"),
        RenameFlags::RENAME_EXCHANGE,
    )
    .unwrap();
    assert_eq!(fs::read(d.join("x")).unwrap(), b"new");
    assert_eq!(fs::read(d.join("dir/old")).unwrap(), b"x");
    let e = renameat2(
        None,
        &d.join("x"),
        None,
        &d.join("a"),
        RenameFlags::RENAME_NOREPLACE,
    );
    assert_eq!(e, Err(nix::errno::Errno::EEXIST));
    fs::hard_link(d.join("x"), d.join("dir/h")).unwrap();
    std::os::unix::fs::symlink("h", d.join("dir/s")).unwrap();
    assert_eq!(fs::read(d.join("dir/s")).unwrap(), b"new");
    let out = Command::new("stat")
        .args(["-c", "%h %s"])
        .arg(d.join("dir/h"))
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim(),
        "2 3",
        "another process sees the link count"
    );
    assert_eq!(fs::metadata(d.join("dir")).unwrap().nlink(), 2);
    fs::create_dir(d.join("dir/sub")).unwrap();
    assert_eq!(fs::metadata(d.join("dir")).unwrap().nlink(), 3);
    assert_eq!(
        names(&d.join("dir")),
        ["h", "old", "s", "sub"].map(String::from).into()
    );

    // an unlinked file stays readable while it is open
    let mut open = fs::File::open(d.join("dir/old")).unwrap();
    fs::remove_file(d.join("dir/old")).unwrap();
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "x");
    drop(open);

    // errors
    let e = fs::remove_dir(d.join("dir")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    let e = fs::write(d.join("n".repeat(256)), b"").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let e = fs::create_dir(d.join("dir")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    // the capacity: 16 MiB hold no 20 MiB file (under the writeback cache the error may
    // come only from fsync), and the space returns when it is deleted
    let e = fs::File::create(d.join("big"))
        .and_then(|mut f| {
            f.write_all(&vec![1u8; 20 << 20])?;
            f.sync_all()
        })
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    fs::remove_file(d.join("big")).unwrap();
    fs::write(d.join("big"), vec![1u8; 8 << 20]).unwrap();
    fs::remove_file(d.join("big")).unwrap();

    // attributes and owners: chmod, times, xattrs, a file made by another user
    fs::set_permissions(d.join("x"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(d.join("x")).unwrap().mode() & 0o7777, 0o600);
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    fs::File::open(d.join("x"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    assert_eq!(fs::metadata(d.join("x")).unwrap().mtime(), 1_000_000_000);
    xattr::set(d.join("x"), "user.k", b"v").unwrap();
    assert_eq!(
        xattr::get(d.join("x"), "user.k").unwrap(),
        Some(b"v".to_vec())
    );
    fs::set_permissions(d.join("dir"), fs::Permissions::from_mode(0o777)).unwrap();
    let st = as_nobody(&["touch".as_ref(), d.join("dir/theirs").as_os_str()]);
    assert!(st.success(), "touch as nobody");
    let md = fs::metadata(d.join("dir/theirs")).unwrap();
    assert_eq!((md.uid(), md.gid()), (65534, 65534));
    // the kernel checks permissions (default_permissions): nobody cannot write x (0600)
    let echo = format!("echo > {}", d.join("x").display());
    let st = as_nobody(&["sh".as_ref(), "-c".as_ref(), echo.as_ref()]);
    assert!(!st.success(), "nobody wrote a 0600 file of root's");

    // many names, listed whole
    fs::create_dir(d.join("many")).unwrap();
    for i in 0..1500 {
        fs::write(d.join(format!("many/{i}")), b"").unwrap();
    }
    assert_eq!(names(&d.join("many")).len(), 1500);

    let pid = m.pid;
    m.unmount();
    assert!(process_gone(pid), "daemon still running after unmount");
    // a new mount starts empty
    let m = memfs(&mnt, "");
    assert!(fs::read_dir(&m.dir).unwrap().next().is_none());
    m.unmount();
}

#[test]
fn bench_runs_postmark_on_the_ceiling_target_and_leaves_nothing() {
    if !can_mount() {
        return;
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let json = backing.path().join("report.json");
    let out = Command::new(BIN)
        .args([
            "bench",
            "--target",
            "memfs",
            "--reps",
            "1",
            "--watch-ms",
            "0",
        ])
        .args([
            "--workload",
            "postmark-quick",
            "--scale",
            "0.05",
            "--size",
            "128M",
        ])
        .arg("--fuse-requests")
        .arg("--json")
        .arg(&json)
        .arg("--backing")
        .arg(backing.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let r = &v["results"][0]["reports"][0];
    assert_eq!(r["target"], "memfs");
    let run = &r["runs"][0];
    assert!(
        run["device"].is_null(),
        "memfs has no device: {}",
        run["device"]
    );
    assert!(run["cost"]["daemon"].is_object(), "{}", run["cost"]);
    assert!(r["rate"]["mean"].as_f64().unwrap() > 0.0);
    // the kernel's FUSE requests, counted at its tracepoint: one MKNOD per file PostMark
    // created (OPEN and CREATE are declined once, then never sent again)
    let ops = run["outcome"]["counts"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.as_str() != "skipped")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum::<u64>() as f64;
    let created = run["outcome"]["counts"]["creates"].as_u64().unwrap() as f64;
    let per_op = &r["fuse_requests_per_op"];
    let mknod = per_op["MKNOD"].as_f64().unwrap();
    assert!(
        (mknod * ops - created).abs() <= 1.0,
        "MKNOD {mknod} per op × {ops} ops vs {created} files created: {per_op}"
    );
    assert!(
        per_op["OPEN"].as_f64().unwrap_or(0.0) * ops <= 1.0,
        "{per_op}"
    );
    let total = per_op["TOTAL"].as_f64().unwrap();
    assert!(
        total > mknod + per_op["UNLINK"].as_f64().unwrap(),
        "{per_op}"
    );
    fs::remove_file(&json).unwrap();
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}
