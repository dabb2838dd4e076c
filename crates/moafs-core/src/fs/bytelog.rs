//! Two-level logging (paper 003): the per-file fsync path and the byte log.
//!
//! An fsync of a file whose only changes since the last commit are overwrites of blocks
//! already on disk, each with fewer than `bytelog_threshold` bytes changed since it was last
//! logged (counted in 128-byte units, `cache.rs`; as the paper, whose byte-logged page is
//! clean again until its next change), and its times, does not commit the file system: it appends records of
//! the changed bytes (and the times) to the byte log as one batch of whole 512-byte sectors
//! and flushes. The blocks stay dirty in the cache; a later commit writes them home (and,
//! because a crash before that commit is durable would replay the records onto the home
//! block, journals them rather than writing them in place). Reads never look at the log.
//!
//! Why a record replayed after a crash is right:
//! - The per-file path runs as a job of the committer (it holds `Fs::commit_mx` and marks
//!   `committing` during its I/O), so no commit is in flight: the durable state is the last
//!   commit's, and the file's inode (block map included) is what that commit wrote (`saved`:
//!   anything but the times differing sends the fsync to the committer). A record names the
//!   home block its bytes belong to, durable at that moment.
//! - Every commit's superblock carries the byte log's *floor* (the last record sequence
//!   number before the commit took its snapshot: the snapshot holds those bytes) and *tail*
//!   (where later records begin). Replay applies, after the journal, the records above the
//!   floor, in order: the changes made after that snapshot, patched onto it.
//! - A home block named by a live record is not reused: freeing it needs a commit, which
//!   moves the floor past the record, and reuse needs another (the two-commit rule).
//! - Batches never overwrite live sectors (the ring's space between the tail of the last
//!   commit and the head); no room sends the fsync to the committer, which empties the log.

