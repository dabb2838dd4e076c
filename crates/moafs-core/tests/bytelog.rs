//! Two-level logging (issue 17): the per-file fsync path and the byte log, in-process.
//! Crash states of every kind are the crash harness's (`crash.rs`, workload `smallupdates`);
//! these tests check what the path does and does not take, and recovery by hand.

mod common;
use moafs_core::device::{BlockDevice, CutMode, FaultConfig, FaultDevice, MemDevice, Nvm};
use moafs_core::fs::{JournalMode, MountOptions, SetAttr, ROOT_INO};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const BS: usize = 4096;

/// A file system on a fault device (for crash images), mounted with `tier` if given, with a
/// file of `len` bytes of pattern made durable by a commit.
fn setup_with(
    opts: MountOptions,
    len: usize,
    tier: Option<(Arc<dyn Nvm>, String)>,
) -> (Arc<FaultDevice>, Fs, u64, Vec<u8>) {
    let mem = common::new_dev(64 << 20);
    let fault = Arc::new(FaultDevice::new(
        mem as Arc<dyn BlockDevice>,
        FaultConfig::default(),
    ));
    let fs = Fs::mount_with_tier(fault.clone() as Arc<dyn BlockDevice>, tier, opts).expect("mount");
    let ino = fs
        .create(ROOT_INO, b"f", 0o644, common::ME)
        .expect("create")
        .ino;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    fs.write(ino, 0, &data).expect("write");
    fs.sync().expect("sync");
    (fault, fs, ino, data)
}

fn setup(opts: MountOptions, len: usize) -> (Arc<FaultDevice>, Fs, u64, Vec<u8>) {
    setup_with(opts, len, None)
}

/// `n` random overwrites of 1..`max` bytes, each followed by an fsync, applied to `model` too.
fn updates(fs: &Fs, ino: u64, model: &mut [u8], n: usize, max: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..n {
        let len = rng.gen_range(1..max);
        let off = rng.gen_range(0..model.len() - len);
        let b: u8 = rng.gen();
        fs.write(ino, off as u64, &vec![b; len]).expect("write");
        model[off..off + len].fill(b);
        fs.fsync(ino, true).expect("fsync");
    }
}

fn opts() -> MountOptions {
    MountOptions {
        flush_interval_ms: u64::MAX,
        ..MountOptions::default()
    }
}

/// With fsyncs of grown maps by records (`-o bytelog_grow=on`, off by default).
fn grow() -> MountOptions {
    MountOptions {
        bytelog_grow: true,
        ..opts()
    }
}

/// Mounts a crash image and reads the file back.
fn recover(image: Vec<u8>, ino: u64, len: usize) -> (Fs, Vec<u8>) {
    let dev = Arc::new(MemDevice::from_bytes(image));
    let r = moafs_core::fsck::fsck(dev.as_ref(), false).expect("fsck runs");
    assert!(
        r.errors.is_empty(),
        "fsck -n of the crash image: {:#?}",
        r.errors
    );
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
    let got = fs.read(ino, 0, len as u32).expect("read");
    (fs, got)
}

/// A power cut now (every unflushed write lost): after recovery the file holds `model`.
fn survives(fault: &FaultDevice, ino: u64, model: &[u8]) {
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    let (fs2, got) = recover(image, ino, model.len());
    assert!(got == model, "an acknowledged update was lost");
    fs2.unmount().expect("unmount");
}

#[test]
fn small_overwrites_are_logged_not_committed_and_survive_a_power_cut() {
    // 32 blocks: within the share of the journal (256 blocks on 64 MiB) that logged blocks
    // may take before a commit must write them
    let (fault, fs, ino, mut model) = setup(opts(), 32 * BS);
    let before = fs.counters();
    updates(&fs, ino, &mut model, 200, 300, 1);
    let c = fs.counters().since(&before);
    assert_eq!(c.commits, 0, "a small overwrite's fsync committed: {c:?}");
    assert_eq!(c.bytelog_fsyncs, 200);
    assert!(c.bytelog_records >= 200);
    // one sector per fsync for updates under 300 bytes (at most three 128-byte units),
    // two when an update straddles two blocks
    assert!((200..=220).contains(&c.bytelog_sectors), "{c:?}");
    // Power cut: nothing unflushed survives; every acknowledged byte must.
    survives(&fault, ino, &model);
}

