//! Co-writing (paper 000, CW-FFS): at write-back, the dirty small files of one directory go
//! to disk together, in one vectored request per contiguous free run of the directory's
//! allocation group.
//!
//! A *small file* has at most 12 blocks (the direct pointers). Only whole files are
//! co-written: every block of the file is dirty (new, or entirely rewritten — the common
//! case of small-file writes). For each directory, its files are bucketed by block count and
//! taken smallest first; the run is the first free run of the group that holds all of them
//! at or after the directory's last co-write, else the largest free run of at most N blocks
//! (N = `cowrite_max` / block size), falling back N → 2 (`FreeRunIndex::find`); a batch is the
//! prefix of the files that fits the run, and several batches follow while files and runs
//! remain. Files that fit no run of two blocks are written back on their own afterwards.
//!
//! Overwritten files move (their data is written to the new run, never over the old blocks):
//! the old blocks are freed with `free_later`, so they are reused only after the commit that
//! makes the new pointers durable is on disk; until that commit, the old pointers still
//! reach the old, intact data. Relocation takes free space only beyond what is promised to
//! other dirty data (`reserved`), so it never makes a commit run out of space.

use super::Inner;
use crate::error::{FsError, FsResult};
use crate::format::N_DIRECT;
use nix::time::{clock_gettime, ClockId};
use std::collections::HashMap;

/// A dirty small file ready to be co-written: (inode, blocks).
type Candidate = (u64, u64);

fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Where the next co-write of each directory looks for free space (after its last one).
#[derive(Debug, Default)]
pub(crate) struct Goals(HashMap<u64, u64>);

impl Inner {
    /// Co-writes the dirty small files of every directory that has some (see the module
    /// comment). Files it does not place stay dirty for `write_back_file`.
    pub(super) fn cowrite_dirs(&mut self) -> FsResult<()> {
        if !self.opts.cowrite || self.dirty_order.is_empty() {
            return Ok(());
        }
        if self.cw_goal.0.len() > 100_000 {
            self.cw_goal.0.clear();
        }
        let geo = self.alloc.geo;
        // The dirty-file list of each directory, from the files in the order they became
        // dirty, keyed (directory's group, goal key). Files whose directory is not known (an
        // inode read back after its in-memory state was dropped) form one list per group of
        // their own inode, with a goal of its own.
        let mut lists: HashMap<(u32, u64), Vec<u64>> = HashMap::new();
        for &ino in &self.dirty_order {
            let Some(node) = self.inodes.get(&ino) else {
                continue;
            };
            let key = match node.parent_hint {
                0 => {
                    let g = geo.group_of_inode(ino);
                    (g, u64::MAX - u64::from(g))
                }
                dir => (geo.group_of_inode(dir), dir),
            };
            lists.entry(key).or_default().push(ino);
        }
        let mut dirs: Vec<(u32, u64, Vec<u64>)> =
            lists.into_iter().map(|((g, k), f)| (g, k, f)).collect();
        // By group, so that the co-writes sweep the disk once (and deterministic: a crash
        // test replays exactly).
        dirs.sort_unstable_by_key(|d| (d.0, d.1));
        // Free blocks not promised to other dirty data (nor to the slack reservations
        // keep): what relocation may take.
        let mut spare = self.avail_for_reservation();
        for (group, key, files) in dirs {
            self.cowrite_dir(group, key, files, &mut spare)?;
        }
        Ok(())
    }

    /// The whole-file candidates among `files`, smallest first (bucketed by block count);
    /// files of more than `n_max` blocks fit no co-write.
    fn candidates(&self, files: Vec<u64>, n_max: u64) -> Vec<Candidate> {
        let bs = self.bs() as u64;
        let mut buckets: Vec<Vec<u64>> = vec![Vec::new(); N_DIRECT + 1];
        for ino in files {
            let Some(node) = self.inodes.get(&ino) else {
                continue; // forgotten since: nothing dirty
            };
            let dirty = node.cache.dirty_count();
            if dirty == 0 || node.kind_mode() != libc::S_IFREG {
                continue;
            }
            let nb = node.d.size.div_ceil(bs);
            if nb == 0 || nb > (N_DIRECT as u64).min(n_max) || dirty != nb {
                continue;
            }
            if node.cache.dirty_below(nb).count() as u64 != nb {
                continue;
            }
            if maps_past(node, nb) {
                // blocks past the end (fallocate KEEP_SIZE): moving 0..nb would split their
                // extent, a tree block nobody promised
                continue;
            }
            buckets[nb as usize].push(ino);
        }
        let mut out = Vec::new();
        for (nb, mut b) in buckets.into_iter().enumerate() {
            b.sort_unstable();
            out.extend(b.into_iter().map(|ino| (ino, nb as u64)));
        }
        out
    }

