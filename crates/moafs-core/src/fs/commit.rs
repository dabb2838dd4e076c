//! Write-back and commit: the only place where disk addresses are chosen and metadata written.
//!
//! A commit runs in three phases. (A) `commit_begin`, under the engine lock: file data is
//! placed (first the dirty small files co-written by directory, `cowrite.rs`, then every
//! other dirty file on its own in the order files became dirty, allocating addresses for
//! blocks that have none) and snapshotted (cached bytes are immutable `Arc`s); overwrites go
//! into the transaction with `journal=ordered`, all data with `journal=data` (`write_runs`);
//! every changed metadata block (directory, xattr, indirect, inode-table blocks, bitmaps,
//! group headers, superblocks) is encoded into the transaction, and the journal's space and
//! sequence number are taken. Everything taken is marked clean. (B) `CommitIo::run`, with the
//! engine lock released (the caller holds `Fs::commit_mx`): data home, a flush when data must
//! precede metadata, the transaction as one request, a flush, the checkpoint. (C)
//! `commit_end`, under the lock again: frees from before the previous commit become
//! allocatable, the durable epoch advances and waiting fsyncs return.
//!
//! While (B) runs, operations go on: they change the in-memory state the next commit takes.
//! Nothing they do can reach what (B) writes: blocks freed meanwhile are shown free by the
//! next transaction and reusable only after the one after it (`alloc.rs`), cached blocks are
//! not evicted (a clean block whose bytes are still on their way stays readable from the
//! cache), and in-memory state is dropped only in (C).

use super::cache::Block;
use super::checkpoint::Checkpoint;
use super::journal::TxnIo;
use super::{Inner, JournalMode};
use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::{bitmap_crc, encode_indirect, DiskInode, XattrBlock};
use std::time::Instant;

/// Inode-table blocks cached (for read-modify-write, and inodes read back) at most: 16 MiB
/// of 4 KiB blocks.
const ITABLE_BLOCKS: usize = 4096;

/// What phase (B) of a commit writes, with the engine lock released.
pub(crate) struct CommitIo {
    pub epoch: u64,
    /// The commit's byte-log batch (`homeless.rs`): byte offset, bytes. Before the
    /// ordering flush.
    log_batch: Option<(u64, Vec<u8>)>,
    /// File data home: (first block, the buffers of a contiguous run).
    data: Vec<(u64, Vec<Block>)>,
    /// A flush after the data, before anything that points at it.
    order_flush: bool,
    /// Journaled blocks this commit writes home before anything else (`checkpoint.rs`).
    ckpt: Option<Checkpoint>,
    txn: TxnIo,
}

/// The transaction a commit is building in its phase (A), and what decides its order: the
/// metadata images, the file data it writes home or journals, and the flags operations set
/// since the last commit. Owned by the committer; operations reach it through the methods.
#[derive(Debug, Default)]
pub(crate) struct Building {
    /// Blocks of the transaction: (home block, image).
    blocks: Vec<(u64, Vec<u8>)>,
    /// Which of those are file data (a transaction too large for the journal writes them in
    /// place before the metadata that points at them).
    data_blocks: Vec<u64>,
    /// `journal=data`: data blocks the transaction may still carry.
    data_budget: u64,
    /// File data written home: (first block, buffers of a contiguous run).
    out_data: Vec<(u64, Vec<Block>)>,
    /// The commit is small (at most `small_commit_blocks` dirty blocks): with
    /// `journal=ordered` its new data blocks go into the transaction too.
    small: bool,
    /// Co-writing moved overwritten data since the last commit: order data before metadata
    /// in this commit whatever the journal mode.
    order_data_once: bool,
    /// A rename replaced a file since the last commit (ext4's auto_da_alloc: order data).
    replaced_by_rename: bool,
}

impl Building {
    /// Adds metadata images (the superblocks) to the transaction.
    pub(crate) fn add(&mut self, images: impl IntoIterator<Item = (u64, Vec<u8>)>) {
        self.blocks.extend(images);
    }

