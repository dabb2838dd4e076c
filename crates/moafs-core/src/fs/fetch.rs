//! Cache misses read with the engine lock released (issue 28 item 5).
//!
//! An operation that may miss — an inode-table block, a directory, an indirect block, the
//! old contents of a block a write changes in part, an extended-attribute block, the home
//! copy the byte log compares with — first names what it will need in a *warm pass*
//! ([`Fs::warm`]). The pass runs under the engine lock with the fetch *armed*: a
//! [`Inner::read_block`] of a block that is neither in memory nor fetched notes the block
//! and fails (`FsError::WouldRead`) instead of reading. The pass ignores its errors; the
//! blocks it noted are read with the engine lock released — under `io_gate`, as
//! `Fs::read`'s reads, so that no freed block becomes reusable meanwhile — and kept here,
//! and the pass runs again until it meets no miss (or [`MAX_ROUNDS`] passes). Then the
//! operation itself runs, in the same hold of the lock, and finds those blocks here; a
//! block it still misses it reads under the lock as before. What is kept here never
//! outlives that hold of the lock ([`Warm`] forgets it when dropped), and a pass only
//! fills caches, so an operation does exactly what it did before, and one thread's miss on
//! a slow disk no longer stops every other operation.
//!
//! A block read with the lock released is what the device (through the checkpoint view)
//! held then. A block that is not in memory when the lock is taken again is current at
//! home, so the copy read is current unless the home copy changed since it was read:
//! only a commit or a write-behind round writes home blocks the engine still maps, and
//! only after a newer version in memory was dropped could a reader miss it. Those events
//! — a commit's or write-behind round's end, eviction of cached blocks, forgetting idle
//! inodes, the inode-table cache cleared — call [`Fetch::changed`], and blocks read across
//! one are not kept (the pass runs again and reads them again).

use super::{Fs, Inner};
use crate::error::{FsError, FsResult};
use rustc_hash::FxHashMap as HashMap;
use std::sync::MutexGuard;

/// Runs of `ptrs_per_block` blocks whose mapping one warm pass looks up at most.
const MAX_MAP_RUNS: u64 = 4096;

/// Warm passes per operation at most: each waits for one round of device reads (a
/// directory's inode, then its indirect block, then its blocks); past this the operation
/// reads what it still misses under the lock.
pub(crate) const MAX_ROUNDS: usize = 6;

#[derive(Default)]
pub(crate) struct Fetch {
    /// A warm pass is running: misses are noted, not read.
    armed: bool,
    /// Blocks the pass missed.
    want: Vec<u64>,
    /// Blocks read with the lock released, for the operation in this hold of the lock.
    got: HashMap<u64, Vec<u8>>,
    /// Counts the events that may make a block read with the lock released stale.
    era: u64,
}

impl Fetch {
    /// Something happened that may make blocks read with the lock released stale (module
    /// comment): those in flight are not kept.
    pub(crate) fn changed(&mut self) {
        self.era = self.era.wrapping_add(1);
    }

    /// Serves a read of block `blk` into `buf` from what was fetched: true when it did;
    /// false when the caller must read the device; `WouldRead` when a pass is armed (the
    /// block is noted for reading with the lock released).
    fn serve(&mut self, blk: u64, buf: &mut [u8]) -> FsResult<bool> {
        if let Some(b) = self.got.get(&blk) {
            buf.copy_from_slice(b);
            return Ok(true);
        }
        if self.armed {
            self.want.push(blk);
            return Err(FsError::WouldRead);
        }
        Ok(false)
    }

    fn arm(&mut self) {
        self.armed = true;
        self.want.clear();
    }

    /// Ends a pass: the blocks it missed, each once, in address order.
    fn disarm(&mut self) -> Vec<u64> {
        self.armed = false;
        let mut want = std::mem::take(&mut self.want);
        want.sort_unstable();
        want.dedup();
        want
    }

    /// Keeps blocks read with the lock released since `era`: none if it has changed.
    fn keep(&mut self, era: u64, got: Vec<(u64, Vec<u8>)>) -> bool {
        if era != self.era {
            return false;
        }
        self.got.extend(got);
        true
    }

