//! Extent maps (FORMAT.md section 6a, version 3): a file's blocks as runs of consecutive
//! logical blocks at consecutive physical blocks, in a tree whose root is 64 bytes of the
//! inode slot and whose other nodes are extent-tree blocks. This module encodes and decodes
//! one node (root or block) and checks the decode-time rules; walking the tree is
//! `blockmap::walk`, building one from a map is [`pack`].

use super::{get_u16, get_u32, put_u16, put_u32, seal, verify, Bounds};
use crate::error::{FsError, FsResult};

/// The root's magic (inode bytes 96..98).
pub const ROOT_MAGIC: u16 = 0xE3F4;
/// An extent-tree block's magic (bytes 0..2).
pub const BLOCK_MAGIC: u16 = 0xE3F5;
/// Entries the root holds: 4 in inode bytes 104..152, 6 more in bytes 172..244.
pub const ROOT_ENTRIES: usize = 10;
/// The longest extent, in blocks.
pub const MAX_EXTENT_LEN: u64 = 32768;
/// The deepest root.
pub const MAX_DEPTH: u16 = 4;
/// Block numbers in an extent map are 48-bit.
pub const PHYS_LIMIT: u64 = 1 << 48;
/// Logical block numbers are 32-bit: an extent-mapped file has fewer blocks than this.
pub const LOGICAL_LIMIT: u64 = 1 << 32;

/// The most logical blocks an extent-mapped file of `block_size` blocks holds: the pointer
/// map's limit (FORMAT.md section 5) or 2^32 blocks, the smaller (16 KiB blocks: 64 TiB).
pub fn max_file_blocks(block_size: u32) -> u64 {
    super::pointer_map_blocks(block_size).min(LOGICAL_LIMIT)
}
/// Where the root starts in an inode slot: its header and first 4 entries (bytes 96..152),
/// then its other 6 entries (bytes 172..244); bytes 152..160 and 244..252 are zero.
pub const ROOT_AT: usize = 96;
const ROOT_REST_AT: usize = 172;
const HEADER: usize = 8;
const ENTRY: usize = 12;
/// The root as one buffer: header and `ROOT_ENTRIES` entries.
const ROOT_BYTES: usize = HEADER + ROOT_ENTRIES * ENTRY;
/// Of them, the bytes at `ROOT_AT` (header and 4 entries).
const ROOT_FIRST: usize = HEADER + 4 * ENTRY;

/// Entries an extent-tree block of `block_size` holds.
pub fn block_capacity(block_size: u32) -> usize {
    (block_size as usize - HEADER - 4) / ENTRY
}

/// `len` logical blocks from `logical`, stored from physical block `physical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub len: u64,
    pub physical: u64,
}

/// An index entry: the tree block `child` holds what is mapped from `logical` on (up to the
/// next entry's `logical`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtIndex {
    pub logical: u64,
    pub child: u64,
}

/// One node of an extent tree: the root (in the inode) or a tree block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtNode {
    /// Depth 0: the extents themselves.
    Leaf(Vec<Extent>),
    /// Depth `depth` > 0: index entries of nodes of depth `depth - 1`.
    Index { depth: u16, entries: Vec<ExtIndex> },
}

impl Default for ExtNode {
    fn default() -> Self {
        ExtNode::Leaf(Vec::new())
    }
}

