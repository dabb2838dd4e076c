//! Fault device: power cuts and injected I/O errors for crash tests.
//!
//! Design notes (after littlefs's emulated block device, Fxfs's fake device and CrashMonkey):
//!
//! * The wrapped device is the *durable medium*. A write is not durable when it returns, only
//!   after the next `flush`: until then it sits in an ordered in-memory list of volatile writes,
//!   exactly the window in which a real disk's write cache may lose, reorder or tear it.
//!   Reads see the volatile writes (they are laid over the durable contents in issue order),
//!   because a running system does see its own writes.
//! * `flush` applies the volatile writes in order to the medium and then flushes the medium.
//! * A crash is explored *offline*: [`FaultDevice::crash_image`] builds the image the medium
//!   would hold after a power cut, from a copy of the durable contents plus a chosen subset of
//!   the volatile writes ([`CutMode`]). The harness mounts a fresh `MemDevice` over that image
//!   and checks the file system's invariants. The device itself is not changed, so one run can
//!   be cut in many ways.
//! * [`CutMode::Random`] keeps each volatile write independently (a later write may survive an
//!   earlier one being lost: reordering) and may tear one kept write, writing only a prefix of
//!   its 512-byte sectors; sectors themselves are atomic, as on real disks. Kept writes are
//!   applied in issue order, so overlapping writes never un-happen in the wrong order. Every
//!   choice comes from a seeded RNG, so a failing seed reproduces.
//! * `fail_after_writes` models the moment of the cut during a live run: after that many write
//!   requests every request fails with [`DeviceError::Injected`], so the engine stops where it
//!   stood; `read_error_at`/`write_error_at` inject a failure for any request touching a byte.
//! * Faults can also be switched on while the device is in use, by byte range
//!   ([`FaultDevice::fail_reads`], [`FaultDevice::fail_writes`]: a medium error on some
//!   blocks) and for flushes ([`FaultDevice::fail_flushes`]: a flush that fails while writes
//!   succeed; its writes stay volatile, so a power cut may still drop them).
//! * `discard` is counted but never changes contents (the trait allows a no-op), so crash
//!   images do not depend on when hints were given.
//! * Everything runs under one mutex: this is a test device, and a single lock makes reads,
//!   flushes and crash images trivially consistent with each other. Reads scan the volatile
//!   list, which is short between flushes.

use super::{
    check_range, iov_len, BlockDevice, DevResult, DeviceCounters, DeviceError, DeviceStats,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Mutex};

/// Size of an atomic sector when a write is torn, bytes.
const SECTOR_BYTES: u64 = 512;

/// What to inject.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Seed of [`CutMode::Random`].
    pub seed: u64,
    /// After this many successful write requests, every request fails (the power is off).
    pub fail_after_writes: Option<u64>,
    /// Any read touching this byte offset fails.
    pub read_error_at: Option<u64>,
    /// Any write touching this byte offset fails.
    pub write_error_at: Option<u64>,
}

/// Which unflushed writes reach the medium in a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutMode {
    /// None of them.
    DropAll,
    /// The first `k` in issue order (all of them if there are fewer).
    KeepPrefix(usize),
    /// Each kept or dropped at random, one kept write possibly torn; seeded by `config.seed`.
    Random,
    /// Like `Random`, with an explicit seed (to cut one run in many ways).
    RandomSeed(u64),
}

struct State {
    /// Volatile writes in issue order: (offset, bytes).
    pending: Vec<(u64, Vec<u8>)>,
    writes_total: u64,
    flushes_total: u64,
    powered_off: bool,
    /// Byte ranges (offset, len) whose reads or writes fail.
    bad_reads: Vec<(u64, u64)>,
    bad_writes: Vec<(u64, u64)>,
    fail_flushes: bool,
}

/// Whether a request of `len` bytes at `offset` touches one of the (offset, len) ranges.
pub(crate) fn in_ranges(ranges: &[(u64, u64)], offset: u64, len: u64) -> bool {
    ranges
        .iter()
        .any(|&(o, l)| offset < o.saturating_add(l) && o < offset + len.max(1))
}

/// A device that keeps unflushed writes volatile and can simulate power cuts.
pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    config: FaultConfig,
    state: Mutex<State>,
    stats: DeviceStats,
}

/// Whether `[offset, offset+len)` contains `byte`.
fn touches(offset: u64, len: u64, byte: Option<u64>) -> bool {
    byte.is_some_and(|b| b >= offset && b - offset < len)
}

