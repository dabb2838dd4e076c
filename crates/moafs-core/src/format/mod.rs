//! The on-disk format, version 3. `docs/FORMAT.md` is the byte-by-byte specification; this
//! module is its only implementation (shared by mkfs, the engine, fsck and inspect).
//!
//! All integers are little-endian. Every metadata block carries a crc32c: the superblock,
//! group headers, inode slots, indirect blocks, directory blocks and xattr blocks hold their
//! own; the two bitmaps of a group are covered by crcs kept in the group header. Decoders never
//! panic on bad bytes: they return `FsError::Corrupt` naming the structure and block.

pub mod bitmap;
pub mod blockmap;
pub mod bytelog;
mod dir;
pub mod extent;
pub mod fuzzing;
mod geometry;
mod group;
mod inode;
pub mod journal;
mod superblock;
mod xattr;

pub use dir::{
    dir_salt, encode_entries, DirBlock, DirEntryRaw, DIR_ENTRY_FIXED, DIR_HEADER_BYTES, DIR_MAGIC,
};
pub use geometry::{Bounds, Geometry};
pub use group::{bitmap_crc, GroupHeader, GROUP_MAGIC};
pub use inode::{DiskInode, INODE_BYTES, N_DIRECT};
pub use superblock::{
    Superblock, COMPAT_INODE_FLAGS, FEATURE_BYTELOG, FEATURE_BYTELOG_MAP, FEATURE_BYTELOG_WB,
    FEATURE_EXTENTS, FEATURE_JOURNAL, FEATURE_JOURNAL_COMPACT, FEATURE_LARGE_XATTR, FEATURE_NVM,
    FORMAT_VERSION, FORMAT_VERSION_MIN, FORMAT_VERSION_POINTERS, NVM_PATH_AT, SB_CRC_AT, SB_MAGIC,
    STATE_CLEAN, STATE_MOUNTED,
};
pub use xattr::{
    XattrBlock, XattrHead, XATTR_CONT_MAGIC, XATTR_LARGE_MAGIC, XATTR_MAGIC, XATTR_MAX_BLOCKS,
    XATTR_VALUE_MAX,
};

use crate::error::{FsError, FsResult};

/// `bytes` as lowercase hex (uuids in messages and reports).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Longest file name in bytes.
pub const NAME_MAX: usize = 255;
/// Longest symlink target in bytes.
pub const SYMLINK_MAX: usize = 4095;

pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// crc32c of `bytes` with the 4-byte field at `crc_at` taken as zero, seeded with `salt`
/// (the block number or inode number, so a misdirected write fails the check).
pub fn crc_with_hole(bytes: &[u8], crc_at: usize, salt: u64) -> u32 {
    let mut c = crc32c::crc32c(&salt.to_le_bytes());
    c = crc32c::crc32c_append(c, &bytes[..crc_at]);
    c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &bytes[crc_at + 4..])
}

/// Stores the crc of `bytes` at `crc_at`.
pub fn seal(bytes: &mut [u8], crc_at: usize, salt: u64) {
    let c = crc_with_hole(bytes, crc_at, salt);
    put_u32(bytes, crc_at, c);
}

/// Verifies the crc stored at `crc_at`.
pub fn verify(
    bytes: &[u8],
    crc_at: usize,
    salt: u64,
    what: &'static str,
    block: u64,
) -> FsResult<()> {
    let stored = get_u32(bytes, crc_at);
    let computed = crc_with_hole(bytes, crc_at, salt);
    if stored != computed {
        return Err(FsError::corrupt(
            what,
            block,
            format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
        ));
    }
    Ok(())
}

/// Pointers per indirect block: the last 4 bytes hold the block's crc.
pub fn ptrs_per_block(block_size: u32) -> u64 {
    (block_size as u64 / 4) - 1
}

/// The most logical blocks a pointer map (`blockmap.rs`) of `block_size` blocks holds: the
/// direct pointers, then the single, double and triple indirect trees. An extent-mapped file
/// is held to it too (`extent::max_file_blocks`).
pub fn pointer_map_blocks(block_size: u32) -> u64 {
    let p = ptrs_per_block(block_size);
    N_DIRECT as u64 + p + p * p + p * p * p
}

/// Where an inode slot's crc sits (its last 4 bytes, `inode.rs`); an extent root's tail in
/// the slot (`extent.rs`) ends here.
pub(crate) const INODE_CRC_AT: usize = 252;

/// Decodes an indirect block (pointers + trailing crc salted with its block number); every
/// non-zero pointer must name a data block (`bounds`) other than this block.
pub fn decode_indirect(bytes: &[u8], block: u64, bounds: &Bounds) -> FsResult<Vec<u32>> {
    let crc_at = bytes.len() - 4;
    verify(bytes, crc_at, block, "indirect block", block)?;
    let ptrs: Vec<u32> = (0..crc_at / 4).map(|i| get_u32(bytes, i * 4)).collect();
    for (i, &p) in ptrs.iter().enumerate() {
        if p != 0 && (!bounds.is_data_block(p as u64) || p as u64 == block) {
            return Err(FsError::corrupt(
                "indirect block",
                block,
                format!("pointer {i} ({p}) outside the data area"),
            ));
        }
    }
    Ok(ptrs)
}

/// Encodes an indirect block.
pub fn encode_indirect(ptrs: &[u32], block: u64, block_size: u32) -> Vec<u8> {
    let mut b = vec![0u8; block_size as usize];
    for (i, p) in ptrs.iter().enumerate() {
        put_u32(&mut b, i * 4, *p);
    }
    let crc_at = b.len() - 4;
    seal(&mut b, crc_at, block);
    b
}
