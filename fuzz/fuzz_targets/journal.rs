//! An image whose journal needs replaying, with fuzzer-chosen bytes of the journal region
//! changed: replay (mount), fsck: no panic, never a half-applied transaction.
#![no_main]
use libfuzzer_sys::fuzz_target;
use moafs_fuzz_base::{populated, JOURNAL_BYTES};

#[path = "base.rs"]
mod moafs_fuzz_base;

fuzz_target!(|data: &[u8]| {
    let base = populated(true);
    // Offsets land in the journal (it starts right after group 0's metadata).
    let (start, len) = JOURNAL_BYTES.get().copied().unwrap_or((0, base.len()));
    let mut img = base.to_vec();
    for p in data.chunks_exact(5) {
        let off = start + u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % len;
        img[off] ^= p[4];
    }
    moafs_check::fuzzing::exercise(img);
});
