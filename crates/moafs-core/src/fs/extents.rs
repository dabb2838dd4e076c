//! Extent maps in memory (FORMAT.md section 6a): the engine's part for files whose inode
//! has slot layout 2.
//!
//! A file's whole map is loaded once (its root from the inode, its tree blocks with one warm
//! round per level) into an [`ExtMap`]: runs of logical blocks by their first block. Lookups,
//! writes (`set`) and truncation work on the runs; the next commit packs them into the root
//! and tree blocks (`extent::pack`), reusing the file's tree blocks in order, allocating or
//! freeing the difference, and journals only the tree blocks whose bytes changed. Space for
//! tree blocks is promised at `write` as for indirect blocks: the worst case, each newly
//! promised block an extent of its own ([`Inner::reserve_extent_blocks`]).

use super::Inner;
use crate::error::{FsError, FsResult};
use crate::format::blockmap::{self, MapVisitor, Run};
use crate::format::extent::{pack, tree_blocks, ExtNode, Extent, MAX_EXTENT_LEN, ROOT_ENTRIES};
use std::collections::BTreeMap;

/// One file's extent map as the engine holds it.
#[derive(Debug, Default)]
pub(crate) struct ExtMap {
    /// Runs by first logical block: (first physical block, length). Runs never touch in both
    /// logical and physical order (they are merged) and never overlap.
    runs: BTreeMap<u64, (u64, u64)>,
    /// On-disk extents the runs make (a run longer than `MAX_EXTENT_LEN` makes several).
    extents: usize,
    /// The file's tree blocks and their bytes as the last commit wrote (or the load read)
    /// them, in `pack`'s order.
    tree: Vec<(u64, Vec<u8>)>,
    /// Changed since the last commit packed it.
    dirty: bool,
    /// A block lost or changed its mapping since the last commit packed it (a truncate, a
    /// remap): the map did not only grow (`grown.rs` then leaves the fsync to a commit).
    shrunk: bool,
    /// Data blocks promised to this file since the last commit, and the tree blocks
    /// promised for them (`reserve_extent_blocks`).
    promised: u64,
    tree_promised: u64,
}

fn pieces(len: u64) -> usize {
    len.div_ceil(MAX_EXTENT_LEN) as usize
}

impl ExtMap {
    fn insert_run(&mut self, logical: u64, physical: u64, len: u64) {
        self.extents += pieces(len);
        self.runs.insert(logical, (physical, len));
    }

    fn remove_run(&mut self, logical: u64) -> Option<(u64, u64)> {
        let r = self.runs.remove(&logical)?;
        self.extents -= pieces(r.1);
        Some(r)
    }

    /// The run holding logical block `idx`: (first logical, first physical, length).
    fn run_at(&self, idx: u64) -> Option<(u64, u64, u64)> {
        let (&l, &(p, n)) = self.runs.range(..=idx).next_back()?;
        (idx < l + n).then_some((l, p, n))
    }

    /// Physical block of logical block `idx`, 0 for a hole.
    pub(crate) fn get(&self, idx: u64) -> u64 {
        self.run_at(idx).map_or(0, |(l, p, _)| p + (idx - l))
    }

    /// Maps logical block `idx` to `phys` (splitting the run that held it elsewhere, merging
    /// with the runs around it).
    pub(crate) fn set(&mut self, idx: u64, phys: u64) {
        if let Some((l, p, n)) = self.run_at(idx) {
            if p + (idx - l) == phys {
                return;
            }
            self.shrunk = true;
            self.remove_run(l);
            if idx > l {
                self.insert_run(l, p, idx - l);
            }
            if idx + 1 < l + n {
                self.insert_run(idx + 1, p + (idx - l) + 1, l + n - idx - 1);
            }
        }
        self.dirty = true;
        let (mut first, mut start, mut len) = (idx, phys, 1);
        if let Some((l, p, n)) = self.run_at(idx.wrapping_sub(1)).filter(|_| idx > 0) {
            if p + n == phys {
                self.remove_run(l);
                (first, start, len) = (l, p, n + 1);
            }
        }
        if let Some(&(p, n)) = self.runs.get(&(idx + 1)) {
            if p == phys + 1 {
                self.remove_run(idx + 1);
                len += n;
            }
        }
        self.insert_run(first, start, len);
    }

