//! The named workloads of `moafs bench` (a name to its configuration, [`Spec`], and how each
//! runs), and the presets. What one run measures is [`Outcome`] (`outcome.rs`).

use crate::filebench::FilebenchConfig;
use crate::micro::{BonnieConfig, MicroConfig, MicroTest, RandReadConfig, SmallWritesConfig};
pub use crate::outcome::Outcome;
use crate::postmark::PostmarkConfig;
use crate::sqlite::SqliteConfig;
use crate::target::Target;
use serde::Serialize;
use std::io;
use std::time::Instant;

/// A workload and its configuration.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Spec {
    Postmark(PostmarkConfig),
    Filebench(FilebenchConfig),
    RandRead(RandReadConfig),
    SmallWrites(SmallWritesConfig),
    Sqlite(SqliteConfig),
    Bonnie(BonnieConfig),
    Micro(MicroConfig),
    Tool(crate::tools::ToolConfig),
}

impl Spec {
    /// Runs on `t`; `between` runs after the setup phase, before the measured one (PostMark
    /// has none: its phases are all measured).
    pub fn run(&self, t: &dyn Target, between: &dyn Fn() -> io::Result<()>) -> io::Result<Outcome> {
        match self {
            Spec::Postmark(c) => {
                let start = Instant::now();
                let r = crate::postmark::run(t, c)?;
                let k = &r.counts;
                Ok(Outcome::new(
                    r.transactions_done as f64,
                    "transactions",
                    r.transaction_secs,
                    start,
                )
                .count("creates", k.created_initial + k.creates)
                .count("reads", k.reads)
                .count("appends", k.appends)
                .count("deletes", k.deletes + k.deleted_final)
                .count("skipped", k.skipped)
                .bytes(k.bytes_read, k.bytes_written)
                .latency(&r.latency)
                .detail(serde_json::to_value(&r).unwrap_or_default()))
            }
            Spec::Filebench(c) => {
                let start = Instant::now();
                let r = crate::filebench::run_with(t, c, between)?;
                let mut o = Outcome::new(r.ops as f64, "ops", r.run_secs, start)
                    .count("prealloc", r.preallocated)
                    .bytes(r.bytes_read, r.bytes_written)
                    .latency(&r.latency);
                for (k, v) in &r.counts {
                    o = o.count(k, *v);
                }
                Ok(o.detail(serde_json::json!({
                    "setup_secs": r.setup_secs,
                    "flowops": r.counts,
                    "directories": r.directories,
                    "deletes_refused": r.deletes_refused,
                    "stopped_early": r.stopped_early,
                })))
            }
            Spec::RandRead(c) => crate::micro::rand_read(t, c, between),
            Spec::SmallWrites(c) => crate::micro::small_writes(t, c, between),
            Spec::Sqlite(c) => crate::sqlite::run(t, c, between),
            Spec::Bonnie(c) => crate::micro::bonnie(t, c, between),
            Spec::Micro(c) => crate::micro::micro(t, c, between),
            Spec::Tool(c) => crate::tools::run(t, c, between),
        }
    }

    /// Whether the workload needs a real directory (it cannot run on the engine in-process).
    pub fn needs_dir(&self) -> bool {
        matches!(self, Spec::Sqlite(_) | Spec::Tool(_))
    }

    /// The workload's seed.
    pub fn seed(&self) -> u64 {
        match self {
            Spec::Postmark(c) => c.seed,
            Spec::Filebench(c) => c.seed,
            Spec::RandRead(c) => c.seed,
            Spec::SmallWrites(c) => c.seed,
            Spec::Sqlite(c) => c.seed,
            Spec::Bonnie(c) => c.seed,
            Spec::Micro(c) => c.seed,
            Spec::Tool(c) => c.seed,
        }
    }