    /// Forgets what was fetched (and a pass a panic interrupted).
    pub(crate) fn reset(&mut self) {
        self.armed = false;
        self.want.clear();
        if !self.got.is_empty() {
            self.got.clear();
        }
    }
}

/// The engine lock after a warm pass: what was fetched is forgotten when it is dropped,
/// before the lock is released.
pub(crate) struct Warm<'a>(MutexGuard<'a, Inner>);

impl std::ops::Deref for Warm<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl std::ops::DerefMut for Warm<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.0
    }
}

impl Drop for Warm<'_> {
    fn drop(&mut self) {
        self.0.fetch.reset();
    }
}

impl Fs {
    /// The engine lock, once `need` (a warm pass: it names what an operation will read, and
    /// changes nothing but caches) met no block it would have to read from the device; the
    /// blocks it missed are read with the lock released (module comment).
    pub(crate) fn warm(&self, mut need: impl FnMut(&mut Inner)) -> Warm<'_> {
        self.warm_from(self.lock(), &mut need)
    }

    /// [`Fs::warm`] starting from a lock already held.
    pub(crate) fn warm_from<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        need: &mut dyn FnMut(&mut Inner),
    ) -> Warm<'a> {
        let rounds = if g.opts.unlocked_reads { MAX_ROUNDS } else { 0 };
        for _ in 0..rounds {
            g.fetch.arm();
            need(&mut g);
            let want = g.fetch.disarm();
            if want.is_empty() {
                break;
            }
            let era = g.fetch.era;
            let gate = g.io_gate.clone();
            // as `Fs::read`: no block mapped now becomes reusable before these reads end
            let shared = gate.read().unwrap_or_else(|e| e.into_inner());
            let (dev, bs) = (g.dev.clone(), g.bs());
            drop(g);
            let mut got = Vec::with_capacity(want.len());
            let mut failed = false;
            for blk in want {
                let mut buf = vec![0u8; bs];
                if dev.read_at(blk * bs as u64, &mut buf).is_err() {
                    // the operation reads it again under the lock and reports the error
                    failed = true;
                    break;
                }
                got.push((blk, buf));
            }
            drop(shared);
            g = self.lock();
            let n = got.len() as u64;
            if g.fetch.keep(era, got) {
                g.counters.unlocked_reads += n;
            } else {
                g.counters.unlocked_reads_stale += n;
            }
            if failed {
                break;
            }
        }
        Warm(g)
    }
}

impl Inner {
    /// Reads block `blk`: from what a warm pass fetched, else from the device (or, during
    /// an armed pass, `WouldRead`: module comment).
    pub(crate) fn read_block(&mut self, blk: u64, buf: &mut [u8]) -> FsResult<()> {
        if self.fetch.serve(blk, buf)? {
            return Ok(());
        }
        let bs = self.bs() as u64;
        self.dev.read_at(blk * bs, buf)?;
        Ok(())
    }

    // Each pass first asks, without side effects, whether what it names is in memory
    // already (the common case: a pass then costs a few hash lookups), and only otherwise
    // walks the structures that load it.

    /// Whether mapping blocks up to `last` of `ino` reads nothing: the inode is in memory
    /// and the blocks are direct, or the single indirect block that maps them is cached
    /// or absent.
    fn map_resident(&self, ino: u64, last: u64) -> bool {
        let Some(n) = self.inodes.get(&ino) else {
            return false;
        };
        if n.d.extents.is_some() {
            return n.ext.is_some() || n.d.extents.as_ref().is_some_and(|r| r.depth() == 0);
        }
        let direct = crate::format::N_DIRECT as u64;
        if last < direct {
            return true;
        }
        let per = crate::format::ptrs_per_block(self.alloc.geo.block_size);
        let ind = n.d.indirect[0] as u64;
        last < direct + per && (ind == 0 || self.ind.contains_key(&ind))
    }

