//! Filebench's file-server, mail-server, web-server and web-proxy personalities, natively
//! (filebench `workloads/{fileserver,varmail,webserver,webproxy}.f`, as WORKLOADS.md defines
//! them): a fileset of `files` entries in a directory tree `dir_width` wide, `prealloc` % of
//! them made and filled before the run; `threads` threads each loop over the personality's
//! flowops until the run's time is up. Every flowop counts as one operation (Filebench's "IO
//! Summary" ops/s); per-flowop counts come with the result.
//!
//! As Filebench: `createfile` picks an entry that does not exist, `openfile`, `deletefile` and
//! `statfile` one that does, and an entry is busy (no other thread picks it) from its open to
//! its close; `appendfilerand` appends a uniform length in [1, `append_size`) at the end
//! (Filebench: [0, iosize)); whole-file reads and writes move `iosize` at a time. A pick that
//! finds nothing (every candidate busy) skips the flowops up to the next close and is counted
//! as `skipped`. Each thread draws from its own generator, seeded from the run's seed and its
//! number.

use crate::target::{Fh, Mode, Target};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The flowops of the four personalities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flowop {
    /// Remove an existing, idle file.
    Delete,
    /// Create a file that does not exist (it stays open).
    Create,
    /// Write the open file's whole size, `iosize` at a time.
    WriteWhole,
    /// Append a random length to the open file.
    Append,
    Fsync,
    Close,
    /// Open an existing, idle file.
    Open,
    /// Read the open file whole, `iosize` at a time.
    ReadWhole,
    /// `stat` an existing file.
    Stat,
    /// Append a random length to the shared log (webserver).
    AppendLog,
}

