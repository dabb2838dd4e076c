//! Write-behind: the new blocks of large files go to the device between commits, outside
//! the engine lock, while the FUSE threads go on filling the cache.
//!
//! A commit writes everything dirtied since the last one in its own phase (B): without
//! write-behind a streaming writer's tens of MiB wait for the write-back timer, the next
//! fsync waits for all of them, and writers over the dirty threshold wait for that commit
//! (`Fs::throttle`). Write-behind writes the new blocks of large files between commits, so a
//! commit finds little file data left: (A) under the lock, the dirty whole blocks without a disk address
//! of files larger than the direct blocks (never co-written) get their addresses as a commit
//! would give them (`place_blocks`), and their buffers are snapshotted (an `Arc` each: cached
//! bytes are never changed in place); (B) with the lock released, they are written in
//! physically contiguous vectored runs; (C) under the lock again, each block that is still
//! dirty with the same buffer at the same address leaves the cache (the kernel's page cache
//! holds the pages; the engine's cache would only be a second copy) and its buffer is kept
//! for new blocks.
//!
//! Why it is safe:
//! - Nothing on disk points at the new addresses until a commit writes the metadata, and
//!   `Behind::unflushed` makes that commit flush the device before its metadata (journal=ordered),
//!   as for data it wrote itself. Overwrites of blocks that already had an address are left to
//!   the commit (journal=ordered journals them); with journal=data nothing is written behind.
//! - A round is one of the jobs of the committer: it holds `Fs::commit_mx` across its three
//!   steps and marks the epochs `writing` during (B), like a commit, so no commit runs while (B)
//!   writes: no block freed meanwhile becomes reusable (frees become allocatable only at the
//!   end of a commit), no commit writes the same blocks, and nothing evicts them.
//! - Blocks stay dirty until (C), so eviction cannot drop one whose bytes are not yet on the
//!   device; a block rewritten during (B) has a new buffer and stays dirty for the commit.
//!   After (C) a read of a dropped block finds its address and the bytes (B) wrote there.
//! - A failed device write turns the file system read-only, as a failed commit does.

use super::cache::Block;
use super::{Fs, Inner, JournalMode};
use crate::error::FsResult;
use crate::format::N_DIRECT;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One physically contiguous run to write: its first block and (inode, logical block, bytes).
pub(crate) struct WbRun {
    phys: u64,
    blocks: Vec<(u64, u64, Block)>,
}

/// Longest vectored request of write-behind, in blocks (as `write_runs`).
const MAX_RUN: usize = 256;

/// Write-behind's part of the engine state.
#[derive(Debug, Default)]
pub(crate) struct Behind {
    /// Dirty blocks at which the next round starts.
    mark: u64,
    /// A round wrote data since the last commit: that commit flushes before its metadata.
    unflushed: bool,
}

impl Behind {
    /// Whether a round wrote data since the last call (a commit asks, and clears it).
    pub(crate) fn take_unflushed(&mut self) -> bool {
        std::mem::take(&mut self.unflushed)
    }
}

impl Inner {
    /// Whether dirty data has reached the next write-behind mark.
    pub(crate) fn wants_write_behind(&self) -> bool {
        self.opts.write_behind_bytes > 0 && self.book.dirty() >= self.behind.mark
    }

    /// The next write-behind starts once this much more data is dirty.
    pub(crate) fn rearm_write_behind(&mut self) {
        let step = (self.opts.write_behind_bytes / self.bs() as u64).max(1);
        self.behind.mark = self.book.dirty() + step;
    }

    /// (A): places the eligible blocks and snapshots them, as runs.
    fn plan_write_behind(&mut self) -> FsResult<Vec<WbRun>> {
        let r = self.plan_write_behind_inner();
        if r.is_err() {
            self.rearm_write_behind(); // not at every later write
        }
        r
    }

    fn plan_write_behind_inner(&mut self) -> FsResult<Vec<WbRun>> {
        let mut runs = Vec::new();
        if self.opts.write_behind_bytes == 0
            || self.opts.read_only
            || self.failed
            || self.unmounted
            || self.opts.journal == JournalMode::Data
        {
            return Ok(runs);
        }
        let bs = self.bs() as u64;
        let mut files = self.dirty_order.clone();
        files.sort_unstable();
        files.dedup();
        // Young data (`aging.rs`) is left in memory until dirty data passes half its bound:
        // the kernel's background write-back threshold below the one writers wait at.
        let background = self.book.dirty() * bs > self.budget.dirty_bytes() / 2;
        let now = std::time::Instant::now();
        for ino in files {
            let Some(node) = self.inodes.get(&ino) else {
                continue;
            };
            let size = node.d.size;
            if node.cache.dirty_count() == 0
                || node.kind_mode() != libc::S_IFREG
                || size <= N_DIRECT as u64 * bs
                || (!background && self.aging.young(ino, now))
            {
                continue;
            }
            // Whole blocks inside the file (a partial last block is likely to be written
            // again), dirty, without an address yet: those holding a reservation (a block
            // dirtied without an address keeps one until it is placed).
            let fresh: Vec<u64> = node
                .cache
                .dirty_below(size / bs)
                .filter(|i| node.cache.get(i).is_some_and(|c| c.reserved))
                .collect();
            if fresh.is_empty() {
                continue;
            }
            let placed = self.place_blocks(ino, fresh)?;
            // addresses past its disk size: its inode must carry its size next (`aging.rs`)
            self.aging.make_due(ino);
            let node = self.inode(ino)?;
            if node.meta_reserved && node.d.indirect[0] != 0 {
                // The single indirect block promised at write() has its address now (a commit
                // would clear all such promises at its end).
                node.meta_reserved = false;
                self.release_meta_reserved(1);
            }
            let node = &self.inodes[&ino];
            for (phys, idx, overwrite) in placed {
                if overwrite {
                    continue; // had an address after all: the commit's (journaled) business
                }
                let data = node
                    .cache
                    .get(&idx)
                    .expect("placed blocks are cached")
                    .data
                    .clone();
                match runs.last_mut() {
                    Some(WbRun { phys: p, blocks })
                        if *p + blocks.len() as u64 == phys && blocks.len() < MAX_RUN =>
                    {
                        blocks.push((ino, idx, data));
                    }
                    _ => runs.push(WbRun {
                        phys,
                        blocks: vec![(ino, idx, data)],
                    }),
                }
            }
        }
        Ok(runs)
    }

