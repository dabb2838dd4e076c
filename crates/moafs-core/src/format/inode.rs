//! Inode slots: 256 bytes each in the group's inode table, crc salted with the inode number.

use super::extent::ExtNode;
use super::{
    get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, seal, verify, Bounds,
    INODE_CRC_AT as CRC_AT,
};
use crate::error::{FsError, FsResult};

pub const INODE_BYTES: usize = 256;
/// Direct block pointers per inode: a "small file" has at most this many blocks.
pub const N_DIRECT: usize = 12;
/// Most links an inode may have on disk (decode-time rule): far above what moafs makes
/// (65000), far enough below `u32::MAX` that counting up from it never wraps.
pub const NLINK_LIMIT: u32 = 1 << 20;

/// An inode as stored. `mode` holds the file type bits and the permission bits as `st_mode`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskInode {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// Blocks allocated to the file (data, indirect, xattr), in file-system blocks.
    pub blocks: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub crtime: (i64, u32),
    pub rdev: u32,
    pub generation: u32,
    pub flags: u32,
    pub xattr_block: u32,
    pub direct: [u32; N_DIRECT],
    /// Single, double and triple indirect blocks.
    pub indirect: [u32; 3],
    /// Directories: the inode number of the parent directory.
    pub parent: u64,
    /// Slot layout 2 (version 3): the root of the inode's extent map, which then has no
    /// `direct` or `indirect` pointers (they stay zero).
    pub extents: Option<ExtNode>,
}

impl DiskInode {
    /// Whether `self` and `o` differ only in what a byte-log attribute record carries (mode,
    /// owner, group, flags, size, times) and, with `map`, in their extent map and block count.
    /// No allocation (an fsync asks this up to three times); every field is named, so a new
    /// one must be placed here.
    pub fn same_but_attrs(&self, o: &DiskInode, map: bool) -> bool {
        let DiskInode {
            mode: _,
            uid: _,
            gid: _,
            nlink,
            size: _,
            blocks,
            atime: _,
            mtime: _,
            ctime: _,
            crtime,
            rdev,
            generation,
            flags: _,
            xattr_block,
            direct,
            indirect,
            parent,
            extents,
        } = self;
        *nlink == o.nlink
            && *crtime == o.crtime
            && *rdev == o.rdev
            && *generation == o.generation
            && *xattr_block == o.xattr_block
            && *direct == o.direct
            && *indirect == o.indirect
            && *parent == o.parent
            && (map || (*blocks == o.blocks && *extents == o.extents))
    }

    pub fn is_free(&self) -> bool {
        self.mode == 0
    }

    pub fn encode_into(&self, slot: &mut [u8], ino: u64) {
        slot.fill(0);
        put_u32(slot, 0, self.mode);
        put_u32(slot, 4, self.uid);
        put_u32(slot, 8, self.gid);
        put_u32(slot, 12, self.nlink);
        put_u64(slot, 16, self.size);
        put_u64(slot, 24, self.blocks);
        let times = [self.atime, self.mtime, self.ctime, self.crtime];
        for (i, (s, ns)) in times.iter().enumerate() {
            put_u64(slot, 32 + i * 12, *s as u64);
            put_u32(slot, 40 + i * 12, *ns);
        }
        put_u32(slot, 80, self.rdev);
        put_u32(slot, 84, self.generation);
        put_u32(slot, 88, self.flags);
        put_u32(slot, 92, self.xattr_block);
        if let Some(root) = &self.extents {
            root.encode_root(slot);
        } else {
            for (i, p) in self.direct.iter().enumerate() {
                put_u32(slot, 96 + i * 4, *p);
            }
            for (i, p) in self.indirect.iter().enumerate() {
                put_u32(slot, 144 + i * 4, *p);
            }
        }
        put_u64(slot, 160, self.parent);
        put_u16(slot, 168, if self.extents.is_some() { 2 } else { 1 }); // slot layout
        seal(slot, CRC_AT, ino);
    }

    /// Decodes slot bytes of inode `ino` (in inode-table block `block`) and checks every
    /// pointer and size against `bounds` ([`DiskInode::check`]): an inode that fails is
    /// corrupt as a whole, however good its crc. An all-zero slot is a free inode (no crc).
    pub fn decode(slot: &[u8], ino: u64, block: u64, bounds: &Bounds) -> FsResult<DiskInode> {
        let d = Self::decode_fields(slot, ino, block)?;
        if !d.is_free() {
            d.check(bounds).map_err(|detail| {
                FsError::corrupt("inode", block, format!("inode {ino}: {detail}"))
            })?;
        }
        Ok(d)
    }

