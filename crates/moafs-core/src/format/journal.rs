//! The journal: a circular write-ahead log of whole-block images inside the image.
//!
//! A transaction occupies consecutive journal blocks and never wraps:
//!
//! ```text
//! [descriptor 0] .. [descriptor d-1] [payload 0] .. [payload n-1] [commit]
//! ```
//!
//! Each descriptor lists up to [`tags_per_descriptor`] tags, one per payload block, in payload
//! order. The commit block holds the crc32c of every descriptor and payload block of the
//! transaction, so a transaction is valid only if all of it reached the device; it can be
//! written in one request followed by one flush. Payload blocks that begin with the journal
//! magic are stored with those 4 bytes zeroed and the tag's `ESCAPED` flag set, so a scan
//! never mistakes a payload block for a descriptor. docs/FORMAT.md specifies every byte.
//!
//! A small transaction is *compact* (issue 28): one header block that holds the tags of its
//! block images, each with the crc of its payload block, and, inline, its revoke list and
//! delta records; the images follow, and there is no commit block:
//!
//! ```text
//! [compact header] [payload 0] .. [payload n-1]
//! ```
//!
//! It is valid when the header's crc and every payload's crc match: all of it reached the
//! device. A small fsync's commit is then one block plus its images, not a descriptor, a
//! revoke block, a delta block and a commit block around them.

mod delta;

use super::{get_u32, get_u64, put_u32, put_u64, seal, verify};
use crate::error::{FsError, FsResult};
pub use delta::{
    decode_deltas, delta_blocks, diff_deltas, diff_deltas_within, pack_deltas, Delta, DELTA_HEADER,
};
use delta::{decode_deltas_in, put_deltas};
use std::borrow::Cow;

pub const JOURNAL_MAGIC: &[u8; 4] = b"MJNL";
pub const KIND_DESCRIPTOR: u32 = 1;
pub const KIND_COMMIT: u32 = 2;
/// A compact transaction's header (module comment): tags with payload crcs, revokes and
/// delta records inline, no commit block.
pub const KIND_COMPACT: u32 = 3;
/// Tag kind: the payload block is a whole-block image of block `target`.
pub const TAG_BLOCK: u32 = 0;
/// Tag kind reserved for byte-log records (two-level logging): not written by this version.
pub const TAG_BYTES: u32 = 1;
/// Tag kind: the payload block is a revoke list — `target` little-endian u64 block numbers
/// from its first byte on, zeros after them. Replay applies no image of a listed block from a
/// transaction older than this one (the block was freed, or written in place, since).
pub const TAG_REVOKE: u32 = 2;
/// Tag kind: the payload block holds `target` delta records — bytes to patch into blocks
/// whose image the older transactions (or home) hold ([`Delta`]).
pub const TAG_DELTA: u32 = 3;
/// Tag flag: the payload's first 4 bytes were the journal magic and are stored as zero.
pub const TAG_ESCAPED: u32 = 1 << 8;
/// Bytes of a descriptor's header; tags follow.
pub const DESC_HEADER: usize = 64;
pub const TAG_BYTES_LEN: usize = 16;

/// Tags one descriptor block can hold (its last 4 bytes are the crc).
pub fn tags_per_descriptor(block_size: u32) -> usize {
    (block_size as usize - DESC_HEADER - 4) / TAG_BYTES_LEN
}

/// Journal blocks a transaction of `n` payload blocks takes.
pub fn txn_blocks(n: usize, block_size: u32) -> usize {
    n.div_ceil(tags_per_descriptor(block_size)).max(1) + n + 1
}

/// Journal blocks a transaction of `images` block images, `revokes` and `deltas` takes:
/// compact when they fit in one header ([`compact_fits`]), else descriptors, payloads (the
/// images, the revoke list's blocks, the packed deltas) and a commit block.
pub fn txn_len(images: usize, revokes: usize, deltas: &[Delta], block_size: u32) -> usize {
    if compact_fits(images, revokes, deltas, block_size) {
        1 + images
    } else {
        let payload =
            images + revoke_blocks(revokes, block_size) + delta_blocks(deltas, block_size);
        txn_blocks(payload, block_size)
    }
}

/// Whether a transaction of `images` block images, `revokes` and `deltas` is compact: its
/// tags, revoke list and delta records fit in one header block.
pub fn compact_fits(images: usize, revokes: usize, deltas: &[Delta], block_size: u32) -> bool {
    let inline =
        images * TAG_BYTES_LEN + revokes * 8 + deltas.iter().map(Delta::len).sum::<usize>();
    DESC_HEADER + inline + 4 <= block_size as usize
}

