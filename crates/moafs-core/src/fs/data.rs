//! File data: read, write, truncate and fallocate over the block cache (`cache.rs`), the
//! cache's bound (eviction) and its spare buffers.
//!
//! `write` never chooses a disk address (delayed allocation): it fills cached blocks and
//! *reserves* one data block for each newly dirty block that has none, so that ENOSPC is
//! reported by `write` and never discovered at write-back. Reads of uncached blocks go to the
//! device in physically contiguous runs, one request per run.

use super::cache::Block;
use super::cache::{units_changed, units_changed_at, units_of, Change, Units};
use super::{Inner, JournalMode, Timespec};
use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use std::sync::Arc;

impl Inner {
    pub(crate) fn check_writable(&self) -> FsResult<()> {
        if self.opts.read_only || self.failed {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    /// Copies the current contents of block `idx` (cached, from disk, or zeros for a hole)
    /// into `buf`.
    fn fill_block(&mut self, ino: u64, idx: u64, buf: &mut [u8]) -> FsResult<()> {
        if let Some(cb) = self.inode(ino)?.cache.get(&idx) {
            buf.copy_from_slice(&cb.data);
            self.counters.cache_hits += 1;
            return Ok(());
        }
        self.counters.cache_misses += 1;
        let phys = self.bmap(ino, idx)?;
        if phys != 0 {
            self.read_block(phys, buf)?;
            self.counters.data_blocks_read += 1;
        } else {
            buf.fill(0);
        }
        Ok(())
    }

    /// A buffer for a block's new contents (unshared; its bytes are stale): a recycled one
    /// (`recycle`) or a new allocation.
    fn new_block(&mut self) -> Block {
        self.spare.take().unwrap_or_else(|| zeroed_block(self.bs()))
    }

    /// The block's current contents, changed by `edit`, as a new buffer.
    fn edited_block(
        &mut self,
        ino: u64,
        idx: u64,
        edit: impl FnOnce(&mut [u8]),
    ) -> FsResult<Block> {
        let mut buf = self.new_block();
        let b = Arc::make_mut(&mut buf); // unshared: no copy
        self.fill_block(ino, idx, b)?;
        edit(b);
        Ok(buf)
    }

    /// Puts `data` as the new dirty contents of block `idx`.
    /// `reserved`: the caller took a reservation for it (`needs_reservation`).
    /// `change`: which units changed (for the byte log).
    fn put_dirty(
        &mut self,
        ino: u64,
        idx: u64,
        data: Block,
        reserved: bool,
        change: Change,
    ) -> FsResult<()> {
        self.inode(ino)?;
        let node = self.inodes.get_mut(&ino).expect("loaded above");
        let put = node
            .cache
            .put_dirty(&mut self.book, ino, idx, data, reserved, change);
        if put.first_dirty {
            self.dirty_order.push(ino);
        }
        if let Some(old) = put.old {
            self.spare.recycle(old);
        }
        Ok(())
    }

    /// Whether dirtying block `idx` needs a new reservation.
    fn needs_reservation(&mut self, ino: u64, idx: u64) -> FsResult<bool> {
        if let Some(cb) = self.inode(ino)?.cache.get(&idx) {
            if cb.reserved {
                return Ok(false);
            }
        }
        Ok(self.bmap(ino, idx)? == 0)
    }

    /// A symbolic link's data is its target, set when it is made: writes, truncates and
    /// fallocate of it are refused (EINVAL; the kernel resolves the link before such calls,
    /// so only a caller of the engine's API meets this). Its size stays within the format's
    /// bound for links.
    pub(crate) fn symlink_data_refused(&mut self, ino: u64) -> FsResult<()> {
        if self.inode(ino)?.kind_mode() == libc::S_IFLNK {
            return Err(FsError::invalid(
                "a symbolic link's target is not written as data",
            ));
        }
        Ok(())
    }

    pub(crate) fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.check_writable()?;
        let bs = self.bs() as u64;
        let node = self.inode(ino)?;
        if node.is_dir() {
            return Err(FsError::IsDir);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::FileTooBig)?;
        if end.div_ceil(bs) > self.max_blocks_of(ino)? {
            return Err(FsError::FileTooBig);
        }
        let first = offset / bs;
        let last = (end - 1) / bs;
        // Which blocks need a reservation (dirtied without a disk address), found once.
        let mut newly = Vec::with_capacity((last - first + 1) as usize);
        for idx in first..=last {
            newly.push(self.needs_reservation(ino, idx)?);
        }
        let need: Vec<u64> = (first..=last)
            .zip(&newly)
            .filter(|(_, n)| **n)
            .map(|(i, _)| i)
            .collect();
        self.reserve_for(ino, &need)?;
        let size = self.inode(ino)?.d.size;
        self.aging.note_write(ino, size);
        for (idx, newly) in (first..=last).zip(newly) {
            let bstart = idx * bs;
            let lo = offset.max(bstart);
            let hi = end.min(bstart + bs);
            let src = &data[(lo - offset) as usize..(hi - offset) as usize];
            let at = (lo - bstart) as usize..(hi - bstart) as usize;
            let (buf, change) = if lo == bstart && hi == bstart + bs {
                // A whole block: one copy, straight from the request. (The FUSE writeback
                // cache sends whole pages: what changed is found by comparing them with the
                // cached copy, for the byte log.)
                let mut buf = self.new_block();
                Arc::make_mut(&mut buf).copy_from_slice(src);
                let change = self.whole_block_change(ino, idx, newly, src)?;
                (buf, change)
            } else if bstart >= size {
                let mut buf = self.new_block();
                let b = Arc::make_mut(&mut buf);
                b.fill(0);
                b[at].copy_from_slice(src);
                (buf, Change::Units(Units::MAX))
            } else {
                // With the byte log on, only the units whose bytes differ count as changed,
                // as for whole blocks: the kernel's writeback sends a page's dirty range —
                // for an appended log, from the page's start to the end of file — most of
                // which it may hold unchanged.
                let compare = self.bytelog_active() && !newly;
                let mut change = units_of(at.clone());
                let buf = self.edited_block(ino, idx, |b| {
                    if compare {
                        change = units_changed_at(at.start, &b[at.clone()], src);
                    }
                    b[at].copy_from_slice(src)
                })?;
                (buf, Change::Units(change))
            };
            self.put_dirty(ino, idx, buf, newly, change)?;
        }
        let now = Timespec::now().pair();
        let kernel_times = self.opts.kernel_times;
        let node = self.inode(ino)?;
        node.d.size = node.d.size.max(end);
        if !kernel_times {
            node.d.mtime = now;
            node.d.ctime = now;
        }
        node.dirty = true;
        self.after_dirtying()?;
        Ok(data.len() as u32)
    }

    /// Which units a whole-block write of `src` to block `idx` changes: the difference
    /// from the cached copy; `Unknown` for a block on disk without one (found later, if
    /// the byte log wants it); all of them for a new block, or with the byte log off.
    fn whole_block_change(
        &mut self,
        ino: u64,
        idx: u64,
        newly: bool,
        src: &[u8],
    ) -> FsResult<Change> {
        if !self.bytelog_active() || newly {
            return Ok(Change::Units(Units::MAX));
        }
        if let Some(cb) = self.inode(ino)?.cache.get(&idx) {
            return Ok(Change::Units(units_changed(&cb.data, src)));
        }
        Ok(Change::Unknown)
    }

    /// Cache pressure on the write path, and after a read kept a block (the dirty threshold
    /// is `Fs`'s: writers above it wait for a commit, `over_dirty_max`).
    pub(crate) fn after_dirtying(&mut self) -> FsResult<()> {
        let bs = self.bs() as u64;
        if self.book.cached() * bs > self.budget.cache_bytes() {
            self.evict();
        }
        Ok(())
    }

    /// Between batches of a long operation (fallocate, punch) that holds the engine lock
    /// throughout: commits when dirty data passed the threshold and no commit is in flight,
    /// so the range is never held in memory at once.
    fn between_batches(&mut self) -> FsResult<()> {
        if self.over_dirty_max() && !self.epochs.writing() {
            self.commit()?;
        }
        self.after_dirtying()
    }

    /// More dirty data than its budget (`budget.rs`) — or, with `journal=data`, than the
    /// transaction's data share of the journal (a quarter), which every overwrite must fit
    /// in (`write_runs`): the writer waits for a commit.
    pub(crate) fn over_dirty_max(&self) -> bool {
        let dirty = self.book.dirty();
        if dirty * self.bs() as u64 > self.budget.dirty_bytes() {
            return true;
        }
        match (&self.journal, self.opts.journal) {
            (Some(j), JournalMode::Data) => dirty > j.len / 4,
            _ => false,
        }
    }

    /// Drops the least recently used clean blocks until the cache is at 3/4 of its bound.
    pub(crate) fn evict(&mut self) {
        let bs = self.bs() as u64;
        let target = self.budget.cache_bytes() / bs * 3 / 4;
        if self.book.cached() <= target || self.epochs.writing() {
            // while a commit writes, clean blocks may hold bytes not yet on the device
            return;
        }
        let excess = (self.book.cached() - target) as usize;
        self.fetch.changed();
        for (ino, idx) in self.book.oldest_clean(excess) {
            if let Some(node) = self.inodes.get_mut(&ino) {
                if let Some(cb) = node.cache.remove(&mut self.book, ino, idx) {
                    self.spare.recycle(cb.data);
                    self.counters.evictions += 1;
                }
            }
        }
        self.spares_within_budget();
    }

    /// Recycled buffers count against the cache's budget too: the cache and its spares
    /// together stay within it (a reader's evictions would otherwise park a quarter of the
    /// cache in spares on top of it; a budget that shrank gives them back).
    pub(crate) fn spares_within_budget(&mut self) {
        let bs = self.bs() as u64;
        let room = (self.budget.cache_bytes() / bs).saturating_sub(self.book.cached()) as usize;
        self.spare.shrink_to(room);
    }

    /// Drops every clean cached data block (after a commit, every block is clean but the
    /// homeless ones, which stay); returns how many were dropped.
    pub(crate) fn drop_clean(&mut self) -> u64 {
        self.fetch.changed();
        let mut dropped = 0;
        for (ino, node) in self.inodes.iter_mut() {
            dropped += node.cache.drop_clean(&mut self.book, *ino);
        }
        dropped
    }

    /// Reads under the engine lock (used for symlink targets and by tests).
    pub(crate) fn read(&mut self, ino: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let mut plan = self.read_plan(ino, offset, size, |n| vec![0u8; n])?;
        read_runs(self.dev.as_ref(), self.bs() as u64, &mut plan)?;
        self.keep_fetched(ino, &mut plan)?;
        Ok(plan.out)
    }

    /// Copies what the cache holds into the buffer `make(len)` returns (`len` bytes: the
    /// request clipped to the file size), zeroes holes, and lists the blocks that must come
    /// from the device: the request's, and the readahead's (`readahead.rs`) that are not
    /// cached.
    pub(crate) fn read_plan<O: AsMut<[u8]>>(
        &mut self,
        ino: u64,
        offset: u64,
        size: u32,
        make: impl FnOnce(usize) -> O,
    ) -> FsResult<ReadPlan<O>> {
        let bs = self.bs() as u64;
        let removals = self.book.removals();
        let node = self.inode(ino)?;
        if node.is_dir() {
            return Err(FsError::IsDir);
        }
        let fsize = node.d.size;
        self.counters.read_requests += 1;
        if offset >= fsize || size == 0 {
            return Ok(ReadPlan::empty(make(0), offset, removals));
        }
        let end = fsize.min(offset + size as u64);
        self.counters.read_bytes += end - offset;
        let first = offset / bs;
        let last = (end - 1) / bs;
        let mut out = make((end - offset) as usize);
        let mut misses: Vec<(u64, u64)> = Vec::new();
        for idx in first..=last {
            let bstart = idx * bs;
            let lo = offset.max(bstart);
            let hi = end.min(bstart + bs);
            let dst = &mut out.as_mut()[(lo - offset) as usize..(hi - offset) as usize];
            let node = self.inodes.get_mut(&ino).expect("loaded above");
            if let Some(cb) = node.cache.get(&idx) {
                dst.copy_from_slice(&cb.data[(lo - bstart) as usize..(hi - bstart) as usize]);
                self.counters.cache_hits += 1;
                self.counters.ra_used += node.cache.use_prefetched(idx) as u64;
                continue;
            }
            self.counters.cache_misses += 1;
            let phys = self.bmap(ino, idx)?;
            if phys != 0 {
                misses.push((idx, phys));
            } else {
                dst.fill(0); // a hole (the buffer may hold older bytes)
            }
        }
        self.inodes.get_mut(&ino).expect("loaded above").read_end = end;
        let ahead = self.readahead(ino, first, last, fsize.div_ceil(bs))?;
        self.counters.data_blocks_read += (misses.len() + ahead.len()) as u64;
        self.counters.ra_read += ahead.len() as u64;
        let mut bufs = Vec::with_capacity(ahead.len());
        while bufs.len() < ahead.len() {
            match self.spare.take() {
                Some(b) => bufs.push(b),
                None => break,
            }
        }
        Ok(ReadPlan {
            out,
            misses,
            ahead,
            bufs,
            offset,
            end,
            removals,
            keep_demand: false,
        })
    }

    /// The blocks readahead adds to a read of blocks `first..=last` of a file of `nblocks`
    /// blocks: in the stream's windows, not requested, not cached, not holes; (logical,
    /// physical), ascending.
    fn readahead(
        &mut self,
        ino: u64,
        first: u64,
        last: u64,
        nblocks: u64,
    ) -> FsResult<Vec<(u64, u64)>> {
        let ra = super::Readahead::new(
            self.opts.readahead,
            self.opts.readahead_max_kb,
            self.bs() as u32,
        );
        let node = self.inodes.get_mut(&ino).expect("loaded by the caller");
        let windows = node.ra.on_read(&ra, first, last - first + 1);
        let mut want = std::collections::BTreeSet::new();
        for w in windows {
            for idx in w.start..w.end.min(nblocks) {
                if !(first..=last).contains(&idx) && !node.cache.contains_key(&idx) {
                    want.insert(idx);
                }
            }
        }
        let mut ahead = Vec::with_capacity(want.len());
        for idx in want {
            let phys = self.bmap(ino, idx)?;
            if phys != 0 {
                ahead.push((idx, phys));
            }
        }
        Ok(ahead)
    }

    /// Drops cached blocks at index >= `from`, returning their reservations.
    pub(crate) fn drop_cached_from(&mut self, ino: u64, from: u64) -> FsResult<()> {
        self.inode(ino)?;
        let node = self.inodes.get_mut(&ino).expect("loaded above");
        let dropped = node.cache.drop_from(&mut self.book, ino, from);
        self.release_reserved(dropped);
        Ok(())
    }

    /// Sets the size of a regular file (or symlink), freeing blocks beyond it.
    pub(crate) fn truncate(&mut self, ino: u64, new_size: u64) -> FsResult<()> {
        let bs = self.bs() as u64;
        if new_size.div_ceil(bs) > self.max_blocks_of(ino)? {
            return Err(FsError::FileTooBig);
        }
        let old = self.inode(ino)?.d.size;
        if new_size < old {
            // its data goes at the next commit (`aging.rs`: the zeroed tail below)
            self.aging.make_due(ino);
            let keep = new_size.div_ceil(bs);
            self.drop_cached_from(ino, keep)?;
            self.free_from(ino, keep)?;
            if !new_size.is_multiple_of(bs) {
                // Bytes past EOF inside the last block must read as zeros if the file grows.
                let idx = new_size / bs;
                let tail = (new_size % bs) as usize..bs as usize;
                let change = Change::Units(units_of(tail.clone()));
                let buf = self.edited_block(ino, idx, |b| b[tail].fill(0))?;
                let newly = self.needs_reservation(ino, idx)?;
                self.reserve_for(ino, &[idx][..usize::from(newly)])?;
                self.put_dirty(ino, idx, buf, newly, change)?;
            }
        }
        let node = self.inode(ino)?;
        node.d.size = new_size;
        node.dirty = true;
        Ok(())
    }

    pub(crate) fn fallocate(&mut self, ino: u64, offset: u64, len: u64, mode: i32) -> FsResult<()> {
        self.check_writable()?;
        let bs = self.bs() as u64;
        if len == 0 {
            return Err(FsError::invalid("fallocate length 0"));
        }
        let end = offset.checked_add(len).ok_or(FsError::FileTooBig)?;
        if self.inode(ino)?.is_dir() {
            return Err(FsError::IsDir);
        }
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        self.aging.make_due(ino);
        if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
            if !keep_size || mode & !(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) != 0 {
                return Err(FsError::NotSupported);
            }
            return self.punch_hole(ino, offset, end);
        }
        if mode & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
            return Err(FsError::NotSupported);
        }
        if end.div_ceil(bs) > self.max_blocks_of(ino)? {
            return Err(FsError::FileTooBig);
        }
        // Holes in the range become zero-filled dirty blocks, with their space reserved
        // first: a fallocate refused for want of space changes nothing.
        let mut holes = Vec::new();
        for idx in offset / bs..end.div_ceil(bs) {
            if self.needs_reservation(ino, idx)? && !self.inode(ino)?.cache.contains_key(&idx) {
                holes.push(idx);
            }
        }
        self.reserve_for(ino, &holes)?;
        if mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
            // zero what the file holds in the range
            self.punch_hole(ino, offset, end)?;
        }
        // The size first: a commit between the batches below (dirty data over its budget, or
        // `journal=data`'s share of the journal) then shows the range as it ends — the holes
        // read as zeros — never a zeroed range inside the old size (a torn ZERO_RANGE).
        let now = Timespec::now().pair();
        let node = self.inode(ino)?;
        if !keep_size && end > node.d.size {
            node.d.size = end;
            node.d.mtime = now;
        }
        node.d.ctime = now;
        node.dirty = true;
        // One shared zero buffer (cached buffers are never changed in place), and write-back
        // between batches: a large fallocate costs the cache's bookkeeping, not its size in
        // memory.
        let zero = zeroed_block(bs as usize);
        for batch in holes.chunks(4096) {
            for &idx in batch {
                self.put_dirty(ino, idx, zero.clone(), true, Change::Units(Units::MAX))?;
            }
            self.between_batches()?;
        }
        self.after_dirtying()
    }

    fn punch_hole(&mut self, ino: u64, offset: u64, end: u64) -> FsResult<()> {
        let bs = self.bs() as u64;
        let size = self.inode(ino)?.d.size;
        let end = end.min(size);
        if offset >= end {
            return Ok(());
        }
        // Zero partial blocks at the edges; whole blocks inside are zeroed as well (holes are
        // zeros either way; freeing them in the middle of a file is future work). Whole blocks
        // share one zero buffer, and write-back runs between batches.
        let zero = zeroed_block(bs as usize);
        let mut pos = offset;
        let mut batch = 0;
        while pos < end {
            let idx = pos / bs;
            let bstart = idx * bs;
            let hi = end.min(bstart + bs);
            let phys = self.bmap(ino, idx)?;
            let cached = self.inode(ino)?.cache.contains_key(&idx);
            if phys != 0 || cached {
                let at = (pos - bstart) as usize..(hi - bstart) as usize;
                let change = Change::Units(units_of(at.clone()));
                let buf = if at.len() == bs as usize {
                    zero.clone()
                } else {
                    self.edited_block(ino, idx, |b| b[at].fill(0))?
                };
                let newly = self.needs_reservation(ino, idx)?;
                self.reserve_for(ino, &[idx][..usize::from(newly)])?;
                self.put_dirty(ino, idx, buf, newly, change)?;
                batch += 1;
                if batch % 4096 == 0 {
                    self.between_batches()?;
                }
            }
            pos = hi;
        }
        let node = self.inode(ino)?;
        let now = Timespec::now().pair();
        node.d.mtime = now;
        node.d.ctime = now;
        node.dirty = true;
        self.after_dirtying()
    }
}

