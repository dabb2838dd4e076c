//! The moafs evaluation harness (issue 4), growing: targets (the engine in-process, any
//! directory), native seeded workloads, and the statistics that keep comparisons honest.
//! `moafs bench` is its command line.

pub mod aging;
pub mod bytelog_exp;
pub mod cgroup;
pub mod chart;
pub mod cowrite_exp;
pub mod env;
pub mod filebench;
pub mod fusetrace;
pub mod html;
pub mod hygiene;
pub mod latency;
pub mod managed;
pub mod micro;
pub mod outcome;
pub mod postmark;
pub mod procstat;
pub mod programs;
pub mod readahead_exp;
#[cfg(test)]
mod run_once_tests;
pub mod sqlite;
pub mod stats;
pub mod target;
pub mod tools;
pub mod workload;

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

pub use outcome::Outcome;
use serde::Serialize;
use stats::Summary;
use std::collections::BTreeMap;
use std::io;
pub use workload::{named as workload, Spec, WORKLOADS};

/// The targets `moafs bench` knows.
pub const TARGETS: &[(&str, &str)] = &[
    (
        "engine",
        "the moafs engine in-process on a memory device of --size (no FUSE, no kernel)",
    ),
    (
        "engine:file",
        "the engine in-process on a fresh image file in --backing",
    ),
    (
        "engine:hdd",
        "the engine on a modelled disk (paper 000: 7200 RPM, 9 ms seek); modelled time reported",
    ),
    (
        "engine:ssd",
        "the engine on a modelled SATA SSD (queue depth 1); modelled time reported",
    ),
    (
        "engine:ssd-live",
        "as engine:ssd with the modelled time slept (one request at a time, 500 µs flushes): wall time feels the model",
    ),
    (
        "moafs",
        "moafs over FUSE on a loop device over a fresh image (managed: made and taken down per run)",
    ),
    (
        "ext4",
        "kernel ext4 on a loop device over a fresh image (managed)",
    ),
    (
        "ext4-fc",
        "kernel ext4 with fast commits (mkfs.ext4 -O fast_commit) on a loop device over a fresh image (managed)",
    ),
    (
        "xfs",
        "kernel XFS on a loop device over a fresh image (managed)",
    ),
    (
        "btrfs",
        "kernel btrfs on a loop device over a fresh image (managed)",
    ),
    (
        "fuse2fs",
        "fuse2fs on a loop device over a fresh ext4 image (managed)",
    ),
    (
        "passthrough",
        "the FUSE floor: ext4 as for ext4, passed through FUSE with moafs's transport and no engine (managed)",
    ),
    (
        "memfs",
        "the FUSE ceiling: a file system in the daemon's memory, served by moafs's transport with no engine and no device (managed)",
    ),
    (
        "DIR",
        "any existing directory, e.g. a mount point (a fresh subdirectory per run)",
    ),
];

