//! Two-level logging (paper 003): the per-file fsync path and the byte log.
//!
//! An fsync of a file whose only changes since the last commit are overwrites of blocks
//! already on disk and its attributes — mode, owner, flags, times, and a size that needs no
//! new block (an append within the last block, a truncate within it or into a hole) — does
//! not commit the file system: it appends records to the byte log as one batch of whole
//! 512-byte sectors and flushes (issue 28's small logical records, as ext4's fast commit:
//! the attributes go as one record of 60 bytes, the times alone as one of 36). A block with fewer than
//! `bytelog_threshold` bytes changed since it was last logged (counted in 128-byte units,
//! `cache.rs`; as the paper, whose byte-logged page is clean again until its next change)
//! gets records of the changed bytes; a block with more gets one whole-block record (the
//! paper's block-level log: a 4 KiB overwrite + fdatasync costs one 4.5 KiB request and a
//! flush, not a transaction). The blocks stay dirty in the cache; a later commit writes them home (and,
//! because a crash before that commit is durable would replay the records onto the home
//! block, journals them rather than writing them in place). Reads never look at the log.
//!
//! Why a record replayed after a crash is right:
//! - The per-file path runs as a job of the committer (it holds `Fs::commit_mx` and marks
//!   the epochs `writing` during its I/O), so no commit is in flight: the durable state is the last
//!   commit's, and the file's inode (block map included) is what that commit wrote (`saved`:
//!   anything but the attributes an attribute record carries differing sends the fsync to
//!   the committer). A record names the home block its bytes belong to, durable at that
//!   moment; an attribute record is applied to that inode as the commit wrote it. A size
//!   that grew shows bytes of blocks the commit wrote, which are zero past the old size (the
//!   cache's blocks are zero past the end of file, and commits write them whole), or holes.
//!   A file whose fsync the byte log served is made due (`aging.rs`): the next commit writes
//!   its data and real size, never the older size of young data.
//! - Every commit's superblock carries the byte log's *floor* (the last record sequence
//!   number before the commit took its snapshot: the snapshot holds those bytes) and *tail*
//!   (where later records begin). Replay applies, after the journal, the records above the
//!   floor, in order: the changes made after that snapshot, patched onto it.
//! - A home block named by a live record is not reused: freeing it needs a commit, which
//!   moves the floor past the record, and reuse needs another (the two-commit rule).
//! - Batches never overwrite live sectors (the ring's space between the tail of the last
//!   commit and the head); no room sends the fsync to the committer, which empties the log.

use super::cache::{units_changed, Units, UNIT};
use super::fsynctime::{FsyncPath, FsyncPhase, Trace};
use super::{Fs, Inner, JournalMode};
use crate::device::{BlockDevice, Nvm};
use crate::error::{FsError, FsResult};
use crate::format::bytelog::{
    batch_bytes, batch_salt, batch_sectors, encode_batch, encode_batch_in, tier_batch_salt,
    InodeAttrs, Record, RecordBody, TierHeader, LOG_SECTOR, TIER_HEADER,
};
use crate::format::Superblock;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

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
    pub(super) fn place(&self, n: u64) -> Option<u64> {
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

/// A batch in the device log: the sequence number of its first record, its first sector.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogBatch {
    pub first: u64,
    pub pos: u64,
}