impl Flowop {
    fn name(self) -> &'static str {
        match self {
            Flowop::Delete => "delete",
            Flowop::Create => "create",
            Flowop::WriteWhole => "write_whole",
            Flowop::Append => "append",
            Flowop::Fsync => "fsync",
            Flowop::Close => "close",
            Flowop::Open => "open",
            Flowop::ReadWhole => "read_whole",
            Flowop::Stat => "stat",
            Flowop::AppendLog => "append_log",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilebenchConfig {
    pub personality: String,
    pub files: usize,
    /// Entries per directory of the fileset's tree (at least `files`: one flat directory).
    pub dir_width: usize,
    /// Mean file size in bytes.
    pub mean_size: u64,
    /// Sizes drawn from a gamma distribution of shape 1.5 with that mean (else all equal).
    pub gamma_sizes: bool,
    /// Percent of the entries made and filled before the run.
    pub prealloc_pct: u32,
    pub threads: usize,
    /// Bytes per read and write of the whole-file flowops.
    pub iosize: usize,
    /// Appends are uniform in [1, append_size).
    pub append_size: usize,
    /// Each thread's loop, repeated until the run's time is up.
    pub flowops: Vec<Flowop>,
    /// Length of the measured run.
    pub duration_secs: f64,
    pub seed: u64,
}

impl FilebenchConfig {
    fn base(personality: &str, files: usize, width: usize, threads: usize) -> FilebenchConfig {
        FilebenchConfig {
            personality: personality.to_string(),
            files,
            dir_width: width,
            mean_size: 16 << 10,
            gamma_sizes: true,
            prealloc_pct: 80,
            threads,
            iosize: 1 << 20,
            append_size: 16 << 10,
            flowops: Vec::new(),
            duration_secs: 60.0,
            seed: 42,
        }
    }

    /// The named personality with Filebench's defaults (60 s runs).
    pub fn personality(name: &str) -> Option<FilebenchConfig> {
        use Flowop::*;
        Some(match name {
            "fileserver" => FilebenchConfig {
                mean_size: 128 << 10,
                flowops: vec![
                    Create, WriteWhole, Close, Open, Append, Close, Open, ReadWhole, Close, Delete,
                    Stat,
                ],
                ..Self::base(name, 10_000, 20, 50)
            },
            "varmail" => FilebenchConfig {
                flowops: vec![
                    Delete, Create, Append, Fsync, Close, Open, ReadWhole, Append, Fsync, Close,
                    Open, ReadWhole, Close,
                ],
                ..Self::base(name, 1_000, 1_000_000, 16)
            },
            "webserver" => {
                let mut ops = Vec::new();
                for _ in 0..10 {
                    ops.extend([Open, ReadWhole, Close]);
                }
                ops.push(AppendLog);
                FilebenchConfig {
                    prealloc_pct: 100,
                    flowops: ops,
                    ..Self::base(name, 1_000, 20, 100)
                }
            }
            "webproxy" => {
                let mut ops = vec![Delete, Create, Append, Close];
                for _ in 0..5 {
                    ops.extend([Open, ReadWhole, Close]);
                }
                FilebenchConfig {
                    gamma_sizes: false,
                    flowops: ops,
                    ..Self::base(name, 10_000, 1_000_000, 100)
                }
            }
            _ => return None,
        })
    }

    /// Files and threads multiplied by `f` (at least 1 each); sizes and flowops unchanged.
    pub fn scaled(mut self, f: f64) -> FilebenchConfig {
        let scale = |n: usize| ((n as f64 * f).round() as usize).max(1);
        self.files = scale(self.files);
        self.threads = scale(self.threads);
        self
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FilebenchResult {
    /// Flowops of the measured run, by name (`skipped`: picks that found no entry).
    pub counts: BTreeMap<String, u64>,
    /// All flowops of the measured run.
    pub ops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Files made and filled before the run.
    pub preallocated: u64,
    pub setup_secs: f64,
    pub run_secs: f64,
    pub ops_per_sec: f64,
}

/// The fileset: which entries exist, which a thread is using, and their sizes.
struct Fileset {
    exists: Vec<bool>,
    busy: Vec<bool>,
    /// Bytes in the file (tracked as written: entries are exclusive while open).
    size: Vec<u64>,
}

impl Fileset {
    /// A random entry with `exists == want` that no thread uses, marked busy.
    fn pick(&mut self, rng: &mut StdRng, want: bool) -> Option<usize> {
        let n = self.exists.len();
        let ok = |s: &Fileset, i: usize| s.exists[i] == want && !s.busy[i];
        let mut found = (0..8).map(|_| rng.gen_range(0..n)).find(|&i| ok(self, i));
        if found.is_none() {
            let start = rng.gen_range(0..n);
            found = (0..n).map(|k| (start + k) % n).find(|&i| ok(self, i));
        }
        if let Some(i) = found {
            self.busy[i] = true;
        }
        found
    }
}

/// Directory of entry `i`: the leaf directory number written in base `width`, one level per
/// digit (a tree about `width` wide at every level, as Filebench's `dirwidth`).
fn entry_path(i: usize, files: usize, width: usize) -> String {
    let width = width.max(2);
    let leaves = files.div_ceil(width);
    let mut levels = 0;
    let mut cap = 1usize;
    while cap < leaves {
        cap = cap.saturating_mul(width);
        levels += 1;
    }
    let mut dirs = Vec::with_capacity(levels);
    let mut leaf = i / width;
    for _ in 0..levels {
        dirs.push(leaf % width);
        leaf /= width;
    }
    let mut path = String::from("fb");
    for d in dirs.iter().rev() {
        path.push_str(&format!("/d{d}"));
    }
    path.push_str(&format!("/f{i}"));
    path
}

/// Every directory the fileset needs, parents first.
fn fileset_dirs(files: usize, width: usize) -> Vec<String> {
    let mut dirs = std::collections::BTreeSet::new();
    for i in 0..files {
        let p = entry_path(i, files, width);
        let mut at = 0;
        while let Some(k) = p[at..].find('/') {
            dirs.insert(p[..at + k].to_string());
            at += k + 1;
        }
    }
    let mut v: Vec<String> = dirs.into_iter().collect();
    v.sort_by_key(|d| d.matches('/').count());
    v
}

fn sizes(cfg: &FilebenchConfig, rng: &mut StdRng) -> io::Result<Vec<u64>> {
    if !cfg.gamma_sizes {
        return Ok(vec![cfg.mean_size.max(1); cfg.files]);
    }
    let g = Gamma::new(1.5, cfg.mean_size as f64 / 1.5)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    Ok((0..cfg.files)
        .map(|_| (g.sample(rng).round() as u64).max(1))
        .collect())
}

/// Per-thread tallies, added up at the end.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<&'static str, u64>,
    bytes_read: u64,
    bytes_written: u64,
}

impl Tally {
    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }
}

const LOG: &str = "fb/log";

pub fn run(target: &dyn Target, cfg: &FilebenchConfig) -> io::Result<FilebenchResult> {
    run_with(target, cfg, &|| Ok(()))
}

/// As [`run`], with `between` run after the fileset is made and before the measured run.
pub fn run_with(
    target: &dyn Target,
    cfg: &FilebenchConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<FilebenchResult> {
    if cfg.files == 0 || cfg.threads == 0 || cfg.iosize == 0 || cfg.append_size < 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "filebench: need files, threads, iosize > 0 and append_size >= 2",
        ));
    }
    let setup_start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let size_of = sizes(cfg, &mut rng)?;
    let max_size = size_of.iter().copied().max().unwrap_or(1) as usize;
    let data: Vec<u8> = (0..max_size.max(cfg.append_size).max(cfg.iosize))
        .map(|_| rng.gen())
        .collect();
    target.mkdir("fb")?;
    for d in fileset_dirs(cfg.files, cfg.dir_width) {
        if d != "fb" {
            target.mkdir(&d)?;
        }
    }
    let paths: Vec<String> = (0..cfg.files)
        .map(|i| entry_path(i, cfg.files, cfg.dir_width))
        .collect();
    let mut set = Fileset {
        exists: vec![false; cfg.files],
        busy: vec![false; cfg.files],
        size: vec![0; cfg.files],
    };
    let pre = (cfg.files as u64 * u64::from(cfg.prealloc_pct.min(100)) / 100) as usize;
    let mut order: Vec<usize> = (0..cfg.files).collect();
    for k in 0..pre {
        let j = rng.gen_range(k..cfg.files);
        order.swap(k, j);
        let i = order[k];
        let len = size_of[i] as usize;
        crate::target::create_file(target, &paths[i], &data[..len], cfg.iosize)?;
        set.exists[i] = true;
        set.size[i] = len as u64;
    }
    if cfg.flowops.contains(&Flowop::AppendLog) {
        let len = cfg.mean_size as usize;
        crate::target::create_file(target, LOG, &data[..len.min(data.len())], cfg.iosize)?;
    }
    let setup_secs = setup_start.elapsed().as_secs_f64();
    between()?;

