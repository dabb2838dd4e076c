//! A read-only view of a device with some blocks replaced: how `fsck -n` and read-only mounts
//! see an image whose journal still needs replaying, without writing to it.

use super::{BlockDevice, DevResult, DeviceCounters, DeviceError};
use std::collections::BTreeMap;

pub struct OverlayDevice<D: BlockDevice> {
    base: D,
    block_size: u64,
    blocks: BTreeMap<u64, Vec<u8>>,
}

impl<D: BlockDevice> OverlayDevice<D> {
    /// `blocks`: block number → full-block contents shown instead of the device's.
    pub fn new(base: D, block_size: u32, blocks: BTreeMap<u64, Vec<u8>>) -> OverlayDevice<D> {
        OverlayDevice {
            base,
            block_size: block_size as u64,
            blocks,
        }
    }
}

/// Copies whole-block images (block number, `bs` bytes) over the parts of `buf` — the device's
/// bytes from byte `offset` on — that they cover.
pub(crate) fn patch_blocks<'a>(
    buf: &mut [u8],
    offset: u64,
    bs: u64,
    blocks: impl Iterator<Item = (u64, &'a [u8])>,
) {
    let end = offset + buf.len() as u64;
    for (b, data) in blocks {
        let (bstart, bend) = (b * bs, b * bs + bs);
        let (from, to) = (bstart.max(offset), bend.min(end));
        if from < to {
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&data[(from - bstart) as usize..(to - bstart) as usize]);
        }
    }
}

/// The error of a write to a device that refuses writes (EROFS).
pub(crate) fn read_only(offset: u64) -> DeviceError {
    DeviceError::Io {
        offset,
        len: 0,
        source: std::io::Error::from_raw_os_error(libc::EROFS),
    }
}

impl<D: BlockDevice> BlockDevice for OverlayDevice<D> {
    fn size(&self) -> u64 {
        self.base.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.base.read_at(offset, buf)?;
        let bs = self.block_size;
        let end = offset + buf.len() as u64;
        let shown = self.blocks.range(offset / bs..end.div_ceil(bs));
        patch_blocks(buf, offset, bs, shown.map(|(b, d)| (*b, &d[..])));
        Ok(())
    }
    fn write_at(&self, offset: u64, _buf: &[u8]) -> DevResult<()> {
        Err(read_only(offset))
    }
    fn writev_at(&self, offset: u64, _bufs: &[&[u8]]) -> DevResult<()> {
        Err(read_only(offset))
    }
    fn flush(&self) -> DevResult<()> {
        Ok(())
    }
    fn discard(&self, _offset: u64, _len: u64) -> DevResult<()> {
        Ok(())
    }
    fn counters(&self) -> DeviceCounters {
        self.base.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use std::sync::Arc;

    #[test]
    fn overlaid_blocks_win_and_writes_are_refused() {
        let base = Arc::new(MemDevice::new(4 * 4096));
        base.write_at(0, &vec![1u8; 4 * 4096]).unwrap();
        let mut m = BTreeMap::new();
        m.insert(2, vec![9u8; 4096]);
        let o = OverlayDevice::new(base, 4096, m);
        let mut buf = vec![0u8; 3 * 4096];
        o.read_at(4096 + 100, &mut buf[..2 * 4096]).unwrap();
        assert!(buf[..4096 - 100].iter().all(|&b| b == 1));
        assert!(buf[4096 - 100..2 * 4096 - 100].iter().all(|&b| b == 9));
        assert!(buf[2 * 4096 - 100..2 * 4096].iter().all(|&b| b == 1));
        assert!(o.write_at(0, &[0]).is_err());
    }
}
