//! Entry points for fuzzing the decoders (`fuzz/`) and for the corrupt-input tests: arbitrary
//! bytes are decoded as is, and again with a valid crc stored in them, so that the field
//! checks behind the crc are exercised too. The only requirement is not to panic.

use super::extent::ExtNode;
use super::journal::{Commit, Descriptor};
use super::{
    decode_indirect, dir_salt, seal, Bounds, DirBlock, DiskInode, Geometry, GroupHeader,
    Superblock, XattrBlock, INODE_BYTES, SB_CRC_AT,
};

/// Structures a fuzz input can be decoded as (`kind % COUNT`).
pub const COUNT: u8 = 9;

/// Decodes `data` as structure `kind`, raw and resealed; returns how many decodes succeeded.
pub fn decode_resealed(kind: u8, data: &[u8]) -> usize {
    let block = 4096usize;
    let mut b = vec![0u8; block];
    let n = data.len().min(block);
    b[..n].copy_from_slice(&data[..n]);
    let raw = decode(kind, &b);
    match kind % COUNT {
        0 => seal(&mut b[..256], SB_CRC_AT, 0),
        1 => seal(&mut b[..64], super::group::CRC_AT, 7),
        2 => seal(&mut b[..INODE_BYTES], super::INODE_CRC_AT, 5),
        3 => seal(&mut b, 4, dir_salt(5, 0)),
        4 => {
            let at = b.len() - 4;
            seal(&mut b, at, 7)
        }
        5 => seal(&mut b, 4, 5),
        8 => {
            let at = b.len() - 4;
            seal(&mut b, at, 7)
        }
        _ => {
            let at = b.len() - 4;
            seal(&mut b, at, 9)
        }
    }
    raw + decode(kind, &b)
}

fn decode(kind: u8, b: &[u8]) -> usize {
    // 4 GiB of 4 KiB blocks in 32 groups, no journal: most pointers are plausible
    let bounds = Bounds::without_log(Geometry::new(4096, 1 << 20, 32768, 8192));
    let ok = match kind % COUNT {
        0 => Superblock::decode(b, 0).is_ok(),
        1 => GroupHeader::decode(b, 7, 0).is_ok(),
        2 => DiskInode::decode(&b[..INODE_BYTES], 5, 0, &bounds).is_ok(),
        3 => DirBlock::decode(b, 5, 0, 0).is_ok(),
        4 => decode_indirect(b, 7, &bounds).is_ok(),
        5 => match XattrBlock::decode_head(b, 5, 0, &bounds) {
            Ok(crate::format::XattrHead::Large {
                count,
                stream_len,
                first,
                ..
            }) => {
                // the head's own bytes as the whole stream (continuations are checked alone)
                let _ = XattrBlock::decode_cont(b, 5, 1, 0);
                XattrBlock::decode_stream(&first, count, 0).is_ok() && first.len() <= stream_len
            }
            r => r.is_ok(),
        },
        6 => matches!(Descriptor::decode(b, 9, 0), Ok(Some(_))),
        7 => matches!(Commit::decode(b, 9, 0), Ok(Some(_))),
        _ => ExtNode::decode_block(b, 7, &bounds).is_ok(),
    };
    ok as usize
}

/// A structure of an image that structure-level damage can change: where it is and what its
/// crc is salted with, so that the damage is re-sealed and reaches the checks behind the crc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structure {
    /// The primary superblock (block 0, first 256 bytes).
    Superblock,
    /// Group `g`'s header at block `block`.
    GroupHeader {
        g: u32,
        block: u64,
    },
    /// The 256-byte slot of inode `ino` at byte `off` of inode-table block `block`.
    Inode {
        ino: u64,
        block: u64,
        off: usize,
    },
    /// Logical block `index` of directory `ino`.
    Dir {
        ino: u64,
        index: u64,
        block: u64,
    },
    Indirect {
        block: u64,
    },
    /// An extent-tree block (FORMAT.md section 6a).
    ExtentBlock {
        block: u64,
    },
    /// The block `xattr_block` of inode `ino` points to ("MXAT" or "MXAL").
    XattrHead {
        ino: u64,
        block: u64,
    },
    /// Continuation `i` (1-based) of inode `ino`'s xattr set.
    XattrCont {
        ino: u64,
        i: usize,
        block: u64,
    },
}

/// A field: byte offset inside the structure and width in bytes (1, 2, 4 or 8).
pub type Field = (usize, usize);