    /// The file-data blocks among the transaction's, taken.
    pub(crate) fn take_data_blocks(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.data_blocks)
    }

    /// Whether nothing is being built: no data runs and no block images.
    pub(crate) fn is_empty(&self) -> bool {
        self.out_data.is_empty() && self.blocks.is_empty()
    }

    /// Whether the commit being planned is small (see `small`).
    pub(crate) fn is_small(&self) -> bool {
        self.small
    }

    /// Co-writing moved overwritten data: this commit orders data before metadata.
    pub(crate) fn order_data_once(&mut self) {
        self.order_data_once = true;
    }

    /// A rename replaced a file: the next commit orders data before metadata.
    pub(crate) fn replaced_by_rename(&mut self) {
        self.replaced_by_rename = true;
    }
}

impl CommitIo {
    /// Phase (B): the device I/O of a commit, in order (see the module comment).
    pub fn run(&self, dev: &dyn BlockDevice, bs: u64) -> FsResult<()> {
        if let Some(c) = &self.ckpt {
            // First, and durable before anything of this commit: its superblock says every
            // transaction so far is home (blocks this commit revokes included, which it
            // then overwrites or frees), and this commit's transaction may reuse their space.
            c.run(bs)?;
            dev.flush()?;
        }
        if let Some((at, bytes)) = &self.log_batch {
            dev.write_at(*at, bytes)?;
        }
        for (phys, bufs) in &self.data {
            let v: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
            dev.writev_at(phys * bs, &v)?;
        }
        if self.order_flush {
            dev.flush()?;
        }
        self.txn.run(dev, bs, self.order_flush)
    }
}

impl Inner {
    /// The files whose data this commit holds back (`aging.rs`), in the order they became
    /// dirty, taken out of `dirty_order`: none unless the write-back timer started it.
    fn hold_young(&mut self) -> Vec<u64> {
        let mut held = Vec::new();
        if self.aging.begin_commit(self.over_dirty_max()) {
            let now = Instant::now();
            let (h, rest): (Vec<u64>, Vec<u64>) = std::mem::take(&mut self.dirty_order)
                .into_iter()
                .partition(|&ino| self.may_hold(ino, now));
            self.dirty_order = rest;
            held = h;
        }
        self.aging.held(&held);
        held
    }

    /// A regular file with young dirty data none of which the byte log knows (`aging.rs`).
    fn may_hold(&self, ino: u64, now: Instant) -> bool {
        self.aging.young(ino, now)
            && self.inodes.get(&ino).is_some_and(|n| {
                n.kind_mode() == libc::S_IFREG
                    && n.cache.dirty_count() > 0
                    && n.cache.dirty_below(u64::MAX).all(|i| {
                        n.cache.get(&i).is_some_and(|b| {
                            !b.logged && b.since == 0 && !b.tiered && !b.homeless && !b.unknown
                        })
                    })
            })
    }

    /// Whether the write-back timer has anything to commit: a change other than young data
    /// a commit would hold back.
    pub(crate) fn timer_has_work(&self) -> bool {
        if self.alloc.has_pending()
            || !self.dead.is_empty()
            || !self.ind_dirty.is_empty()
            || self.alloc.groups.iter().any(|g| g.dirty)
        {
            return true;
        }
        // metadata of the inodes touched; data of the files listed dirty (every file with
        // dirty data is in `dirty_order`)
        let now = Instant::now();
        self.touched.iter().any(|i| {
            self.inodes.get(i).is_some_and(|n| {
                n.dirty || n.xattr_dirty || n.dir.as_ref().is_some_and(|d| d.any_dirty)
            })
        }) || self.dirty_order.iter().any(|i| {
            self.inodes
                .get(i)
                .is_some_and(|n| n.cache.dirty_count() > 0)
                && !self.may_hold(*i, now)
        })
    }

    /// Changes not yet in a commit (pending frees aside). Looks at the inodes touched since
    /// the last commit started, not at every inode.
    pub(crate) fn has_unsaved(&self) -> bool {
        self.book.dirty() > 0
            || !self.dead.is_empty()
            || !self.ind_dirty.is_empty()
            || self.alloc.groups.iter().any(|g| g.dirty)
            || self
                .touched
                .iter()
                .any(|i| self.inodes.get(i).is_some_and(|n| n.unsaved()))
    }

    /// The commit an fsync or sync must wait for (`docs/SEMANTICS.md`: everything changed
    /// before it becomes durable): the next one if anything is unsaved, else the one in
    /// flight (if any; durable already when none is).
    pub(crate) fn sync_epoch(&self) -> u64 {
        if self.has_unsaved() {
            self.epochs.started() + 1
        } else {
            self.epochs.started()
        }
    }

