//! Extended attributes: one block per inode (like ext4's single xattr block).
//!
//! ```text
//! 0 magic "MXAT"  4 crc32c (salt: inode number)  8 count u16  10 used u16  12 reserved u32
//! 16 entries: name_len u8 | value_len u16 | name | value
//! ```

use super::{get_u16, get_u32, put_u16, put_u32, seal, verify};
use crate::error::{FsError, FsResult};
use std::collections::BTreeMap;

pub const XATTR_MAGIC: u32 = u32::from_le_bytes(*b"MXAT");
const HEADER: usize = 16;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XattrBlock {
    pub attrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl XattrBlock {
    /// Bytes the attributes need when encoded.
    pub fn encoded_len(attrs: &BTreeMap<Vec<u8>, Vec<u8>>) -> usize {
        HEADER
            + attrs
                .iter()
                .map(|(k, v)| 3 + k.len() + v.len())
                .sum::<usize>()
    }

    pub fn encode(&self, ino: u64, block_size: u32) -> Vec<u8> {
        let mut b = vec![0u8; block_size as usize];
        put_u32(&mut b, 0, XATTR_MAGIC);
        let mut pos = HEADER;
        for (k, v) in &self.attrs {
            b[pos] = k.len() as u8;
            put_u16(&mut b, pos + 1, v.len() as u16);
            b[pos + 3..pos + 3 + k.len()].copy_from_slice(k);
            b[pos + 3 + k.len()..pos + 3 + k.len() + v.len()].copy_from_slice(v);
            pos += 3 + k.len() + v.len();
        }
        put_u16(&mut b, 8, self.attrs.len() as u16);
        put_u16(&mut b, 10, (pos - HEADER) as u16);
        seal(&mut b, 4, ino);
        b
    }

    pub fn decode(b: &[u8], ino: u64, block: u64) -> FsResult<XattrBlock> {
        if get_u32(b, 0) != XATTR_MAGIC {
            return Err(FsError::corrupt("xattr block", block, "bad magic"));
        }
        verify(b, 4, ino, "xattr block", block)?;
        let count = get_u16(b, 8) as usize;
        let end = HEADER + get_u16(b, 10) as usize;
        if end > b.len() {
            return Err(FsError::corrupt(
                "xattr block",
                block,
                "used bytes exceed block",
            ));
        }
        let mut pos = HEADER;
        let mut attrs = BTreeMap::new();
        for _ in 0..count {
            if pos + 3 > end {
                return Err(FsError::corrupt(
                    "xattr block",
                    block,
                    "entry overruns block",
                ));
            }
            let kl = b[pos] as usize;
            let vl = get_u16(b, pos + 1) as usize;
            if kl == 0 || pos + 3 + kl + vl > end {
                return Err(FsError::corrupt("xattr block", block, "bad entry length"));
            }
            let k = b[pos + 3..pos + 3 + kl].to_vec();
            let v = b[pos + 3 + kl..pos + 3 + kl + vl].to_vec();
            attrs.insert(k, v);
            pos += 3 + kl + vl;
        }
        Ok(XattrBlock { attrs })
    }
}