#[test]
fn a_block_changed_past_the_threshold_is_logged_whole() {
    let (fault, fs, ino, mut model) = setup(opts(), 16 * BS);
    let c0 = fs.counters();
    // whole blocks changed (4 KiB overwrites + fdatasync, as fio or a database page
    // writer): one whole-block record each, in 9 sectors (batch header, record header, the
    // block, the times), no commit
    for (k, blk) in [3usize, 7, 3, 12].iter().enumerate() {
        let bytes = vec![20 + k as u8; BS];
        fs.write(ino, (blk * BS) as u64, &bytes).expect("write");
        model[blk * BS..(blk + 1) * BS].copy_from_slice(&bytes);
        fs.fsync(ino, true).expect("fdatasync");
    }
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_fsyncs), (0, 4), "{c:?}");
    assert_eq!(c.bytelog_whole_blocks, 4, "{c:?}");
    assert_eq!(c.bytelog_sectors, 4 * 9, "{c:?}");
    // half a block changed, then a few bytes of it: whole, then bytes
    fs.write(ino, 0, &vec![5u8; BS / 2]).expect("write");
    model[..BS / 2].fill(5);
    fs.fsync(ino, true).expect("fdatasync");
    fs.write(ino, 10, b"abc").expect("write");
    model[10..13].copy_from_slice(b"abc");
    fs.fsync(ino, true).expect("fdatasync");
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_fsyncs), (0, 6), "{c:?}");
    assert_eq!(c.bytelog_whole_blocks, 5, "{c:?}");
    // Power cut: every acknowledged byte is there.
    survives(&fault, ino, &model);
}

#[test]
fn fsync_commits_what_the_byte_log_cannot_take() {
    let (_fault, fs, ino, _) = setup(grow(), 16 * BS);
    let c1 = fs.counters();
    // a truncate that frees blocks (the map shrank: records cannot free)
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(4 * BS as u64),
            ..Default::default()
        },
    )
    .expect("truncate");
    fs.fsync(ino, false).expect("fsync");
    let c2 = fs.counters();
    assert_eq!(c2.since(&c1).commits, 1);
    // a new file
    let other = fs
        .create(ROOT_INO, b"g", 0o644, common::ME)
        .expect("create")
        .ino;
    fs.write(other, 0, b"x").expect("write");
    fs.fsync(other, false).expect("fsync");
    assert_eq!(fs.counters().since(&c2).commits, 1);
    // an append that would need a tree block (more than ten extents): scattered one-block
    // writes into holes of a sparse file
    let c3 = fs.counters();
    for k in 0..12u64 {
        fs.write(ino, (40 + 3 * k) * BS as u64, b"hole")
            .expect("write");
    }
    fs.fsync(ino, false).expect("fsync");
    let c = fs.counters().since(&c3);
    assert_eq!((c.commits, c.bytelog_map_fsyncs), (1, 0), "{c:?}");
    // bytelog=off: the baseline commits every time
    let (_f, off, ino, _) = setup(
        MountOptions {
            bytelog: false,
            ..opts()
        },
        16 * BS,
    );
    let c = off.counters();
    off.write(ino, 100, b"small").expect("write");
    off.fsync(ino, false).expect("fsync");
    assert_eq!(off.counters().since(&c).commits, 1);
    assert_eq!(off.counters().since(&c).bytelog_fsyncs, 0);
}

#[test]
fn appends_are_served_by_records_and_survive_a_power_cut() {
    // issue 43: an fsync after an append (new blocks) writes allocation, whole-block and
    // slot records, no transaction; a power cut keeps every acknowledged byte and the image
    // is clean (the bitmaps say the new blocks are used)
    // by default an append's fsync commits
    let (_f, fs, ino, _) = setup(opts(), 3 * BS + 100);
    let c0 = fs.counters();
    fs.write(ino, 3 * BS as u64 + 100, &[1; BS])
        .expect("append");
    fs.fsync(ino, false).expect("fsync");
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_map_fsyncs), (1, 0), "{c:?}");
    let (fault, fs, ino, mut model) = setup(grow(), 3 * BS + 100);
    let c0 = fs.counters();
    let mut rng = StdRng::seed_from_u64(43);
    for round in 0..20 {
        let len = rng.gen_range(1..3 * BS);
        let b = 1 + round as u8;
        fs.write(ino, model.len() as u64, &vec![b; len])
            .expect("append");
        model.extend(std::iter::repeat_n(b, len));
        if round % 3 == 1 {
            // and an overwrite of an earlier appended block before the fsync
            let at = model.len() - len / 2 - 1;
            fs.write(ino, at as u64, b"over").expect("overwrite");
            model[at..at + 4].copy_from_slice(b"over");
        }
        fs.fsync(ino, false).expect("fsync");
    }
    let c = fs.counters().since(&c0);
    // each fsync placed its new blocks, except when the ring (128 KiB here) had no room
    // left: that one commits, which empties it (and one append after the commit fits in
    // the block the commit wrote: plain records)
    assert!(c.commits <= 1, "an append's fsync committed: {c:?}");
    assert_eq!(c.bytelog_fallbacks, c.commits, "{c:?}");
    assert!(c.bytelog_map_fsyncs >= 18, "{c:?}");
    assert!(c.bytelog_placed_blocks >= 20, "{c:?}");
    let size = fs.getattr(ino).expect("getattr").size;
    assert_eq!(size, model.len() as u64);
    survives(&fault, ino, &model);
    // records a commit retired, then new ones for blocks placed after it
    let (fault, fs, ino, mut model) = setup(grow(), BS + 10);
    let c1 = fs.counters();
    for round in 0..3u8 {
        fs.write(ino, model.len() as u64, &[round + 1; BS])
            .expect("append");
        model.extend_from_slice(&[round + 1; BS]);
        fs.fsync(ino, false).expect("fsync");
        if round == 1 {
            fs.sync().expect("sync");
        }
    }
    let c = fs.counters().since(&c1);
    assert_eq!((c.commits, c.bytelog_map_fsyncs), (1, 3), "{c:?}");
    survives(&fault, ino, &model);
}

