//! FITRIM (`Fs::trim`): only free blocks are discarded — a device that scribbles over what it
//! is told to discard leaves every file, the journal and fsck intact — freed blocks are
//! trimmed at once, and the arguments are checked as ext4 checks them.

use moafs_core::device::{BlockDevice, DevResult, DeviceCounters, MemDevice, Note};
use moafs_core::error::FsError;
use moafs_core::fs::{MountOptions, ShutdownFlush, ROOT_INO};
use moafs_core::Fs;
use std::sync::{Arc, Mutex};

mod common;
use common::*;

/// A device that overwrites every range it is told to discard with a pattern (a device may
/// return anything there afterwards) and keeps the ranges.
struct Scribble {
    inner: Arc<MemDevice>,
    discarded: Mutex<Vec<(u64, u64)>>,
}

impl BlockDevice for Scribble {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.inner.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.inner.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.inner.discard(offset, len)?;
        self.inner.write_at(offset, &vec![0xdb; len as usize])?;
        self.discarded.lock().unwrap().push((offset, len));
        Ok(())
    }
    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }
    fn note(&self, note: Note) {
        self.inner.note(note)
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn scribbled(mem: &Arc<MemDevice>) -> (Arc<Scribble>, Fs) {
    let dev = Arc::new(Scribble {
        inner: mem.clone(),
        discarded: Mutex::new(Vec::new()),
    });
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    (dev, fs)
}

#[test]
fn trim_discards_only_free_blocks_and_what_a_delete_just_freed() {
    let mem = new_dev(64 << 20);
    let (dev, fs) = scribbled(&mem);
    let bs = fs.geometry().block_size as u64;
    let total = fs.geometry().total_blocks * bs;
    // files kept (synced, and one only in memory), a file deleted just before the trim
    let kept = fs.create(ROOT_INO, b"kept", 0o644, ME).unwrap();
    fs.write(kept.ino, 0, &pattern(3 << 20, 1)).unwrap();
    let gone = fs.create(ROOT_INO, b"gone", 0o644, ME).unwrap();
    fs.write(gone.ino, 0, &pattern(8 << 20, 2)).unwrap();
    fs.sync().unwrap();
    let fresh = fs.create(ROOT_INO, b"fresh", 0o644, ME).unwrap();
    fs.write(fresh.ino, 0, &pattern(100_000, 3)).unwrap();
    let gone_blocks: Vec<u64> = fs
        .block_map(gone.ino)
        .unwrap()
        .into_iter()
        .filter(|&b| b != 0)
        .collect();
    assert_eq!(gone_blocks.len() as u64, (8 << 20) / bs);
    fs.unlink(ROOT_INO, b"gone").unwrap();

    let trimmed = fs.trim(0, u64::MAX, 0).unwrap();
    // every free block but none other (statfs counts all free, the indirect blocks too)
    let free = fs.statfs().free_blocks * bs;
    assert!(trimmed <= free, "trimmed {trimmed} of {free} free");
    assert!(
        trimmed + (1 << 20) >= free,
        "trimmed {trimmed} of {free} free"
    );
    let ranges = dev.discarded.lock().unwrap().clone();
    assert_eq!(ranges.iter().map(|r| r.1).sum::<u64>(), trimmed);
    assert!(ranges
        .iter()
        .all(|&(o, n)| o % bs == 0 && n % bs == 0 && o + n <= total));
    // the deleted file's blocks among them: what a delete just freed is trimmed at once
    let in_ranges = |b: u64| ranges.iter().any(|&(o, n)| (o..o + n).contains(&(b * bs)));
    assert!(gone_blocks.iter().all(|&b| in_ranges(b)));

    // the scribbled blocks were free: files read back, also after a remount; fsck clean
    let check = |fs: &Fs| {
        let k = fs.lookup(ROOT_INO, b"kept").unwrap().ino;
        assert_eq!(fs.read(k, 0, 3 << 20).unwrap(), pattern(3 << 20, 1));
        let f = fs.lookup(ROOT_INO, b"fresh").unwrap().ino;
        assert_eq!(fs.read(f, 0, 100_000).unwrap(), pattern(100_000, 3));
        assert!(matches!(
            fs.lookup(ROOT_INO, b"gone"),
            Err(FsError::NotFound)
        ));
    };
    check(&fs);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&mem);
    let (_dev, fs) = scribbled(&mem);
    check(&fs);

    // a second trim discards the same free space again (nothing is remembered); a minimum
    // run length over every free run discards nothing; a range stops at the end
    let again = fs.trim(0, u64::MAX, 0).unwrap();
    assert!(again >= trimmed - (1 << 20), "{again} {trimmed}");
    let group = fs.geometry().blocks_per_group as u64 * bs;
    assert!(fs.trim(0, u64::MAX, group).unwrap() < again);
    let tail = fs.trim(total - 16 * bs, u64::MAX, 0).unwrap();
    assert!(tail <= 16 * bs, "{tail}");
    fs.unmount().unwrap();
    fsck_clean(&mem);
}

#[test]
fn trim_refuses_what_ext4_refuses() {
    let mem = new_dev(32 << 20);
    let fs = mount(&mem);
    let bs = fs.geometry().block_size as u64;
    let total = fs.geometry().total_blocks * bs;
    let group = fs.geometry().blocks_per_group as u64 * bs;
    let einval = |r: Result<u64, FsError>| {
        assert!(
            matches!(&r, Err(e) if e.to_errno() == libc::EINVAL),
            "{r:?}"
        )
    };
    einval(fs.trim(total, u64::MAX, 0)); // start past the end
    einval(fs.trim(u64::MAX, 1 << 20, 0));
    einval(fs.trim(0, 0, 0)); // under a block
    einval(fs.trim(0, bs - 1, 0));
    einval(fs.trim(0, u64::MAX, group + 1)); // minimum over a group
    assert!(fs.trim(total - bs, bs, 0).is_ok());
    fs.unmount().unwrap();
    drop(fs);

    let ro = mount_with(
        &mem,
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    );
    assert!(matches!(ro.trim(0, u64::MAX, 0), Err(FsError::ReadOnly)));
    drop(ro);
    let fs = mount(&mem);
    fs.shutdown(ShutdownFlush::All).unwrap();
    assert!(matches!(fs.trim(0, u64::MAX, 0), Err(FsError::ShutDown)));
}
