//! Lazy checkpoints (`fs/checkpoint.rs`): a commit writes metadata to the journal only; home
//! writes wait for a checkpoint, each block once; readers see the newest images meanwhile;
//! revoke records keep replay from writing old images over reused or rewritten blocks.

mod common;

use common::ME;
use moafs_core::device::{BlockDevice, DevResult, DeviceCounters, MemDevice};
use moafs_core::fs::{JournalMode, MountOptions, ROOT_INO};
use moafs_core::Fs;
use std::sync::{Arc, Mutex};

/// A device that logs its writes (first block, blocks) and flushes (`None`) in order.
struct Logging {
    inner: Arc<MemDevice>,
    log: Mutex<Vec<Option<(u64, u64)>>>,
    /// Armed with a block range: the image as it is just before the first write that starts
    /// in it (a power cut there) is kept in `cut`.
    cut_at: Mutex<Option<std::ops::Range<u64>>>,
    cut: Mutex<Option<Vec<u8>>>,
}

impl Logging {
    fn new(inner: Arc<MemDevice>) -> Arc<Logging> {
        Arc::new(Logging {
            inner,
            log: Mutex::new(Vec::new()),
            cut_at: Mutex::new(None),
            cut: Mutex::new(None),
        })
    }
    /// Write requests that reached `block`.
    fn writes_of(&self, block: u64) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|w| covers(w, block)).count()
    }
}

fn covers(w: &Option<(u64, u64)>, b: u64) -> bool {
    w.is_some_and(|(f, n)| f <= b && b < f + n)
}

impl BlockDevice for Logging {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.writev_at(offset, &[buf])
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let mut armed = self.cut_at.lock().unwrap();
        if armed.as_ref().is_some_and(|r| r.contains(&(offset / 4096))) {
            *armed = None;
            *self.cut.lock().unwrap() = Some(self.inner.snapshot());
        }
        drop(armed);
        self.log
            .lock()
            .unwrap()
            .push(Some((offset / 4096, len.div_ceil(4096))));
        self.inner.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        self.log.lock().unwrap().push(None);
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.inner.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }
}

/// A fresh image of `mb` MiB with a journal of `journal` blocks (None: mkfs's default).
fn image_with(mb: u64, journal: Option<u32>) -> Arc<MemDevice> {
    common::new_dev_journal(mb << 20, journal)
}

fn opts() -> MountOptions {
    MountOptions {
        flush_interval_ms: u64::MAX,
        checkpoint_interval_ms: u64::MAX,
        ..MountOptions::default()
    }
}

fn image(mb: u64) -> Arc<MemDevice> {
    image_with(mb, None)
}

/// The home block of inode `ino`'s slot in the inode table.
fn itable_block(fs: &Fs, ino: u64) -> u64 {
    fs.geometry().inode_location(ino).0
}

#[test]
fn metadata_waits_in_the_journal_and_goes_home_once() {
    let mem = image(64);
    let dev = Logging::new(mem.clone());
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
    let mut inos = Vec::new();
    for i in 0..20u8 {
        let a = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, ME)
            .expect("create");
        fs.write(a.ino, 0, &[i; 100]).expect("write");
        fs.fsync(a.ino, false).expect("fsync");
        inos.push(a.ino);
    }
    let c = fs.counters();
    assert!(c.commits >= 20, "{c:?}");
    // after the first, a commit's inode-table, bitmap, header and directory blocks go as
    // delta records against their images in the journal: a few journal blocks each
    assert!(c.delta_blocks >= 3 * 19, "{c:?}");
    assert!(
        c.journal_blocks_written <= 6 * c.journal_commits,
        "{} journal blocks for {} transactions",
        c.journal_blocks_written,
        c.journal_commits
    );
    let tb = itable_block(&fs, inos[0]);
    assert_eq!(
        dev.writes_of(tb),
        0,
        "the inode table went home before a checkpoint"
    );
    assert_eq!(c.checkpoints, 0);
    // Readers see the newest images: the inode table and the directory re-read from the
    // device (through the view) after the caches are dropped.
    fs.drop_caches().expect("drop caches");
    for (i, ino) in inos.iter().enumerate() {
        let a = fs
            .lookup(ROOT_INO, format!("f{i}").as_bytes())
            .expect("lookup after drop");
        assert_eq!((a.ino, a.size), (*ino, 100));
        assert_eq!(fs.read(*ino, 0, 200).expect("read"), vec![i as u8; 100]);
    }
    fs.checkpoint().expect("checkpoint");
    assert_eq!(dev.writes_of(tb), 1, "each waiting block goes home once");
    assert_eq!(fs.counters().checkpoints, 1);
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&mem);
    let fs = common::mount(&mem);
    for (i, ino) in inos.iter().enumerate() {
        assert_eq!(fs.read(*ino, 0, 200).expect("read"), vec![i as u8; 100]);
    }
}