/// One repetition's measures.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub rep: usize,
    pub outcome: Outcome,
    /// Engine counters of the run (the engine target, and managed moafs: its `stats=`).
    pub engine: Option<serde_json::Value>,
    /// What the device saw, setup and unmount included: every managed target's loop device
    /// (`source: "loop"`), the in-process engine's device (`"engine"`); null for a directory.
    pub device: Option<managed::DeviceIo>,
    /// A managed moafs's own device counters (its `stats=` file) beside the loop device's.
    pub engine_device: Option<managed::DeviceIo>,
    /// CPU time of the harness and of the FUSE daemon, and the daemon's I/O counters, over
    /// the workload (setup included, unmount not).
    pub cost: procstat::RunCost,
    /// Device bytes written per operation (every operation the workload counted).
    pub device_bytes_written_per_op: Option<f64>,
    /// Device write requests (`device.writes`: at a loop device, requests the block layer
    /// completed) over the whole run, and per operation (the same divisor as the bytes).
    pub device_write_requests: Option<u64>,
    pub device_writes_per_op: Option<f64>,
    /// The cache state the run started from.
    pub cache: hygiene::CacheState,
    /// The job that wrote beside the measured phase, how many 100 KB files and bytes it
    /// wrote, how many of those bytes it sent to write-back (started or fsynced), and its
    /// plan (budget, write-back lag).
    pub background: hygiene::Background,
    pub background_files: Option<u64>,
    pub background_bytes: Option<u64>,
    pub background_bytes_written_back: Option<u64>,
    pub background_plan: Option<hygiene::BackgroundPlan>,
    /// Bytes written to the target's block device during the measured phase (targets mounted
    /// from a block device: every managed target but the passthrough, whose FUSE mount names
    /// a directory; None for the engine and directories).
    pub measured_device_write_bytes: Option<u64>,
    /// Scenario C: bytes of the pollution runs' files present through the measured run.
    pub pollution_bytes: Option<u64>,
    /// FUSE requests the kernel sent during the measured phase, by opcode (`--fuse-requests`,
    /// FUSE targets only).
    pub fuse_requests: Option<fusetrace::Counts>,
    /// The hard memory limit the run (pollution runs included) was under, bytes.
    pub memory_limit: Option<u64>,
    /// Under a memory limit, whether the loop device the target is mounted from (a kernel
    /// file system's, moafs's, fuse2fs's) was switched to direct I/O on its image (None: not
    /// mounted from a loop device).
    pub loop_direct_io: Option<bool>,
    /// The memory cgroup's view of the run: limit, peak usage (page cache included), and
    /// how often usage hit the limit.
    pub memory: Option<cgroup::MemoryUse>,
    /// Bytes other processes moved on real disks just before the run (when watched).
    pub other_disk_bytes_before: Option<u64>,
    /// The workload's seed in this repetition (every target of a repetition runs the same).
    pub seed: u64,
    /// /proc/meminfo at the start of the measured phase (after the setup and any drop).
    pub cache_before: Option<env::MemInfo>,
    /// The target's mount options while mounted (/proc/mounts; the engine's own in-process).
    pub mount_options: Option<String>,
}

/// One workload on one target over the repetitions (schema in docs/BENCHMARKS.md).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workload: String,
    /// The configuration with the base seed (each run's own seed is in the run).
    pub config: Spec,
    pub target: String,
    /// The headline's unit: `rate` is `unit` per second.
    pub unit: String,
    pub runs: Vec<Run>,
    /// Over the runs: the headline rate (higher is better).
    pub rate: Summary,
    /// Runs whose rate lies outside the Tukey fences or more than 3 scaled MADs from the
    /// median (kept in `rate`: shown, never dropped).
    pub rate_outliers: Vec<stats::Outlier>,
    /// Over the runs: wall seconds of the whole run.
    pub total_secs: Summary,
    /// Over the runs: device bytes written over the whole run (setup, measured phase, and the
    /// write-back of sync and unmount) divided by every operation the workload counted, setup
    /// included (targets that measure it).
    pub device_bytes_written_per_op: Option<Summary>,
    /// Over the runs: device write requests over the whole run (the same span and runs as
    /// the bytes), and the same divided by every operation the workload counted.
    pub device_write_requests: Option<Summary>,
    pub device_writes_per_op: Option<Summary>,
    /// Over the runs: device bytes written (as above) per byte the workload wrote: below 1
    /// when data never reached the device (files deleted while still in a cache).
    pub device_bytes_per_byte_written: Option<Summary>,
    /// Over the runs: CPU microseconds per operation, harness and FUSE daemon together.
    pub cpu_us_per_op: Option<Summary>,
    /// FUSE requests per operation by opcode (`TOTAL` for all), the mean over the runs that
    /// counted them (`--fuse-requests`).
    pub fuse_requests_per_op: Option<fusetrace::PerOp>,
    /// Latency percentiles of the measured phase by operation type: each the mean over the
    /// runs of that run's percentile.
    pub latency: BTreeMap<String, LatencyOverRuns>,
    /// The distinct mount options the runs saw.
    pub mount_options: Vec<String>,
}

/// One operation type's latency percentiles over the runs, microseconds: `p50_us`, `p99_us`
/// and `p999_us` are means over the runs of each run's percentile, `max_us` the largest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyOverRuns {
    /// Runs that timed this operation.
    pub runs: usize,
    /// Operations timed per run (mean).
    pub count: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// Per operation type, the mean over the runs (each run's `outcome.latency`) of each latency