    /// [`Inner::sync_epoch`] for an fsync or sync: the next commit, if it is the one, holds
    /// no data back (`aging.rs`).
    pub(crate) fn sync_epoch_all(&mut self) -> u64 {
        let epoch = self.sync_epoch();
        if epoch > self.epochs.started() {
            self.aging.write_all();
        }
        epoch
    }

    /// Commits until every pending free is allocatable again (two commits at most).
    pub(crate) fn commit_to_free(&mut self) -> FsResult<()> {
        self.commit()?;
        if self.alloc.has_pending() {
            self.commit()?;
        }
        Ok(())
    }

    /// A whole commit with the engine lock held throughout (mount, unmount, the ENOSPC path,
    /// tests). Only when no commit or write-behind round is in flight (`CommitBusy` else: the
    /// caller lets go of the lock and waits, see `Fs::mutate`).
    pub(crate) fn commit(&mut self) -> FsResult<()> {
        if self.opts.read_only {
            return Ok(());
        }
        let io = self.commit_begin()?;
        let r = io.run(self.dev.as_ref(), self.bs() as u64);
        self.commit_end(io.epoch, r)
    }

    /// Phase (A) (module comment). On an error the file system turns read-only (nothing more
    /// is written that could contradict what is on disk).
    pub(crate) fn commit_begin(&mut self) -> FsResult<CommitIo> {
        if self.failed {
            return Err(FsError::ReadOnly);
        }
        if self.epochs.writing() {
            return Err(FsError::CommitBusy);
        }
        let r = self.commit_plan();
        if let Err(e) = &r {
            self.fail("planning a commit", e);
            self.building.out_data.clear();
            self.ckpt.end(false);
        }
        r
    }

    /// A write-back failed (`during` says which): from now on the file system refuses
    /// changes and every fsync fails (nothing more is written that could contradict what is
    /// on disk; what was not durable is lost). Said once in the log.
    pub(crate) fn fail(&mut self, during: &str, e: &FsError) {
        if !self.failed {
            log::error!(
                "{during}: {e}; the file system is read-only until it is remounted, changes \
                 since the last durable commit are not on the device and every fsync fails"
            );
        }
        self.failed = true;
    }

    /// Phase (C): `result` is what (B) returned.
    pub(crate) fn commit_end(&mut self, epoch: u64, result: FsResult<()>) -> FsResult<()> {
        self.epochs.io_ended();
        // home blocks changed, frees become reusable, caches shrink (`fetch.rs`)
        self.fetch.changed();
        self.ckpt.end(result.is_ok());
        if let Err(e) = result {
            self.fail(&format!("commit {epoch}"), &e);
            return Err(e);
        }
        self.counters.commits += 1;
        if !self.touched.is_empty() {
            // phase A left the set empty: operations ran while this commit wrote
            self.counters.commits_overlapped += 1;
        }
        {
            // No read planned before this commit may still be reading blocks about to be freed.
            let gate = self.io_gate.clone();
            let _exclusive = gate.write().unwrap_or_else(|e| e.into_inner());
            self.alloc.release_pending();
        }
        self.epochs.commit_durable(epoch);
        self.rearm_write_behind();
        self.evict();
        // (not in (A): while (B) writes, a block not in the inode-table cache must be
        // current at home)
        self.trim_inode_caches();
        Ok(())
    }

