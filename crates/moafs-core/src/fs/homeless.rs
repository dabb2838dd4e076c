//! Byte logging at write-back (paper 003's "at flush"): a commit logs the changed bytes of
//! small overwrites instead of writing the blocks home, and the blocks stay *homeless* —
//! cached, clean for commits, their home stale — until a later commit writes them home.
//!
//! A commit's first step (phase A, before co-writing places anything) looks at every dirty
//! block of every dirty regular file. A block whose every change an fsync already put in the
//! device log stays out of home without a new record. With `bytelog_writeback` (off by
//! default: it costs SQLite WAL through FUSE 14 % of its transactions, and a flash card
//! programs no less for random writes) a block already on disk whose units changed since it
//! was last logged are fewer than `bytelog_threshold` bytes goes into the commit's own
//! batch of records (flagged as a commit batch) instead of the commit's data — if it is
//! being rewritten: it has records already (an fsync logged it, on the device: records in
//! the tier, which every commit empties, send it home), or a commit wrote it home before
//! while it was cached. A block changed once and never again costs its records *and* the
//! home write a cleaning owes it, more than the home write alone (measured: random 1.5 KB
//! writes over 64 MiB on the flash model, `docs/results/HISTORY-benchmarks.md`). The batch is written before
//! the commit's ordering flush, so it is durable before the transaction; its records are
//! numbered at or below the floor that transaction's superblock records — a reader counts
//! a commit batch only then (a commit that never became durable leaves a batch above the
//! floor it knows, which it ignores).
//!
//! Records at or below the floor used to be dead (the commit's snapshot held them). Now the
//! records of homeless blocks must survive later commits, so the superblock also records
//! where reading starts (`bytelog_first`, the *pin*: the device batch holding the oldest
//! record some homeless block needs). Every other record read from there up to the floor is
//! covered by a commit: each commit writes, in its batch, a *void* record for every block
//! with records in the live part of the log that is not homeless after it (it went home, or
//! was freed), and a reader skips records of a block older than its newest void. Times at or
//! below the floor are covered by the commit's inodes. Homeless blocks whose records are
//! only in the tier were logged again (above), so the tier never needs reading below the
//! floor.
//!
//! A homeless block is never evicted (it is not in the cache's age order) and pins the log.
//! A commit *cleans* — writes every homeless block home, in place (its records hold every
//! change since it was last home, so a torn write is repaired by replaying them) — when the
//! log's live part is over half the ring, homeless blocks reach a quarter of the cache or
//! the journal's share for logged blocks, an fsync found no room in the log, or at unmount.
//! After a cleaning commit nothing pins the log: reading starts after the floor again.
//!
//! Logged blocks (homeless, or dirty with records) stay within a share of the journal: a
//! logged block that changes by more than the threshold goes home through the transaction
//! (a block with records may not be written in place unless the records hold every change).

use super::bytelog::unit_records;
use super::Inner;
use crate::error::FsResult;
use crate::format::bytelog::{
    batch_salt, batch_sectors, encode_batch_flags, Record, RecordBody, BATCH_COMMIT, BATCH_HEADER,
    LOG_SECTOR,
};
use std::collections::HashSet;

/// A dirty block a commit logs: (inode, logical block, home).
type Logged = (u64, u64, u64);

impl Inner {
    /// Logged blocks (homeless or dirty with records) the commits and fsyncs keep at most.
    pub(crate) fn logged_share(&self) -> u64 {
        self.journal.as_ref().map_or(0, |j| j.len / 4)
    }