/// Copies the part of the write `(w_off, data)` that overlaps `[offset, offset+buf.len())`.
fn overlay(offset: u64, buf: &mut [u8], w_off: u64, data: &[u8]) {
    let start = offset.max(w_off);
    let end = (offset + buf.len() as u64).min(w_off + data.len() as u64);
    if start < end {
        let (b, d, n) = (start - offset, start - w_off, end - start);
        buf[b as usize..(b + n) as usize].copy_from_slice(&data[d as usize..(d + n) as usize]);
    }
}

/// Bytes of a write at `offset` of `len` bytes that land if only its first `sectors` (aligned
/// 512-byte sectors of the medium) are written.
fn torn_len(offset: u64, len: u64, sectors: u64) -> u64 {
    if sectors == 0 {
        return 0;
    }
    let end = (offset / SECTOR_BYTES + sectors) * SECTOR_BYTES;
    (end - offset).min(len)
}

impl FaultDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, config: FaultConfig) -> Self {
        FaultDevice {
            inner,
            config,
            state: Mutex::new(State {
                pending: Vec::new(),
                writes_total: 0,
                flushes_total: 0,
                powered_off: false,
                bad_reads: Vec::new(),
                bad_writes: Vec::new(),
                fail_flushes: false,
            }),
            stats: DeviceStats::default(),
        }
    }

    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails with `Injected` if the power is off (cut, or `fail_after_writes` reached).
    fn check_power(&self, st: &State, offset: u64) -> DevResult<()> {
        let exhausted = self
            .config
            .fail_after_writes
            .is_some_and(|n| st.writes_total >= n);
        if st.powered_off || exhausted {
            return Err(DeviceError::Injected { offset });
        }
        Ok(())
    }

    /// From now on, every read touching bytes `offset..offset + len` fails (a medium error).
    pub fn fail_reads(&self, offset: u64, len: u64) {
        self.lock().bad_reads.push((offset, len));
    }

    /// From now on, every write touching bytes `offset..offset + len` fails.
    pub fn fail_writes(&self, offset: u64, len: u64) {
        self.lock().bad_writes.push((offset, len));
    }

    /// From now on (`on`), every flush fails without making anything durable, while reads
    /// and writes succeed.
    pub fn fail_flushes(&self, on: bool) {
        self.lock().fail_flushes = on;
    }

    /// Ends every fault switched on by `fail_reads`, `fail_writes` and `fail_flushes`.
    pub fn heal(&self) {
        let mut st = self.lock();
        st.bad_reads.clear();
        st.bad_writes.clear();
        st.fail_flushes = false;
    }

    /// Number of writes issued since the last flush (and so not yet durable).
    pub fn unflushed_writes(&self) -> usize {
        self.lock().pending.len()
    }

    /// Write requests accepted so far (a `writev_at` is one).
    pub fn writes_total(&self) -> u64 {
        self.lock().writes_total
    }

    /// Successful flushes so far.
    pub fn flushes_total(&self) -> u64 {
        self.lock().flushes_total
    }

    /// Whether the device has lost power (every request fails).
    pub fn powered_off(&self) -> bool {
        let st = self.lock();
        self.check_power(&st, 0).is_err()
    }

    /// Cuts the power: every later request fails. Returns the post-crash image for `mode`.
    pub fn power_cut(&self, mode: CutMode) -> DevResult<Vec<u8>> {
        self.lock().powered_off = true;
        self.crash_image(mode)
    }

    /// The contents the medium would hold after a power cut now: the durable contents plus the
    /// unflushed writes selected by `mode`. Does not change the device.
    pub fn crash_image(&self, mode: CutMode) -> DevResult<Vec<u8>> {
        let st = self.lock();
        let size = self.inner.size();
        let mut image = vec![0u8; size as usize];
        for (i, chunk) in image.chunks_mut(1 << 20).enumerate() {
            self.inner.read_at((i as u64) << 20, chunk)?;
        }
        // (index into pending, bytes of it that land), in issue order.
        let kept: Vec<(usize, u64)> = match mode {
            CutMode::DropAll => Vec::new(),
            CutMode::KeepPrefix(k) => st.pending[..k.min(st.pending.len())]
                .iter()
                .enumerate()
                .map(|(i, (_, data))| (i, data.len() as u64))
                .collect(),
            CutMode::Random | CutMode::RandomSeed(_) => {
                let seed = match mode {
                    CutMode::RandomSeed(seed) => seed,
                    _ => self.config.seed,
                };
                let writes: Vec<(u64, u64)> = st
                    .pending
                    .iter()
                    .map(|(o, d)| (*o, d.len() as u64))
                    .collect();
                random_cut(&writes, seed)
            }
        };
        for (i, bytes) in kept {
            let (offset, data) = &st.pending[i];
            overlay(0, &mut image, *offset, &data[..bytes as usize]);
        }
        Ok(image)
    }
}