    /// (C): drops from the cache what (B) wrote and nothing has changed since (the kernel's
    /// page cache holds those pages; a later read or partial write reads the block back), and
    /// keeps the buffers for new blocks; returns how many.
    fn finish_write_behind(&mut self, runs: Vec<WbRun>) -> FsResult<u64> {
        // The bytes are on the device: whatever happens below, the next commit flushes them
        // before metadata that may point at them.
        self.behind.unflushed = true;
        let mut done = 0;
        let ios = runs.len() as u64;
        for run in runs {
            for (k, (ino, idx, data)) in run.blocks.into_iter().enumerate() {
                let unchanged = self
                    .inodes
                    .get(&ino)
                    .and_then(|n| n.cache.get(&idx))
                    .is_some_and(|c| c.dirty && Arc::ptr_eq(&c.data, &data));
                drop(data); // the snapshot: the cache's reference is the last one now
                if !unchanged || self.bmap(ino, idx)? != run.phys + k as u64 {
                    continue;
                }
                let node = self.inodes.get_mut(&ino).expect("bmap loaded it");
                if let Some(c) = node.cache.remove(&mut self.book, ino, idx) {
                    self.release_reserved(c.reserved as u64); // none: placed blocks used theirs
                    self.spare.recycle(c.data);
                    done += 1;
                }
            }
        }
        self.counters.data_write_ios += ios;
        self.counters.data_blocks_written += done;
        self.counters.written_behind += done;
        self.rearm_write_behind();
        Ok(done)
    }
}

impl Fs {
    /// One round of write-behind (see the module comment): returns the blocks written and
    /// marked clean. Needs no thread of its own; [`Fs::write_behind_worker`] calls it.
    pub fn write_behind(&self) -> FsResult<u64> {
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        let runs = g.plan_write_behind()?;
        if runs.is_empty() {
            g.rearm_write_behind();
            return Ok(0);
        }
        g.epochs.set_writing(true);
        let (dev, bs) = (g.dev.clone(), g.bs() as u64);
        drop(g);
        let unwinding = super::InFlight(self);
        let mut written = Ok(());
        for run in &runs {
            let bufs: Vec<&[u8]> = run.blocks.iter().map(|b| &b.2[..]).collect();
            if let Err(e) = dev.writev_at(run.phys * bs, &bufs) {
                written = Err(e);
                break;
            }
        }
        std::mem::forget(unwinding);
        let mut g = self.lock();
        g.epochs.set_writing(false);
        g.fetch.changed(); // home blocks written (`fetch.rs`)
        let r = match written {
            Ok(()) => g.finish_write_behind(runs),
            Err(e) => {
                let e = crate::error::FsError::from(e);
                g.fail("write-behind", &e);
                Err(e)
            }
        };
        drop(g);
        self.done.notify_all();
        r
    }

    /// Runs write-behind whenever writes pass the mark, until [`Fs::stop_write_behind`].
    /// The FUSE adapter gives it a thread of its own.
    pub fn write_behind_worker(&self) {
        loop {
            {
                let mut stop = self.wb.stop.lock().unwrap_or_else(|e| e.into_inner());
                while !*stop && !self.wb.wanted.load(Ordering::Acquire) {
                    stop = self.wb.cv.wait(stop).unwrap_or_else(|e| e.into_inner());
                }
                if *stop {
                    return;
                }
                self.wb.wanted.store(false, Ordering::Release);
            }
            if let Err(e) = self.write_behind() {
                log::error!("write-behind: {e}");
            }
        }
    }

    /// Ends [`Fs::write_behind_worker`] (a round in progress finishes first).
    pub fn stop_write_behind(&self) {
        *self.wb.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wb.cv.notify_all();
    }

    /// Wakes the worker (cheap when it is already awake).
    pub(crate) fn wake_write_behind(&self) {
        if !self.wb.wanted.swap(true, Ordering::AcqRel) {
            let _stop = self.wb.stop.lock().unwrap_or_else(|e| e.into_inner());
            self.wb.cv.notify_one();
        }
    }
}

/// The worker's wake-up: `wanted` is set by writes that pass the mark.
#[derive(Default)]
pub(crate) struct WbSignal {
    wanted: std::sync::atomic::AtomicBool,
    stop: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}
