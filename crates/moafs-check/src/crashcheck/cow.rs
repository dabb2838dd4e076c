//! [`CowDevice`]: a writable copy-on-write view of an image, so that a crash state costs the
//! pages its checks write, not an image; [`CowNvm`], the same for an NVM tier.

use moafs_core::device::{
    check_range, iov_len, BlockDevice, DevResult, DeviceCounters, Nvm, NvmCounters,
};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Page of a copy-on-write state.
const PAGE_BYTES: u64 = 4096;

/// A writable copy-on-write view of an image: what one crash state's checks write (journal
/// replay, superblock) goes to private pages.
pub struct CowDevice {
    base: Arc<Vec<u8>>,
    pages: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl CowDevice {
    pub fn new(base: Arc<Vec<u8>>) -> CowDevice {
        CowDevice {
            base,
            pages: RwLock::new(HashMap::new()),
        }
    }

    pub(super) fn write_bytes(&self, mut offset: u64, mut data: &[u8]) {
        let mut pages = self.pages.write().unwrap_or_else(|e| e.into_inner());
        while !data.is_empty() {
            let page = offset / PAGE_BYTES;
            let at = (offset % PAGE_BYTES) as usize;
            let n = data.len().min(PAGE_BYTES as usize - at);
            let p = pages.entry(page).or_insert_with(|| {
                let s = (page * PAGE_BYTES) as usize;
                let e = (s + PAGE_BYTES as usize).min(self.base.len());
                let mut b = vec![0u8; PAGE_BYTES as usize];
                b[..e - s].copy_from_slice(&self.base[s..e]);
                b.into_boxed_slice()
            });
            p[at..at + n].copy_from_slice(&data[..n]);
            offset += n as u64;
            data = &data[n..];
        }
    }
}

impl BlockDevice for CowDevice {
    fn size(&self) -> u64 {
        self.base.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        check_range(offset, buf.len() as u64, self.size())?;
        let pages = self.pages.read().unwrap_or_else(|e| e.into_inner());
        let mut pos = 0usize;
        while pos < buf.len() {
            let o = offset + pos as u64;
            let (page, at) = (o / PAGE_BYTES, (o % PAGE_BYTES) as usize);
            let n = (buf.len() - pos).min(PAGE_BYTES as usize - at);
            match pages.get(&page) {
                Some(p) => buf[pos..pos + n].copy_from_slice(&p[at..at + n]),
                None => buf[pos..pos + n].copy_from_slice(&self.base[o as usize..o as usize + n]),
            }
            pos += n;
        }
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.writev_at(offset, &[buf])
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        check_range(offset, iov_len(bufs), self.size())?;
        let mut o = offset;
        for b in bufs {
            self.write_bytes(o, b);
            o += b.len() as u64;
        }
        Ok(())
    }
    fn flush(&self) -> DevResult<()> {
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        check_range(offset, len, self.size())
    }
    fn counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
}

/// A writable copy-on-write view of a tier image (a crash state's NVM tier): the mount's
/// header store and replay go to private pages.
pub struct CowNvm(CowDevice);

impl CowNvm {
    pub fn new(base: Arc<Vec<u8>>) -> CowNvm {
        CowNvm(CowDevice::new(base))
    }

    pub(super) fn write_bytes(&self, offset: u64, data: &[u8]) {
        self.0.write_bytes(offset, data)
    }
}

impl Nvm for CowNvm {
    fn size(&self) -> u64 {
        self.0.base.len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.0.read_at(offset, buf)
    }
    fn store(&self, offset: u64, data: &[u8]) -> DevResult<()> {
        self.0.write_at(offset, data)
    }
    fn persist(&self) -> DevResult<()> {
        Ok(())
    }
    fn counters(&self) -> NvmCounters {
        NvmCounters::default()
    }
}