/// The crc a compact header's tag holds for its payload block (as written: escaped).
pub fn payload_crc(salt: u64, seq: u64, payload: &[u8]) -> u32 {
    body_crc(salt, &[&seq.to_le_bytes(), payload])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// Home block of the payload.
    pub target: u64,
    /// Kind in the low 8 bits ([`TAG_BLOCK`]), flags above ([`TAG_ESCAPED`]).
    pub flags: u32,
    /// In a compact header: the crc of the payload block ([`payload_crc`]); 0 otherwise.
    pub crc: u32,
}

/// What a compact header holds beyond its tags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inline {
    pub revokes: Vec<u64>,
    pub deltas: Vec<Delta>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub seq: u64,
    /// Every transaction up to this sequence number is known to be durable in place.
    pub checkpointed: u64,
    /// Index of this descriptor within its transaction, and their count.
    pub index: u32,
    pub count: u32,
    /// Payload blocks in the whole transaction.
    pub payload: u32,
    pub tags: Vec<Tag>,
    /// A compact header's revokes and delta records (`index` 0, `count` 1, one tag per
    /// payload); None for a descriptor.
    pub inline: Option<Inline>,
}

/// Salt of journal crcs: the file system's uuid, so that a journal block left by another
/// file system (an image copied into this one) never validates.
pub fn journal_salt(uuid: &[u8; 16]) -> u64 {
    get_u64(uuid, 0) ^ get_u64(uuid, 8)
}

impl Descriptor {
    pub fn encode(&self, block_size: u32, salt: u64) -> Vec<u8> {
        let mut b = vec![0u8; block_size as usize];
        b[0..4].copy_from_slice(JOURNAL_MAGIC);
        let kind = match self.inline {
            Some(_) => KIND_COMPACT,
            None => KIND_DESCRIPTOR,
        };
        put_u32(&mut b, 4, kind);
        put_u64(&mut b, 8, self.seq);
        put_u64(&mut b, 16, self.checkpointed);
        put_u32(&mut b, 24, self.index);
        put_u32(&mut b, 28, self.count);
        put_u32(&mut b, 32, self.payload);
        put_u32(&mut b, 36, self.tags.len() as u32);
        for (i, t) in self.tags.iter().enumerate() {
            let at = DESC_HEADER + i * TAG_BYTES_LEN;
            put_u64(&mut b, at, t.target);
            put_u32(&mut b, at + 8, t.flags);
            put_u32(&mut b, at + 12, t.crc);
        }
        if let Some(inline) = &self.inline {
            put_u32(&mut b, 40, inline.revokes.len() as u32);
            put_u32(&mut b, 44, inline.deltas.len() as u32);
            let mut at = DESC_HEADER + self.tags.len() * TAG_BYTES_LEN;
            for r in &inline.revokes {
                put_u64(&mut b, at, *r);
                at += 8;
            }
            let end = b.len() - 4;
            put_deltas(&mut b[at..end], &inline.deltas);
        }
        let crc_at = b.len() - 4;
        seal(&mut b, crc_at, salt);
        b
    }