#[test]
fn per_file_fsync_leaves_other_files_to_the_next_commit() {
    let (fault, fs, ino, mut model) = setup(opts(), 8 * BS);
    let other = fs
        .create(ROOT_INO, b"other", 0o644, common::ME)
        .expect("create")
        .ino;
    fs.write(other, 0, b"not yet").expect("write");
    fs.write(ino, 10, b"durable").expect("write");
    model[10..17].copy_from_slice(b"durable");
    fs.fsync(ino, false).expect("fsync");
    assert_eq!(fs.counters().bytelog_fsyncs, 1);
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    let (fs2, got) = recover(image, ino, model.len());
    assert!(got == model);
    assert!(
        fs2.lookup(ROOT_INO, b"other").is_err(),
        "another file's create became durable without a commit"
    );
    fs2.unmount().expect("unmount");
}

#[test]
fn times_are_logged_with_the_bytes() {
    let (fault, fs, ino, _) = setup(
        MountOptions {
            kernel_times: true,
            ..opts()
        },
        4 * BS,
    );
    fs.write(ino, 5, b"abc").expect("write");
    let when = moafs_core::fs::Timespec {
        sec: 1_700_000_000,
        nsec: 42,
    };
    fs.setattr(
        ino,
        &SetAttr {
            mtime: Some(moafs_core::fs::TimeOrNow::At(when)),
            ..Default::default()
        },
    )
    .expect("setattr");
    let c0 = fs.counters();
    fs.fsync(ino, false).expect("fsync");
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_fsyncs, c.bytelog_records), (0, 1, 2));
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    let (fs2, got) = recover(image, ino, 4 * BS);
    assert_eq!(&got[5..8], b"abc");
    let a = fs2.getattr(ino).expect("getattr");
    assert_eq!((a.mtime.sec, a.mtime.nsec), (when.sec, when.nsec));
    fs2.unmount().expect("unmount");
}

#[test]
fn whole_pages_without_a_cached_copy_are_compared_with_home() {
    // What the FUSE writeback cache sends: a whole page for a small change, for a block
    // the engine does not hold (reads do not fill its cache).
    let (fault, fs, ino, mut model) = setup(opts(), 8 * BS);
    fs.drop_caches().expect("drop caches");
    let mut page = model[2 * BS..3 * BS].to_vec();
    page[300..310].copy_from_slice(b"0123456789");
    fs.write(ino, 2 * BS as u64, &page).expect("write");
    model[2 * BS..3 * BS].copy_from_slice(&page);
    let c0 = fs.counters();
    fs.fsync(ino, true).expect("fsync");
    let c = fs.counters().since(&c0);
    assert_eq!(c.commits, 0);
    assert_eq!(c.bytelog_home_reads, 1);
    // the 10 bytes at 300 lie in one 128-byte unit: one record of 128 bytes, and one of the
    // times when the coarse clock moved since the setup's commit wrote them
    assert_eq!(c.bytelog_data_bytes, 128, "{c:?}");
    assert!((1..=2).contains(&c.bytelog_records), "{c:?}");
    survives(&fault, ino, &model);
}

#[test]
fn a_page_read_before_its_partial_write_is_kept_for_the_comparison() {
    // What the kernel does for a partial write into a page it does not hold: it reads the
    // page (one whole block), changes it and later writes it back whole.
    let (fault, fs, ino, mut model) = setup(opts(), 8 * BS);
    fs.drop_caches().expect("drop caches");
    let mut page = fs.read(ino, 3 * BS as u64, BS as u32).expect("read");
    assert!(page == model[3 * BS..4 * BS]);
    page[1000..1004].copy_from_slice(b"abcd");
    fs.write(ino, 3 * BS as u64, &page).expect("write");
    model[3 * BS..4 * BS].copy_from_slice(&page);
    let c0 = fs.counters();
    fs.fsync(ino, true).expect("fsync");
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_home_reads), (0, 0), "{c:?}");
    assert_eq!(c.bytelog_data_bytes, 128);
    // a larger read (readahead) is not kept
    fs.drop_caches().expect("drop caches");
    fs.read(ino, 0, 4 * BS as u32).expect("read");
    fs.write(ino, BS as u64, &model[BS..2 * BS]).expect("write");
    let c0 = fs.counters();
    fs.fsync(ino, true).expect("fsync");
    assert_eq!(fs.counters().since(&c0).bytelog_home_reads, 1);
    survives(&fault, ino, &model);
}

