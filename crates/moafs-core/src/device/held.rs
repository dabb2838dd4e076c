//! The device of a read-only mount, held shut until `mount -o remount,rw` opens it: every
//! write refused and the journal's replay shown from memory, as [`OverlayDevice`] shows it
//! (nothing reaches the image while the mount is read-only). [`HeldDevice::open_up`] writes
//! the replayed blocks home — as a read-write mount's replay would, the superblock last —
//! and from then on passes every request through.
//!
//! [`OverlayDevice`]: super::OverlayDevice

use super::overlay::{patch_blocks, read_only};
use super::{BlockDevice, DevResult, DeviceCounters, Note};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

pub struct HeldDevice {
    base: Arc<dyn BlockDevice>,
    block_size: u64,
    /// The replayed blocks still shown from memory; `None` once opened up. A read holds the
    /// lock across its device read, so that it never patches with blocks already cleared
    /// nor misses them: `open_up` waits for it.
    shown: RwLock<Option<BTreeMap<u64, Vec<u8>>>>,
}

impl HeldDevice {
    /// `blocks`: block number → full-block contents shown instead of the device's (a
    /// journal's replay planned and not written).
    pub fn new(
        base: Arc<dyn BlockDevice>,
        block_size: u32,
        blocks: BTreeMap<u64, Vec<u8>>,
    ) -> HeldDevice {
        HeldDevice {
            base,
            block_size: block_size as u64,
            shown: RwLock::new(Some(blocks)),
        }
    }

    fn shown(&self) -> RwLockReadGuard<'_, Option<BTreeMap<u64, Vec<u8>>>> {
        self.shown.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether writes pass (after [`HeldDevice::open_up`]).
    pub fn is_open(&self) -> bool {
        self.shown().is_none()
    }

    /// Writes the shown blocks home — every one but the superblock, a flush, then the
    /// superblock and a flush, as a journal replay does — and lets writes through. A failure
    /// leaves the device held (a block written twice is the same block: a later `open_up`
    /// or a later mount's replay writes the rest). Opening an open device does nothing.
    pub fn open_up(&self) -> DevResult<()> {
        let mut shown = self.shown.write().unwrap_or_else(|e| e.into_inner());
        let Some(blocks) = shown.as_ref() else {
            return Ok(());
        };
        let bs = self.block_size;
        for (b, d) in blocks.range(1..) {
            self.base.write_at(b * bs, d)?;
        }
        self.base.flush()?;
        if let Some(d) = blocks.get(&0) {
            self.base.write_at(0, d)?;
            self.base.flush()?;
        }
        *shown = None;
        Ok(())
    }

    fn held(&self, offset: u64) -> DevResult<()> {
        if self.is_open() {
            Ok(())
        } else {
            Err(read_only(offset))
        }
    }
}

impl BlockDevice for HeldDevice {
    fn size(&self) -> u64 {
        self.base.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let shown = self.shown();
        self.base.read_at(offset, buf)?;
        if let Some(blocks) = shown.as_ref() {
            let bs = self.block_size;
            let end = offset + buf.len() as u64;
            let over = blocks.range(offset / bs..end.div_ceil(bs));
            patch_blocks(buf, offset, bs, over.map(|(b, d)| (*b, &d[..])));
        }
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.held(offset)?;
        self.base.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.held(offset)?;
        self.base.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        if self.is_open() {
            self.base.flush()
        } else {
            Ok(())
        }
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        if self.is_open() {
            self.base.discard(offset, len)
        } else {
            Ok(())
        }
    }
    fn counters(&self) -> DeviceCounters {
        self.base.counters()
    }
    fn records(&self) -> bool {
        self.base.records()
    }
    fn note(&self, note: Note) {
        self.base.note(note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn shown_until_opened_then_home_and_writable() {
        let base = Arc::new(MemDevice::new(4 * 4096));
        base.write_at(0, &vec![1u8; 4 * 4096]).unwrap();
        let mut m = BTreeMap::new();
        m.insert(0, vec![7u8; 4096]);
        m.insert(2, vec![9u8; 4096]);
        let h = HeldDevice::new(base.clone(), 4096, m);
        let mut buf = vec![0u8; 4096];
        h.read_at(2 * 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 9));
        assert!(h.write_at(4096, &[0; 512]).is_err());
        base.read_at(2 * 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 1), "nothing home while held");
        h.open_up().unwrap();
        assert!(h.is_open());
        for (b, v) in [(0u64, 7u8), (1, 1), (2, 9)] {
            base.read_at(b * 4096, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x == v), "block {b} home");
        }
        h.write_at(4096, &[5; 512]).unwrap();
        h.read_at(4096, &mut buf[..512]).unwrap();
        assert!(buf[..512].iter().all(|&b| b == 5));
        h.open_up().unwrap();
    }

    #[test]
    fn a_failed_open_stays_held() {
        let base = Arc::new(MemDevice::new(4 * 4096));
        let mut m = BTreeMap::new();
        m.insert(9, vec![9u8; 4096]); // past the device's end: the write fails
        let h = HeldDevice::new(base, 4096, m);
        assert!(h.open_up().is_err());
        assert!(!h.is_open());
        assert!(h.write_at(0, &[0; 512]).is_err());
    }
}
