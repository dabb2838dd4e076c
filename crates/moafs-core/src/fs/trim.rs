//! FITRIM (`fstrim`): the device is told which free blocks of a range it may forget (a block
//! device's discard, a hole punched in an image file).
//!
//! Which blocks are free. A block clear in the in-memory bitmap is free on the device too, and
//! nothing durable points at it: blocks freed by an operation stay set in memory until the
//! commit *after* the one that freed them (`alloc.rs`), by when the freeing transaction and its
//! home writes are durable, so neither an old pointer nor a journal replay can read or write
//! such a block, and no read outside the engine lock is reading it (frees become reusable
//! under `io_gate` held exclusively) — discarding it is as safe as reusing it. Each group is
//! trimmed with `commit_mx` and the engine lock held (as `drop_caches`): no commit or
//! write-behind round writes meanwhile, and no operation allocates from the runs being
//! discarded. Between groups both are let go, so a large trim delays other operations by one
//! group's discards at most.
//! Frees still pending are released first by two commits: a trim after a delete trims what
//! the delete freed.

use super::Fs;
use crate::error::{FsError, FsResult};
use crate::format::bitmap::free_extents;

impl Fs {
    /// Discards the free blocks of bytes `[start, start + len)` of the device that lie in
    /// free runs of at least `min_len` bytes, as ext4's FITRIM: `start` past the file system's
    /// end, `len` below one block, or `min_len` above a group's size is EINVAL; a range
    /// running past the end stops there. Returns the bytes discarded (what the device was
    /// asked to forget: a device without discard ignores the request, as a disk may).
    pub fn trim(&self, start: u64, len: u64, min_len: u64) -> FsResult<u64> {
        self.live()?;
        let (geo, read_only) = {
            let g = self.lock();
            (g.alloc.geo, g.opts.read_only)
        };
        if read_only {
            return Err(FsError::ReadOnly);
        }
        let bs = geo.block_size as u64;
        let first = start / bs;
        if first >= geo.total_blocks || len < bs || min_len > geo.blocks_per_group as u64 * bs {
            return Err(FsError::invalid(
                "FITRIM: start past the end, length under a block or minimum over a group",
            ));
        }
        // one past the last block of the range (blocks of `len` counted from `start`'s)
        let end = first.saturating_add(len / bs).min(geo.total_blocks);
        let min_blocks = min_len.div_ceil(bs).max(1);
        // Blocks freed lately wait for two commits before they are free here: run them, so
        // that what was just deleted is trimmed too (as ext4 trims what its last commit freed).
        if self.lock().alloc.has_pending() {
            self.commit_to_free()?;
        }
        let mut trimmed = 0u64;
        for g in geo.group_of_block(first)..=geo.group_of_block(end - 1) {
            self.live()?;
            let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
            let inner = self.lock();
            let gstart = geo.group_start(g);
            let from = first.max(gstart) - gstart;
            let to = end.min(gstart + geo.group_len(g) as u64) - gstart;
            let group = &inner.alloc.groups[g as usize];
            let runs: Vec<(u64, u64)> = free_extents(&group.bitmap, from, to)
                .filter(|&(_, n)| n >= min_blocks)
                .collect();
            for (s, n) in runs {
                inner.dev.discard((gstart + s) * bs, n * bs)?;
                trimmed += n * bs;
            }
        }
        Ok(trimmed)
    }
}