    /// Co-writes the listed files of one directory (goal key `key`) into runs of `group`.
    fn cowrite_dir(
        &mut self,
        group: u32,
        key: u64,
        files: Vec<u64>,
        spare: &mut u64,
    ) -> FsResult<()> {
        let t0 = thread_cpu_ns();
        let geo = self.alloc.geo;
        let n_max = self.opts.cowrite_blocks(geo.block_size);
        let mut pending = self.candidates(files, n_max);
        if pending.len() < 2 {
            // Nothing to write together: a file alone in its directory's list is a write of
            // its own, which per-file write-back makes in place or next to its neighbours,
            // without taking a fresh run (varmail's fsyncs commit one file at a time).
            self.counters.cowrite_fallback_files += pending.len() as u64;
            self.counters.cowrite_choose_ns += thread_cpu_ns().saturating_sub(t0);
            return Ok(());
        }
        let mut goal = self
            .cw_goal
            .0
            .get(&key)
            .copied()
            .unwrap_or(geo.group_start(group) + geo.meta_blocks() as u64);
        let mut left: u64 = pending.iter().map(|c| c.1).sum();
        let mut choose_ns = 0;
        let mut t = t0;
        while !pending.is_empty() {
            let want = left.min(n_max);
            let Some((start, len)) = self.alloc.find_run(group, want, goal) else {
                break;
            };
            let room = len.min(want);
            // Smallest first, whole files that fit the run; a file whose move would take
            // more than the spare space waits (it is written in place afterwards).
            let mut used = 0;
            let mut moved = 0;
            let mut batch = Vec::new();
            let mut rest = Vec::with_capacity(pending.len());
            for (k, &(ino, nb)) in pending.iter().enumerate() {
                if used + nb > room {
                    rest.extend_from_slice(&pending[k..]);
                    break;
                }
                let old = self.mapped_blocks(ino, nb)?;
                if moved + old > *spare {
                    rest.push((ino, nb));
                    continue;
                }
                moved += old;
                used += nb;
                batch.push((ino, nb));
            }
            if batch.is_empty() {
                break; // the smallest file left fits no run, or no spare space to move it
            }
            *spare -= moved;
            pending = rest;
            left -= used;
            self.alloc.alloc_exact(start, used);
            let now = thread_cpu_ns();
            choose_ns += now.saturating_sub(t);
            self.cowrite_batch(start, &batch)?;
            t = thread_cpu_ns();
            goal = start + used;
        }
        choose_ns += thread_cpu_ns().saturating_sub(t);
        self.counters.cowrite_fallback_files += pending.len() as u64;
        self.counters.cowrite_choose_ns += choose_ns;
        self.cw_goal.0.insert(key, goal);
        Ok(())
    }

    /// Blocks `0..nb` of `ino` that have a disk address (`nb` at most `N_DIRECT`: direct
    /// pointers, or an extent map in the inode or loaded).
    fn mapped_blocks(&mut self, ino: u64, nb: u64) -> FsResult<u64> {
        Ok(self
            .old_blocks(ino, nb)?
            .iter()
            .filter(|p| **p != 0)
            .count() as u64)
    }

    /// The disk addresses of blocks `0..nb` of `ino` (0: none).
    fn old_blocks(&mut self, ino: u64, nb: u64) -> FsResult<Vec<u64>> {
        if !self.inodes.contains_key(&ino) {
            return Err(FsError::Stale { ino });
        }
        (0..nb).map(|i| self.bmap(ino, i)).collect()
    }

    /// Takes `files` (whole, in order) into the commit as one vectored request to the
    /// allocated run at `start`, then points their blocks there and frees the old ones (after
    /// two commits).
    fn cowrite_batch(&mut self, start: u64, files: &[Candidate]) -> FsResult<()> {
        let blocks: u64 = files.iter().map(|c| c.1).sum();
        {
            let mut bufs: Vec<super::cache::Block> = Vec::with_capacity(blocks as usize);
            for &(ino, nb) in files {
                let node = &self.inodes[&ino];
                bufs.extend(node.cache.range(0..nb).map(|(_, c)| c.data.clone()));
            }
            debug_assert_eq!(bufs.len() as u64, blocks);
            // a small commit's run is carried by its transaction (`commit.rs`)
            self.take_data_run(start, bufs, self.building.is_small());
        }
        let mut phys = start;
        let mut relocated = 0;
        for &(ino, nb) in files {
            let old = self.old_blocks(ino, nb)?;
            for &o in old.iter().filter(|o| **o != 0) {
                self.alloc.free_later(o, 1);
                relocated += 1;
            }
            let mut unreserved = 0;
            for (idx, o) in old.iter().enumerate() {
                // a direct slot or an extent: nothing to allocate before the commit packs it
                self.set_bmap(ino, idx as u64, phys)?;
                let node = self.inodes.get_mut(&ino).expect("set_bmap loaded it");
                if *o == 0 {
                    node.d.blocks += 1;
                }
                unreserved += node.cache.mark_clean(&mut self.book, ino, idx as u64) as u64;
                phys += 1;
            }
            self.release_reserved(unreserved);
        }
        if relocated > 0 && !self.building.is_small() {
            // With journal=writeback too, the moved data must be on disk before the new
            // pointers (else a crash could show a rewritten file as garbage).
            self.building.order_data_once();
        }
        self.counters.cowrite_batches += 1;
        self.counters.cowrite_files += files.len() as u64;
        self.counters.cowrite_blocks += blocks;
        self.counters.cowrite_relocated_blocks += relocated;
        Ok(())
    }
}

/// Whether an extent-mapped `node` maps any block from `nb` on (a pointer map: false, its
/// co-write only rewrites direct pointers).
fn maps_past(node: &super::node::Inode, nb: u64) -> bool {
    use crate::format::extent::ExtNode;
    match (&node.ext, &node.d.extents) {
        (Some(map), _) => map.maps_from(nb),
        (None, Some(ExtNode::Leaf(es))) => es.iter().any(|e| e.logical + e.len > nb),
        (None, Some(ExtNode::Index { .. })) => true,
        (None, None) => false,
    }
}
