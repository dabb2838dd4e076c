//! Entry points for fuzzing the decoders (`fuzz/`) and for the corrupt-input tests: arbitrary
//! bytes are decoded as is, and again with a valid crc stored in them, so that the field
//! checks behind the crc are exercised too. The only requirement is not to panic.

use super::journal::{Commit, Descriptor};
use super::{
    decode_indirect, dir_salt, seal, DirBlock, DiskInode, GroupHeader, Superblock, XattrBlock,
    INODE_BYTES, SB_CRC_AT,
};

/// Structures a fuzz input can be decoded as (`kind % COUNT`).
pub const COUNT: u8 = 8;

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
        2 => seal(&mut b[..INODE_BYTES], super::inode::CRC_AT, 5),
        3 => seal(&mut b, 4, dir_salt(5, 0)),
        4 => {
            let at = b.len() - 4;
            seal(&mut b, at, 7)
        }
        5 => seal(&mut b, 4, 5),
        _ => {
            let at = b.len() - 4;
            seal(&mut b, at, 9)
        }
    }
    raw + decode(kind, &b)
}

fn decode(kind: u8, b: &[u8]) -> usize {
    let ok = match kind % COUNT {
        0 => Superblock::decode(b, 0).is_ok(),
        1 => GroupHeader::decode(b, 7, 0).is_ok(),
        2 => DiskInode::decode(&b[..INODE_BYTES], 5, 0).is_ok(),
        3 => DirBlock::decode(b, 5, 0, 0).is_ok(),
        4 => decode_indirect(b, 7).is_ok(),
        5 => match XattrBlock::decode_head(b, 5, 0, 1 << 20) {
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
        _ => matches!(Commit::decode(b, 9, 0), Ok(Some(_))),
    };
    ok as usize
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
                    _ => &[0u8; 8],
                };
                data[..8].copy_from_slice(magic);
            }
            decode_resealed((i % COUNT as u32) as u8, &data);
        }
    }
}