/// percentile.
pub fn latency_over_runs<'a>(
    runs: impl IntoIterator<Item = &'a BTreeMap<String, latency::LatencySummary>>,
) -> BTreeMap<String, LatencyOverRuns> {
    let mut by_op: BTreeMap<String, Vec<latency::LatencySummary>> = BTreeMap::new();
    for run in runs {
        for (op, l) in run {
            by_op.entry(op.clone()).or_default().push(*l);
        }
    }
    by_op
        .into_iter()
        .map(|(op, ls)| {
            let n = ls.len() as f64;
            let mean = |f: fn(&latency::LatencySummary) -> f64| ls.iter().map(f).sum::<f64>() / n;
            (
                op,
                LatencyOverRuns {
                    runs: ls.len(),
                    count: mean(|l| l.count as f64),
                    mean_us: mean(|l| l.mean_us),
                    p50_us: mean(|l| l.p50_us),
                    p99_us: mean(|l| l.p99_us),
                    p999_us: mean(|l| l.p999_us),
                    max_us: ls.iter().map(|l| l.max_us).fold(0.0, f64::max),
                },
            )
        })
        .collect()
}

/// Bytes of the regular files under `dir` (not following links).
fn tree_bytes(dir: &std::path::Path) -> io::Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            n += tree_bytes(&e.path())?;
        } else if ft.is_file() {
            n += e.metadata()?.len();
        }
    }
    Ok(n)
}