    let set = Mutex::new(set);
    // a thread that fails stops the others at their next loop (the error is reported)
    let failed = std::sync::atomic::AtomicBool::new(false);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(cfg.duration_secs.max(0.0));
    let tallies: Vec<io::Result<Tally>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (set, paths, size_of, data, failed) = (&set, &paths, &size_of, &data, &failed);
                s.spawn(move || {
                    let seed = cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let mut w = Worker {
                        target,
                        cfg,
                        set,
                        paths,
                        size_of,
                        data,
                        rng: StdRng::seed_from_u64(seed),
                        open: None,
                        log: None,
                        buf: vec![0u8; cfg.iosize],
                        tally: Tally::default(),
                        failed,
                    };
                    let res = w.run(deadline);
                    if res.is_err() {
                        failed.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    w.close_all();
                    res.map(|()| w.tally)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a filebench thread panicked")))
            })
            .collect()
    });
    let run_secs = start.elapsed().as_secs_f64();
    let mut r = FilebenchResult {
        preallocated: pre as u64,
        setup_secs,
        run_secs,
        ..FilebenchResult::default()
    };
    for t in tallies {
        let t = t?;
        for (k, v) in t.counts {
            *r.counts.entry(k.to_string()).or_default() += v;
        }
        r.bytes_read += t.bytes_read;
        r.bytes_written += t.bytes_written;
    }
    r.ops = r
        .counts
        .iter()
        .filter(|(k, _)| k.as_str() != "skipped")
        .map(|(_, v)| v)
        .sum();
    r.ops_per_sec = if run_secs > 0.0 {
        r.ops as f64 / run_secs
    } else {
        0.0
    };
    Ok(r)
}

fn lock(set: &Mutex<Fileset>) -> std::sync::MutexGuard<'_, Fileset> {
    set.lock().unwrap_or_else(|e| e.into_inner())
}

/// One Filebench thread.
struct Worker<'a> {
    target: &'a dyn Target,
    cfg: &'a FilebenchConfig,
    set: &'a Mutex<Fileset>,
    paths: &'a [String],
    size_of: &'a [u64],
    data: &'a [u8],
    rng: StdRng,
    /// The thread's open file (Filebench's fd 1) and its entry.
    open: Option<(Fh, usize)>,
    /// The shared log, opened at the first append (webserver's fd 2).
    log: Option<Fh>,
    buf: Vec<u8>,
    tally: Tally,
    /// Set by a thread that failed.
    failed: &'a std::sync::atomic::AtomicBool,
}

