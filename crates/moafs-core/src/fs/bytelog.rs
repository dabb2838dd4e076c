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
use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::bytelog::{
    batch_header, batch_salt, batch_sectors, decode_batch, encode_batch, Record, RecordBody,
    LOG_SECTOR,
};
use crate::format::{DiskInode, Geometry, Superblock, INODE_BYTES};
use std::collections::BTreeMap;

/// Blocks whose old contents an fsync reads to find what changed, at most (more: the file
/// is being rewritten, not updated; the committer takes it).
const MAX_HOME_READS: usize = 64;

/// The byte log while mounted.
pub(crate) struct ByteLog {
    /// Byte offset of the log on the device, and its length in sectors.
    pub start: u64,
    pub sectors: u64,
    /// Where the next batch goes, and where the records the last commit did not cover
    /// begin (sectors).
    pub head: u64,
    pub tail: u64,
    pub next_seq: u64,
    pub uuid: [u8; 16],
    /// Blocks with records not yet taken by a commit (each journaled by the next commit).
    pub live_blocks: u64,
}

impl ByteLog {
    /// The byte log of `sb` (None without one); `last`: the newest record sequence number
    /// known (the floor, or what replay applied). Empty: everything is home.
    pub fn new(sb: &Superblock, last: u64) -> Option<ByteLog> {
        sb.has_bytelog().then(|| ByteLog {
            start: sb.bytelog_start * sb.block_size as u64,
            sectors: sb.bytelog_blocks as u64 * (sb.block_size as u64 / LOG_SECTOR as u64),
            head: 0,
            tail: 0,
            next_seq: last.max(sb.bytelog_floor) + 1,
            uuid: sb.uuid,
            live_blocks: 0,
        })
    }

    /// Where a batch of `n` sectors goes without touching a live one. The head never
    /// reaches the tail from behind (`head == tail` means empty).
    fn place(&self, n: u64) -> Option<u64> {
        if n > self.sectors / 2 {
            return None;
        }
        if self.head == self.tail {
            // nothing live
            return Some(if self.head + n <= self.sectors {
                self.head
            } else {
                0
            });
        }
        if self.head > self.tail {
            if self.head + n <= self.sectors {
                Some(self.head)
            } else {
                (n < self.tail).then_some(0)
            }
        } else {
            (self.head + n < self.tail).then_some(self.head)
        }
    }

    /// The superblock being written covers every record so far (a commit's snapshot, or
    /// everything home at mount and unmount): its floor and tail.
    pub fn covered(&mut self, sb: &mut Superblock) {
        if self.head >= self.sectors {
            self.head = 0; // the ring is empty: start anywhere
        }
        sb.bytelog_floor = self.next_seq - 1;
        sb.bytelog_tail = self.head as u32;
        self.tail = self.head;
        self.live_blocks = 0;
    }
}

/// What the per-file path found for a file.
pub(crate) enum Plan {
    /// Nothing of the file is unsaved (the last commit or earlier records hold it all).
    Nothing,
    /// Write this batch (one request) and flush.
    Batch { at: u64, bytes: Vec<u8> },
    /// Not for the byte log: commit.
    Commit,
}

impl Inner {
    /// Whether an fsync of `ino` may be served by the byte log (cheap: no I/O, no commit
    /// state); [`Inner::bytelog_plan`] decides.
    pub(crate) fn bytelog_candidate(&mut self, ino: u64) -> FsResult<bool> {
        if !self.opts.bytelog
            || self.bytelog.is_none()
            || self.opts.journal == JournalMode::Writeback
            || self.opts.read_only
            || self.failed
        {
            return Ok(false);
        }
        let n = self.inode(ino)?;
        Ok(n.kind_mode() == libc::S_IFREG && n.saved.is_some() && !n.xattr_dirty)
    }

