//! The group header: counts, and the crcs of the group's two bitmaps.

use super::{get_u32, put_u32, seal, verify};
use crate::error::{FsError, FsResult};

pub const GROUP_MAGIC: u32 = u32::from_le_bytes(*b"MGRP");
pub(crate) const CRC_AT: usize = 60;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupHeader {
    pub group: u32,
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub dirs: u32,
    pub bitmap_crc: u32,
    pub ibitmap_crc: u32,
    pub flags: u32,
    /// Inode slots initialised so far (from the start of the table); slots at or beyond this
    /// index are free and their bytes are undefined (mkfs does not zero inode tables).
    pub itable_init: u32,
}

impl GroupHeader {
    pub fn encode(&self, block: u64, block_size: u32) -> Vec<u8> {
        let mut b = vec![0u8; block_size as usize];
        put_u32(&mut b, 0, GROUP_MAGIC);
        put_u32(&mut b, 4, self.group);
        put_u32(&mut b, 8, self.free_blocks);
        put_u32(&mut b, 12, self.free_inodes);
        put_u32(&mut b, 16, self.dirs);
        put_u32(&mut b, 20, self.bitmap_crc);
        put_u32(&mut b, 24, self.ibitmap_crc);
        put_u32(&mut b, 28, self.flags);
        put_u32(&mut b, 32, self.itable_init);
        seal(&mut b[..64], CRC_AT, block);
        b
    }

    pub fn decode(b: &[u8], block: u64, group: u32) -> FsResult<GroupHeader> {
        if get_u32(b, 0) != GROUP_MAGIC {
            return Err(FsError::corrupt("group header", block, "bad magic"));
        }
        verify(&b[..64], CRC_AT, block, "group header", block)?;
        let h = GroupHeader {
            group: get_u32(b, 4),
            free_blocks: get_u32(b, 8),
            free_inodes: get_u32(b, 12),
            dirs: get_u32(b, 16),
            bitmap_crc: get_u32(b, 20),
            ibitmap_crc: get_u32(b, 24),
            flags: get_u32(b, 28),
            itable_init: get_u32(b, 32),
        };
        if h.group != group {
            return Err(FsError::corrupt(
                "group header",
                block,
                format!("belongs to group {} not {group}", h.group),
            ));
        }
        Ok(h)
    }
}

/// crc32c of a bitmap region, salted with the group number.
pub fn bitmap_crc(bytes: &[u8], group: u32) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&(group as u64).to_le_bytes()), bytes)
}
