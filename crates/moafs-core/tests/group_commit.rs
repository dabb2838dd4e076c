//! Many fsync-heavy writers at once. Commits write with the engine lock released and fsyncs
//! that arrive meanwhile share the next commit (group commit); a power cut at any moment of
//! such a run must keep every record whose fsync returned, never show a record half written
//! inside a file's size (ordered and data modes), keep every acknowledged rename, and leave an
//! image fsck finds clean, before and after the remount.
mod common;
use common::ME;
use moafs_core::device::{BlockDevice, CutMode, FaultConfig, FaultDevice, MemDevice};
use moafs_core::fs::{JournalMode, MountOptions, RenameFlags, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

const THREADS: usize = 6;
const RECORD: usize = 64;
const IMAGE: u64 = 64 << 20;

/// A flush that takes a while (as a disk's cache flush does), so that fsyncs pile up behind a
/// commit in flight.
fn slow_flush(inner: Arc<dyn BlockDevice>) -> Arc<dyn BlockDevice> {
    Arc::new(common::Slow {
        inner,
        read: std::time::Duration::ZERO,
        flush: std::time::Duration::from_micros(700),
    })
}

fn record(t: usize, i: usize) -> Vec<u8> {
    let mut r = format!("thread {t} record {i:06} ").into_bytes();
    r.resize(RECORD - 1, b'a' + t as u8);
    r.push(b'\n');
    r
}

/// What the writers were told was durable, and the most they tried.
struct Acks {
    /// Per thread: the last record whose fsync returned (-1: none).
    record: Vec<AtomicI64>,
    /// Per thread: the record number of the last `cur` rename an fsync covered (-1: none).
    renamed: Vec<AtomicI64>,
    /// Per thread: the last `cur` rename made (durable or not).
    renamed_tried: Vec<AtomicI64>,
    fsyncs: AtomicI64,
}

/// Each thread appends records to its own file and fsyncs after each; every fourth record it
/// also writes a `cur` file through a temporary name and a replacing rename, then fsyncs the
/// directory. Stops at the first error (the cut) or after `records`.
fn writers(fs: &Arc<Fs>, records: usize) -> Arc<Acks> {
    let acks = Arc::new(Acks {
        record: (0..THREADS).map(|_| AtomicI64::new(-1)).collect(),
        renamed: (0..THREADS).map(|_| AtomicI64::new(-1)).collect(),
        renamed_tried: (0..THREADS).map(|_| AtomicI64::new(-1)).collect(),
        fsyncs: AtomicI64::new(0),
    });
    let files: Vec<u64> = (0..THREADS)
        .map(|t| {
            let name = format!("f{t}");
            fs.create(ROOT_INO, name.as_bytes(), 0o644, ME).unwrap().ino
        })
        .collect();
    fs.sync().unwrap();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fs, acks, ino) = (fs.clone(), acks.clone(), files[t]);
            std::thread::spawn(move || {
                let step = |i: usize| -> moafs_core::FsResult<()> {
                    fs.write(ino, (i * RECORD) as u64, &record(t, i))?;
                    if i.is_multiple_of(4) {
                        let (tmp, cur) = (format!("f{t}.tmp"), format!("f{t}.cur"));
                        let n = fs.create(ROOT_INO, tmp.as_bytes(), 0o644, ME)?.ino;
                        fs.write(n, 0, &record(t, i))?;
                        fs.rename(
                            ROOT_INO,
                            tmp.as_bytes(),
                            ROOT_INO,
                            cur.as_bytes(),
                            RenameFlags::default(),
                        )?;
                        acks.renamed_tried[t].store(i as i64, Ordering::SeqCst);
                    }
                    fs.fsync(ino, false)?;
                    acks.fsyncs.fetch_add(1, Ordering::SeqCst);
                    acks.record[t].store(i as i64, Ordering::SeqCst);
                    if i.is_multiple_of(4) {
                        // The rename is the directory's change: an fsync of the file covers
                        // it only when it commits (one the byte log serves, or one of a file
                        // a finished commit already took, does not: docs/SEMANTICS.md), so
                        // the directory is fsynced, as POSIX asks.
                        fs.fsync(ROOT_INO, false)?;
                        acks.renamed[t].store(i as i64, Ordering::SeqCst);
                    }
                    Ok(())
                };
                for i in 0..records {
                    if step(i).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }
    acks
}

fn lookup_data(fs: &Fs, name: &str) -> Option<Vec<u8>> {
    let a = fs.lookup(ROOT_INO, name.as_bytes()).ok()?;
    Some(fs.read(a.ino, 0, 1 << 20).unwrap())
}

/// Mounts a crash image and checks it against what the writers were told. `no_primary`:
/// the primary superblock is damaged first (a byte of its label flipped: its crc fails), so
/// the mount reads a backup (written at mount and unmount only: its replay floor is old).
fn check(mut image: Vec<u8>, mode: JournalMode, acks: &Acks, what: &str, no_primary: bool) {
    if no_primary {
        image[120] ^= 0xff;
    }
    let dev = Arc::new(MemDevice::from_bytes(image));
    let r = moafs_core::fsck::fsck(dev.as_ref(), false).expect("fsck runs");
    if no_primary {
        // replay may rewrite the primary (every transaction carries it)
        assert!(
            r.errors.iter().all(|e| e.contains("primary superblock")),
            "{what}: fsck -n with the primary damaged: {:#?}",
            r.errors
        );
    } else {
        assert!(r.errors.is_empty(), "{what}: fsck -n: {:#?}", r.errors);
    }
    let opts = MountOptions {
        journal: mode,
        ..MountOptions::default()
    };
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts)
        .unwrap_or_else(|e| panic!("{what}: mount: {e}"));
    for t in 0..THREADS {
        let acked = acks.record[t].load(Ordering::SeqCst);
        let data = lookup_data(&fs, &format!("f{t}")).unwrap_or_else(|| panic!("{what}: f{t}"));
        let whole = data.len() / RECORD;
        assert!(
            whole as i64 > acked,
            "{what}: f{t} holds {whole} records, record {acked} was fsynced"
        );
        // ordered and data modes: no record inside the size is torn or stale
        let check_upto = match mode {
            JournalMode::Writeback => (acked + 1) as usize,
            _ => whole,
        };
        for i in 0..check_upto {
            assert_eq!(
                &data[i * RECORD..(i + 1) * RECORD],
                &record(t, i)[..],
                "{what}: f{t} record {i} (fsynced up to {acked})"
            );
        }
        let renamed = acks.renamed[t].load(Ordering::SeqCst);
        let tried = acks.renamed_tried[t].load(Ordering::SeqCst);
        match lookup_data(&fs, &format!("f{t}.cur")) {
            None => assert!(renamed < 0, "{what}: f{t}.cur lost (renamed at {renamed})"),
            Some(d) => {
                let found = (renamed.max(0)..=tried)
                    .filter(|i| i % 4 == 0)
                    .find(|&i| d == record(t, i as usize));
                assert!(
                    found.is_some(),
                    "{what}: f{t}.cur holds none of the versions {renamed}..={tried}: {:?}",
                    String::from_utf8_lossy(&d)
                );
            }
        }
    }
    fs.unmount().expect("unmount");
    let r = moafs_core::fsck::fsck(dev.as_ref(), false).expect("fsck runs");
    assert!(
        r.errors.is_empty(),
        "{what}: fsck after remount: {:#?}",
        r.errors
    );
}

fn crash_run(mode: JournalMode, cut_after_writes: u64, seed: u64) {
    let mem = Arc::new(MemDevice::new(IMAGE));
    // four groups: backup superblocks in groups 1 and 3
    let four = MkfsOptions {
        groups: Some(4),
        ..MkfsOptions::default()
    };
    mkfs(mem.as_ref(), &four).expect("mkfs");
    let fault = Arc::new(FaultDevice::new(
        mem as Arc<dyn BlockDevice>,
        FaultConfig {
            seed,
            fail_after_writes: Some(cut_after_writes),
            ..FaultConfig::default()
        },
    ));
    let dev = slow_flush(fault.clone());
    let opts = MountOptions {
        journal: mode,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(dev, opts).expect("mount"));
    let acks = writers(&fs, 400);
    let what = format!("journal={mode:?} cut after {cut_after_writes} writes");
    let cuts = [
        CutMode::DropAll,
        CutMode::KeepPrefix(1),
        CutMode::KeepPrefix(usize::MAX),
        CutMode::RandomSeed(seed),
        CutMode::RandomSeed(seed + 1),
    ];
    for cut in cuts {
        let image = fault.crash_image(cut).expect("crash image");
        check(image, mode, &acks, &format!("{what}, {cut:?}"), false);
    }
    let image = fault.crash_image(CutMode::DropAll).expect("crash image");
    check(image, mode, &acks, &format!("{what}, primary lost"), true);
    assert!(
        acks.fsyncs.load(Ordering::SeqCst) > 0 || cut_after_writes < 40,
        "{what}: no fsync returned before the cut"
    );
}

#[test]
fn power_cuts_during_concurrent_fsyncs_keep_every_acknowledged_record() {
    for (k, mode) in [
        JournalMode::Ordered,
        JournalMode::Data,
        JournalMode::Writeback,
    ]
    .into_iter()
    .enumerate()
    {
        for (j, cut) in [30u64, 150, 600, 2000].into_iter().enumerate() {
            crash_run(mode, cut, (k * 10 + j) as u64);
        }
    }
}

#[test]
fn concurrent_fsyncs_share_commits() {
    let mem = Arc::new(MemDevice::new(IMAGE));
    mkfs(mem.as_ref(), &MkfsOptions::default()).expect("mkfs");
    let dev = slow_flush(mem.clone());
    let fs = Arc::new(Fs::mount(dev, MountOptions::default()).expect("mount"));
    let before = fs.counters().commits;
    let acks = writers(&fs, 100);
    let fsyncs = acks.fsyncs.load(Ordering::SeqCst);
    assert_eq!(fsyncs, (THREADS * 100) as i64, "every fsync returned");
    let commits = fs.counters().commits - before;
    // One commit per fsync would be 600; a leader's commit takes what the others wrote
    // meanwhile (how many join depends on scheduling: about half here on two CPUs).
    assert!(
        commits * 4 <= fsyncs as u64 * 3,
        "{commits} commits for {fsyncs} fsyncs of {THREADS} threads: not shared"
    );
    fs.check_invariants().unwrap();
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    common::fsck_clean(&mem);
}