use super::cache::{units_changed, Units, UNIT};
use super::node::times;
use super::{Fs, Inner, JournalMode};
use crate::device::{BlockDevice, Nvm};
use crate::error::{FsError, FsResult};
use crate::format::bytelog::{
    batch_bytes, batch_header_bytes, batch_salt, batch_sectors, decode_batch, encode_batch,
    encode_batch_in, tier_batch_salt, Record, RecordBody, TierHeader, LOG_SECTOR, TIER_HEADER,
};
use crate::format::{DiskInode, Geometry, Superblock, INODE_BYTES};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Blocks whose old contents an fsync reads to find what changed, at most (more: the file
/// is being rewritten, not updated; the committer takes it).
const MAX_HOME_READS: usize = 64;

/// A ring of `units` units (512-byte sectors on the device, 8-byte words in the tier).
pub(crate) struct Ring {
    pub units: u64,
    /// Where the next batch goes, and where the batches the last commit did not cover begin.
    pub head: u64,
    pub tail: u64,
}

impl Ring {
    fn new(units: u64) -> Ring {
        Ring {
            units,
            head: 0,
            tail: 0,
        }
    }

    /// Where a batch of `n` units goes without touching a live one. The head never reaches
    /// the tail from behind (`head == tail` means empty).
    fn place(&self, n: u64) -> Option<u64> {
        if n > self.units / 2 {
            return None;
        }
        if self.head == self.tail {
            // nothing live
            return Some(if self.head + n <= self.units {
                self.head
            } else {
                0
            });
        }
        if self.head > self.tail {
            if self.head + n <= self.units {
                Some(self.head)
            } else {
                (n < self.tail).then_some(0)
            }
        } else {
            (self.head + n < self.tail).then_some(self.head)
        }
    }

    /// Everything so far is covered by a commit: the ring is empty from the head on.
    fn covered(&mut self) -> u64 {
        if self.head >= self.units {
            self.head = 0; // empty: start anywhere
        }
        self.tail = self.head;
        self.head
    }
}

/// The NVM tier while mounted (`-o nvm=PATH`).
pub(crate) struct Tier {
    pub nvm: Arc<dyn Nvm>,
    pub uuid: [u8; 16],
    /// Its ring: 8-byte words from `TIER_HEADER` on.
    pub ring: Ring,
}

/// The byte log while mounted.
pub(crate) struct ByteLog {
    /// Byte offset of the log on the device; its ring of sectors.
    pub start: u64,
    pub ring: Ring,
    pub next_seq: u64,
    pub uuid: [u8; 16],
    /// Blocks with records not yet taken by a commit (each journaled by the next commit).
    pub live_blocks: u64,
    pub tier: Option<Tier>,
}

impl ByteLog {
    /// The byte log of `sb` (None without one), empty: at mount every record is home (replay
    /// moved the floor past what it applied), numbering goes on after the floor.
    pub fn new(sb: &Superblock) -> Option<ByteLog> {
        sb.has_bytelog().then(|| ByteLog {
            start: sb.bytelog_start * sb.block_size as u64,
            ring: Ring::new(sb.bytelog_blocks as u64 * (sb.block_size as u64 / LOG_SECTOR as u64)),
            next_seq: sb.bytelog_floor + 1,
            uuid: sb.uuid,
            live_blocks: 0,
            tier: None,
        })
    }

    /// The superblock being written covers every record so far (a commit's snapshot, or
    /// everything home at mount and unmount): its floor and tails.
    pub fn covered(&mut self, sb: &mut Superblock) {
        sb.bytelog_floor = self.next_seq - 1;
        sb.bytelog_tail = self.ring.covered() as u32;
        if let Some(t) = self.tier.as_mut() {
            sb.nvm_tail = t.ring.covered() * 8;
        }
        self.live_blocks = 0;
    }
}

/// Checks the tier given at mount against the image (after any replay, which needed it if
/// it held records) and writes its header: a tier of this file system keeps its identity, a
/// new file (no moafs header) gets one, a tier of another file system is refused.
pub(crate) fn attach_tier(
    sb: &Superblock,
    (nvm, path): (Arc<dyn Nvm>, String),
) -> FsResult<(Tier, String)> {
    if !sb.has_bytelog() {
        return Err(FsError::invalid(
            "this image has no byte log, which an NVM tier serves (made before format 2 or \
             with --bytelog-blocks 0)",
        ));
    }
    let size = nvm.size();
    if size < crate::format::bytelog::TIER_MIN {
        return Err(FsError::invalid(format!(
            "the NVM tier {path} is {size} bytes: at least {} are needed",
            crate::format::bytelog::TIER_MIN
        )));
    }
    let mut h = [0u8; 64];
    nvm.read(0, &mut h)?;
    let uuid = match TierHeader::decode(&h) {
        Some(th) if th.fs_uuid == sb.uuid => th.uuid,
        Some(th) => {
            let other = crate::format::hex(&th.fs_uuid);
            return Err(FsError::invalid(format!(
                "{path} is the NVM tier of another file system ({other}), whose acknowledged \
                 updates it may hold: give another file (or zero this one to reuse it)"
            )));
        }
        None => {
            let mut u = [0u8; 16];
            rand::Rng::fill(&mut rand::thread_rng(), &mut u[..]);
            u
        }
    };
    let header = TierHeader {
        uuid,
        fs_uuid: sb.uuid,
        size,
    };
    nvm.store(0, &header.encode())?;
    nvm.persist()?;
    let ring = Ring::new((size - TIER_HEADER) / 8);
    Ok((Tier { nvm, uuid, ring }, path))
}

impl Inner {
    /// At mount: the byte log uses `tier` from now on (the superblock records it), or no
    /// tier (the superblock forgets one it named; every record is home by now).
    pub(crate) fn use_tier(&mut self, tier: Option<(Tier, String)>) {
        let sb = &mut self.sb;
        match (self.bytelog.as_mut(), tier) {
            (Some(log), Some((t, path))) => {
                sb.features_incompat |= crate::format::FEATURE_NVM;
                sb.nvm_uuid = t.uuid;
                sb.nvm_size = t.nvm.size();
                sb.nvm_tail = 0;
                sb.nvm_path = path;
                log.tier = Some(t);
            }
            _ => {
                sb.features_incompat &= !crate::format::FEATURE_NVM;
                sb.nvm_uuid = [0; 16];
                sb.nvm_size = 0;
                sb.nvm_tail = 0;
                sb.nvm_path.clear();
            }
        }
    }
}

/// Where a batch goes.
pub(crate) enum Target {
    /// The device log, at this byte offset (then a flush).
    Device(u64),
    /// The NVM tier, at this byte offset (then a persist).
    Tier(u64),
}

/// What an fsync of one file logs: its records (none when the last commit or earlier
/// records hold everything), the blocks they log, how many of those had no record yet, its
/// times, and the bytes of file data.
pub(crate) struct FilePlan {
    ino: u64,
    records: Vec<Record>,
    logs: Vec<LogBlock>,
    newly_logged: u64,
    times: [(i64, u32); 3],
    data_bytes: u64,
}

/// fsyncs waiting for the byte log (`Inner::bytelog_waiting`) and what became of those a
/// batch took (`done`): served, or to commit.
#[derive(Default)]
pub(crate) struct Waiting {
    next: u64,
    queue: Vec<(u64, u64)>,
    done: rustc_hash::FxHashMap<u64, bool>,
}

impl Inner {
    /// Whether this mount uses the byte log at all (on, the image has one, a mode that
    /// orders in-place writes, writable): without it nothing tracks changed units.
    pub(crate) fn bytelog_active(&self) -> bool {
        self.opts.bytelog
            && self.bytelog.is_some()
            && self.opts.journal != JournalMode::Writeback
            && !self.opts.read_only
    }

    /// Whether an fsync of `ino` may be served by the byte log (cheap: no I/O, no commit
    /// state); `plan_file` decides.
    pub(crate) fn bytelog_candidate(&mut self, ino: u64) -> FsResult<bool> {
        if !self.bytelog_active() || self.failed {
            return Ok(false);
        }
        let n = self.inode(ino)?;
        Ok(n.kind_mode() == libc::S_IFREG && n.saved.is_some() && !n.xattr_dirty)
    }

    /// Whether `u` changed units are too many for byte records (the block path takes them).
    fn over_threshold(&self, u: Units) -> bool {
        let units = (self.bs() / UNIT) as u32;
        u.count_ones().min(units) as usize * UNIT >= self.opts.bytelog_threshold as usize
    }

    /// What an fsync of `ino` would log (module comment): None when it must commit. Only
    /// with no commit in flight: the caller holds `commit_mx`. Records are numbered from 0
    /// here; the batch numbers them.
    fn plan_file(&mut self, ino: u64) -> FsResult<Option<FilePlan>> {
        if !self.bytelog_candidate(ino)? || self.committing {
            return Ok(None);
        }
        let bs = self.bs();
        let node = &self.inodes[&ino];
        let Some(saved) = &node.saved else {
            return Ok(None);
        };
        let mut same = node.d.clone();
        [same.atime, same.mtime, same.ctime] = [saved.atime, saved.mtime, saved.ctime];
        if same != *saved || node.meta_reserved || node.dir.is_some() {
            return Ok(None);
        }
        let now_times = times(&node.d);
        let times_changed = now_times != node.logged_times;
        let dirty = node.cache.dirty_blocks();
        let units = (bs / UNIT) as u32;
        let mut blocks = Vec::with_capacity(dirty.len());
        let mut reads = 0;
        for idx in dirty {
            let cb = node.cache.get(&idx).expect("dirty blocks are cached");
            if cb.reserved {
                return Ok(None);
            }
            if cb.unknown {
                reads += 1;
                if reads > MAX_HOME_READS {
                    return Ok(None);
                }
            } else if self.over_threshold(cb.unlogged) {
                return Ok(None);
            }
            blocks.push((idx, cb.unknown, cb.logged));
        }
        let mut logs: Vec<LogBlock> = Vec::new();
        let mut home = vec![0u8; bs];
        for (idx, unknown, logged) in blocks {
            let phys = self.bmap(ino, idx)?;
            if phys == 0 {
                return Ok(None);
            }
            let (log, found) = if unknown {
                // A whole block arrived without a cached copy: the old one is at home.
                self.check_data_block(phys)?;
                self.dev.read_at(phys * bs as u64, &mut home)?;
                self.counters.bytelog_home_reads += 1;
                let c = units_changed(
                    &home,
                    &self.inodes[&ino].cache.get(&idx).expect("dirty").data,
                );
                if self.over_threshold(c) {
                    // keep what was found: the next fsync need not read it again
                    let node = self.inodes.get_mut(&ino).expect("loaded");
                    node.cache.set_changed(idx, c);
                    return Ok(None);
                }
                (c, Some(c))
            } else {
                let cb = self.inodes[&ino].cache.get(&idx).expect("dirty");
                (cb.unlogged, None)
            };
            if log != 0 || found.is_some() {
                logs.push((idx, phys, log, found, logged));
            }
        }
        let newly_logged = logs.iter().filter(|l| !l.4).count() as u64;
        let mut records = Vec::new();
        let mut seq = 0;
        let mut data_bytes = 0u64;
        let node = &self.inodes[&ino];
        for (idx, phys, units_to_log, _, _) in &logs {
            let cb = node.cache.get(idx).expect("dirty");
            let mut k = 0u32;
            while k < units {
                if units_to_log & (1 << k) == 0 {
                    k += 1;
                    continue;
                }
                let first = k;
                while k < units && units_to_log & (1 << k) != 0 {
                    k += 1;
                }
                let range = first as usize * UNIT..(k as usize * UNIT).min(bs);
                data_bytes += range.len() as u64;
                records.push(Record {
                    seq,
                    ino,
                    body: RecordBody::Bytes {
                        block: *idx,
                        home: *phys,
                        offset: range.start as u32,
                        data: cb.data[range].to_vec(),
                    },
                });
                seq += 1;
            }
        }
        if times_changed {
            records.push(Record {
                seq,
                ino,
                body: RecordBody::Times(now_times),
            });
        }
        Ok(Some(FilePlan {
            ino,
            records,
            logs,
            newly_logged,
            times: now_times,
            data_bytes,
        }))
    }
    /// Plans one batch for the fsyncs `reqs` (request, inode) waiting for the byte log:
    /// each request's outcome (served, or left to a commit) and the batch's I/O, if there
    /// is anything to write. Only with no commit in flight (`commit_mx` held).
    fn plan_batch(&mut self, reqs: &[(u64, u64)]) -> FsResult<BatchPlan> {
        let journal_share = self.journal.as_ref().map_or(0, |j| j.len / 4);
        let mut outcomes = Vec::with_capacity(reqs.len());
        let mut files: Vec<(u64, FilePlan)> = Vec::new();
        let mut newly = 0;
        for &(req, ino) in reqs {
            if files.iter().any(|(_, f)| f.ino == ino) {
                // the same file twice: one plan serves both
                outcomes.push((req, true));
                continue;
            }
            let plan = match self.plan_file(ino) {
                Ok(p) => p,
                Err(FsError::Stale { .. }) => None, // gone: its own fsync says so
                Err(e) => return Err(e),
            };
            let live = self.bytelog.as_ref().map_or(0, |l| l.live_blocks);
            match plan {
                // The next commit journals every logged block that changed again: keep
                // those within a share of the journal.
                Some(f) if live + newly + f.newly_logged <= journal_share => {
                    newly += f.newly_logged;
                    outcomes.push((req, true));
                    files.push((req, f));
                }
                _ => outcomes.push((req, false)),
            }
        }
        let log = self.bytelog.as_mut().expect("candidates have a byte log");
        let mut records: Vec<Record> = Vec::new();
        for (_, f) in files.iter_mut() {
            for mut r in f.records.drain(..) {
                r.seq = log.next_seq + records.len() as u64;
                records.push(r);
            }
        }
        if records.is_empty() {
            for (_, f) in &files {
                self.note_logged(f.ino, &f.logs);
            }
            return Ok((outcomes, None));
        }
        // A small batch goes to the tier (no device flush); a larger one, or one the tier
        // has no room for (a spill), to the device log; no room there: everyone commits.
        let small = batch_bytes(&records) < self.opts.nvm_threshold as usize;
        let words = batch_bytes(&records).div_ceil(8) as u64;
        let in_tier = match log.tier.as_ref() {
            Some(t) if small => t.ring.place(words),
            _ => None,
        };
        let n = batch_sectors(&records) as u64;
        let on_device = if in_tier.is_none() {
            match log.ring.place(n) {
                Some(p) => Some(p),
                None => {
                    for o in outcomes.iter_mut() {
                        if files.iter().any(|(r, _)| *r == o.0) {
                            o.1 = false;
                        }
                    }
                    return Ok((outcomes, None));
                }
            }
        } else {
            None
        };
        if small && log.tier.is_some() && in_tier.is_none() {
            self.counters.tier_spills += 1;
        }
        let count = records.len() as u64;
        log.next_seq += count;
        log.live_blocks += newly;
        let io = match (in_tier, on_device) {
            (Some(w), _) => {
                let t = log.tier.as_mut().expect("placed in the tier");
                t.ring.head = w + words;
                let salt = tier_batch_salt(&log.uuid, &t.uuid, w);
                self.counters.tier_batches += 1;
                self.counters.tier_bytes += words * 8;
                (
                    Target::Tier(TIER_HEADER + w * 8),
                    encode_batch_in(&records, salt, 8),
                )
            }
            (None, Some(pos)) => {
                log.ring.head = pos + n;
                self.counters.bytelog_sectors += n;
                (
                    Target::Device(log.start + pos * LOG_SECTOR as u64),
                    encode_batch(&records, batch_salt(&log.uuid, pos)),
                )
            }
            (None, None) => unreachable!("placed above"),
        };
        for (_, f) in &files {
            self.note_logged(f.ino, &f.logs);
            self.inodes.get_mut(&f.ino).expect("loaded").logged_times = f.times;
            self.counters.bytelog_data_bytes += f.data_bytes;
        }
        self.counters.bytelog_records += count;
        self.counters.bytelog_batches += 1;
        Ok((outcomes, Some(io)))
    }
}

impl Inner {
    /// The blocks of a batch are logged (or, found unchanged, need no record).
    fn note_logged(&mut self, ino: u64, logs: &[LogBlock]) {
        let node = self.inodes.get_mut(&ino).expect("loaded");
        for (idx, _, units, found, _) in logs {
            if *units != 0 {
                node.cache.set_logged(*idx, *found);
            } else if let Some(c) = found {
                node.cache.set_changed(*idx, *c);
            }
        }
    }
}

/// Each request's outcome (served, or to commit) and the batch to write, if any.
type BatchPlan = (Vec<(u64, bool)>, Option<(Target, Vec<u8>)>);

/// A block an fsync logs: (logical block, home, units to log, changed units if found by
/// reading home, it had records already).
type LogBlock = (u64, u64, Units, Option<Units>, bool);

impl Fs {
    /// The per-file fsync path (module comment): true when the byte log served the fsync
    /// of `ino` (its changes are durable), false when it must commit. Group commit: an
    /// fsync registers and takes `commit_mx`; the first to get it writes one batch for every
    /// fsync registered by then (each file's records) and flushes once; the others, when
    /// they get `commit_mx` in turn, find their outcome and return.
    pub(super) fn fsync_bytelog(&self, ino: u64) -> FsResult<bool> {
        let req = {
            let mut g = self.lock();
            if !g.bytelog_candidate(ino)? {
                return Ok(false);
            }
            let w = &mut g.bytelog_waiting;
            w.next += 1;
            let req = w.next;
            w.queue.push((req, ino));
            req
        };
        // A job of the committer: no commit in flight while it plans and writes.
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        if let Some(served) = g.bytelog_waiting.done.remove(&req) {
            return Ok(served);
        }
        let reqs = std::mem::take(&mut g.bytelog_waiting.queue);
        let settle = |g: &mut Inner, outcomes: &[(u64, bool)]| {
            for &(r, served) in outcomes {
                if served {
                    g.counters.bytelog_fsyncs += 1;
                } else {
                    g.counters.bytelog_fallbacks += 1;
                }
                if r != req {
                    g.bytelog_waiting.done.insert(r, served);
                }
            }
            outcomes.iter().find(|o| o.0 == req).is_some_and(|o| o.1)
        };
        let (outcomes, io) = match g.plan_batch(&reqs) {
            Ok(x) => x,
            Err(e) => {
                // a read of a home block failed, or the image is bad: nothing more is written
                g.failed = true;
                let all: Vec<(u64, bool)> = reqs.iter().map(|r| (r.0, false)).collect();
                settle(&mut g, &all);
                return Err(e);
            }
        };
        let Some((to, bytes)) = io else {
            return Ok(settle(&mut g, &outcomes));
        };
        g.committing = true;
        let dev = g.dev.clone();
        let tier = g
            .bytelog
            .as_ref()
            .and_then(|l| l.tier.as_ref())
            .map(|t| t.nvm.clone());
        drop(g);
        let unwinding = super::InFlight(self);
        let flushed = matches!(to, Target::Device(_));
        let r = match (to, tier) {
            (Target::Device(at), _) => dev.write_at(at, &bytes).and_then(|()| dev.flush()),
            (Target::Tier(at), Some(t)) => t.store(at, &bytes).and_then(|()| t.persist()),
            (Target::Tier(_), None) => unreachable!("placed in a tier"),
        };
        std::mem::forget(unwinding);
        let mut g = self.lock();
        g.committing = false;
        let r = match r {
            Ok(()) => {
                if let Some(j) = g.journal.as_mut().filter(|_| flushed) {
                    j.flushed(); // every checkpoint write issued so far is durable too
                }
                Ok(settle(&mut g, &outcomes))
            }
            Err(e) => {
                // the others fall back to a commit, which refuses: the file system failed
                g.failed = true;
                let all: Vec<(u64, bool)> = reqs.iter().map(|r| (r.0, false)).collect();
                settle(&mut g, &all);
                Err(e.into())
            }
        };
        drop(g);
        self.done.notify_all();
        r
    }
}

/// What replaying the byte log does (after the journal).
#[derive(Debug, Default)]
pub struct ByteLogReplay {
    /// Records applied, and the newest one's sequence number (0: none).
    pub records: usize,
    pub last_seq: u64,
    /// What each record names, for fsck to check against the replayed image.
    pub targets: Vec<RecordTarget>,
}

/// What a record names: inode `ino` and, for file bytes, (logical block, home block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordTarget {
    pub seq: u64,
    pub ino: u64,
    pub block: Option<(u64, u64)>,
}