    /// The same workload with another seed (a repetition's own).
    pub fn reseeded(&self, seed: u64) -> Spec {
        let mut s = self.clone();
        match &mut s {
            Spec::Postmark(c) => c.seed = seed,
            Spec::Filebench(c) => c.seed = seed,
            Spec::RandRead(c) => c.seed = seed,
            Spec::SmallWrites(c) => c.seed = seed,
            Spec::Sqlite(c) => c.seed = seed,
            Spec::Bonnie(c) => c.seed = seed,
            Spec::Micro(c) => c.seed = seed,
            Spec::Tool(c) => c.seed = seed,
        }
        s
    }
}

/// The workloads `moafs bench` knows: name and what it is.
pub const WORKLOADS: &[(&str, &str)] = &[
    (
        "postmark-fsl",
        "PostMark FSL: 20,000 files, 200 dirs, 512 B-10 KiB, 200,000 transactions",
    ),
    (
        "postmark-rfsl",
        "PostMark R-FSL (paper 000): 25,000 files, 200 dirs, real sizes, 50,000 transactions",
    ),
    (
        "postmark-quick",
        "PostMark FSL scaled to 1/20: 1,000 files, 200 dirs, 10,000 transactions",
    ),
    (
        "postmark-p004-small",
        "PostMark as paper 004 (its defaults where the paper is silent: 500-10,000 B, no subdirs): 1,000 files, 20,000 transactions; NAME:512|4096|8192 sets the buffer",
    ),
    ("postmark-p004-medium", "as postmark-p004-small with 10,000 files, 50,000 transactions"),
    ("postmark-p004-large", "as postmark-p004-small with 20,000 files, 100,000 transactions"),
    (
        "fileserver",
        "Filebench fileserver: 10,000 files (gamma, mean 128 KiB), dirs gamma mean 20 wide, 50 threads",
    ),
    (
        "varmail",
        "Filebench varmail: 1,000 files (gamma, mean 16 KiB), one dir, 16 threads, fsync",
    ),
    (
        "webserver",
        "Filebench webserver: 1,000 read-only files (gamma, mean 16 KiB), 100 threads, 10 reads + log append",
    ),
    (
        "webproxy",
        "Filebench webproxy: 10,000 files (gamma, mean 16 KiB), one dir, 100 threads",
    ),
    (
        "rndrd-16k",
        "sysbench fileio rndrd (paper 001): 1,000 random 16 KiB reads over 128 files x 32 MiB (4 GiB), cache dropped after prepare (root; an image of 5G or more)",
    ),
    ("rndrd-64k", "as rndrd-16k with 64 KiB reads"),
    ("rndrd-256k", "as rndrd-16k with 256 KiB reads"),
    ("rndrd-1m", "as rndrd-16k with 1 MiB reads"),
    (
        "tio-128",
        "tiobench random writes: 4 threads x 20,000 writes of 128 B into 16 MiB files, no fsync",
    ),
    ("tio-1536", "as tio-128 with 1.5 KB writes"),
    (
        "fsync-4k-t1",
        "many fsync writers: 1 thread x 1,000 random 4 KiB writes into its own 4 MiB file, fsync after each",
    ),
    ("fsync-4k-t2", "as fsync-4k-t1 with 2 threads (each 1,000 writes)"),
    ("fsync-4k-t4", "as fsync-4k-t1 with 4 threads"),
    ("fsync-4k-t8", "as fsync-4k-t1 with 8 threads"),
    (
        "append-128-t1",
        "log appends: 1 thread x 1,000 appends of 128 B to its own 4 MiB file, fsync after each",
    ),
    (
        "sqlite-delete",
        "SQLite (mobibench): 1,000 single-row 1 KB updates, synchronous FULL, journal DELETE",
    ),
    ("sqlite-wal", "as sqlite-delete with journal WAL"),
    (
        "bonnie",
        "Bonnie++ block phases: 256 MiB written, rewritten, read in 8 KiB I/Os",
    ),
    (
        "micro-seq-write",
        "paper 000 Fig. 11: 50 dirs x 100 one-block files written in order, then sync",
    ),
    (
        "micro-rand-write",
        "paper 000 Fig. 12: 5,000 one-block files each into a random dir, then sync",
    ),
    (
        "micro-dir-read",
        "paper 000 Fig. 13: read the 50 x 100 files directory by directory",
    ),
    (
        "micro-large",
        "paper 000 Fig. 14: 4 files of 64 MiB written, synced, read back",
    ),
    (
        "tool-fio-fsync-8",
        "fio: 8 jobs x 500 random 4 KiB writes into their own 16 MiB file, fsync after each (Debian's fio)",
    ),
    (
        "tool-untar-linux",
        "tar -xf of the Linux source tree (Debian's linux-source, decompressed once), then sync: entries/s",
    ),
];