impl ExtNode {
    pub fn depth(&self) -> u16 {
        match self {
            ExtNode::Leaf(_) => 0,
            ExtNode::Index { depth, .. } => *depth,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ExtNode::Leaf(e) => e.len(),
            ExtNode::Index { entries, .. } => entries.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first logical block of each entry.
    fn logicals(&self) -> Vec<u64> {
        match self {
            ExtNode::Leaf(e) => e.iter().map(|x| x.logical).collect(),
            ExtNode::Index { entries, .. } => entries.iter().map(|x| x.logical).collect(),
        }
    }

    /// Writes the header and entries at `b[0..]` (`magic`), zeroing unused entry bytes up to
    /// `b.len()`.
    fn put(&self, b: &mut [u8], magic: u16) {
        b.fill(0);
        put_u16(b, 0, magic);
        put_u16(b, 2, self.len() as u16);
        put_u16(b, 4, self.depth());
        let mut at = HEADER;
        let mut entry = |logical: u64, len: u64, phys: u64| {
            put_u32(b, at, logical as u32);
            put_u16(b, at + 4, len as u16);
            put_u16(b, at + 6, (phys >> 32) as u16);
            put_u32(b, at + 8, phys as u32);
            at += ENTRY;
        };
        match self {
            ExtNode::Leaf(es) => es.iter().for_each(|e| entry(e.logical, e.len, e.physical)),
            ExtNode::Index { entries, .. } => {
                entries.iter().for_each(|x| entry(x.logical, 0, x.child))
            }
        }
    }

    /// Reads a node at `b[0..]` holding at most `cap` entries, checking the structural rules
    /// (those that need no geometry); the first one broken, described.
    fn get(b: &[u8], magic: u16, cap: usize) -> Result<ExtNode, String> {
        if get_u16(b, 0) != magic {
            return Err(format!("extent magic {:#06x}", get_u16(b, 0)));
        }
        let n = get_u16(b, 2) as usize;
        let depth = get_u16(b, 4);
        if n > cap {
            return Err(format!("{n} extent entries, at most {cap} fit"));
        }
        if depth > MAX_DEPTH {
            return Err(format!("extent tree depth {depth} beyond {MAX_DEPTH}"));
        }
        if get_u16(b, 6) != 0 || b[HEADER + n * ENTRY..].iter().any(|x| *x != 0) {
            return Err("reserved extent bytes not zero".into());
        }
        let raw = |i: usize| {
            let at = HEADER + i * ENTRY;
            let phys = (get_u16(b, at + 6) as u64) << 32 | get_u32(b, at + 8) as u64;
            (get_u32(b, at) as u64, get_u16(b, at + 4) as u64, phys)
        };
        let node = if depth == 0 {
            let mut es = Vec::with_capacity(n);
            for i in 0..n {
                let (logical, len, physical) = raw(i);
                if len == 0 || len > MAX_EXTENT_LEN {
                    return Err(format!("extent {i} of {len} blocks"));
                }
                es.push(Extent {
                    logical,
                    len,
                    physical,
                });
            }
            ExtNode::Leaf(es)
        } else {
            let mut entries = Vec::with_capacity(n);
            for i in 0..n {
                let (logical, reserved, child) = raw(i);
                if reserved != 0 {
                    return Err(format!("index entry {i}: reserved bytes not zero"));
                }
                entries.push(ExtIndex { logical, child });
            }
            ExtNode::Index { depth, entries }
        };
        let ls = node.logicals();
        if ls.windows(2).any(|w| w[0] >= w[1]) {
            return Err("extent entries out of logical order".into());
        }
        if let ExtNode::Leaf(es) = &node {
            if es
                .windows(2)
                .any(|w| w[0].logical + w[0].len > w[1].logical)
            {
                return Err("extents overlap".into());
            }
        }
        Ok(node)
    }

    /// The root as stored in inode bytes 96..152 and 172..244 (the bytes between and after
    /// are left as they are: `DiskInode::encode_into` zeroes the slot first).
    pub fn encode_root(&self, slot: &mut [u8]) {
        let mut b = [0u8; ROOT_BYTES];
        self.put(&mut b, ROOT_MAGIC);
        slot[ROOT_AT..ROOT_AT + ROOT_FIRST].copy_from_slice(&b[..ROOT_FIRST]);
        let rest = ROOT_BYTES - ROOT_FIRST;
        slot[ROOT_REST_AT..ROOT_REST_AT + rest].copy_from_slice(&b[ROOT_FIRST..]);
    }

    /// The root of a layout-2 inode slot, structural rules checked (the pointers are checked
    /// against the image by [`ExtNode::check`]).
    pub fn decode_root(slot: &[u8]) -> Result<ExtNode, String> {
        let rest = ROOT_BYTES - ROOT_FIRST;
        if slot[ROOT_AT + ROOT_FIRST..160].iter().any(|x| *x != 0)
            || slot[ROOT_REST_AT + rest..super::INODE_CRC_AT]
                .iter()
                .any(|x| *x != 0)
        {
            return Err("reserved extent bytes not zero".into());
        }
        let mut b = [0u8; ROOT_BYTES];
        b[..ROOT_FIRST].copy_from_slice(&slot[ROOT_AT..ROOT_AT + ROOT_FIRST]);
        b[ROOT_FIRST..].copy_from_slice(&slot[ROOT_REST_AT..ROOT_REST_AT + rest]);
        Self::get(&b, ROOT_MAGIC, ROOT_ENTRIES)
    }

    /// This node as extent-tree block `block`.
    pub fn encode_block(&self, block: u64, block_size: u32) -> Vec<u8> {
        let mut b = vec![0u8; block_size as usize];
        let crc_at = b.len() - 4;
        self.put(&mut b[..crc_at], BLOCK_MAGIC);
        seal(&mut b, crc_at, block);
        b
    }

    /// Decodes extent-tree block `block`: crc, structure, and every pointer and extent against
    /// `bounds`.
    pub fn decode_block(bytes: &[u8], block: u64, bounds: &Bounds) -> FsResult<ExtNode> {
        let what = "extent-tree block";
        let crc_at = bytes.len() - 4;
        verify(bytes, crc_at, block, what, block)?;
        let cap = block_capacity(bytes.len() as u32);
        let node = Self::get(&bytes[..crc_at], BLOCK_MAGIC, cap)
            .and_then(|n| {
                if n.is_empty() {
                    Err("no entries".into())
                } else {
                    Ok(n)
                }
            })
            .and_then(|n| n.check(bounds, Some(block)).map(|_| n))
            .map_err(|d| FsError::corrupt(what, block, d))?;
        Ok(node)
    }

    /// The rules that need the image: extents inside one group's data area and within the
    /// largest file, children data blocks other than `own` (the block holding the node).
    pub fn check(&self, bounds: &Bounds, own: Option<u64>) -> Result<(), String> {
        match self {
            ExtNode::Leaf(es) => {
                for e in es {
                    if e.logical + e.len > max_file_blocks(bounds.geo.block_size) {
                        return Err(format!("extent at {} beyond the largest file", e.logical));
                    }
                    if !bounds.is_data_run(e.physical, e.len) {
                        return Err(format!(
                            "extent {}+{} outside one group's data area",
                            e.physical, e.len
                        ));
                    }
                }
            }
            ExtNode::Index { entries, .. } => {
                for x in entries {
                    if !bounds.is_data_block(x.child) || Some(x.child) == own {
                        return Err(format!("extent-tree child {} not a data block", x.child));
                    }
                }
            }
        }
        Ok(())
    }
}

/// How `extents` (in logical order) are stored: the root and the tree blocks of each level
/// below it, deepest level first... as built by [`pack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    pub root: ExtNode,
    /// The tree blocks' contents, each with the index of the block number it gets, top
    /// level first, each level in logical order; `blocks[i]` is stored at the caller's
    /// `i`-th tree block.
    pub blocks: Vec<ExtNode>,
}

/// Tree blocks a map of `n` extents needs with `block_size` blocks.
pub fn tree_blocks(n: usize, block_size: u32) -> usize {
    let cap = block_capacity(block_size);
    let mut total = 0;
    let mut level = n;
    while level > ROOT_ENTRIES {
        level = level.div_ceil(cap);
        total += level;
    }
    total
}

/// Packs `extents` (logical order, at most [`MAX_EXTENT_LEN`] each) into a root and tree
/// blocks: leaves full but the last, then index levels likewise, until the root holds the
/// top level. `place(i)` gives the block number of the `i`-th tree block (top level first,
/// each level in logical order), so the index entries can name them.
pub fn pack(extents: &[Extent], block_size: u32, mut place: impl FnMut(usize) -> u64) -> Packed {
    let cap = block_capacity(block_size);
    let total = tree_blocks(extents.len(), block_size);
    if total == 0 {
        return Packed {
            root: ExtNode::Leaf(extents.to_vec()),
            blocks: Vec::new(),
        };
    }
    // Levels bottom-up: leaves, then index levels, each a list of nodes.
    let mut levels: Vec<Vec<ExtNode>> = vec![extents
        .chunks(cap)
        .map(|c| ExtNode::Leaf(c.to_vec()))
        .collect()];
    while levels.last().map_or(0, |l| l.len()) > ROOT_ENTRIES {
        let below = levels.last().expect("one level");
        let n = below.len().div_ceil(cap);
        levels.push((0..n).map(|_| ExtNode::default()).collect());
    }
    // Block numbers: top level first (index 0 = first node of the top level).
    let mut first_of_level = vec![0usize; levels.len()];
    let mut next = 0;
    for (li, level) in levels.iter().enumerate().rev() {
        first_of_level[li] = next;
        next += level.len();
    }
    let numbers: Vec<u64> = (0..total).map(&mut place).collect();
    let lowest = |node: &ExtNode| -> u64 {
        match node {
            ExtNode::Leaf(e) => e[0].logical,
            ExtNode::Index { entries, .. } => entries[0].logical,
        }
    };
    for li in 1..levels.len() {
        let index: Vec<ExtIndex> = levels[li - 1]
            .iter()
            .enumerate()
            .map(|(i, node)| ExtIndex {
                logical: lowest(node),
                child: numbers[first_of_level[li - 1] + i],
            })
            .collect();
        levels[li] = index
            .chunks(cap)
            .map(|c| ExtNode::Index {
                depth: li as u16,
                entries: c.to_vec(),
            })
            .collect();
    }
    let top = levels.len() - 1;
    let root = ExtNode::Index {
        depth: levels.len() as u16,
        entries: levels[top]
            .iter()
            .enumerate()
            .map(|(i, node)| ExtIndex {
                logical: lowest(node),
                child: numbers[first_of_level[top] + i],
            })
            .collect(),
    };
    let mut blocks = Vec::with_capacity(total);
    for level in levels.into_iter().rev() {
        blocks.extend(level);
    }
    Packed { root, blocks }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Geometry;

    fn bounds() -> Bounds {
        Bounds::without_log(Geometry::new(4096, 1 << 20, 32768, 8192))
    }

    fn ext(logical: u64, len: u64, physical: u64) -> Extent {
        Extent {
            logical,
            len,
            physical,
        }
    }

    #[test]
    fn a_root_and_a_block_round_trip_and_a_bad_byte_is_refused() {
        let root = ExtNode::Leaf(vec![ext(0, 3, 40_000), ext(10, 32768, 1 << 33)]);
        let mut slot = vec![0u8; 256];
        root.encode_root(&mut slot);
        assert_eq!(ExtNode::decode_root(&slot).unwrap(), root);
        // ten entries: the last six at bytes 172..244
        let full = ExtNode::Leaf((0..10u64).map(|i| ext(i * 10, 5, 1000 + i * 7)).collect());
        let mut slot = vec![0u8; 256];
        full.encode_root(&mut slot);
        assert!(slot[172..244].iter().any(|x| *x != 0));
        assert_eq!(ExtNode::decode_root(&slot).unwrap(), full);
        slot[250] = 1;
        assert!(ExtNode::decode_root(&slot).is_err(), "a reserved byte");
        let node = ExtNode::Index {
            depth: 1,
            entries: vec![
                ExtIndex {
                    logical: 0,
                    child: 40_001,
                },
                ExtIndex {
                    logical: 900,
                    child: 40_002,
                },
            ],
        };
        let b = node.encode_block(40_010, 4096);
        assert_eq!(ExtNode::decode_block(&b, 40_010, &bounds()).unwrap(), node);
        // the crc is salted with the block number: a misdirected block fails
        assert!(ExtNode::decode_block(&b, 40_011, &bounds()).is_err());
        // a valid crc over a bad value still fails: overlap, order, length, reserved bytes
        for (at, v) in [(8 + 12, 0u8), (8 + 5, 0x80), (7, 1), (500, 1)] {
            let mut bad = ExtNode::Leaf(vec![ext(0, 8, 40_000), ext(8, 8, 40_100)])
                .encode_block(40_010, 4096);
            bad[at] = v;
            seal(&mut bad, 4092, 40_010);
            assert!(
                ExtNode::decode_block(&bad, 40_010, &bounds()).is_err(),
                "byte {at}"
            );
        }
        let overlap = ExtNode::Leaf(vec![ext(0, 9, 40_000), ext(8, 8, 40_100)]);
        assert!(ExtNode::decode_block(&overlap.encode_block(9, 4096), 9, &bounds()).is_err());
    }

    #[test]
    fn extents_outside_a_group_or_the_image_are_refused() {
        let b = bounds();
        let meta = b.geo.meta_blocks() as u64;
        let ok = ExtNode::Leaf(vec![ext(0, 10, 32768 + meta)]);
        assert_eq!(ok.check(&b, None), Ok(()));
        for bad in [
            ext(0, 10, 32768 - 5),    // crosses into group 1's metadata
            ext(0, 1, 32768),         // group 1's superblock slot
            ext(0, 4, (1 << 20) - 2), // past the end
            ext(b.max_file_blocks() - 1, 2, 32768 + meta),
            // 16 KiB blocks: past 2^32 logical blocks (the pointer map's limit is higher)
            ext(LOGICAL_LIMIT - 1, 2, 32768 + meta),
        ] {
            assert!(ExtNode::Leaf(vec![bad]).check(&b, None).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pack_fills_leaves_and_index_levels_and_names_each_block_once() {
        let cap = block_capacity(4096);
        assert_eq!(cap, 340);
        let r = ROOT_ENTRIES;
        for n in [0, r, r + 1, cap * r, cap * r + 1, cap * cap * r + 7] {
            let es: Vec<Extent> = (0..n as u64).map(|i| ext(i * 2, 1, 1000 + i)).collect();
            let p = pack(&es, 4096, |i| 1_000_000 + i as u64);
            assert_eq!(p.blocks.len(), tree_blocks(n, 4096), "n {n}");
            assert!(p.root.len() <= ROOT_ENTRIES);
            // walking from the root gives the extents back in order
            let mut out = Vec::new();
            let mut stack = vec![p.root.clone()];
            while let Some(node) = stack.pop() {
                match node {
                    ExtNode::Leaf(e) => out.extend(e),
                    ExtNode::Index { entries, depth } => {
                        for x in entries.iter().rev() {
                            let child = p.blocks[(x.child - 1_000_000) as usize].clone();
                            assert_eq!(child.depth() + 1, depth);
                            stack.push(child);
                        }
                    }
                }
            }
            assert_eq!(out, es, "n {n}");
        }
    }
}
