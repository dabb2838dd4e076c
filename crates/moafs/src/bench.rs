//! `moafs bench`: workloads on targets, repeated, compared with the first target.

use super::*;

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// List the workloads, presets and targets and exit.
    #[arg(long)]
    pub(crate) list: bool,
    /// Workload (see --list); several, comma-separated, run one after the other.
    #[arg(long, default_value = "postmark-quick")]
    pub(crate) workload: String,
    /// A set of workloads with their sizes and repetitions: `quick` (about two minutes per
    /// target), `headline` (README's table), `paper004` (paper 004's PostMark table) or `full`
    /// (every workload at full size). Replaces --workload.
    #[arg(long)]
    pub(crate) preset: Option<String>,
    /// `engine` (in-process on memory; `engine:file` on an image in --backing, `engine:hdd`
    /// / `engine:ssd` on a modelled disk), a managed file system made fresh for every run
    /// (`moafs`, `ext4`, `xfs`, `btrfs`, `fuse2fs`; root; `moafs@opt;opt=value` mounts moafs
    /// with extra options, e.g. `moafs@dirty_max=1G`), or a directory (a fresh
    /// subdirectory per run). Several, comma-separated: they take turns within each
    /// repetition and are compared with the first.
    #[arg(long, default_value = "engine")]
    pub(crate) target: String,
    /// Image size of managed and engine targets (the same for every target).
    #[arg(long, default_value = "4G")]
    pub(crate) size: String,
    /// Where managed targets keep their image and mount point (/dev/shm: DRAM-class storage).
    #[arg(long, default_value = "/dev/shm")]
    pub(crate) backing: PathBuf,
    /// Repetitions (default 5, or the preset's).
    #[arg(long)]
    pub(crate) reps: Option<usize>,
    /// Multiply file, transaction and request counts (sizes unchanged); with a preset,
    /// multiplies the preset's own scale.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) scale: f64,
    /// Seconds each Filebench run lasts (default 60, or the preset's).
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Write the report as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Write a static HTML report with an SVG plot per workload here.
    #[arg(long)]
    pub(crate) html: Option<PathBuf>,
    /// Write the comparison chart (SVG) here: per workload, each target's rate as a multiple
    /// of the first target's, with its 95 % interval.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) chart: Option<PathBuf>,
    /// Run nothing: make --chart and --html from this result file (written by --json).
    #[arg(long, value_name = "FILE.json")]
    pub(crate) from: Option<PathBuf>,
    /// The chart's title (default: what it shows).
    #[arg(long)]
    pub(crate) title: Option<String>,
    /// Cache state before each run (paper 002): `fresh` (B: a new target per run), `dropped`
    /// (A: also sync and drop the kernel's and moafs's caches right after the mount, before
    /// the workload; root), `polluted` (C: four unrelated runs of the workload first, their
    /// files kept until the measured run is over) or `cold` (not a paper scenario: the drop
    /// after the workload's setup, before its measured phase). Several, comma-separated:
    /// each is a column of the comparison.
    #[arg(long, default_value = "fresh")]
    pub(crate) cache: String,
    /// A job writing 100 KB files beside the measured phase (paper 002): `none`, `write`, or
    /// `fsync` (fsync after each file). Several, comma-separated: each is a column.
    #[arg(long, default_value = "none")]
    pub(crate) background: String,
    /// Watch real disks for this many milliseconds before each run and warn when something
    /// else moved data (0: do not watch).
    #[arg(long, default_value_t = 300)]
    pub(crate) watch_ms: u64,
    /// Run each workload (scenario C's pollution runs included) in a memory cgroup with this
    /// hard limit (e.g. 2G; root; mounted targets): the page cache of its files counts
    /// against it, FUSE daemons stay outside. Paper 002's machine had 4 GB.
    #[arg(long)]
    pub(crate) memory_limit: Option<String>,
    /// Count the FUSE requests the kernel sends each FUSE target during the measured phase,
    /// by opcode, and report them per operation (root; perf and the kernel's FUSE
    /// tracepoints, Linux 6.15+). Counting costs the kernel a little per request: compare
    /// rates from runs without it.
    #[arg(long)]
    pub(crate) fuse_requests: bool,
}