    fn commit_plan(&mut self) -> FsResult<CommitIo> {
        let epoch = self.epochs.started() + 1;
        // The inodes this commit takes changes of; inodes it touches itself are added below.
        let mut inos: Vec<u64> = self.touched.drain().collect();
        self.building.blocks.clear();
        self.building.data_blocks.clear();
        self.building.out_data.clear();
        self.building.data_budget = match (&self.journal, self.opts.journal) {
            (Some(j), JournalMode::Data | JournalMode::Ordered) => j.len / 4,
            _ => 0,
        };
        let data_before = self.counters.data_blocks_written;
        // Small overwrites go to the byte log instead (their blocks homeless from now on),
        // or every homeless block goes home with this commit.
        let log_batch = self.log_writeback()?;
        {
            // A file may be listed twice (dirty, cleaned by a truncate, dirty again; or
            // listed again by a cleaning, `homeless.rs`): placed twice before the sorted
            // writes below, it would be written twice.
            let mut seen = std::collections::HashSet::with_capacity(self.dirty_order.len());
            self.dirty_order.retain(|i| seen.insert(*i));
        }
        // The write-back timer's commit leaves young file data in memory (`aging.rs`).
        let held = self.hold_young();
        let held_blocks: u64 = held
            .iter()
            .map(|i| self.inodes[i].cache.dirty_count())
            .sum();
        // A small commit (an fsync's append, a few small files: `small_commit_blocks`)
        // carries its new data blocks in the transaction with `journal=ordered`: one request
        // and one flush instead of data, a flush, the transaction and a flush. They go home
        // at a checkpoint, or never if the file is deleted or rewritten first (revoked).
        self.building.small = self.opts.journal == JournalMode::Ordered
            && self.journal.is_some()
            && self.book.dirty() - held_blocks <= self.opts.small_commit_blocks;
        if self.opts.journal != JournalMode::Data {
            // journal=data carries file data in the transaction instead.
            self.cowrite_dirs()?;
        }
        // Files left (all of them with cowrite=off), each with its own requests, in the order
        // they became dirty: FFS's per-file write-back, the baseline of co-writing.
        // With `wb_order=address`, addresses are still chosen in that order but the requests
        // go out sorted by address (one sweep of an elevator over the commit).
        let mut placed_files = Vec::new();
        for ino in std::mem::take(&mut self.dirty_order) {
            if self
                .inodes
                .get(&ino)
                .is_some_and(|n| n.cache.dirty_count() > 0)
            {
                let placed = self.place_file(ino)?;
                if self.opts.wb_sorted {
                    placed_files.push((ino, placed));
                } else {
                    self.write_placed(ino, &placed)?;
                }
            }
        }
        placed_files.sort_by_key(|(ino, p)| (p.first().map(|x| x.0), *ino));
        for (ino, placed) in placed_files {
            self.write_placed(ino, &placed)?;
        }
        // Then in inode order (deterministic: a crash test replays exactly).
        inos.extend(self.touched.drain());
        inos.sort_unstable();
        inos.dedup();
        for &ino in &inos {
            let Some(n) = self.inodes.get(&ino) else {
                continue;
            };
            let (data, dir, xattrs) = (
                n.cache.dirty_count() > 0 && !self.aging.holds(ino),
                n.dir.as_ref().is_some_and(|d| d.any_dirty),
                n.xattr_dirty,
            );
            if data {
                self.write_back_file(ino)?;
            }
            if dir {
                self.write_back_dir(ino)?;
            }
            if xattrs {
                self.write_back_xattrs(ino)?;
            }
        }
        self.write_indirect()?;
        inos.extend(self.touched.drain());
        inos.sort_unstable();
        inos.dedup();
        self.write_extent_maps(&inos)?;
        self.write_inodes(&inos)?;
        self.write_groups()?;
        self.write_superblocks()?;
        let order_data = match self.opts.journal {
            JournalMode::Ordered => true,
            // Like ext4's auto_da_alloc: replacing a file by rename orders the data anyway;
            // so does co-writing when it moved overwritten data.
            JournalMode::Writeback => {
                self.building.replaced_by_rename || self.building.order_data_once
            }
            // New blocks past the transaction's share are written home first: ordered.
            JournalMode::Data => true,
        };
        self.building.replaced_by_rename = false;
        self.building.order_data_once = false;
        let behind_wrote = self.behind.take_unflushed();
        let wrote_data = self.counters.data_blocks_written > data_before || behind_wrote;
        // Data in place (also what write-behind wrote) before any metadata that points at it;
        // the byte-log batch before the transaction that counts it.
        let order_flush =
            (order_data && self.journal.is_some() && wrote_data) || log_batch.is_some();
        // Blocks the journal holds images of that leave its keeping: written home directly
        // by this commit, or freed by the changes it takes (they may be reused for data
        // written in place once it is durable). Replay must never write those images again.
        let mut leaving: Vec<(u64, u64)> = self
            .building
            .out_data
            .iter()
            .map(|(first, bufs)| (*first, bufs.len() as u64))
            .collect();
        leaving.extend(self.alloc.pending_blocks.iter().copied());
        let revokes = self.ckpt.revoke(leaving);
        // Every promised metadata block has its address now.
        self.metadata_promises_kept();
        for ino in &inos {
            if let Some(n) = self.inodes.get_mut(ino) {
                n.meta_reserved = false;
                n.deep_reserved.clear();
            }
        }
        // Extent-mapped files whose reserved data this commit held back keep their promise.
        let carried = self.carry_extent_promises(&inos);
        self.keep_meta_promised(carried);
        // Every inode in memory is clean now but those with data held back: the next commit
        // starts from them.
        self.touched.clear();
        self.touched.extend(held.iter().copied());
        self.dirty_order = held;
        self.alloc.seal_pending();
        let txn = std::mem::take(&mut self.building.blocks);
        let (ckpt, txn) = self.plan_txn(txn, revokes);
        self.epochs.commit_started(epoch);
        Ok(CommitIo {
            epoch,
            log_batch,
            data: std::mem::take(&mut self.building.out_data),
            order_flush,
            ckpt,
            txn,
        })
    }