#[test]
fn concurrent_fsyncs_share_a_batch_and_all_survive() {
    // four writers, each updating its own durable file with an fsync after every update, on
    // a device whose flush takes a millisecond: fsyncs that arrive while a batch is being
    // written are served together by the next one
    let mem = common::new_dev(64 << 20);
    let fault = Arc::new(FaultDevice::new(
        mem as Arc<dyn BlockDevice>,
        FaultConfig::default(),
    ));
    let slow = Arc::new(common::Slow {
        inner: fault.clone() as Arc<dyn BlockDevice>,
        read: std::time::Duration::ZERO,
        flush: std::time::Duration::from_millis(1),
    });
    let fs = Arc::new(Fs::mount(slow as Arc<dyn BlockDevice>, opts()).expect("mount"));
    let mut files = Vec::new();
    for k in 0..4u8 {
        let ino = fs
            .create(ROOT_INO, &[b'f', b'0' + k], 0o644, common::ME)
            .expect("create")
            .ino;
        let data = vec![k; 8 * BS];
        fs.write(ino, 0, &data).expect("write");
        files.push((ino, data));
    }
    fs.sync().expect("sync");
    let c0 = fs.counters();
    let threads: Vec<_> = files
        .into_iter()
        .enumerate()
        .map(|(k, (ino, mut model))| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(k as u64);
                for _ in 0..50 {
                    let len = rng.gen_range(1..200);
                    let off = rng.gen_range(0..model.len() - len);
                    let b: u8 = rng.gen();
                    fs.write(ino, off as u64, &vec![b; len]).expect("write");
                    model[off..off + len].fill(b);
                    fs.fsync(ino, true).expect("fsync");
                }
                (ino, model)
            })
        })
        .collect();
    let models: Vec<(u64, Vec<u8>)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_fsyncs), (0, 200), "{c:?}");
    assert!(
        c.bytelog_batches < 190,
        "fsyncs did not share batches: {} batches for 200 fsyncs",
        c.bytelog_batches
    );
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    let dev = Arc::new(MemDevice::from_bytes(image));
    let fs2 = Fs::mount(dev as Arc<dyn BlockDevice>, opts()).expect("mount");
    for (ino, model) in models {
        assert!(fs2.read(ino, 0, model.len() as u32).expect("read") == model);
    }
    fs2.unmount().expect("unmount");
}

#[test]
fn the_log_wraps_and_commits_when_full() {
    let (fault, fs, ino, mut model) = setup(opts(), 64 * BS);
    let sb = fs.superblock();
    let sectors = sb.bytelog_blocks as u64 * (BS as u64 / 512);
    let mut rng = StdRng::seed_from_u64(7);
    let c0 = fs.counters();
    // more fsyncs than the log has sectors: commits empty it, batches wrap
    for _ in 0..(sectors * 3) {
        let off = rng.gen_range(0..model.len() - 64);
        let b: u8 = rng.gen();
        fs.write(ino, off as u64, &[b; 64]).expect("write");
        model[off..off + 64].fill(b);
        fs.fsync(ino, true).expect("fsync");
    }
    let c = fs.counters().since(&c0);
    assert!(c.commits >= 2, "a full log did not commit: {c:?}");
    assert!(c.bytelog_fsyncs > sectors, "{c:?}");
    survives(&fault, ino, &model);
}