/// Reads the records above the floor of `sb` (the superblock as the journal's replay leaves
/// it) and applies them to `blocks` (home block → image; blocks not in it are read from
/// `dev`), in order.
pub fn plan_bytelog_replay(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    tier: Option<&dyn Nvm>,
    blocks: &mut BTreeMap<u64, Vec<u8>>,
) -> FsResult<ByteLogReplay> {
    let mut out = ByteLogReplay::default();
    for r in read_live_records(dev, sb, tier)? {
        apply_record(dev, sb, blocks, &r)?;
        out.records += 1;
        out.last_seq = r.seq;
        out.targets.push(RecordTarget {
            seq: r.seq,
            ino: r.ino,
            block: match r.body {
                RecordBody::Bytes { block, home, .. } => Some((block, home)),
                RecordBody::Times(_) => None,
            },
        });
    }
    Ok(out)
}

/// Reads bytes at an offset of a log.
type ReadFn<'a> = Box<dyn Fn(u64, &mut [u8]) -> FsResult<()> + 'a>;

/// Where live batches are read from: the device log (units of 512 bytes) or the tier
/// (units of 8 bytes, after its header).
struct Source<'a> {
    read: ReadFn<'a>,
    unit: u64,
    units: u64,
    salt: Box<dyn Fn(u64) -> u64 + 'a>,
    pos: u64,
    what: &'static str,
}