/// Creates files `f0` .. `f{n-1}` in `d`, file i holding i's bytes 300 times, each written
/// and fsynced; after file i with `i % every == at`, unlinks file i - 1.
fn fsynced_files(fs: &Fs, d: u64, n: u32, every: u32, at: u32) {
    for i in 0..n {
        let a = fs
            .create(d, format!("f{i}").as_bytes(), 0o644, ME)
            .expect("create");
        fs.write(a.ino, 0, &i.to_le_bytes().repeat(300))
            .expect("write");
        fs.fsync(a.ino, false).expect("fsync");
        if i % every == at {
            fs.unlink(d, format!("f{}", i - 1).as_bytes())
                .expect("unlink");
        }
    }
}

#[test]
fn a_crash_before_any_checkpoint_replays_every_transaction() {
    let mem = image_with(64, Some(4096));
    let fs = common::mount_with(&mem, opts());
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).expect("mkdir").ino;
    fsynced_files(&fs, d, 50, 7, 3);
    assert_eq!(
        fs.counters().checkpoints,
        0,
        "a journal of 16 MiB holds them"
    );
    fs.sync().expect("sync");
    // the power fails: the image as the device holds it now
    let crashed = Arc::new(MemDevice::from_bytes(mem.snapshot()));
    drop(fs);
    let r = moafs_core::fsck::fsck(crashed.as_ref(), false).expect("fsck -n runs");
    assert!(
        r.errors.is_empty(),
        "fsck -n of the crash image: {:#?}",
        r.errors
    );
    let fs = common::mount(&crashed);
    let d = fs.lookup(ROOT_INO, b"d").expect("d").ino;
    for i in 0..50u32 {
        let gone = i % 7 == 2 && i + 1 < 50;
        match fs.lookup(d, format!("f{i}").as_bytes()) {
            Ok(a) => {
                assert!(!gone, "f{i} was unlinked");
                assert_eq!(
                    fs.read(a.ino, 0, 2000).expect("read"),
                    i.to_le_bytes().repeat(300)
                );
            }
            Err(e) => assert!(gone, "f{i}: {e}"),
        }
    }
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&crashed);
}

/// A block the journal holds an image of is freed and reused for another file's data, or
/// rewritten in place past the journal's share: a replay must not bring the old image back.
#[test]
fn revoked_blocks_keep_their_new_contents_through_a_replay() {
    for mode in [JournalMode::Ordered, JournalMode::Data] {
        let mem = image(64);
        let fs = common::mount_with(
            &mem,
            MountOptions {
                journal: mode,
                bytelog: false,
                // per-file allocation from the group's start: the freed blocks come first
                cowrite: false,
                ..opts()
            },
        );
        // a file on disk, then overwritten: its blocks' new images go into the journal
        let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
        fs.write(a, 0, &[1u8; 16384]).expect("write");
        fs.fsync(a, false).expect("fsync");
        fs.write(a, 0, &[2u8; 16384]).expect("overwrite");
        fs.fsync(a, false).expect("fsync");
        let old = fs.block_map(a).expect("map");
        assert!(fs.counters().data_blocks_journaled >= 4);
        // freed, then (two commits later) reusable: a new file takes the blocks
        fs.unlink(ROOT_INO, b"a").expect("unlink");
        fs.sync().expect("sync");
        let c = fs.create(ROOT_INO, b"c", 0o644, ME).expect("create").ino;
        fs.fsync(c, false).expect("fsync");
        let b = fs.create(ROOT_INO, b"b", 0o644, ME).expect("create").ino;
        fs.write(b, 0, &[3u8; 16384]).expect("write");
        fs.fsync(b, false).expect("fsync");
        let new = fs.block_map(b).expect("map");
        let reused = new.iter().filter(|p| old.contains(p)).count();
        assert!(
            reused > 0,
            "{mode:?}: no block reused ({old:?} then {new:?})"
        );
        assert!(fs.counters().revokes > 0, "{mode:?}: no revoke record");
        assert_eq!(fs.counters().checkpoints, 0);
        let crashed = Arc::new(MemDevice::from_bytes(mem.snapshot()));
        drop(fs);
        let fs = common::mount(&crashed);
        let b = fs.lookup(ROOT_INO, b"b").expect("b").ino;
        assert_eq!(
            fs.read(b, 0, 16384).expect("read"),
            vec![3u8; 16384],
            "{mode:?}"
        );
        fs.unmount().expect("unmount");
        drop(fs);
        common::fsck_clean(&crashed);
    }
}

