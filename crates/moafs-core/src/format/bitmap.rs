//! Block and inode bitmaps (FORMAT.md section 4): bit `i` of a group's map is bit
//! `i % 8` of byte `i / 8`, set for a used block or inode. Reading, setting and scanning
//! them, for the allocator, fsck and trim alike.

/// Whether bit `i` of `map` is set (in use).
pub fn bit(map: &[u8], i: u64) -> bool {
    map[(i / 8) as usize] & (1 << (i % 8)) != 0
}

/// Sets bit `i` of `map` to `v`.
pub fn set_bit(map: &mut [u8], i: u64, v: bool) {
    let byte = &mut map[(i / 8) as usize];
    if v {
        *byte |= 1 << (i % 8);
    } else {
        *byte &= !(1 << (i % 8));
    }
}

/// First bit equal to `set` in `[from, to)`, skipping whole 64-bit words and bytes of the
/// other value quickly.
fn find_bit(map: &[u8], from: u64, to: u64, set: bool) -> Option<u64> {
    let (skip_word, skip_byte) = if set { (0, 0) } else { (u64::MAX, 0xff) };
    let mut i = from;
    while i < to {
        if i.is_multiple_of(64) && i + 64 <= to {
            let at = (i / 8) as usize;
            let word = u64::from_le_bytes(map[at..at + 8].try_into().unwrap_or([skip_byte; 8]));
            if word == skip_word {
                i += 64;
                continue;
            }
            let run = if set {
                word.trailing_zeros()
            } else {
                word.trailing_ones()
            };
            return Some(i + u64::from(run));
        }
        if i.is_multiple_of(8) && map[(i / 8) as usize] == skip_byte {
            i += 8;
            continue;
        }
        if bit(map, i) == set {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// First clear bit in `[from, to)`.
pub fn find_clear(map: &[u8], from: u64, to: u64) -> Option<u64> {
    find_bit(map, from, to, false)
}

/// First set bit in `[from, to)`.
pub fn find_set(map: &[u8], from: u64, to: u64) -> Option<u64> {
    find_bit(map, from, to, true)
}

/// Clear bits (free blocks or inodes) in `[0, len)`.
pub fn count_clear(map: &[u8], len: u64) -> u64 {
    free_extents(map, 0, len).map(|(_, n)| n).sum()
}

/// The runs of clear bits (free blocks) in `[from, to)` as (start, length), in order.
pub fn free_extents(map: &[u8], from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    let mut i = from;
    std::iter::from_fn(move || {
        let s = find_clear(map, i, to)?;
        let e = find_set(map, s, to).unwrap_or(to);
        i = e;
        Some((s, e - s))
    })
}