    /// Allocates addresses for the dirty blocks that have none, then writes all dirty blocks
    /// of the file in physically contiguous runs, one vectored request per run.
    fn write_back_file(&mut self, ino: u64) -> FsResult<()> {
        let placed = self.place_file(ino)?;
        self.write_placed(ino, &placed)
    }

    /// Gives every dirty block of `ino` an address (allocating for those without one):
    /// (physical, logical, had an address before) sorted by physical address.
    fn place_file(&mut self, ino: u64) -> FsResult<Vec<(u64, u64, bool)>> {
        let dirty = self.inodes[&ino].cache.dirty_blocks();
        self.place_blocks(ino, dirty)
    }

    /// Gives the listed logical blocks of `ino` (ascending) an address, allocating for those
    /// without one: (physical, logical, had an address before) sorted by physical address.
    pub(super) fn place_blocks(
        &mut self,
        ino: u64,
        dirty: Vec<u64>,
    ) -> FsResult<Vec<(u64, u64, bool)>> {
        // (physical, logical, overwrite: the block had an address before this commit)
        let mut placed: Vec<(u64, u64, bool)> = Vec::with_capacity(dirty.len());
        let mut k = 0;
        while k < dirty.len() {
            let idx = dirty[k];
            let phys = self.bmap(ino, idx)?;
            if phys != 0 {
                placed.push((phys, idx, true));
                k += 1;
                continue;
            }
            // A run of consecutive unmapped logical blocks: allocate it contiguously if possible.
            let mut run = 1;
            while k + run < dirty.len()
                && dirty[k + run] == idx + run as u64
                && self.bmap(ino, idx + run as u64)? == 0
            {
                run += 1;
            }
            let mut goal = self.goal_for(ino, idx)?;
            let mut done = 0u64;
            while done < run as u64 {
                let (first, n) = self
                    .alloc
                    .alloc_blocks(goal, run as u64 - done)
                    .ok_or(FsError::NoSpace)?;
                for j in 0..n {
                    let i = idx + done + j;
                    self.set_bmap(ino, i, first + j)?;
                    placed.push((first + j, i, false));
                    let node = self.inode(ino)?;
                    node.d.blocks += 1;
                    if node.cache.unreserve(i) {
                        self.release_reserved(1);
                    }
                }
                done += n;
                goal = first + n;
            }
            k += run;
        }
        placed.sort_unstable();
        Ok(placed)
    }

    /// Takes the placed dirty blocks of `ino` (`place_file`) into the commit and marks them
    /// clean.
    fn write_placed(&mut self, ino: u64, placed: &[(u64, u64, bool)]) -> FsResult<()> {
        self.write_runs(ino, placed)?;
        self.inode(ino)?;
        let node = self.inodes.get_mut(&ino).expect("loaded above");
        let mut promised = 0;
        for (_, idx, _) in placed {
            promised += node.cache.mark_clean(&mut self.book, ino, *idx) as u64;
        }
        self.release_reserved(promised); // placed blocks used theirs already
        Ok(())
    }

    /// Where to look for a free block for logical block `idx` of `ino`.
    fn goal_for(&mut self, ino: u64, idx: u64) -> FsResult<u64> {
        if idx > 0 {
            let prev = self.bmap(ino, idx - 1)?;
            if prev != 0 {
                return Ok(prev + 1);
            }
        }
        let geo = self.alloc.geo;
        Ok(geo.group_start(geo.group_of_inode(ino)) + geo.meta_blocks() as u64)
    }

