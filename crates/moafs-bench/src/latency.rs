//! Per-operation latencies of a run (issue 20): one HDR histogram per operation type,
//! microsecond resolution from 1 µs to an hour, three significant digits; what a report
//! keeps of it is [`LatencySummary`] (count, mean, p50, p99, p99.9, max).

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Latencies by operation type. Each workload thread keeps its own and the run merges them.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    hists: BTreeMap<&'static str, Histogram<u64>>,
}

/// Largest latency recorded exactly (longer ones are saturated to it): one hour in µs.
const HIGHEST_US: u64 = 3_600_000_000;

impl Latencies {
    pub fn new() -> Latencies {
        Latencies::default()
    }

    /// Records one `op` that took `d` (rounded up to whole microseconds, at least 1).
    pub fn record(&mut self, op: &'static str, d: Duration) {
        let us = (d.as_nanos().div_ceil(1000) as u64).clamp(1, HIGHEST_US);
        let h = self.hists.entry(op).or_insert_with(|| {
            Histogram::new_with_bounds(1, HIGHEST_US, 3).expect("valid histogram bounds")
        });
        h.saturating_record(us);
    }

    /// Runs `f`, recording how long it took as one `op`.
    pub fn time<T>(&mut self, op: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let r = f();
        self.record(op, start.elapsed());
        r
    }

    /// Adds `other`'s samples to these.
    pub fn merge(&mut self, other: &Latencies) {
        for (op, h) in &other.hists {
            match self.hists.get_mut(op) {
                Some(mine) => {
                    // same bounds on both sides: adding cannot fail
                    let _ = mine.add(h);
                }
                None => {
                    self.hists.insert(op, h.clone());
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hists.is_empty()
    }

    /// Percentiles by operation type.
    pub fn summary(&self) -> BTreeMap<String, LatencySummary> {
        self.hists
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(op, h)| {
                (
                    op.to_string(),
                    LatencySummary {
                        count: h.len(),
                        mean_us: h.mean(),
                        p50_us: h.value_at_quantile(0.50) as f64,
                        p99_us: h.value_at_quantile(0.99) as f64,
                        p999_us: h.value_at_quantile(0.999) as f64,
                        max_us: h.max() as f64,
                    },
                )
            })
            .collect()
    }
}

/// One operation type's latencies in a run, in microseconds (percentiles within 0.1 %).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_samples() {
        let mut l = Latencies::new();
        // 1..=1000 µs once each: p50 500, p99 990, p99.9 999, max 1000, mean 500.5
        for us in 1..=1000u64 {
            l.record("read", Duration::from_micros(us));
        }
        let s = l.summary()["read"];
        assert_eq!(s.count, 1000);
        assert!((s.mean_us - 500.5).abs() < 1.0, "{s:?}");
        assert!((s.p50_us - 500.0).abs() <= 1.0, "{s:?}");
        assert!((s.p99_us - 990.0).abs() <= 1.0, "{s:?}");
        assert!((s.p999_us - 999.0).abs() <= 1.0, "{s:?}");
        assert!((s.max_us - 1000.0).abs() <= 1.0, "{s:?}");
    }

    #[test]
    fn merge_adds_threads_samples() {
        let mut a = Latencies::new();
        let mut b = Latencies::new();
        for _ in 0..990 {
            a.record("fsync", Duration::from_micros(100));
        }
        for _ in 0..10 {
            b.record("fsync", Duration::from_millis(50));
        }
        b.record("stat", Duration::from_nanos(10));
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s["fsync"].count, 1000);
        // the slow tenth of a percent shows at p99.9, not at p99
        assert!((s["fsync"].p99_us - 100.0).abs() <= 1.0, "{:?}", s["fsync"]);
        assert!(
            (s["fsync"].p999_us - 50_000.0).abs() <= 50.0,
            "{:?}",
            s["fsync"]
        );
        // sub-microsecond operations count as 1 µs
        assert_eq!(s["stat"].p50_us, 1.0);
        assert!(Latencies::new().summary().is_empty());
    }
}
