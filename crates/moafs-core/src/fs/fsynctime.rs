//! Where an fsync's time goes (issue 43 item 1): each fsync through [`Fs::fsync_for`]
//! carries a [`Trace`] that adds up the time of each phase it passes (waiting for the engine
//! lock, for the committer, for others to join, for another's commit; planning; device
//! writes; flushes; finishing), and which way it was served. At its end the trace goes into
//! [`FsyncTimes`]: one HDR histogram per phase and per path (nanoseconds, two significant
//! digits), kept behind a lock of their own so that the FUSE side can add its phases (the
//! request's wait before the engine, the reply's after it) without the engine lock.
//!
//! What a report says ([`FsyncReport`]): per phase and per path the count, mean and
//! percentiles, and per phase its share of an average fsync (`per_fsync_us`: the phase's
//! total over every fsync recorded) — the phases of one fsync add up to its engine time,
//! waits included, so the shares say where an average fsync's time went.
//!
//! [`Fs::fsync_for`]: super::Fs::fsync_for

use crate::device::{BlockDevice, DevResult, DeviceCounters, Note};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A phase of an fsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPhase {
    /// FUSE: from the daemon's receipt of the request to the engine's call (a hand-off to a
    /// sync pool included). Recorded by the transport, not by the engine.
    Queue,
    /// Waiting for the engine lock (every time the fsync path takes it).
    Lock,
    /// Waiting for the committer (`commit_mx`): another byte-log batch, commit or
    /// write-behind round in flight.
    Job,
    /// jbd2's batching rule: sleeping for others to join the commit.
    Batch,
    /// Waiting for a commit in flight that another thread runs (it covers this fsync, or
    /// must end before the next can start).
    Wait,
    /// Planning under the engine lock: a commit's phase A, or the byte-log batch's plan.
    Plan,
    /// Device writes of the commit or batch (a checkpoint's included), or the tier's store.
    Write,
    /// Device flushes, or the tier's persist.
    Flush,
    /// Under the engine lock after the I/O: a commit's phase C, a batch's settling.
    Finish,
    /// The whole fsync in the engine, waits included.
    Engine,
    /// FUSE: from the engine's return to the reply's commit to the kernel (a sync pool's
    /// hand-back to the queue's thread included). Recorded by the transport.
    Reply,
}

const PHASES: usize = 11;
/// The phases' names in a report, in the order of [`FsyncPhase`].
pub const PHASE_NAMES: [&str; PHASES] = [
    "queue", "lock", "job", "batch", "wait", "plan", "write", "flush", "finish", "engine", "reply",
];

impl FsyncPhase {
    fn index(self) -> usize {
        self as usize
    }
}

/// Which way an fsync was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsyncPath {
    /// Its records went in a byte-log batch it wrote itself.
    ByteLog,
    /// Its records went in a batch another fsync wrote.
    ByteLogShared,
    /// It ran the commit that made it durable.
    Commit,
    /// Another thread's commit made it durable.
    Joined,
    /// Nothing was unsaved (or, on the byte log's path, nothing unlogged).
    Clean,
}

const PATHS: usize = 5;
/// The paths' names in a report: each a way an fsync was served.
pub const PATH_NAMES: [&str; PATHS] = ["bytelog", "bytelog_shared", "commit", "joined", "clean"];

/// The phases of one fsync, added up as it goes.
#[derive(Debug)]
pub(crate) struct Trace {
    start: Instant,
    ns: [u64; PHASES],
    seen: u16,
    path: Option<FsyncPath>,
}

impl Default for Trace {
    fn default() -> Trace {
        Trace {
            start: Instant::now(),
            ns: [0; PHASES],
            seen: 0,
            path: None,
        }
    }
}

impl Trace {
    pub(crate) fn add(&mut self, phase: FsyncPhase, d: Duration) {
        let i = phase.index();
        self.ns[i] += d.as_nanos() as u64;
        self.seen |= 1 << i;
    }

    /// Adds the time since `from` to `phase`; returns now (the next phase's start).
    pub(crate) fn since(&mut self, phase: FsyncPhase, from: Instant) -> Instant {
        let now = Instant::now();
        self.add(phase, now - from);
        now
    }

    /// Runs `f`, adding its time to `phase`.
    pub(crate) fn time<T>(&mut self, phase: FsyncPhase, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.since(phase, t);
        r
    }

    /// Says which way the fsync was served (the last said counts).
    pub(crate) fn served(&mut self, path: FsyncPath) {
        self.path = Some(path);
    }
}

/// Nanoseconds from 100 ns to 100 s, two significant digits (1 % resolution).
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(100, 100_000_000_000, 2).expect("valid histogram bounds")
}

struct Hists {
    phases: Vec<Histogram<u64>>,
    paths: Vec<Histogram<u64>>,
    /// fsyncs recorded by the engine (the denominator of the shares).
    fsyncs: u64,
}

/// Every fsync's phases of one mount.
pub(crate) struct FsyncTimes {
    hists: Mutex<Hists>,
}

impl Default for FsyncTimes {
    fn default() -> FsyncTimes {
        FsyncTimes {
            hists: Mutex::new(Hists {
                phases: (0..PHASES).map(|_| histogram()).collect(),
                paths: (0..PATHS).map(|_| histogram()).collect(),
                fsyncs: 0,
            }),
        }
    }
}

fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.max(100));
}

impl FsyncTimes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Hists> {
        self.hists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a finished fsync's trace.
    pub(crate) fn record(&self, mut t: Trace) {
        let total = t.start.elapsed();
        t.add(FsyncPhase::Engine, total);
        let mut h = self.lock();
        h.fsyncs += 1;
        for i in 0..PHASES {
            if t.seen & (1 << i) != 0 {
                record(&mut h.phases[i], t.ns[i]);
            }
        }
        if let Some(p) = t.path {
            record(&mut h.paths[p as usize], total.as_nanos() as u64);
        }
    }

    /// Records one phase measured outside the engine (the transport's queue and reply).
    pub(crate) fn note(&self, phase: FsyncPhase, d: Duration) {
        record(&mut self.lock().phases[phase.index()], d.as_nanos() as u64);
    }

    pub(crate) fn report(&self) -> FsyncReport {
        let h = self.lock();
        let summary = |x: &Histogram<u64>| Summary::of(x, h.fsyncs);
        let named = |names: &[&'static str], hs: &[Histogram<u64>]| {
            names
                .iter()
                .zip(hs)
                .filter(|(_, x)| !x.is_empty())
                .map(|(n, x)| (*n, summary(x)))
                .collect()
        };
        FsyncReport {
            fsyncs: h.fsyncs,
            phases: named(&PHASE_NAMES, &h.phases),
            paths: named(&PATH_NAMES, &h.paths),
        }
    }
}

/// Where the fsyncs of a mount spent their time (module comment).
#[derive(Debug, Clone, Default, Serialize)]
pub struct FsyncReport {
    /// fsyncs through the engine.
    pub fsyncs: u64,
    /// By phase: queue, lock, job, batch, wait, plan, write, flush, finish, engine, reply.
    pub phases: BTreeMap<&'static str, Summary>,
    /// The engine time of the fsyncs served each way: bytelog, bytelog_shared, commit,
    /// joined, clean.
    pub paths: BTreeMap<&'static str, Summary>,
}

/// One histogram's figures, in µs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// This histogram's total time over every fsync recorded (the phase's share of an
    /// average fsync).
    pub per_fsync_us: f64,
}

impl Summary {
    fn of(h: &Histogram<u64>, fsyncs: u64) -> Summary {
        let us = |ns: u64| ns as f64 / 1000.0;
        let total = h.mean() * h.len() as f64;
        Summary {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
            per_fsync_us: if fsyncs > 0 {
                total / fsyncs as f64 / 1000.0
            } else {
                0.0
            },
        }
    }
}

/// A device that adds up the time of the flushes sent through it (a commit's or batch's
/// I/O: the rest of the I/O's time is its writes).
pub(crate) struct TimedFlushes<'a> {
    pub(crate) dev: &'a dyn BlockDevice,
    flush_ns: AtomicU64,
}

impl<'a> TimedFlushes<'a> {
    pub(crate) fn new(dev: &'a dyn BlockDevice) -> TimedFlushes<'a> {
        TimedFlushes {
            dev,
            flush_ns: AtomicU64::new(0),
        }
    }

    pub(crate) fn flushes(&self) -> Duration {
        Duration::from_nanos(self.flush_ns.load(Ordering::Relaxed))
    }
}

impl BlockDevice for TimedFlushes<'_> {
    fn size(&self) -> u64 {
        self.dev.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.dev.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.dev.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.dev.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        let t = Instant::now();
        let r = self.dev.flush();
        self.flush_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.dev.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.dev.counters()
    }
    fn records(&self) -> bool {
        self.dev.records()
    }
    fn note(&self, note: Note) {
        self.dev.note(note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_adds_up_its_phases_and_the_report_shares_them() {
        let times = FsyncTimes::default();
        for k in 1..=4u64 {
            let mut t = Trace::default();
            t.add(FsyncPhase::Plan, Duration::from_micros(10 * k));
            t.add(FsyncPhase::Plan, Duration::from_micros(10 * k));
            if k % 2 == 0 {
                t.add(FsyncPhase::Flush, Duration::from_micros(100));
                t.served(FsyncPath::Joined);
                t.served(FsyncPath::Commit);
            } else {
                t.served(FsyncPath::Joined);
            }
            times.record(t);
        }
        times.note(FsyncPhase::Queue, Duration::from_micros(5));
        let r = times.report();
        assert_eq!(r.fsyncs, 4);
        let plan = &r.phases["plan"];
        assert_eq!(plan.count, 4);
        // 20, 40, 60, 80 µs: mean 50 within the histogram's 1 %
        assert!((plan.mean_us - 50.0).abs() < 1.0, "{plan:?}");
        let flush = &r.phases["flush"];
        assert_eq!(flush.count, 2);
        // two flushes of 100 µs over four fsyncs: 50 µs an fsync
        assert!((flush.per_fsync_us - 50.0).abs() < 1.0, "{flush:?}");
        assert_eq!(r.phases["engine"].count, 4);
        assert_eq!(r.phases["queue"].count, 1);
        assert!(!r.phases.contains_key("reply"));
        // the last path named is the one that served it
        assert_eq!(r.paths["commit"].count, 2);
        assert_eq!(r.paths["joined"].count, 2);
    }
}