    /// Takes cached blocks of `ino` given as sorted (physical, logical) pairs into the commit.
    /// Data blocks go home in contiguous runs (`out_data`, written in phase B), or into the
    /// transaction: all of them with
    /// `journal=data`, overwrites of blocks already on disk with `journal=ordered` (so that a
    /// crash never shows an old file size with newer or zeroed bytes inside it), while the
    /// transaction's share of the journal lasts.
    fn write_runs(&mut self, ino: u64, placed: &[(u64, u64, bool)]) -> FsResult<()> {
        let node = &self.inodes[&ino];
        // Blocks with byte-log records: 1 when the records hold every change since the
        // block was last home (a torn write in place is repaired by replaying them), 2 when
        // not (the block must not be written in place before the transaction is durable: a
        // crash then would replay the records onto bytes they do not cover).
        let logged = |k: usize| match node.cache.get(&placed[k].1) {
            Some(c) if c.logged && (c.unlogged != 0 || c.unknown) => 2,
            Some(c) if c.logged => 1,
            _ => 0,
        };
        // The block that holds the end of a file truncated below its size on disk: its
        // zeroed tail in place, before the transaction, would show zeros under the old size
        // (no write gave them), so it is journaled in `ordered` mode whatever the share.
        let bs = self.bs() as u64;
        let cut = |k: usize| {
            let idx = placed[k].1;
            placed[k].2
                && node.saved.as_ref().is_some_and(|s| {
                    node.d.size < s.size && idx == node.d.size / bs && idx * bs < s.size
                })
        };
        let mut runs: Vec<(u64, Vec<Block>, bool)> = Vec::new();
        let mut i = 0;
        while i < placed.len() {
            let mut j = i + 1;
            while j < placed.len()
                && placed[j].0 == placed[j - 1].0 + 1
                && placed[j].2 == placed[i].2
                && logged(j) == logged(i)
                && cut(j) == cut(i)
                && j - i < 256
            {
                j += 1;
            }
            // A symbolic link's target (its data, one block at most) is metadata: journaled
            // in every mode (in place, `writeback` could show a link to stale bytes).
            let symlink = node.kind_mode() == libc::S_IFLNK;
            let journaled = match (self.opts.journal, logged(i)) {
                _ if symlink => true,
                // (the byte log is not used with journal=writeback)
                (_, 1) => false,
                (_, 2) => true,
                (JournalMode::Data, _) => true,
                (JournalMode::Ordered, _) => placed[i].2 || self.building.small,
                (JournalMode::Writeback, _) => false,
            };
            // Blocks of kind 2 go into the transaction whatever its data share
            // (`bytelog.rs` keeps them within a share of the journal of their own); runs
            // hold blocks of one kind. Kind 1 goes home before the transaction, which the
            // commit's ordering flush makes durable first.
            // With `journal=data` an overwrite is journaled whatever the share: in place, a
            // crash could show its new bytes under the old size and times (the writers'
            // throttle, `over_dirty_max`, keeps such commits within the share). New blocks
            // past the share go home before the transaction: nothing points at them until
            // it is durable.
            let must = logged(i) == 2
                || symlink
                || (self.opts.journal == JournalMode::Data && placed[i].2)
                || (self.opts.journal == JournalMode::Ordered && cut(i));
            let journal = journaled && (must || self.building.data_budget >= (j - i) as u64);
            if journal {
                self.building.data_budget =
                    self.building.data_budget.saturating_sub((j - i) as u64);
            }
            let bufs: Vec<Block> = placed[i..j]
                .iter()
                .filter_map(|(_, idx, _)| node.cache.get(idx).map(|c| c.data.clone()))
                .collect();
            runs.push((placed[i].0, bufs, journal));
            i = j;
        }
        for (first, bufs, journal) in runs {
            self.take_data_run(first, bufs, journal);
        }
        Ok(())
    }