#[test]
fn recovery_then_more_updates_then_another_crash() {
    // The floor written at mount after replay: records of the first life are not applied
    // again over the second life's committed bytes.
    let (fault, fs, ino, mut model) = setup(opts(), 8 * BS);
    fs.write(ino, 100, &[1u8; 50]).expect("write");
    model[100..150].fill(1);
    fs.fsync(ino, true).expect("fsync");
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    drop(fs);
    let mem = Arc::new(MemDevice::from_bytes(image));
    let fault2 = Arc::new(FaultDevice::new(
        mem as Arc<dyn BlockDevice>,
        FaultConfig::default(),
    ));
    let fs2 = Fs::mount(fault2.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
    assert_eq!(fs2.read(ino, 100, 50).expect("read"), vec![1u8; 50]);
    fs2.write(ino, 100, &[2u8; 50]).expect("write");
    model[100..150].fill(2);
    fs2.sync().expect("sync"); // a commit: the second life's bytes are home
                               // (an old record replayed over newer bytes would fail this)
    survives(&fault2, ino, &model);
}

#[test]
fn journal_modes_and_writeback() {
    for (mode, served) in [
        (JournalMode::Ordered, true),
        (JournalMode::Data, true),
        (JournalMode::Writeback, false),
    ] {
        let (fault, fs, ino, mut model) = setup(
            MountOptions {
                journal: mode,
                ..opts()
            },
            8 * BS,
        );
        fs.write(ino, 4000, &[3u8; 200]).expect("write");
        model[4000..4200].fill(3);
        fs.fsync(ino, false).expect("fsync");
        assert_eq!(fs.counters().bytelog_fsyncs == 1, served, "{mode:?}");
        survives(&fault, ino, &model);
    }
}

mod tier {
    use super::*;
    use moafs_core::device::{FaultNvm, MemNvm, NvmCut, NvmModel};

    const PATH: &str = "/dev/shm/the-tier";

    fn with_tier(nvm: &Arc<FaultNvm>) -> Option<(Arc<dyn Nvm>, String)> {
        Some((nvm.clone() as Arc<dyn Nvm>, PATH.to_string()))
    }

    /// A durable file of `len` bytes on a fault device, mounted with a fault tier of
    /// `tier_size` bytes.
    fn setup_tier(
        len: usize,
        tier_size: u64,
    ) -> (Arc<FaultDevice>, Arc<FaultNvm>, Fs, u64, Vec<u8>) {
        let nvm = Arc::new(FaultNvm::new(tier_size));
        let (fault, fs, ino, data) = setup_with(opts(), len, with_tier(&nvm));
        (fault, nvm, fs, ino, data)
    }

    #[test]
    fn small_batches_go_to_the_tier_without_a_device_flush_and_survive() {
        let (fault, nvm, fs, ino, mut model) = setup_tier(32 * BS, 1 << 20);
        let (c0, d0) = (fs.counters(), fs.device_counters());
        updates(&fs, ino, &mut model, 100, 200, 3);
        let (c, d) = (fs.counters().since(&c0), fs.device_counters());
        assert_eq!(
            (c.commits, c.bytelog_fsyncs, c.tier_batches),
            (0, 100, 100),
            "{c:?}"
        );
        assert_eq!(c.bytelog_sectors, 0);
        assert_eq!(
            d.flushes, d0.flushes,
            "an fsync served by the tier flushed the device"
        );
        assert_eq!(d.writes, d0.writes);
        // power cut: the device drops what it has not flushed, the tier what it has not
        // persisted (nothing: every batch was persisted before its fsync returned)
        let image = fault.power_cut(CutMode::DropAll).expect("image");
        let tier_img = nvm.crash_image(NvmCut::DropAll);
        let dev = Arc::new(MemDevice::from_bytes(image));
        // without the tier: refused, naming it
        let err = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts())
            .err()
            .expect("a mount without the tier must fail")
            .to_string();
        assert!(err.contains(PATH), "{err}");
        let err = moafs_core::fsck::fsck(dev.as_ref(), false)
            .expect_err("fsck without the tier must fail")
            .to_string();
        assert!(err.contains(PATH), "{err}");
        // with another tier: refused
        let other = Arc::new(MemNvm::new(1 << 20, NvmModel::None));
        let err = Fs::mount_with_tier(
            dev.clone() as Arc<dyn BlockDevice>,
            Some((other as Arc<dyn Nvm>, "/elsewhere".into())),
            opts(),
        )
        .err()
        .expect("a mount with another tier must fail")
        .to_string();
        assert!(err.contains("not this file system's tier"), "{err}");
        // with it: fsck clean, every acknowledged byte back
        let t = Arc::new(MemNvm::from_bytes(tier_img, NvmModel::None));
        let r = moafs_core::fsck::fsck_with(dev.as_ref(), false, Some(t.as_ref())).expect("fsck");
        assert!(r.errors.is_empty(), "{:#?}", r.errors);
        let fs2 = Fs::mount_with_tier(
            dev.clone() as Arc<dyn BlockDevice>,
            Some((t.clone() as Arc<dyn Nvm>, PATH.into())),
            opts(),
        )
        .expect("mount with the tier");
        assert!(fs2.read(ino, 0, model.len() as u32).expect("read") == model);
        fs2.unmount().expect("unmount");
        // cleanly unmounted: a mount without the tier is fine now, and forgets it
        let fs3 = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
        assert!(!fs3.superblock().has_nvm());
        assert!(fs3.read(ino, 0, model.len() as u32).expect("read") == model);
        fs3.unmount().expect("unmount");
    }

    #[test]
    fn a_full_tier_spills_to_the_device_log_and_a_commit_empties_both() {
        // 64 KiB tier: 60 KiB of ring, ~150 batches of ~400 bytes
        let (fault, nvm, fs, ino, mut model) = setup_tier(32 * BS, 64 << 10);
        let c0 = fs.counters();
        updates(&fs, ino, &mut model, 400, 200, 5);
        let c = fs.counters().since(&c0);
        assert!(c.tier_spills > 0, "{c:?}");
        assert!(c.tier_batches > 0 && c.bytelog_sectors > 0, "{c:?}");
        let image = fault.power_cut(CutMode::DropAll).expect("image");
        let dev = Arc::new(MemDevice::from_bytes(image));
        let t = Arc::new(MemNvm::from_bytes(
            nvm.crash_image(NvmCut::DropAll),
            NvmModel::None,
        ));
        let fs2 = Fs::mount_with_tier(
            dev as Arc<dyn BlockDevice>,
            Some((t as Arc<dyn Nvm>, PATH.into())),
            opts(),
        )
        .expect("mount");
        assert!(fs2.read(ino, 0, model.len() as u32).expect("read") == model);
        fs2.unmount().expect("unmount");
    }

    #[test]
    fn a_tier_of_another_file_system_is_refused() {
        let (_f, nvm, fs, _, _) = setup_tier(4 * BS, 1 << 20);
        fs.unmount().expect("unmount");
        let other = common::new_dev(16 << 20);
        let err = Fs::mount_with_tier(other as Arc<dyn BlockDevice>, with_tier(&nvm), opts())
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("another file system"), "{err}");
    }
}

