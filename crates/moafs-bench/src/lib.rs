//! The moafs evaluation harness (issue 4), growing: targets (the engine in-process, any
//! directory), native seeded workloads, and the statistics that keep comparisons honest.
//! `moafs bench` is its command line.

pub mod hygiene;
pub mod managed;
pub mod postmark;
pub mod stats;
pub mod target;

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Asks the running workload to stop: its next operation on a directory target fails with
/// `Interrupted`, the error unwinds the run and dropping the target takes it down (called by
/// `moafs bench`'s Ctrl-C handler).
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether [`interrupt`] was called.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

use serde::Serialize;
use stats::Summary;
use std::io;

/// The workloads `moafs bench` knows.
pub const WORKLOADS: &[(&str, &str)] = &[
    (
        "postmark-fsl",
        "PostMark FSL: 20,000 files, 200 dirs, 512 B-10 KiB, 200,000 transactions (seeded)",
    ),
    (
        "postmark-quick",
        "PostMark FSL scaled to 1/20: 1,000 files, 200 dirs, 10,000 transactions",
    ),
];

/// The targets `moafs bench` knows.
pub const TARGETS: &[(&str, &str)] = &[
    (
        "engine",
        "the moafs engine in-process on a 1 GiB memory device (no FUSE, no kernel)",
    ),
    (
        "moafs",
        "moafs over FUSE on a fresh image (managed: made and taken down per run)",
    ),
    (
        "ext4",
        "kernel ext4 on a loop device over a fresh image (managed)",
    ),
    (
        "xfs",
        "kernel XFS on a loop device over a fresh image (managed)",
    ),
    (
        "btrfs",
        "kernel btrfs on a loop device over a fresh image (managed)",
    ),
    ("fuse2fs", "fuse2fs over a fresh ext4 image (managed)"),
    (
        "DIR",
        "any existing directory, e.g. a mount point (a fresh subdirectory per run)",
    ),
];

/// One repetition's measures.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub rep: usize,
    pub result: postmark::PostmarkResult,
    /// Engine counters of the run (engine target only).
    pub engine: Option<serde_json::Value>,
    /// What the device saw, unmount included (managed targets; fuse2fs not measured).
    pub device: Option<managed::DeviceIo>,
    /// Device bytes written per PostMark operation (all creates, appends, reads and deletes).
    pub device_bytes_written_per_op: Option<f64>,
    /// The cache state the run started from.
    pub cache: hygiene::CacheState,
    /// Bytes other processes moved on real disks just before the run (when watched).
    pub other_disk_bytes_before: Option<u64>,
}

/// The report `moafs bench --json` writes (schema in docs/BENCHMARKS.md).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema: u32,
    pub workload: String,
    pub config: postmark::PostmarkConfig,
    pub target: String,
    pub runs: Vec<Run>,
    /// Over the runs: transaction-phase transactions per second (higher is better).
    pub transactions_per_sec: Summary,
    /// Over the runs: wall seconds of the whole run.
    pub total_secs: Summary,
    /// Over the runs: device bytes written per operation (managed targets that measure it).
    pub device_bytes_written_per_op: Option<Summary>,
}

/// The configuration of a named workload, scaled.
pub fn workload(name: &str, scale: f64, seed: u64) -> Option<postmark::PostmarkConfig> {
    let mut cfg = match name {
        "postmark-fsl" => postmark::PostmarkConfig::fsl(),
        "postmark-quick" => postmark::PostmarkConfig::fsl().scaled(0.05),
        _ => return None,
    };
    if scale != 1.0 {
        cfg = cfg.scaled(scale);
    }
    cfg.seed = seed;
    Some(cfg)
}

