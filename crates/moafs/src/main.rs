//! `moafs`: mkfs, mount, fsck, inspect and install-helpers.
//!
//! Also answers to the names `mkfs.moafs`, `fsck.moafs`, `mount.moafs` and `mount.fuse.moafs`
//! (the conventions of mkfs(8), fsck(8) and mount(8)), and to `moafs IMAGE MOUNTPOINT -o OPTS`
//! (the convention of mount.fuse3 for `mount -t fuse.moafs`).

use clap::{Args, Parser, Subcommand};
use moafs_core::device::{BlockDevice, DeviceError, FileDevice, FileDeviceOptions};
use moafs_core::format::Geometry;
use moafs_core::fs::MountOptions;
use moafs_core::mkfs::{MkfsOptions, MIN_IMAGE_BYTES};
use moafs_core::{Fs, FsError};
use moafs_fuse::{MountConfig, UringMode};
use std::cell::RefCell;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod mounts;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "moafs", version, about = "moafs: a user-space file system")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create a file system on IMAGE (created when missing; needs --size then).
    Mkfs(MkfsArgs),
    /// Mount IMAGE on MOUNTPOINT (returns once the mount is ready unless -f).
    Mount(MountArgs),
    /// Check (and with -y repair) IMAGE. Exit: 0 clean, 1 corrected, 4 uncorrected, 8 error.
    Fsck(FsckArgs),
    /// Show the layout and counters of IMAGE.
    Inspect(InspectArgs),
    /// Unmount a moafs mount and wait until its daemon has committed and let go of the image
    /// (also as umount.fuse.moafs, which umount(8) runs for a fuse.moafs mount).
    Umount(UmountArgs),
    /// Symlink mkfs.moafs, fsck.moafs, mount.moafs, mount.fuse.moafs, umount.moafs and
    /// umount.fuse.moafs to this binary.
    InstallHelpers(InstallArgs),
    /// Run a benchmark workload on a target, repeated, with mean and 95 % confidence interval.
    Bench(BenchArgs),
    /// Age IMAGE (unmounted): a seeded create/grow/delete history until it is as full and as
    /// fragmented (layout score) as asked.
    Age(AgeArgs),
    /// Run paper 000's co-writing experiments in-process on the model disk (aged images,
    /// cowrite=on vs off; modelled time, device writes, bandwidth).
    Experiment(ExperimentArgs),
}

#[derive(Args, Debug)]
struct ExperimentArgs {
    /// The experiment: `cowrite`.
    which: String,
    /// Image size (paper: 4G).
    #[arg(long, default_value = "4G")]
    size: String,
    /// Utilisations in percent, comma-separated (paper: 0,10,30,50,70,90).
    #[arg(long, default_value = "0,10,30,50,70,90")]
    utilisation: String,
    /// Layout score aging goes down to.
    #[arg(long, default_value_t = 0.8)]
    layout: f64,
    /// Tests, comma-separated: seq-write, rand-write, dir-read, large-write, large-read,
    /// postmark-rfsl, postmark-fsl (default: all).
    #[arg(long)]
    tests: Option<String>,
    /// Multiply the small-file and PostMark tests' file counts (1 = the paper's).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one SVG plot per test into this directory.
    #[arg(long)]
    svg_dir: Option<PathBuf>,
    /// Run nothing: print the table (and write the plots) of a saved --json report.
    #[arg(long)]
    from_json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct AgeArgs {
    /// Share of the free space to fill (0 .. 0.95).
    #[arg(long, default_value_t = 0.5)]
    utilisation: f64,
    /// Layout score to reach (at most; Smith & Seltzer; 1 = contiguous).
    #[arg(long, default_value_t = 0.8)]
    layout: f64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Stop after this many steps even when the targets are not reached (exit 1).
    #[arg(long, default_value_t = 2_000_000)]
    max_steps: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    image: PathBuf,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// List the workloads, presets and targets and exit.
    #[arg(long)]
    list: bool,
    /// Workload (see --list); several, comma-separated, run one after the other.
    #[arg(long, default_value = "postmark-quick")]
    workload: String,
    /// A set of workloads with their sizes and repetitions: `quick` (about two minutes per
    /// target) or `full` (every workload at full size). Replaces --workload.
    #[arg(long)]
    preset: Option<String>,
    /// `engine` (in-process on memory; `engine:file` on an image in --backing, `engine:hdd`
    /// / `engine:ssd` on a modelled disk), a managed file system made fresh for every run
    /// (`moafs`, `ext4`, `xfs`, `btrfs`, `fuse2fs`; root; `moafs@opt;opt=value` mounts moafs
    /// with extra options, e.g. `moafs@dirty_max=1G`), or a directory (a fresh
    /// subdirectory per run). Several, comma-separated: they take turns within each
    /// repetition and are compared with the first.
    #[arg(long, default_value = "engine")]
    target: String,
    /// Image size of managed and engine targets (the same for every target).
    #[arg(long, default_value = "4G")]
    size: String,
    /// Where managed targets keep their image and mount point (/dev/shm: DRAM-class storage).
    #[arg(long, default_value = "/dev/shm")]
    backing: PathBuf,
    /// Repetitions (default 5, or the preset's).
    #[arg(long)]
    reps: Option<usize>,
    /// Multiply file, transaction and request counts (sizes unchanged); with a preset,
    /// multiplies the preset's own scale.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seconds each Filebench run lasts (default 60, or the preset's).
    #[arg(long)]
    duration: Option<f64>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a static HTML report with an SVG plot per workload here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Cache state before each run (paper 002): `fresh` (B: a new target per run), `dropped`
    /// (A: also sync and drop the kernel's and moafs's caches after the workload's setup;
    /// root) or `polluted` (C: four unrelated runs of the workload first). Several,
    /// comma-separated: each is a column of the comparison.
    #[arg(long, default_value = "fresh")]
    cache: String,
    /// A job writing 100 KB files beside the measured phase (paper 002): `none`, `write`, or
    /// `fsync` (fsync after each file). Several, comma-separated: each is a column.
    #[arg(long, default_value = "none")]
    background: String,
    /// Watch real disks for this many milliseconds before each run and warn when something
    /// else moved data (0: do not watch).
    #[arg(long, default_value_t = 300)]
    watch_ms: u64,
}

#[derive(Args, Debug)]
struct MkfsArgs {
    /// Size of the image, e.g. 64M, 10G (bytes without a suffix; K/M/G/T are powers of 1024).
    #[arg(long)]
    size: Option<String>,
    /// Block size: 4096 or 16384.
    #[arg(long, default_value_t = 4096)]
    block_size: u32,
    /// Number of allocation groups.
    #[arg(long)]
    groups: Option<u32>,
    /// Label (at most 32 bytes).
    #[arg(long, default_value = "")]
    label: String,
    /// Journal size in blocks (default: 1/64 of the image, 64 to 16384 blocks; 0: no journal).
    #[arg(long)]
    journal_blocks: Option<u32>,
    image: PathBuf,
}

#[derive(Args, Debug)]
struct MountArgs {
    /// Stay in the foreground (log to stderr).
    #[arg(short = 'f')]
    foreground: bool,
    /// Comma-separated options: journal=writeback|ordered|data, cache_size=, dirty_max=,
    /// flush_interval_ms=, cowrite=on|off, cowrite_max=SIZE, wb_order=dirty|address, ro, direct,
    /// threads=, attr_ttl_ms=, poll_ms=, uring=auto|off, uring_stream_kb=, allow_other, default_permissions, nodefault_permissions,
    /// log=PATH, pidfile=PATH, and the generic mount(8) options (ignored).
    #[arg(short = 'o', action = clap::ArgAction::Append)]
    options: Vec<String>,
    /// mount(8) helper flags (no mtab, sloppy, verbose): accepted and ignored.
    #[arg(short = 'n', hide = true)]
    no_mtab: bool,
    #[arg(short = 's', hide = true)]
    sloppy: bool,
    #[arg(short = 'v', hide = true)]
    verbose: bool,
    /// Run as mount(8)'s helper (mount.moafs, mount.fuse.moafs): set from argv[0].
    #[arg(long, hide = true)]
    mount_helper: bool,
    image: PathBuf,
    mountpoint: PathBuf,
}

#[derive(Args, Debug)]
struct FsckArgs {
    /// Check only; open the image read-only.
    #[arg(short = 'n', conflicts_with = "yes")]
    no: bool,
    /// Repair what can be repaired.
    #[arg(short = 'y')]
    yes: bool,
    /// e2fsck compatibility: -a and -p mean -y, -f is accepted and ignored.
    #[arg(short = 'a', hide = true)]
    auto: bool,
    #[arg(short = 'p', hide = true)]
    preen: bool,
    #[arg(short = 'f', hide = true)]
    force: bool,
    image: PathBuf,
}

#[derive(Args, Debug)]
struct InspectArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also the layout score of the files (Smith & Seltzer) and a histogram of free runs
    /// (reads every inode: slower).
    #[arg(long)]
    layout: bool,
    image: PathBuf,
}

