//! Device errors and full file systems: every failure reaches the caller as an error (EIO,
//! ENOSPC, then EROFS), nothing panics, and what was durable before stays mountable, clean
//! and intact.

mod common;
use common::ME;
use moafs_core::device::{BlockDevice, CutMode, FaultConfig, FaultDevice, MemDevice};
use moafs_core::fs::{MountOptions, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::Arc;

fn fresh(size: u64) -> Arc<MemDevice> {
    let mem = Arc::new(MemDevice::new(size));
    mkfs(mem.as_ref(), &MkfsOptions::default()).expect("mkfs");
    mem
}

fn faulty(mem: &Arc<MemDevice>, cfg: FaultConfig) -> Arc<FaultDevice> {
    Arc::new(FaultDevice::new(mem.clone() as Arc<dyn BlockDevice>, cfg))
}

/// Mounts the durable contents of `dev` (what a power cut dropping every unflushed write
/// leaves), checks fsck before and after, and returns the mounted file system.
fn recover(dev: &FaultDevice) -> (Arc<MemDevice>, Fs) {
    let image = dev.crash_image(CutMode::DropAll).expect("image");
    let mem = Arc::new(MemDevice::from_bytes(image));
    let r = moafs_core::fsck::fsck(mem.as_ref(), false).expect("fsck runs");
    assert!(r.errors.is_empty(), "fsck -n: {:#?}", r.errors);
    let fs = Fs::mount(mem.clone() as Arc<dyn BlockDevice>, MountOptions::default())
        .expect("mount after the failure");
    (mem, fs)
}

fn read_all(fs: &Fs, name: &[u8]) -> Vec<u8> {
    let a = fs.lookup(ROOT_INO, name).expect("lookup");
    fs.read(a.ino, 0, a.size as u32).expect("read")
}

#[test]
fn a_power_loss_mid_workload_fails_the_caller_and_keeps_what_was_fsynced() {
    for cut_after in 1..40u64 {
        let mem = fresh(8 << 20);
        let dev = faulty(&mem, FaultConfig::default());
        let fs =
            Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).expect("mount");
        let a = fs.create(ROOT_INO, b"kept", 0o644, ME).unwrap();
        fs.write(a.ino, 0, &[7u8; 10_000]).unwrap();
        fs.fsync(a.ino, false).unwrap();
        let base = dev.writes_total();
        let b = fs.create(ROOT_INO, b"lost", 0o644, ME).unwrap();
        let mut failed = None;
        for i in 0..200u64 {
            if dev.writes_total() - base >= cut_after && !dev.powered_off() {
                dev.power_cut(CutMode::DropAll).unwrap();
            }
            let r = fs.write(b.ino, i * 4096, &[9u8; 4096]).and_then(|_| {
                if i % 20 == 19 {
                    fs.fsync(b.ino, false)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        let err = match failed.map_or_else(|| fs.sync(), Err) {
            Err(e) => e,
            Ok(()) => continue, // the workload finished before the power went
        };
        assert!(
            matches!(err.to_errno(), libc::EIO | libc::EROFS),
            "cut_after {cut_after}: {err}"
        );
        // Once failed, further changes are refused.
        assert!(
            fs.write(a.ino, 0, b"x").is_err() || fs.sync().is_err(),
            "cut_after {cut_after}: changes accepted after a failed commit"
        );
        drop(fs);
        let (_mem, fs) = recover(&dev);
        assert_eq!(
            read_all(&fs, b"kept"),
            vec![7u8; 10_000],
            "cut_after {cut_after}"
        );
        fs.unmount().unwrap();
    }
}

#[test]
fn injected_write_errors_at_every_request_never_panic_and_recover() {
    for fail_after in 0..120u64 {
        let mem = fresh(4 << 20);
        let dev = faulty(
            &mem,
            FaultConfig {
                fail_after_writes: Some(fail_after),
                ..Default::default()
            },
        );
        let fs = match Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()) {
            Ok(fs) => fs,
            Err(e) => {
                assert_eq!(e.to_errno(), libc::EIO, "mount: {e}");
                continue;
            }
        };
        let mut fsynced: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for i in 0..30u32 {
            let name = format!("f{i}").into_bytes();
            let data = vec![i as u8 + 1; 1000 + i as usize * 997];
            let r = fs
                .create(ROOT_INO, &name, 0o644, ME)
                .and_then(|a| fs.write(a.ino, 0, &data).map(|_| a))
                .and_then(|a| fs.fsync(a.ino, false));
            match r {
                Ok(()) => fsynced.push((name, data)),
                Err(e) => {
                    assert!(
                        matches!(e.to_errno(), libc::EIO | libc::EROFS),
                        "fail_after {fail_after}: {e}"
                    );
                }
            }
        }
        let _ = fs.unmount();
        let (_mem, fs) = recover(&dev);
        for (name, data) in &fsynced {
            assert_eq!(&read_all(&fs, name), data, "fail_after {fail_after}");
        }
        fs.unmount().unwrap();
    }
}

#[test]
fn full_file_system_commits_and_stays_clean() {
    let mem = fresh(3 << 20);
    let fs = Fs::mount(mem.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    // Many directories and files with indirect blocks: metadata allocated at commit time.
    let mut made = 0;
    let mut full = false;
    'fill: for d in 0..50u32 {
        let dir = match fs.mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o755, ME) {
            Ok(a) => a.ino,
            Err(e) => {
                assert_eq!(e.to_errno(), libc::ENOSPC, "{e}");
                full = true;
                break;
            }
        };
        for f in 0..40u32 {
            let a = match fs.create(dir, format!("f{f}").as_bytes(), 0o644, ME) {
                Ok(a) => a,
                Err(e) => {
                    assert_eq!(e.to_errno(), libc::ENOSPC, "{e}");
                    full = true;
                    break 'fill;
                }
            };
            if let Err(e) = fs.write(a.ino, 0, &vec![1u8; 60_000]) {
                assert_eq!(e.to_errno(), libc::ENOSPC, "{e}");
                full = true;
                break 'fill;
            }
            made += 1;
        }
    }
    assert!(made > 10 && full, "made {made} files, full: {full}");
    fs.sync().expect("a full file system still commits");
    fs.unmount().unwrap();
    let r = moafs_core::fsck::fsck(mem.as_ref(), false).unwrap();
    assert!(r.errors.is_empty(), "{:#?}", r.errors);
}

#[test]
fn a_commit_larger_than_the_journal_is_written_in_place_and_stays_clean() {
    let mem = Arc::new(MemDevice::new(32 << 20));
    mkfs(
        mem.as_ref(),
        &MkfsOptions {
            journal_blocks: Some(32),
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    let fs = Fs::mount(mem.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    for i in 0..1000u32 {
        fs.mkdir(ROOT_INO, format!("dir{i}").as_bytes(), 0o755, ME)
            .unwrap();
    }
    fs.sync().unwrap();
    assert!(
        fs.counters().journal_overflows > 0,
        "the commit fit after all"
    );
    let a = fs.create(ROOT_INO, b"small", 0o644, ME).unwrap();
    fs.write(a.ino, 0, b"journaled").unwrap();
    fs.fsync(a.ino, false).unwrap();
    assert!(fs.counters().journal_commits > 0);
    fs.unmount().unwrap();
    let r = moafs_core::fsck::fsck(mem.as_ref(), false).unwrap();
    assert!(r.errors.is_empty(), "{:#?}", r.errors);
}