impl Source<'_> {
    /// The valid batch at unit `p` whose first record is `want`: (the unit after it, its
    /// records).
    fn batch_at(&self, p: u64, want: u64, block_size: u32) -> FsResult<Option<(u64, Vec<Record>)>> {
        if p >= self.units {
            return Ok(None);
        }
        let mut head = [0u8; crate::format::bytelog::BATCH_HEADER];
        if p * self.unit + head.len() as u64 > self.units * self.unit {
            return Ok(None);
        }
        (self.read)(p * self.unit, &mut head)?;
        let Some((seq, bytes, _)) = batch_header_bytes(&head) else {
            return Ok(None);
        };
        let n = (bytes as u64).div_ceil(self.unit);
        if seq != want || p + n > self.units {
            return Ok(None);
        }
        let mut b = vec![0u8; (n * self.unit) as usize];
        (self.read)(p * self.unit, &mut b)?;
        let recs = decode_batch(&b, (self.salt)(p), block_size).map_err(|e| at(e, self.what, p))?;
        Ok(recs.map(|r| (p + n, r)))
    }
}

/// The records of the byte log above the floor of `sb`, in order: from the tails of the
/// device log and (with `tier`) the NVM tier, the batch with the next sequence number in
/// either — at the unit after that ring's last batch, or at its start when a batch did not
/// fit before the end — until neither has it. An image whose superblock says records may
/// be in a tier needs that tier: without it (or with another) this is an error naming it.
pub fn read_live_records(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    tier: Option<&dyn Nvm>,
) -> FsResult<Vec<Record>> {
    let mut out = Vec::new();
    if !sb.has_bytelog() {
        return Ok(out);
    }
    let start = sb.bytelog_start * sb.block_size as u64;
    let mut sources = vec![Source {
        read: Box::new(move |off, buf| Ok(dev.read_at(start + off, buf)?)),
        unit: LOG_SECTOR as u64,
        units: sb.bytelog_blocks as u64 * (sb.block_size as u64 / LOG_SECTOR as u64),
        salt: Box::new(|p| batch_salt(&sb.uuid, p)),
        pos: sb.bytelog_tail as u64,
        what: "byte log",
    }];
    if sb.has_nvm() {
        let t = check_tier(sb, tier)?;
        let tier_uuid = sb.nvm_uuid;
        sources.push(Source {
            read: Box::new(move |off, buf| Ok(t.read(TIER_HEADER + off, buf)?)),
            unit: 8,
            units: (sb.nvm_size.min(t.size()).saturating_sub(TIER_HEADER)) / 8,
            salt: Box::new(move |p| tier_batch_salt(&sb.uuid, &tier_uuid, p)),
            pos: sb.nvm_tail / 8,
            what: "NVM tier",
        });
    }
    let mut want = sb.bytelog_floor + 1;
    'next: loop {
        for src in sources.iter_mut() {
            for p in [src.pos, 0] {
                if let Some((next, recs)) = src.batch_at(p, want, sb.block_size)? {
                    want += recs.len() as u64;
                    out.extend(recs);
                    src.pos = next;
                    continue 'next;
                }
            }
        }
        break;
    }
    Ok(out)
}

