//! Reads run outside the engine lock: they must never see another file's data, even while the
//! blocks they mapped are freed and reused by concurrent truncates, creates and commits.
mod common;
use common::*;
use moafs_core::device::{BlockDevice, DevResult, DeviceCounters, MemDevice};
use moafs_core::fs::{MountOptions, SetAttr, ROOT_INO};
use moafs_core::Fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Reads take a while, so a read outside the engine lock overlaps the writer's commits.
struct SlowReads(Arc<MemDevice>);

impl BlockDevice for SlowReads {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        std::thread::sleep(std::time::Duration::from_millis(3));
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.0.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.0.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        self.0.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.0.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.0.counters()
    }
}

#[test]
fn reads_never_see_reused_blocks() {
    let dev = new_dev(64 << 20);
    let slow: Arc<dyn BlockDevice> = Arc::new(SlowReads(dev.clone()));
    // a tiny cache, so that reads of b go to the device
    let opts = MountOptions {
        cache_bytes: 64 << 10,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(slow, opts).unwrap());
    let b = fs.create(ROOT_INO, b"b", 0o644, ME).unwrap().ino;
    let full_b = vec![b'B'; 256 << 10];
    fs.write(b, 0, &full_b).unwrap();
    fs.sync().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let got = fs.read(b, 0, 256 << 10).unwrap();
                    assert!(
                        got.iter().all(|x| *x == b'B' || *x == 0),
                        "read of b saw another file's bytes"
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for round in 0..300 {
        fs.setattr(
            b,
            &SetAttr {
                size: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        fs.sync().unwrap();
        let name = format!("c{round}");
        let c = fs.create(ROOT_INO, name.as_bytes(), 0o644, ME).unwrap().ino;
        fs.write(c, 0, &vec![b'C'; 256 << 10]).unwrap();
        fs.sync().unwrap();
        fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
        // c's blocks become free again, and b is rewritten into them: b and c keep trading
        // the same blocks, round after round
        fs.sync().unwrap();
        fs.write(b, 0, &full_b).unwrap();
        fs.sync().unwrap();
        // let the readers map b's blocks and start their (slow) device reads
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let total: u64 = readers
        .into_iter()
        .map(|h| h.join().expect("reader panicked"))
        .sum();
    assert!(total > 0);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}