#[test]
fn an_overwrite_past_the_journal_share_goes_home_and_is_revoked() {
    let mem = image(64);
    let fs = common::mount_with(
        &mem,
        MountOptions {
            bytelog: false,
            ..opts()
        },
    );
    let share = fs.superblock().journal_blocks as usize / 4;
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    fs.write(a, 0, &vec![1u8; (share + 8) * 4096])
        .expect("write");
    fs.fsync(a, false).expect("fsync");
    // a small overwrite: journaled (ordered mode keeps overwrites atomic within a share)
    fs.write(a, 0, &[2u8; 8192]).expect("overwrite");
    fs.fsync(a, false).expect("fsync");
    let journaled = fs.counters().data_blocks_journaled;
    assert!(journaled >= 2);
    // a large one, longer than a quarter of the journal: one run home, the small one's
    // images revoked
    let big = vec![4u8; (share + 8) * 4096];
    fs.write(a, 0, &big).expect("big overwrite");
    fs.fsync(a, false).expect("fsync");
    assert!(fs.counters().revokes >= 2, "{:?}", fs.counters());
    let crashed = Arc::new(MemDevice::from_bytes(mem.snapshot()));
    drop(fs);
    let fs = common::mount(&crashed);
    assert_eq!(fs.read(a, 0, big.len() as u32).expect("read"), big);
}

#[test]
fn the_timer_writes_due_blocks_home() {
    let mem = image(64);
    let dev = Logging::new(mem.clone());
    let fs = Fs::mount(
        dev.clone() as Arc<dyn BlockDevice>,
        MountOptions {
            checkpoint_interval_ms: 500,
            ..opts()
        },
    )
    .expect("mount");
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create");
    fs.fsync(a.ino, false).expect("fsync");
    let tb = itable_block(&fs, a.ino);
    assert!(!fs.tick().expect("tick"), "nothing is due yet");
    assert_eq!(dev.writes_of(tb), 0);
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(fs.tick().expect("tick"), "the checkpoint is due");
    assert_eq!(dev.writes_of(tb), 1);
    assert_eq!(fs.counters().checkpoints, 1);
    assert!(!fs.tick().expect("tick"), "nothing waits any more");
}

#[test]
fn a_small_journal_checkpoints_when_it_runs_short() {
    let mem = image_with(64, Some(64));
    let fs = common::mount_with(&mem, opts());
    for i in 0..200u32 {
        let a = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, ME)
            .expect("create");
        fs.fsync(a.ino, false).expect("fsync");
    }
    let c = fs.counters();
    assert!(c.checkpoints > 0 && c.checkpoints < c.commits / 4, "{c:?}");
    assert_eq!(c.journal_overflows, 0);
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&mem);
}

