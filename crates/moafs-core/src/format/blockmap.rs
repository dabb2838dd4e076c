//! A file's block map (FORMAT.md section 5, inodes): `N_DIRECT` direct pointers, then a single, a
//! double and a triple indirect tree whose pointer blocks hold `ptrs_per_block` pointers
//! each (the last word is the block's checksum). Where a logical block hangs ([`bpath`]),
//! how many blocks a map can hold (`super::pointer_map_blocks`), and the walk that every reader of a
//! whole map goes through ([`walk`], [`runs`]): the engine, fsck and the fuzzing helpers.
//!
//! The walk reads nothing itself: its [`MapVisitor`] supplies each indirect block's pointers
//! (from the device, from the engine's cache, or not at all to skip a subtree) and is told
//! every mapped block, in logical order.

use super::extent::{ExtNode, Extent};
use super::{ptrs_per_block, DiskInode, N_DIRECT};
use crate::error::{FsError, FsResult};

/// Where logical block `idx` hangs: a direct slot, or a root pointer (`level` 0: single,
/// 1: double, 2: triple) and the offsets of the path below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BPath {
    Direct(usize),
    Indirect { level: usize, offsets: Vec<usize> },
}

/// Where logical block `idx` hangs (None: beyond the triple indirect tree).
pub fn bpath(idx: u64, block_size: u32) -> Option<BPath> {
    let p = ptrs_per_block(block_size);
    if idx < N_DIRECT as u64 {
        return Some(BPath::Direct(idx as usize));
    }
    let mut rest = idx - N_DIRECT as u64;
    let mut span = p;
    for level in 0..3 {
        if rest < span {
            let mut offsets = vec![0usize; level + 1];
            let mut r = rest;
            for o in offsets.iter_mut().rev() {
                *o = (r % p) as usize;
                r /= p;
            }
            return Some(BPath::Indirect { level, offsets });
        }
        rest -= span;
        span *= p;
    }
    None
}

/// `len` logical blocks from `logical`, stored at the physical blocks from `physical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
}

/// What a walk of a map reads and whom it tells.
pub trait MapVisitor {
    /// The pointers of indirect block `blk` at `level` (0: they point at data blocks), or
    /// `None` to skip what hangs below it (unreadable, damaged, seen before, not wanted).
    fn indirect(&mut self, blk: u64, level: usize) -> FsResult<Option<Vec<u32>>>;
    /// Extent-tree block `blk`, decoded (its depth should be `depth`: the walk checks), or
    /// `None` to skip what hangs below it.
    fn extent_block(&mut self, blk: u64, depth: u16) -> FsResult<Option<ExtNode>>;
    /// Logical block `logical` is stored at `physical` (never 0: holes are not told).
    fn data(&mut self, logical: u64, physical: u64);
    /// An extent: each of its blocks is told to [`MapVisitor::data`] unless overridden.
    fn extent(&mut self, e: &Extent) {
        for k in 0..e.len {
            self.data(e.logical + k, e.physical + k);
        }
    }
}

/// Walks the map of `d` in logical order: the direct pointers, then each indirect tree; or
/// the extent tree (a child whose depth or logical range does not fit its index entry is
/// corrupt).
pub fn walk(d: &DiskInode, block_size: u32, v: &mut impl MapVisitor) -> FsResult<()> {
    if let Some(root) = &d.extents {
        let hi = super::extent::max_file_blocks(block_size);
        return walk_extents(v, root, 0, hi, None);
    }
    for (i, &p) in d.direct.iter().enumerate() {
        if p != 0 {
            v.data(i as u64, p as u64);
        }
    }
    let p = ptrs_per_block(block_size);
    let mut base = N_DIRECT as u64;
    let mut span = p;
    for (level, &root) in d.indirect.iter().enumerate() {
        if root != 0 {
            walk_tree(v, root as u64, level, base, span / p, p)?;
        }
        base += span;
        span *= p;
    }
    Ok(())
}

/// Walks the extent node `node` (tree block `own`, or the root), whose entries must lie in
/// logical blocks `lo..hi`.
fn walk_extents(
    v: &mut impl MapVisitor,
    node: &ExtNode,
    lo: u64,
    hi: u64,
    own: Option<u64>,
) -> FsResult<()> {
    let bad = |d: String| match own {
        Some(b) => FsError::corrupt("extent-tree block", b, d),
        None => FsError::corrupt("inode", 0, d),
    };
    match node {
        ExtNode::Leaf(es) => {
            for e in es {
                if e.logical < lo || e.logical + e.len > hi {
                    return Err(bad(format!(
                        "extent {}+{} outside its index entry's {lo}..{hi}",
                        e.logical, e.len
                    )));
                }
                v.extent(e);
            }
        }
        ExtNode::Index { depth, entries } => {
            for (i, x) in entries.iter().enumerate() {
                let next = entries.get(i + 1).map_or(hi, |n| n.logical);
                if x.logical < lo || next > hi {
                    return Err(bad(format!(
                        "index entry at {} outside {lo}..{hi}",
                        x.logical
                    )));
                }
                let Some(child) = v.extent_block(x.child, depth - 1)? else {
                    continue;
                };
                if child.depth() + 1 != *depth {
                    return Err(FsError::corrupt(
                        "extent-tree block",
                        x.child,
                        format!("depth {} below an index of depth {depth}", child.depth()),
                    ));
                }
                walk_extents(v, &child, x.logical, next, Some(x.child))?;
            }
        }
    }
    Ok(())
}