/// Byte logging at write-back (`homeless.rs`): commits log small overwrites instead of
/// writing the blocks home.
mod writeback {
    use super::*;

    fn opts() -> MountOptions {
        MountOptions {
            bytelog_writeback: true,
            ..super::opts()
        }
    }
    use moafs_core::format::FEATURE_BYTELOG_WB;

    /// A power cut now (without stopping the device): after recovery the file holds `model`.
    fn survives_now(fault: &FaultDevice, ino: u64, model: &[u8]) {
        let image = fault.crash_image(CutMode::DropAll).expect("image");
        let (fs2, got) = recover(image, ino, model.len());
        assert!(got == model, "an update a commit made durable was lost");
        fs2.unmount().expect("unmount");
    }

    /// A change of 1..300 bytes inside each of `blocks`, applied to `model` too.
    fn touch(fs: &Fs, ino: u64, model: &mut [u8], blocks: &[usize], seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        for &b in blocks {
            let len = rng.gen_range(1..300);
            let off = b * BS + rng.gen_range(0..BS - len);
            let v: u8 = rng.gen();
            fs.write(ino, off as u64, &vec![v; len]).expect("write");
            model[off..off + len].fill(v);
        }
    }

    #[test]
    fn commits_log_small_overwrites_and_the_blocks_go_home_later() {
        let (fault, fs, ino, mut model) = setup(opts(), 64 * BS);
        let blocks: Vec<usize> = (0..40).collect();
        let c0 = fs.counters();
        touch(&fs, ino, &mut model, &blocks, 1);
        fs.sync().expect("sync");
        let c = fs.counters().since(&c0);
        assert_eq!(c.bytelog_wb_blocks, 40, "{c:?}");
        assert_eq!(c.bytelog_wb_batches, 1, "{c:?}");
        assert_eq!(
            (c.data_blocks_written, c.data_blocks_journaled),
            (0, 0),
            "a logged block was written: {c:?}"
        );
        survives_now(&fault, ino, &model);
        // Changed again: logged again, still not home.
        let c1 = fs.counters();
        touch(&fs, ino, &mut model, &blocks[..10], 2);
        fs.sync().expect("sync");
        let c = fs.counters().since(&c1);
        assert_eq!(
            (c.bytelog_wb_blocks, c.data_blocks_written),
            (10, 0),
            "{c:?}"
        );
        survives_now(&fault, ino, &model);
        assert_eq!(fs.read(ino, 0, model.len() as u32).unwrap(), model);
        // Unmount writes every homeless block home and leaves no commit batch to read.
        let c2 = fs.counters();
        fs.unmount().expect("unmount");
        let c = fs.counters().since(&c2);
        assert_eq!(
            (c.bytelog_cleanings, c.bytelog_cleaned_blocks),
            (1, 40),
            "{c:?}"
        );
        let image = fault.crash_image(CutMode::DropAll).expect("image");
        let dev = Arc::new(MemDevice::from_bytes(image));
        let sb = moafs_core::recovery::read_superblock(dev.as_ref()).expect("superblock");
        assert_eq!(sb.bytelog_first, 0);
        assert_eq!(sb.features_incompat & FEATURE_BYTELOG_WB, 0);
        let live = moafs_core::recovery::read_live_records(dev.as_ref(), &sb, None).expect("read");
        assert!(live.records.is_empty(), "{live:?}");
        let (fs2, got) = recover(dev.snapshot(), ino, model.len());
        assert!(got == model, "a logged update was lost at unmount");
        fs2.unmount().expect("unmount");
    }

    #[test]
    fn a_block_written_home_or_freed_is_not_changed_by_its_old_records() {
        let (fault, fs, ino, mut model) = setup(opts(), 16 * BS);
        // Blocks 0 and 1 homeless; block 0 keeps the log's records alive (the pin).
        touch(&fs, ino, &mut model, &[0, 1], 3);
        fs.sync().expect("sync");
        // Block 1 rewritten whole: home through the transaction, its records made void.
        let c0 = fs.counters();
        let whole = vec![0x5au8; BS];
        fs.write(ino, BS as u64, &whole).expect("write");
        model[BS..2 * BS].copy_from_slice(&whole);
        fs.sync().expect("sync");
        let c = fs.counters().since(&c0);
        assert_eq!(c.bytelog_voids, 1, "{c:?}");
        survives_now(&fault, ino, &model);
        // Truncated (its blocks freed, block 1's home among them) and the space reused by
        // another file: the old records must not reach the new file.
        touch(&fs, ino, &mut model, &[1], 4);
        fs.sync().expect("sync");
        fs.setattr(
            ino,
            &SetAttr {
                size: Some(BS as u64),
                ..Default::default()
            },
        )
        .expect("truncate");
        model.truncate(BS);
        fs.sync().expect("sync");
        fs.sync().expect("sync"); // the freed blocks are allocatable after two commits
        let g = fs
            .create(ROOT_INO, b"g", 0o644, common::ME)
            .expect("create")
            .ino;
        let gdata: Vec<u8> = (0..15 * BS).map(|i| (i % 13) as u8 + 1).collect();
        fs.write(g, 0, &gdata).expect("write");
        fs.sync().expect("sync");
        assert!(fs.counters().since(&c0).bytelog_voids >= 2);
        let image = fault.crash_image(CutMode::DropAll).expect("image");
        let (fs2, got) = recover(image, ino, model.len());
        assert!(got == model, "f changed");
        assert!(
            fs2.read(g, 0, gdata.len() as u32).unwrap() == gdata,
            "an old record reached a reused block"
        );
        fs2.unmount().expect("unmount");
    }