/// Runs one repetition on a fresh target and measures it.
///
/// Order: (memory limit: the process enters its cgroup) → scenario A: `sync`, drop the
/// kernel's caches and the file system's own, right after the fresh mount → scenario C: four
/// pollution runs, their files kept → the workload's setup → (drop after setup) → background
/// job starts, measured phase → job stops → pollution files removed → the process leaves the
/// cgroup → the target is taken down.
fn run_once(
    rep: usize,
    spec: &Spec,
    hygiene: &hygiene::Hygiene,
    mut t: Box<dyn target::Target>,
) -> io::Result<(String, Run)> {
    use hygiene::{Background, BackgroundJob, BackgroundPlan, CacheState};
    use std::cell::RefCell;
    let name = t.name();
    let needs_dir = hygiene.cache == CacheState::Polluted
        || hygiene.background != Background::None
        || hygiene.memory_limit.is_some();
    let dir = t.dir().map(std::path::Path::to_path_buf);
    if needs_dir && dir.is_none() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "scenario C, background I/O and a memory limit need a mounted target (the \
             kernel's cache), not the in-process engine",
        ));
    }
    // Under a memory limit the image must not be cached beside it (see loop_direct_io)
    let loop_direct_io = match (&dir, hygiene.memory_limit) {
        (Some(d), Some(_)) => hygiene::loop_direct_io(d),
        _ => None,
    };
    // The target (and a FUSE daemon) exists already: the daemon stays outside the cgroup.
    let mut cg = match hygiene.memory_limit {
        Some(limit) => {
            let mut cg = cgroup::MemoryCgroup::create(limit)?;
            cg.enter()?;
            Some(cg)
        }
        None => None,
    };
    let drop_all = |t: &dyn target::Target| -> io::Result<()> {
        t.sync()?;
        // the kernel first: its FORGETs let moafs drop idle inodes too
        hygiene::drop_caches()?;
        t.drop_own_cache()
    };
    if hygiene.cache == CacheState::Dropped {
        // Scenario A: right after the (fresh) mount, before the workload builds anything
        drop_all(t.as_ref())?;
    }
    // Scenario C: four unrelated runs of the same workload first, each in its own
    // directory; their files (and so their cached, possibly dirty, pages) stay until the
    // measured run is over.
    let mut pollution = Vec::new();
    let mut pollution_bytes = None;
    if let (CacheState::Polluted, Some(dir)) = (hygiene.cache, &dir) {
        for k in 0..4 {
            let scratch = target::DirTarget::scratch(dir, &format!("pollute-{k}"))?;
            spec.run(&scratch, &|| Ok(()))?;
            pollution.push(scratch);
        }
        let mut n = 0;
        for k in 0..4 {
            n += tree_bytes(&dir.join(format!("pollute-{k}")))?;
        }
        pollution_bytes = Some(n);
    }
    // the target's own loop device, when its I/O goes straight to the disk under it: its
    // write-back there is not another process's
    let own_loop = dir
        .as_deref()
        .filter(|_| loop_direct_io == Some(true))
        .and_then(hygiene::mount_device);
    let other = hygiene
        .watch
        .map(|w| hygiene::other_disk_activity(w, own_loop.as_deref()));
    let job: RefCell<Option<(BackgroundJob, BackgroundPlan)>> = RefCell::new(None);
    // A FUSE mount's requests (the kernel's own targets have none to count)
    let fuse_dir = dir
        .as_deref()
        .filter(|d| hygiene.fuse_requests && fusetrace::is_fuse_mount(d));
    let fuse_counter: RefCell<Option<fusetrace::Counter>> = RefCell::new(None);
    let device_at_start = RefCell::new(None);
    // CPU is counted from the measured phase's start (after the setup, before the job)
    let before = RefCell::new(procstat::before(t.daemon_pid()));
    let cache_before = RefCell::new(env::MemInfo::now());
    let start_background = || -> io::Result<()> {
        if let (Some(dir), true) = (&dir, hygiene.background != Background::None) {
            let plan = BackgroundPlan::new(
                hygiene.background == Background::WriteFsync,
                hygiene::free_bytes(dir)?,
                hygiene.memory_limit,
            );
            let j = BackgroundJob::start(&dir.join("background-io"), plan)?;
            *job.borrow_mut() = Some((j, plan));
        }
        Ok(())
    };
    // Right before what is measured: the drop after setup (not a paper scenario), the CPU
    // and device counters, the background job. PostMark measures all its phases: all of it
    // comes first.
    let between = || {
        if hygiene.cache == CacheState::DroppedAfterSetup {
            drop_all(t.as_ref())?;
        }
        *before.borrow_mut() = procstat::before(t.daemon_pid());
        *cache_before.borrow_mut() = env::MemInfo::now();
        *device_at_start.borrow_mut() = dir.as_deref().and_then(hygiene::block_device_written);
        if let Some(d) = fuse_dir {
            *fuse_counter.borrow_mut() = Some(fusetrace::Counter::start(d)?);
        }
        start_background()
    };
    let outcome = if matches!(spec, Spec::Postmark(_)) {
        between()?;
        spec.run(t.as_ref(), &|| Ok(()))
    } else {
        spec.run(t.as_ref(), &between)
    };
    let cost = procstat::after(&before.borrow());
    let fuse_requests = match fuse_counter.into_inner() {
        Some(c) => Some(c.stop()?),
        None => None,
    };
    let background = match job.into_inner() {
        Some((j, plan)) => Some((j.stop()?, plan)),
        None => None,
    };
    let measured_device_write_bytes = match (
        device_at_start.into_inner(),
        dir.as_deref().and_then(hygiene::block_device_written),
    ) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let outcome = outcome?;
    let mount_options = t.mount_options();
    drop(pollution);
    let memory = cg.as_ref().map(cgroup::MemoryCgroup::memory_use);
    if let Some(cg) = cg.take() {
        cg.remove()?;
    }
    let device = t.finish()?;
    let engine = t.counters();
    let engine_device = t.engine_device();
    let ops = outcome.operations();
    // Device counters cover the whole mount: with pollution runs or a background writer on
    // the same device, bytes per workload operation would be wrong, so none is given.
    let per_op_valid =
        hygiene.cache != CacheState::Polluted && hygiene.background == Background::None;
    let per_op = device.filter(|_| ops > 0 && per_op_valid);
    Ok((
        name,
        Run {
            rep,
            device_bytes_written_per_op: per_op.map(|d| d.write_bytes as f64 / ops as f64),
            device_write_requests: device.map(|d| d.writes),
            device_writes_per_op: per_op.map(|d| d.writes as f64 / ops as f64),
            outcome,
            engine,
            device,
            engine_device,
            cost,
            cache: hygiene.cache,
            background: hygiene.background,
            background_files: background.map(|(d, _)| d.files),
            background_bytes: background.map(|(d, _)| d.bytes),
            background_bytes_written_back: background.map(|(d, _)| d.bytes_written_back),
            background_plan: background.map(|(_, p)| p),
            measured_device_write_bytes,
            pollution_bytes,
            memory_limit: hygiene.memory_limit,
            loop_direct_io,
            memory,
            other_disk_bytes_before: other,
            seed: spec.seed(),
            cache_before: cache_before.into_inner(),
            mount_options,
            fuse_requests,
        },
    ))
}