/// A journal that wraps many times between checkpoints: every write of a recorded run cut and
/// torn (`crashcheck`), in particular a transaction torn over the space of ones a checkpoint
/// has just written home. (Found by the recorded rename workload: the checkpoint wrote the
/// blocks home but the superblock at home still named an old replay floor, so a torn
/// transaction over that space left replay wanting a transaction it had destroyed.)
#[test]
fn a_torn_transaction_over_checkpointed_space_is_never_needed() {
    use moafs_check::crashcheck::{crashcheck, CheckOptions};
    use moafs_core::device::{RecordDevice, WriteLog};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log");
    let mem = image_with(16, Some(64));
    let rec = Arc::new(RecordDevice::create(mem, &path).expect("record"));
    let fs = Fs::mount(rec.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
    for round in 0..40u32 {
        let name = format!("f{}", round % 7);
        let a = fs.create(ROOT_INO, b"tmp", 0o644, ME).expect("create");
        // 2 KiB to 96 KiB: transactions of about 8 to 35 blocks (a small commit carries its
        // new data), so that one often does not fit before the journal's end
        let len = 512 + 6000 * (round as usize * 7 % 5);
        fs.write(a.ino, 0, &round.to_le_bytes().repeat(len))
            .expect("write");
        fs.fsync(a.ino, false).expect("fsync");
        fs.rename(
            ROOT_INO,
            b"tmp",
            ROOT_INO,
            name.as_bytes(),
            Default::default(),
        )
        .expect("rename");
        if round % 3 == 0 {
            fs.sync().expect("sync");
        }
    }
    let c = fs.counters();
    assert!(c.checkpoints >= 3, "{c:?}");
    fs.unmount().expect("unmount");
    drop(fs);
    rec.close().expect("close");
    let log = WriteLog::read_file(&path).expect("read log");
    let r = crashcheck(
        &log,
        &CheckOptions {
            states: 3000,
            seed: 7,
            jobs: 2,
            only_interval: None,
        },
        |_| {},
    )
    .expect("check");
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert!(r.states >= 1000, "{r:?}");
}

/// A small commit carries its new data in the transaction; when that transaction is too
/// large for the journal it is written in place — the data first and flushed, then the
/// metadata that points at it (else a crash could show a file over a freed block's bytes).
#[test]
fn a_small_commit_too_large_for_the_journal_writes_its_data_first() {
    let mem = image_with(64, Some(32));
    let dev = Logging::new(mem.clone());
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    // 600 inodes over about 40 inode-table blocks, all changed by one commit that also
    // carries a's two new blocks: more metadata than the 32-block journal holds
    let many: Vec<u64> = (0..600)
        .map(|i| {
            fs.create(ROOT_INO, format!("m{i}").as_bytes(), 0o644, ME)
                .expect("create")
                .ino
        })
        .collect();
    fs.sync().expect("sync");
    dev.log.lock().unwrap().clear();
    let before = fs.counters();
    for ino in &many {
        let set = moafs_core::fs::SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        fs.setattr(*ino, &set).expect("chmod");
    }
    let data = vec![7u8; 2 * 4096];
    fs.write(a, 0, &data).expect("write");
    // (a sync: with `-o bytelog_grow=on` an fsync of `a` alone would be served by records;
    // by default it commits as the sync does)
    fs.sync().expect("sync");
    let c = fs.counters().since(&before);
    assert_eq!(c.journal_overflows, 1, "{c:?}");
    assert_eq!(c.data_blocks_journaled, 2, "{c:?}");
    let blocks = fs.block_map(a).expect("map");
    let itable = itable_block(&fs, a);
    let log = dev.log.lock().unwrap().clone();
    let last_data = log
        .iter()
        .rposition(|w| blocks.iter().any(|b| covers(w, *b)))
        .expect("the data was written");
    let inode = log
        .iter()
        .position(|w| covers(w, itable))
        .expect("the inode was written");
    assert!(
        log[last_data..inode].contains(&None),
        "no flush between the data and the inode pointing at it: {log:?}"
    );
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&mem);
    let fs = common::mount(&mem);
    assert_eq!(fs.read(a, 0, data.len() as u32).expect("read"), data);
}

