//! Model device: charges each request the time a real disk would take, so that experiments on
//! a fast medium (memory, an SSD-backed image) still report what the paper's hardware would.
//!
//! Design notes:
//!
//! * The model wraps a real device and passes the data through unchanged; it only adds time.
//!   Times are summed in [`DeviceCounters::modelled_ns`] and, for disks, the distance the head
//!   travelled in [`DeviceCounters::seek_distance_bytes`]. The model is deterministic (no random
//!   rotational position), so two runs of the same workload report the same time.
//! * It is a single-queue device: requests are serviced one at a time under the head lock, as
//!   on the paper's disk without command queueing. With [`ModelDevice::with_sleep`] the
//!   modelled time is also slept while holding that lock, so external tools (fio, a stopwatch)
//!   feel the model, including queueing behind other requests.
//! * `writev_at` is one request: one positioning cost, then one transfer. That is precisely the
//!   saving co-writing is after, so the model must not charge it per buffer.
//! * HDD: a request starting exactly where the previous one ended is sequential and pays only
//!   transfer time. Any other request pays a seek (square-root curve of the distance, see
//!   [`HddModel::seek_ms`]) plus half a revolution of rotational latency (the average, charged
//!   deterministically), plus transfer. Reads and writes cost the same. `flush` and `discard`
//!   cost nothing: every write was already charged its media time, i.e. the modelled disk
//!   behaves as if its write cache were off.
//! * SSD: latency plus bytes over bandwidth, separately for reads and writes; no seek. A
//!   flush costs `flush_latency_us` (a consumer SSD without power-loss protection writes its
//!   cache to flash: about half a millisecond), which is what makes fsync-heavy workloads
//!   wait and group commit pay; `discard` costs nothing.
//! * Units: MB is 10^6 bytes; times are in the unit named by the field.

use super::{iov_len, BlockDevice, DevResult, DeviceCounters, DeviceStats};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A rotating disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HddModel {
    /// Spindle speed, revolutions per minute.
    pub rpm: u32,
    /// Average seek over uniformly random start and end positions, milliseconds.
    pub avg_seek_ms: f64,
    /// Shortest non-zero seek (adjacent track), milliseconds.
    pub track_to_track_ms: f64,
    /// Seek across the whole disk, milliseconds.
    pub full_stroke_ms: f64,
    /// Sustained media transfer rate, MB/s (10^6 bytes per second).
    pub transfer_mb_s: f64,
    /// Capacity the seek curve is scaled to, bytes; 0 means "the wrapped device's size".
    pub capacity_bytes: u64,
}

impl HddModel {
    /// The disk of the CW-FFS paper: 7200 RPM, 9 ms average seek, 1 ms track to track,
    /// about 60 MB/s. The full stroke is not given there; it is calibrated from the average
    /// seek (see [`HddModel::calibrated_full_stroke_ms`]), giving 16 ms, a typical value for
    /// 7200 RPM desktop disks. `capacity_bytes` is 0: [`ModelDevice::new`] uses the wrapped
    /// device's size.
    pub fn paper() -> Self {
        let avg_seek_ms = 9.0;
        let track_to_track_ms = 1.0;
        HddModel {
            rpm: 7200,
            avg_seek_ms,
            track_to_track_ms,
            full_stroke_ms: Self::calibrated_full_stroke_ms(avg_seek_ms, track_to_track_ms),
            transfer_mb_s: 60.0,
            capacity_bytes: 0,
        }
    }

    /// The full-stroke time that makes the square-root seek curve average `avg_seek_ms`.
    ///
    /// With the curve t(d) = t2t + (full − t2t)·sqrt(d / C) and two independent uniform
    /// positions, the distance fraction u = |x − y| has density 2(1 − u) on [0, 1], so
    /// E[sqrt(u)] = ∫ 2(1 − u)·u^½ du = 2·(2/3 − 2/5) = 8/15. Hence
    /// avg = t2t + (full − t2t)·8/15, i.e. full = t2t + (avg − t2t)·15/8.
    pub fn calibrated_full_stroke_ms(avg_seek_ms: f64, track_to_track_ms: f64) -> f64 {
        track_to_track_ms + (avg_seek_ms - track_to_track_ms) * 15.0 / 8.0
    }

    /// Seek time for a head movement of `distance_bytes`, milliseconds (0 for no movement).
    pub fn seek_ms(&self, distance_bytes: u64) -> f64 {
        if distance_bytes == 0 {
            return 0.0;
        }
        let fraction = (distance_bytes as f64 / self.capacity_bytes.max(1) as f64).min(1.0);
        self.track_to_track_ms + (self.full_stroke_ms - self.track_to_track_ms) * fraction.sqrt()
    }

    /// Average rotational latency (half a revolution), milliseconds.
    pub fn half_rotation_ms(&self) -> f64 {
        60_000.0 / f64::from(self.rpm.max(1)) / 2.0
    }

