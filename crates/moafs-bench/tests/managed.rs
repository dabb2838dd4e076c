//! Managed targets for real (root, loop devices, FUSE): every kind is counted at its loop
//! device, and nothing is left behind — also when the target is dropped without `finish` or
//! its FUSE daemon died. moafs itself (whose binary is the moafs crate's) is tested the same
//! way in crates/moafs/tests/bench.rs.
use moafs_bench::managed::{leftovers, Kind, Managed, ManagedOptions, LOOP_READAHEAD_SECTORS};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn can_run(kind: Kind) -> bool {
    let tool = match kind {
        Kind::Fuse2fs => "fuse2fs",
        Kind::Xfs => "mkfs.xfs",
        Kind::Btrfs => "mkfs.btrfs",
        _ => "mkfs.ext4",
    };
    let ok = is_root()
        && have("losetup")
        && have("blockdev")
        && have("mkfs.ext4")
        && have(tool)
        && (kind != Kind::Fuse2fs || have("fusermount3"));
    if !ok {
        eprintln!(
            "skipped {}: needs root, losetup, blockdev and {tool}",
            kind.name()
        );
    }
    ok
}

fn create(kind: Kind, backing: &Path) -> Managed {
    Managed::create(&ManagedOptions {
        kind,
        size: 512 << 20,
        backing: backing.to_path_buf(),
        moafs: PathBuf::new(),
        mount_options: String::new(),
    })
    .unwrap()
}

/// A small workload: files written and fsynced, one removed.
fn small_workload(dir: &Path) {
    for i in 0..20 {
        let mut f = std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
        f.write_all(&vec![i as u8; 10_000 + 1000 * i]).unwrap();
        f.sync_all().unwrap();
    }
    std::fs::remove_file(dir.join("f3")).unwrap();
}

#[test]
fn fuse2fs_and_kernel_targets_are_counted_at_their_loop_device() {
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    for kind in [Kind::Fuse2fs, Kind::Ext4] {
        if !can_run(kind) {
            continue;
        }
        let m = create(kind, backing.path());
        let dev = m
            .loop_device()
            .expect("every managed target is on a loop device")
            .to_string();
        let name = dev.rsplit('/').next().unwrap().to_string();
        // the loop device is over the image, with the readahead every target gets
        let backing_file =
            std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).unwrap();
        assert_eq!(Path::new(backing_file.trim()), m.image(), "{}", kind.name());
        let ra_kb: u32 = std::fs::read_to_string(format!("/sys/block/{name}/queue/read_ahead_kb"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(ra_kb, LOOP_READAHEAD_SECTORS / 2, "{}", kind.name());
        // mounted from the loop device (fuse2fs too)
        let source = moafs_bench::hygiene::mount_device(m.mount_point());
        assert_eq!(source.as_deref(), Some(name.as_str()), "{}", kind.name());
        small_workload(m.mount_point());
        let f = m.finish().unwrap();
        let d = f.device.expect("counted");
        assert_eq!(d.source, "loop");
        assert!(
            d.writes > 0 && d.write_bytes >= 200_000,
            "{}: {d:?}",
            kind.name()
        );
        assert!(f.engine.is_none() && f.engine_device.is_none());
        assert!(
            !Path::new(&format!("/sys/block/{name}/loop")).exists(),
            "{dev} detached"
        );
        assert_eq!(
            leftovers(backing.path()),
            Vec::<String>::new(),
            "{}",
            kind.name()
        );
    }
}

#[test]
fn a_dropped_target_or_one_whose_daemon_died_leaves_nothing_behind() {
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    for kind in [Kind::Fuse2fs, Kind::Ext4] {
        if !can_run(kind) {
            continue;
        }
        // dropped mid-run, without finish (a failed workload): files open in it
        let m = create(kind, backing.path());
        let f = std::fs::File::create(m.mount_point().join("open")).unwrap();
        drop(f);
        small_workload(m.mount_point());
        drop(m);
        assert_eq!(
            leftovers(backing.path()),
            Vec::<String>::new(),
            "{}",
            kind.name()
        );
    }
    if can_run(Kind::Fuse2fs) {
        // the FUSE daemon (ours: Managed started it) dies mid-run
        let m = create(Kind::Fuse2fs, backing.path());
        small_workload(m.mount_point());
        let pid = m.daemon_pid().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        // finish still unmounts, reads the counters and detaches; the writes before the
        // crash were counted
        let f = m.finish().unwrap();
        assert!(f.device.unwrap().writes > 0);
        assert_eq!(leftovers(backing.path()), Vec::<String>::new());
    }
}