/// A data block journaled whole, then changed a little by a commit that also checkpoints,
/// then overwritten in place past the journal's share by a commit whose transaction never
/// becomes durable: the block after replay is the committed one or the new one, never the
/// new one with the middle commit's bytes patched back in. (A delta against an image the
/// checkpoint took home would be patched onto whatever home holds; so a commit that
/// checkpoints sends every block whole. Found by review.)
#[test]
fn a_commit_that_checkpoints_sends_its_blocks_whole() {
    let mem = image(64);
    let dev = Logging::new(mem.clone());
    let fs = Fs::mount(
        dev.clone() as Arc<dyn BlockDevice>,
        MountOptions {
            bytelog: false,
            checkpoint_interval_ms: 2_000,
            ..opts()
        },
    )
    .expect("mount");
    let sb = fs.superblock();
    let share = sb.journal_blocks as usize / 4;
    let blocks = share + 16;
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    fs.write(a, 0, &vec![1u8; blocks * 4096]).expect("write");
    fs.fsync(a, false).expect("fsync");
    // block 5 overwritten whole: journaled (an overwrite within the share)
    fs.write(a, 5 * 4096, &[2u8; 4096]).expect("overwrite");
    fs.fsync(a, false).expect("fsync");
    std::thread::sleep(std::time::Duration::from_millis(2_100));
    // a few bytes of it, in a commit whose checkpoint is due
    let before = fs.counters();
    fs.write(a, 5 * 4096 + 100, &[3u8; 10])
        .expect("small overwrite");
    fs.fsync(a, false).expect("fsync");
    let c = fs.counters().since(&before);
    assert_eq!(c.checkpoints, 1, "{c:?}");
    let mut committed = vec![2u8; 4096];
    committed[100..110].fill(3);
    // the whole file again, one run longer than the share: home before its transaction,
    // which the power cut stops
    let start = sb.journal_start;
    *dev.cut_at.lock().unwrap() = Some(start..start + sb.journal_blocks as u64);
    fs.write(a, 0, &vec![4u8; blocks * 4096])
        .expect("big overwrite");
    fs.fsync(a, false).expect("fsync");
    assert_eq!(
        fs.counters().since(&before).checkpoints,
        1,
        "no second checkpoint"
    );
    let image = dev
        .cut
        .lock()
        .unwrap()
        .take()
        .expect("cut before the transaction");
    drop(fs);
    let crashed = Arc::new(MemDevice::from_bytes(image));
    let fs = common::mount(&crashed);
    let got = fs.read(a, 5 * 4096, 4096).expect("read");
    assert!(
        got == committed || got == vec![4u8; 4096],
        "block 5 after replay is neither the committed block nor the new one: {:?}",
        &got[90..120]
    );
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&crashed);
}

/// A small fsync's commit is a compact transaction (FORMAT §12: one header block with its
/// revokes and delta records inline, then its images, no commit block). A power cut after it
/// replays it; one that left a payload block unwritten (a torn transaction: its crc does not
/// match the header's) replays everything before it and nothing of it.
#[test]
fn small_fsyncs_are_compact_and_a_torn_one_is_not_replayed() {
    use moafs_core::format::FEATURE_JOURNAL_COMPACT;
    let mem = image_with(64, Some(4096));
    let dev = Logging::new(mem.clone());
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
    assert_ne!(
        fs.superblock().features_incompat & FEATURE_JOURNAL_COMPACT,
        0,
        "a writable mount says the journal may hold compact transactions"
    );
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).expect("mkdir").ino;
    fs.fsync(d, false).expect("fsync d");
    let before = fs.counters();
    let n = 30u32;
    fsynced_files(&fs, d, n, 5, 4);
    let c = fs.counters().since(&before);
    assert!(c.journal_commits >= n as u64, "{c:?}");
    assert_eq!(c.journal_compact, c.journal_commits, "{c:?}");
    // each: the header and the file's data block (metadata as inline delta records)
    assert!(
        c.journal_blocks_written <= c.journal_commits + c.data_blocks_journaled + 4,
        "{c:?}"
    );
    let last = dev
        .log
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find_map(|w| *w)
        .expect("a write");
    assert!(
        last.1 >= 2,
        "the last fsync's transaction: header and data {last:?}"
    );
    let whole = mem.snapshot();
    drop(fs);
    let expect = |fs: &Fs, upto: u32| {
        let d = fs.lookup(ROOT_INO, b"d").expect("d").ino;
        for i in 0..n {
            // (f28's unlink came after the last fsync: not durable)
            let gone = (i % 5 == 3 && i + 2 < n) || i >= upto;
            match fs.lookup(d, format!("f{i}").as_bytes()) {
                Ok(a) => {
                    assert!(!gone, "f{i} should not be there");
                    assert_eq!(
                        fs.read(a.ino, 0, 2000).expect("read"),
                        i.to_le_bytes().repeat(300)
                    );
                }
                Err(e) => assert!(gone, "f{i}: {e}"),
            }
        }
    };
    // the power fails after the last fsync: every transaction replays
    let crashed = Arc::new(MemDevice::from_bytes(whole.clone()));
    let fs = common::mount(&crashed);
    expect(&fs, n);
    fs.unmount().expect("unmount");
    assert_eq!(
        fs.superblock().features_incompat & FEATURE_JOURNAL_COMPACT,
        0
    );
    drop(fs);
    common::fsck_clean(&crashed);
    // the last transaction's data block never reached the device
    let mut torn = whole;
    torn[((last.0 + 1) * 4096 + 100) as usize] ^= 0x5a;
    let crashed = Arc::new(MemDevice::from_bytes(torn));
    let r = moafs_core::fsck::fsck(crashed.as_ref(), false).expect("fsck -n runs");
    assert!(r.errors.is_empty(), "fsck -n: {:#?}", r.errors);
    let fs = common::mount(&crashed);
    expect(&fs, n - 1);
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&crashed);
}