    /// Plans the per-file fsync of `ino` (module comment). Only with no commit in flight:
    /// the caller holds `commit_mx`.
    pub(crate) fn bytelog_plan(&mut self, ino: u64) -> FsResult<Plan> {
        if !self.bytelog_candidate(ino)? || self.committing {
            return Ok(Plan::Commit);
        }
        let bs = self.bs();
        let node = &self.inodes[&ino];
        let Some(saved) = &node.saved else {
            return Ok(Plan::Commit);
        };
        let mut same = node.d.clone();
        [same.atime, same.mtime, same.ctime] = [saved.atime, saved.mtime, saved.ctime];
        if same != *saved || node.meta_reserved || node.dir.is_some() {
            return Ok(Plan::Commit);
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
                return Ok(Plan::Commit);
            }
            if cb.unknown {
                reads += 1;
                if reads > MAX_HOME_READS {
                    return Ok(Plan::Commit);
                }
            } else if cb.unlogged.count_ones().min(units) as usize * UNIT
                >= self.opts.bytelog_threshold as usize
            {
                return Ok(Plan::Commit);
            }
            blocks.push((idx, cb.unknown, cb.logged));
        }
        let mut logs: Vec<LogBlock> = Vec::new();
        let mut home = vec![0u8; bs];
        for (idx, unknown, logged) in blocks {
            let phys = self.bmap(ino, idx)?;
            if phys == 0 {
                return Ok(Plan::Commit);
            }
            let (log, found) = if unknown {
                // A whole block arrived without a cached copy: the old one is at home.
                self.check_data_block(phys)?;
                self.dev.read_at(phys * bs as u64, &mut home)?;
                self.counters.bytelog_home_reads += 1;
                let node = self.inodes.get_mut(&ino).expect("loaded");
                let c = units_changed(&home, &node.cache.get(&idx).expect("dirty").data);
                if c.count_ones() as usize * UNIT >= self.opts.bytelog_threshold as usize {
                    // keep what was found: the next fsync need not read it again
                    node.cache.set_changed(idx, c);
                    return Ok(Plan::Commit);
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
        let journal_share = self.journal.as_ref().map_or(0, |j| j.len / 4);
        let log = self.bytelog.as_ref().expect("candidate has a byte log");
        if log.live_blocks + newly_logged > journal_share {
            // The next commit journals every logged block: keep that within a share of
            // the journal.
            return Ok(Plan::Commit);
        }
        let mut records = Vec::new();
        let mut seq = log.next_seq;
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
        if records.is_empty() {
            self.note_logged(ino, &logs);
            return Ok(Plan::Nothing);
        }
        let n = batch_sectors(&records) as u64;
        let log = self.bytelog.as_mut().expect("candidate has a byte log");
        let Some(pos) = log.place(n) else {
            return Ok(Plan::Commit);
        };
        let count = records.len() as u64;
        let bytes = encode_batch(&records, batch_salt(&log.uuid, pos));
        log.next_seq += count;
        log.head = pos + n;
        log.live_blocks += newly_logged;
        let at = log.start + pos * LOG_SECTOR as u64;
        self.note_logged(ino, &logs);
        self.inodes.get_mut(&ino).expect("loaded").logged_times = now_times;
        self.counters.bytelog_records += count;
        self.counters.bytelog_sectors += n;
        self.counters.bytelog_data_bytes += data_bytes;
        Ok(Plan::Batch { at, bytes })
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

/// A block an fsync logs: (logical block, home, units to log, changed units if found by
/// reading home, it had records already).
type LogBlock = (u64, u64, Units, Option<Units>, bool);

impl Fs {
    /// The per-file fsync path (module comment): true when the byte log served the fsync
    /// of `ino` (its changes are durable), false when it must commit.
    pub(super) fn fsync_bytelog(&self, ino: u64) -> FsResult<bool> {
        if !self.lock().bytelog_candidate(ino)? {
            return Ok(false);
        }
        // A job of the committer: no commit in flight while it plans and writes.
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        let plan = match g.bytelog_plan(ino) {
            Ok(p) => p,
            Err(e) => {
                if !matches!(e, FsError::Stale { .. }) {
                    g.failed = true; // a read of a home block failed, or the image is bad
                }
                return Err(e);
            }
        };
        let (at, bytes) = match plan {
            Plan::Nothing => {
                g.counters.bytelog_fsyncs += 1;
                return Ok(true);
            }
            Plan::Commit => {
                g.counters.bytelog_fallbacks += 1;
                return Ok(false);
            }
            Plan::Batch { at, bytes } => (at, bytes),
        };
        g.committing = true;
        let dev = g.dev.clone();
        drop(g);
        let unwinding = super::InFlight(self);
        let r = dev.write_at(at, &bytes).and_then(|()| dev.flush());
        std::mem::forget(unwinding);
        let mut g = self.lock();
        g.committing = false;
        let r = match r {
            Ok(()) => {
                g.counters.bytelog_fsyncs += 1;
                if let Some(j) = g.journal.as_mut() {
                    j.flushed(); // every checkpoint write issued so far is durable too
                }
                Ok(true)
            }
            Err(e) => {
                g.failed = true;
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
    blocks: &mut BTreeMap<u64, Vec<u8>>,
) -> FsResult<ByteLogReplay> {
    let mut out = ByteLogReplay::default();
    for r in read_live_records(dev, sb)? {
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

/// The records of the byte log above the floor of `sb`, in order: the chain of batches
/// from the tail with consecutive sequence numbers (a batch goes at the sector after the
/// last one, or at the start when it did not fit before the end).
pub fn read_live_records(dev: &dyn BlockDevice, sb: &Superblock) -> FsResult<Vec<Record>> {
    let mut out = Vec::new();
    if !sb.has_bytelog() {
        return Ok(out);
    }
    let start = sb.bytelog_start * sb.block_size as u64;
    let sectors = sb.bytelog_blocks as u64 * (sb.block_size as u64 / LOG_SECTOR as u64);
    let mut want = sb.bytelog_floor + 1;
    let mut pos = sb.bytelog_tail as u64;
    let mut first = vec![0u8; LOG_SECTOR];
    // at most one lap: every batch takes a sector
    for _ in 0..sectors {
        let mut found = None;
        for p in [pos, 0] {
            if p >= sectors {
                continue;
            }
            dev.read_at(start + p * LOG_SECTOR as u64, &mut first)?;
            let Some((seq, n)) = batch_header(&first) else {
                continue;
            };
            if seq != want || p + n as u64 > sectors {
                continue;
            }
            let mut b = vec![0u8; n * LOG_SECTOR];
            dev.read_at(start + p * LOG_SECTOR as u64, &mut b)?;
            if let Some(recs) =
                decode_batch(&b, batch_salt(&sb.uuid, p), sb.block_size).map_err(|e| at(e, p))?
            {
                found = Some((p + n as u64, recs));
                break;
            }
        }
        let Some((next, recs)) = found else {
            break;
        };
        want += recs.len() as u64;
        out.extend(recs);
        pos = next;
    }
    Ok(out)
}

/// Names the sector of a byte-log error.
fn at(e: FsError, sector: u64) -> FsError {
    match e {
        FsError::Corrupt { what, detail, .. } => FsError::Corrupt {
            what,
            block: sector,
            detail: format!("{detail} (sector {sector} of the byte log)"),
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