    /// The commit's write-back byte logging (module comment), in phase A: the batch to write
    /// (byte offset on the device, bytes) before the commit's ordering flush, if any.
    pub(crate) fn log_writeback(&mut self) -> FsResult<Option<(u64, Vec<u8>)>> {
        if !self.bytelog_active() {
            return Ok(None);
        }
        if !self.opts.bytelog_writeback && self.book.logged() == 0 {
            // no block has records (none homeless either): nothing to keep out of home,
            // nothing pins the log — the common case of the default, at no cost per commit
            if let Some(log) = self.bytelog.as_mut() {
                log.pin = None;
                log.clean_next = false;
            }
            return Ok(None);
        }
        let bs = self.bs() as u64;
        let cap = (self.budget.cache_bytes() / bs / 4).min(self.logged_share());
        let log = self.bytelog.as_ref().expect("active");
        if log.clean_next || log.used() * 2 > log.ring.units || self.book.homeless_count() >= cap {
            self.clean_homeless();
            return Ok(None);
        }
        // The dirty blocks to log, and their records (numbered from 0).
        let mut files = self.dirty_order.clone();
        files.sort_unstable();
        files.dedup();
        let max_sectors = log.ring.units / 4;
        let mut logged: Vec<Logged> = Vec::new();
        let mut records: Vec<Record> = Vec::new();
        let mut data_bytes = 0;
        // the batch's size so far (header and records; voids are added below)
        let mut batch = BATCH_HEADER;
        let mut newly = 0;
        'files: for ino in files {
            let Some(node) = self.inodes.get(&ino) else {
                continue;
            };
            if node.kind_mode() != libc::S_IFREG {
                continue;
            }
            let mut blocks = Vec::new();
            for idx in node.cache.dirty_blocks() {
                let cb = node.cache.get(&idx).expect("dirty blocks are cached");
                if cb.reserved || cb.unknown || self.over_threshold(cb.unlogged) {
                    continue; // the block path (through the transaction if it has records)
                }
                if cb.tiered {
                    // its records are in the tier, which this commit empties: home (logging
                    // its changed units again on the device was measured: fewer host bytes,
                    // more flash programs — 0.68x block-only's instead of 0.65x)
                    continue;
                }
                if !self.opts.bytelog_writeback && (cb.unlogged != 0 || cb.since == 0) {
                    continue; // off: only blocks whose changes are all in the device log
                }
                if !cb.logged && cb.homes < 1 {
                    // changed for the first time since it was cached: logging it would
                    // add its records to the home write a cleaning owes it anyway; a
                    // block written home before is being rewritten, and logging pays
                    continue;
                }
                if cb.unlogged == 0 && cb.since == 0 {
                    continue; // nothing on the device to keep it by
                }
                blocks.push((idx, cb.unlogged, cb.logged));
            }
            for (idx, units, was_logged) in blocks {
                if !was_logged && self.book.logged() + newly >= cap {
                    break 'files;
                }
                let phys = self.bmap(ino, idx)?;
                if phys == 0 {
                    continue;
                }
                let mut mine = Vec::new();
                let data = self.inodes[&ino]
                    .cache
                    .get(&idx)
                    .expect("dirty")
                    .data
                    .clone();
                let bytes = unit_records(ino, idx, phys, units, &data, &mut mine);
                let more: usize = mine.iter().map(Record::encoded_len).sum();
                if (batch + more).div_ceil(LOG_SECTOR) as u64 > max_sectors {
                    break 'files;
                }
                batch += more;
                records.extend(mine);
                data_bytes += bytes;
                newly += !was_logged as u64;
                logged.push((ino, idx, phys));
            }
        }
        // Blocks homeless after this commit; every other block with live records gets a void.
        let mut kept: HashSet<u64> = self.book.homeless().map(|(_, h)| h.0).collect();
        kept.extend(logged.iter().map(|l| l.2));
        let log = self.bytelog.as_mut().expect("active");
        if kept.is_empty() {
            log.pin = None;
            return Ok(None);
        }
        let mut voids: Vec<Record> = log
            .recorded
            .iter()
            .filter(|(home, _)| !kept.contains(home))
            .map(|(home, (ino, block, _))| Record {
                seq: 0,
                ino: *ino,
                body: RecordBody::Void {
                    block: *block,
                    home: *home,
                },
            })
            .collect();
        voids.sort_unstable_by_key(|r| match r.body {
            RecordBody::Void { home, .. } => home,
            _ => 0,
        });
        let void_count = voids.len() as u64;
        let mut all = voids;
        all.extend(records);
        if all.is_empty() {
            // every change of the blocks to log is in the device log already (an fsync
            // logged it): homeless without a batch
            self.make_homeless(&logged, 0);
            self.pin_homeless();
            self.counters.bytelog_wb_blocks += logged.len() as u64;
            return Ok(None);
        }
        let n = batch_sectors(&all) as u64;
        let Some(pos) = log.ring.place(n) else {
            // no room for the batch: this commit takes everything home instead
            self.clean_homeless();
            return Ok(None);
        };
        for (k, r) in all.iter_mut().enumerate() {
            r.seq = log.next_seq + k as u64;
        }
        let first = log.next_seq;
        log.next_seq += all.len() as u64;
        log.ring.head = pos + n;
        log.wrote(&all, pos);
        let at = log.start + pos * LOG_SECTOR as u64;
        let bytes = encode_batch_flags(&all, batch_salt(&log.uuid, pos), LOG_SECTOR, BATCH_COMMIT);
        self.make_homeless(&logged, first);
        self.pin_homeless();
        let c = &mut self.counters;
        c.bytelog_wb_batches += 1;
        c.bytelog_wb_blocks += logged.len() as u64;
        c.bytelog_voids += void_count;
        c.bytelog_records += all.len() as u64;
        c.bytelog_sectors += n;
        c.bytelog_data_bytes += data_bytes;
        Ok(Some((at, bytes)))
    }

    /// The blocks `logged` are homeless from now on: their records since they were last
    /// home begin at their first device batch, or in the batch of records `batch..`.
    fn make_homeless(&mut self, logged: &[Logged], batch: u64) {
        for &(ino, idx, phys) in logged {
            let node = self.inodes.get_mut(&ino).expect("listed by log_writeback");
            let since = match node.cache.get(&idx).map(|c| c.since) {
                Some(s) if s != 0 => s,
                _ => batch,
            };
            debug_assert!(since != 0, "a homeless block without records");
            node.cache
                .make_homeless(&mut self.book, ino, idx, phys, since);
        }
    }

    /// Every homeless block goes home with this commit (dirty again, every change in
    /// records: written in place); nothing pins the log after it.
    /// Makes the next commit write every block home: the homeless blocks are dirty again and
    /// that commit logs none (FIBMAP, `Fs::bmap`: the device must hold the bytes at home).
    pub(crate) fn home_at_next_commit(&mut self) {
        if !self.bytelog_active() {
            return;
        }
        self.clean_homeless();
        if let Some(log) = self.bytelog.as_mut() {
            log.clean_next = true;
        }
    }

    fn clean_homeless(&mut self) {
        let list: Vec<(u64, u64)> = self.book.homeless().map(|(k, _)| *k).collect();
        let mut last = None;
        for &(ino, idx) in &list {
            if let Some(node) = self.inodes.get_mut(&ino) {
                node.cache.unhome(&mut self.book, ino, idx);
                if last != Some(ino) {
                    self.dirty_order.push(ino);
                    last = Some(ino);
                }
            }
        }
        if let Some(log) = self.bytelog.as_mut() {
            log.pin = None;
            log.clean_next = false;
        }
        if !list.is_empty() {
            self.counters.bytelog_cleanings += 1;
            self.counters.bytelog_cleaned_blocks += list.len() as u64;
        }
    }

    /// Reading must start at the device batch holding the oldest record a homeless block
    /// needs (its `since`).
    fn pin_homeless(&mut self) {
        let oldest = self.book.homeless().map(|(_, h)| h.1).min();
        let log = self.bytelog.as_mut().expect("active");
        log.pin = oldest.and_then(|s| {
            log.batches
                .iter()
                .rev()
                .find(|b| b.first <= s)
                .map(|b| (b.first, b.pos))
        });
        debug_assert!(
            oldest.is_none() || log.pin.is_some(),
            "a homeless block's batch"
        );
    }
}
