//! Memory device: DRAM-class storage, and the backing of most in-process tests.

use super::{check_range, iov_len, BlockDevice, DevResult, DeviceCounters, DeviceStats};
use std::sync::RwLock;

/// A device held in memory. Writes are durable as soon as they return (there is no power cut
/// here; wrap it in a `FaultDevice` for that).
pub struct MemDevice {
    data: RwLock<Vec<u8>>,
    stats: DeviceStats,
}

impl MemDevice {
    pub fn new(size_bytes: u64) -> Self {
        MemDevice {
            data: RwLock::new(vec![0u8; size_bytes as usize]),
            stats: DeviceStats::default(),
        }
    }

    /// A device holding a copy of `bytes` (e.g. a saved image).
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        MemDevice {
            data: RwLock::new(bytes),
            stats: DeviceStats::default(),
        }
    }

    /// A copy of the whole contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.data.read().unwrap_or_else(|e| e.into_inner()).len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let data = self.data.read().unwrap_or_else(|e| e.into_inner());
        check_range(offset, buf.len() as u64, data.len() as u64)?;
        let start = offset as usize;
        buf.copy_from_slice(&data[start..start + buf.len()]);
        self.stats.count_read(buf.len() as u64);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.writev_at(offset, &[buf])
    }

    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        let mut data = self.data.write().unwrap_or_else(|e| e.into_inner());
        let total = iov_len(bufs);
        check_range(offset, total, data.len() as u64)?;
        let mut pos = offset as usize;
        for b in bufs {
            data[pos..pos + b.len()].copy_from_slice(b);
            pos += b.len();
        }
        self.stats.count_write(total);
        Ok(())
    }

    fn flush(&self) -> DevResult<()> {
        self.stats.count_flush();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        let data = self.data.read().unwrap_or_else(|e| e.into_inner());
        check_range(offset, len, data.len() as u64)?;
        self.stats.count_discard();
        Ok(())
    }

    fn counters(&self) -> DeviceCounters {
        self.stats.snapshot()
    }
}
