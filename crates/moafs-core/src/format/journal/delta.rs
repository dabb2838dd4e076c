//! Delta records (FORMAT.md, the journal): the bytes of a block that changed, relative to its
//! image in older transactions or at home, packed into payload blocks or a compact header.
//! How a commit finds them (`diff_deltas_within`, a word at a time) and how replay reads them.

use crate::format::{get_u32, get_u64, put_u32, put_u64};

/// Bytes of a delta record's header: u64 block, u32 offset, u32 length.
pub const DELTA_HEADER: usize = 16;

/// A change of `bytes` at `offset` of block `target`, relative to the block's image in the
/// transactions before (or at home).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    pub target: u64,
    pub offset: u32,
    pub bytes: Vec<u8>,
}

impl Delta {
    /// Bytes the record takes in a payload block (8-byte aligned).
    pub fn len(&self) -> usize {
        DELTA_HEADER + self.bytes.len().div_ceil(8) * 8
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Packs delta records into payload blocks (a record never spans two): (count, block).
pub fn pack_deltas(deltas: &[Delta], block_size: u32) -> Vec<(u64, Vec<u8>)> {
    // (the same rule as `delta_blocks`, which counts without packing)
    let bs = block_size as usize;
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut at = bs;
    for d in deltas {
        if at + d.len() > bs {
            out.push((0, vec![0u8; bs]));
            at = 0;
        }
        let (count, b) = out.last_mut().expect("pushed above");
        at += put_deltas(&mut b[at..], std::slice::from_ref(d));
        *count += 1;
    }
    out
}

/// How many payload blocks [`pack_deltas`] fills with `deltas`, without packing them: each
/// record goes into the current block if it fits, else starts the next one.
pub fn delta_blocks(deltas: &[Delta], block_size: u32) -> usize {
    let bs = block_size as usize;
    let (mut blocks, mut at) = (0, bs);
    for d in deltas {
        if at + d.len() > bs {
            blocks += 1;
            at = 0;
        }
        at += d.len();
    }
    blocks
}

/// Writes `deltas` one after another from the start of `area` (which holds them: the caller
/// checked); returns the bytes taken.
pub(super) fn put_deltas(area: &mut [u8], deltas: &[Delta]) -> usize {
    let mut at = 0;
    for d in deltas {
        put_u64(area, at, d.target);
        put_u32(area, at + 8, d.offset);
        put_u32(area, at + 12, d.bytes.len() as u32);
        area[at + DELTA_HEADER..at + DELTA_HEADER + d.bytes.len()].copy_from_slice(&d.bytes);
        at += d.len();
    }
    at
}

/// The delta records of a payload block whose tag says it holds `count`; `None` if they do
/// not fit in it or one reaches past the end of its block.
pub fn decode_deltas(payload: &[u8], count: u64) -> Option<Vec<Delta>> {
    decode_deltas_in(payload, count, payload.len())
}

/// `count` delta records from the start of `area`, for blocks of `bs` bytes; `None` if they
/// do not fit in `area` or one reaches past the end of its block.
pub(super) fn decode_deltas_in(area: &[u8], count: u64, bs: usize) -> Option<Vec<Delta>> {
    let payload = area;
    let mut at = 0usize;
    let mut out = Vec::new();
    for _ in 0..count {
        if at + DELTA_HEADER > payload.len() {
            return None;
        }
        let (target, offset, len) = (
            get_u64(payload, at),
            get_u32(payload, at + 8),
            get_u32(payload, at + 12) as usize,
        );
        let start = at + DELTA_HEADER;
        if len == 0 || start + len > payload.len() || offset as usize + len > bs {
            return None;
        }
        out.push(Delta {
            target,
            offset,
            bytes: payload[start..start + len].to_vec(),
        });
        at = start + len.div_ceil(8) * 8;
    }
    Some(out)
}

/// The changes from `old` to `new` (two images of block `target`) as delta records: runs of
/// differing bytes, merged across gaps shorter than a record header.
pub fn diff_deltas(target: u64, old: &[u8], new: &[u8]) -> Vec<Delta> {
    diff_deltas_within(target, old, new, usize::MAX).unwrap_or_default()
}

/// [`diff_deltas`], or `None` as soon as the records take more than `limit` bytes
/// ([`Delta::len`] summed): the caller writes the block whole then, and the rest of it is
/// not looked at. Every commit diffs each metadata block (and each data block it carries)
/// against its image in the journal under the engine lock, so equal stretches are skipped a
/// cache line, then a word, at a time, and a run of changed bytes (an append's new data) a
/// word at a time.
pub fn diff_deltas_within(target: u64, old: &[u8], new: &[u8], limit: usize) -> Option<Vec<Delta>> {
    let mut out: Vec<Delta> = Vec::new();
    let n = old.len().min(new.len());
    let (old, new) = (&old[..n], &new[..n]);
    let mut total = 0usize;
    let mut i = first_difference(old, new, 0);
    while i < n {
        let start = i;
        let mut end = i + 1;
        // Extend the run over every later difference that follows a gap of at most a record
        // header's length of equal bytes (a new record would cost more than the gap).
        let next = loop {
            while end + 8 <= n && !any_byte_zero(get_u64(old, end) ^ get_u64(new, end)) {
                end += 8; // eight more differing bytes
            }
            let k = first_difference(old, new, end);
            if k == n || k - end > DELTA_HEADER {
                break k;
            }
            end = k + 1;
        };
        let d = Delta {
            target,
            offset: start as u32,
            bytes: new[start..end].to_vec(),
        };
        total += d.len();
        if total > limit {
            return None;
        }
        out.push(d);
        i = next;
    }
    Some(out)
}

/// Whether some byte of `x` is zero (the classic bit trick: exact, no false positives).
fn any_byte_zero(x: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    x.wrapping_sub(ONES) & !x & HIGHS != 0
}

/// The first index from `from` on where `a` and `b` (of one length) differ, or their length.
fn first_difference(a: &[u8], b: &[u8], from: usize) -> usize {
    const LINE: usize = 64;
    let n = a.len();
    let mut i = from;
    while i + LINE <= n && a[i..i + LINE] == b[i..i + LINE] {
        i += LINE;
    }
    while i + 8 <= n {
        let x = get_u64(a, i) ^ get_u64(b, i);
        if x != 0 {
            return i + (x.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_blocks_counts_what_pack_deltas_fills() {
        let bs = 4096u32;
        // record lengths from one byte to a whole block's room, in many mixes (a seeded LCG)
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..300 {
            let n = round % 40;
            let deltas: Vec<Delta> = (0..n)
                .map(|i| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let len = 1 + (x >> 33) as usize % (bs as usize - DELTA_HEADER);
                    let len = if round % 3 == 0 { len % 300 + 1 } else { len };
                    Delta {
                        target: i as u64,
                        offset: 0,
                        bytes: vec![7; len],
                    }
                })
                .collect();
            assert_eq!(
                delta_blocks(&deltas, bs),
                pack_deltas(&deltas, bs).len(),
                "round {round}"
            );
        }
        assert_eq!(delta_blocks(&[], bs), 0);
    }

    /// `diff_deltas` as first written, a byte at a time: the reference the fast one must match.
    fn diff_bytewise(target: u64, old: &[u8], new: &[u8]) -> Vec<Delta> {
        let mut out: Vec<Delta> = Vec::new();
        let n = old.len().min(new.len());
        let mut i = 0;
        while i < n {
            if old[i] == new[i] {
                i += 1;
                continue;
            }
            let (start, mut end, mut j) = (i, i + 1, i + 1);
            while j < n {
                if old[j] != new[j] {
                    end = j + 1;
                } else if j - end >= DELTA_HEADER {
                    break;
                }
                j += 1;
            }
            out.push(Delta {
                target,
                offset: start as u32,
                bytes: new[start..end].to_vec(),
            });
            i = end;
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn diff_deltas_matches_the_bytewise_reference(
            len in 0usize..600,
            base in proptest::collection::vec(proptest::prelude::any::<u8>(), 600),
            edits in proptest::collection::vec((0usize..600, 1usize..300, proptest::prelude::any::<u8>()), 0..12),
            equal_bytes in proptest::collection::vec(0usize..600, 0..40),
            limit in 0usize..800,
        ) {
            let old = &base[..len];
            let mut new = old.to_vec();
            for (at, n, v) in edits {
                for b in new.iter_mut().skip(at).take(n) {
                    *b = b.wrapping_add(v | 1);
                }
            }
            // equal bytes scattered inside changed runs (gaps of every length)
            for at in equal_bytes {
                if at < len {
                    new[at] = old[at];
                }
            }
            let fast = diff_deltas(3, old, &new);
            let slow = diff_bytewise(3, old, &new);
            let key = |d: &[Delta]| d.iter().map(|x| (x.offset, x.bytes.clone())).collect::<Vec<_>>();
            proptest::prop_assert_eq!(key(&fast), key(&slow));
            // with a limit: the same records when they fit in it, else none
            let total: usize = slow.iter().map(Delta::len).sum();
            let within = diff_deltas_within(3, old, &new, limit);
            proptest::prop_assert_eq!(within.is_some(), total <= limit);
            if let Some(w) = within {
                proptest::prop_assert_eq!(key(&w), key(&slow));
            }
        }
    }
}
