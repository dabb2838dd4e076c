//! Allocation groups: block and inode bitmaps, kept in memory while mounted.
//!
//! Blocks freed by an operation are not reusable at once. The next commit writes bitmaps that
//! show them free (the on-disk image is exact after every transaction), but in memory they stay
//! allocated for one more commit: they become reusable only after the commit *following* the
//! one that freed them. By then the freeing transaction is durable and so are its home writes
//! (see `journal.rs`), so neither an old durable pointer nor the replay of an old transaction
//! can touch a block that already holds another file's data. Inode numbers follow the same
//! two-step rule.

use crate::format::bitmap::{bit, find_clear, free_extents, set_bit};
use crate::format::{Geometry, GroupHeader};
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub(crate) struct Group {
    pub hdr: GroupHeader,
    pub bitmap: Vec<u8>,
    pub ibitmap: Vec<u8>,
    pub dirty: bool,
    /// No free inode below this index (a search hint; lowered when an inode is freed).
    pub inode_hint: u64,
    /// No free block below this group-relative index (a search hint; lowered on free).
    pub block_hint: u64,
    /// The group's free extents, kept beside the bitmap (co-writing's run search).
    pub runs: FreeRunIndex,
}

/// The free extents of one group (group-relative), indexed by start and by length, so that
/// co-writing finds the largest free run of at most N blocks near a goal without scanning the
/// bitmap: O(N log E) for E extents. Derived from the bitmap at mount and changed with it;
/// blocks waiting in a pending free are not free here either.
#[derive(Debug, Default, Clone)]
pub(crate) struct FreeRunIndex {
    /// Kept only with co-writing on (its one user); else empty and never searched.
    enabled: bool,
    /// Lengths of N or more share one bucket.
    cap: u64,
    by_start: BTreeMap<u64, u64>,
    /// (min(length, cap), start)
    by_len: BTreeSet<(u64, u64)>,
}

impl FreeRunIndex {
    /// An index that is not kept (co-writing off).
    pub fn disabled() -> FreeRunIndex {
        FreeRunIndex::default()
    }

    /// The free extents of `bitmap` in `[from, to)`; lengths of `cap` or more share a bucket.
    pub fn build(bitmap: &[u8], from: u64, to: u64, cap: u64) -> FreeRunIndex {
        let mut r = FreeRunIndex {
            enabled: true,
            cap: cap.max(2),
            ..Default::default()
        };
        for (s, len) in free_extents(bitmap, from, to) {
            r.insert(s, len);
        }
        r
    }

    fn bucket(&self, len: u64) -> u64 {
        len.min(self.cap)
    }

    fn insert(&mut self, start: u64, len: u64) {
        if len > 0 {
            self.by_start.insert(start, len);
            self.by_len.insert((self.bucket(len), start));
        }
    }

    fn remove(&mut self, start: u64) -> Option<u64> {
        let len = self.by_start.remove(&start)?;
        self.by_len.remove(&(self.bucket(len), start));
        Some(len)
    }

    /// `[start, start + n)` became allocated (it lies inside one free extent).
    pub fn allocate(&mut self, start: u64, n: u64) {
        if !self.enabled || n == 0 {
            return;
        }
        let Some((&s, &l)) = self.by_start.range(..=start).next_back() else {
            debug_assert!(false, "allocated blocks {start}+{n} not in a free extent");
            return;
        };
        if start + n > s + l {
            debug_assert!(false, "allocated blocks {start}+{n} beyond extent {s}+{l}");
            return;
        }
        self.remove(s);
        self.insert(s, start - s);
        self.insert(start + n, s + l - start - n);
    }

    /// `[start, start + n)` became free: merged with its neighbours.
    pub fn free(&mut self, start: u64, n: u64) {
        if !self.enabled || n == 0 {
            return;
        }
        let (mut s, mut e) = (start, start + n);
        if let Some((&ps, &pl)) = self.by_start.range(..start).next_back() {
            if ps + pl == start {
                self.remove(ps);
                s = ps;
            }
        }
        if let Some(nl) = self.remove(e) {
            e += nl;
        }
        self.insert(s, e - s);
    }