    /// Takes a run of file data blocks at `first` into the commit: into the transaction (they
    /// go home at a checkpoint, or never if revoked first) or home before it (`out_data`,
    /// phase B).
    pub(super) fn take_data_run(&mut self, first: u64, bufs: Vec<Block>, journal: bool) {
        let n = bufs.len() as u64;
        if journal {
            let images = bufs.iter().enumerate();
            self.building
                .blocks
                .extend(images.map(|(k, b)| (first + k as u64, b.to_vec())));
            self.building.data_blocks.extend(first..first + n);
            self.counters.data_blocks_journaled += n;
        } else {
            self.building.out_data.push((first, bufs));
            self.counters.data_write_ios += 1;
            self.counters.data_blocks_written += n;
        }
    }

    fn write_back_dir(&mut self, ino: u64) -> FsResult<()> {
        let bs = self.bs();
        let (nblocks, dirty): (usize, Vec<usize>) = {
            let d = self.inodes[&ino].dir.as_ref().expect("caller checked");
            (
                d.blocks.len(),
                d.blocks
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.dirty)
                    .map(|(i, _)| i)
                    .collect(),
            )
        };
        let mut writes = Vec::with_capacity(dirty.len());
        for bi in dirty {
            let mut phys = self.bmap(ino, bi as u64)?;
            if phys == 0 {
                let goal = self.goal_for(ino, bi as u64)?;
                phys = self.alloc.alloc_blocks(goal, 1).ok_or(FsError::NoSpace)?.0;
                self.set_bmap(ino, bi as u64, phys)?;
                self.inode(ino)?.d.blocks += 1;
            }
            let d = self.inodes[&ino].dir.as_ref().expect("caller checked");
            writes.push((phys, d.encode_block(ino, bi, bs as u32)));
        }
        self.building.blocks.extend(writes);
        let node = self.inode(ino)?;
        let d = node.dir.as_mut().expect("caller checked");
        for b in &mut d.blocks {
            b.dirty = false;
        }
        d.any_dirty = false;
        node.d.size = (nblocks * bs) as u64;
        node.dirty = true;
        Ok(())
    }

    fn write_back_xattrs(&mut self, ino: u64) -> FsResult<()> {
        let bs = self.bs() as u64;
        let node = self.inode(ino)?;
        node.xattr_dirty = false;
        node.dirty = true;
        let attrs = node.xattrs.clone().unwrap_or_default();
        // the blocks the set has on disk now: head first, then continuations
        let mut blocks: Vec<u64> = Vec::new();
        if node.d.xattr_block != 0 {
            blocks.push(node.d.xattr_block as u64);
            blocks.extend(node.xattr_cont.iter().copied());
        }
        let needed = if attrs.is_empty() {
            0
        } else {
            XattrBlock::blocks_needed(&attrs, bs as u32)
                .ok_or_else(|| FsError::corrupt("xattrs", ino, "set larger than allowed"))?
        };
        let had = blocks.len();
        for b in blocks.drain(needed.min(had)..) {
            self.alloc.free_later(b, 1);
        }
        let geo = self.alloc.geo;
        let mut goal = blocks
            .last()
            .map(|b| b + 1)
            .unwrap_or(geo.group_start(geo.group_of_inode(ino)) + geo.meta_blocks() as u64);
        while blocks.len() < needed {
            let b = self.alloc.alloc_blocks(goal, 1).ok_or(FsError::NoSpace)?.0;
            blocks.push(b);
            goal = b + 1;
        }
        let node = self.inode(ino)?;
        node.d.blocks = (node.d.blocks + blocks.len() as u64).saturating_sub(had as u64);
        node.d.xattr_block = blocks.first().copied().unwrap_or(0) as u32;
        node.xattr_cont = blocks.get(1..).map(<[u64]>::to_vec).unwrap_or_default();
        if blocks.len() > 1 {
            self.sb.features_incompat |= crate::format::FEATURE_LARGE_XATTR;
        }
        if !blocks.is_empty() {
            self.building
                .blocks
                .extend(XattrBlock::encode_blocks(&attrs, ino, bs as u32, &blocks));
        }
        Ok(())
    }

    fn write_indirect(&mut self) -> FsResult<()> {
        let bs = self.alloc.geo.block_size;
        let mut dirty = std::mem::take(&mut self.ind_dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for blk in dirty {
            // freed since it was listed, or listed twice
            let Some(ib) = self.ind.get_mut(&blk).filter(|b| b.dirty) else {
                continue;
            };
            ib.dirty = false;
            let bytes = encode_indirect(&ib.ptrs, blk, bs);
            self.building.blocks.push((blk, bytes));
        }
        Ok(())
    }

    /// Encodes the dirty inodes among `inos` (the touched ones) and the freed slots.
    fn write_inodes(&mut self, inos: &[u64]) -> FsResult<()> {
        let geo = self.alloc.geo;
        let mut slots: Vec<(u64, DiskInode)> = std::mem::take(&mut self.dead).into_iter().collect();
        for ino in inos {
            if let Some(node) = self.inodes.get_mut(ino) {
                let held = self.aging.disk_size(*ino);
                if held.is_none() && node.saved.as_ref().is_some_and(|s| s.size != node.d.size) {
                    node.dirty = true; // its data was held back: its size goes now
                }
                if node.dirty {
                    node.dirty = false;
                    let mut img = node.d.clone();
                    if let Some(size) = held {
                        img.size = img.size.min(size); // its data is held back
                    }
                    node.logged = crate::format::bytelog::InodeAttrs::of(&img);
                    node.saved = Some(Box::new(img.clone()));
                    slots.push((*ino, img));
                }
            }
        }
        let mut blocks: Vec<u64> = Vec::new();
        for (ino, d) in &slots {
            let (blk, off) = geo.inode_location(*ino);
            let buf = self.itable_block(blk)?;
            d.encode_into(&mut buf[off..off + crate::format::INODE_BYTES], *ino);
            blocks.push(blk);
        }
        blocks.sort_unstable();
        blocks.dedup();
        for blk in blocks {
            let buf = self.itable[&blk].clone();
            self.building.blocks.push((blk, buf));
        }
        Ok(())
    }

    fn write_groups(&mut self) -> FsResult<()> {
        let geo = self.alloc.geo;
        let bs = geo.block_size as usize;
        for (g, img) in self.alloc.dirty_images() {
            let mut hdr = self.alloc.groups[g as usize].hdr.clone();
            hdr.free_blocks = img.free_blocks;
            hdr.free_inodes = img.free_inodes;
            hdr.bitmap_crc = bitmap_crc(&img.bitmap, g);
            hdr.ibitmap_crc = bitmap_crc(&img.ibitmap, g);
            for (k, chunk) in img.bitmap.chunks(bs).enumerate() {
                self.building
                    .blocks
                    .push((geo.bitmap_block(g) + k as u64, chunk.to_vec()));
            }
            for (k, chunk) in img.ibitmap.chunks(bs).enumerate() {
                self.building
                    .blocks
                    .push((geo.ibitmap_block(g) + k as u64, chunk.to_vec()));
            }
            let hb = geo.header_block(g);
            self.building
                .blocks
                .push((hb, hdr.encode(hb, geo.block_size)));
        }
        Ok(())
    }

    /// Keeps the caches that grow with the files looked at — in-memory inodes, the
    /// inode-table blocks — within their bounds (`kept.rs`); not while a committer job
    /// writes with the lock released (a block not in the inode-table cache must then be
    /// current at home).
    pub(crate) fn trim_inode_caches(&mut self) {
        if self.epochs.writing() {
            return;
        }
        if self.itable.len() > ITABLE_BLOCKS {
            self.fetch.changed();
            self.itable.clear();
        }
        if self.kept.over(self.inodes.len(), self.budget.cache_bytes()) {
            self.forget_all_idle_inodes();
            self.kept
                .trimmed(self.inodes.len(), self.budget.cache_bytes());
        }
    }

    /// Drops the in-memory state of every inode nobody has open and nothing unsaved holds
    /// (`kept.rs`: the kernel's references to it stay there; it is read back from the image
    /// when needed).
    pub(crate) fn forget_all_idle_inodes(&mut self) {
        self.fetch.changed();
        let kept = &mut self.kept;
        self.inodes.retain(|ino, n| {
            let busy = *ino == super::ROOT_INO
                || n.unsaved()
                || n.opens > 0
                || n.d.nlink == 0
                || n.linkable
                || !n.cache.is_empty()
                || n.meta_reserved
                || !n.deep_reserved.is_empty()
                // (a size a commit held back with its young data, or any change not yet
                // saved: what is read back must be what it drops)
                || n.saved.as_deref() != Some(&n.d);
            if !busy {
                kept.dropped(*ino, n.parent_hint);
            }
            busy
        });
    }
}