    /// Time to transfer `bytes` at the media rate, milliseconds.
    pub fn transfer_ms(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.transfer_mb_s * 1e6) * 1e3
    }
}

/// A flash disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SsdModel {
    /// Fixed cost of a read request, microseconds.
    pub read_latency_us: f64,
    /// Fixed cost of a write request, microseconds.
    pub write_latency_us: f64,
    /// Read bandwidth, MB/s.
    pub read_mb_s: f64,
    /// Write bandwidth, MB/s.
    pub write_mb_s: f64,
    /// Cost of a cache flush, microseconds.
    pub flush_latency_us: f64,
}

impl Default for SsdModel {
    /// A typical SATA SSD at queue depth 1: ~100 µs reads, ~50 µs writes, 550/520 MB/s,
    /// 500 µs per cache flush.
    fn default() -> Self {
        SsdModel {
            read_latency_us: 100.0,
            write_latency_us: 50.0,
            read_mb_s: 550.0,
            write_mb_s: 520.0,
            flush_latency_us: 500.0,
        }
    }
}

impl SsdModel {
    /// Cost of one request of `bytes`, nanoseconds.
    pub fn request_ns(&self, bytes: u64, write: bool) -> u64 {
        let (latency_us, mb_s) = if write {
            (self.write_latency_us, self.write_mb_s)
        } else {
            (self.read_latency_us, self.read_mb_s)
        };
        ms_to_ns(latency_us / 1e3 + bytes as f64 / (mb_s * 1e6) * 1e3)
    }
}

/// Which device to model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ModelKind {
    Hdd(HddModel),
    Ssd(SsdModel),
}

fn ms_to_ns(ms: f64) -> u64 {
    // Saturating float-to-int conversion: NaN or negative (bad parameters) become 0.
    (ms * 1e6).round() as u64
}

/// A device that passes data to `inner` and charges modelled time for every request.
pub struct ModelDevice {
    inner: Arc<dyn BlockDevice>,
    kind: ModelKind,
    sleep: bool,
    /// Byte position of the head: where the previous request ended.
    head: Mutex<u64>,
    stats: DeviceStats,
}

impl ModelDevice {
    /// Wraps `inner`. An HDD model with `capacity_bytes == 0` takes the inner device's size.
    pub fn new(inner: Arc<dyn BlockDevice>, kind: ModelKind) -> Self {
        let kind = match kind {
            ModelKind::Hdd(mut hdd) if hdd.capacity_bytes == 0 => {
                hdd.capacity_bytes = inner.size();
                ModelKind::Hdd(hdd)
            }
            other => other,
        };
        ModelDevice {
            inner,
            kind,
            sleep: false,
            head: Mutex::new(0),
            stats: DeviceStats::default(),
        }
    }

    /// When `sleep` is true every request also really sleeps its modelled time.
    pub fn with_sleep(mut self, sleep: bool) -> Self {
        self.sleep = sleep;
        self
    }

    /// The model in use (with the capacity filled in).
    pub fn kind(&self) -> &ModelKind {
        &self.kind
    }

    /// Total modelled busy time so far, nanoseconds.
    pub fn modelled_ns(&self) -> u64 {
        self.stats.snapshot().modelled_ns
    }

    /// Runs `io` on the inner device as one request of `bytes` at `offset`, then charges it.
    fn request(
        &self,
        offset: u64,
        bytes: u64,
        write: bool,
        io: impl FnOnce(&dyn BlockDevice) -> DevResult<()>,
    ) -> DevResult<()> {
        let mut head = self.head.lock().unwrap_or_else(|e| e.into_inner());
        io(self.inner.as_ref())?;
        let (ns, seek_bytes) = match &self.kind {
            ModelKind::Hdd(hdd) => {
                let distance = head.abs_diff(offset);
                let position_ms = if distance == 0 {
                    0.0
                } else {
                    hdd.seek_ms(distance) + hdd.half_rotation_ms()
                };
                *head = offset.saturating_add(bytes);
                (ms_to_ns(position_ms + hdd.transfer_ms(bytes)), distance)
            }
            ModelKind::Ssd(ssd) => (ssd.request_ns(bytes, write), 0),
        };
        if write {
            self.stats.count_write(bytes);
        } else {
            self.stats.count_read(bytes);
        }
        self.stats.add_model(ns, seek_bytes);
        if self.sleep {
            sleep_exactly(ns);
        }
        Ok(())
    }
}