impl Structure {
    /// The block holding the structure.
    pub fn block(&self) -> u64 {
        match *self {
            Structure::Superblock => 0,
            Structure::GroupHeader { block, .. }
            | Structure::Inode { block, .. }
            | Structure::Dir { block, .. }
            | Structure::Indirect { block }
            | Structure::ExtentBlock { block }
            | Structure::XattrHead { block, .. }
            | Structure::XattrCont { block, .. } => block,
        }
    }

    /// (first byte inside the block, bytes) covered by the structure's crc.
    pub fn span(&self, block_size: usize) -> (usize, usize) {
        match *self {
            Structure::Superblock => (0, 256),
            Structure::GroupHeader { .. } => (0, 64),
            Structure::Inode { off, .. } => (off, INODE_BYTES),
            _ => (0, block_size),
        }
    }

    /// The fields a decoder reads (offsets inside the span); damage prefers these.
    pub fn fields(&self, block_size: usize) -> Vec<Field> {
        let mut f: Vec<Field> = match self {
            Structure::Superblock => vec![
                (8, 4),
                (12, 4),
                (16, 8),
                (24, 4),
                (28, 4),
                (96, 8),
                (152, 8),
                (160, 4),
                (168, 8),
                (176, 8),
                (184, 4),
                (188, 4),
                (192, 8),
                (232, 8),
            ],
            Structure::GroupHeader { .. } => vec![(4, 4), (8, 4), (12, 4), (16, 4), (32, 4)],
            Structure::Inode { .. } => {
                let mut v = vec![(0, 4), (12, 4), (16, 8), (24, 8), (92, 4), (160, 8)];
                v.extend((0..15).map(|i| (96 + 4 * i, 4)));
                v
            }
            Structure::Dir { .. } => {
                // header, then the fields of the first entries (ino, type, name_len)
                let mut v = vec![(8, 2), (10, 2)];
                for at in [16usize, 26, 36, 46] {
                    v.extend([(at, 8), (at + 8, 1), (at + 9, 1)]);
                }
                v
            }
            Structure::Indirect { .. } => (0..8).map(|i| (4 * i, 4)).collect(),
            // header, then the first entries' logical, length and physical words
            Structure::ExtentBlock { .. } => {
                let mut v = vec![(0, 2), (2, 2), (4, 2)];
                for at in [8usize, 20, 32] {
                    v.extend([(at, 4), (at + 4, 2), (at + 6, 2), (at + 8, 4)]);
                }
                v
            }
            Structure::XattrHead { .. } => vec![
                (8, 2),
                (8, 4),
                (10, 2),
                (12, 2),
                (16, 4),
                (16, 1),
                (17, 2),
                (19, 4),
                (20, 4),
                (24, 4),
            ],
            Structure::XattrCont { .. } => vec![(8, 1), (9, 4), (12, 4)],
        };
        if let Structure::Indirect { .. } = self {
            let p = block_size / 4 - 1;
            f.extend([(4 * (p - 1), 4), (4 * (p / 2), 4)]);
        }
        f
    }

    /// Stores a valid crc in the structure's bytes (`block` is the whole block).
    pub fn reseal(&self, block: &mut [u8]) {
        let bs = block.len();
        match *self {
            Structure::Superblock => seal(&mut block[..256], SB_CRC_AT, 0),
            Structure::GroupHeader { block: b, .. } => {
                seal(&mut block[..64], super::group::CRC_AT, b)
            }
            Structure::Inode { ino, off, .. } => {
                seal(&mut block[off..off + INODE_BYTES], super::INODE_CRC_AT, ino)
            }
            Structure::Dir { ino, index, .. } => seal(block, 4, dir_salt(ino, index)),
            Structure::Indirect { block: b } | Structure::ExtentBlock { block: b } => {
                seal(block, bs - 4, b)
            }
            Structure::XattrHead { ino, .. } => seal(block, 4, ino),
            Structure::XattrCont { ino, i, .. } => seal(block, 4, super::xattr::cont_salt(ino, i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn random_and_resealed_bytes_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for i in 0..20_000u32 {
            let len = rng.gen_range(0..4200);
            let mut data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            // Plausible headers now and then, so the checks behind the magic run.
            if i % 3 == 0 && data.len() >= 8 {
                let magic: &[u8] = match i % 7 {
                    0 => b"MOAFS\0v1",
                    1 => b"MJNL\x01\0\0\0",
                    2 => b"MJNL\x02\0\0\0",
                    3 => b"\xf5\xe3\x03\0\0\0\0\0",
                    _ => &[0u8; 8],
                };
                data[..8].copy_from_slice(magic);
            }
            decode_resealed((i % COUNT as u32) as u8, &data);
        }
    }
}