/// The configuration of a named workload: counts multiplied by `scale` (sizes unchanged),
/// Filebench runs lasting `duration_secs` (Filebench's default: 60).
pub fn named(name: &str, scale: f64, seed: u64, duration_secs: f64) -> Option<Spec> {
    // `NAME:SIZE` sets the I/O size of PostMark (its read/write buffer: 512, 4096, 8192 …)
    // and of Bonnie (its block)
    if let Some((base, io)) = name.split_once(':') {
        let io = parse_io_size(io)?;
        return match named(base, scale, seed, duration_secs)? {
            Spec::Postmark(mut c) => {
                c.read_block = io;
                c.write_block = io;
                Some(Spec::Postmark(c))
            }
            Spec::Bonnie(mut c) => {
                c.block = io;
                Some(Spec::Bonnie(c))
            }
            _ => None,
        };
    }
    let n = |v: usize| ((v as f64 * scale).round() as usize).max(1);
    let bytes = |v: u64| ((v as f64 * scale).round() as u64).max(1 << 20);
    Some(match name {
        "postmark-fsl" | "postmark-quick" | "postmark-rfsl" => {
            let mut c = match name {
                "postmark-fsl" => PostmarkConfig::fsl(),
                "postmark-quick" => PostmarkConfig::fsl().scaled(0.05),
                _ => PostmarkConfig::rfsl(),
            };
            if scale != 1.0 {
                c = c.scaled(scale);
            }
            c.seed = seed;
            Spec::Postmark(c)
        }
        // paper 004: PostMark's own defaults where the paper gives no number (sizes 500 -
        // 10,000 bytes, no subdirectories, biases 5/5, 512-byte buffers unless `:SIZE`);
        // small / medium / large as the paper describes them (many transactions per file,
        // then more files, then more of both; its numbers are not given)
        "postmark-p004-small" | "postmark-p004-medium" | "postmark-p004-large" => {
            let (files, transactions) = match name {
                "postmark-p004-small" => (1_000, 20_000),
                "postmark-p004-medium" => (10_000, 50_000),
                _ => (20_000, 100_000),
            };
            let mut c = PostmarkConfig {
                files,
                transactions,
                ..PostmarkConfig::postmark_defaults()
            };
            if scale != 1.0 {
                c = c.scaled(scale);
            }
            c.seed = seed;
            Spec::Postmark(c)
        }
        "fileserver" | "varmail" | "webserver" | "webproxy" => {
            let mut c = FilebenchConfig::personality(name)?;
            if scale != 1.0 {
                c = c.scaled(scale);
            }
            c.duration_secs = duration_secs;
            c.seed = seed;
            Spec::Filebench(c)
        }
        "rndrd-16k" | "rndrd-64k" | "rndrd-256k" | "rndrd-1m" => {
            let block = match name {
                "rndrd-16k" => 16 << 10,
                "rndrd-64k" => 64 << 10,
                "rndrd-256k" => 256 << 10,
                _ => 1 << 20,
            };
            // paper 001: 128 files, 4 GiB, 1,000 requests; --scale scales the total size
            // (at least one block per file)
            let paper = RandReadConfig::paper(block, seed);
            Spec::RandRead(RandReadConfig {
                total: ((paper.total as f64 * scale) as u64).max(paper.files as u64 * block as u64),
                ..paper
            })
        }
        "tio-128" | "tio-1536" => Spec::SmallWrites(SmallWritesConfig {
            threads: 4,
            file_size: 16 << 20,
            io: if name == "tio-128" { 128 } else { 1536 },
            writes: n(20_000),
            fsync: false,
            append: false,
            seed,
        }),
        "fsync-4k-t1" | "fsync-4k-t2" | "fsync-4k-t4" | "fsync-4k-t8" => {
            Spec::SmallWrites(SmallWritesConfig {
                threads: name[name.len() - 1..].parse().expect("listed names"),
                file_size: 4 << 20,
                io: 4096,
                writes: n(1000),
                fsync: true,
                append: false,
                seed,
            })
        }
        "append-128-t1" => Spec::SmallWrites(SmallWritesConfig {
            threads: 1,
            file_size: 4 << 20,
            io: 128,
            writes: n(1000),
            fsync: true,
            append: true,
            seed,
        }),
        "sqlite-delete" | "sqlite-wal" => Spec::Sqlite(SqliteConfig {
            journal: if name == "sqlite-wal" {
                "WAL"
            } else {
                "DELETE"
            }
            .to_string(),
            rows: n(5_000),
            value_size: 1024,
            updates: n(1_000),
            seed,
        }),
        "bonnie" => Spec::Bonnie(BonnieConfig {
            size: bytes(256 << 20),
            block: 8 << 10,
            seed,
        }),
        "micro-seq-write" | "micro-rand-write" | "micro-dir-read" | "micro-large" => {
            Spec::Micro(MicroConfig {
                test: match name {
                    "micro-seq-write" => MicroTest::SeqWrite,
                    "micro-rand-write" => MicroTest::RandWrite,
                    "micro-dir-read" => MicroTest::DirRead,
                    _ => MicroTest::Large,
                },
                dirs: 50,
                per_dir: n(100),
                file_size: 4096,
                large_size: bytes(64 << 20),
                large_files: 4,
                seed,
            })
        }
        "tool-fio-fsync-8" => Spec::Tool(crate::tools::ToolConfig {
            tool: crate::tools::Tool::FioFsync,
            files: 8,
            transactions: n(500),
            total: 16 << 20,
            block: 4096,
            seed,
        }),
        "tool-untar-linux" => Spec::Tool(crate::tools::ToolConfig {
            tool: crate::tools::Tool::Untar,
            // the whole tree, or the first members of it (--scale < 1)
            files: if scale >= 1.0 { 0 } else { n(80_000) },
            transactions: 0,
            total: 0,
            block: 0,
            seed,
        }),
        "tool-postmark" | "tool-sysbench" | "tool-fio" | "tool-bonnie" => {
            use crate::tools::{Tool, ToolConfig};
            let tool = match name {
                "tool-postmark" => Tool::Postmark,
                "tool-sysbench" => Tool::Sysbench,
                "tool-fio" => Tool::Fio,
                _ => Tool::Bonnie,
            };
            let block = 16 << 10;
            Spec::Tool(match tool {
                Tool::Postmark => ToolConfig {
                    tool,
                    files: n(1_000),
                    transactions: n(10_000),
                    total: 0,
                    block,
                    seed,
                },
                // paper 001's rndrd: 128 files, 4 GiB (scaled), 1,000 requests
                Tool::Sysbench => ToolConfig {
                    tool,
                    files: 128,
                    transactions: 1_000,
                    total: (((4u64 << 30) as f64 * scale) as u64).max(128 * 4 * block as u64) / 128
                        * 128,
                    block,
                    seed,
                },
                Tool::Fio => ToolConfig {
                    tool,
                    files: 1,
                    transactions: n(1_000),
                    total: bytes(256 << 20),
                    block,
                    seed,
                },
                // bonnie++ shows phases under 0.5 s as +++++: 1 GiB by default
                Tool::Bonnie => ToolConfig {
                    tool,
                    files: 0,
                    transactions: 0,
                    total: bytes(1 << 30),
                    block,
                    seed,
                },
                // (named on their own above)
                Tool::FioFsync | Tool::Untar => return None,
            })
        }
        _ => return None,
    })
}