/// `journal=ordered` writes overwrites of blocks on disk through the transaction while its
/// share of the journal lasts, and home before it past that. The block that holds the end of
/// a file truncated inside it is journaled whatever the share: home before the transaction, a
/// crash there would show the old size with zeros inside it that no write gave (found by the
/// crash harness on a 32-block journal: seed 29 of `behind`).
#[test]
fn a_truncated_last_block_is_journaled_whatever_the_share() {
    let mem = image_with(16, Some(32)); // a share of 8 blocks for file data
    let dev = Logging::new(mem.clone());
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts()).expect("mount");
    let old: Vec<u8> = (0..20 * 4096u32).map(|i| (i % 251) as u8 + 1).collect();
    // (b first: commits write files back in inode order)
    let b = fs.create(ROOT_INO, b"b", 0o644, ME).expect("create").ino;
    fs.write(b, 0, &[7u8; 20 * 4096]).expect("write b");
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    fs.write(a, 0, &old).expect("write a");
    fs.sync().expect("sync");
    // single-block overwrites of b (one run each) use up the share before a's turn
    for k in (0..20u64).step_by(2) {
        fs.write(b, k * 4096, &[9u8; 100]).expect("overwrite b");
    }
    fs.setattr(
        a,
        &moafs_core::fs::SetAttr {
            size: Some(4097),
            ..Default::default()
        },
    )
    .expect("truncate a");
    let sb = fs.superblock();
    *dev.cut_at.lock().unwrap() = Some(sb.journal_start..sb.journal_start + 32);
    // (a sync: an fsync of b alone would go to the byte log)
    fs.sync().expect("sync");
    let image = dev
        .cut
        .lock()
        .unwrap()
        .take()
        .expect("the transaction was written");
    drop(fs);
    // the power fails just before the transaction: a is its old self, whole
    let crashed = Arc::new(MemDevice::from_bytes(image));
    let fs = common::mount(&crashed);
    let a = fs.lookup(ROOT_INO, b"a").expect("a").ino;
    assert_eq!(fs.read(a, 0, 100_000).expect("read"), old);
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&crashed);
}

