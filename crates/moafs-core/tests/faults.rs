//! Device errors and full file systems: every failure reaches the caller as an error (EIO,
//! ENOSPC, then EROFS), nothing panics, and what was durable before stays mountable, clean
//! and intact.

mod common;
use common::ME;
use moafs_core::device::{BlockDevice, CutMode, FaultConfig, FaultDevice, MemDevice};
use moafs_core::fs::{JournalMode, MountOptions, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::Arc;

fn fresh(size: u64) -> Arc<MemDevice> {
    fresh_with(size, None)
}

fn fresh_with(size: u64, journal_blocks: Option<u32>) -> Arc<MemDevice> {
    common::new_dev_journal(size, journal_blocks)
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

/// Where a fault is injected: the blocks of one kind, or every flush.
#[derive(Clone, Copy, Debug)]
enum Class {
    Data,
    Directory,
    InodeTable,
    Journal,
    Flush,
}

const CLASSES: [Class; 5] = [
    Class::Data,
    Class::Directory,
    Class::InodeTable,
    Class::Journal,
    Class::Flush,
];
const MODES: [JournalMode; 3] = [
    JournalMode::Ordered,
    JournalMode::Data,
    JournalMode::Writeback,
];

/// Byte ranges of the blocks of `class`: the data blocks of `file`, the blocks of `dir`,
/// every group's inode table, the journal.
fn class_ranges(fs: &Fs, class: Class, file: u64, dir: u64) -> Vec<(u64, u64)> {
    let geo = fs.geometry();
    let bs = geo.block_size as u64;
    let blocks = |ino| -> Vec<(u64, u64)> {
        let map = fs.block_map(ino).expect("block map");
        let out: Vec<(u64, u64)> = map
            .into_iter()
            .filter(|b| *b != 0)
            .map(|b| (b * bs, bs))
            .collect();
        assert!(!out.is_empty(), "inode {ino} has no blocks on disk");
        out
    };
    match class {
        Class::Data => blocks(file),
        Class::Directory => blocks(dir),
        Class::InodeTable => (0..geo.group_count)
            .map(|g| (geo.itable_block(g) * bs, geo.itable_blocks as u64 * bs))
            .collect(),
        Class::Journal => {
            let sb = fs.superblock();
            assert!(sb.journal_blocks > 0);
            vec![(sb.journal_start * bs, sb.journal_blocks as u64 * bs)]
        }
        Class::Flush => Vec::new(),
    }
}

/// Write errors on data, directory, inode-table and journal blocks, and flushes that fail
/// while writes succeed, in every journal mode: errors reach the caller as EIO or EROFS,
/// nothing panics, once an fsync failed every later fsync and sync fails too (no fsync
/// returns 0 after lost data), and after recovery fsck is clean and every file holds its
/// contents at its last successful fsync or a later version.
#[test]
fn write_and_flush_errors_fail_every_later_fsync_and_keep_what_was_acknowledged() {
    for mode in MODES {
        for class in CLASSES {
            let what = format!("journal={mode:?} fault on {class:?}");
            // the smallest journal: small fsyncs are compact transactions, and the run must
            // still fill it so that checkpoints write the directory and inode table home
            let mem = fresh_with(8 << 20, Some(32));
            let dev = faulty(&mem, FaultConfig::default());
            let fs = Fs::mount(
                dev.clone() as Arc<dyn BlockDevice>,
                MountOptions {
                    journal: mode,
                    flush_interval_ms: u64::MAX,
                    ..MountOptions::default()
                },
            )
            .expect("mount");
            let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
            // name → (inode, versions since the last acknowledged fsync; the first is it)
            let mut files: Vec<(String, u64, Vec<Vec<u8>>)> = Vec::new();
            for k in 0..3u8 {
                let a = fs.create(d, format!("f{k}").as_bytes(), 0o644, ME).unwrap();
                let data = vec![k + 1; 9000];
                fs.write(a.ino, 0, &data).unwrap();
                fs.fsync(a.ino, false).unwrap();
                files.push((format!("f{k}"), a.ino, vec![data]));
            }
            fs.sync().unwrap();
            // the fault, from now on
            for (o, l) in class_ranges(&fs, class, files[0].1, d) {
                dev.fail_writes(o, l);
            }
            if let Class::Flush = class {
                dev.fail_flushes(true);
            }
            let mut failed_at = None;
            for step in 0..60usize {
                let k = step % 3;
                let ino = files[k].1;
                let mut cur = files[k].2.last().unwrap().clone();
                let (off, len) = match step % 4 {
                    0 => ((step * 37) % 8000, 100), // the byte log's kind
                    1 => ((step % 2) * 4096, 4096), // a whole block
                    // an append inside the last block (the byte log's attribute record)
                    // or into new blocks (a commit)
                    2 => (cur.len(), if step % 8 == 2 { 700 } else { 5000 }),
                    _ => ((step * 131) % 8000, 2000), // across blocks
                };
                let bytes = vec![(step as u8).wrapping_mul(7) | 1; len];
                if step % 5 == 4 {
                    // a create in the directory (directory and inode-table blocks)
                    let r = fs.create(d, format!("n{step}").as_bytes(), 0o644, ME);
                    if failed_at.is_some() {
                        assert!(r.is_err(), "{what}: a create after the failure worked");
                    }
                }
                match fs.write(ino, off as u64, &bytes) {
                    Ok(_) => {
                        if cur.len() < off + len {
                            cur.resize(off + len, 0);
                        }
                        cur[off..off + len].copy_from_slice(&bytes);
                        files[k].2.push(cur.clone());
                        assert!(
                            failed_at.is_none(),
                            "{what}: a write after the failure worked"
                        );
                    }
                    Err(e) => {
                        assert_eq!(e.to_errno(), libc::EROFS, "{what} step {step}: {e}");
                        assert!(
                            failed_at.is_some(),
                            "{what}: a write refused before a failure"
                        );
                    }
                }
                match fs.fsync(ino, step % 2 == 0) {
                    Ok(()) => {
                        assert!(
                            failed_at.is_none(),
                            "{what} step {step}: fsync returned 0 after a failed one"
                        );
                        let last = files[k].2.pop().unwrap();
                        files[k].2 = vec![last];
                    }
                    Err(e) => {
                        assert!(
                            matches!(e.to_errno(), libc::EIO | libc::EROFS),
                            "{what} step {step}: {e}"
                        );
                        failed_at.get_or_insert(step);
                    }
                }
            }
            let failed_at = failed_at.unwrap_or_else(|| panic!("{what}: the fault never hit"));
            eprintln!("{what}: the first fsync failed at step {failed_at}");
            assert!(
                fs.sync().is_err(),
                "{what}: sync returned 0 after the failure"
            );
            for (_, ino, _) in &files {
                let e = fs.fsync(*ino, false).expect_err("fsync after the failure");
                assert_eq!(e.to_errno(), libc::EIO, "{what}: {e}");
            }
            let _ = fs.unmount();
            drop(fs);
            let (_mem, fs) = recover(&dev);
            let dir = fs.lookup(ROOT_INO, b"d").expect("d").ino;
            for (name, _, versions) in &files {
                let a = fs.lookup(dir, name.as_bytes()).expect("an fsynced file");
                let got = fs.read(a.ino, 0, a.size as u32).unwrap();
                assert!(
                    versions.contains(&got),
                    "{what} (failed at step {failed_at}): {name} holds {} bytes, none of its \
                     {} versions since its last fsync",
                    got.len(),
                    versions.len()
                );
            }
            fs.unmount().unwrap();
        }
    }
}

/// Read errors on data, directory and inode-table blocks come back as EIO for the operation
/// that needed the block and leave the file system working (other files read, written and
/// fsynced); a journal that cannot be read at mount refuses the mount with EIO; healed,
/// every byte is there and fsck is clean.
#[test]
fn read_errors_fail_the_operation_with_eio_and_nothing_else() {
    for class in [
        Class::Data,
        Class::Directory,
        Class::InodeTable,
        Class::Journal,
    ] {
        let what = format!("read fault on {class:?}");
        let mem = fresh(8 << 20);
        let dev = faulty(&mem, FaultConfig::default());
        let opts = MountOptions {
            flush_interval_ms: u64::MAX,
            ..MountOptions::default()
        };
        let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone()).unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
        let mut inos = Vec::new();
        for k in 0..2u8 {
            let a = fs.create(d, format!("f{k}").as_bytes(), 0o644, ME).unwrap();
            fs.write(a.ino, 0, &vec![k + 1; 9000]).unwrap();
            inos.push(a.ino);
        }
        fs.sync().unwrap();
        let ranges = class_ranges(&fs, class, inos[0], d);
        if let Class::Journal = class {
            // a crash with a transaction to replay: the mount must read the journal
            let x = fs.create(ROOT_INO, b"x", 0o644, ME).unwrap();
            fs.write(x.ino, 0, b"replayed").unwrap();
            fs.fsync(x.ino, false).unwrap();
            let image = dev.crash_image(CutMode::DropAll).unwrap();
            drop(fs);
            let mem = Arc::new(MemDevice::from_bytes(image));
            let dev = faulty(&mem, FaultConfig::default());
            for (o, l) in &ranges {
                dev.fail_reads(*o, *l);
            }
            let e = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone())
                .err()
                .expect("a mount that cannot read the journal");
            assert_eq!(e.to_errno(), libc::EIO, "{what}: {e}");
            dev.heal();
            let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone()).unwrap();
            assert_eq!(read_all(&fs, b"x"), b"replayed");
            fs.unmount().unwrap();
            continue;
        }
        fs.unmount().unwrap();
        // a cold mount: nothing of d, its files or their inodes is cached
        let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone()).unwrap();
        for (o, l) in &ranges {
            dev.fail_reads(*o, *l);
        }
        let eio = |r: moafs_core::error::FsResult<()>| {
            let e = r.expect_err(&what);
            assert_eq!(e.to_errno(), libc::EIO, "{what}: {e}");
        };
        match class {
            Class::Data => {
                let a = fs.lookup(d, b"f0").unwrap();
                eio(fs.read(a.ino, 0, 9000).map(drop));
                // the other file still reads, changes and fsyncs
                let b = fs.lookup(d, b"f1").unwrap();
                assert_eq!(fs.read(b.ino, 0, 9000).unwrap(), vec![2u8; 9000]);
                fs.write(b.ino, 0, b"still works").unwrap();
                fs.fsync(b.ino, false).unwrap();
            }
            Class::Directory => {
                eio(fs.lookup(d, b"f0").map(drop));
                eio(fs.create(d, b"new", 0o644, ME).map(drop));
                let a = fs.create(ROOT_INO, b"elsewhere", 0o644, ME).unwrap();
                fs.write(a.ino, 0, b"still works").unwrap();
                fs.fsync(a.ino, false).unwrap();
            }
            _ => {
                // the mount read the inode table (its orphan scan): a mount that cannot
                // is refused
                fs.unmount().unwrap();
                drop(fs);
                let e = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone())
                    .err()
                    .expect("a mount that cannot read the inode table");
                assert_eq!(e.to_errno(), libc::EIO, "{what}: {e}");
                dev.heal();
                let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone()).unwrap();
                let a = fs.lookup(d, b"f0").unwrap();
                assert_eq!(fs.read(a.ino, 0, 9000).unwrap(), vec![1u8; 9000], "{what}");
                fs.unmount().unwrap();
                continue;
            }
        }
        dev.heal();
        let b = fs.lookup(d, b"f1").unwrap();
        let f1 = fs.read(b.ino, 0, 9000).unwrap();
        assert!(
            f1 == vec![2u8; 9000] || f1.starts_with(b"still works"),
            "{what}"
        );
        let a = fs.lookup(d, b"f0").unwrap();
        assert_eq!(fs.read(a.ino, 0, 9000).unwrap(), vec![1u8; 9000], "{what}");
        fs.unmount().unwrap();
        let r = moafs_core::fsck::fsck(dev.as_ref(), false).unwrap();
        assert!(r.errors.is_empty(), "{what}: {:#?}", r.errors);
    }
}