    /// Whether block `idx` of `ino` needs no read to be changed in part: cached, or a hole
    /// of the direct blocks.
    fn block_resident(&self, ino: u64, idx: u64) -> bool {
        self.inodes.get(&ino).is_some_and(|n| {
            n.cache.contains_key(&idx)
                || match (&n.ext, &n.d.extents) {
                    (Some(map), _) => map.get(idx) == 0,
                    (None, Some(_)) => false,
                    (None, None) => {
                        idx < crate::format::N_DIRECT as u64 && n.d.direct[idx as usize] == 0
                    }
                }
        })
    }

    /// Warm pass: the inode `ino`.
    pub(crate) fn warm_inode(&mut self, ino: u64) {
        if !self.inodes.contains_key(&ino) {
            let _ = self.inode(ino);
        }
    }

    /// Warm pass: directory `ino` (its inode and blocks).
    pub(crate) fn warm_dir(&mut self, ino: u64) {
        if !self
            .inodes
            .get(&ino)
            .is_some_and(|n| n.dir.is_some() || !n.is_dir())
        {
            let _ = self.dir(ino);
        }
    }

    /// Warm pass: the entry `name` of directory `parent` and the inode it names (its
    /// directory too when `dirs` and it is one). Returns that inode.
    pub(crate) fn warm_entry(&mut self, parent: u64, name: &[u8], dirs: bool) -> Option<u64> {
        if name != b"." && name != b".." {
            if let Some(dir) = self.inodes.get(&parent).and_then(|p| p.dir.as_ref()) {
                let e = dir.get(name)?;
                if self
                    .inodes
                    .get(&e.ino)
                    .is_some_and(|c| !(dirs && c.is_dir() && c.dir.is_none()))
                {
                    return Some(e.ino);
                }
            }
        }
        let ino = self.lookup_name(parent, name).ok()?;
        if self.inode(ino).ok()?.is_dir() && dirs {
            self.warm_dir(ino);
        }
        Some(ino)
    }

    /// Warm pass: the indirect blocks that map blocks `first..=last` of `ino` — at most
    /// `MAX_MAP_RUNS` runs of them (a truncate of a huge sparse file would otherwise look
    /// up billions; what a pass leaves out, the operation reads under the lock).
    pub(crate) fn warm_map(&mut self, ino: u64, first: u64, last: u64) {
        if self.map_resident(ino, last) || self.inode(ino).is_err() {
            return;
        }
        if self.has_extents(ino) {
            let _ = self.ext_map(ino); // the whole map, a level per round
            return;
        }
        // an indirect block maps an aligned run of `per` blocks: one lookup in each run
        let per = crate::format::ptrs_per_block(self.alloc.geo.block_size);
        let last = last.min(self.bounds().max_file_blocks().saturating_sub(1));
        let mut idx = first;
        let mut runs = 0;
        while idx < last && runs < MAX_MAP_RUNS {
            let _ = self.bmap(ino, idx);
            idx = idx.saturating_add(per);
            runs += 1;
        }
        let _ = self.bmap(ino, last);
    }

    /// Warm pass for a read of `size` bytes at `offset` of `ino`: the mapping of those
    /// blocks and of the next indirect block's run (readahead may map ahead into it).
    pub(crate) fn warm_read(&mut self, ino: u64, offset: u64, size: u32) {
        let bs = self.bs() as u64;
        self.warm_inode(ino);
        let Some(node) = self.inodes.get(&ino) else {
            return;
        };
        let fsize = node.d.size;
        if size == 0 || offset >= fsize {
            return;
        }
        let per = crate::format::ptrs_per_block(self.alloc.geo.block_size);
        let end = offset.saturating_add(size as u64).min(fsize);
        let last = ((end - 1) / bs)
            .saturating_add(per)
            .min(fsize.div_ceil(bs) - 1);
        self.warm_map(ino, offset / bs, last);
    }