fn summarise(
    workload_name: &str,
    spec: &Spec,
    target: String,
    runs: Vec<Run>,
) -> io::Result<Report> {
    let rates: Vec<f64> = runs.iter().map(|r| r.outcome.rate).collect();
    let secs: Vec<f64> = runs.iter().map(|r| r.outcome.total_secs).collect();
    let per_op: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.device_bytes_written_per_op)
        .collect();
    let writes_per_op: Vec<f64> = runs.iter().filter_map(|r| r.device_writes_per_op).collect();
    // the same runs as per operation
    let write_requests: Vec<f64> = runs
        .iter()
        .filter(|r| r.device_writes_per_op.is_some())
        .filter_map(|r| r.device_write_requests.map(|w| w as f64))
        .collect();
    // the same runs as per operation (None there: pollution or a background writer)
    let per_byte: Vec<f64> = runs
        .iter()
        .filter(|r| r.device_bytes_written_per_op.is_some() && r.outcome.bytes_written > 0)
        .filter_map(|r| {
            r.device
                .map(|d| d.write_bytes as f64 / r.outcome.bytes_written as f64)
        })
        .collect();
    let cpu: Vec<f64> = runs
        .iter()
        .filter(|r| r.outcome.operations() > 0)
        .map(|r| {
            let c = &r.cost;
            let daemon = c.daemon.map_or(0.0, |d| d.user_s + d.sys_s);
            (c.harness.user_s + c.harness.sys_s + daemon) * 1e6 / r.outcome.operations() as f64
        })
        .collect();
    let mut mount_options: Vec<String> = runs
        .iter()
        .filter_map(|r| r.mount_options.clone())
        .collect();
    mount_options.sort();
    mount_options.dedup();
    let bad = || io::Error::other("a run produced no finite measure");
    let fuse: Vec<_> = runs
        .iter()
        .filter_map(|r| Some((r.fuse_requests.as_ref()?, r.outcome.operations())))
        .collect();
    Ok(Report {
        fuse_requests_per_op: fusetrace::PerOp::of(&fuse),
        cpu_us_per_op: Summary::of(&cpu),
        workload: workload_name.to_string(),
        config: spec.clone(),
        target,
        unit: runs
            .first()
            .map(|r| r.outcome.unit.clone())
            .unwrap_or_default(),
        rate: Summary::of(&rates).ok_or_else(bad)?,
        rate_outliers: stats::outliers(
            &runs
                .iter()
                .map(|r| (r.rep, r.outcome.rate))
                .collect::<Vec<_>>(),
        ),
        total_secs: Summary::of(&secs).ok_or_else(bad)?,
        device_bytes_written_per_op: Summary::of(&per_op),
        device_write_requests: Summary::of(&write_requests),
        device_writes_per_op: Summary::of(&writes_per_op),
        device_bytes_per_byte_written: Summary::of(&per_byte),
        latency: latency_over_runs(runs.iter().map(|r| &r.outcome.latency)),
        mount_options,
        runs,
    })
}

/// One compared column: a target (index for `make`) under a hygiene setting; `label` is
/// appended to the target's name (e.g. " [C+bg-fsync]").
#[derive(Debug, Clone)]
pub struct Column {
    pub target: usize,
    pub hygiene: hygiene::Hygiene,
    pub label: String,
}

/// The seed of repetition `rep` (from 1) of a run whose base seed is `base`: SplitMix64 of
/// both, so that neighbouring bases or repetitions give unrelated seeds.
pub fn rep_seed(base: u64, rep: usize) -> u64 {
    splitmix64(base ^ splitmix64(rep as u64))
}