impl Worker<'_> {
    fn run(&mut self, deadline: Instant) -> io::Result<()> {
        while Instant::now() < deadline {
            if crate::interrupted() {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
            }
            if self.failed.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(());
            }
            let mut skipping = false;
            for &op in &self.cfg.flowops {
                if skipping {
                    skipping = op != Flowop::Close;
                    continue;
                }
                if !self.flowop(op)? {
                    self.tally.count("skipped");
                    skipping = matches!(op, Flowop::Create | Flowop::Open);
                }
            }
        }
        Ok(())
    }

    /// Runs one flowop; `false` when its pick found no entry.
    fn flowop(&mut self, op: Flowop) -> io::Result<bool> {
        let t = self.target;
        match op {
            Flowop::Delete | Flowop::Stat => {
                let picked = lock(self.set).pick(&mut self.rng, true);
                let Some(i) = picked else { return Ok(false) };
                let res = if op == Flowop::Delete {
                    t.remove(&self.paths[i])
                } else {
                    t.stat(&self.paths[i]).map(drop)
                };
                let mut set = lock(self.set);
                set.busy[i] = false;
                if op == Flowop::Delete && res.is_ok() {
                    set.exists[i] = false;
                    set.size[i] = 0;
                }
                res?;
            }
            Flowop::Create | Flowop::Open => {
                self.close_open()?;
                let picked = lock(self.set).pick(&mut self.rng, op == Flowop::Open);
                let Some(i) = picked else { return Ok(false) };
                let mode = if op == Flowop::Create {
                    Mode::Create
                } else {
                    Mode::ReadWrite
                };
                match t.open(&self.paths[i], mode) {
                    Ok(fh) => {
                        if op == Flowop::Create {
                            let mut set = lock(self.set);
                            set.exists[i] = true;
                            set.size[i] = 0;
                        }
                        self.open = Some((fh, i));
                    }
                    Err(e) => {
                        lock(self.set).busy[i] = false;
                        return Err(e);
                    }
                }
            }
            Flowop::WriteWhole => {
                let Some((fh, i)) = &self.open else {
                    return Ok(false);
                };
                let len = self.size_of[*i] as usize;
                crate::target::write_blocks(t, fh, 0, &self.data[..len], self.cfg.iosize)?;
                lock(self.set).size[*i] = len as u64;
                self.tally.bytes_written += len as u64;
            }
            Flowop::Append => {
                let Some((fh, i)) = &self.open else {
                    return Ok(false);
                };
                let len = self.rng.gen_range(1..self.cfg.append_size);
                let at = lock(self.set).size[*i];
                t.write_at(fh, at, &self.data[..len])?;
                lock(self.set).size[*i] = at + len as u64;
                self.tally.bytes_written += len as u64;
            }
            Flowop::AppendLog => {
                if self.log.is_none() {
                    self.log = Some(t.open(LOG, Mode::Append)?);
                }
                let len = self.rng.gen_range(1..self.cfg.append_size);
                if let Some(log) = &self.log {
                    t.write_at(log, 0, &self.data[..len])?;
                }
                self.tally.bytes_written += len as u64;
            }
            Flowop::Fsync => {
                let Some((fh, _)) = &self.open else {
                    return Ok(false);
                };
                t.fsync(fh)?;
            }
            Flowop::ReadWhole => {
                let Some((fh, _)) = &self.open else {
                    return Ok(false);
                };
                self.tally.bytes_read += crate::target::read_whole(t, fh, &mut self.buf)?;
            }
            Flowop::Close => {
                if self.open.is_none() {
                    return Ok(false);
                }
                self.close_open()?;
            }
        }
        self.tally.count(op.name());
        Ok(true)
    }

    fn close_open(&mut self) -> io::Result<()> {
        if let Some((fh, i)) = self.open.take() {
            let res = self.target.close(fh);
            lock(self.set).busy[i] = false;
            res?;
        }
        Ok(())
    }

    fn close_all(&mut self) {
        let _ = self.close_open();
        if let Some(log) = self.log.take() {
            let _ = self.target.close(log);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_is_about_width_wide() {
        assert_eq!(entry_path(7, 1000, 1_000_000), "fb/f7");
        // 10,000 files 20 wide: 500 leaves numbered in three base-20 digits
        assert_eq!(entry_path(0, 10_000, 20), "fb/d0/d0/d0/f0");
        assert_eq!(entry_path(9_999, 10_000, 20), "fb/d1/d4/d19/f9999");
        let dirs = fileset_dirs(10_000, 20);
        assert_eq!(dirs[0], "fb");
        // every parent comes before its children
        for (k, d) in dirs.iter().enumerate() {
            if let Some((parent, _)) = d.rsplit_once('/') {
                assert!(dirs[..k].iter().any(|p| p == parent), "{d}");
            }
        }
        let leaves = dirs.iter().filter(|d| d.matches('/').count() == 3).count();
        assert_eq!(leaves, 500);
    }

    #[test]
    fn gamma_sizes_have_the_mean() {
        let cfg = FilebenchConfig::personality("fileserver").unwrap();
        let s = sizes(&cfg, &mut StdRng::seed_from_u64(1)).unwrap();
        let mean = s.iter().sum::<u64>() as f64 / s.len() as f64;
        assert!((mean / (128 << 10) as f64 - 1.0).abs() < 0.05, "{mean}");
        // shape 1.5: a spread, not a constant
        assert!(s.iter().any(|&x| x < 32 << 10) && s.iter().any(|&x| x > 400 << 10));
    }
}