    /// The decode-time rules of `docs/FORMAT.md` section 5 (what a valid inode's fields may
    /// be); the first broken one, described.
    pub fn check(&self, bounds: &Bounds) -> Result<(), String> {
        let bs = bounds.geo.block_size as u64;
        let mut ptrs: Vec<(&str, u32)> = Vec::with_capacity(N_DIRECT + 4);
        ptrs.extend(self.direct.iter().map(|p| ("direct", *p)));
        ptrs.extend(
            ["indirect", "double indirect", "triple indirect"]
                .into_iter()
                .zip(self.indirect),
        );
        ptrs.push(("xattr", self.xattr_block));
        if let Some(root) = &self.extents {
            if !bounds.extents {
                return Err("an extent map in an image without extent maps".into());
            }
            if ptrs[..N_DIRECT + 3].iter().any(|p| p.1 != 0) {
                return Err("an extent map with block pointers".into());
            }
            root.check(bounds, None)?;
        }
        for (i, &(what, p)) in ptrs.iter().enumerate() {
            if p == 0 {
                continue;
            }
            if !bounds.is_data_block(p as u64) {
                return Err(format!("{what} block pointer {p} outside the data area"));
            }
            if ptrs[..i].iter().any(|q| q.1 == p) {
                return Err(format!("block {p} named by two pointers"));
            }
        }
        if self.nlink > NLINK_LIMIT {
            return Err(format!("link count {} beyond {NLINK_LIMIT}", self.nlink));
        }
        if self.blocks > bounds.geo.data_blocks() {
            return Err(format!(
                "block count {} exceeds the file system's {} data blocks",
                self.blocks,
                bounds.geo.data_blocks()
            ));
        }
        let max_bytes = match self.extents {
            Some(_) => super::extent::max_file_blocks(bounds.geo.block_size) * bs,
            None => bounds.max_file_bytes(),
        };
        if self.size > max_bytes {
            return Err(format!("size {} beyond the largest file", self.size));
        }
        match self.mode & libc::S_IFMT {
            libc::S_IFDIR if self.size / bs > self.blocks => Err(format!(
                "directory size {} needs more than its {} blocks",
                self.size, self.blocks
            )),
            libc::S_IFLNK if self.size > super::SYMLINK_MAX as u64 => Err(format!(
                "symlink size {} beyond {} bytes",
                self.size,
                super::SYMLINK_MAX
            )),
            _ => Ok(()),
        }
    }

    /// The fields as stored, crc checked, nothing else: only for rewriting a slot as it is
    /// (the byte log's replay of times); everything that follows pointers uses `decode`.
    pub fn decode_unchecked(slot: &[u8], ino: u64, block: u64) -> FsResult<DiskInode> {
        Self::decode_fields(slot, ino, block)
    }

    fn decode_fields(slot: &[u8], ino: u64, block: u64) -> FsResult<DiskInode> {
        if slot.iter().all(|b| *b == 0) {
            return Ok(DiskInode::default());
        }
        verify(slot, CRC_AT, ino, "inode", block)?;
        let time = |i: usize| {
            (
                get_u64(slot, 32 + i * 12) as i64,
                get_u32(slot, 40 + i * 12),
            )
        };
        let mut direct = [0u32; N_DIRECT];
        let mut indirect = [0u32; 3];
        let extents = match get_u16(slot, 168) {
            1 => {
                for (i, p) in direct.iter_mut().enumerate() {
                    *p = get_u32(slot, 96 + i * 4);
                }
                for (i, p) in indirect.iter_mut().enumerate() {
                    *p = get_u32(slot, 144 + i * 4);
                }
                None
            }
            2 => Some(
                ExtNode::decode_root(slot)
                    .map_err(|d| FsError::corrupt("inode", block, format!("inode {ino}: {d}")))?,
            ),
            other => {
                return Err(FsError::corrupt(
                    "inode",
                    block,
                    format!("inode {ino}: slot layout {other}"),
                ))
            }
        };
        Ok(DiskInode {
            mode: get_u32(slot, 0),
            uid: get_u32(slot, 4),
            gid: get_u32(slot, 8),
            nlink: get_u32(slot, 12),
            size: get_u64(slot, 16),
            blocks: get_u64(slot, 24),
            atime: time(0),
            mtime: time(1),
            ctime: time(2),
            crtime: time(3),
            rdev: get_u32(slot, 80),
            generation: get_u32(slot, 84),
            flags: get_u32(slot, 88),
            xattr_block: get_u32(slot, 92),
            direct,
            indirect,
            parent: get_u64(slot, 160),
            extents,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_but_attrs_ignores_the_attributes_and_with_map_the_map() {
        let a = DiskInode {
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            size: 10,
            blocks: 1,
            extents: Some(ExtNode::Leaf(Vec::new())),
            ..Default::default()
        };
        let mut b = a.clone();
        (b.mode, b.uid, b.gid, b.flags, b.size) = (libc::S_IFREG | 0o600, 7, 8, 2, 99);
        (b.atime, b.mtime, b.ctime) = ((1, 2), (3, 4), (5, 6));
        assert!(b.same_but_attrs(&a, false));
        let mut grown = b.clone();
        (grown.blocks, grown.extents) = (3, None);
        assert!(!grown.same_but_attrs(&a, false));
        assert!(grown.same_but_attrs(&a, true));
        let changes: [fn(&mut DiskInode); 5] = [
            |d| d.nlink = 2,
            |d| d.xattr_block = 9,
            |d| d.generation = 1,
            |d| d.parent = 5,
            |d| d.direct[0] = 77,
        ];
        for change in changes {
            let mut c = b.clone();
            change(&mut c);
            assert!(!c.same_but_attrs(&a, true));
        }
    }
}