impl Inner {
    /// Whether the read `plan` keeps its own block too (clean, in the cache): one whole block
    /// from the device, with the byte log on. A page the kernel reads before it changes part
    /// of it (FUSE reads a page before a partial write) comes back whole at write-back, and
    /// only a cached copy tells which bytes changed without reading the block again
    /// (`bytelog.rs`). Larger reads are the mount's page cache's alone.
    pub(crate) fn keeps_read<O: AsMut<[u8]>>(&self, plan: &ReadPlan<O>) -> bool {
        let bs = self.bs() as u64;
        self.bytelog_active()
            && plan.misses.len() == 1
            && plan.offset == plan.misses[0].0 * bs
            && plan.end == plan.offset + bs
    }

    /// After the device reads of `plan` (outside the engine lock): keeps the readahead's
    /// blocks (and the read's own, `keep_demand`) as clean cached copies, if no block left
    /// any cache meanwhile (a removal could mean a newer copy went home while this read
    /// fetched an older one) and each block still maps where it was read.
    pub(crate) fn keep_fetched<O: AsMut<[u8]>>(
        &mut self,
        ino: u64,
        plan: &mut ReadPlan<O>,
    ) -> FsResult<()> {
        let fresh = self.book.removals() == plan.removals && self.inodes.contains_key(&ino);
        let mut keep: Vec<(u64, u64, Block, bool)> = Vec::new();
        if plan.keep_demand && plan.misses.len() == 1 {
            let (idx, phys) = plan.misses[0];
            let mut buf = self.new_block();
            Arc::make_mut(&mut buf).copy_from_slice(plan.out.as_mut());
            keep.push((idx, phys, buf, false));
        }
        for ((idx, phys), buf) in plan.ahead.drain(..).zip(plan.bufs.drain(..)) {
            keep.push((idx, phys, buf, true));
        }
        let mut kept = false;
        for (idx, phys, buf, prefetched) in keep {
            // (an inode freed meanwhile: nothing to keep, and no error for the read)
            let put = fresh
                && self.bmap(ino, idx).unwrap_or(0) == phys
                && self.inodes.get_mut(&ino).is_some_and(|node| {
                    node.cache
                        .put_clean(&mut self.book, ino, idx, buf.clone(), prefetched)
                });
            if !put {
                self.counters.ra_dropped += prefetched as u64;
                self.spare.recycle(buf);
            }
            kept |= put;
        }
        if kept {
            self.after_dirtying()?; // the cache's bound, as after a write
        }
        Ok(())
    }
}

