//! Where things are: the arithmetic of groups, bitmaps and inode tables.

use super::superblock::Superblock;
use super::INODE_BYTES;

/// The derived layout of an image. Group `g` starts at block `g * blocks_per_group`:
///
/// ```text
/// +0                 superblock (group 0: primary; groups 1 and last: backup; else unused)
/// +1                 group header
/// +2                 block bitmap   (bitmap_blocks blocks)
/// +2+bb              inode bitmap   (ibitmap_blocks blocks)
/// +2+bb+ib           inode table    (itable_blocks blocks)
/// +meta_blocks ...   data blocks
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub block_size: u32,
    pub total_blocks: u64,
    pub group_count: u32,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub bitmap_blocks: u32,
    pub ibitmap_blocks: u32,
    pub itable_blocks: u32,
}

impl Geometry {
    /// Derives the layout from the sizes chosen by mkfs.
    pub fn new(
        block_size: u32,
        total_blocks: u64,
        blocks_per_group: u32,
        inodes_per_group: u32,
    ) -> Geometry {
        let bits = block_size as u64 * 8;
        let group_count = total_blocks.div_ceil(blocks_per_group as u64) as u32;
        Geometry {
            block_size,
            total_blocks,
            group_count,
            blocks_per_group,
            inodes_per_group,
            bitmap_blocks: (blocks_per_group as u64).div_ceil(bits) as u32,
            ibitmap_blocks: (inodes_per_group as u64).div_ceil(bits) as u32,
            itable_blocks: (inodes_per_group as u64 * INODE_BYTES as u64)
                .div_ceil(block_size as u64) as u32,
        }
    }

    pub fn from_superblock(sb: &Superblock) -> Geometry {
        Geometry::new(
            sb.block_size,
            sb.total_blocks,
            sb.blocks_per_group,
            sb.inodes_per_group,
        )
    }

    pub fn inodes_per_block(&self) -> u32 {
        self.block_size / INODE_BYTES as u32
    }
    pub fn group_start(&self, g: u32) -> u64 {
        g as u64 * self.blocks_per_group as u64
    }
    /// Blocks in group `g` (the last group may be shorter).
    pub fn group_len(&self, g: u32) -> u32 {
        let start = self.group_start(g);
        (self.total_blocks - start).min(self.blocks_per_group as u64) as u32
    }
    pub fn header_block(&self, g: u32) -> u64 {
        self.group_start(g) + 1
    }
    pub fn bitmap_block(&self, g: u32) -> u64 {
        self.group_start(g) + 2
    }
    pub fn ibitmap_block(&self, g: u32) -> u64 {
        self.bitmap_block(g) + self.bitmap_blocks as u64
    }
    pub fn itable_block(&self, g: u32) -> u64 {
        self.ibitmap_block(g) + self.ibitmap_blocks as u64
    }
    /// Blocks at the start of every group that hold metadata.
    pub fn meta_blocks(&self) -> u32 {
        2 + self.bitmap_blocks + self.ibitmap_blocks + self.itable_blocks
    }
    /// The group holding block `b`.
    pub fn group_of_block(&self, b: u64) -> u32 {
        (b / self.blocks_per_group as u64) as u32
    }
    pub fn total_inodes(&self) -> u64 {
        self.group_count as u64 * self.inodes_per_group as u64
    }
    /// Inode numbers start at 1 (the root); inode `n` lives in slot `n - 1`.
    pub fn group_of_inode(&self, ino: u64) -> u32 {
        ((ino - 1) / self.inodes_per_group as u64) as u32
    }
    pub fn inode_index_in_group(&self, ino: u64) -> u32 {
        ((ino - 1) % self.inodes_per_group as u64) as u32
    }
    /// (inode table block, byte offset inside it) of inode `ino`.
    pub fn inode_location(&self, ino: u64) -> (u64, usize) {
        let g = self.group_of_inode(ino);
        let idx = self.inode_index_in_group(ino);
        let blk = self.itable_block(g) + (idx / self.inodes_per_block()) as u64;
        let off = (idx % self.inodes_per_block()) as usize * INODE_BYTES;
        (blk, off)
    }
    pub fn valid_ino(&self, ino: u64) -> bool {
        ino >= 1 && ino <= self.total_inodes()
    }
    /// Groups that keep a copy of the superblock in their first block.
    pub fn backup_groups(&self) -> Vec<u32> {
        let mut v = Vec::new();
        if self.group_count > 1 {
            v.push(1);
        }
        if self.group_count > 2 {
            v.push(self.group_count - 1);
        }
        v
    }
    /// Data blocks available in the whole image.
    pub fn data_blocks(&self) -> u64 {
        (0..self.group_count)
            .map(|g| self.group_len(g).saturating_sub(self.meta_blocks()) as u64)
            .sum()
    }
}

/// What a value read from the image may be, derived from the superblock: every block
/// pointer and size is checked against it when its structure is decoded (inode, indirect
/// block, xattr head), so that nothing past the decoder — the allocator's group index, a
/// directory's block loop, a symlink's buffer — ever sees a value a hostile image chose.
///
/// A block pointer is valid when it names a data block: inside the image, past its group's
/// metadata, and outside the journal and the byte log (`docs/FORMAT.md`, section 10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub geo: Geometry,
    /// The journal and the byte log after it (`Superblock::log_range`).
    log: (u64, u64),
    /// Inodes may have extent maps (version 3, `FEATURE_EXTENTS`).
    pub extents: bool,
}

impl Bounds {
    pub fn from_superblock(sb: &Superblock) -> Bounds {
        let r = sb.log_range();
        Bounds {
            geo: Geometry::from_superblock(sb),
            log: (r.start, r.end),
            extents: sb.has_extents(),
        }
    }

    /// Bounds of a geometry without a journal or byte log (decoder tests and fuzzing).
    pub fn without_log(geo: Geometry) -> Bounds {
        Bounds {
            geo,
            log: (0, 0),
            extents: true,
        }
    }

    /// `b` is a data block (see the type's doc).
    pub fn is_data_block(&self, b: u64) -> bool {
        let geo = &self.geo;
        b < geo.total_blocks
            && b - geo.group_start(geo.group_of_block(b)) >= geo.meta_blocks() as u64
            && !(self.log.0..self.log.1).contains(&b)
    }

    /// `len` blocks from `first` are all data blocks (of one group, none in the logs).
    pub fn is_data_run(&self, first: u64, len: u64) -> bool {
        if len == 0 || first >= super::extent::PHYS_LIMIT {
            return false;
        }
        let last = first + len - 1;
        self.is_data_block(first)
            && self.is_data_block(last)
            && self.geo.group_of_block(first) == self.geo.group_of_block(last)
            && (last < self.log.0 || first >= self.log.1)
    }

    /// Blocks a file can map: 12 direct, then single, double and triple indirect.
    pub fn max_file_blocks(&self) -> u64 {
        super::pointer_map_blocks(self.geo.block_size)
    }

    /// Largest `size` an inode may have.
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_blocks() * self.geo.block_size as u64
    }
}