    /// A free run for `want` blocks near `goal`: the first run of at least `want` blocks
    /// at or after `goal` (wrapping to the group's start); else the largest shorter run of at
    /// least two blocks (the one nearest `goal` among equals). (start, length) of the whole run.
    pub fn find(&self, want: u64, goal: u64) -> Option<(u64, u64)> {
        if !self.enabled {
            return None;
        }
        let want = want.clamp(2, self.cap);
        let nearest = |b: u64| -> Option<(u64, u64)> {
            // (distance class: 0 at or after goal, 1 wrapped; start)
            if let Some(&(_, s)) = self.by_len.range((b, goal)..=(b, u64::MAX)).next() {
                return Some((0, s));
            }
            self.by_len
                .range((b, 0)..(b, goal))
                .next()
                .map(|&(_, s)| (1, s))
        };
        let best = (want..=self.cap).filter_map(nearest).min();
        let start = match best {
            Some((_, s)) => s,
            None => (2..want).rev().find_map(nearest)?.1,
        };
        Some((start, self.by_start[&start]))
    }

    /// Free extents (start, length) in address order.
    #[cfg(test)]
    pub fn extents(&self) -> Vec<(u64, u64)> {
        self.by_start.iter().map(|(s, l)| (*s, *l)).collect()
    }
}

pub(crate) struct Allocator {
    pub geo: Geometry,
    pub groups: Vec<Group>,
    /// Blocks freed since the last commit: (first block, count).
    pub pending_blocks: Vec<(u64, u64)>,
    /// Inodes freed since the last commit.
    pub pending_inodes: Vec<u64>,
    /// Freed before the commit now writing (taken at its start, `seal_pending`): they
    /// become `pending_prev_*` when it is durable. Empty while no commit is in flight.
    pub pending_sealed_blocks: Vec<(u64, u64)>,
    pub pending_sealed_inodes: Vec<u64>,
    /// Freed before the last commit: reusable after the next one.
    pub pending_prev_blocks: Vec<(u64, u64)>,
    pub pending_prev_inodes: Vec<u64>,
}

/// A group's bitmaps and free counts as written to disk (pending frees shown free).
pub(crate) struct GroupImage {
    pub bitmap: Vec<u8>,
    pub ibitmap: Vec<u8>,
    pub free_blocks: u32,
    pub free_inodes: u32,
}

impl Allocator {
    pub fn free_blocks(&self) -> u64 {
        self.groups.iter().map(|g| g.hdr.free_blocks as u64).sum()
    }
    pub fn free_inodes(&self) -> u64 {
        self.groups.iter().map(|g| g.hdr.free_inodes as u64).sum()
    }
    fn all_pending_blocks(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.pending_blocks
            .iter()
            .chain(&self.pending_sealed_blocks)
            .chain(&self.pending_prev_blocks)
    }
    fn all_pending_inodes(&self) -> impl Iterator<Item = &u64> {
        self.pending_inodes
            .iter()
            .chain(&self.pending_sealed_inodes)
            .chain(&self.pending_prev_inodes)
    }
    pub fn pending_block_count(&self) -> u64 {
        self.all_pending_blocks().map(|p| p.1).sum()
    }
    pub fn pending_inode_count(&self) -> u64 {
        self.all_pending_inodes().count() as u64
    }
    pub fn has_pending(&self) -> bool {
        self.all_pending_blocks().next().is_some() || self.all_pending_inodes().next().is_some()
    }