/// Keeps the buffer of a block leaving the cache for a later `new_block`, up to `max` of them,
/// unless something (write-behind's snapshot) still shares it. Streaming writes evict and
/// allocate tens of MiB per commit: freeing them let the allocator return the pages to the
/// kernel (and this VM's kernel to the host), so that every new buffer was a page fault and a
/// zeroed page again — up to 40 % of the daemon's time in a 1 GiB write.
/// Buffers of blocks that left the cache, kept for new contents (`Inner::new_block`, reads'
/// readahead buffers): at most a quarter of the cache bound, and within what the cache
/// leaves of it (`evict`).
#[derive(Debug, Default)]
pub(crate) struct Spares {
    bufs: Vec<Block>,
    max: usize,
}

impl Spares {
    pub(crate) fn new(max: usize) -> Spares {
        Spares {
            bufs: Vec::new(),
            max,
        }
    }

    /// Keeps a buffer that left the cache, if nothing else holds it and there is room.
    pub(crate) fn recycle(&mut self, mut data: Block) {
        if self.bufs.len() < self.max && Arc::get_mut(&mut data).is_some() {
            self.bufs.push(data);
        }
    }

    fn take(&mut self) -> Option<Block> {
        self.bufs.pop()
    }

    /// Keeps at most `room` buffers.
    fn shrink_to(&mut self, room: usize) {
        self.bufs.truncate(room);
    }

