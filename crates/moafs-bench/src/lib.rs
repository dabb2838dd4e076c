//! The moafs evaluation harness (issue 4), growing: targets (the engine in-process, any
//! directory), native seeded workloads, and the statistics that keep comparisons honest.
//! `moafs bench` is its command line.

pub mod aging;
pub mod bytelog_exp;
pub mod cgroup;
pub mod cowrite_exp;
pub mod filebench;
pub mod html;
pub mod hygiene;
pub mod latency;
pub mod managed;
pub mod micro;
pub mod postmark;
pub mod procstat;
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

use serde::Serialize;
use stats::Summary;
use std::io;
pub use workload::{named as workload, Outcome, Spec, WORKLOADS};

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
    pub outcome: Outcome,
    /// Engine counters of the run (the engine target, and managed moafs: its `stats=`).
    pub engine: Option<serde_json::Value>,
    /// What the device saw, setup and unmount included (managed targets and the engine;
    /// fuse2fs not measured).
    pub device: Option<managed::DeviceIo>,
    /// CPU time of the harness and of the FUSE daemon, and the daemon's I/O counters, over
    /// the workload (setup included, unmount not).
    pub cost: procstat::RunCost,
    /// Device bytes written per operation (every operation the workload counted).
    pub device_bytes_written_per_op: Option<f64>,
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
    /// Bytes written to the target's block device during the measured phase (kernel file
    /// systems on a block device; None for FUSE and directories).
    pub measured_device_write_bytes: Option<u64>,
    /// Scenario C: bytes of the pollution runs' files present through the measured run.
    pub pollution_bytes: Option<u64>,
    /// The hard memory limit the run (pollution runs included) was under, bytes.
    pub memory_limit: Option<u64>,
    /// Under a memory limit, whether the loop device of a kernel file system was switched to
    /// direct I/O on its image (None: not on a loop device).
    pub loop_direct_io: Option<bool>,
    /// The memory cgroup's view of the run: limit, peak usage (page cache included), and
    /// how often usage hit the limit.
    pub memory: Option<cgroup::MemoryUse>,
    /// Bytes other processes moved on real disks just before the run (when watched).
    pub other_disk_bytes_before: Option<u64>,
}

/// One workload on one target over the repetitions (schema in docs/BENCHMARKS.md).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workload: String,
    pub config: Spec,
    pub target: String,
    /// The headline's unit: `rate` is `unit` per second.
    pub unit: String,
    pub runs: Vec<Run>,
    /// Over the runs: the headline rate (higher is better).
    pub rate: Summary,
    /// Over the runs: wall seconds of the whole run.
    pub total_secs: Summary,
    /// Over the runs: device bytes written per operation (targets that measure it).
    pub device_bytes_written_per_op: Option<Summary>,
    /// Over the runs: CPU microseconds per operation, harness and FUSE daemon together.
    pub cpu_us_per_op: Option<Summary>,
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
    let other = hygiene.watch.map(hygiene::other_disk_activity);
    let job: RefCell<Option<(BackgroundJob, BackgroundPlan)>> = RefCell::new(None);
    let device_at_start = RefCell::new(None);
    // CPU is counted from the measured phase's start (after the setup, before the job)
    let before = RefCell::new(procstat::before(t.daemon_pid()));
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
        *device_at_start.borrow_mut() = dir.as_deref().and_then(hygiene::block_device_written);
        start_background()
    };
    let outcome = if matches!(spec, Spec::Postmark(_)) {
        between()?;
        spec.run(t.as_ref(), &|| Ok(()))
    } else {
        spec.run(t.as_ref(), &between)
    };
    let cost = procstat::after(&before.borrow());
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
    drop(pollution);
    let memory = cg.as_ref().map(cgroup::MemoryCgroup::memory_use);
    if let Some(cg) = cg.take() {
        cg.remove()?;
    }
    let device = t.finish()?;
    let engine = t.counters();
    let ops = outcome.operations();
    // Device counters cover the whole mount: with pollution runs or a background writer on
    // the same device, bytes per workload operation would be wrong, so none is given.
    let per_op_valid =
        hygiene.cache != CacheState::Polluted && hygiene.background == Background::None;
    Ok((
        name,
        Run {
            rep,
            device_bytes_written_per_op: device
                .filter(|_| ops > 0 && per_op_valid)
                .map(|d| d.write_bytes as f64 / ops as f64),
            outcome,
            engine,
            device,
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
    let cpu: Vec<f64> = runs
        .iter()
        .filter(|r| r.outcome.operations() > 0)
        .map(|r| {
            let c = &r.cost;
            let daemon = c.daemon.map_or(0.0, |d| d.user_s + d.sys_s);
            (c.harness.user_s + c.harness.sys_s + daemon) * 1e6 / r.outcome.operations() as f64
        })
        .collect();
    let bad = || io::Error::other("a run produced no finite measure");
    Ok(Report {
        cpu_us_per_op: Summary::of(&cpu),
        workload: workload_name.to_string(),
        config: spec.clone(),
        target,
        unit: runs
            .first()
            .map(|r| r.outcome.unit.clone())
            .unwrap_or_default(),
        rate: Summary::of(&rates).ok_or_else(bad)?,
        total_secs: Summary::of(&secs).ok_or_else(bad)?,
        device_bytes_written_per_op: Summary::of(&per_op),
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

/// Runs `reps` repetitions of every column (a target made fresh by `make(target, rep)`, under
/// its own hygiene: paper 002's scenarios and background jobs compare within one run), the
/// columns taking turns within each repetition so that a noisy minute hits all of them, and
/// summarises each column.
pub fn run_columns(
    workload_name: &str,
    spec: &Spec,
    reps: usize,
    columns: &[Column],
    mut make: impl FnMut(usize, usize) -> io::Result<Box<dyn target::Target>>,
    mut progress: impl FnMut(&str, usize, &Run),
) -> io::Result<Vec<Report>> {
    let mut runs: Vec<(String, Vec<Run>)> = vec![(String::new(), Vec::new()); columns.len()];
    for rep in 1..=reps.max(1) {
        for (c, slot) in columns.iter().zip(runs.iter_mut()) {
            if interrupted() {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
            }
            let (name, run) = run_once(rep, spec, &c.hygiene, make(c.target, rep)?)?;
            let name = format!("{name}{}", c.label);
            progress(&name, rep, &run);
            slot.0 = name;
            slot.1.push(run);
        }
    }
    runs.into_iter()
        .map(|(name, r)| summarise(workload_name, spec, name, r))
        .collect()
}

/// How each target compares with the first (the baseline), on the headline rate.
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
            ratio_to_baseline: r.rate.mean / base.rate.mean,
            verdict: stats::compare(&r.rate, &base.rate),
        })
        .collect()
}