    /// Decodes a block that should be a descriptor or a compact header; `Ok(None)` if it is
    /// not one at all.
    pub fn decode(b: &[u8], salt: u64, block: u64) -> FsResult<Option<Descriptor>> {
        if b.len() < 1024 || &b[0..4] != JOURNAL_MAGIC {
            return Ok(None);
        }
        let kind = get_u32(b, 4);
        if kind != KIND_DESCRIPTOR && kind != KIND_COMPACT {
            return Ok(None);
        }
        verify(b, b.len() - 4, salt, "journal descriptor", block)?;
        let ntags = get_u32(b, 36) as usize;
        if ntags > tags_per_descriptor(b.len() as u32) {
            return Err(FsError::corrupt(
                "journal descriptor",
                block,
                format!("{ntags} tags do not fit in a block"),
            ));
        }
        let (seq, checkpointed) = (get_u64(b, 8), get_u64(b, 16));
        if seq >= super::superblock::SEQ_LIMIT || checkpointed >= super::superblock::SEQ_LIMIT {
            // numbers count up by one from these: never near u64::MAX (decode-time rule)
            return Err(FsError::corrupt(
                "journal descriptor",
                block,
                format!("sequence number {seq} or {checkpointed} beyond 2^62"),
            ));
        }
        let tags = (0..ntags)
            .map(|i| {
                let at = DESC_HEADER + i * TAG_BYTES_LEN;
                Tag {
                    target: get_u64(b, at),
                    flags: get_u32(b, at + 8),
                    crc: get_u32(b, at + 12),
                }
            })
            .collect();
        let inline = if kind == KIND_COMPACT {
            let bad = |what: &str| FsError::corrupt("journal compact header", block, what);
            let (nrev, ndel) = (get_u32(b, 40) as usize, get_u32(b, 44) as usize);
            let at = DESC_HEADER + ntags * TAG_BYTES_LEN;
            let end = b.len() - 4;
            if at + nrev * 8 > end {
                return Err(bad("its revoke list does not fit in a block"));
            }
            let revokes = (0..nrev).map(|i| get_u64(b, at + i * 8)).collect();
            let deltas = decode_deltas_in(&b[at + nrev * 8..end], ndel as u64, b.len())
                .ok_or_else(|| bad("its delta records do not fit in a block"))?;
            if get_u32(b, 24) != 0 || get_u32(b, 28) != 1 || get_u32(b, 32) as usize != ntags {
                return Err(bad("not one header with one tag per payload block"));
            }
            Some(Inline { revokes, deltas })
        } else {
            None
        };
        Ok(Some(Descriptor {
            seq,
            checkpointed,
            index: get_u32(b, 24),
            count: get_u32(b, 28),
            payload: get_u32(b, 32),
            tags,
            inline,
        }))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub seq: u64,
    /// Blocks of the transaction before the commit block.
    pub blocks: u32,
    /// crc32c (salted) of those blocks, in order.
    pub body_crc: u32,
}

impl Commit {
    pub fn encode(&self, block_size: u32, salt: u64) -> Vec<u8> {
        let mut b = vec![0u8; block_size as usize];
        b[0..4].copy_from_slice(JOURNAL_MAGIC);
        put_u32(&mut b, 4, KIND_COMMIT);
        put_u64(&mut b, 8, self.seq);
        put_u32(&mut b, 16, self.blocks);
        put_u32(&mut b, 20, self.body_crc);
        let crc_at = b.len() - 4;
        seal(&mut b, crc_at, salt);
        b
    }

    pub fn decode(b: &[u8], salt: u64, block: u64) -> FsResult<Option<Commit>> {
        if b.len() < 1024 || &b[0..4] != JOURNAL_MAGIC || get_u32(b, 4) != KIND_COMMIT {
            return Ok(None);
        }
        verify(b, b.len() - 4, salt, "journal commit", block)?;
        Ok(Some(Commit {
            seq: get_u64(b, 8),
            blocks: get_u32(b, 16),
            body_crc: get_u32(b, 20),
        }))
    }
}

/// Running crc of a transaction body.
pub fn body_crc(salt: u64, blocks: &[&[u8]]) -> u32 {
    let mut c = crc32c::crc32c(&salt.to_le_bytes());
    for b in blocks {
        c = crc32c::crc32c_append(c, b);
    }
    c
}

/// Block numbers one revoke payload block holds.
pub fn revokes_per_block(block_size: u32) -> usize {
    block_size as usize / 8
}

/// Payload blocks a revoke list of `n` block numbers takes.
pub fn revoke_blocks(n: usize, block_size: u32) -> usize {
    n.div_ceil(revokes_per_block(block_size))
}

/// Encodes a whole transaction in the classic form: descriptors, payloads, commit, in order. Payloads are the
/// caller's blocks, borrowed; only one that must be escaped is copied.
pub fn encode_txn<'a, B: AsRef<[u8]>>(
    seq: u64,
    checkpointed: u64,
    writes: &'a [(u64, B)],
    block_size: u32,
    salt: u64,
) -> Vec<Cow<'a, [u8]>> {
    encode_txn_as(seq, checkpointed, writes, &[], &[], block_size, salt, false)
}

/// [`encode_txn`] with a revoke list and delta records: a compact transaction when they fit
/// in its header ([`compact_fits`]), else a revoke list (`TAG_REVOKE` payload blocks after
/// the images) and the delta records packed by [`pack_deltas`] (`TAG_DELTA` payload blocks,
/// last).
pub fn encode_txn_with<'a, B: AsRef<[u8]>>(
    seq: u64,
    checkpointed: u64,
    writes: &'a [(u64, B)],
    revokes: &[u64],
    deltas: &[Delta],
    block_size: u32,
    salt: u64,
) -> Vec<Cow<'a, [u8]>> {
    encode_txn_as(
        seq,
        checkpointed,
        writes,
        revokes,
        deltas,
        block_size,
        salt,
        true,
    )
}

