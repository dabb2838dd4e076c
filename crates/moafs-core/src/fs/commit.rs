//! Write-back and commit: the only place where disk addresses are chosen and metadata written.
//!
//! Order of a commit: (1) file data: first the dirty small files co-written by directory
//! (`cowrite.rs`), then every other dirty file on its own in the order files became dirty,
//! allocating addresses for blocks that have none, written
//! in place or added to the transaction (`journal=data`: all of it; `journal=ordered`:
//! overwrites of blocks already on disk; see `write_runs`);
//! (2) in `ordered` mode, a flush, so that no metadata can point at unwritten data; (3) the
//! transaction of every changed metadata block (directory, xattr, indirect, inode-table blocks,
//! bitmaps, group headers, superblocks) goes to the journal, is flushed and then written home
//! (`journal.rs`); (4) frees from before the previous commit become allocatable.

use super::{Inner, JournalMode};
use crate::error::{FsError, FsResult};
use crate::format::{bitmap_crc, encode_indirect, DiskInode, XattrBlock};
use std::time::Instant;

impl Inner {
    pub(crate) fn has_dirty(&self) -> bool {
        self.has_unsaved() || self.alloc.has_pending()
    }

    /// Changes not yet in a commit (pending frees aside).
    fn has_unsaved(&self) -> bool {
        self.dirty_blocks > 0
            || !self.dead.is_empty()
            || self.alloc.groups.iter().any(|g| g.dirty)
            || self.ind.values().any(|b| b.dirty)
            || self.inodes.values().any(|n| {
                n.dirty
                    || n.xattr_dirty
                    || n.dir
                        .as_ref()
                        .is_some_and(|d| d.blocks.iter().any(|b| b.dirty))
            })
    }

    /// Commits unless nothing changed since the last commit (whose flush has returned, as the
    /// caller holds the engine lock). This is group commit: callers of fsync that waited for
    /// the lock while a commit ran find their changes durable and return at once.
    pub(crate) fn commit_if_unsaved(&mut self) -> FsResult<()> {
        if self.failed && !self.opts.read_only {
            return Err(FsError::ReadOnly);
        }
        if self.has_unsaved() {
            self.commit()
        } else {
            self.counters.commits_skipped += 1;
            Ok(())
        }
    }

    /// Commits until every pending free is allocatable again (two commits at most).
    pub(crate) fn commit_to_free(&mut self) -> FsResult<()> {
        self.commit()?;
        if self.alloc.has_pending() {
            self.commit()?;
        }
        Ok(())
    }