    /// Unmaps logical blocks `from..`; the physical runs that were theirs.
    pub(crate) fn truncate(&mut self, from: u64) -> Vec<(u64, u64)> {
        let mut freed = Vec::new();
        if let Some((l, p, n)) = self.run_at(from).filter(|(l, _, _)| *l < from) {
            self.remove_run(l);
            self.insert_run(l, p, from - l);
            freed.push((p + (from - l), l + n - from));
        }
        let tail: Vec<u64> = self.runs.range(from..).map(|(l, _)| *l).collect();
        for l in tail {
            let (p, n) = self.remove_run(l).expect("listed above");
            freed.push((p, n));
        }
        if !freed.is_empty() {
            self.dirty = true;
            self.shrunk = true;
        }
        freed
    }

    /// Whether any block from `idx` on is mapped.
    pub(crate) fn maps_from(&self, idx: u64) -> bool {
        self.runs
            .last_key_value()
            .is_some_and(|(&l, &(_, n))| l + n > idx)
    }

    /// The runs in logical order.
    pub(crate) fn runs(&self) -> Vec<Run> {
        self.runs
            .iter()
            .map(|(&logical, &(physical, len))| Run {
                logical,
                physical,
                len,
            })
            .collect()
    }

    /// The on-disk extents, in logical order.
    fn extent_list(&self) -> Vec<Extent> {
        let mut out = Vec::with_capacity(self.extents);
        for (&l, &(p, n)) in &self.runs {
            let mut k = 0;
            while k < n {
                let len = (n - k).min(MAX_EXTENT_LEN);
                out.push(Extent {
                    logical: l + k,
                    len,
                    physical: p + k,
                });
                k += len;
            }
        }
        out
    }

    /// Not packed since it changed.
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Tree blocks promised for the next commit.
    pub(crate) fn tree_promised(&self) -> u64 {
        self.tree_promised
    }

    /// The next commit kept the promises (it packed the map, or found no need to).
    pub(crate) fn promises_kept(&mut self) {
        self.promised = 0;
        self.tree_promised = 0;
    }

    /// The map has no tree blocks and would still fit in the inode with `more` extents
    /// (the byte log's slot records carry the root only: `bytelog.rs`).
    pub(crate) fn in_root_with(&self, more: usize) -> bool {
        self.tree.is_empty() && self.extents + more <= ROOT_ENTRIES
    }

    /// Every block mapped when the last commit packed the map, or mapped since, is still
    /// mapped where it was (nothing was truncated or remapped since).
    pub(crate) fn only_grew(&self) -> bool {
        !self.shrunk
    }

    /// Logical blocks `logical .. logical + len` map to `physical ..` (an extent of an
    /// earlier image of the map is still there, unchanged).
    pub(crate) fn covers(&self, logical: u64, physical: u64, len: u64) -> bool {
        self.run_at(logical)
            .is_some_and(|(l, p, n)| p + (logical - l) == physical && logical + len <= l + n)
    }

    /// The root the next commit would pack, when the map fits in the inode.
    pub(crate) fn root_image(&self) -> Option<ExtNode> {
        self.in_root_with(0)
            .then(|| ExtNode::Leaf(self.extent_list()))
    }

    /// Mapped blocks (data only).
    #[cfg(test)]
    fn mapped(&self) -> u64 {
        self.runs.values().map(|r| r.1).sum()
    }
}

/// What a commit did to one file's tree: blocks allocated and freed.
struct Repacked {
    pub root: ExtNode,
    pub allocated: u64,
    pub freed: Vec<u64>,
    /// Tree blocks whose bytes changed, to journal.
    pub write: Vec<(u64, Vec<u8>)>,
}

impl Inner {
    /// Whether `ino` (in memory) maps its blocks by extents.
    pub(crate) fn has_extents(&self, ino: u64) -> bool {
        self.inodes.get(&ino).is_some_and(|n| n.d.extents.is_some())
    }