/// [`encode_txn_with`], compact only if `may_compact` (a reader must read both forms).
#[allow(clippy::too_many_arguments)]
pub fn encode_txn_as<'a, B: AsRef<[u8]>>(
    seq: u64,
    checkpointed: u64,
    writes: &'a [(u64, B)],
    revokes: &[u64],
    deltas: &[Delta],
    block_size: u32,
    salt: u64,
    may_compact: bool,
) -> Vec<Cow<'a, [u8]>> {
    let compact = may_compact && compact_fits(writes.len(), revokes.len(), deltas, block_size);
    let per = tags_per_descriptor(block_size);
    let packed = if compact {
        Vec::new()
    } else {
        pack_deltas(deltas, block_size)
    };
    let n = if compact {
        writes.len()
    } else {
        writes.len() + revoke_blocks(revokes.len(), block_size) + packed.len()
    };
    let count = n.div_ceil(per).max(1);
    let mut out: Vec<Cow<'a, [u8]>> = Vec::with_capacity(n + count + 1);
    let mut payloads = Vec::with_capacity(n);
    let mut tags = Vec::with_capacity(n);
    let mut push = |target: u64, kind: u32, mut p: Cow<'a, [u8]>| {
        let mut flags = kind;
        if p.starts_with(JOURNAL_MAGIC) {
            p.to_mut()[0..4].fill(0);
            flags |= TAG_ESCAPED;
        }
        let crc = if compact {
            payload_crc(salt, seq, &p)
        } else {
            0
        };
        tags.push(Tag { target, flags, crc });
        payloads.push(p);
    };
    for (target, data) in writes {
        push(*target, TAG_BLOCK, Cow::Borrowed(data.as_ref()));
    }
    if compact {
        let header = Descriptor {
            seq,
            checkpointed,
            index: 0,
            count: 1,
            payload: n as u32,
            tags,
            inline: Some(Inline {
                revokes: revokes.to_vec(),
                deltas: deltas.to_vec(),
            }),
        };
        out.push(header.encode(block_size, salt).into());
        out.extend(payloads);
        return out;
    }
    for list in revokes.chunks(revokes_per_block(block_size)) {
        let mut b = vec![0u8; block_size as usize];
        for (i, blk) in list.iter().enumerate() {
            put_u64(&mut b, i * 8, *blk);
        }
        push(list.len() as u64, TAG_REVOKE, Cow::Owned(b));
    }
    for (count, b) in packed {
        push(count, TAG_DELTA, Cow::Owned(b));
    }
    for i in 0..count {
        let chunk = tags
            .get(i * per..((i + 1) * per).min(tags.len()))
            .unwrap_or(&[])
            .to_vec();
        out.push(
            Descriptor {
                seq,
                checkpointed,
                index: i as u32,
                count: count as u32,
                payload: n as u32,
                tags: chunk,
                inline: None,
            }
            .encode(block_size, salt)
            .into(),
        );
    }
    out.extend(payloads);
    let body: Vec<&[u8]> = out.iter().map(|b| &b[..]).collect();
    let crc = body_crc(salt, &body);
    let blocks = out.len() as u32;
    out.push(
        Commit {
            seq,
            blocks,
            body_crc: crc,
        }
        .encode(block_size, salt)
        .into(),
    );
    out
}