/// The byte log while mounted.
pub(crate) struct ByteLog {
    /// Byte offset of the log on the device; its ring of sectors.
    pub start: u64,
    pub ring: Ring,
    pub next_seq: u64,
    pub uuid: [u8; 16],
    pub tier: Option<Tier>,
    /// The device log's batches from the oldest one a reader needs on, oldest first.
    pub batches: VecDeque<LogBatch>,
    /// Home blocks with records in `batches` not void yet: home → (inode, logical block,
    /// sequence number of its newest record).
    pub recorded: HashMap<u64, (u64, u64, u64)>,
    /// Where reading starts while homeless blocks need records at or below the floor: (the
    /// first sequence number of the batch, its sector); None: after the floor.
    pub pin: Option<(u64, u64)>,
    /// The next commit writes every homeless block home.
    pub clean_next: bool,
    /// Superblocks written while mounted say commit batches and allocation and slot records
    /// may be in the log (`FEATURE_BYTELOG_WB`, `FEATURE_BYTELOG_MAP`); the last one at
    /// unmount does not.
    pub in_use: bool,
    /// Fsyncs may write allocation and slot records (`-o bytelog_grow=on`): superblocks
    /// written while mounted say so (`FEATURE_BYTELOG_MAP`).
    pub maps: bool,
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
            tier: None,
            batches: VecDeque::new(),
            recorded: HashMap::new(),
            pin: None,
            clean_next: false,
            in_use: false,
            maps: false,
        })
    }

    /// The superblock being written covers every record so far (a commit's snapshot, or
    /// everything home at mount and unmount) except the records of homeless blocks, which
    /// `pin` keeps: its floor, where reading starts, and the tails.
    pub fn covered(&mut self, sb: &mut Superblock) {
        sb.bytelog_floor = self.next_seq - 1;
        match self.pin {
            Some((first, pos)) => {
                sb.bytelog_first = first;
                sb.bytelog_tail = pos as u32;
                self.ring.tail = pos;
                while self.batches.front().is_some_and(|b| b.first < first) {
                    self.batches.pop_front();
                }
                self.recorded.retain(|_, r| r.2 >= first);
            }
            None => {
                sb.bytelog_first = 0;
                sb.bytelog_tail = self.ring.covered() as u32;
                self.batches.clear();
                self.recorded.clear();
            }
        }
        let (wb, map) = (
            crate::format::FEATURE_BYTELOG_WB,
            crate::format::FEATURE_BYTELOG_MAP,
        );
        sb.features_incompat &= !(wb | map);
        if self.in_use {
            sb.features_incompat |= wb;
        }
        if self.in_use && self.maps {
            sb.features_incompat |= map;
        }
        if let Some(t) = self.tier.as_mut() {
            sb.nvm_tail = t.ring.covered() * 8;
        }
    }

    /// Sectors of the device log between the oldest batch a reader needs and the head.
    pub(super) fn used(&self) -> u64 {
        (self.ring.head + self.ring.units - self.ring.tail) % self.ring.units
    }

    /// A device batch of `records` was placed at sector `pos`.
    pub(super) fn wrote(&mut self, records: &[Record], pos: u64) {
        self.batches.push_back(LogBatch {
            first: records[0].seq,
            pos,
        });
        for r in records {
            match r.body {
                RecordBody::Bytes { block, home, .. } => {
                    self.recorded.insert(home, (r.ino, block, r.seq));
                }
                RecordBody::Void { home, .. } => {
                    self.recorded.remove(&home);
                }
                RecordBody::Times(_)
                | RecordBody::Attr(_)
                | RecordBody::Alloc { .. }
                | RecordBody::Slot(_) => {}
            }
        }
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
    /// The attributes durable once the batch is (`Inode::logged`).
    attrs: InodeAttrs,
    data_bytes: u64,
    /// A slot record says the file's grown map (`grown.rs`).
    slot: bool,
    /// Blocks this plan gave an address (`grown.rs`): counted only if the batch is written.
    placed: u64,
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
    /// state, no walk of the blocks); `plan_file` decides. Everything that the inode alone
    /// says needs the committer is refused here, before the fsync queues for `commit_mx`
    /// (a refusal after that wait cost the fsync a second wait: issue 43).
    pub(crate) fn bytelog_candidate(&mut self, ino: u64) -> FsResult<bool> {
        if !self.bytelog_active() || self.failed {
            return Ok(false);
        }
        let n = self.inode(ino)?;
        if n.kind_mode() != libc::S_IFREG || n.xattr_dirty || n.meta_reserved {
            return Ok(false);
        }
        let Some(saved) = &n.saved else {
            return Ok(false);
        };
        // Anything but what an attribute record carries differing from the last commit's
        // image (links, extended attributes, the block map) needs the committer — but a map
        // that only grew, and still fits in the inode, slot and allocation records can say
        // (`grown.rs`)
        let map_changing = n.cache.reserved_count() > 0
            || n.ext
                .as_ref()
                .is_some_and(|e| e.is_dirty() || e.tree_promised() > 0);
        if !map_changing && n.d.same_but_attrs(saved, false) {
            return Ok(true);
        }
        Ok(self.opts.bytelog_grow && self.grown_map_fits(ino))
    }

    /// Whether `u` changed units are too many for byte records (the block path takes them).
    pub(super) fn over_threshold(&self, u: Units) -> bool {
        let units = (self.bs() / UNIT) as u32;
        u.count_ones().min(units) as usize * UNIT >= self.opts.bytelog_threshold as usize
    }

    /// The units to log of a block whose `u` units changed: those, or the whole block (one
    /// record) when they reach the threshold.
    fn whole_if_over(&self, u: Units) -> Units {
        if u == 0 || !self.over_threshold(u) {
            return u;
        }
        self.whole_block()
    }

    /// Every unit of a block.
    fn whole_block(&self) -> Units {
        let units = self.bs() / UNIT;
        if units >= 128 {
            Units::MAX
        } else {
            (1 << units) - 1
        }
    }

    /// Warm pass (`fetch.rs`) for an fsync of `ino` by the byte log: the home copies of the
    /// dirty blocks that arrived whole without a cached copy (`plan_file` compares them).
    fn warm_homes(&mut self, ino: u64) {
        if !matches!(self.bytelog_candidate(ino), Ok(true)) {
            return;
        }
        // (every fsync on this path comes here: no allocation unless a block is unknown)
        let cache = &self.inodes[&ino].cache;
        let unknown: Vec<u64> = cache
            .to_log()
            .filter(|idx| cache.get(idx).is_some_and(|cb| cb.unknown))
            .take(MAX_HOME_READS)
            .collect();
        if unknown.is_empty() {
            return;
        }
        let mut scratch = vec![0u8; self.bs()];
        for idx in unknown {
            if let Ok(phys) = self.bmap(ino, idx) {
                if phys != 0 {
                    let _ = self.read_block(phys, &mut scratch);
                }
            }
        }
    }

    /// What an fsync of `ino` would log (module comment): None when it must commit. Only
    /// with no commit in flight: the caller holds `commit_mx`. Records are numbered from 0
    /// here; the batch numbers them.
    fn plan_file(&mut self, ino: u64) -> FsResult<Option<FilePlan>> {
        if !self.bytelog_candidate(ino)? || self.epochs.writing() {
            return Ok(None);
        }
        let bs = self.bs();
        let node = &self.inodes[&ino];
        let attrs = InodeAttrs::of(&node.d);
        let logged_attrs = node.logged;
        // (the dirty blocks logged with no change since have nothing to add: not visited)
        let mut blocks = Vec::new();
        let mut placing = Vec::new();
        let mut reads = 0;
        for idx in node.cache.to_log() {
            let cb = node.cache.get(&idx).expect("dirty blocks are cached");
            if cb.reserved {
                // without a home: placed below, once nothing can refuse (`grown.rs`)
                placing.push(idx);
                continue;
            }
            if cb.unknown {
                reads += 1;
                if reads > MAX_HOME_READS {
                    return Ok(None);
                }
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
                self.read_block(phys, &mut home)?;
                self.counters.bytelog_home_reads += 1;
                let c = units_changed(
                    &home,
                    &self.inodes[&ino].cache.get(&idx).expect("dirty").data,
                );
                (self.whole_if_over(c), Some(c))
            } else {
                let cb = self.inodes[&ino].cache.get(&idx).expect("dirty");
                (self.whole_if_over(cb.unlogged), None)
            };
            if log != 0 || found.is_some() {
                logs.push((idx, phys, log, found, logged));
            }
        }
        let mut records = Vec::new();
        let slot =
            !placing.is_empty() || self.inodes[&ino].ext.as_ref().is_some_and(|e| e.is_dirty());
        if slot && self.epochs.commit_wanted() {
            // a commit is about to run for another fsync: this one joins it, sharing its
            // flushes, rather than serialising a batch of its own before it (`grown.rs`)
            return Ok(None);
        }
        let mut placed = 0;
        if !placing.is_empty() {
            let whole = self.whole_block();
            for (idx, phys) in self.place_for_records(ino, placing, &mut records)? {
                logs.push((idx, phys, whole, Some(whole), false));
                placed += 1;
            }
        }
        let newly_logged = logs.iter().filter(|l| !l.4).count() as u64;
        let mut data_bytes = 0u64;
        let node = &self.inodes[&ino];
        for (idx, phys, units_to_log, _, _) in &logs {
            let cb = node.cache.get(idx).expect("dirty");
            data_bytes += unit_records(ino, *idx, *phys, *units_to_log, &cb.data, &mut records);
        }
        if slot {
            // the grown map with every attribute, as the next commit will write the inode
            let seq = records.last().map_or(0, |r| r.seq + 1);
            match self.slot_record(ino, seq) {
                Some(r) => records.push(r),
                // (cannot be: `grown_map_fits` saw it fit) the commit writes what was placed
                None => return Ok(None),
            }
        } else if attrs != logged_attrs {
            // the times alone (most fsyncs of overwrites), or every attribute
            let body = if attrs.differ_beyond_times(&logged_attrs) {
                RecordBody::Attr(attrs)
            } else {
                RecordBody::Times(attrs.times)
            };
            records.push(Record {
                seq: records.last().map_or(0, |r| r.seq + 1),
                ino,
                body,
            });
        }
        Ok(Some(FilePlan {
            ino,
            records,
            logs,
            newly_logged,
            attrs,
            data_bytes,
            slot,
            placed,
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
            let live = self.book.logged();
            match plan {
                // The next commit journals every logged block that changed again: keep
                // those (and the homeless ones, which may change again) within a share of
                // the journal.
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
                self.note_logged(f.ino, &f.logs, None);
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
                    // the commit these fsyncs fall back to makes room
                    log.clean_next = true;
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
        let first = records[0].seq;
        log.next_seq += count;
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
                log.wrote(&records, pos);
                self.counters.bytelog_sectors += n;
                (
                    Target::Device(log.start + pos * LOG_SECTOR as u64),
                    encode_batch(&records, batch_salt(&log.uuid, pos)),
                )
            }
            (None, None) => unreachable!("placed above"),
        };
        let batch = on_device.map(|_| first);
        for (_, f) in &files {
            self.note_logged(f.ino, &f.logs, Some(batch));
            self.inodes.get_mut(&f.ino).expect("loaded").logged = f.attrs;
            // durable now: a timer commit must not write an older size over it (`aging.rs`)
            self.aging.make_due(f.ino);
            self.counters.bytelog_data_bytes += f.data_bytes;
            self.counters.bytelog_map_fsyncs += u64::from(f.slot);
            self.counters.bytelog_placed_blocks += f.placed;
        }
        self.counters.bytelog_records += count;
        self.counters.bytelog_batches += 1;
        Ok((outcomes, Some(io)))
    }
}

impl Inner {
    /// The blocks of a batch are logged (or, found unchanged, need no record): `at` is
    /// where, when there were records: `Some(first)` for the device batch of records
    /// `first..`, `None` for the tier.
    fn note_logged(&mut self, ino: u64, logs: &[LogBlock], at: Option<Option<u64>>) {
        let whole = self.whole_block();
        let node = self.inodes.get_mut(&ino).expect("loaded");
        for (idx, _, units, found, _) in logs {
            if let (true, Some(batch)) = (*units != 0, at) {
                self.counters.bytelog_whole_blocks += u64::from(*units == whole);
                node.cache.set_logged(&mut self.book, *idx, *found, batch);
            } else if let Some(c) = found {
                node.cache.set_changed(*idx, *c);
            }
        }
    }
}

/// Each request's outcome (served, or to commit) and the batch to write, if any.
type BatchPlan = (Vec<(u64, bool)>, Option<(Target, Vec<u8>)>);

/// Appends the records of units `units` of block `idx` of `ino` (home `phys`, contents
/// `data`), one per run of consecutive units, numbered on from the last in `records` (from
/// 0); returns the bytes of data they carry.
pub(crate) fn unit_records(
    ino: u64,
    idx: u64,
    phys: u64,
    units: Units,
    data: &[u8],
    records: &mut Vec<Record>,
) -> u64 {
    let bs = data.len();
    let n = (bs / UNIT) as u32;
    let mut bytes = 0;
    let mut k = 0u32;
    while k < n {
        if units & (1 << k) == 0 {
            k += 1;
            continue;
        }
        let first = k;
        while k < n && units & (1 << k) != 0 {
            k += 1;
        }
        let range = first as usize * UNIT..(k as usize * UNIT).min(bs);
        bytes += range.len() as u64;
        records.push(Record {
            seq: records.last().map_or(0, |r| r.seq + 1),
            ino,
            body: RecordBody::Bytes {
                block: idx,
                home: phys,
                offset: range.start as u32,
                data: data[range].to_vec(),
            },
        });
    }
    bytes
}

/// A block an fsync logs: (logical block, home, units to log, changed units if found by
/// reading home, it had records already).
type LogBlock = (u64, u64, Units, Option<Units>, bool);

impl Fs {
    /// The per-file fsync path (module comment): true when the byte log served the fsync
    /// of `ino` (its changes are durable), false when it must commit. Group commit: an
    /// fsync registers and takes `commit_mx`; the first to get it writes one batch for every
    /// fsync registered by then (each file's records) and flushes once; the others, when
    /// they get `commit_mx` in turn, find their outcome and return.
    pub(super) fn fsync_bytelog(&self, ino: u64, t: &mut Trace) -> FsResult<bool> {
        let req = {
            let mut g = t.time(FsyncPhase::Lock, || self.lock());
            if !g.bytelog_candidate(ino)? {
                // refused before queueing for the committer: a fallback all the same
                if g.bytelog_active() && !g.failed {
                    g.counters.bytelog_fallbacks += 1;
                }
                return Ok(false);
            }
            let w = &mut g.bytelog_waiting;
            w.next += 1;
            let req = w.next;
            w.queue.push((req, ino));
            req
        };
        // A job of the committer: no commit in flight while it plans and writes.
        let _job = t.time(FsyncPhase::Job, || {
            self.commit_mx.lock().unwrap_or_else(|e| e.into_inner())
        });
        let mut g = t.time(FsyncPhase::Lock, || self.lock());
        if let Some(served) = g.bytelog_waiting.done.remove(&req) {
            if served {
                t.served(FsyncPath::ByteLogShared);
            }
            return Ok(served);
        }
        let from = Instant::now();
        // the home copies the plan compares are read with the engine lock released
        // (nothing writes home meanwhile: this thread holds `commit_mx`)
        let mut g = self.warm_from(g, &mut |g| {
            let inos: Vec<u64> = g.bytelog_waiting.queue.iter().map(|r| r.1).collect();
            for ino in inos {
                g.warm_homes(ino);
            }
        });
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
                g.fail("planning a byte-log batch", &e);
                let all: Vec<(u64, bool)> = reqs.iter().map(|r| (r.0, false)).collect();
                settle(&mut g, &all);
                return Err(e);
            }
        };
        let Some((to, bytes)) = io else {
            t.since(FsyncPhase::Plan, from);
            let served = settle(&mut g, &outcomes);
            if served {
                // nothing to log: what changed is in the log already
                t.served(FsyncPath::Clean);
            }
            return Ok(served);
        };
        g.epochs.set_writing(true);
        let dev = g.dev.clone();
        let tier = g
            .bytelog
            .as_ref()
            .and_then(|l| l.tier.as_ref())
            .map(|t| t.nvm.clone());
        drop(g);
        let from = t.since(FsyncPhase::Plan, from);
        let unwinding = super::InFlight(self);
        let r = match (to, tier) {
            (Target::Device(at), _) => dev.write_at(at, &bytes).and_then(|()| {
                let from = t.since(FsyncPhase::Write, from);
                let r = dev.flush();
                t.since(FsyncPhase::Flush, from);
                r
            }),
            (Target::Tier(at), Some(tier)) => tier.store(at, &bytes).and_then(|()| {
                let from = t.since(FsyncPhase::Write, from);
                let r = tier.persist();
                t.since(FsyncPhase::Flush, from);
                r
            }),
            (Target::Tier(_), None) => unreachable!("placed in a tier"),
        };
        std::mem::forget(unwinding);
        let mut g = t.time(FsyncPhase::Lock, || self.lock());
        let from = Instant::now();
        g.epochs.set_writing(false);
        let r = match r {
            Ok(()) => Ok(settle(&mut g, &outcomes)),
            Err(e) => {
                // the others fall back to a commit, which refuses: the file system failed
                let e = FsError::from(e);
                g.fail("writing a byte-log batch", &e);
                let all: Vec<(u64, bool)> = reqs.iter().map(|r| (r.0, false)).collect();
                settle(&mut g, &all);
                Err(e)
            }
        };
        drop(g);
        self.done.notify_all();
        t.since(FsyncPhase::Finish, from);
        if matches!(r, Ok(true)) {
            t.served(FsyncPath::ByteLog);
        }
        r
    }
}