/// The seed of the RNG that orders the columns of every repetition.
pub fn order_seed(base: u64) -> u64 {
    splitmix64(base ^ 0x6f72_6465_7273)
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One repetition: its seed, and the columns (their report names) in the order they ran.
#[derive(Debug, Clone, Serialize)]
pub struct Repetition {
    pub rep: usize,
    pub seed: u64,
    pub order: Vec<String>,
}

/// What [`run_columns`] gives: a report per column, and how each repetition ran.
#[derive(Debug, Clone, Serialize)]
pub struct Columns {
    pub reports: Vec<Report>,
    /// The seed of the RNG that drew the orders.
    pub order_seed: u64,
    pub repetitions: Vec<Repetition>,
}

/// Runs `reps` repetitions of every column (a target made fresh by `make(target, rep)`, under
/// its own hygiene: paper 002's scenarios and background jobs compare within one run). Within
/// each repetition the columns take turns in an order drawn at random (from an RNG seeded with
/// [`order_seed`]`(base_seed)`), so that neither a noisy minute nor a warm-up favours a fixed
/// position, and every column runs the workload with that repetition's seed
/// ([`rep_seed`]`(base_seed, rep)`), so the runs of a repetition are pairs. Summarises each
/// column.
pub fn run_columns(
    workload_name: &str,
    spec: &Spec,
    reps: usize,
    base_seed: u64,
    columns: &[Column],
    mut make: impl FnMut(usize, usize) -> io::Result<Box<dyn target::Target>>,
    mut progress: impl FnMut(&str, usize, &Run),
) -> io::Result<Columns> {
    use rand::{seq::SliceRandom, SeedableRng};
    let mut runs: Vec<(String, Vec<Run>)> = vec![(String::new(), Vec::new()); columns.len()];
    let mut rng = rand::rngs::StdRng::seed_from_u64(order_seed(base_seed));
    let mut repetitions = Vec::new();
    for rep in 1..=reps.max(1) {
        let seed = rep_seed(base_seed, rep);
        let spec = spec.reseeded(seed);
        let mut order: Vec<usize> = (0..columns.len()).collect();
        order.shuffle(&mut rng);
        let mut names = Vec::new();
        for &i in &order {
            if interrupted() {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
            }
            let c = &columns[i];
            let (name, run) = run_once(rep, &spec, &c.hygiene, make(c.target, rep)?)?;
            let name = format!("{name}{}", c.label);
            progress(&name, rep, &run);
            names.push(name.clone());
            runs[i].0 = name;
            runs[i].1.push(run);
        }
        repetitions.push(Repetition {
            rep,
            seed,
            order: names,
        });
    }
    Ok(Columns {
        reports: runs
            .into_iter()
            .map(|(name, r)| summarise(workload_name, spec, name, r))
            .collect::<io::Result<_>>()?,
        order_seed: order_seed(base_seed),
        repetitions,
    })
}

/// One repetition's ratio target/baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairRatio {
    pub rep: usize,
    pub ratio: f64,
}

/// How a target compares with the first (the baseline) on the headline rate, paired by
/// repetition (see [`stats`]).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub target: String,
    /// The geometric mean of the paired ratios target/baseline (of rates: above 1 is faster).
    pub ratio_to_baseline: f64,
    /// Its 95 % t-interval (exp of the interval of the mean log ratio); null below two pairs.
    pub ci95_low: Option<f64>,
    pub ci95_high: Option<f64>,
    /// The percentile bootstrap's 95 % interval, beside it (not used for the verdict).
    pub bootstrap95_low: Option<f64>,
    pub bootstrap95_high: Option<f64>,
    /// Pairs: repetitions both ran.
    pub pairs: usize,
    /// Each pair's ratio, by repetition.
    pub ratios: Vec<PairRatio>,
    /// Ratios flagged as outliers (kept in the interval).
    pub ratio_outliers: Vec<stats::Outlier>,
    /// For reference: mean rate over mean rate (unpaired).
    pub mean_over_mean: f64,
    pub verdict: stats::Verdict,
}

pub fn compare_to_first(reports: &[Report]) -> Vec<Comparison> {
    let Some(base) = reports.first() else {
        return Vec::new();
    };
    let rates = |r: &Report| -> Vec<(usize, f64)> {
        r.runs
            .iter()
            .map(|run| (run.rep, run.outcome.rate))
            .collect()
    };
    let base_rates = rates(base);
    reports
        .iter()
        .map(|r| compare_rates(&r.target, &rates(r), &base_rates))
        .collect()
}