/// The block numbers of a revoke payload block whose tag says it holds `count` (its magic
/// restored if it was escaped); `None` if `count` does not fit in a block.
pub fn decode_revokes(payload: &[u8], count: u64) -> Option<Vec<u64>> {
    if count > revokes_per_block(payload.len() as u32) as u64 {
        return None;
    }
    Some(
        (0..count as usize)
            .map(|i| get_u64(payload, i * 8))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_diff_pack_and_decode() {
        let bs = 4096u32;
        let old = vec![0u8; bs as usize];
        let mut new = old.clone();
        new[10] = 1;
        new[20] = 2; // within a header's length of the first: one record
        new[1000..1300].fill(3);
        new[4095] = 4;
        let d = diff_deltas(7, &old, &new);
        assert_eq!(d.len(), 3, "{d:?}");
        assert_eq!((d[0].offset, d[0].bytes.len()), (10, 11));
        let mut patched = old.clone();
        for x in &d {
            patched[x.offset as usize..x.offset as usize + x.bytes.len()].copy_from_slice(&x.bytes);
        }
        assert_eq!(patched, new);
        // many records span payload blocks, none split
        let many: Vec<Delta> = (0..300)
            .map(|i| Delta {
                target: i,
                offset: 8,
                bytes: vec![i as u8; 40],
            })
            .collect();
        let packed = pack_deltas(&many, bs);
        assert_eq!(packed.len(), 300usize.div_ceil(4096 / 56));
        let mut back = Vec::new();
        for (count, b) in &packed {
            back.extend(decode_deltas(b, *count).expect("decodes"));
        }
        assert_eq!(back, many);
        // a count past what the block holds, or a record past the block's end, is refused
        assert!(decode_deltas(&packed[0].1, packed[0].0 + 1).is_none());
        let mut bad = packed[0].1.clone();
        put_u32(&mut bad, 8, 4090); // offset 4090 + 40 bytes > 4096
        assert!(decode_deltas(&bad, 1).is_none());
        // a whole transaction with deltas: the tags say so
        let writes = vec![(3u64, vec![5u8; bs as usize])];
        let blocks = encode_txn_as(9, 1, &writes, &[], &many[..2], bs, 5, false);
        let desc = Descriptor::decode(&blocks[0], 5, 0).unwrap().unwrap();
        assert_eq!(desc.payload, 2);
        assert_eq!(desc.tags[1].flags & 0xff, TAG_DELTA);
        assert_eq!(desc.tags[1].target, 2);
    }

    #[test]
    fn revoke_lists_round_trip_and_span_blocks() {
        let (bs, salt) = (4096u32, 77);
        let writes = vec![(10u64, vec![1u8; bs as usize])];
        // 0x4c4e4a4d is "MJNL" read little-endian: the first revoke block must be escaped
        let mut revokes: Vec<u64> = vec![0x4c4e_4a4d];
        revokes.extend(100..100 + revokes_per_block(bs) as u64);
        let blocks = encode_txn_as(5, 3, &writes, &revokes, &[], bs, salt, false);
        assert_eq!(blocks.len(), txn_blocks(1 + 2, bs));
        let d = Descriptor::decode(&blocks[0], salt, 0).unwrap().unwrap();
        assert_eq!(d.payload, 3);
        assert_eq!(d.tags[1].flags & 0xff, TAG_REVOKE);
        assert_eq!(d.tags[1].flags & TAG_ESCAPED, TAG_ESCAPED);
        assert_eq!(d.tags[1].target, revokes_per_block(bs) as u64);
        assert_eq!(d.tags[2].target, 1);
        let mut first = blocks[2].to_vec();
        first[0..4].copy_from_slice(JOURNAL_MAGIC);
        let mut got = decode_revokes(&first, d.tags[1].target).unwrap();
        got.extend(decode_revokes(&blocks[3], d.tags[2].target).unwrap());
        assert_eq!(got, revokes);
        assert!(decode_revokes(&blocks[3], revokes_per_block(bs) as u64 + 1).is_none());
    }

    #[test]
    fn txn_round_trips_and_escapes_the_magic() {
        let bs = 4096;
        let salt = 77;
        let mut evil = vec![7u8; bs as usize];
        evil[0..4].copy_from_slice(JOURNAL_MAGIC);
        let plain = vec![1u8; bs as usize];
        let writes = vec![(10, plain), (11, evil)];
        let blocks = encode_txn(5, 3, &writes, bs, salt);
        assert_eq!(blocks.len(), txn_blocks(2, bs));
        let d = Descriptor::decode(&blocks[0], salt, 0).unwrap().unwrap();
        assert_eq!((d.seq, d.checkpointed, d.payload, d.count), (5, 3, 2, 1));
        assert_eq!(d.tags[1].flags & TAG_ESCAPED, TAG_ESCAPED);
        assert_eq!(&blocks[2][0..4], &[0, 0, 0, 0]);
        assert!(Descriptor::decode(&blocks[2], salt, 2).unwrap().is_none());
        let c = Commit::decode(&blocks[3], salt, 3).unwrap().unwrap();
        let body: Vec<&[u8]> = blocks[..3].iter().map(|b| &b[..]).collect();
        assert_eq!(c.body_crc, body_crc(salt, &body));
        // Another salt (another file system) does not validate.
        assert!(Descriptor::decode(&blocks[0], salt + 1, 0).is_err());
        // A flipped bit is caught.
        let mut bad = blocks[0].to_vec();
        bad[100] ^= 1;
        assert!(Descriptor::decode(&bad, salt, 0).is_err());
    }

    #[test]
    fn sequence_numbers_near_the_end_of_u64_are_refused() {
        let (bs, salt) = (4096, 77);
        let writes = [(10u64, vec![1u8; bs as usize])];
        for (seq, checkpointed) in [(u64::MAX, 3), (5, u64::MAX - 1), (1 << 62, 0)] {
            let blocks = encode_txn(seq, checkpointed, &writes, bs, salt);
            assert!(
                Descriptor::decode(&blocks[0], salt, 0).is_err(),
                "{seq} {checkpointed}"
            );
        }
        let ok = encode_txn((1 << 62) - 1, 0, &writes, bs, salt);
        assert!(Descriptor::decode(&ok[0], salt, 0).unwrap().is_some());
    }

    #[test]
    fn small_transactions_are_compact_and_check_every_payload() {
        let (bs, salt) = (4096u32, 77);
        let mut evil = vec![7u8; bs as usize];
        evil[0..4].copy_from_slice(JOURNAL_MAGIC);
        let writes = vec![(10u64, vec![1u8; bs as usize]), (11, evil)];
        let revokes = vec![5u64, 6, 7];
        let deltas = vec![
            Delta {
                target: 3,
                offset: 100,
                bytes: vec![9; 30],
            },
            Delta {
                target: 4,
                offset: 4090,
                bytes: vec![8; 6],
            },
        ];
        let blocks = encode_txn_with(12, 8, &writes, &revokes, &deltas, bs, salt);
        // one header and the two images: no descriptor, revoke, delta or commit block
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks.len(), txn_len(2, 3, &deltas, bs));
        assert!(txn_len(2, 3, &deltas, bs) < txn_blocks(2 + 1 + 1, bs));
        let d = Descriptor::decode(&blocks[0], salt, 0).unwrap().unwrap();
        assert_eq!(
            (d.seq, d.checkpointed, d.index, d.count, d.payload),
            (12, 8, 0, 1, 2)
        );
        let inline = d.inline.clone().expect("compact");
        assert_eq!(
            (inline.revokes, inline.deltas),
            (revokes.clone(), deltas.clone())
        );
        for (k, t) in d.tags.iter().enumerate() {
            assert_eq!(t.crc, payload_crc(salt, 12, &blocks[1 + k]));
        }
        assert_eq!(d.tags[1].flags & TAG_ESCAPED, TAG_ESCAPED);
        assert!(Descriptor::decode(&blocks[2], salt, 2).unwrap().is_none());
        // a payload that did not reach the device does not match its tag's crc
        let mut torn = blocks[2].to_vec();
        torn[2000] ^= 1;
        assert_ne!(d.tags[1].crc, payload_crc(salt, 12, &torn));
        // nor does the same payload under another transaction's number
        assert_ne!(d.tags[1].crc, payload_crc(salt, 13, &blocks[2]));
        // a header whose counts claim more than the block holds is refused
        let mut bad = blocks[0].to_vec();
        put_u32(&mut bad, 44, 200);
        seal(&mut bad, bs as usize - 4, salt);
        assert!(Descriptor::decode(&bad, salt, 0).is_err());
        // too much to fit inline: the classic form, with a commit block
        let big: Vec<Delta> = (0..100)
            .map(|i| Delta {
                target: i,
                offset: 0,
                bytes: vec![1; 40],
            })
            .collect();
        assert!(!compact_fits(2, 3, &big, bs));
        let classic = encode_txn_with(12, 8, &writes, &revokes, &big, bs, salt);
        assert_eq!(classic.len(), txn_len(2, 3, &big, bs));
        let d = Descriptor::decode(&classic[0], salt, 0).unwrap().unwrap();
        assert!(d.inline.is_none());
        assert!(Commit::decode(classic.last().unwrap(), salt, 0)
            .unwrap()
            .is_some());
    }

    #[test]
    fn many_tags_span_descriptors() {
        let bs = 4096;
        let per = tags_per_descriptor(bs);
        let writes: Vec<(u64, Vec<u8>)> = (0..per as u64 + 3)
            .map(|i| (i, vec![0u8; bs as usize]))
            .collect();
        let blocks = encode_txn(1, 0, &writes, bs, 9);
        assert_eq!(blocks.len(), 2 + per + 3 + 1);
        let d1 = Descriptor::decode(&blocks[1], 9, 1).unwrap().unwrap();
        assert_eq!((d1.index, d1.count, d1.tags.len()), (1, 2, 3));
    }
}