pub(crate) fn cmd_bench(a: &BenchArgs) -> Result<(), String> {
    use moafs_bench::target::{DirTarget, EngineDevice, EngineTarget, Target};
    if a.list {
        say!("workloads:");
        for (name, what) in moafs_bench::WORKLOADS {
            say!("  {name:16} {what}");
        }
        say!("presets:");
        for &name in moafs_bench::workload::PRESETS {
            if let Some(p) = moafs_bench::workload::preset(name) {
                let names: Vec<&str> = p.workloads.iter().map(|w| w.0).collect();
                say!(
                    "  {name:16} {} repetitions, Filebench {} s: {}",
                    p.reps,
                    p.duration_secs,
                    names.join(", ")
                );
            }
        }
        say!("targets:");
        for (name, what) in moafs_bench::TARGETS {
            say!("  {name:16} {what}");
        }
        return Ok(());
    }
    if let Some(from) = &a.from {
        if a.html.is_none() && a.chart.is_none() {
            return Err("--from makes reports: give --html or --chart".into());
        }
        let text = std::fs::read_to_string(from).map_err(|e| format!("{}: {e}", from.display()))?;
        let doc: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a result file of --json: {e}", from.display()))?;
        return write_reports(a, &doc);
    }
    if !(a.scale.is_finite() && a.scale > 0.0) {
        return Err(format!(
            "--scale must be a positive number, not {}",
            a.scale
        ));
    }
    if let Some(d) = a.duration {
        if !(d.is_finite() && d > 0.0) {
            return Err(format!("--duration must be a positive number, not {d}"));
        }
    }
    let preset = match &a.preset {
        None => None,
        Some(p) => Some(moafs_bench::workload::preset(p).ok_or_else(|| {
            format!(
                "unknown preset {p:?} ({}; see `moafs bench --list`)",
                moafs_bench::workload::PRESETS.join(", ")
            )
        })?),
    };
    let reps = a
        .reps
        .unwrap_or_else(|| preset.as_ref().map_or(5, |p| p.reps));
    if reps == 0 || reps > 1000 {
        return Err(format!("--reps must be 1..1000, not {reps}"));
    }
    let duration = a
        .duration
        .unwrap_or_else(|| preset.as_ref().map_or(60.0, |p| p.duration_secs));
    let chosen: Vec<(String, f64)> = match &preset {
        Some(p) => p
            .workloads
            .iter()
            .map(|&(w, s)| (w.to_string(), s * a.scale))
            .collect(),
        None => a
            .workload
            .split(',')
            .map(|w| (w.trim().to_string(), a.scale))
            .collect(),
    };
    let mut workloads = Vec::new();
    for (name, scale) in &chosen {
        let spec = moafs_bench::workload(name, *scale, a.seed, duration)
            .ok_or_else(|| format!("unknown workload {name:?} (see `moafs bench --list`)"))?;
        workloads.push((name.clone(), spec));
    }
    use moafs_bench::hygiene::{Background, CacheState, Hygiene};
    let caches = a
        .cache
        .split(',')
        .map(|c| {
            CacheState::parse(c.trim()).ok_or_else(|| {
                format!("--cache takes fresh, dropped or polluted (B, A, C), not {c:?}")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let backgrounds = a
        .background
        .split(',')
        .map(|b| {
            Background::parse(b.trim())
                .ok_or_else(|| format!("--background takes none, write or fsync, not {b:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let watch = (a.watch_ms > 0).then(|| std::time::Duration::from_millis(a.watch_ms));
    let memory_limit = match &a.memory_limit {
        Some(m) => Some(moafs_core::parse_size(m)?),
        None => None,
    };
    if a.fuse_requests {
        moafs_bench::fusetrace::available().map_err(|e| format!("--fuse-requests: {e}"))?;
    }
    use moafs_bench::managed::{Kind, Managed, ManagedOptions};
    /// One target of the comma-separated list.
    enum Spec {
        Engine(EngineDevice),
        Managed(ManagedOptions),
        Dir(PathBuf),
    }
    let size = moafs_core::parse_size(&a.size)?;
    let mut specs = Vec::new();
    for name in a.target.split(',').map(str::trim) {
        specs.push(if let Some(dev) = EngineDevice::parse(name) {
            if dev == EngineDevice::File && !a.backing.is_dir() {
                return Err(format!(
                    "--backing {} is not a directory",
                    a.backing.display()
                ));
            }
            Spec::Engine(dev)
        } else if let Some(kind) = Kind::parse(name.split('@').next().unwrap_or(name)) {
            // `moafs@opt;opt=v`: moafs mounted with extra options (`;` for `,`); the memfs
            // and passthrough targets take their transport's options the same way, the
            // kernel's file systems mount(8)'s (`ext4@data=journal`)
            let takes_options = kind != Kind::Fuse2fs;
            let mount_options = match name.split_once('@') {
                None => String::new(),
                Some((_, o)) if takes_options && !o.is_empty() => o.replace(';', ","),
                Some(_) => {
                    return Err(format!(
                        "target {name}: fuse2fs takes no mount options (moafs@opt;opt=value, \
                         ext4@data=journal)"
                    ))
                }
            };
            if !a.backing.is_dir() {
                return Err(format!(
                    "--backing {} is not a directory",
                    a.backing.display()
                ));
            }
            Spec::Managed(ManagedOptions {
                kind,
                size,
                backing: a.backing.clone(),
                moafs: std::env::current_exe().map_err(|e| e.to_string())?,
                mount_options,
            })
        } else {
            let d = PathBuf::from(name);
            if !d.is_dir() {
                return Err(format!("target {} is not a directory", d.display()));
            }
            Spec::Dir(d)
        });
    }
    let has_engine = specs.iter().any(|s| matches!(s, Spec::Engine(_)));
    let needs_kernel = caches.contains(&CacheState::Polluted)
        || backgrounds.iter().any(|&b| b != Background::None)
        || memory_limit.is_some();
    if has_engine && needs_kernel {
        return Err(
            "--cache polluted, --background and --memory-limit need mounted targets (the \
                    kernel's cache), not the in-process engine"
                .to_string(),
        );
    }
    // the compared columns: every target under every cache state and background job
    let tagged = caches.len() > 1 || backgrounds.len() > 1;
    let mut columns = Vec::new();
    for target in 0..specs.len() {
        for &cache in &caches {
            for &background in &backgrounds {
                columns.push(moafs_bench::Column {
                    target,
                    hygiene: Hygiene {
                        cache,
                        watch,
                        background,
                        memory_limit,
                        fuse_requests: a.fuse_requests,
                    },
                    label: if tagged {
                        format!(" [{}{}]", cache.letter(), background.label())
                    } else {
                        String::new()
                    },
                });
            }
        }
    }
    if has_engine {
        // a workload that needs a real directory cannot run in-process
        if preset.is_some() {
            workloads.retain(|(name, w)| {
                if w.needs_dir() {
                    say!("{name}: skipped (needs a mounted target, not the engine)");
                }
                !w.needs_dir()
            });
        } else if let Some((name, _)) = workloads.iter().find(|(_, w)| w.needs_dir()) {
            return Err(format!(
                "workload {name} needs a mounted target (a managed file system or a \
                 directory), not the in-process engine"
            ));
        }
    }
    // Ctrl-C, SIGTERM or SIGHUP (the ctrlc crate's `termination` feature; `kill` and a
    // closed terminal must not leave a loop device, a mount or an image behind): the running
    // workload fails at its next operation and its target is taken down on the way out; a
    // second signal exits at once.
    let _ = ctrlc::set_handler(|| {
        if moafs_bench::interrupted() {
            moafs_bench::cgroup::cleanup_active();
            std::process::exit(130);
        }
        eprintln!("moafs bench: interrupted; taking the target down (again to quit now)");
        moafs_bench::interrupt();
    });
    let make = |i: usize, rep: usize| -> std::io::Result<Box<dyn Target>> {
        Ok(match &specs[i] {
            Spec::Engine(dev) => Box::new(EngineTarget::on(*dev, size, &a.backing)?),
            Spec::Managed(o) => Box::new(DirTarget::managed(Managed::create(o)?)),
            Spec::Dir(d) => Box::new(DirTarget::scratch(
                d,
                &format!("moafs-bench-{}-{i}-{rep}", std::process::id()),
            )?),
        })
    };
    let environment = moafs_bench::env::Environment::capture(
        env!("MOAFS_COMMIT"),
        env!("CARGO_PKG_VERSION"),
        Some(&a.backing),
    );
    say!("moafs bench\n{}", environment.header().trim_end());
    let bar = indicatif::ProgressBar::new((workloads.len() * reps * columns.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results = Vec::new();
    for (name, spec) in &workloads {
        bar.suspend(|| {
            say!(
                "{name}: base seed {}, {reps} repetition{}, each with its own seed{}",
                a.seed,
                if reps == 1 { "" } else { "s" },
                if columns.len() > 1 {
                    ", targets in a random order within each"
                } else {
                    ""
                }
            )
        });
        bar.set_message(name.clone());
        let cols = moafs_bench::run_columns(
            name,
            spec,
            reps,
            a.seed,
            &columns,
            make,
            |target, rep, run| {
                let o = &run.outcome;
                bar.inc(1);
                bar.suspend(|| {
                    let cache = run.cache_before.map_or(String::new(), |c| {
                        let mib = |b: u64| b as f64 / (1 << 20) as f64;
                        format!(
                            "; page cache before: {:.0} MiB cached, {:.0} MiB dirty, {:.0} MiB \
                             writeback, {:.0} MiB free",
                            mib(c.cached_bytes),
                            mib(c.dirty_bytes),
                            mib(c.writeback_bytes),
                            mib(c.mem_free_bytes)
                        )
                    });
                    say!(
                        "  {target} run {rep}: {:.1} {}/s, {:.2} s in all (seed {}{cache})",
                        o.rate,
                        o.unit,
                        o.total_secs,
                        run.seed
                    );
                    // Filebench's "could not obtain a file": the rate of a run that stopped
                    // early is not comparable with one that ran its time (issue 46)
                    if let Some(why) = o.detail["stopped_early"].as_str() {
                        eprintln!(
                            "moafs bench: warning: {target} run {rep} stopped early after \
                             {:.2} s ({why}); its rate is not comparable with a run that ran \
                             its whole time (a larger file set: --scale)",
                            o.secs
                        );
                    }
                    if let Some(b) = run.other_disk_bytes_before.filter(|&b| b >= 1 << 20) {
                        eprintln!(
                            "moafs bench: warning: other processes moved {:.1} MiB on disks \
                             just before {target} run {rep}; its result may be disturbed",
                            b as f64 / (1 << 20) as f64
                        );
                    }
                });
            },
        )
        .map_err(|e| {
            bar.finish_and_clear();
            format!("benchmark {name} on {}: {e}", a.target)
        })?;
        bar.suspend(|| print_reports(&cols.reports));
        let comparison = moafs_bench::compare_to_first(&cols.reports);
        results.push(serde_json::json!({
            "workload": name,
            "order_seed": cols.order_seed,
            "repetitions": cols.repetitions,
            "comparison": comparison,
            "reports": cols.reports,
        }));
    }
    bar.finish_and_clear();
    let doc = serde_json::json!({
        "schema": 4,
        "environment": environment,
        "preset": a.preset,
        "reps": reps,
        "seed": a.seed,
        "cache": a.cache,
        "background": a.background,
        "memory_limit": memory_limit,
        "results": results,
    });
    if let Some(path) = &a.json {
        let s = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, s + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    write_reports(a, &doc)
}

/// `--html` and `--chart` of a result document.
fn write_reports(a: &BenchArgs, doc: &serde_json::Value) -> Result<(), String> {
    if let Some(path) = &a.html {
        std::fs::write(path, moafs_bench::html::report(doc))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &a.chart {
        let (baseline, groups) = moafs_bench::chart::groups_of(doc);
        let title = a
            .title
            .clone()
            .unwrap_or_else(|| format!("each target's rate as a multiple of {baseline}'s"));
        let svg = moafs_bench::chart::ratio_chart(&title, &baseline, &groups)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
        say!("chart: {}", path.display());
    }
    Ok(())
}

/// moafs's reads and readahead (paper 001), means over the runs that report engine counters:
/// bytes asked of it, file data blocks it read from the device, and its readahead's blocks.
fn reads_line(runs: &[moafs_bench::Run]) -> Option<String> {
    let counter = |e: &serde_json::Value, k: &str| e[k].as_u64().unwrap_or(0) as f64;
    let engines: Vec<&serde_json::Value> = runs.iter().filter_map(|r| r.engine.as_ref()).collect();
    let n = engines.len() as f64;
    let mean = |k: &str| engines.iter().map(|e| counter(e, k)).sum::<f64>() / n;
    if engines.is_empty() || mean("read_requests") == 0.0 {
        return None;
    }
    Some(format!(
        "  reads (moafs, mean per run): {:.1} MiB asked in {:.0} requests, {:.0} data blocks \
         from the device, readahead {:.0} blocks ({:.0} unused)",
        mean("read_bytes") / (1 << 20) as f64,
        mean("read_requests"),
        mean("data_blocks_read"),
        mean("ra_read"),
        mean("ra_read") - mean("ra_used"),
    ))
}

/// Where the fsyncs' time went (moafs: `Fs::fsync_report`, in each run's engine counters):
/// each phase's share of an average fsync, and how the fsyncs were served, as the mean over
/// the runs.
fn fsync_lines(runs: &[moafs_bench::Run]) -> Vec<String> {
    let engines: Vec<&serde_json::Value> = runs
        .iter()
        .filter_map(|r| r.engine.as_ref())
        .filter(|e| e["fsync_phases"]["fsyncs"].as_u64().unwrap_or(0) > 0)
        .collect();
    let reports: Vec<&serde_json::Value> = engines.iter().map(|e| &e["fsync_phases"]).collect();
    if reports.is_empty() {
        return Vec::new();
    }
    let n = reports.len() as f64;
    let mean = |group: &str, name: &str, k: &str| {
        reports
            .iter()
            .map(|f| f[group][name][k].as_f64().unwrap_or(0.0))
            .sum::<f64>()
            / n
    };
    let fsyncs = reports
        .iter()
        .map(|f| f["fsyncs"].as_u64().unwrap_or(0) as f64)
        .sum::<f64>()
        / n;
    let phases: Vec<String> = moafs_core::fs::FSYNC_PHASES
        .iter()
        .filter(|p| mean("phases", p, "count") > 0.0)
        .map(|p| format!("{p} {:.1}", mean("phases", p, "per_fsync_us")))
        .collect();
    let paths: Vec<String> = moafs_core::fs::FSYNC_PATHS
        .iter()
        .filter(|p| mean("paths", p, "count") > 0.0)
        .map(|p| {
            format!(
                "{p} {:.0} % (mean {:.0} µs, p99 {:.0})",
                mean("paths", p, "count") / fsyncs * 100.0,
                mean("paths", p, "mean_us"),
                mean("paths", p, "p99_us")
            )
        })
        .collect();
    vec![
        format!(
            "  fsync (moafs, mean per run: {} fsyncs), µs of an average fsync by phase: {}",
            thousands(fsyncs),
            phases.join(" · ")
        ),
        format!(
            "  fsyncs served by: {}; {:.2} commits per fsync",
            paths.join(" · "),
            engines
                .iter()
                .map(|e| e["commits"].as_f64().unwrap_or(0.0))
                .sum::<f64>()
                / n
                / fsyncs
        ),
    ]
}

/// A count per operation: three significant digits below 1, two decimals below 100.
fn per_op(x: f64) -> String {
    if x != 0.0 && x.abs() < 1.0 {
        let digits = (2 - x.abs().log10().floor() as i32).clamp(2, 9) as usize;
        format!("{x:.digits$}")
    } else if x.abs() < 100.0 {
        format!("{x:.2}")
    } else {
        thousands(x)
    }
}

/// `n` with thousands separators.
fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Outliers as `run 3 (123.4; tukey+mad)`, joined.
fn outlier_list(o: &[moafs_bench::stats::Outlier], digits: usize) -> String {
    o.iter()
        .map(|o| {
            format!(
                "run {} ({:.digits$}; {})",
                o.rep,
                o.value,
                o.rules.join("+")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn print_reports(reports: &[moafs_bench::Report]) {
    for rep in reports {
        let t = &rep.rate;
        say!(
            "{}: {:.1} {}/s (95 % CI {:.1} .. {:.1}, sd {:.1}, n {})",
            rep.target,
            t.mean,
            rep.unit,
            t.low(),
            t.high(),
            t.sd,
            t.n
        );
        if !rep.rate_outliers.is_empty() {
            say!(
                "  outliers (kept in the mean and interval): {}",
                outlier_list(&rep.rate_outliers, 1)
            );
        }
        for m in &rep.mount_options {
            say!("  mounted: {m}");
        }
        if let Some(d) = &rep.device_bytes_written_per_op {
            let source = match rep.runs.iter().find_map(|r| r.device.map(|d| d.source)) {
                Some("loop") => "the loop device",
                Some("engine") => "the engine's device",
                _ => "the device",
            };
            say!(
                "  device writes (setup, run, sync and unmount; at {source}) per operation \
                 counted: {:.0} bytes (95 % CI {:.0} .. {:.0}), {}{}",
                d.mean,
                d.low(),
                d.high(),
                rep.device_writes_per_op.as_ref().map_or(
                    "? write requests".to_string(),
                    |w| format!(
                        "{} write requests (95 % CI {} .. {})",
                        per_op(w.mean),
                        per_op(w.low()),
                        per_op(w.high())
                    )
                ),
                rep.device_write_requests
                    .as_ref()
                    .map_or(String::new(), |w| format!(
                        "; {} write requests per run",
                        thousands(w.mean)
                    ))
            );
        }
        if let Some(d) = &rep.device_bytes_per_byte_written {
            say!(
                "  device bytes written per byte the workload wrote: {:.3} (95 % CI {:.3} .. \
                 {:.3})",
                d.mean,
                d.low(),
                d.high()
            );
        }
        let modelled: Vec<f64> = rep
            .runs
            .iter()
            .filter_map(|r| r.device.and_then(|d| d.modelled_secs))
            .collect();
        if let Some(m) = moafs_bench::stats::Summary::of(&modelled) {
            say!(
                "  modelled device time: {:.3} s (95 % CI {:.3} .. {:.3})",
                m.mean,
                m.low(),
                m.high()
            );
        }
        if let Some(line) = reads_line(&rep.runs) {
            say!("{line}");
        }
        for line in fsync_lines(&rep.runs) {
            say!("{line}");
        }
        if let Some(f) = &rep.fuse_requests_per_op {
            say!("  FUSE requests per operation: {}", f.describe());
        }
        if let Some(c) = &rep.cpu_us_per_op {
            say!(
                "  CPU per operation (harness + FUSE daemon): {:.1} µs (95 % CI {:.1} .. {:.1})",
                c.mean,
                c.low(),
                c.high()
            );
        }
        if !rep.latency.is_empty() {
            say!("  latency, µs (each the mean over the runs of that run's percentile):");
            for (op, l) in &rep.latency {
                say!(
                    "    {op:14} p50 {:>9}  p99 {:>9}  p99.9 {:>9}  ({} ops per run, {} runs)",
                    thousands(l.p50_us),
                    thousands(l.p99_us),
                    thousands(l.p999_us),
                    thousands(l.count),
                    l.runs
                );
            }
        }
    }
    if reports.len() > 1 {
        let base = &reports[0].target;
        say!(
            "compared with {base} on {}/s, paired by repetition (geometric mean of the \
             ratios of rates; 95 % t-interval; no difference only within ±{:.0} %):",
            reports[0].unit,
            moafs_bench::stats::NO_DIFFERENCE_BAND * 100.0
        );
        for c in &moafs_bench::compare_to_first(reports)[1..] {
            say!("  {}", moafs_bench::describe(c, base));
            if !c.ratio_outliers.is_empty() {
                say!(
                    "    outlying ratios (kept): {}",
                    outlier_list(&c.ratio_outliers, 3)
                );
            }
        }
    }
}
