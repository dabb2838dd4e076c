//! A device that can be closed for good: the engine's shutdown (`fs/shutdown.rs`). Until
//! [`FenceDevice::close`] every request passes through; after it every read, write, flush
//! and discard fails with EIO without reaching the device beneath — also those of a commit
//! already in flight, so that nothing a shutdown did not promise reaches the device. `close`
//! returns once the requests that passed before it have finished.

use super::{BlockDevice, DevResult, DeviceCounters, DeviceError, Note};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub struct FenceDevice {
    inner: Arc<dyn BlockDevice>,
    closed: AtomicBool,
    /// Requests inside the device beneath.
    passing: AtomicU64,
}

/// A request that passed the fence, until it is done.
struct Passing<'a>(&'a AtomicU64);

impl Drop for Passing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FenceDevice {
    pub fn new(inner: Arc<dyn BlockDevice>) -> FenceDevice {
        FenceDevice {
            inner,
            closed: AtomicBool::new(false),
            passing: AtomicU64::new(0),
        }
    }

    /// From now on nothing reaches the device beneath; returns when the requests already
    /// inside it have finished.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        while self.passing.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Lets a request pass unless the fence is closed. Counted before the check, so that
    /// `close` (which sets `closed` before it looks at the count) either waits for it or
    /// the request sees the fence closed.
    fn pass(&self, offset: u64, len: u64) -> DevResult<Passing<'_>> {
        self.passing.fetch_add(1, Ordering::SeqCst);
        let p = Passing(&self.passing);
        if self.is_closed() {
            return Err(DeviceError::Io {
                offset,
                len,
                source: std::io::Error::other("the file system was shut down"),
            });
        }
        Ok(p)
    }
}

impl BlockDevice for FenceDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let _p = self.pass(offset, buf.len() as u64)?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        let _p = self.pass(offset, buf.len() as u64)?;
        self.inner.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        let _p = self.pass(offset, super::iov_len(bufs))?;
        self.inner.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        let _p = self.pass(0, 0)?;
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        let _p = self.pass(offset, len)?;
        self.inner.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }
    fn records(&self) -> bool {
        self.inner.records()
    }
    fn note(&self, note: Note) {
        if !self.is_closed() {
            self.inner.note(note)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn nothing_passes_once_closed() {
        let mem = Arc::new(MemDevice::new(64 * 1024));
        let f = FenceDevice::new(mem.clone());
        f.write_at(0, &[7u8; 4096]).unwrap();
        f.flush().unwrap();
        let before = mem.counters();
        f.close();
        let mut buf = [0u8; 4096];
        assert!(f.read_at(0, &mut buf).is_err());
        assert!(f.write_at(4096, &[1u8; 4096]).is_err());
        assert!(f.writev_at(4096, &[&[1u8; 4096][..]]).is_err());
        assert!(f.flush().is_err());
        assert!(f.discard(0, 4096).is_err());
        assert_eq!(
            mem.counters(),
            before,
            "a request reached the device after close"
        );
        mem.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [7u8; 4096]);
    }
}