/// Sleeps `ns`. The kernel lets a sleeping thread oversleep by its timer slack (50 µs by
/// default), as much as a modelled SSD write itself: the first sleep of each thread sets its
/// slack to 1 µs, so the model's time is what is slept.
fn sleep_exactly(ns: u64) {
    thread_local!(static SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    SLACK_SET.with(|set| {
        if !set.get() {
            set.set(true);
            if let Err(e) = nix::sys::prctl::set_timerslack(1_000) {
                log::debug!("model device: timer slack stays: {e}");
            }
        }
    });
    std::thread::sleep(Duration::from_nanos(ns));
}

impl BlockDevice for ModelDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let bytes = buf.len() as u64;
        self.request(offset, bytes, false, |d| d.read_at(offset, buf))
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        let bytes = buf.len() as u64;
        self.request(offset, bytes, true, |d| d.write_at(offset, buf))
    }

    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.request(offset, iov_len(bufs), true, |d| d.writev_at(offset, bufs))
    }

    fn flush(&self) -> DevResult<()> {
        let _head = self.head.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.flush()?;
        self.stats.count_flush();
        if let ModelKind::Ssd(ssd) = &self.kind {
            let ns = ms_to_ns(ssd.flush_latency_us / 1e3);
            self.stats.add_model(ns, 0);
            if self.sleep {
                sleep_exactly(ns);
            }
        }
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.inner.discard(offset, len)?;
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
    use rand::{Rng, SeedableRng};

    const MIB: u64 = 1 << 20;

    fn hdd(size: u64) -> ModelDevice {
        let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(size));
        ModelDevice::new(inner, ModelKind::Hdd(HddModel::paper()))
    }

    #[test]
    fn paper_disk_calibration() {
        let m = HddModel::paper();
        assert!((m.full_stroke_ms - 16.0).abs() < 1e-9);
        assert!((m.half_rotation_ms() - 60_000.0 / 7200.0 / 2.0).abs() < 1e-9);
    }

    #[test]
    fn sequential_is_cheaper_than_random_and_data_passes_through() {
        let seq = hdd(64 * MIB);
        for i in 0..64 {
            seq.write_at(i * 4096, &[i as u8; 4096]).expect("write");
        }
        let mut buf = [0u8; 4096];
        seq.read_at(5 * 4096, &mut buf).expect("read");
        assert_eq!(buf, [5u8; 4096]);

        let rnd = hdd(64 * MIB);
        for i in 0..64u64 {
            let offset = (i * 7_919 % 64) * MIB;
            rnd.write_at(offset, &[1u8; 4096]).expect("write");
        }
        // The sequential run paid one transfer per request and a single final seek back.
        assert!(seq.modelled_ns() * 5 < rnd.modelled_ns());
        assert!(rnd.counters().seek_distance_bytes > 0);
    }

    #[test]
    fn random_seek_average_matches_spec() {
        let capacity = 1 << 30;
        let dev = hdd(capacity);
        let model = HddModel::paper();
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let n = 4000u64;
        let mut buf = [0u8; 512];
        for _ in 0..n {
            let offset = rng.gen_range(0..capacity / 512) * 512;
            dev.read_at(offset, &mut buf).expect("read");
        }
        let transfer_ms = model.transfer_ms(512) * n as f64;
        let per_request_ms = (dev.modelled_ns() as f64 / 1e6 - transfer_ms) / n as f64;
        let expected_ms = model.avg_seek_ms + model.half_rotation_ms();
        let error = (per_request_ms - expected_ms).abs() / expected_ms;
        assert!(error < 0.10, "{per_request_ms} ms vs {expected_ms} ms");
    }

    #[test]
    fn writev_is_one_request() {
        let dev = hdd(16 * MIB);
        let (a, b) = ([1u8; 4096], [2u8; 4096]);
        dev.writev_at(8 * MIB, &[&a, &b]).expect("writev");
        let c = dev.counters();
        assert_eq!((c.writes, c.write_bytes), (1, 8192));
        let m = HddModel {
            capacity_bytes: 16 * MIB,
            ..HddModel::paper()
        };
        let expected = m.seek_ms(8 * MIB) + m.half_rotation_ms() + m.transfer_ms(8192);
        assert_eq!(c.modelled_ns, ms_to_ns(expected));
        assert_eq!(c.seek_distance_bytes, 8 * MIB);
    }

    #[test]
    fn ssd_cost_formula() {
        let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB));
        let ssd = SsdModel::default();
        let dev = ModelDevice::new(inner, ModelKind::Ssd(ssd));
        dev.write_at(0, &[0u8; 4096]).expect("write");
        let mut buf = [0u8; 4096];
        dev.read_at(512 * 1024, &mut buf).expect("read");
        let w = 50_000.0 + 4096.0 / 520e6 * 1e9;
        let r = 100_000.0 + 4096.0 / 550e6 * 1e9;
        let c = dev.counters();
        assert!(
            (c.modelled_ns as f64 - (w + r)).abs() < 2.0,
            "{}",
            c.modelled_ns
        );
        assert_eq!((c.reads, c.writes, c.seek_distance_bytes), (1, 1, 0));
        dev.flush().expect("flush");
        assert_eq!(dev.counters().modelled_ns - c.modelled_ns, 500_000);
    }

    #[test]
    fn errors_are_not_charged() {
        let dev = hdd(MIB);
        assert!(dev.write_at(MIB, &[0u8; 1]).is_err());
        assert_eq!(dev.counters(), DeviceCounters::default());
    }
}
