#![allow(dead_code)]
use moafs_core::device::{BlockDevice, DevResult, DeviceCounters, MemDevice};
use moafs_core::fs::{Caller, MountOptions};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::Arc;

pub const ME: Caller = Caller::ROOT;

pub fn new_dev(size: u64) -> Arc<MemDevice> {
    new_dev_journal(size, None)
}

/// A fresh image of `size` bytes whose files map their blocks by pointers (disk version 2).
pub fn new_dev_pointers(size: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(size));
    let opts = MkfsOptions {
        pointer_maps: true,
        ..MkfsOptions::default()
    };
    mkfs(dev.as_ref(), &opts).expect("mkfs");
    dev
}

/// A fresh image of `size` bytes with a journal of `journal_blocks` (None: mkfs's default).
pub fn new_dev_journal(size: u64, journal_blocks: Option<u32>) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(size));
    mkfs(
        dev.as_ref(),
        &MkfsOptions {
            journal_blocks,
            ..MkfsOptions::default()
        },
    )
    .expect("mkfs");
    dev
}

pub fn mount(dev: &Arc<MemDevice>) -> Fs {
    Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).expect("mount")
}

pub fn mount_with(dev: &Arc<MemDevice>, opts: MountOptions) -> Fs {
    Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts).expect("mount")
}

pub fn fsck_clean(dev: &Arc<MemDevice>) {
    let r = moafs_core::fsck::fsck(dev.as_ref(), false).expect("fsck runs");
    assert!(r.errors.is_empty(), "fsck errors: {:#?}", r.errors);
}

/// A device whose reads and flushes take a while (the rest passes straight through): a read
/// outside the engine lock overlaps commits, fsyncs pile up behind a commit's flush.
pub struct Slow {
    pub inner: Arc<dyn BlockDevice>,
    pub read: std::time::Duration,
    pub flush: std::time::Duration,
}

impl BlockDevice for Slow {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        std::thread::sleep(self.read);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.inner.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.inner.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        std::thread::sleep(self.flush);
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.inner.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }
}