/// The tier `sb` names, or an error that names it.
fn check_tier<'a>(sb: &Superblock, tier: Option<&'a dyn Nvm>) -> FsResult<&'a dyn Nvm> {
    let hex = crate::format::hex(&sb.nvm_uuid);
    let Some(t) = tier else {
        return Err(FsError::invalid(format!(
            "acknowledged updates may be in the NVM tier {} (tier {hex}), which was not given: \
             mount with -o nvm={} (fsck and inspect: --nvm {})",
            sb.nvm_path, sb.nvm_path, sb.nvm_path
        )));
    };
    let mut h = [0u8; 64];
    t.read(0, &mut h)?;
    match TierHeader::decode(&h) {
        Some(th) if th.uuid == sb.nvm_uuid && th.fs_uuid == sb.uuid => Ok(t),
        _ => Err(FsError::invalid(format!(
            "the NVM tier given is not this file system's tier {hex} (last mounted as {}): \
             acknowledged updates may be in that one",
            sb.nvm_path
        ))),
    }
}

/// Names the place of a byte-log error.
fn at(e: FsError, log: &str, unit: u64) -> FsError {
    match e {
        FsError::Corrupt { what, detail, .. } => FsError::Corrupt {
            what,
            block: unit,
            detail: format!("{detail} (unit {unit} of the {log})"),
        },
        e => e,
    }
}