#[derive(Args, Debug)]
struct UmountArgs {
    /// Lazy: detach now, clean up when no longer busy (returns without waiting for the daemon).
    #[arg(short = 'l')]
    lazy: bool,
    /// Force (MNT_FORCE).
    #[arg(short = 'f')]
    force: bool,
    /// umount(8) helper flags (no mtab, remount read-only on failure, verbose): accepted.
    #[arg(short = 'n', hide = true)]
    no_mtab: bool,
    #[arg(short = 'r', hide = true)]
    read_only_on_fail: bool,
    #[arg(short = 'v', hide = true)]
    verbose: bool,
    /// umount(8) passes the type (fuse.moafs) and a namespace; accepted.
    #[arg(short = 't', hide = true)]
    fstype: Option<String>,
    #[arg(short = 'N', hide = true)]
    namespace: Option<String>,
    /// The mount point (or the image).
    target: PathBuf,
}

#[derive(Args, Debug)]
struct InstallArgs {
    /// mkfs.moafs and fsck.moafs go to PREFIX/sbin.
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// Where the mount and umount helpers go (mount(8) and umount(8) look in /sbin). Default: /sbin,
    /// or PREFIX/sbin when --prefix is given.
    #[arg(long)]
    mount_helper_dir: Option<PathBuf>,
}

/// Whether `word` names a subcommand (or an alias, or `help`), as the CLI definition says.
fn is_subcommand(word: &str) -> bool {
    use clap::CommandFactory;
    word == "help"
        || Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == word || c.get_all_aliases().any(|a| a == word))
}

/// Rewrites argv for the helper names and the mount.fuse3 convention.
fn rewrite_args(mut args: Vec<OsString>) -> Vec<OsString> {
    if args.is_empty() {
        args.push("moafs".into());
    }
    let prog = Path::new(&args[0])
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sub = match prog.as_str() {
        "mkfs.moafs" => Some("mkfs"),
        "fsck.moafs" => Some("fsck"),
        "mount.moafs" | "mount.fuse.moafs" => Some("mount"),
        "umount.moafs" | "umount.fuse.moafs" => Some("umount"),
        _ => {
            let first = args.get(1).map(|a| a.to_string_lossy().into_owned());
            match first {
                Some(a) if !is_subcommand(&a) && !a.starts_with('-') && Path::new(&a).exists() => {
                    Some("mount")
                }
                _ => None,
            }
        }
    };
    if let Some(sub) = sub {
        args.insert(1, sub.into());
        if matches!(prog.as_str(), "mount.moafs" | "mount.fuse.moafs") {
            args.insert(2, "--mount-helper".into());
        }
    }
    args[0] = "moafs".into();
    args
}