    #[test]
    fn homeless_blocks_are_bounded_and_cleaning_takes_them_home() {
        let (fault, fs, ino, mut model) = setup(opts(), 1024 * BS);
        let c0 = fs.counters();
        for round in 0..16u64 {
            let blocks: Vec<usize> = (0..64).map(|k| (round as usize * 64 + k) % 1024).collect();
            touch(&fs, ino, &mut model, &blocks, 10 + round);
            fs.sync().expect("sync");
            fs.check_invariants().expect("invariants");
        }
        let c = fs.counters().since(&c0);
        assert!(c.bytelog_wb_blocks > 0, "{c:?}");
        assert!(
            c.bytelog_cleanings > 0,
            "the homeless blocks were never cleaned: {c:?}"
        );
        survives_now(&fault, ino, &model);
        fs.unmount().expect("unmount");
        survives_now(&fault, ino, &model);
    }

    #[test]
    fn a_block_changed_for_the_first_time_since_it_was_cached_goes_home() {
        let (fault, fs, ino, mut model) = setup(opts(), 16 * BS);
        fs.unmount().expect("unmount");
        drop(fs);
        // a fresh mount: nothing cached, nothing written home by it yet
        let fs = Fs::mount(fault.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
        let c0 = fs.counters();
        touch(&fs, ino, &mut model, &[0, 1], 6);
        fs.sync().expect("sync");
        let c = fs.counters().since(&c0);
        let home =
            |c: &moafs_core::fs::EngineCounters| c.data_blocks_written + c.data_blocks_journaled;
        assert_eq!((c.bytelog_wb_blocks, home(&c)), (0, 2), "{c:?}");
        // written home once while cached: now it is being rewritten, and logged
        touch(&fs, ino, &mut model, &[0, 1], 7);
        fs.sync().expect("sync");
        let c = fs.counters().since(&c0);
        assert_eq!((c.bytelog_wb_blocks, home(&c)), (2, 2), "{c:?}");
        survives_now(&fault, ino, &model);
    }

    #[test]
    fn a_block_an_fsync_logged_stays_homeless_without_a_new_record() {
        let (fault, fs, ino, mut model) = setup(opts(), 16 * BS);
        touch(&fs, ino, &mut model, &[3], 8);
        fs.fsync(ino, true).expect("fsync"); // the byte log, on the device (no tier)
        let c0 = fs.counters();
        fs.sync().expect("sync");
        let c = fs.counters().since(&c0);
        assert_eq!(
            (c.bytelog_wb_blocks, c.bytelog_wb_batches, c.bytelog_records),
            (1, 0, 0),
            "{c:?}"
        );
        assert_eq!(c.data_blocks_written + c.data_blocks_journaled, 0, "{c:?}");
        survives_now(&fault, ino, &model);
    }

    #[test]
    fn by_default_commits_keep_out_only_blocks_an_fsync_logged() {
        let (fault, fs, ino, mut model) = setup(super::opts(), 16 * BS);
        let home =
            |c: &moafs_core::fs::EngineCounters| c.data_blocks_written + c.data_blocks_journaled;
        for seed in [20, 21] {
            let c0 = fs.counters();
            touch(&fs, ino, &mut model, &[0, 1], seed);
            fs.sync().expect("sync");
            let c = fs.counters().since(&c0);
            assert_eq!((c.bytelog_wb_blocks, home(&c)), (0, 2), "{c:?}");
        }
        let c0 = fs.counters();
        touch(&fs, ino, &mut model, &[3], 22);
        fs.fsync(ino, true).expect("fsync");
        fs.sync().expect("sync");
        let c = fs.counters().since(&c0);
        assert_eq!(
            (c.bytelog_wb_blocks, c.bytelog_wb_batches, home(&c)),
            (1, 0, 0),
            "{c:?}"
        );
        survives_now(&fault, ino, &model);
    }

    #[test]
    fn bytelog_off_writes_every_block_home() {
        let (_fault, fs, ino, mut model) = setup(
            MountOptions {
                bytelog: false,
                ..opts()
            },
            16 * BS,
        );
        let c0 = fs.counters();
        touch(&fs, ino, &mut model, &[0, 1, 2], 5);
        fs.sync().expect("sync");
        let c = fs.counters().since(&c0);
        assert_eq!(c.bytelog_wb_blocks, 0);
        assert_eq!(c.data_blocks_written + c.data_blocks_journaled, 3, "{c:?}");
    }
}

fn set_size(fs: &Fs, ino: u64, size: u64) {
    let s = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &s).expect("truncate");
}