/// `512`, `4k`, `8K`, `1m` (moafs's size syntax): a positive I/O size of at most 64 MiB.
fn parse_io_size(s: &str) -> Option<usize> {
    let v = moafs_core::parse_size(s).ok()?;
    (1..=64 << 20).contains(&v).then_some(v as usize)
}

/// A preset: workloads, each with its scale, and the run's repetitions and Filebench
/// duration.
#[derive(Debug, Clone, Serialize)]
pub struct Preset {
    pub name: &'static str,
    pub workloads: Vec<(&'static str, f64)>,
    pub reps: usize,
    pub duration_secs: f64,
}

/// The presets' names, for `--list` and errors.
pub const PRESETS: &[&str] = &["quick", "headline", "paper004", "full"];

/// `quick`: about four minutes on one target (Filebench runs of 10 s, filesets scaled down,
/// threads as the personalities say); `full`: every workload at full size, Filebench's 60 s
/// runs (the results table in docs/results/HISTORY-benchmarks.md; long).
pub fn preset(name: &str) -> Option<Preset> {
    Some(match name {
        "quick" => Preset {
            name: "quick",
            workloads: vec![
                ("postmark-quick", 1.0),
                ("fileserver", 0.05),
                ("varmail", 0.25),
                ("webserver", 0.1),
                ("webproxy", 0.05),
                ("rndrd-64k", 0.125),
                ("tio-1536", 0.25),
                ("sqlite-wal", 0.25),
                ("micro-rand-write", 1.0),
            ],
            reps: 3,
            // Filebench's own default is 60 s; 10 s is the least that still lets the file
            // set turn over and the caches settle at these sizes
            duration_secs: 10.0,
        },
        // README's headline (issue 46): Filebench's four personalities as they are defined
        // (smaller file sets stop fileserver and webproxy early on a fast file system:
        // "could not obtain a file"), PostMark, SQLite in both journal modes, fio's fsync
        // writers and a kernel-tree untar; a fresh image each run
        "headline" => Preset {
            name: "headline",
            workloads: vec![
                ("fileserver", 1.0),
                ("varmail", 1.0),
                ("webserver", 1.0),
                ("webproxy", 1.0),
                ("postmark-quick", 1.0),
                ("sqlite-wal", 1.0),
                ("sqlite-delete", 1.0),
                ("tool-fio-fsync-8", 1.0),
                ("tool-untar-linux", 1.0),
            ],
            reps: 5,
            duration_secs: 10.0,
        },
        // paper 004's table: PostMark small / medium / large with 512, 4096 and 8192-byte
        // buffers, 5 runs each
        "paper004" => Preset {
            name: "paper004",
            workloads: vec![
                ("postmark-p004-small:512", 1.0),
                ("postmark-p004-small:4096", 1.0),
                ("postmark-p004-small:8192", 1.0),
                ("postmark-p004-medium:512", 1.0),
                ("postmark-p004-medium:4096", 1.0),
                ("postmark-p004-medium:8192", 1.0),
                ("postmark-p004-large:512", 1.0),
                ("postmark-p004-large:4096", 1.0),
                ("postmark-p004-large:8192", 1.0),
            ],
            reps: 5,
            duration_secs: 60.0,
        },
        "full" => Preset {
            name: "full",
            workloads: WORKLOADS
                .iter()
                .filter(|(w, _)| !w.starts_with("tool-"))
                .map(|&(w, _)| (w, 1.0))
                .collect(),
            reps: 5,
            duration_secs: 60.0,
        },
        _ => return None,
    })
}