/// Compares `target`'s (repetition, rate) runs with the baseline's, pairing by repetition.
pub fn compare_rates(target: &str, runs: &[(usize, f64)], base: &[(usize, f64)]) -> Comparison {
    let base_rate: BTreeMap<usize, f64> = base.iter().copied().collect();
    let pairs: Vec<(usize, f64, f64)> = runs
        .iter()
        .filter_map(|&(rep, rate)| Some((rep, rate, *base_rate.get(&rep)?)))
        .collect();
    let t: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let b: Vec<f64> = pairs.iter().map(|p| p.2).collect();
    let p = stats::paired_ratio(&t, &b);
    let ratios: Vec<PairRatio> = pairs
        .iter()
        .filter(|p| p.2 > 0.0)
        .map(|p| PairRatio {
            rep: p.0,
            ratio: p.1 / p.2,
        })
        .collect();
    let mean = |xs: &[(usize, f64)]| xs.iter().map(|x| x.1).sum::<f64>() / xs.len() as f64;
    Comparison {
        target: target.to_string(),
        ratio_to_baseline: p.ratio,
        ci95_low: p.ci95_low,
        ci95_high: p.ci95_high,
        bootstrap95_low: p.bootstrap95_low,
        bootstrap95_high: p.bootstrap95_high,
        pairs: p.n,
        ratio_outliers: stats::outliers(
            &ratios.iter().map(|r| (r.rep, r.ratio)).collect::<Vec<_>>(),
        ),
        ratios,
        mean_over_mean: mean(runs) / mean(base),
        verdict: p.verdict,
    }
}

/// A comparison in words that read one way: the ratio is always "× BASELINE's rate", and the
/// word after it names who is faster by how much (a ratio below 1 is never followed by
/// "slower" as if it were a multiplier of slowness). E.g. `fuse2fs: 0.26× moafs's rate
/// (95 % CI 0.24–0.28): moafs 3.8× faster`.
pub fn describe(c: &Comparison, baseline: &str) -> String {
    let r = c.ratio_to_baseline;
    let ci = match (c.ci95_low, c.ci95_high) {
        (Some(l), Some(h)) => format!("95 % CI {}–{}", fmt_ratio(l), fmt_ratio(h)),
        _ => format!("{} pair(s): no interval", c.pairs),
    };
    let what = match c.verdict {
        stats::Verdict::Higher => format!("{} {}× faster", c.target, fmt_ratio(r)),
        stats::Verdict::Lower => format!("{baseline} {}× faster", fmt_ratio(1.0 / r)),
        stats::Verdict::NoDifference => format!(
            "no difference (the interval lies within ±{:.0} % of 1)",
            stats::NO_DIFFERENCE_BAND * 100.0
        ),
        stats::Verdict::Inconclusive if c.ci95_low.is_none() => {
            "inconclusive (an interval needs two or more repetitions)".to_string()
        }
        stats::Verdict::Inconclusive => {
            "inconclusive (the interval contains 1 but is too wide to call it equal)".to_string()
        }
    };
    format!(
        "{}: {}× {baseline}'s rate ({ci}): {what}",
        c.target,
        fmt_ratio(r)
    )
}