#[test]
fn attributes_go_as_one_record_and_survive_a_power_cut() {
    // a file that ends inside its last block
    let (fault, fs, ino, mut model) = setup(opts(), 5 * BS + 100);
    let c0 = fs.counters();
    // appends inside the last block (what a log file gets): the size grows, no block is
    // allocated
    for k in 0..10u8 {
        let bytes = vec![b'a' + k; 37];
        fs.write(ino, model.len() as u64, &bytes).expect("append");
        model.extend_from_slice(&bytes);
        fs.fsync(ino, true).expect("fdatasync");
    }
    // chmod with the set-user-ID bit, chown
    let change = SetAttr {
        mode: Some(0o4751),
        uid: Some(1000),
        gid: Some(100),
        ..Default::default()
    };
    fs.setattr(ino, &change).expect("setattr");
    fs.fsync(ino, false).expect("fsync");
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_fsyncs), (0, 11), "{c:?}");
    // each fsync one sector: the appended bytes and the attribute record
    assert_eq!(c.bytelog_sectors, 11, "{c:?}");
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    let (fs2, got) = recover(image, ino, model.len() + BS);
    assert!(got == model, "an acknowledged append was lost");
    let a = fs2.getattr(ino).expect("getattr");
    assert_eq!(
        (a.size, a.perm, a.uid, a.gid),
        (model.len() as u64, 0o4751, 1000, 100)
    );
    fs2.unmount().expect("unmount");
}

#[test]
fn sizes_that_need_no_new_block_are_logged_and_what_they_expose_reads_zero() {
    let (fault, fs, ino, mut model) = setup(opts(), 4 * BS + 1000);
    let c0 = fs.counters();
    // shrink inside the last block: its tail is zeroed, no block is freed
    set_size(&fs, ino, 4 * BS as u64 + 10);
    model.truncate(4 * BS + 10);
    fs.fsync(ino, false).expect("fsync");
    // grow into a hole: the zeroed tail and the hole read as zeros
    set_size(&fs, ino, 1 << 20);
    model.resize(1 << 20, 0);
    fs.fsync(ino, false).expect("fsync");
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_fsyncs), (0, 2), "{c:?}");
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    let (fs2, got) = recover(image, ino, model.len() + BS);
    assert_eq!(fs2.getattr(ino).expect("getattr").size, 1 << 20);
    assert!(got == model, "the size or the bytes it exposes are wrong");
    fs2.unmount().expect("unmount");
    // an append that needs a block still commits (`fsync_commits_what_the_byte_log_cannot_take`)
}

#[test]
fn a_timer_commit_after_a_logged_size_does_not_write_the_older_one() {
    // Young data (`aging.rs`) is held back by the timer's commits with the size from before
    // it. An fsync the byte log served made that data's size durable: the next timer commit
    // must not write the older size over it (and move the log's floor past the record).
    let o = MountOptions {
        flush_interval_ms: 1,
        ..opts()
    };
    let (fault, fs, ino, mut model) = setup(o, 5 * BS + 100);
    fs.drop_caches().expect("drop caches");
    // a whole page without a cached copy, the same bytes and zeros after them: the size
    // grows to the end of the block, and the comparison with home finds nothing to log
    let mut page = model[5 * BS..].to_vec();
    page.resize(BS, 0);
    fs.write(ino, 5 * BS as u64, &page).expect("write");
    model.resize(6 * BS, 0);
    let c0 = fs.counters();
    fs.fsync(ino, true).expect("fdatasync");
    let c = fs.counters().since(&c0);
    assert_eq!(
        (c.commits, c.bytelog_fsyncs, c.bytelog_records),
        (0, 1, 1),
        "{c:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(fs.tick().expect("tick"), "the timer committed nothing");
    assert_eq!(fs.counters().since(&c0).commits, 1);
    let image = fault.power_cut(CutMode::DropAll).expect("image");
    let (fs2, got) = recover(image, ino, model.len() + BS);
    assert_eq!(fs2.getattr(ino).expect("getattr").size, 6 * BS as u64);
    assert!(got == model);
    fs2.unmount().expect("unmount");
}

#[test]
fn a_page_written_back_to_the_end_of_file_logs_only_what_changed() {
    // The kernel's writeback sends an appended log's last page from its start to the end
    // of file: 3,037 bytes of which only the last 37 are new.
    let (fault, fs, ino, mut model) = setup(opts(), 5 * BS + 3000);
    let mut range = model[5 * BS..].to_vec();
    range.extend_from_slice(&[b'z'; 37]);
    let c0 = fs.counters();
    fs.write(ino, 5 * BS as u64, &range).expect("write");
    model.extend_from_slice(&[b'z'; 37]);
    fs.fsync(ino, true).expect("fdatasync");
    let c = fs.counters().since(&c0);
    assert_eq!((c.commits, c.bytelog_fsyncs), (0, 1), "{c:?}");
    // bytes 3000..3037 lie in one 128-byte unit: one record of it, not the whole block
    assert_eq!(
        (c.bytelog_whole_blocks, c.bytelog_data_bytes),
        (0, 128),
        "{c:?}"
    );
    survives(&fault, ino, &model);
}