    /// Writes back everything dirty and flushes the device. On an I/O error the file system
    /// turns read-only (nothing more is written that could contradict what is on disk).
    pub(crate) fn commit(&mut self) -> FsResult<()> {
        if self.opts.read_only {
            return Ok(());
        }
        if self.failed {
            return Err(FsError::ReadOnly);
        }
        // No write-behind writes while a commit runs; a round whose writes are done is
        // finished first (see `behind.rs`).
        let io = self.wb_io.clone();
        let mut slot = io.lock().unwrap_or_else(|e| e.into_inner());
        self.finish_write_behind_slot(&mut slot)?;
        let r = self.commit_inner();
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn commit_inner(&mut self) -> FsResult<()> {
        self.txn.clear();
        self.txn_data_budget = match (&self.journal, self.opts.journal) {
            (Some(j), JournalMode::Data | JournalMode::Ordered) => j.len / 4,
            _ => 0,
        };
        let data_before = self.counters.data_blocks_written;
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
            if self.inodes.get(&ino).is_some_and(|n| n.dirty_blocks > 0) {
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
        let mut inos: Vec<u64> = self.inodes.keys().copied().collect();
        inos.sort_unstable();
        for &ino in &inos {
            if self.inodes[&ino].dirty_blocks > 0 {
                self.write_back_file(ino)?;
            }
            if self.inodes[&ino]
                .dir
                .as_ref()
                .is_some_and(|d| d.blocks.iter().any(|b| b.dirty))
            {
                self.write_back_dir(ino)?;
            }
            if self.inodes[&ino].xattr_dirty {
                self.write_back_xattrs(ino)?;
            }
        }
        self.write_indirect()?;
        self.write_inodes()?;
        self.write_groups()?;
        self.write_superblocks()?;
        let order_data = match self.opts.journal {
            JournalMode::Ordered => true,
            // Like ext4's auto_da_alloc: replacing a file by rename orders the data anyway;
            // so does co-writing when it moved overwritten data.
            JournalMode::Writeback => self.replaced_by_rename || self.order_data_once,
            // Data past the transaction's share is written in place: ordered, as above.
            JournalMode::Data => true,
        };
        self.replaced_by_rename = false;
        self.order_data_once = false;
        let wrote_data = self.counters.data_blocks_written > data_before || self.wb_unflushed;
        if order_data && self.journal.is_some() && wrote_data {
            // Data in place (also what write-behind wrote) before any metadata that points
            // at it.
            self.flush_dev()?;
        }
        self.wb_unflushed = false;
        // Every promised metadata block has its address now.
        self.meta_reserved = 0;
        for node in self.inodes.values_mut() {
            node.meta_reserved = false;
        }
        let txn = std::mem::take(&mut self.txn);
        self.commit_txn(txn)?;
        self.counters.commits += 1;
        {
            // No read planned before this commit may still be reading blocks about to be freed.
            let gate = self.io_gate.clone();
            let _exclusive = gate.write().unwrap_or_else(|e| e.into_inner());
            self.alloc.release_pending();
        }
        self.last_commit = Instant::now();
        self.rearm_write_behind();
        self.evict();
        self.forget_idle_inodes();
        Ok(())
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
        let dirty: Vec<u64> = self.inodes[&ino]
            .cache
            .iter()
            .filter(|(_, c)| c.dirty)
            .map(|(i, _)| *i)
            .collect();
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
                    if let Some(cb) = node.cache.get_mut(&i) {
                        if cb.reserved {
                            cb.reserved = false;
                            self.reserved -= 1;
                        }
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

    /// Writes the placed dirty blocks of `ino` (`place_file`) and marks them clean.
    fn write_placed(&mut self, ino: u64, placed: &[(u64, u64, bool)]) -> FsResult<()> {
        self.write_runs(ino, placed)?;
        let node = self.inode(ino)?;
        for (_, idx, _) in placed {
            if let Some(cb) = node.cache.get_mut(idx) {
                cb.dirty = false;
            }
        }
        let n = node.dirty_blocks;
        node.dirty_blocks = 0;
        self.dirty_blocks -= n;
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

    /// Writes cached blocks of `ino` given as sorted (physical, logical) pairs.
    /// Data blocks go home in contiguous runs, or into the transaction: all of them with
    /// `journal=data`, overwrites of blocks already on disk with `journal=ordered` (so that a
    /// crash never shows an old file size with newer or zeroed bytes inside it), while the
    /// transaction's share of the journal lasts.
    fn write_runs(&mut self, ino: u64, placed: &[(u64, u64, bool)]) -> FsResult<()> {
        let bs = self.bs() as u64;
        let node = &self.inodes[&ino];
        let mut i = 0;
        while i < placed.len() {
            let mut j = i + 1;
            while j < placed.len()
                && placed[j].0 == placed[j - 1].0 + 1
                && placed[j].2 == placed[i].2
                && j - i < 256
            {
                j += 1;
            }
            let journaled = match self.opts.journal {
                JournalMode::Data => true,
                JournalMode::Ordered => placed[i].2,
                JournalMode::Writeback => false,
            };
            if journaled && self.txn_data_budget >= (j - i) as u64 {
                self.txn_data_budget -= (j - i) as u64;
                for (phys, idx, _) in &placed[i..j] {
                    if let Some(c) = node.cache.get(idx) {
                        self.txn.push((*phys, c.data.to_vec()));
                    }
                }
                self.counters.data_blocks_journaled += (j - i) as u64;
                i = j;
                continue;
            }
            let bufs: Vec<&[u8]> = placed[i..j]
                .iter()
                .filter_map(|(_, idx, _)| node.cache.get(idx).map(|c| &c.data[..]))
                .collect();
            self.dev.writev_at(placed[i].0 * bs, &bufs)?;
            self.counters.data_write_ios += 1;
            self.counters.data_blocks_written += (j - i) as u64;
            i = j;
        }
        Ok(())
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
            writes.push((phys, d.block(bi).encode(ino, bi as u64, bs as u32)));
        }
        self.txn.extend(writes);
        let node = self.inode(ino)?;
        for b in &mut node.dir.as_mut().expect("caller checked").blocks {
            b.dirty = false;
        }
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
            self.txn
                .extend(XattrBlock::encode_blocks(&attrs, ino, bs as u32, &blocks));
        }
        Ok(())
    }

    fn write_indirect(&mut self) -> FsResult<()> {
        let bs = self.alloc.geo.block_size;
        let mut dirty: Vec<u64> = self
            .ind
            .iter()
            .filter(|(_, b)| b.dirty)
            .map(|(k, _)| *k)
            .collect();
        dirty.sort_unstable();
        for blk in dirty {
            let ib = self.ind.get_mut(&blk).expect("listed above");
            ib.dirty = false;
            let bytes = encode_indirect(&ib.ptrs, blk, bs);
            self.txn.push((blk, bytes));
        }
        Ok(())
    }

    fn write_inodes(&mut self) -> FsResult<()> {
        let geo = self.alloc.geo;
        let mut slots: Vec<(u64, DiskInode)> = std::mem::take(&mut self.dead).into_iter().collect();
        for (ino, node) in self.inodes.iter_mut() {
            if node.dirty {
                node.dirty = false;
                slots.push((*ino, node.d.clone()));
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
            self.txn.push((blk, buf));
        }
        // The inode-table cache is only for read-modify-write; keep it bounded.
        if self.itable.len() > 4096 {
            self.itable.clear();
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
                self.txn
                    .push((geo.bitmap_block(g) + k as u64, chunk.to_vec()));
            }
            for (k, chunk) in img.ibitmap.chunks(bs).enumerate() {
                self.txn
                    .push((geo.ibitmap_block(g) + k as u64, chunk.to_vec()));
            }
            let hb = geo.header_block(g);
            self.txn.push((hb, hdr.encode(hb, geo.block_size)));
        }
        Ok(())
    }

    /// Drops clean, unreferenced inodes from memory (they are read again when needed).
    fn forget_idle_inodes(&mut self) {
        if self.inodes.len() < 100_000 {
            return;
        }
        self.forget_all_idle_inodes();
    }

    /// Drops the in-memory state of every inode nobody references and nothing dirty holds
    /// (it is read back from the image when needed).
    pub(crate) fn forget_all_idle_inodes(&mut self) {
        self.inodes.retain(|ino, n| {
            *ino == super::ROOT_INO
                || n.dirty
                || n.lookups > 0
                || n.opens > 0
                || n.dirty_blocks > 0
                || n.xattr_dirty
                || !n.cache.is_empty()
        });
    }
}