    /// Warm pass for a change of the size of `ino` to `size`: when it shrinks, the mapping
    /// between the two sizes (what the truncate frees) and the block the new end falls in
    /// (its tail is zeroed). Growing reads nothing (the new part is a hole).
    pub(crate) fn warm_truncate(&mut self, ino: u64, size: u64) {
        let bs = self.bs() as u64;
        self.warm_inode(ino);
        let Some(node) = self.inodes.get(&ino) else {
            return;
        };
        let old = node.d.size;
        let (lo, hi) = (size, old);
        if lo >= hi {
            return;
        }
        self.warm_map(ino, lo / bs, (hi - 1) / bs);
        if !lo.is_multiple_of(bs) && !self.block_resident(ino, lo / bs) {
            self.warm_block(ino, lo / bs);
        }
    }

    /// Warm pass for removing the entry `name` of `parent` (unlink, rmdir, the target of a
    /// rename): the entry, the inode (and directory) it names, and what freeing that inode
    /// reads when this removal frees it.
    pub(crate) fn warm_victim(&mut self, parent: u64, name: &[u8]) {
        let Some(ino) = self.warm_entry(parent, name, true) else {
            return;
        };
        let Some(node) = self.inodes.get(&ino) else {
            return;
        };
        if self.kept.lookups(ino) == 0 && node.opens == 0 && (node.is_dir() || node.d.nlink <= 1) {
            self.warm_freeing(ino);
        }
    }

    /// Warm pass for dropping `forgets` lookups and `closes` opens of `ino`: what freeing
    /// it reads, when that frees it.
    pub(crate) fn warm_reap(&mut self, ino: u64, forgets: u64, closes: u32) {
        let Some(node) = self.inodes.get(&ino) else {
            return;
        };
        if node.d.nlink == 0
            && self.kept.lookups(ino).saturating_sub(forgets) == 0
            && node.opens.saturating_sub(closes) == 0
        {
            self.warm_freeing(ino);
        }
    }

    /// Warm pass: what freeing `ino` reads (its block map and extended attributes).
    fn warm_freeing(&mut self, ino: u64) {
        self.warm_whole_map(ino);
        self.warm_xattrs(ino);
    }

    /// Warm pass: the extended attributes of `ino`.
    pub(crate) fn warm_xattrs(&mut self, ino: u64) {
        if !self
            .inodes
            .get(&ino)
            .is_some_and(|n| n.xattrs.is_some() || n.d.xattr_block == 0)
        {
            let _ = self.xattrs(ino);
        }
    }

    /// Warm pass: every block mapping of `ino` (what freeing it all reads).
    pub(crate) fn warm_whole_map(&mut self, ino: u64) {
        let bs = self.bs() as u64;
        let Ok(node) = self.inode(ino) else {
            return;
        };
        let blocks = node.d.size.div_ceil(bs);
        // (an extent map may have tree blocks however small the file: sparse, or blocks
        // past its end)
        if blocks > crate::format::N_DIRECT as u64 || node.d.extents.is_some() {
            self.warm_map(ino, 0, blocks.saturating_sub(1));
        }
    }

    /// Warm pass for a write of `len` bytes at `offset` of `ino`: the mapping, and the old
    /// contents of the first and last block when the write changes them in part.
    pub(crate) fn warm_write(&mut self, ino: u64, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.warm_inode(ino);
        let bs = self.bs() as u64;
        let Some(end) = offset.checked_add(len) else {
            return;
        };
        let (first, last) = (offset / bs, (end - 1) / bs);
        self.warm_map(ino, first, last);
        let mut edges = Vec::with_capacity(2);
        if !offset.is_multiple_of(bs) {
            edges.push(first);
        }
        if !end.is_multiple_of(bs) {
            edges.push(last);
        }
        edges.dedup();
        for idx in edges {
            if !self.block_resident(ino, idx) {
                self.warm_block(ino, idx);
            }
        }
    }

    /// Warm pass: the home copy of block `idx` of `ino`, unless the cache has the block.
    pub(crate) fn warm_block(&mut self, ino: u64, idx: u64) {
        let cached = match self.inode(ino) {
            Ok(node) => node.cache.contains_key(&idx),
            Err(_) => return,
        };
        if cached {
            return;
        }
        if let Ok(phys) = self.bmap(ino, idx) {
            if phys != 0 {
                let mut scratch = vec![0u8; self.bs()];
                let _ = self.read_block(phys, &mut scratch);
            }
        }
    }
}
