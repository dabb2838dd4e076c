#![allow(dead_code)]
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::fs::{Caller, MountOptions};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::Arc;

pub const ME: Caller = Caller::ROOT;

pub fn new_dev(size: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(size));
    mkfs(dev.as_ref(), &MkfsOptions::default()).expect("mkfs");
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