/// Runs one repetition on a fresh target and measures it.
fn run_once(
    rep: usize,
    cfg: &postmark::PostmarkConfig,
    hygiene: &hygiene::Hygiene,
    mut t: Box<dyn target::Target>,
) -> io::Result<(String, Run)> {
    let name = t.name();
    let other = hygiene.watch.map(hygiene::other_disk_activity);
    if hygiene.cache == hygiene::CacheState::Dropped {
        hygiene::drop_caches()?;
    }
    let result = postmark::run(t.as_mut(), cfg)?;
    let engine = t.counters();
    let device = t.finish()?;
    let c = &result.counts;
    let ops = c.created_initial + c.reads + c.appends + c.creates + c.deletes + c.deleted_final;
    Ok((
        name,
        Run {
            rep,
            device_bytes_written_per_op: device
                .filter(|_| ops > 0)
                .map(|d| d.write_bytes as f64 / ops as f64),
            result,
            engine,
            device,
            cache: hygiene.cache,
            other_disk_bytes_before: other,
        },
    ))
}

fn summarise(
    workload_name: &str,
    cfg: &postmark::PostmarkConfig,
    target: String,
    runs: Vec<Run>,
) -> io::Result<Report> {
    let tps: Vec<f64> = runs.iter().map(|r| r.result.transactions_per_sec).collect();
    let secs: Vec<f64> = runs.iter().map(|r| r.result.total_secs).collect();
    let per_op: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.device_bytes_written_per_op)
        .collect();
    let bad = || io::Error::other("a run produced no finite measure");
    Ok(Report {
        schema: 1,
        workload: workload_name.to_string(),
        config: cfg.clone(),
        target,
        transactions_per_sec: Summary::of(&tps).ok_or_else(bad)?,
        total_secs: Summary::of(&secs).ok_or_else(bad)?,
        device_bytes_written_per_op: Summary::of(&per_op),
        runs,
    })
}

/// Runs `reps` repetitions on each of `targets` (made fresh by `make(target, rep)`), the
/// targets taking turns within each repetition so that a noisy minute hits all of them, and
/// summarises each target.
pub fn run_interleaved(
    workload_name: &str,
    cfg: &postmark::PostmarkConfig,
    reps: usize,
    hygiene: &hygiene::Hygiene,
    targets: usize,
    mut make: impl FnMut(usize, usize) -> io::Result<Box<dyn target::Target>>,
    mut progress: impl FnMut(&str, usize, &Run),
) -> io::Result<Vec<Report>> {
    let mut runs: Vec<(String, Vec<Run>)> = vec![(String::new(), Vec::new()); targets];
    for rep in 1..=reps.max(1) {
        for (i, slot) in runs.iter_mut().enumerate() {
            let (name, run) = run_once(rep, cfg, hygiene, make(i, rep)?)?;
            progress(&name, rep, &run);
            slot.0 = name;
            slot.1.push(run);
        }
    }
    runs.into_iter()
        .map(|(name, r)| summarise(workload_name, cfg, name, r))
        .collect()
}

/// Runs `reps` repetitions, each on a fresh target made by `make`, and summarises them.
pub fn run_reps(
    workload_name: &str,
    cfg: &postmark::PostmarkConfig,
    reps: usize,
    mut make: impl FnMut(usize) -> io::Result<Box<dyn target::Target>>,
    mut progress: impl FnMut(usize, &postmark::PostmarkResult),
) -> io::Result<Report> {
    let mut reports = run_interleaved(
        workload_name,
        cfg,
        reps,
        &hygiene::Hygiene::default(),
        1,
        |_, rep| make(rep),
        |_, rep, r| progress(rep, &r.result),
    )?;
    reports.pop().ok_or_else(|| io::Error::other("no report"))
}

/// How each target compares with the first (the baseline), on transactions per second.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub target: String,
    /// Mean over mean.
    pub ratio_to_baseline: f64,
    /// From the 95 % intervals: overlapping intervals are "no_difference".
    pub verdict: stats::Verdict,
}

pub fn compare_to_first(reports: &[Report]) -> Vec<Comparison> {
    let Some(base) = reports.first() else {
        return Vec::new();
    };
    reports
        .iter()
        .map(|r| Comparison {
            target: r.target.clone(),
            ratio_to_baseline: r.transactions_per_sec.mean / base.transactions_per_sec.mean,
            verdict: stats::compare(&r.transactions_per_sec, &base.transactions_per_sec),
        })
        .collect()
}
