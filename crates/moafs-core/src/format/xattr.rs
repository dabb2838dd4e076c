//! Extended attributes: one block per inode (like ext4's single xattr block), or, for sets
//! that do not fit one block or hold a value of 64 KiB, a head block and continuation blocks.
//!
//! ```text
//! one block ("MXAT"):
//! 0 magic "MXAT"  4 crc32c (salt: inode number)  8 count u16  10 used u16  12 reserved u32
//! 16 entries: name_len u8 | value_len u16 | name | value
//!
//! several blocks: a head ("MXAL") and nblocks-1 continuations ("MXAC"), holding one stream
//! 0 magic "MXAL"  4 crc32c (salt: inode number)  8 count u32  12 nblocks u16
//! 14 reserved u16  16 stream_len u32  20 continuation block numbers u32 x (nblocks-1)
//! then the stream's first bytes, to the end of the block
//! continuation i (1-based): 0 magic "MXAC"  4 crc32c (salt: inode number + (i << 32))
//! 8 the stream's next bytes
//! stream entries: name_len u8 | value_len u32 | name | value
//! ```

use super::Bounds;
use super::{get_u16, get_u32, put_u16, put_u32, seal, verify};
use crate::error::{FsError, FsResult};
use std::collections::BTreeMap;

pub const XATTR_MAGIC: u32 = u32::from_le_bytes(*b"MXAT");
pub const XATTR_LARGE_MAGIC: u32 = u32::from_le_bytes(*b"MXAL");
pub const XATTR_CONT_MAGIC: u32 = u32::from_le_bytes(*b"MXAC");
/// Most blocks one inode's attributes take (head included): 256 KiB at 4 KiB blocks.
pub const XATTR_MAX_BLOCKS: usize = 64;
/// Largest value (Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX: usize = 65536;
const HEADER: usize = 16;
const LARGE_HEADER: usize = 20;
const CONT_HEADER: usize = 8;

/// What an inode's xattr block says: the whole set, or the head of a larger one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XattrHead {
    Single(BTreeMap<Vec<u8>, Vec<u8>>),
    Large {
        count: usize,
        stream_len: usize,
        /// Continuation blocks, in order.
        cont: Vec<u64>,
        /// The stream's bytes held in the head.
        first: Vec<u8>,
    },
}

fn stream_len(attrs: &BTreeMap<Vec<u8>, Vec<u8>>) -> usize {
    attrs.iter().map(|(k, v)| 5 + k.len() + v.len()).sum()
}