    pub(crate) fn len(&self) -> usize {
        self.bufs.len()
    }
}

/// A zeroed block buffer.
pub(crate) fn zeroed_block(n: usize) -> Block {
    Arc::new(vec![0u8; n])
}

/// A read in progress: the reply buffer (cached parts filled in) and the blocks still to fetch.
pub(crate) struct ReadPlan<O> {
    /// The reply: `end - offset` bytes.
    pub out: O,
    /// The request's blocks to read: (logical index, physical block), in logical order.
    pub misses: Vec<(u64, u64)>,
    /// The readahead's, likewise; after `read_runs`, `bufs[i]` holds block `ahead[i]`.
    pub ahead: Vec<(u64, u64)>,
    pub bufs: Vec<Block>,
    pub offset: u64,
    pub end: u64,
    /// `CacheBook::removals` when the plan was made.
    pub removals: u64,
    /// Keep the request's one block in the cache too (`Inner::keeps_read`).
    pub keep_demand: bool,
}

impl<O> ReadPlan<O> {
    fn empty(out: O, offset: u64, removals: u64) -> ReadPlan<O> {
        ReadPlan {
            out,
            misses: Vec::new(),
            ahead: Vec::new(),
            bufs: Vec::new(),
            offset,
            end: offset,
            removals,
            keep_demand: false,
        }
    }
    /// Nothing to read from the device.
    pub fn is_complete(&self) -> bool {
        self.misses.is_empty() && self.ahead.is_empty()
    }
}