    /// The extent map of `ino`, loaded on first use (every tree block; those a warm pass
    /// misses are all noted before it fails, so one round reads a level).
    pub(crate) fn ext_map(&mut self, ino: u64) -> FsResult<&mut ExtMap> {
        let node = self.inode(ino)?;
        if node.ext.is_none() {
            let d = node.d.clone();
            if d.extents.is_none() {
                return Err(FsError::corrupt("inode", ino, "not an extent map"));
            }
            let map = self.load_ext_map(&d)?;
            self.inode(ino)?.ext = Some(Box::new(map));
        }
        // (`inode` recorded the touch: one more lookup, no second one)
        let node = self.inodes.get_mut(&ino).expect("looked up above");
        Ok(node.ext.as_mut().expect("loaded above"))
    }

    fn load_ext_map(&mut self, d: &crate::format::DiskInode) -> FsResult<ExtMap> {
        struct Load<'a> {
            inner: &'a mut Inner,
            map: ExtMap,
            /// Tree blocks met: (depth, number, bytes).
            tree: Vec<(u16, u64, Vec<u8>)>,
            missed: Option<FsError>,
        }
        impl MapVisitor for Load<'_> {
            fn indirect(&mut self, blk: u64, _: usize) -> FsResult<Option<Vec<u32>>> {
                Err(FsError::corrupt("inode", blk, "pointers in an extent map"))
            }
            fn extent_block(&mut self, blk: u64, depth: u16) -> FsResult<Option<ExtNode>> {
                let mut buf = vec![0u8; self.inner.bs()];
                if let Err(e) = self.inner.read_block(blk, &mut buf) {
                    // a warm pass notes every miss of this level before failing
                    if matches!(e, FsError::WouldRead) {
                        self.missed.get_or_insert(e);
                        return Ok(None);
                    }
                    return Err(e);
                }
                let node = ExtNode::decode_block(&buf, blk, &self.inner.bounds())?;
                self.tree.push((depth, blk, buf));
                Ok(Some(node))
            }
            fn data(&mut self, _: u64, _: u64) {} // extent maps are told extents
            fn extent(&mut self, e: &Extent) {
                // adjacent on-disk extents (a long run split at MAX_EXTENT_LEN) merge back
                let merge = self
                    .map
                    .runs
                    .iter()
                    .next_back()
                    .filter(|(&l, &(p, n))| l + n == e.logical && p + n == e.physical)
                    .map(|(&l, &r)| (l, r));
                match merge {
                    Some((l, (p, n))) => {
                        self.map.remove_run(l);
                        self.map.insert_run(l, p, n + e.len);
                    }
                    None => self.map.insert_run(e.logical, e.physical, e.len),
                }
            }
        }
        let bs = self.alloc.geo.block_size;
        let mut v = Load {
            inner: self,
            map: ExtMap::default(),
            tree: Vec::new(),
            missed: None,
        };
        blockmap::walk(d, bs, &mut v)?;
        if let Some(e) = v.missed {
            return Err(e);
        }
        // The walk meets tree blocks depth first, so each level in logical order; `pack`
        // numbers them top level first.
        v.tree.sort_by_key(|t| std::cmp::Reverse(t.0));
        let mut map = v.map;
        map.tree = v.tree.into_iter().map(|(_, b, bytes)| (b, bytes)).collect();
        Ok(map)
    }

    /// Promises the tree blocks the next commit may need for `n` more blocks of `ino`: the
    /// worst case, each of them an extent of its own. Returns the blocks promised now.
    pub(crate) fn extent_blocks_to_promise(&mut self, ino: u64, n: u64) -> FsResult<u64> {
        let bs = self.alloc.geo.block_size;
        let map = self.ext_map(ino)?;
        map.promised += n;
        let worst = map.extents as u64 + map.promised;
        let need = (tree_blocks(worst as usize, bs) as u64).saturating_sub(map.tree.len() as u64);
        Ok(need.saturating_sub(map.tree_promised))
    }

    /// Tree blocks the next commit will add to `ino` for its promised blocks (what `stat`
    /// counts ahead, as for indirect blocks), as the allocator would place them now: a
    /// logical run of them after a mapped block goes right after that block's physical
    /// one as far as those blocks are free (extending its extent), the rest in one more
    /// run; a run after a hole in one run.
    pub(crate) fn pending_tree_blocks(&mut self, ino: u64) -> FsResult<u64> {
        let bs = self.alloc.geo.block_size;
        let reserved: Vec<u64> = self.inode(ino)?.cache.reserved_blocks().collect();
        self.ext_map(ino)?;
        let map = self.inodes[&ino].ext.as_ref().expect("loaded above");
        let mut runs: Vec<(u64, u64)> = Vec::new(); // (first, len), ascending
        for i in reserved {
            match runs.last_mut() {
                Some((f, n)) if *f + *n == i => *n += 1,
                _ => runs.push((i, 1)),
            }
        }
        let mut extents = map.extents;
        for (f, n) in runs {
            match f.checked_sub(1).and_then(|b| map.run_at(b)) {
                Some((l, p, len)) if l + len == f => {
                    let k = self.alloc.free_at(p + len, n);
                    extents = extents + pieces(len + k) - pieces(len);
                    if k < n {
                        extents += pieces(n - k);
                    }
                }
                _ => extents += pieces(n),
            }
        }
        let after = tree_blocks(extents, bs);
        Ok((after as u64).saturating_sub(map.tree.len() as u64))
    }

    /// `n` tree blocks were promised to `ino` (after [`Self::extent_blocks_to_promise`]).
    pub(crate) fn note_extent_promise(&mut self, ino: u64, n: u64) -> FsResult<()> {
        self.ext_map(ino)?.tree_promised += n;
        Ok(())
    }

    /// Undoes [`Self::extent_blocks_to_promise`]'s count of `n` blocks (the promise failed).
    pub(crate) fn forget_extent_promise(&mut self, ino: u64, n: u64) {
        if let Some(m) = self.inodes.get_mut(&ino).and_then(|x| x.ext.as_mut()) {
            m.promised = m.promised.saturating_sub(n);
        }
    }

    /// Frees every block of the extent-mapped `ino` from logical block `from` on; with
    /// nothing left mapped, its tree blocks too.
    pub(crate) fn free_extents_from(&mut self, ino: u64, from: u64) -> FsResult<()> {
        let map = self.ext_map(ino)?;
        let freed = map.truncate(from);
        let tree: Vec<u64> = if map.runs.is_empty() {
            map.tree.drain(..).map(|t| t.0).collect()
        } else {
            Vec::new()
        };
        let mut n = 0;
        for (p, len) in freed {
            self.alloc.free_later(p, len);
            n += len;
        }
        for &b in &tree {
            self.alloc.free_later(b, 1);
        }
        let node = self.inode(ino)?;
        if !tree.is_empty() {
            node.d.extents = Some(ExtNode::default());
        }
        node.d.blocks = node.d.blocks.saturating_sub(n + tree.len() as u64);
        node.dirty = true;
        Ok(())
    }

    /// After a commit kept every metadata promise: the tree blocks still owed to the
    /// extent-mapped files among `inos` that keep reserved (unplaced) data, promised again
    /// against their maps as the commit left them. Returns how many.
    pub(crate) fn carry_extent_promises(&mut self, inos: &[u64]) -> u64 {
        let bs = self.alloc.geo.block_size;
        let mut total = 0;
        for ino in inos {
            let Some(n) = self.inodes.get_mut(ino) else {
                continue;
            };
            let reserved = n.cache.reserved_count();
            let Some(map) = n.ext.as_mut() else {
                continue;
            };
            map.promised = reserved;
            let worst = map.extents + reserved as usize;
            let need = (tree_blocks(worst, bs) as u64).saturating_sub(map.tree.len() as u64);
            map.tree_promised = need;
            total += need;
        }
        total
    }

    /// Packs the changed extent maps among `inos` (a commit's touched inodes): their roots
    /// go into their inodes, their changed tree blocks into the transaction.
    pub(crate) fn write_extent_maps(&mut self, inos: &[u64]) -> FsResult<()> {
        for &ino in inos {
            let Some(r) = self.repack_extents(ino)? else {
                continue;
            };
            for &b in &r.freed {
                self.alloc.free_later(b, 1);
            }
            self.building.add(r.write);
            let node = self.inodes.get_mut(&ino).expect("repacked above");
            node.d.extents = Some(r.root);
            node.d.blocks = (node.d.blocks + r.allocated).saturating_sub(r.freed.len() as u64);
            node.dirty = true;
        }
        Ok(())
    }

    /// Packs the changed extent map of `ino` for the commit: the root for its inode, tree
    /// blocks reused in order, allocated near the file's first block, or freed.
    fn repack_extents(&mut self, ino: u64) -> FsResult<Option<Repacked>> {
        let bs = self.alloc.geo.block_size;
        let Some(map) = self.inodes.get_mut(&ino).and_then(|n| n.ext.as_mut()) else {
            return Ok(None);
        };
        map.promises_kept();
        if !map.dirty {
            return Ok(None);
        }
        let extents = map.extent_list();
        let need = tree_blocks(extents.len(), bs);
        let goal = map.runs.values().next().map_or(0, |r| r.0);
        let mut numbers: Vec<u64> = map.tree.iter().take(need).map(|t| t.0).collect();
        let freed: Vec<u64> = map.tree.iter().skip(need).map(|t| t.0).collect();
        // Allocate first: a map is changed only once its new blocks are there.
        let missing = (need - numbers.len()) as u64;
        if missing > self.alloc.free_blocks() {
            return Err(FsError::NoSpace);
        }
        let mut allocated = 0;
        while allocated < missing {
            let (b, got) = self
                .alloc
                .alloc_blocks(goal, missing - allocated)
                .ok_or(FsError::NoSpace)?;
            numbers.extend(b..b + got);
            allocated += got;
        }
        let map = self.inodes.get_mut(&ino).and_then(|n| n.ext.as_mut());
        let map = map.expect("looked up above");
        map.dirty = false;
        map.shrunk = false;
        let old: Vec<(u64, Vec<u8>)> = std::mem::take(&mut map.tree);
        let packed = pack(&extents, bs, |i| numbers[i]);
        let mut write = Vec::new();
        let mut tree = Vec::with_capacity(need);
        for (i, node) in packed.blocks.iter().enumerate() {
            let bytes = node.encode_block(numbers[i], bs);
            if old.get(i).is_none_or(|o| o.0 != numbers[i] || o.1 != bytes) {
                write.push((numbers[i], bytes.clone()));
            }
            tree.push((numbers[i], bytes));
        }
        let map = self.inodes.get_mut(&ino).and_then(|n| n.ext.as_mut());
        map.expect("looked up above").tree = tree;
        Ok(Some(Repacked {
            root: packed.root,
            allocated,
            freed,
            write,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_get(m: &BTreeMap<u64, u64>, i: u64) -> u64 {
        m.get(&i).copied().unwrap_or(0)
    }

    #[test]
    fn set_and_truncate_agree_with_a_block_by_block_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..50 {
            let mut m = ExtMap::default();
            let mut model = BTreeMap::new();
            for _ in 0..300 {
                let idx = rng.gen_range(0..200u64);
                if rng.gen_ratio(1, 30) {
                    m.truncate(idx);
                    model.retain(|&k, _| k < idx);
                } else {
                    // mostly sequential physical placement, so runs merge
                    let phys = if rng.gen_bool(0.7) {
                        1000 + idx
                    } else {
                        rng.gen_range(1..5000)
                    };
                    m.set(idx, phys);
                    model.insert(idx, phys);
                }
                for i in 0..210 {
                    assert_eq!(m.get(i), model_get(&model, i), "block {i}");
                }
                assert_eq!(m.mapped(), model.len() as u64);
                let count: usize = m.runs.values().map(|r| pieces(r.1)).sum();
                assert_eq!(m.extents, count);
                // runs are maximal: no two touch in both orders
                let rs = m.runs();
                assert!(rs
                    .windows(2)
                    .all(|w| !(w[0].logical + w[0].len == w[1].logical
                        && w[0].physical + w[0].len == w[1].physical)));
            }
        }
    }

    #[test]
    fn a_long_run_is_stored_as_extents_of_at_most_the_longest_length() {
        let mut m = ExtMap::default();
        for i in 0..(MAX_EXTENT_LEN * 2 + 5) {
            m.set(i, 10_000 + i);
        }
        assert_eq!(m.runs().len(), 1);
        let es = m.extent_list();
        assert_eq!(es.len(), 3);
        assert_eq!(m.extents, 3);
        assert!(es.iter().all(|e| e.len <= MAX_EXTENT_LEN));
        assert_eq!(es[2].logical, 2 * MAX_EXTENT_LEN);
        assert_eq!(es[2].physical, 10_000 + 2 * MAX_EXTENT_LEN);
    }
}