/// Two significant digits below 10, one decimal up to 100, none beyond.
pub fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() {
        "?".to_string()
    } else if r <= 0.0 {
        format!("{r:.2}")
    } else if r < 10.0 {
        let digits = (1 - r.log10().floor().max(-10.0) as i32).clamp(1, 6) as usize;
        format!("{r:.digits$}")
    } else if r < 100.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_takes_a_repetitions_seed() {
        for (name, _) in WORKLOADS {
            let spec = workload(name, 0.01, 7, 1.0).unwrap();
            assert_eq!(spec.seed(), 7, "{name}");
            let again = spec.reseeded(rep_seed(7, 2));
            assert_eq!(again.seed(), rep_seed(7, 2), "{name}");
            // and it is the workload's own seed field that changed
            let v = serde_json::to_value(&again).unwrap();
            assert_eq!(v["seed"], rep_seed(7, 2), "{name}");
        }
    }

    #[test]
    fn repetitions_get_distinct_reproducible_seeds() {
        let seeds: Vec<u64> = (1..=20).map(|r| rep_seed(42, r)).collect();
        let mut d = seeds.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 20);
        assert_eq!(rep_seed(42, 3), seeds[2]);
        assert_ne!(rep_seed(43, 1), rep_seed(42, 1));
        assert_ne!(order_seed(42), order_seed(43));
    }

    fn lat(p99: f64) -> BTreeMap<String, latency::LatencySummary> {
        BTreeMap::from([(
            "read".to_string(),
            latency::LatencySummary {
                count: 10,
                mean_us: p99 / 10.0,
                p50_us: p99 / 20.0,
                p99_us: p99,
                p999_us: p99 * 2.0,
                max_us: p99 * 3.0,
            },
        )])
    }

    #[test]
    fn latency_is_the_mean_of_each_runs_percentile() {
        let runs = [lat(100.0), lat(300.0), BTreeMap::new()];
        let l = latency_over_runs(&runs)["read"];
        assert_eq!(l.runs, 2);
        assert!((l.p99_us - 200.0).abs() < 1e-9 && (l.max_us - 900.0).abs() < 1e-9);
        assert!((l.p50_us - 10.0).abs() < 1e-9 && (l.p999_us - 400.0).abs() < 1e-9);
        assert!((l.count - 10.0).abs() < 1e-9);
        let v = serde_json::to_value(l).unwrap();
        assert!(v["p99_us"].is_f64(), "{v}");
        assert!(latency_over_runs(&[BTreeMap::new()]).is_empty());
    }

    #[test]
    fn comparisons_pair_by_repetition() {
        let base = [(1, 100.0), (2, 200.0), (3, 400.0)];
        // the target's runs listed in another order, one repetition missing: pairs go by
        // repetition, and both ratios are exactly 0.5 — a zero-width interval below 1
        let target = [(2, 100.0), (1, 50.0)];
        let c = compare_rates("b", &target, &base);
        assert!((c.ratio_to_baseline - 0.5).abs() < 1e-12, "{c:?}");
        assert_eq!((c.pairs, c.verdict), (2, stats::Verdict::Lower));
        assert_eq!(
            c.ratios,
            [
                PairRatio { rep: 2, ratio: 0.5 },
                PairRatio { rep: 1, ratio: 0.5 }
            ]
        );
        // mean over mean, unpaired: 75 / 233.3
        assert!((c.mean_over_mean - 75.0 / (700.0 / 3.0)).abs() < 1e-12);
        let same = compare_rates("a", &base, &base);
        assert_eq!(same.ratio_to_baseline, 1.0);
        assert_eq!(same.verdict, stats::Verdict::NoDifference);
        // a ratio far off the others is flagged and kept
        let base = [(1, 10.0), (2, 10.0), (3, 10.0), (4, 10.0), (5, 10.0)];
        let target = [(1, 10.0), (2, 10.5), (3, 9.8), (4, 10.2), (5, 40.0)];
        let c = compare_rates("b", &target, &base);
        assert_eq!(c.ratio_outliers.len(), 1, "{c:?}");
        assert_eq!(c.ratio_outliers[0].rep, 5);
        assert_eq!(c.pairs, 5);
    }

    #[test]
    fn ratios_read_one_way() {
        let mk = |r: f64, l: f64, h: f64, v| Comparison {
            target: "fuse2fs".into(),
            ratio_to_baseline: r,
            ci95_low: Some(l),
            ci95_high: Some(h),
            bootstrap95_low: None,
            bootstrap95_high: None,
            pairs: 3,
            ratios: Vec::new(),
            ratio_outliers: Vec::new(),
            mean_over_mean: r,
            verdict: v,
        };
        use stats::Verdict::*;
        let s = describe(&mk(0.263, 0.24, 0.28, Lower), "moafs");
        assert_eq!(
            s,
            "fuse2fs: 0.26× moafs's rate (95 % CI 0.24–0.28): moafs 3.8× faster"
        );
        assert!(!s.contains("slower"));
        let s = describe(&mk(5.1, 4.8, 5.4, Higher), "moafs");
        assert!(s.ends_with("fuse2fs 5.1× faster"), "{s}");
        let s = describe(&mk(1.0, 0.98, 1.02, NoDifference), "moafs");
        assert!(s.contains("no difference"), "{s}");
        let s = describe(&mk(1.1, 0.8, 1.5, Inconclusive), "moafs");
        assert!(s.contains("inconclusive") && s.contains("too wide"), "{s}");
        let mut one = mk(9.5, 0.0, 0.0, Inconclusive);
        (one.ci95_low, one.ci95_high, one.pairs) = (None, None, 1);
        let s = describe(&one, "moafs");
        assert_eq!(
            s,
            "fuse2fs: 9.5× moafs's rate (1 pair(s): no interval): inconclusive (an interval \
             needs two or more repetitions)"
        );
        assert_eq!(fmt_ratio(0.0312), "0.031");
        assert_eq!(fmt_ratio(1.234), "1.2");
        assert_eq!(fmt_ratio(12.34), "12.3");
        assert_eq!(fmt_ratio(1234.0), "1234");
    }
}