/// Reads the missing blocks of `plan`, the request's and the readahead's together, one
/// device request per run of blocks consecutive both in the file and on the device. Needs
/// no engine state, so `Fs::read` runs it outside the engine lock (see `io_gate`).
pub(crate) fn read_runs<O: AsMut<[u8]>>(
    dev: &dyn BlockDevice,
    bs: u64,
    plan: &mut ReadPlan<O>,
) -> FsResult<()> {
    let (offset, end) = (plan.offset, plan.end);
    let out = plan.out.as_mut();
    while plan.bufs.len() < plan.ahead.len() {
        plan.bufs.push(zeroed_block(bs as usize));
    }
    // Every block to read, in logical order: (logical, physical, index into `ahead` or none).
    let mut all: Vec<(u64, u64, Option<usize>)> = plan
        .misses
        .iter()
        .map(|&(l, p)| (l, p, None))
        .chain(
            plan.ahead
                .iter()
                .enumerate()
                .map(|(i, &(l, p))| (l, p, Some(i))),
        )
        .collect();
    all.sort_unstable_by_key(|b| b.0);
    let mut buf = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() && all[j].1 == all[j - 1].1 + 1 && all[j].0 == all[j - 1].0 + 1 {
            j += 1;
        }
        let run = &all[i..j];
        let run_start = run[0].0 * bs;
        let run_end = run[run.len() - 1].0 * bs + bs;
        if offset <= run_start && run_end <= end {
            // Only the request's whole blocks: read straight into the reply buffer.
            let dst = &mut out[(run_start - offset) as usize..(run_end - offset) as usize];
            dev.read_at(run[0].1 * bs, dst)?;
        } else {
            buf.resize((run_end - run_start) as usize, 0);
            dev.read_at(run[0].1 * bs, &mut buf)?;
            for (k, &(idx, _, ahead)) in run.iter().enumerate() {
                let src = &buf[k * bs as usize..(k + 1) * bs as usize];
                if let Some(a) = ahead {
                    // unshared: fresh from `spare` or just allocated
                    let dst = Arc::get_mut(&mut plan.bufs[a]).expect("unshared buffer");
                    dst.copy_from_slice(src);
                    continue;
                }
                let bstart = idx * bs;
                let lo = offset.max(bstart);
                let hi = end.min(bstart + bs);
                let src = &src[(lo - bstart) as usize..(hi - bstart) as usize];
                out[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
            }
        }
        i = j;
    }
    Ok(())
}