pub(crate) fn cont_salt(ino: u64, i: usize) -> u64 {
    ino.wrapping_add((i as u64) << 32)
}

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

    /// How many blocks `attrs` take: 1 when they fit the one-block format, else head plus
    /// continuations; `None` beyond [`XATTR_MAX_BLOCKS`].
    pub fn blocks_needed(attrs: &BTreeMap<Vec<u8>, Vec<u8>>, block_size: u32) -> Option<usize> {
        let bs = block_size as usize;
        let single = Self::encoded_len(attrs) <= bs && attrs.values().all(|v| v.len() <= 0xffff);
        if single {
            return Some(1);
        }
        let len = stream_len(attrs);
        (2..=XATTR_MAX_BLOCKS)
            .find(|&n| bs - LARGE_HEADER - 4 * (n - 1) + (n - 1) * (bs - CONT_HEADER) >= len)
    }

    /// Encodes `attrs` into `blocks` (as many as [`Self::blocks_needed`] says; the first is
    /// the one the inode points to): (block, bytes) pairs.
    pub fn encode_blocks(
        attrs: &BTreeMap<Vec<u8>, Vec<u8>>,
        ino: u64,
        block_size: u32,
        blocks: &[u64],
    ) -> Vec<(u64, Vec<u8>)> {
        let bs = block_size as usize;
        if blocks.len() == 1 {
            let x = XattrBlock {
                attrs: attrs.clone(),
            };
            return vec![(blocks[0], x.encode(ino, block_size))];
        }
        let n = blocks.len();
        let mut stream = Vec::with_capacity(stream_len(attrs));
        for (k, v) in attrs {
            stream.push(k.len() as u8);
            stream.extend_from_slice(&(v.len() as u32).to_le_bytes());
            stream.extend_from_slice(k);
            stream.extend_from_slice(v);
        }
        let mut out = Vec::with_capacity(n);
        let mut head = vec![0u8; bs];
        put_u32(&mut head, 0, XATTR_LARGE_MAGIC);
        put_u32(&mut head, 8, attrs.len() as u32);
        put_u16(&mut head, 12, n as u16);
        put_u32(&mut head, 16, stream.len() as u32);
        for (i, b) in blocks[1..].iter().enumerate() {
            put_u32(&mut head, LARGE_HEADER + 4 * i, *b as u32);
        }
        let start = LARGE_HEADER + 4 * (n - 1);
        let first = (bs - start).min(stream.len());
        head[start..start + first].copy_from_slice(&stream[..first]);
        seal(&mut head, 4, ino);
        out.push((blocks[0], head));
        let mut pos = first;
        for (i, b) in blocks[1..].iter().enumerate() {
            let mut c = vec![0u8; bs];
            put_u32(&mut c, 0, XATTR_CONT_MAGIC);
            let take = (bs - CONT_HEADER).min(stream.len() - pos);
            c[CONT_HEADER..CONT_HEADER + take].copy_from_slice(&stream[pos..pos + take]);
            pos += take;
            seal(&mut c, 4, cont_salt(ino, i + 1));
            out.push((*b, c));
        }
        out
    }

    /// Decodes the block an inode points to.
    /// Continuation pointers must be distinct data blocks (`bounds`) other than the head.
    pub fn decode_head(b: &[u8], ino: u64, block: u64, bounds: &Bounds) -> FsResult<XattrHead> {
        if get_u32(b, 0) != XATTR_LARGE_MAGIC {
            return Self::decode(b, ino, block).map(|x| XattrHead::Single(x.attrs));
        }
        let bad = |what: &str| FsError::corrupt("xattr block", block, what.to_string());
        verify(b, 4, ino, "xattr block", block)?;
        let count = get_u32(b, 8) as usize;
        let n = get_u16(b, 12) as usize;
        let len = get_u32(b, 16) as usize;
        if !(2..=XATTR_MAX_BLOCKS).contains(&n) || LARGE_HEADER + 4 * (n - 1) > b.len() {
            return Err(bad("bad block count"));
        }
        let start = LARGE_HEADER + 4 * (n - 1);
        if len > (b.len() - start) + (n - 1) * (b.len() - CONT_HEADER) {
            return Err(bad("stream longer than its blocks"));
        }
        let cont: Vec<u64> = (0..n - 1)
            .map(|i| u64::from(get_u32(b, LARGE_HEADER + 4 * i)))
            .collect();
        if cont.iter().any(|&c| !bounds.is_data_block(c) || c == block) {
            return Err(bad("continuation block outside the data area"));
        }
        if (1..cont.len()).any(|i| cont[..i].contains(&cont[i])) {
            return Err(bad("continuation block named twice"));
        }
        let first = (b.len() - start).min(len);
        Ok(XattrHead::Large {
            count,
            stream_len: len,
            cont,
            first: b[start..start + first].to_vec(),
        })
    }

    /// Checks continuation block `i` (1-based) and returns its stream bytes.
    pub fn decode_cont(b: &[u8], ino: u64, i: usize, block: u64) -> FsResult<&[u8]> {
        if get_u32(b, 0) != XATTR_CONT_MAGIC {
            return Err(FsError::corrupt("xattr continuation", block, "bad magic"));
        }
        verify(b, 4, cont_salt(ino, i), "xattr continuation", block)?;
        Ok(&b[CONT_HEADER..])
    }

    /// The attributes of a whole stream (head bytes, then the continuations' in order).
    pub fn decode_stream(
        stream: &[u8],
        count: usize,
        block: u64,
    ) -> FsResult<BTreeMap<Vec<u8>, Vec<u8>>> {
        let bad = |what: &str| FsError::corrupt("xattr block", block, what.to_string());
        let mut attrs = BTreeMap::new();
        let mut pos = 0;
        for _ in 0..count {
            if pos + 5 > stream.len() {
                return Err(bad("entry overruns the stream"));
            }
            let kl = stream[pos] as usize;
            let vl = u32::from_le_bytes(stream[pos + 1..pos + 5].try_into().unwrap()) as usize;
            if kl == 0 || vl > XATTR_VALUE_MAX || pos + 5 + kl + vl > stream.len() {
                return Err(bad("bad entry length"));
            }
            let k = stream[pos + 5..pos + 5 + kl].to_vec();
            let v = stream[pos + 5 + kl..pos + 5 + kl + vl].to_vec();
            attrs.insert(k, v);
            pos += 5 + kl + vl;
        }
        Ok(attrs)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One group of `total` blocks (5 metadata blocks), no journal.
    fn bounds(total: u64) -> Bounds {
        Bounds::without_log(crate::format::Geometry::new(4096, total, 32768, 16))
    }

    fn set(n: usize, value_len: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
        (0..n)
            .map(|i| {
                (
                    format!("user.attribute_{i}").into_bytes(),
                    vec![i as u8; value_len],
                )
            })
            .collect()
    }

    fn round_trip(attrs: &BTreeMap<Vec<u8>, Vec<u8>>, bs: u32) -> usize {
        let n = XattrBlock::blocks_needed(attrs, bs).expect("fits");
        let blocks: Vec<u64> = (100..100 + n as u64).collect();
        let enc = XattrBlock::encode_blocks(attrs, 7, bs, &blocks);
        assert_eq!(enc.len(), n);
        let back = match XattrBlock::decode_head(&enc[0].1, 7, 100, &bounds(1000)).unwrap() {
            XattrHead::Single(a) => a,
            XattrHead::Large {
                count,
                stream_len,
                cont,
                mut first,
            } => {
                assert_eq!(cont, blocks[1..].to_vec());
                for (i, (b, bytes)) in enc[1..].iter().enumerate() {
                    first.extend_from_slice(XattrBlock::decode_cont(bytes, 7, i + 1, *b).unwrap());
                }
                first.truncate(stream_len);
                XattrBlock::decode_stream(&first, count, 100).unwrap()
            }
        };
        assert_eq!(&back, attrs);
        n
    }

    #[test]
    fn small_sets_keep_one_block_and_large_ones_span_blocks() {
        assert_eq!(round_trip(&set(3, 10), 4096), 1);
        assert!(round_trip(&set(1000, 8), 4096) > 1);
        assert!(round_trip(&set(1, 65536), 4096) > 16);
        assert!(round_trip(&set(2, 65536), 16384) > 8);
        assert_eq!(XattrBlock::blocks_needed(&set(5, 65536), 4096), None);
    }

    #[test]
    fn damage_is_found() {
        let attrs = set(1, 65536);
        let n = XattrBlock::blocks_needed(&attrs, 4096).unwrap();
        let blocks: Vec<u64> = (100..100 + n as u64).collect();
        let enc = XattrBlock::encode_blocks(&attrs, 7, 4096, &blocks);
        // a continuation from another inode or another place in the chain is refused
        assert!(XattrBlock::decode_cont(&enc[1].1, 8, 1, 101).is_err());
        assert!(XattrBlock::decode_cont(&enc[1].1, 7, 2, 101).is_err());
        let mut head = enc[0].1.clone();
        head[21] ^= 1;
        assert!(XattrBlock::decode_head(&head, 7, 100, &bounds(1000)).is_err());
        // pointers outside the image
        assert!(XattrBlock::decode_head(&enc[0].1, 7, 100, &bounds(110)).is_err());
        // a continuation named twice, or naming the head
        let mut twice = enc[0].1.clone();
        twice.copy_within(20..24, 24);
        seal(&mut twice, 4, 7);
        assert!(XattrBlock::decode_head(&twice, 7, 100, &bounds(1000)).is_err());
        let mut own = enc[0].1.clone();
        own[20..24].copy_from_slice(&100u32.to_le_bytes());
        seal(&mut own, 4, 7);
        assert!(XattrBlock::decode_head(&own, 7, 100, &bounds(1000)).is_err());
        // the pristine head passes (the damage above is what is refused)
        assert!(XattrBlock::decode_head(&enc[0].1, 7, 100, &bounds(1000)).is_ok());
    }
}
