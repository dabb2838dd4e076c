//! The images the fuzz targets start from (built once per process):
//! `moafs_check::fuzzing::populated_image`.
use moafs_core::device::MemDevice;
use std::sync::OnceLock;

static CLEAN: OnceLock<Vec<u8>> = OnceLock::new();
static NEEDS_REPLAY: OnceLock<Vec<u8>> = OnceLock::new();
/// (first byte, length) of the journal region.
pub static JOURNAL_BYTES: OnceLock<(usize, usize)> = OnceLock::new();

/// The populated image, cleanly unmounted or (`needs_replay`) cut right after a transaction.
pub fn populated(needs_replay: bool) -> &'static [u8] {
    let cell = if needs_replay { &NEEDS_REPLAY } else { &CLEAN };
    cell.get_or_init(|| {
        let img = moafs_check::fuzzing::populated_image(needs_replay);
        let sb = moafs_core::recovery::read_superblock(&MemDevice::from_bytes(img.clone()))
            .expect("superblock");
        let bs = sb.block_size as usize;
        let _ = JOURNAL_BYTES.set((
            sb.journal_start as usize * bs,
            sb.journal_blocks as usize * bs,
        ));
        img
    })
}