/// Set once stdout is gone (the reader closed the pipe, as `| head` does): later output is
/// dropped, and the command still finishes its work (a repair is never cut short).
static STDOUT_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `println!` that never panics: a closed stdout is not an error of the command.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        use std::sync::atomic::Ordering;
        if !STDOUT_GONE.load(Ordering::Relaxed) {
            if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
                STDOUT_GONE.store(true, Ordering::Relaxed);
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("moafs: cannot write to standard output: {e}");
                }
            }
        }
    }};
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,fuser::session=error"),
    )
    .init();
    let args = rewrite_args(std::env::args_os().collect());
    let is_fsck = args.get(1).is_some_and(|a| a == "fsck");
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            return ExitCode::from(match (usage, is_fsck) {
                (false, _) => 0,
                (true, true) => 16,
                (true, false) => 1,
            });
        }
    };
    let code = match cli.cmd {
        Cmd::Mkfs(a) => report(cmd_mkfs(&a)),
        Cmd::Mount(a) => cmd_mount(a),
        Cmd::Umount(a) => match mounts::umount(&a.target, a.lazy, a.force) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("umount: {e}");
                32
            }
        },
        Cmd::Fsck(a) => cmd_fsck(&a),
        Cmd::Inspect(a) => report(cmd_inspect(&a)),
        Cmd::InstallHelpers(a) => report(cmd_install(&a)),
        Cmd::Bench(a) => report(cmd_bench(&a)),
        Cmd::Age(a) => report(cmd_age(&a)),
        Cmd::Experiment(a) => report(cmd_experiment(&a)),
    };
    ExitCode::from(code)
}

