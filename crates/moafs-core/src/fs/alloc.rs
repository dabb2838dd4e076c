//! Allocation groups: block and inode bitmaps, kept in memory while mounted.
//!
//! Blocks freed by an operation are not reusable at once: they go to a pending list and become
//! free only after the commit that makes the new pointers durable (see `Fs::commit`). Otherwise
//! a crash could leave an old, still-durable pointer aimed at a block that already holds another
//! file's data.

use crate::format::{Geometry, GroupHeader};

pub(crate) struct Group {
    pub hdr: GroupHeader,
    pub bitmap: Vec<u8>,
    pub ibitmap: Vec<u8>,
    pub dirty: bool,
    /// No free inode below this index (a search hint; lowered when an inode is freed).
    pub inode_hint: u64,
    /// No free block below this group-relative index (a search hint; lowered on free).
    pub block_hint: u64,
}

pub(crate) fn bit(map: &[u8], i: u64) -> bool {
    map[(i / 8) as usize] & (1 << (i % 8)) != 0
}

pub(crate) fn set_bit(map: &mut [u8], i: u64, v: bool) {
    let byte = &mut map[(i / 8) as usize];
    if v {
        *byte |= 1 << (i % 8);
    } else {
        *byte &= !(1 << (i % 8));
    }
}

/// First clear bit in `[from, to)`, skipping full 64-bit words and full bytes quickly.
pub(crate) fn find_clear(map: &[u8], from: u64, to: u64) -> Option<u64> {
    let mut i = from;
    while i < to {
        if i.is_multiple_of(64) && i + 64 <= to {
            let at = (i / 8) as usize;
            let word = u64::from_le_bytes(map[at..at + 8].try_into().unwrap_or([0; 8]));
            if word == u64::MAX {
                i += 64;
                continue;
            }
            return Some(i + word.trailing_ones() as u64);
        }
        if i.is_multiple_of(8) && map[(i / 8) as usize] == 0xff {
            i += 8;
            continue;
        }
        if !bit(map, i) {
            return Some(i);
        }
        i += 1;
    }
    None
}

pub(crate) struct Allocator {
    pub geo: Geometry,
    pub groups: Vec<Group>,
    /// Blocks freed since the last commit: (first block, count).
    pub pending_blocks: Vec<(u64, u64)>,
    /// Inodes freed since the last commit.
    pub pending_inodes: Vec<u64>,
}

impl Allocator {
    pub fn free_blocks(&self) -> u64 {
        self.groups.iter().map(|g| g.hdr.free_blocks as u64).sum()
    }
    pub fn free_inodes(&self) -> u64 {
        self.groups.iter().map(|g| g.hdr.free_inodes as u64).sum()
    }
    pub fn pending_block_count(&self) -> u64 {
        self.pending_blocks.iter().map(|p| p.1).sum()
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
        Some((self.geo.group_start(g) + first, n))
    }

    /// Queues blocks for freeing at the next commit.
    pub fn free_later(&mut self, first: u64, count: u64) {
        if let Some(last) = self.pending_blocks.last_mut() {
            if last.0 + last.1 == first {
                last.1 += count;
                return;
            }
        }
        self.pending_blocks.push((first, count));
    }

    /// Makes pending frees real (called after a commit is durable).
    pub fn release_pending(&mut self) {
        let geo = self.geo;
        for (first, count) in std::mem::take(&mut self.pending_blocks) {
            for b in first..first + count {
                let g = geo.group_of_block(b);
                let grp = &mut self.groups[g as usize];
                let i = b - geo.group_start(g);
                if bit(&grp.bitmap, i) {
                    set_bit(&mut grp.bitmap, i, false);
                    grp.block_hint = grp.block_hint.min(i);
                    grp.hdr.free_blocks += 1;
                    grp.dirty = true;
                } else {
                    log::error!("block {b} freed twice");
                }
            }
        }
        for ino in std::mem::take(&mut self.pending_inodes) {
            let g = geo.group_of_inode(ino);
            let i = geo.inode_index_in_group(ino) as u64;
            let grp = &mut self.groups[g as usize];
            if bit(&grp.ibitmap, i) {
                set_bit(&mut grp.ibitmap, i, false);
                grp.inode_hint = grp.inode_hint.min(i);
                grp.hdr.free_inodes += 1;
                grp.dirty = true;
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
                    grp.hdr.dirs += 1;
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
