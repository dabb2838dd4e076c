//! Write-back and commit: the only place where disk addresses are chosen and metadata written.
//!
//! Order of a commit: (1) file and directory data, allocating addresses for blocks that have
//! none; (2) xattr and indirect blocks; (3) inode-table blocks; (4) bitmaps, group headers and
//! superblocks; (5) the device flush barrier; (6) blocks and inodes freed before this commit
//! become allocatable (their old pointers are no longer durable anywhere).

use super::Inner;
use crate::error::{FsError, FsResult};
use crate::format::{bitmap_crc, encode_indirect, DiskInode, XattrBlock};
use std::time::Instant;

impl Inner {
    pub(crate) fn has_dirty(&self) -> bool {
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
            || !self.alloc.pending_blocks.is_empty()
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
        let r = self.commit_inner();
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn commit_inner(&mut self) -> FsResult<()> {
        let inos: Vec<u64> = self.inodes.keys().copied().collect();
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
        self.dev.flush()?;
        self.counters.commits += 1;
        {
            // No read planned before this commit may still be reading blocks about to be freed.
            let gate = self.io_gate.clone();
            let _exclusive = gate.write().unwrap_or_else(|e| e.into_inner());
            self.alloc.release_pending();
        }
        self.write_groups()?;
        self.last_commit = Instant::now();
        self.evict();
        self.forget_idle_inodes();
        Ok(())
    }

    /// Allocates addresses for the dirty blocks that have none, then writes all dirty blocks
    /// of the file in physically contiguous runs, one vectored request per run.
    fn write_back_file(&mut self, ino: u64) -> FsResult<()> {
        let dirty: Vec<u64> = self.inodes[&ino]
            .cache
            .iter()
            .filter(|(_, c)| c.dirty)
            .map(|(i, _)| *i)
            .collect();
        let mut placed: Vec<(u64, u64)> = Vec::with_capacity(dirty.len());
        let mut k = 0;
        while k < dirty.len() {
            let idx = dirty[k];
            let phys = self.bmap(ino, idx)?;
            if phys != 0 {
                placed.push((phys, idx));
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
                    placed.push((first + j, i));
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
        self.write_runs(ino, &placed)?;
        let node = self.inode(ino)?;
        for (_, idx) in &placed {
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
    fn write_runs(&mut self, ino: u64, placed: &[(u64, u64)]) -> FsResult<()> {
        let bs = self.bs() as u64;
        let node = &self.inodes[&ino];
        let mut i = 0;
        while i < placed.len() {
            let mut j = i + 1;
            while j < placed.len() && placed[j].0 == placed[j - 1].0 + 1 && j - i < 256 {
                j += 1;
            }
            let bufs: Vec<&[u8]> = placed[i..j]
                .iter()
                .filter_map(|(_, idx)| node.cache.get(idx).map(|c| &c.data[..]))
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
        writes.sort_unstable_by_key(|w| w.0);
        for (phys, bytes) in &writes {
            self.dev.write_at(phys * bs as u64, bytes)?;
        }
        self.counters.meta_blocks_written += writes.len() as u64;
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
        let old = node.d.xattr_block as u64;
        if attrs.is_empty() {
            if old != 0 {
                self.alloc.free_later(old, 1);
                let node = self.inode(ino)?;
                node.d.xattr_block = 0;
                node.d.blocks = node.d.blocks.saturating_sub(1);
            }
            return Ok(());
        }
        let blk = if old != 0 {
            old
        } else {
            let geo = self.alloc.geo;
            let goal = geo.group_start(geo.group_of_inode(ino)) + geo.meta_blocks() as u64;
            let b = self.alloc.alloc_blocks(goal, 1).ok_or(FsError::NoSpace)?.0;
            let node = self.inode(ino)?;
            node.d.xattr_block = b as u32;
            node.d.blocks += 1;
            b
        };
        let bytes = XattrBlock { attrs }.encode(ino, bs as u32);
        self.dev.write_at(blk * bs, &bytes)?;
        self.counters.meta_blocks_written += 1;
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
            self.dev.write_at(blk * bs as u64, &bytes)?;
            self.counters.meta_blocks_written += 1;
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
        let bs = geo.block_size as u64;
        for blk in blocks {
            let buf = &self.itable[&blk];
            self.dev.write_at(blk * bs, buf)?;
            self.counters.meta_blocks_written += 1;
        }
        // The inode-table cache is only for read-modify-write; keep it bounded.
        if self.itable.len() > 4096 {
            self.itable.clear();
        }
        Ok(())
    }

    fn write_groups(&mut self) -> FsResult<()> {
        let geo = self.alloc.geo;
        let bs = geo.block_size as u64;
        for g in 0..geo.group_count {
            let grp = &mut self.alloc.groups[g as usize];
            if !grp.dirty {
                continue;
            }
            grp.dirty = false;
            grp.hdr.bitmap_crc = bitmap_crc(&grp.bitmap, g);
            grp.hdr.ibitmap_crc = bitmap_crc(&grp.ibitmap, g);
            let hdr = grp.hdr.encode(geo.header_block(g), geo.block_size);
            self.dev.write_at(geo.bitmap_block(g) * bs, &grp.bitmap)?;
            self.dev.write_at(geo.ibitmap_block(g) * bs, &grp.ibitmap)?;
            self.dev.write_at(geo.header_block(g) * bs, &hdr)?;
            self.counters.meta_blocks_written +=
                1 + (geo.bitmap_blocks + geo.ibitmap_blocks) as u64;
        }
        Ok(())
    }

    /// Drops clean, unreferenced inodes from memory (they are read again when needed).
    fn forget_idle_inodes(&mut self) {
        if self.inodes.len() < 100_000 {
            return;
        }
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