fn apply_record(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    blocks: &mut BTreeMap<u64, Vec<u8>>,
    r: &Record,
) -> FsResult<()> {
    let geo = Geometry::from_superblock(sb);
    let bs = sb.block_size as u64;
    let bad = |d: String| FsError::corrupt("byte log", r.seq, d);
    let image = |b: u64, blocks: &mut BTreeMap<u64, Vec<u8>>| -> FsResult<()> {
        if let std::collections::btree_map::Entry::Vacant(v) = blocks.entry(b) {
            let mut buf = vec![0u8; bs as usize];
            dev.read_at(b * bs, &mut buf)?;
            v.insert(buf);
        }
        Ok(())
    };
    match &r.body {
        RecordBody::Bytes {
            home, offset, data, ..
        } => {
            let h = *home;
            if h >= geo.total_blocks
                || h - geo.group_start(geo.group_of_block(h)) < geo.meta_blocks() as u64
                || sb.log_range().contains(&h)
            {
                return Err(bad(format!("record {} targets block {h}", r.seq)));
            }
            image(h, blocks)?;
            let b = blocks.get_mut(&h).expect("read above");
            b[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
        RecordBody::Times(t) => {
            if !geo.valid_ino(r.ino) {
                return Err(bad(format!("record {} names inode {}", r.seq, r.ino)));
            }
            let (blk, off) = geo.inode_location(r.ino);
            image(blk, blocks)?;
            let b = blocks.get_mut(&blk).expect("read above");
            let slot = &mut b[off..off + INODE_BYTES];
            let mut d = DiskInode::decode(slot, r.ino, blk)?;
            if d.is_free() {
                return Err(bad(format!(
                    "record {} sets the times of free inode {}",
                    r.seq, r.ino
                )));
            }
            [d.atime, d.mtime, d.ctime] = *t;
            d.encode_into(slot, r.ino);
        }
    }
    Ok(())
}