/// A file system filled to ENOSPC in every journal mode, with power cuts at the full point
/// and after more work on the full file system (deletes, then filling again): every image
/// is clean and holds every acknowledged (fsynced) file exactly; the full file system still
/// commits.
#[test]
fn enospc_in_every_mode_with_power_cuts_keeps_every_acknowledged_byte() {
    /// Fills `dir` with files of 50,000 bytes, fsyncing each; returns when a create, write
    /// or fsync says ENOSPC. Acknowledged files go into `acked`.
    fn fill(fs: &Fs, dir: u64, tag: &str, acked: &mut Vec<(String, Vec<u8>)>) {
        for f in 0..500u32 {
            let name = format!("{tag}{f}");
            let data = vec![(f as u8) | 1; 50_000];
            let r = fs
                .create(dir, name.as_bytes(), 0o644, ME)
                .and_then(|a| fs.write(a.ino, 0, &data).map(|_| a))
                .and_then(|a| fs.fsync(a.ino, f % 2 == 0));
            match r {
                Ok(()) => acked.push((name, data)),
                Err(e) => {
                    assert_eq!(e.to_errno(), libc::ENOSPC, "{tag}{f}: {e}");
                    return;
                }
            }
        }
        panic!("never full");
    }
    fn check(dev: &FaultDevice, acked: &[(String, Vec<u8>)], what: &str) {
        let (_mem, fs) = recover(dev);
        let dir = fs.lookup(ROOT_INO, b"d").expect("d").ino;
        for (name, data) in acked {
            let a = fs
                .lookup(dir, name.as_bytes())
                .unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
            assert_eq!(
                &fs.read(a.ino, 0, a.size as u32).unwrap(),
                data,
                "{what}: {name}"
            );
        }
        fs.unmount().unwrap();
    }
    for mode in MODES {
        let mem = fresh(3 << 20);
        let dev = faulty(&mem, FaultConfig::default());
        let fs = Fs::mount(
            dev.clone() as Arc<dyn BlockDevice>,
            MountOptions {
                journal: mode,
                ..MountOptions::default()
            },
        )
        .unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
        let mut acked = Vec::new();
        fill(&fs, d, "a", &mut acked);
        assert!(
            acked.len() > 10,
            "journal={mode:?}: only {} files",
            acked.len()
        );
        check(&dev, &acked, &format!("journal={mode:?} cut at ENOSPC"));
        fs.sync().expect("a full file system still commits");
        // free every other file, fill again, cut again
        for (name, _) in acked.iter().step_by(2) {
            fs.unlink(d, name.as_bytes()).unwrap();
        }
        acked = acked.into_iter().skip(1).step_by(2).collect();
        fs.fsync(d, false).unwrap();
        let before = acked.len();
        fill(&fs, d, "b", &mut acked);
        assert!(
            acked.len() > before,
            "journal={mode:?}: the freed space was not reused"
        );
        check(
            &dev,
            &acked,
            &format!("journal={mode:?} cut after refilling"),
        );
        fs.unmount().unwrap();
        let r = moafs_core::fsck::fsck(mem.as_ref(), false).unwrap();
        assert!(r.errors.is_empty(), "journal={mode:?}: {:#?}", r.errors);
    }
}