    /// On-disk images of the dirty groups, with every pending free applied.
    pub fn dirty_images(&mut self) -> Vec<(u32, GroupImage)> {
        let geo = self.geo;
        let mut out: HashMap<u32, GroupImage> = HashMap::new();
        for (g, grp) in self.groups.iter_mut().enumerate() {
            if grp.dirty {
                grp.dirty = false;
                out.insert(
                    g as u32,
                    GroupImage {
                        bitmap: grp.bitmap.clone(),
                        ibitmap: grp.ibitmap.clone(),
                        free_blocks: grp.hdr.free_blocks,
                        free_inodes: grp.hdr.free_inodes,
                    },
                );
            }
        }
        let pending: Vec<(u64, u64)> = self.all_pending_blocks().copied().collect();
        for (first, count) in pending {
            for b in first..first + count {
                let g = geo.group_of_block(b);
                if let Some(img) = out.get_mut(&g) {
                    let i = b - geo.group_start(g);
                    if bit(&img.bitmap, i) {
                        set_bit(&mut img.bitmap, i, false);
                        img.free_blocks += 1;
                    }
                }
            }
        }
        let inodes: Vec<u64> = self.all_pending_inodes().copied().collect();
        for ino in inodes {
            let g = geo.group_of_inode(ino);
            if let Some(img) = out.get_mut(&g) {
                let i = geo.inode_index_in_group(ino) as u64;
                if bit(&img.ibitmap, i) {
                    set_bit(&mut img.ibitmap, i, false);
                    img.free_inodes += 1;
                }
            }
        }
        let mut v: Vec<(u32, GroupImage)> = out.into_iter().collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    /// Allocates up to `want` contiguous blocks, starting the search at `goal`; returns
    /// (first block, count) or None when the file system is full.
    pub fn alloc_blocks(&mut self, goal: u64, want: u64) -> Option<(u64, u64)> {
        let geo = self.geo;
        let goal = if goal >= geo.total_blocks { 0 } else { goal };
        let g0 = geo.group_of_block(goal);
        for k in 0..geo.group_count {
            let g = (g0 + k) % geo.group_count;
            if self.groups[g as usize].hdr.free_blocks == 0 {
                continue;
            }
            let start_in_group = if k == 0 { goal - geo.group_start(g) } else { 0 };
            if let Some(r) = self.alloc_in_group(g, start_in_group, want) {
                return Some(r);
            }
            if k == 0 && start_in_group > 0 {
                if let Some(r) = self.alloc_in_group(g, 0, want) {
                    return Some(r);
                }
            }
        }
        None
    }

    fn alloc_in_group(&mut self, g: u32, from: u64, want: u64) -> Option<(u64, u64)> {
        let len = self.geo.group_len(g) as u64;
        let meta = self.geo.meta_blocks() as u64;
        let grp = &mut self.groups[g as usize];
        // Below the hint every block is in use, so searching from there finds the same block.
        let first = find_clear(&grp.bitmap, from.max(meta).max(grp.block_hint), len)?;
        if from <= grp.block_hint {
            grp.block_hint = first;
        }
        let mut n = 0;
        while n < want && first + n < len && !bit(&grp.bitmap, first + n) {
            set_bit(&mut grp.bitmap, first + n, true);
            n += 1;
        }
        grp.hdr.free_blocks -= n as u32;
        grp.dirty = true;
        grp.runs.allocate(first, n);
        Some((self.geo.group_start(g) + first, n))
    }

    /// How many blocks from `b` on (at most `max`, inside `b`'s group) are free: what
    /// `alloc_blocks(b, max)` would give without looking further.
    pub fn free_at(&self, b: u64, max: u64) -> u64 {
        let geo = self.geo;
        if b >= geo.total_blocks {
            return 0;
        }
        let g = geo.group_of_block(b);
        let (start, len) = (geo.group_start(g), geo.group_len(g) as u64);
        let grp = &self.groups[g as usize];
        let mut n = 0;
        while n < max && b - start + n < len && !bit(&grp.bitmap, b - start + n) {
            n += 1;
        }
        n
    }

    /// A free run of the group for `want` blocks near `goal` (absolute block numbers), as
    /// `FreeRunIndex::find`; nothing is allocated.
    pub fn find_run(&self, g: u32, want: u64, goal: u64) -> Option<(u64, u64)> {
        let start = self.geo.group_start(g);
        let rel = goal.saturating_sub(start);
        self.groups[g as usize]
            .runs
            .find(want, rel)
            .map(|(s, l)| (start + s, l))
    }

    /// Allocates exactly `[first, first + n)`, which `find_run` returned free.
    pub fn alloc_exact(&mut self, first: u64, n: u64) {
        let geo = self.geo;
        let g = geo.group_of_block(first);
        let rel = first - geo.group_start(g);
        let grp = &mut self.groups[g as usize];
        for i in rel..rel + n {
            debug_assert!(!bit(&grp.bitmap, i), "block {} not free", first + i - rel);
            set_bit(&mut grp.bitmap, i, true);
        }
        grp.hdr.free_blocks -= n as u32;
        grp.dirty = true;
        grp.runs.allocate(rel, n);
    }

    /// Queues blocks for freeing (see the module comment).
    pub fn free_later(&mut self, first: u64, count: u64) {
        let geo = self.geo;
        let (g0, g1) = (
            geo.group_of_block(first),
            geo.group_of_block(first + count.max(1) - 1),
        );
        for g in g0..=g1.min(geo.group_count - 1) {
            self.groups[g as usize].dirty = true;
        }
        if let Some(last) = self.pending_blocks.last_mut() {
            if last.0 + last.1 == first {
                last.1 += count;
                return;
            }
        }
        self.pending_blocks.push((first, count));
    }

    /// Frees an inode number at once: one no commit has written (the images on disk, the
    /// commit in flight's included, show it free), so nothing on disk names it and no replay
    /// can bring it back. Postmark-like workloads create and delete thousands of files
    /// between two commits; reusing their numbers keeps the commit's inode-table blocks few.
    pub fn free_inode_now(&mut self, ino: u64) {
        let g = self.geo.group_of_inode(ino);
        self.groups[g as usize].dirty = true;
        self.release(Vec::new(), vec![ino]);
    }

    /// Queues an inode number for freeing.
    pub fn free_inode_later(&mut self, ino: u64) {
        let g = self.geo.group_of_inode(ino);
        self.groups[g as usize].dirty = true;
        self.pending_inodes.push(ino);
    }

    /// Every group's free counts match its bitmaps, and no block or inode waits in two
    /// pending lists or is pending yet free.
    pub fn check_counts(&self) -> Result<(), String> {
        let geo = self.geo;
        for (g, grp) in self.groups.iter().enumerate() {
            let len = geo.group_len(g as u32) as u64;
            let used = (0..len).filter(|&i| bit(&grp.bitmap, i)).count() as u64;
            if grp.hdr.free_blocks as u64 != len - used {
                return Err(format!(
                    "group {g}: {} free blocks counted, {} by the bitmap",
                    grp.hdr.free_blocks,
                    len - used
                ));
            }
            let ipg = geo.inodes_per_group as u64;
            let iused = (0..ipg).filter(|&i| bit(&grp.ibitmap, i)).count() as u64;
            if grp.hdr.free_inodes as u64 != ipg - iused {
                return Err(format!(
                    "group {g}: {} free inodes counted, {} by the bitmap",
                    grp.hdr.free_inodes,
                    ipg - iused
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for &(first, count) in self.all_pending_blocks() {
            for b in first..first + count {
                if !seen.insert(b) {
                    return Err(format!("block {b} pending twice"));
                }
                let g = geo.group_of_block(b);
                if !bit(&self.groups[g as usize].bitmap, b - geo.group_start(g)) {
                    return Err(format!("block {b} pending but already free"));
                }
            }
        }
        Ok(())
    }

    /// A commit starts: the frees its transaction shows are set apart from those made while
    /// it writes (which the next transaction shows).
    pub fn seal_pending(&mut self) {
        debug_assert!(
            self.pending_sealed_blocks.is_empty() && self.pending_sealed_inodes.is_empty()
        );
        self.pending_sealed_blocks = std::mem::take(&mut self.pending_blocks);
        self.pending_sealed_inodes = std::mem::take(&mut self.pending_inodes);
    }

    /// Called after a commit is durable: frees from before the previous commit become
    /// reusable; those this commit made durable wait for the next one; those made while it
    /// wrote wait for the next two. The on-disk bitmaps already show the first two kinds
    /// free, so no group becomes dirty here.
    pub fn release_pending(&mut self) {
        let blocks = std::mem::replace(
            &mut self.pending_prev_blocks,
            std::mem::take(&mut self.pending_sealed_blocks),
        );
        let inodes = std::mem::replace(
            &mut self.pending_prev_inodes,
            std::mem::take(&mut self.pending_sealed_inodes),
        );
        self.release(blocks, inodes);
    }

    fn release(&mut self, blocks: Vec<(u64, u64)>, inodes: Vec<u64>) {
        let geo = self.geo;
        for (first, count) in blocks {
            // Bit by bit, but the free-run index once per contiguous stretch freed.
            let mut run: Option<(u32, u64, u64)> = None; // (group, start, length)
            for b in first..first + count {
                let g = geo.group_of_block(b);
                let grp = &mut self.groups[g as usize];
                let i = b - geo.group_start(g);
                if bit(&grp.bitmap, i) {
                    set_bit(&mut grp.bitmap, i, false);
                    grp.block_hint = grp.block_hint.min(i);
                    grp.hdr.free_blocks += 1;
                    match &mut run {
                        Some((rg, rs, rl)) if *rg == g && *rs + *rl == i => *rl += 1,
                        _ => {
                            if let Some((rg, rs, rl)) = run.replace((g, i, 1)) {
                                self.groups[rg as usize].runs.free(rs, rl);
                            }
                        }
                    }
                } else {
                    log::error!("block {b} freed twice");
                }
            }
            if let Some((rg, rs, rl)) = run {
                self.groups[rg as usize].runs.free(rs, rl);
            }
        }
        for ino in inodes {
            let g = geo.group_of_inode(ino);
            let i = geo.inode_index_in_group(ino) as u64;
            let grp = &mut self.groups[g as usize];
            if bit(&grp.ibitmap, i) {
                set_bit(&mut grp.ibitmap, i, false);
                grp.inode_hint = grp.inode_hint.min(i);
                grp.hdr.free_inodes += 1;
            }
        }
    }

    /// Allocates an inode number, preferring group `pref`.
    pub fn alloc_inode(&mut self, pref: u32, is_dir: bool) -> Option<u64> {
        let geo = self.geo;
        for k in 0..geo.group_count {
            let g = (pref + k) % geo.group_count;
            let grp = &mut self.groups[g as usize];
            if grp.hdr.free_inodes == 0 {
                continue;
            }
            if let Some(i) = find_clear(&grp.ibitmap, grp.inode_hint, geo.inodes_per_group as u64) {
                grp.inode_hint = i + 1;
                set_bit(&mut grp.ibitmap, i, true);
                grp.hdr.free_inodes -= 1;
                if is_dir {
                    grp.hdr.dirs = grp.hdr.dirs.saturating_add(1); // a placement hint
                }
                grp.dirty = true;
                return Some(g as u64 * geo.inodes_per_group as u64 + i + 1);
            }
        }
        None
    }

    /// Group for a new directory (FFS dirpref): above-average free inodes, fewest directories.
    pub fn pick_dir_group(&self, parent_group: u32) -> u32 {
        let n = self.groups.len() as u64;
        let avg_inodes = self.free_inodes() / n.max(1);
        let avg_blocks = self.free_blocks() / n.max(1);
        let mut best: Option<(u32, u32)> = None;
        for (g, grp) in self.groups.iter().enumerate() {
            if (grp.hdr.free_inodes as u64) < avg_inodes.max(1)
                || (grp.hdr.free_blocks as u64) < avg_blocks
            {
                continue;
            }
            if best.is_none_or(|(_, d)| grp.hdr.dirs < d) {
                best = Some((g as u32, grp.hdr.dirs));
            }
        }
        best.map(|b| b.0).unwrap_or(parent_group)
    }

    pub fn note_dir_removed(&mut self, ino: u64) {
        let g = self.geo.group_of_inode(ino) as usize;
        self.groups[g].hdr.dirs = self.groups[g].hdr.dirs.saturating_sub(1);
        self.groups[g].dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn map_with(used: &[u64], len: u64) -> Vec<u8> {
        let mut m = vec![0u8; len.div_ceil(8) as usize + 8];
        for &u in used {
            set_bit(&mut m, u, true);
        }
        m
    }

    #[test]
    fn free_runs_follow_a_random_bitmap() {
        let len = 700;
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut map = map_with(&[], len);
        let mut runs = FreeRunIndex::build(&map, 3, len, 8);
        for i in 0..3 {
            set_bit(&mut map, i, true);
        }
        for step in 0..4000 {
            let at = rng.gen_range(3..len);
            let n = rng.gen_range(1..6).min(len - at);
            let all_free = (at..at + n).all(|i| !bit(&map, i));
            let all_used = (at..at + n).all(|i| bit(&map, i));
            if all_free {
                (at..at + n).for_each(|i| set_bit(&mut map, i, true));
                runs.allocate(at, n);
            } else if all_used {
                (at..at + n).for_each(|i| set_bit(&mut map, i, false));
                runs.free(at, n);
            }
            let want = FreeRunIndex::build(&map, 3, len, 8);
            assert_eq!(runs.extents(), want.extents(), "step {step}");
            assert_eq!(runs.by_len, want.by_len, "step {step}");
        }
    }

    #[test]
    fn find_prefers_a_whole_run_near_the_goal_then_the_largest_shorter_one() {
        // Free: [10,13) (3), [20,22) (2), [30,31) (1), [40,60) (20); N = 8.
        let len = 64;
        let used: Vec<u64> = (0..len)
            .filter(|i| {
                !((10..13).contains(i) || (20..22).contains(i) || *i == 30 || (40..60).contains(i))
            })
            .collect();
        let runs = FreeRunIndex::build(&map_with(&used, len), 0, len, 8);
        // Whole runs for 2 blocks at or after the goal, wrapping to the start.
        assert_eq!(runs.find(2, 0), Some((10, 3)));
        assert_eq!(runs.find(2, 11), Some((20, 2)));
        assert_eq!(runs.find(2, 21), Some((40, 20)));
        assert_eq!(runs.find(3, 61), Some((10, 3)));
        // 8 (N) only fits the big run; more than N asks for N.
        assert_eq!(runs.find(8, 0), Some((40, 20)));
        assert_eq!(runs.find(100, 45), Some((40, 20)));
        // One block asks for two (a single free block is not a co-write).
        assert_eq!(runs.find(1, 0), Some((10, 3)));
        // Without the big run: 5 blocks fall back to the largest shorter run, 3.
        let mut small = runs.clone();
        small.allocate(40, 20);
        assert_eq!(small.find(5, 0), Some((10, 3)));
        assert_eq!(small.find(5, 15), Some((10, 3)));
        small.allocate(10, 3);
        assert_eq!(small.find(5, 0), Some((20, 2)));
        small.allocate(20, 2);
        assert_eq!(small.find(5, 0), None, "only a single free block is left");
        // Freeing merges with both neighbours.
        small.free(20, 1);
        small.free(22, 8);
        small.free(21, 1);
        assert_eq!(small.extents(), vec![(20, 11)]);
    }
}
