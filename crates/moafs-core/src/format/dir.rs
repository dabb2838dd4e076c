//! Directory blocks: the data blocks of a directory inode hold packed entries.
//!
//! ```text
//! 0  magic "MDIR"   4  crc32c (salt: inode number << 32 | file block index)
//! 8  entry count u16   10 bytes used by entries u16   12 reserved u32
//! 16 entries: ino u64 | kind u8 | name_len u8 | name bytes     (10 + name_len bytes each)
//! ```
//! "." and ".." are not stored: ".." is the parent field of the directory's inode.

use super::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, seal, verify};
use crate::error::{FsError, FsResult};

pub const DIR_MAGIC: u32 = u32::from_le_bytes(*b"MDIR");
pub const DIR_HEADER_BYTES: usize = 16;
/// Fixed part of an entry.
pub const DIR_ENTRY_FIXED: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryRaw {
    pub ino: u64,
    pub kind: u8,
    pub name: Vec<u8>,
}

impl DirEntryRaw {
    pub fn encoded_len(&self) -> usize {
        DIR_ENTRY_FIXED + self.name.len()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirBlock {
    pub entries: Vec<DirEntryRaw>,
}

/// Block `index` of directory `ino` holding `entries`, in order (they must fit).
pub fn encode_entries(entries: &[DirEntryRaw], ino: u64, index: u64, block_size: u32) -> Vec<u8> {
    let mut b = vec![0u8; block_size as usize];
    put_u32(&mut b, 0, DIR_MAGIC);
    let mut pos = DIR_HEADER_BYTES;
    for e in entries {
        put_u64(&mut b, pos, e.ino);
        b[pos + 8] = e.kind;
        b[pos + 9] = e.name.len() as u8;
        b[pos + 10..pos + 10 + e.name.len()].copy_from_slice(&e.name);
        pos += e.encoded_len();
    }
    put_u16(&mut b, 8, entries.len() as u16);
    put_u16(&mut b, 10, (pos - DIR_HEADER_BYTES) as u16);
    seal(&mut b, 4, dir_salt(ino, index));
    b
}

pub fn dir_salt(ino: u64, index: u64) -> u64 {
    (ino << 32) ^ index
}

impl DirBlock {
    /// Bytes available for entries in a block of `block_size`.
    pub fn capacity(block_size: u32) -> usize {
        block_size as usize - DIR_HEADER_BYTES
    }

    pub fn encode(&self, ino: u64, index: u64, block_size: u32) -> Vec<u8> {
        encode_entries(&self.entries, ino, index, block_size)
    }

    pub fn decode(b: &[u8], ino: u64, index: u64, block: u64) -> FsResult<DirBlock> {
        if get_u32(b, 0) != DIR_MAGIC {
            return Err(FsError::corrupt("directory block", block, "bad magic"));
        }
        verify(b, 4, dir_salt(ino, index), "directory block", block)?;
        let count = get_u16(b, 8) as usize;
        let used = get_u16(b, 10) as usize;
        if used > b.len() - DIR_HEADER_BYTES {
            return Err(FsError::corrupt(
                "directory block",
                block,
                "used bytes exceed block",
            ));
        }
        if count > used / (DIR_ENTRY_FIXED + 1) {
            return Err(FsError::corrupt(
                "directory block",
                block,
                "more entries than the used bytes hold",
            ));
        }
        let end = DIR_HEADER_BYTES + used;
        let mut pos = DIR_HEADER_BYTES;
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            if pos + DIR_ENTRY_FIXED > end {
                return Err(FsError::corrupt(
                    "directory block",
                    block,
                    "entry overruns block",
                ));
            }
            let ino_e = get_u64(b, pos);
            let kind = b[pos + 8];
            let len = b[pos + 9] as usize;
            if len == 0 || pos + DIR_ENTRY_FIXED + len > end {
                return Err(FsError::corrupt(
                    "directory block",
                    block,
                    "bad name length",
                ));
            }
            let name = b[pos + 10..pos + 10 + len].to_vec();
            if name.contains(&b'/') || name.contains(&0) {
                return Err(FsError::corrupt(
                    "directory block",
                    block,
                    "name contains '/' or NUL",
                ));
            }
            entries.push(DirEntryRaw {
                ino: ino_e,
                kind,
                name,
            });
            pos += DIR_ENTRY_FIXED + len;
        }
        if pos != end {
            return Err(FsError::corrupt(
                "directory block",
                block,
                "entry count and used bytes disagree",
            ));
        }
        Ok(DirBlock { entries })
    }
}