/// A power cut's choice among unflushed writes given as (offset, length) in issue order:
/// each kept with probability ½, then one kept write torn at a random sector. Returns
/// (index, bytes that land) in issue order; a torn write may land 0 bytes. Seeded: the same
/// seed gives the same cut (`crashcheck` replays write logs with it).
pub fn random_cut(writes: &[(u64, u64)], seed: u64) -> Vec<(usize, u64)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kept: Vec<(usize, u64)> = writes
        .iter()
        .enumerate()
        .filter(|_| rng.gen_bool(0.5))
        .map(|(i, (_, len))| (i, *len))
        .collect();
    if !kept.is_empty() {
        let j = rng.gen_range(0..kept.len());
        let (offset, len) = (writes[kept[j].0].0, kept[j].1);
        let sectors = (offset + len).div_ceil(SECTOR_BYTES) - offset / SECTOR_BYTES;
        kept[j].1 = torn_len(offset, len, rng.gen_range(0..=sectors));
    }
    kept
}

impl BlockDevice for FaultDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let st = self.lock();
        self.check_power(&st, offset)?;
        let len = buf.len() as u64;
        check_range(offset, len, self.inner.size())?;
        if touches(offset, len, self.config.read_error_at) {
            return Err(DeviceError::Injected {
                offset: self.config.read_error_at.unwrap_or(offset),
            });
        }
        if in_ranges(&st.bad_reads, offset, len) {
            return Err(DeviceError::Injected { offset });
        }
        self.inner.read_at(offset, buf)?;
        for (w_off, data) in &st.pending {
            overlay(offset, buf, *w_off, data);
        }
        self.stats.count_read(len);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.writev_at(offset, &[buf])
    }

    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        let mut st = self.lock();
        self.check_power(&st, offset)?;
        let len = iov_len(bufs);
        check_range(offset, len, self.inner.size())?;
        if touches(offset, len, self.config.write_error_at) {
            return Err(DeviceError::Injected {
                offset: self.config.write_error_at.unwrap_or(offset),
            });
        }
        if in_ranges(&st.bad_writes, offset, len) {
            return Err(DeviceError::Injected { offset });
        }
        st.pending.push((offset, bufs.concat()));
        st.writes_total += 1;
        self.stats.count_write(len);
        Ok(())
    }

    fn flush(&self) -> DevResult<()> {
        let mut st = self.lock();
        self.check_power(&st, 0)?;
        if st.fail_flushes {
            return Err(DeviceError::Injected { offset: 0 });
        }
        for i in 0..st.pending.len() {
            let (offset, data) = &st.pending[i];
            if let Err(e) = self.inner.write_at(*offset, data) {
                st.pending.drain(..i);
                return Err(e);
            }
        }
        st.pending.clear();
        self.inner.flush()?;
        st.flushes_total += 1;
        self.stats.count_flush();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        let st = self.lock();
        self.check_power(&st, offset)?;
        check_range(offset, len, self.inner.size())?;
        self.stats.count_discard();
        Ok(())
    }

    fn counters(&self) -> DeviceCounters {
        self.stats.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::super::MemDevice;
    use super::*;

    fn setup(config: FaultConfig) -> (Arc<MemDevice>, FaultDevice) {
        let mem = Arc::new(MemDevice::new(64 * 1024));
        let inner: Arc<dyn BlockDevice> = mem.clone();
        (mem, FaultDevice::new(inner, config))
    }

    fn block(image: &[u8], i: usize) -> &[u8] {
        &image[i * 4096..(i + 1) * 4096]
    }

    #[test]
    fn unflushed_write_is_visible_but_lost_on_drop_all() {
        let (mem, dev) = setup(FaultConfig::default());
        dev.write_at(4096, &[7u8; 4096]).expect("write");
        let mut buf = [0u8; 100];
        dev.read_at(4000, &mut buf).expect("read");
        assert_eq!((buf[95], buf[96]), (0, 7));
        assert_eq!(dev.unflushed_writes(), 1);
        let image = dev.crash_image(CutMode::DropAll).expect("image");
        assert!(image.iter().all(|&b| b == 0));
        assert!(mem.snapshot().iter().all(|&b| b == 0), "medium untouched");
    }

    #[test]
    fn flushed_writes_survive() {
        let (mem, dev) = setup(FaultConfig::default());
        dev.writev_at(0, &[&[1u8; 4096], &[2u8; 4096]])
            .expect("writev");
        dev.flush().expect("flush");
        dev.write_at(8192, &[3u8; 4096]).expect("write");
        let image = dev.power_cut(CutMode::DropAll).expect("cut");
        assert_eq!(block(&image, 0), &[1u8; 4096][..]);
        assert_eq!(block(&image, 1), &[2u8; 4096][..]);
        assert_eq!(block(&image, 2), &[0u8; 4096][..]);
        assert_eq!(mem.snapshot(), image);
        assert_eq!((dev.writes_total(), dev.flushes_total()), (2, 1));
        assert!(dev.powered_off());
        assert!(matches!(dev.flush(), Err(DeviceError::Injected { .. })));
    }

    #[test]
    fn keep_prefix_keeps_exactly_a_prefix() {
        let (_mem, dev) = setup(FaultConfig::default());
        for i in 0..4u8 {
            dev.write_at(u64::from(i) * 4096, &[i + 1; 4096])
                .expect("write");
        }
        dev.write_at(0, &[9u8; 4096]).expect("overwrite");
        let image = dev.crash_image(CutMode::KeepPrefix(2)).expect("image");
        assert_eq!(block(&image, 0), &[1u8; 4096][..]);
        assert_eq!(block(&image, 1), &[2u8; 4096][..]);
        assert_eq!(block(&image, 2), &[0u8; 4096][..]);
        let all = dev.crash_image(CutMode::KeepPrefix(99)).expect("image");
        assert_eq!(block(&all, 0), &[9u8; 4096][..]);
        assert_eq!(block(&all, 3), &[4u8; 4096][..]);
    }

    #[test]
    fn random_is_reproducible_and_sector_atomic() {
        let (_mem, dev) = setup(FaultConfig {
            seed: 7,
            ..Default::default()
        });
        dev.write_at(0, &[0xAA; 64 * 1024]).expect("base");
        dev.flush().expect("flush");
        for i in 0..8u8 {
            dev.write_at(u64::from(i) * 4096, &[i + 1; 4096])
                .expect("write");
        }
        let a = dev.crash_image(CutMode::Random).expect("image");
        assert_eq!(a, dev.crash_image(CutMode::Random).expect("image"));
        assert_eq!(a, dev.crash_image(CutMode::RandomSeed(7)).expect("image"));
        let (mut distinct, mut torn) = (std::collections::HashSet::new(), 0);
        for seed in 0..64 {
            let image = dev.crash_image(CutMode::RandomSeed(seed)).expect("image");
            for i in 0..8 {
                // Each block is a prefix of new sectors followed by old ones.
                let new: Vec<bool> = block(&image, i)
                    .chunks(512)
                    .map(|s| {
                        assert!(s.iter().all(|&b| b == s[0]), "torn inside a sector");
                        s[0] == i as u8 + 1
                    })
                    .collect();
                let n = new.iter().take_while(|&&b| b).count();
                assert!(new[n..].iter().all(|&b| !b), "not a prefix: {new:?}");
                torn += usize::from(n > 0 && n < 8);
            }
            distinct.insert(image);
        }
        assert!(distinct.len() > 10, "random cuts should differ");
        assert!(torn > 0, "some write should be torn");
    }

    #[test]
    fn fail_after_writes_injects_errors() {
        let (_mem, dev) = setup(FaultConfig {
            fail_after_writes: Some(2),
            ..Default::default()
        });
        dev.write_at(0, &[1]).expect("first");
        dev.write_at(1, &[2]).expect("second");
        let err = dev.write_at(2, &[3]);
        assert!(matches!(err, Err(DeviceError::Injected { offset: 2 })));
        let mut buf = [0u8; 1];
        assert!(matches!(
            dev.read_at(0, &mut buf),
            Err(DeviceError::Injected { .. })
        ));
        assert_eq!(dev.writes_total(), 2);
        let image = dev.crash_image(CutMode::KeepPrefix(1)).expect("image");
        assert_eq!(&image[..3], &[1, 0, 0]);
    }

    #[test]
    fn error_at_byte_injects_errors() {
        let (_mem, dev) = setup(FaultConfig {
            read_error_at: Some(5000),
            write_error_at: Some(9000),
            ..Default::default()
        });
        let mut buf = [0u8; 4096];
        dev.read_at(0, &mut buf).expect("clear of 5000");
        let err = dev.read_at(4096, &mut buf);
        assert!(matches!(err, Err(DeviceError::Injected { offset: 5000 })));
        let err = dev.writev_at(4096, &[&[0u8; 4096], &[0u8; 1024]]);
        assert!(matches!(err, Err(DeviceError::Injected { offset: 9000 })));
        dev.write_at(4096, &[0u8; 4096]).expect("clear of 9000");
        assert!(matches!(
            dev.read_at(65536, &mut buf),
            Err(DeviceError::OutOfRange { .. })
        ));
    }
}
