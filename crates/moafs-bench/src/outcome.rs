//! What one run of a workload measured ([`Outcome`]), and the builder the workloads make
//! it with. Near a leaf (it imports only `latency`, which imports nothing of the crate): the
//! workload modules (`micro`, `sqlite`, `tools`) and `workload`, which dispatches to them, all
//! import it from here, so none of them imports `workload`.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// What one run measured. The headline is `amount` of `unit` in the measured phase's `secs`
/// (`rate` = amount / secs, higher is better); `counts` are every operation of the run, setup
/// included, by kind.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub amount: f64,
    pub unit: String,
    pub secs: f64,
    pub rate: f64,
    /// Wall seconds of the whole run, setup included.
    pub total_secs: f64,
    pub counts: BTreeMap<String, u64>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Workload-specific measures (phases, per-phase rates).
    pub detail: serde_json::Value,
    /// Latency percentiles of the measured phase by operation type (empty where the
    /// workload does not time single operations).
    pub latency: BTreeMap<String, crate::latency::LatencySummary>,
}

impl Outcome {
    /// `amount` of `unit` in `secs`; the run began at `start`.
    pub fn new(amount: f64, unit: &str, secs: f64, start: Instant) -> Outcome {
        Outcome {
            amount,
            unit: unit.to_string(),
            secs,
            rate: if secs > 0.0 { amount / secs } else { 0.0 },
            total_secs: start.elapsed().as_secs_f64(),
            counts: BTreeMap::new(),
            bytes_read: 0,
            bytes_written: 0,
            detail: serde_json::Value::Null,
            latency: BTreeMap::new(),
        }
    }

    pub fn count(mut self, what: &str, n: u64) -> Outcome {
        *self.counts.entry(what.to_string()).or_default() += n;
        self
    }

    pub fn bytes(mut self, read: u64, written: u64) -> Outcome {
        self.bytes_read = read;
        self.bytes_written = written;
        self
    }

    pub fn detail(mut self, v: serde_json::Value) -> Outcome {
        self.detail = v;
        self
    }

    /// The measured phase's latencies.
    pub fn latency(mut self, l: &crate::latency::Latencies) -> Outcome {
        self.latency = l.summary();
        self
    }

    /// All operations counted (the divisor of device bytes per operation).
    pub fn operations(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.as_str() != "skipped")
            .map(|(_, v)| v)
            .sum()
    }
}