/// An inode created and freed between two commits never reached the disk: its number is
/// reusable at once (with a newer generation), where one a commit wrote waits for two
/// commits. Files created and deleted by the thousand between commits (PostMark) then touch
/// a few inode-table blocks, not one slot each.
#[test]
fn inode_numbers_no_commit_wrote_are_reused_at_once() {
    let mem = image(64);
    let fs = common::mount_with(&mem, opts());
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create a");
    fs.unlink(ROOT_INO, b"a").expect("unlink a");
    let b = fs.create(ROOT_INO, b"b", 0o644, ME).expect("create b");
    assert_eq!(b.ino, a.ino, "a's number is free again");
    assert!(
        b.generation > a.generation,
        "{} after {}",
        b.generation,
        a.generation
    );
    fs.sync().expect("sync");
    // b is on disk now: its number waits
    fs.unlink(ROOT_INO, b"b").expect("unlink b");
    let c = fs.create(ROOT_INO, b"c", 0o644, ME).expect("create c");
    assert_ne!(
        c.ino, b.ino,
        "a number a commit wrote is reused only two commits later"
    );
    // thousands of short-lived files between two commits take a handful of numbers
    let before = fs.counters();
    let mut inos = std::collections::HashSet::new();
    for i in 0..2000u32 {
        let name = format!("t{}", i % 8);
        if i >= 8 {
            fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
        }
        let t = fs
            .create(ROOT_INO, name.as_bytes(), 0o644, ME)
            .expect("create");
        fs.write(t.ino, 0, &i.to_le_bytes()).expect("write");
        inos.insert(t.ino);
    }
    assert!(inos.len() <= 16, "{} numbers for 8 live files", inos.len());
    fs.sync().expect("sync");
    let c2 = fs.counters().since(&before);
    assert!(c2.journal_blocks_written <= 12, "{c2:?}");
    // a power cut now: the last eight files, each with its last contents
    let crashed = Arc::new(MemDevice::from_bytes(mem.snapshot()));
    drop(fs);
    let fs = common::mount(&crashed);
    for k in 0..8u32 {
        let t = fs.lookup(ROOT_INO, format!("t{k}").as_bytes()).expect("t");
        assert_eq!(
            fs.read(t.ino, 0, 10).expect("read"),
            (1992 + k).to_le_bytes()
        );
    }
    fs.unmount().expect("unmount");
    drop(fs);
    common::fsck_clean(&crashed);
}

/// FIBMAP (`Fs::bmap`): the address answered holds the file's bytes on the device at once —
/// data not yet allocated is committed, journaled data (`journal=data`) and a byte-logged
/// overwrite are taken home first; holes and blocks past the map answer 0; a smaller unit
/// (1 KiB) addresses inside the block.
#[test]
fn bmap_answers_where_the_device_holds_the_bytes() {
    for mode in [JournalMode::Ordered, JournalMode::Data] {
        let mem = image(64);
        let fs = common::mount_with(
            &mem,
            MountOptions {
                journal: mode,
                ..opts()
            },
        );
        let bs = fs.geometry().block_size as u64;
        let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
        let mut want: Vec<u8> = (0..5 * bs).map(|i| (i % 251) as u8).collect();
        fs.write(a, 0, &want).expect("write");
        fs.fsync(a, false).expect("fsync");
        // a small overwrite made durable by the byte log, and a block never written (a hole)
        fs.write(a, 100, b"logged").expect("overwrite");
        fs.fsync(a, false).expect("fsync");
        want[100..106].copy_from_slice(b"logged");
        fs.write(a, 7 * bs, &[9u8; 10]).expect("write past a hole");
        want.resize(7 * bs as usize, 0);
        want.extend_from_slice(&[9u8; 10]);
        let dev = mem.clone() as Arc<dyn BlockDevice>;
        for idx in 0..8u64 {
            let phys = fs.bmap(a, idx, bs as u32).expect("bmap");
            if idx == 5 || idx == 6 {
                assert_eq!(phys, 0, "{mode:?}: block {idx} is a hole");
                continue;
            }
            assert_ne!(phys, 0, "{mode:?}: block {idx} unmapped");
            let mut got = vec![0u8; bs as usize];
            dev.read_at(phys * bs, &mut got).expect("read");
            let from = (idx * bs) as usize;
            let end = (from + bs as usize).min(want.len());
            assert!(
                got[..end - from] == want[from..end],
                "{mode:?}: block {idx} at {phys} does not hold the file's bytes"
            );
            // in 1 KiB units: the second quarter of the block
            let k = fs.bmap(a, idx * (bs / 1024) + 1, 1024).expect("bmap 1k");
            assert_eq!(k, phys * (bs / 1024) + 1, "{mode:?}: block {idx}");
        }
        assert_eq!(fs.bmap(a, 1 << 40, bs as u32).expect("far"), 0);
        assert!(
            fs.bmap(a, 0, 3000).is_err(),
            "a block size not a power of two"
        );
        assert!(matches!(
            fs.bmap(9999, 0, 4096),
            Err(moafs_core::FsError::NotFound) | Err(moafs_core::FsError::Stale { .. })
        ));
        fs.unmount().expect("unmount");
        drop(fs);
        common::fsck_clean(&mem);
    }
}