/// Walks the tree below `blk` (at `level`), whose first logical block is `base` and whose
/// children each cover `child_span` logical blocks.
fn walk_tree(
    v: &mut impl MapVisitor,
    blk: u64,
    level: usize,
    base: u64,
    child_span: u64,
    per_block: u64,
) -> FsResult<()> {
    let Some(ptrs) = v.indirect(blk, level)? else {
        return Ok(());
    };
    for (i, &c) in ptrs.iter().enumerate().filter(|(_, c)| **c != 0) {
        let lo = base + i as u64 * child_span;
        if level == 0 {
            v.data(lo, c as u64);
        } else {
            walk_tree(
                v,
                c as u64,
                level - 1,
                lo,
                child_span / per_block,
                per_block,
            )?;
        }
    }
    Ok(())
}

/// The map of `d` as runs in logical order (consecutive logical blocks at consecutive
/// physical blocks make one run); `pointers` gives an indirect block's pointers and
/// `extent_block` an extent-tree block (`None`: what hangs below it is left out).
pub fn runs(
    d: &DiskInode,
    block_size: u32,
    pointers: impl FnMut(u64) -> FsResult<Option<Vec<u32>>>,
    extent_block: impl FnMut(u64) -> FsResult<Option<ExtNode>>,
) -> FsResult<Vec<Run>> {
    struct Collect<F, G> {
        pointers: F,
        extent_block: G,
        runs: Vec<Run>,
    }
    impl<F, G> Collect<F, G> {
        fn add(&mut self, logical: u64, physical: u64, len: u64) {
            match self.runs.last_mut() {
                Some(r) if r.logical + r.len == logical && r.physical + r.len == physical => {
                    r.len += len
                }
                _ => self.runs.push(Run {
                    logical,
                    physical,
                    len,
                }),
            }
        }
    }
    impl<F, G> MapVisitor for Collect<F, G>
    where
        F: FnMut(u64) -> FsResult<Option<Vec<u32>>>,
        G: FnMut(u64) -> FsResult<Option<ExtNode>>,
    {
        fn indirect(&mut self, blk: u64, _level: usize) -> FsResult<Option<Vec<u32>>> {
            (self.pointers)(blk)
        }
        fn extent_block(&mut self, blk: u64, _depth: u16) -> FsResult<Option<ExtNode>> {
            (self.extent_block)(blk)
        }
        fn data(&mut self, logical: u64, physical: u64) {
            self.add(logical, physical, 1)
        }
        fn extent(&mut self, e: &Extent) {
            self.add(e.logical, e.physical, e.len)
        }
    }
    let mut c = Collect {
        pointers,
        extent_block,
        runs: Vec::new(),
    };
    walk(d, block_size, &mut c)?;
    Ok(c.runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Pointer blocks by address.
    type Blocks = HashMap<u64, Vec<u32>>;

    /// A map with blocks in the direct slots and the single and double trees, its pointer
    /// blocks, and every (logical, physical) it maps.
    fn sample(bs: u32) -> (DiskInode, Blocks, Vec<(u64, u64)>) {
        let p = ptrs_per_block(bs) as usize;
        let mut d = DiskInode::default();
        let mut blocks = HashMap::new();
        let mut want = Vec::new();
        // direct 0..3 contiguous at 100.., a hole, direct 5 at 200
        for i in 0..3 {
            d.direct[i] = 100 + i as u32;
            want.push((i as u64, 100 + i as u64));
        }
        d.direct[5] = 200;
        want.push((5, 200));
        // single indirect at 10: its first two pointers continue at 300, 301
        let mut single = vec![0u32; p];
        single[0] = 300;
        single[1] = 301;
        blocks.insert(10, single);
        d.indirect[0] = 10;
        want.push((N_DIRECT as u64, 300));
        want.push((N_DIRECT as u64 + 1, 301));
        // double indirect at 20 -> [_, 21] -> [.., 400 at 7]
        let mut dbl = vec![0u32; p];
        dbl[1] = 21;
        let mut leaf = vec![0u32; p];
        leaf[7] = 400;
        blocks.insert(20, dbl);
        blocks.insert(21, leaf);
        d.indirect[1] = 20;
        let logical = N_DIRECT as u64 + p as u64 + p as u64 + 7;
        want.push((logical, 400));
        (d, blocks, want)
    }

    #[test]
    fn every_mapped_block_once_in_logical_order_and_each_where_bpath_says() {
        for bs in [4096, 16384] {
            let (d, blocks, want) = sample(bs);
            struct All<'a>(
                &'a HashMap<u64, Vec<u32>>,
                Vec<(u64, u64)>,
                Vec<(u64, usize)>,
            );
            impl MapVisitor for All<'_> {
                fn indirect(&mut self, blk: u64, level: usize) -> FsResult<Option<Vec<u32>>> {
                    self.2.push((blk, level));
                    Ok(self.0.get(&blk).cloned())
                }
                fn extent_block(&mut self, _: u64, _: u16) -> FsResult<Option<ExtNode>> {
                    unreachable!("a pointer map")
                }
                fn data(&mut self, l: u64, p: u64) {
                    self.1.push((l, p));
                }
            }
            let mut v = All(&blocks, Vec::new(), Vec::new());
            walk(&d, bs, &mut v).unwrap();
            assert_eq!(v.1, want, "block size {bs}");
            assert_eq!(v.2, vec![(10, 0), (20, 1), (21, 0)]);
            // bpath leads to the same block for every mapped one
            for &(l, phys) in &want {
                let found = match bpath(l, bs).unwrap() {
                    BPath::Direct(i) => d.direct[i] as u64,
                    BPath::Indirect { level, offsets } => {
                        let mut b = d.indirect[level] as u64;
                        for o in offsets {
                            b = blocks[&b][o] as u64;
                        }
                        b
                    }
                };
                assert_eq!(found, phys, "logical {l}");
            }
        }
    }

    #[test]
    fn runs_merge_what_is_contiguous_and_skipped_subtrees_are_left_out() {
        let (d, blocks, _) = sample(4096);
        let none = |_| Ok(None);
        let r = runs(&d, 4096, |b| Ok(blocks.get(&b).cloned()), none).unwrap();
        let n = N_DIRECT as u64;
        let p = ptrs_per_block(4096);
        let run = |logical, physical, len| Run {
            logical,
            physical,
            len,
        };
        assert_eq!(
            r,
            vec![
                run(0, 100, 3),
                run(5, 200, 1),
                run(n, 300, 2),
                run(n + 2 * p + 7, 400, 1)
            ]
        );
        // the double tree skipped: only what the direct and single pointers map
        let r = runs(
            &d,
            4096,
            |b| Ok((b != 20).then(|| blocks[&b].clone())),
            none,
        )
        .unwrap();
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn an_extent_tree_walks_in_order_and_a_misplaced_child_is_corrupt() {
        use crate::format::extent::{pack, ExtIndex};
        let es: Vec<Extent> = (0..1000u64)
            .map(|i| Extent {
                logical: i * 3,
                len: 2,
                physical: 10_000 + i * 5,
            })
            .collect();
        let p = pack(&es, 4096, |i| 500 + i as u64);
        let d = DiskInode {
            extents: Some(p.root.clone()),
            ..Default::default()
        };
        let blocks = p.blocks.clone();
        let child = |b: u64| Ok(blocks.get((b - 500) as usize).cloned());
        let r = runs(&d, 4096, |_| unreachable!(), child).unwrap();
        let want: Vec<Run> = es
            .iter()
            .map(|e| Run {
                logical: e.logical,
                physical: e.physical,
                len: e.len,
            })
            .collect();
        assert_eq!(r, want);
        // an index entry that claims a later start than its child's first extent
        let ExtNode::Index { depth, mut entries } = p.root.clone() else {
            panic!("1000 extents need tree blocks")
        };
        entries[0] = ExtIndex {
            logical: 1,
            ..entries[0]
        };
        let d = DiskInode {
            extents: Some(ExtNode::Index { depth, entries }),
            ..Default::default()
        };
        let child = |b: u64| Ok(blocks.get((b - 500) as usize).cloned());
        assert!(runs(&d, 4096, |_| unreachable!(), child).is_err());
    }

    #[test]
    fn bpath_ends_where_the_triple_tree_does() {
        for bs in [4096, 16384] {
            let max = crate::format::pointer_map_blocks(bs);
            assert!(bpath(max - 1, bs).is_some());
            assert_eq!(bpath(max, bs), None);
            assert_eq!(
                bpath(N_DIRECT as u64 - 1, bs),
                Some(BPath::Direct(N_DIRECT - 1))
            );
            assert_eq!(
                bpath(N_DIRECT as u64, bs),
                Some(BPath::Indirect {
                    level: 0,
                    offsets: vec![0]
                })
            );
        }
    }
}