fn cmd_bench(a: &BenchArgs) -> Result<(), String> {
    use moafs_bench::target::{DirTarget, EngineDevice, EngineTarget, Target};
    if a.list {
        say!("workloads:");
        for (name, what) in moafs_bench::WORKLOADS {
            say!("  {name:16} {what}");
        }
        say!("presets:");
        for name in ["quick", "full"] {
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
            format!("unknown preset {p:?} (quick or full; see `moafs bench --list`)")
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
            // `moafs@opt;opt=v`: moafs mounted with extra options (`;` for `,`)
            let moafs_options = match name.split_once('@') {
                None => String::new(),
                Some((_, o)) if kind == Kind::Moafs && !o.is_empty() => o.replace(';', ","),
                Some(_) => {
                    return Err(format!(
                        "target {name}: only moafs takes mount options (moafs@opt;opt=value)"
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
                moafs_options,
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
        || backgrounds.iter().any(|&b| b != Background::None);
    if has_engine && needs_kernel {
        return Err(
            "--cache polluted and --background need mounted targets (the kernel's \
                    cache), not the in-process engine"
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
    // Ctrl-C: the running workload fails at its next operation and its target is taken
    // down on the way out; a second Ctrl-C exits at once.
    let _ = ctrlc::set_handler(|| {
        if moafs_bench::interrupted() {
            std::process::exit(130);
        }
        eprintln!("moafs bench: interrupted; taking the target down (Ctrl-C again to quit now)");
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
    let bar = indicatif::ProgressBar::new((workloads.len() * reps * columns.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results = Vec::new();
    for (name, spec) in &workloads {
        bar.suspend(|| {
            say!(
                "{name}: seed {}, {reps} repetitions{}",
                a.seed,
                if columns.len() > 1 {
                    ", targets taking turns"
                } else {
                    ""
                }
            )
        });
        bar.set_message(name.clone());
        let reports =
            moafs_bench::run_columns(name, spec, reps, &columns, make, |target, rep, run| {
                let o = &run.outcome;
                bar.inc(1);
                bar.suspend(|| {
                    say!(
                        "  {target} run {rep}: {:.1} {}/s, {:.2} s in all",
                        o.rate,
                        o.unit,
                        o.total_secs
                    );
                    if let Some(b) = run.other_disk_bytes_before.filter(|&b| b >= 1 << 20) {
                        eprintln!(
                            "moafs bench: warning: other processes moved {:.1} MiB on disks \
                             just before {target} run {rep}; its result may be disturbed",
                            b as f64 / (1 << 20) as f64
                        );
                    }
                });
            })
            .map_err(|e| {
                bar.finish_and_clear();
                format!("benchmark {name} on {}: {e}", a.target)
            })?;
        bar.suspend(|| print_reports(&reports));
        let comparison = moafs_bench::compare_to_first(&reports);
        results.push(serde_json::json!({
            "workload": name,
            "comparison": comparison,
            "reports": reports,
        }));
    }
    bar.finish_and_clear();
    let doc = serde_json::json!({
        "schema": 2,
        "preset": a.preset,
        "reps": reps,
        "seed": a.seed,
        "cache": a.cache,
        "background": a.background,
        "results": results,
    });
    if let Some(path) = &a.json {
        let s = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, s + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &a.html {
        std::fs::write(path, moafs_bench::html::report(&doc))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn print_reports(reports: &[moafs_bench::Report]) {
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
        if let Some(d) = &rep.device_bytes_written_per_op {
            say!(
                "  device bytes written per operation: {:.0} (95 % CI {:.0} .. {:.0})",
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
        if let Some(c) = &rep.cpu_us_per_op {
            say!(
                "  CPU per operation (harness + FUSE daemon): {:.1} µs (95 % CI {:.1} .. {:.1})",
                c.mean,
                c.low(),
                c.high()
            );
        }
    }
    if reports.len() > 1 {
        say!(
            "compared with {} ({}/s, mean over mean; 95 % intervals):",
            reports[0].target,
            reports[0].unit
        );
        for c in &moafs_bench::compare_to_first(reports)[1..] {
            let verdict = match c.verdict {
                moafs_bench::stats::Verdict::Higher => "faster",
                moafs_bench::stats::Verdict::Lower => "slower",
                moafs_bench::stats::Verdict::NoDifference => "no difference shown",
            };
            say!("  {:10} {:6.2}x  {verdict}", c.target, c.ratio_to_baseline);
        }
    }
}

fn cmd_age(a: &AgeArgs) -> Result<(), String> {
    let dev = open_image(&a.image, FileDeviceOptions::default())?;
    let dev: std::sync::Arc<dyn moafs_core::device::BlockDevice> = std::sync::Arc::new(dev);
    let fs = Fs::mount(dev.clone(), moafs_core::fs::MountOptions::default())
        .map_err(|e| fs_error(&a.image, e))?;
    let cfg = moafs_bench::aging::AgingConfig {
        utilisation: a.utilisation,
        layout: a.layout,
        max_steps: a.max_steps,
        seed: a.seed,
        ..Default::default()
    };
    let res = moafs_bench::aging::age(&fs, dev.as_ref(), &cfg);
    let unmounted = fs.unmount().map_err(|e| fs_error(&a.image, e));
    let res = res.map_err(|e| format!("{}: {e}", a.image.display()))?;
    unmounted?;
    if a.json {
        let s = serde_json::to_string_pretty(&res).map_err(|e| e.to_string())?;
        say!("{s}");
    } else {
        say!(
            "aged in {} steps: {} files ({} deleted on the way), utilisation {:.3}, layout \
             score {:.3}",
            res.steps,
            res.files,
            res.files_deleted,
            res.utilisation,
            res.layout.score
        );
    }
    if !res.reached {
        return Err(format!(
            "targets not reached in {} steps (utilisation {}, layout {})",
            res.steps, a.utilisation, a.layout
        ));
    }
    Ok(())
}

fn cmd_experiment(a: &ExperimentArgs) -> Result<(), String> {
    use moafs_bench::cowrite_exp::{self, ExpConfig};
    if a.which != "cowrite" {
        return Err(format!(
            "unknown experiment {:?}; there is: cowrite",
            a.which
        ));
    }
    let size = moafs_core::parse_size(&a.size).map_err(|e| format!("--size: {e}"))?;
    if !(64 << 20..=64 << 30).contains(&size) {
        return Err("--size: between 64M and 64G (the image is held in memory)".into());
    }
    let utilisations = a
        .utilisation
        .split(',')
        .map(|u| match u.trim().parse::<f64>() {
            Ok(p) if (0.0..=95.0).contains(&p) => Ok(p / 100.0),
            _ => Err(format!("--utilisation: {u:?} is not a percentage in 0..95")),
        })
        .collect::<Result<Vec<f64>, String>>()?;
    if !(0.0..=1.0).contains(&a.layout) {
        return Err("--layout: a score in 0..1".into());
    }
    if !(a.scale > 0.0 && a.scale <= 10.0) {
        return Err("--scale: in (0, 10]".into());
    }
    let d = ExpConfig::default();
    let scale = |n: usize| ((n as f64 * a.scale).round() as usize).max(1);
    let cfg = ExpConfig {
        size,
        utilisations,
        layout: a.layout,
        per_dir: scale(d.per_dir),
        // Large files: an eighth of the image at the paper's 4 GiB, scaled with the image.
        large_size: (d.large_size as f64 * size as f64 / (4u64 << 30) as f64) as u64 & !0xfffff,
        postmark_scale: a.scale,
        tests: match &a.tests {
            Some(t) => t.split(',').map(|s| s.trim().to_string()).collect(),
            None => d.tests.clone(),
        },
        seed: a.seed,
        ..d
    };
    let report = match &a.from_json {
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
            serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a saved experiment: {e}", p.display()))?
        }
        None => cowrite_exp::run(&cfg, &mut |line| say!("{line}")).map_err(|e| e.to_string())?,
    };
    say!("\n{}", cowrite_exp::table(&report));
    if let Some(p) = &a.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(dir) = &a.svg_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, svg) in cowrite_exp::plots(&report)? {
            let p = dir.join(name);
            std::fs::write(&p, svg).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(())
}

fn report(r: Result<(), String>) -> u8 {
    match r {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("moafs: {msg}");
            1
        }
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

fn dev_error(image: &Path, e: DeviceError) -> String {
    match e {
        DeviceError::Locked { .. } => format!(
            "{} is already in use by another moafs process (mounted or being checked)",
            image.display()
        ),
        DeviceError::Open { source, .. } => format!("cannot open {}: {source}", image.display()),
        e => format!("{}: {e}", image.display()),
    }
}

/// Opens (and locks) an image. A lock held by a daemon that the kernel has already let go of
/// (it is still writing back) is waited for, a bounded time; one held by a live mount is an
/// error naming the mount point at once.
fn open_image(image: &Path, opts: FileDeviceOptions) -> Result<FileDevice, String> {
    let abs = image.canonicalize().unwrap_or_else(|_| image.to_path_buf());
    mounts::open_when_released(
        &abs,
        || FileDevice::open(image, opts),
        |e| matches!(e, DeviceError::Locked { .. }),
    )
    .map_err(|e| match e {
        Ok(dev) => dev_error(image, dev),
        Err(msg) => msg,
    })
}

fn fs_error(image: &Path, e: FsError) -> String {
    match e {
        FsError::NotMoafs { detail } => {
            format!("{} is not a moafs image ({detail})", image.display())
        }
        FsError::Corrupt { .. } => format!(
            "{}: {e}; run `moafs fsck {}`",
            image.display(),
            image.display()
        ),
        FsError::Device(d) => dev_error(image, d),
        e => format!("{}: {e}", image.display()),
    }
}

// ---------------------------------------------------------------------------------------------
// mkfs

fn cmd_mkfs(a: &MkfsArgs) -> Result<(), String> {
    let size = a.size.as_deref().map(moafs_core::parse_size).transpose()?;
    match size {
        Some(s) => {
            if s < MIN_IMAGE_BYTES {
                return Err(format!(
                    "--size {} is too small: moafs needs at least {} bytes ({})",
                    a.size.as_deref().unwrap_or_default(),
                    MIN_IMAGE_BYTES,
                    human(MIN_IMAGE_BYTES)
                ));
            }
            FileDevice::create(&a.image, s).map_err(|e| dev_error(&a.image, e))?;
        }
        None if !a.image.exists() => {
            return Err(format!(
                "{} does not exist; give --size to create it (e.g. --size 1G)",
                a.image.display()
            ));
        }
        None => {}
    }
    let dev = open_image(
        &a.image,
        FileDeviceOptions {
            read_only: false,
            direct: false,
            lock: true,
        },
    )?;
    if dev.size() < MIN_IMAGE_BYTES {
        return Err(format!(
            "{} is too small ({} bytes): moafs needs at least {} bytes ({})",
            a.image.display(),
            dev.size(),
            MIN_IMAGE_BYTES,
            human(MIN_IMAGE_BYTES)
        ));
    }
    let opts = MkfsOptions {
        block_size: a.block_size,
        groups: a.groups,
        label: a.label.clone(),
        journal_blocks: a.journal_blocks,
        ..MkfsOptions::default()
    };
    let sb = moafs_core::mkfs::mkfs(&dev, &opts).map_err(|e| match e {
        FsError::Invalid { detail } => detail,
        e => fs_error(&a.image, e),
    })?;
    let geo = Geometry::from_superblock(&sb);
    let bytes = geo.total_blocks * u64::from(geo.block_size);
    say!("moafs created on {}", a.image.display());
    say!(
        "  size:        {} ({} bytes, {} blocks)",
        human(bytes),
        bytes,
        geo.total_blocks
    );
    say!("  block size:  {}", geo.block_size);
    say!(
        "  groups:      {} of {} blocks",
        geo.group_count,
        geo.blocks_per_group
    );
    say!(
        "  inodes:      {} ({} per group)",
        geo.total_inodes(),
        geo.inodes_per_group
    );
    say!(
        "  free:        {} in {} blocks",
        human(sb.free_blocks * u64::from(geo.block_size)),
        sb.free_blocks
    );
    if sb.has_journal() {
        say!(
            "  journal:     {} in {} blocks at block {}",
            human(u64::from(sb.journal_blocks) * u64::from(geo.block_size)),
            sb.journal_blocks,
            sb.journal_start
        );
    } else {
        say!("  journal:     none");
    }
    if !a.label.is_empty() {
        say!("  label:       {}", a.label);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// mount

#[derive(Debug, Clone)]
struct MountPlan {
    engine: MountOptions,
    fuse: MountConfig,
    direct: bool,
    log: Option<PathBuf>,
    pidfile: Option<PathBuf>,
    stats: Option<PathBuf>,
    /// `-o remount` (mount(8) asks the helper to change the flags of a live mount).
    remount: bool,
}

/// Options of mount(8) that mean nothing to the mount itself (fstab bookkeeping).
const IGNORED_OPTIONS: &[&str] = &[
    "auto", "noauto", "user", "nouser", "_netdev", "nofail", "defaults",
];

/// The opposite of a VFS option of mount(8) (the later of the two wins).
fn vfs_opposite(opt: &str) -> Option<String> {
    const PAIRS: &[(&str, &str)] = &[
        ("dev", "nodev"),
        ("suid", "nosuid"),
        ("exec", "noexec"),
        ("sync", "async"),
        ("atime", "noatime"),
        ("diratime", "nodiratime"),
        ("relatime", "norelatime"),
        ("strictatime", "nostrictatime"),
        ("lazytime", "nolazytime"),
    ];
    PAIRS.iter().find_map(|&(a, b)| {
        (opt == a)
            .then(|| b.to_string())
            .or_else(|| (opt == b).then(|| a.to_string()))
    })
}

fn parse_mount_options(opts: &[String]) -> Result<MountPlan, String> {
    let mut p = MountPlan {
        engine: MountOptions {
            // the kernel holds references to inodes until it sends FORGET
            kernel_lookups: true,
            // writeback cache: the kernel owns mtime/ctime of written files
            kernel_times: true,
            ..MountOptions::default()
        },
        fuse: MountConfig::default(),
        direct: false,
        log: None,
        pidfile: None,
        stats: None,
        remount: false,
    };
    let num = |k: &str, v: Option<&str>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("mount option {k} needs a value ({k}=N)"))?;
        v.parse::<u64>()
            .map_err(|_| format!("invalid value {v:?} for mount option {k}"))
    };
    let size = |k: &str, v: Option<&str>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("mount option {k} needs a value ({k}=SIZE)"))?;
        moafs_core::parse_size(v).map_err(|e| format!("mount option {k}: {e}"))
    };
    let path = |k: &str, v: Option<&str>| -> Result<PathBuf, String> {
        match v {
            Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
            _ => Err(format!("mount option {k} needs a value ({k}=PATH)")),
        }
    };
    for opt in opts.iter().flat_map(|o| o.split(',')) {
        let opt = opt.trim();
        if opt.is_empty() {
            continue;
        }
        let (k, v) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match k {
            "cache_size" => p.engine.cache_bytes = size(k, v)?,
            "dirty_max" => p.engine.dirty_bytes_max = size(k, v)?,
            "write_behind" => p.engine.write_behind_bytes = size(k, v)?,
            "cowrite" => {
                p.engine.cowrite = match v {
                    Some("on") => true,
                    Some("off") => false,
                    _ => return Err(format!("cowrite= takes on or off, not {v:?}")),
                }
            }
            "wb_order" => {
                p.engine.wb_sorted = match v {
                    Some("address") => true,
                    Some("dirty") => false,
                    _ => return Err(format!("wb_order= takes dirty or address, not {v:?}")),
                }
            }
            "cowrite_max" => {
                let n = size(k, v)?;
                if !(8 << 10..=4 << 20).contains(&n) {
                    return Err(format!(
                        "cowrite_max={n}: must be between 8K and 4M (2 to 256 blocks are used)"
                    ));
                }
                p.engine.cowrite_max = n;
            }
            "flush_interval_ms" => p.engine.flush_interval_ms = num(k, v)?,
            "journal" => {
                p.engine.journal = v
                    .ok_or("journal= needs writeback, ordered or data")?
                    .parse()?
            }
            "ro" if v.is_none() => {
                p.engine.read_only = true;
                p.fuse.read_only = true;
            }
            "rw" if v.is_none() => {
                p.engine.read_only = false;
                p.fuse.read_only = false;
            }
            "remount" | "bind" if v.is_none() => p.remount = true,
            _ if v.is_none() && moafs_fuse::is_vfs_option(k) => {
                let vfs = &mut p.fuse.vfs_options;
                if let Some(opp) = vfs_opposite(k) {
                    vfs.retain(|o| *o != opp);
                }
                // the atime policies exclude each other
                if ["noatime", "relatime", "strictatime"].contains(&k) {
                    vfs.retain(|o| !["noatime", "relatime", "strictatime"].contains(&o.as_str()));
                }
                vfs.retain(|o| o != k);
                vfs.push(k.to_string());
            }
            // Shown by the kernel for every FUSE mount; mount(8) may hand them back.
            "user_id" | "group_id" | "rootmode" | "max_read" | "blksize" if v.is_some() => {}
            // umount(8)'s helper of this mount, kept by mount(8) in its utab
            "uhelper" if v.is_some() => {}
            _ if k.starts_with("x-") => {}
            "direct" if v.is_none() => p.direct = true,
            "threads" => {
                let n = num(k, v)?;
                if !(1..=64).contains(&n) {
                    return Err(format!("threads={n}: must be between 1 and 64"));
                }
                p.fuse.threads = n as usize;
            }
            "attr_ttl_ms" => p.fuse.attr_ttl = Duration::from_millis(num(k, v)?),
            "poll_ms" => p.fuse.poll_window = Duration::from_millis(num(k, v)?.min(10_000)),
            "uring" => {
                p.fuse.uring = match v {
                    Some("auto") => UringMode::Auto,
                    Some("off") => UringMode::Off,
                    _ => return Err(format!("uring= takes auto or off, not {v:?}")),
                }
            }
            "uring_stream_kb" => {
                p.fuse.uring_stream_kb = num(k, v)?.min(1 << 20) as u32;
            }
            "read_ahead_kb" => p.fuse.read_ahead_kb = num(k, v)?.min(u32::MAX as u64) as u32,
            "bdi_strict" => {
                p.fuse.bdi_strict_limit = match v {
                    Some("0") => false,
                    Some("1") => true,
                    _ => return Err(format!("bdi_strict= takes 0 or 1, not {v:?}")),
                }
            }
            "allow_other" if v.is_none() => p.fuse.allow_other = true,
            "default_permissions" if v.is_none() => p.fuse.default_permissions = true,
            "nodefault_permissions" if v.is_none() => p.fuse.default_permissions = false,
            "log" => p.log = Some(path(k, v)?),
            "pidfile" => p.pidfile = Some(path(k, v)?),
            "stats" => p.stats = Some(path(k, v)?),
            // Added by mount.fuse3 and friends; the source name is ours to choose.
            "fsname" | "subtype" if v.is_some() => {}
            _ if v.is_none() && IGNORED_OPTIONS.contains(&k) => {}
            _ => return Err(format!("unknown mount option {opt}")),
        }
    }
    Ok(p)
}

/// Opens the image and mounts the engine; then serves FUSE until unmounted.
fn serve(
    image: &Path,
    mountpoint: &Path,
    plan: &MountPlan,
    ready: impl FnOnce(),
) -> Result<(), String> {
    let dev = open_image(
        image,
        FileDeviceOptions {
            read_only: plan.engine.read_only,
            direct: plan.direct,
            lock: true,
        },
    )?;
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    let fs = Fs::mount(dev, plan.engine.clone()).map_err(|e| fs_error(image, e))?;
    let mut cfg = plan.fuse.clone();
    // The image's absolute path, as a block device's would be: findmnt -S IMAGE, df and
    // xfstests find the mount by it (the type reads fuse.moafs).
    cfg.fsname = image.display().to_string();
    let fs = Arc::new(fs);
    moafs_fuse::mount_blocking(fs.clone(), mountpoint, &cfg, ready)
        .map_err(|e| format!("mount on {}: {e}", mountpoint.display()))?;
    if let Some(path) = &plan.stats {
        write_stats(path, &fs);
    }
    Ok(())
}

/// Writes the engine's and the device's counters of this mount as JSON (option `stats=PATH`).
fn write_stats(path: &Path, fs: &Fs) {
    let json = serde_json::json!({
        "engine": fs.counters(),
        "device": fs.device_counters(),
    });
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    if let Err(e) = std::fs::write(path, text) {
        log::error!("cannot write stats file {}: {e}", path.display());
    }
}

fn write_pidfile(path: &Path) {
    if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
        log::error!("cannot write pid file {}: {e}", path.display());
    }
}

fn remove_pidfile(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .map(|s| s.trim() == std::process::id().to_string())
        .unwrap_or(false);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

fn cmd_mount(mut a: MountArgs) -> u8 {
    if a.mount_helper && nix::unistd::geteuid().is_root() {
        // mount(8) passes `nodev`/`nosuid` when asked for and never `dev`/`suid`, the kernel
        // defaults: as root's helper, mount as a kernel file system would be (FUSE's own
        // default, used by `moafs mount`, is nodev,nosuid).
        a.options.insert(0, "dev,suid".into());
    }
    let mut plan = match parse_mount_options(&a.options) {
        Ok(p) => p,
        Err(e) => return report(Err(e)),
    };
    plan.fuse.foreground = a.foreground;
    if plan.remount {
        // mount(8) names the mount point second, the source first.
        let bind = a.options.iter().any(|o| o.split(',').any(|x| x == "bind"));
        let target = a.mountpoint.canonicalize().unwrap_or(a.mountpoint.clone());
        return report(mounts::remount(&target, &a.options, bind));
    }
    // Absolute paths: the daemon changes to "/".
    let image = match a.image.canonicalize() {
        Ok(p) => p,
        Err(e) => return report(Err(format!("cannot open {}: {e}", a.image.display()))),
    };
    let mountpoint = match a.mountpoint.canonicalize() {
        Ok(p) if p.is_dir() => p,
        Ok(p) => {
            return report(Err(format!(
                "mount point {} is not a directory",
                p.display()
            )))
        }
        Err(e) => return report(Err(format!("mount point {}: {e}", a.mountpoint.display()))),
    };
    let absolutize = |p: &mut Option<PathBuf>| {
        if let Some(path) = p {
            if path.is_relative() {
                if let Ok(cwd) = std::env::current_dir() {
                    *path = cwd.join(&*path);
                }
            }
        }
    };
    absolutize(&mut plan.log);
    absolutize(&mut plan.pidfile);
    // Mounted already: a second mount shows the same file system, as a block device's would.
    // Mounted on this very directory: refused (the kernel refuses a file system on a mount
    // point where it is mounted already) — unless an unmount in progress takes it away within
    // moments (a script's `umount DIR & mount IMAGE DIR`, xfstests generic/604).
    let start = std::time::Instant::now();
    let existing = loop {
        let existing = mounts::mounts_of_image(&image);
        if !existing.iter().any(|m| m.target == mountpoint) {
            break existing;
        }
        if start.elapsed() > Duration::from_secs(3) {
            return report(Err(format!(
                "{} is already mounted on {}",
                image.display(),
                mountpoint.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(first) = existing.first() {
        if plan.fuse.foreground {
            return report(Err(format!(
                "{} is mounted on {} (a second mount is a bind mount of it; not in the foreground)",
                image.display(),
                first.target.display()
            )));
        }
        let res = mounts::mount_again(&first.target, &mountpoint, &a.options);
        if res.is_ok() {
            mounts::register_umount_helper(&image, &mountpoint);
        }
        return report(res);
    }

    if a.foreground {
        let pidfile = plan.pidfile.clone();
        let (img, mp) = (image.clone(), mountpoint.clone());
        let res = serve(&image, &mountpoint, &plan, || {
            if let Some(p) = &pidfile {
                write_pidfile(p);
            }
            // mount(8) may look at the mount point, which this process serves: not from here.
            std::thread::spawn(move || mounts::register_umount_helper(&img, &mp));
        });
        if let Some(p) = &pidfile {
            remove_pidfile(p);
        }
        return report(res);
    }
    daemonize_and_serve(&image, &mountpoint, &plan)
}

/// Forks; the child mounts and serves, the parent returns once the mount is ready (exit 0) or
/// has failed (the child's message, exit 1).
fn daemonize_and_serve(image: &Path, mountpoint: &Path, plan: &MountPlan) -> u8 {
    let (rd, wr) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return report(Err(format!("pipe: {e}"))),
    };
    // SAFETY: `fork` is only unsafe in a multi-threaded process, where the child may inherit
    // locks held by other threads. We fork here, in `main`'s thread, before anything in this
    // process has spawned a thread (clap, env_logger and the option parsing above are
    // single-threaded; the device, the engine and the FUSE session are created in the child).
    let fork = unsafe { nix::unistd::fork() };
    match fork {
        Err(e) => report(Err(format!("fork: {e}"))),
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(wr);
            let mut msg = String::new();
            let _ = File::from(rd).read_to_string(&mut msg);
            if msg.starts_with("OK") {
                mounts::register_umount_helper(image, mountpoint);
                0
            } else if let Some(err) = msg.strip_prefix("ERR ") {
                eprintln!("moafs: {}", err.trim_end());
                // The child exits right after reporting; reap it.
                let _ = nix::sys::wait::waitpid(child, None);
                1
            } else {
                let _ = nix::sys::wait::waitpid(child, None);
                eprintln!("moafs: the mount daemon exited before the mount was ready");
                1
            }
        }
        Ok(nix::unistd::ForkResult::Child) => {
            drop(rd);
            let pipe = RefCell::new(Some(File::from(wr)));
            let send = |m: &str| {
                if let Some(mut f) = pipe.borrow_mut().take() {
                    let _ = f.write_all(m.as_bytes());
                }
            };
            if let Err(e) = detach(plan.log.as_deref()) {
                send(&format!("ERR {e}\n"));
                std::process::exit(1);
            }
            let pidfile = plan.pidfile.clone();
            let res = serve(image, mountpoint, plan, || {
                if let Some(p) = &pidfile {
                    write_pidfile(p);
                }
                send("OK\n");
            });
            if let Some(p) = &pidfile {
                remove_pidfile(p);
            }
            match res {
                Ok(()) => std::process::exit(0),
                Err(e) => {
                    log::error!("{e}");
                    send(&format!("ERR {e}\n"));
                    std::process::exit(1);
                }
            }
        }
    }
}

/// Becomes a daemon: new session, cwd "/", stdin/stdout to /dev/null, stderr to the log file
/// (or /dev/null).
fn detach(log: Option<&Path>) -> Result<(), String> {
    nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("/dev/null: {e}"))?;
    let err_target = match log {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| format!("log file {}: {e}", p.display()))?,
        None => null.try_clone().map_err(|e| format!("/dev/null: {e}"))?,
    };
    for (src, dst) in [
        (null.as_raw_fd(), libc::STDIN_FILENO),
        (null.as_raw_fd(), libc::STDOUT_FILENO),
        (err_target.as_raw_fd(), libc::STDERR_FILENO),
    ] {
        nix::unistd::dup2(src, dst).map_err(|e| format!("dup2: {e}"))?;
    }
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// fsck and inspect

fn cmd_fsck(a: &FsckArgs) -> u8 {
    let repair = (a.yes || a.auto || a.preen) && !a.no;
    let _ = a.force;
    let dev = match open_image(
        &a.image,
        FileDeviceOptions {
            read_only: !repair,
            direct: false,
            lock: true,
        },
    ) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fsck.moafs: {e}");
            return 8;
        }
    };
    let rep = match moafs_core::fsck::fsck(&dev, repair) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fsck.moafs: {}", fs_error(&a.image, e));
            return 8;
        }
    };
    for w in &rep.warnings {
        say!("warning: {w}");
    }
    for r in &rep.repaired {
        say!("repaired: {r}");
    }
    for e in &rep.errors {
        say!("error: {e}");
    }
    say!("{}: {}", a.image.display(), rep.summary);
    if !rep.errors.is_empty() && !repair {
        say!("run `moafs fsck -y {}` to repair", a.image.display());
    }
    rep.exit_code().clamp(0, 255) as u8
}

fn cmd_inspect(a: &InspectArgs) -> Result<(), String> {
    let dev = FileDevice::open(
        &a.image,
        FileDeviceOptions {
            read_only: true,
            direct: false,
            lock: false,
        },
    )
    .map_err(|e| dev_error(&a.image, e))?;
    let rep = moafs_core::fsck::inspect(&dev).map_err(|e| fs_error(&a.image, e))?;
    let mut v = serde_json::to_value(&rep).map_err(|e| e.to_string())?;
    let layout = if a.layout {
        let (l, free) = moafs_core::fsck::layout(&dev).map_err(|e| fs_error(&a.image, e))?;
        v["layout"] = serde_json::to_value(l).map_err(|e| e.to_string())?;
        v["free_runs"] = serde_json::to_value(&free).map_err(|e| e.to_string())?;
        Some((l, free))
    } else {
        None
    };
    if a.json {
        let s = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        say!("{s}");
        return Ok(());
    }
    if let (Some(map), Some((l, free))) = (v.as_object_mut(), &layout) {
        map.remove("layout");
        map.remove("free_runs");
        print_human(&v);
        say!(
            "layout score: {:.3} ({} of {} blocks after their predecessor, {} files of 2+ blocks)",
            l.score,
            l.contiguous,
            l.blocks,
            l.files
        );
        say!(
            "free runs: {} runs, {} free blocks, largest {} blocks",
            free.runs,
            free.free_blocks,
            free.largest
        );
        for (low, n) in &free.histogram {
            let shown = if *low == 1 {
                "1".to_string()
            } else {
                format!("{low}-{}", low * 2 - 1)
            };
            say!("  {shown:>14} blocks: {n} runs");
        }
        return Ok(());
    }
    print_human(&v);
    Ok(())
}

fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints a report: scalars as `key: value`, lists of objects as one line per item.
fn print_human(v: &serde_json::Value) {
    let serde_json::Value::Object(map) = v else {
        say!("{}", scalar(v));
        return;
    };
    let width = map.keys().map(|k| k.len()).max().unwrap_or(0);
    let mut lists = Vec::new();
    for (k, val) in map {
        match val {
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => lists.push((k, val)),
            _ => say!("{k:width$}  {}", scalar(val)),
        }
    }
    for (k, val) in lists {
        say!("{k}:");
        let items: Vec<&serde_json::Value> = match val {
            serde_json::Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        for item in items {
            match item {
                serde_json::Value::Object(o) => {
                    let line: Vec<String> = o
                        .iter()
                        .filter(|(_, x)| !x.is_null())
                        .map(|(k, x)| format!("{k}={}", scalar(x)))
                        .collect();
                    say!("  {}", line.join(" "));
                }
                other => say!("  {}", scalar(other)),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// install-helpers

fn cmd_install(a: &InstallArgs) -> Result<(), String> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| format!("cannot find this executable: {e}"))?;
    let sbin = a.prefix.join("sbin");
    let prefix_given = std::env::args_os().any(|x| {
        let s = x.to_string_lossy();
        s == "--prefix" || s.starts_with("--prefix=")
    });
    let helper_dir = match &a.mount_helper_dir {
        Some(d) => d.clone(),
        None if prefix_given => sbin.clone(),
        None => PathBuf::from("/sbin"),
    };
    let links = [
        (sbin.join("mkfs.moafs"), &sbin),
        (sbin.join("fsck.moafs"), &sbin),
        (helper_dir.join("mount.moafs"), &helper_dir),
        (helper_dir.join("mount.fuse.moafs"), &helper_dir),
        (helper_dir.join("umount.moafs"), &helper_dir),
        (helper_dir.join("umount.fuse.moafs"), &helper_dir),
    ];
    for (link, dir) in links {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                std::fs::remove_file(&link).map_err(|e| format!("{}: {e}", link.display()))?
            }
            Ok(_) => {
                return Err(format!(
                    "{} exists and is not a symlink; not replacing it",
                    link.display()
                ))
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&exe, &link).map_err(|e| format!("{}: {e}", link.display()))?;
        say!("{} -> {}", link.display(), exe.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let p = parse_mount_options(&["rw,relatime,cache_size=64M,threads=4,ro".into()]).unwrap();
        assert_eq!(p.engine.cache_bytes, 64 << 20);
        assert_eq!(p.fuse.threads, 4);
        assert!(p.engine.read_only && p.fuse.read_only);
        assert!(p.fuse.default_permissions);
        let p = parse_mount_options(&[
            "nodefault_permissions".into(),
            "attr_ttl_ms=0,poll_ms=0".into(),
        ])
        .unwrap();
        assert!(p.fuse.poll_window.is_zero());
        assert!(!p.fuse.default_permissions);
        assert!(p.fuse.attr_ttl.is_zero());
        let e = parse_mount_options(&["bogus".into()]).unwrap_err();
        assert_eq!(e, "unknown mount option bogus");
        assert!(parse_mount_options(&["threads=x".into()]).is_err());
    }

    #[test]
    fn argv() {
        let v = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            rewrite_args(v(&["/sbin/mkfs.moafs", "img"])),
            v(&["moafs", "mkfs", "img"])
        );
        assert_eq!(
            rewrite_args(v(&["mount.fuse.moafs", "img", "dir", "-o", "rw"])),
            v(&["moafs", "mount", "--mount-helper", "img", "dir", "-o", "rw"])
        );
        assert_eq!(
            rewrite_args(v(&["/sbin/umount.fuse.moafs", "dir"])),
            v(&["moafs", "umount", "dir"])
        );
        assert_eq!(
            rewrite_args(v(&["moafs", "fsck", "img"])),
            v(&["moafs", "fsck", "img"])
        );
        // An existing file as first argument means mount (mount.fuse3 convention).
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        assert_eq!(
            rewrite_args(v(&["moafs", exe, "/mnt"])),
            v(&["moafs", "mount", exe, "/mnt"])
        );
        // A subcommand stays one even when a file of that name is in the working directory.
        let dir = tempfile::tempdir().unwrap();
        std::env::set_current_dir(dir.path()).unwrap();
        for sub in ["bench", "age", "experiment", "inspect"] {
            std::fs::write(sub, b"").unwrap();
            assert_eq!(
                rewrite_args(v(&["moafs", sub, "--help"])),
                v(&["moafs", sub, "--help"]),
                "{sub}"
            );
        }
    }

    #[test]
    fn cli_parses() {
        let c = Cli::try_parse_from(["moafs", "fsck", "-fy", "img"]).unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::Fsck(FsckArgs {
                yes: true,
                force: true,
                ..
            })
        ));
        assert!(Cli::try_parse_from(["moafs", "fsck", "-n", "-y", "img"]).is_err());
        let c =
            Cli::try_parse_from(["moafs", "mount", "img", "dir", "-o", "ro", "-n", "-v"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Mount(MountArgs { .. })));
    }
}
