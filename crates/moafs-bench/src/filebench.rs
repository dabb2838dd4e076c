//! Filebench's file-server, mail-server, web-server and web-proxy personalities, natively, as
//! filebench/filebench (master, 1.5-alpha3 line) runs `workloads/{fileserver,varmail,
//! webserver,webproxy}.f` with `fileset.c`, `flowop_library.c`, `flowop.c` and `fb_random.c`:
//!
//! * **Fileset** (`fileset_populate`): a tree under `bigfileset/` whose directories have
//!   gamma-distributed widths (shape `dir_gamma` = 1.5, Filebench's `dirgamma` default, mean
//!   `dir_width`) and gamma-distributed depths (mean ln(files) / ln(dir_width)); the root holds
//!   as many subdirectories as needed, every other directory holds files (a leaf) or further
//!   directories; names are serial numbers (`00000001`). File sizes are gamma (shape 1.5, mean
//!   `mean_size`; Filebench's `sizegamma` default, also for a fixed `size=`), truncated to
//!   whole bytes. Each entry is made and filled before the run with probability
//!   `prealloc_pct` %, in random order (`fileset_create`); every directory is made.
//! * **Picks** (`fileset_pick`): `createfile` takes the next entry that does not exist and
//!   `openfile`, `deletefile` and `statfile` the next that does, each from a rotor that goes
//!   round the entries in index order (one rotor for existing entries, one for absent ones,
//!   shared by all threads: the flowops do not rotate fds); an entry is busy only while a
//!   thread works on it (pick to end of the open, delete, stat or close), and a busy entry is
//!   passed over for the next one. An open file is not busy: other threads may open it too;
//!   `deletefile` leaves a file alone while any thread has it open (the flowop then does
//!   nothing and is not counted). A pick that finds no entry (all busy, or none of the kind)
//!   stops the run early, as Filebench's "Run stopped early: could not obtain a file".
//! * **Flowops**: `readwholefile`/`writewholefile` move the file in `iosize` pieces;
//!   `appendfilerand` appends a uniform length in [0, `append_size`) (0: counted, nothing
//!   written); `openfile` opens read-only on a `readonly` fileset (webserver), else
//!   read-write; the webserver's log is its own one-entry fileset (`logfiles/`), opened for
//!   appending by each thread at its first append. Every flowop is one operation; its latency
//!   is that of its system calls (per flowop kind, each thread its own, merged).
//! * **Run**: `threads` threads loop over the flowop list until the run's time is up (checked
//!   before each flowop, as Filebench's threads check their abort flag); Filebench's default
//!   run is 60 s.

use crate::latency::Latencies;
use crate::target::{Fh, Mode, Target};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The flowops of the four personalities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flowop {
    /// Remove an existing file no thread has open.
    Delete,
    /// Create a file that does not exist (it stays open).
    Create,
    /// Write the open file's whole size, `iosize` at a time.
    WriteWhole,
    /// Append a random length to the open file.
    Append,
    Fsync,
    Close,
    /// Open an existing file.
    Open,
    /// Read the open file whole, `iosize` at a time.
    ReadWhole,
    /// `stat` an existing file.
    Stat,
    /// Append a random length to the shared log (webserver).
    AppendLog,
}

impl Flowop {
    pub fn name(self) -> &'static str {
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
    /// `$nfiles`: entries of the fileset.
    pub files: usize,
    /// `$meandirwidth`: mean entries per directory (1,000,000: in effect one directory).
    pub dir_width: usize,
    /// Shape of the gamma distributions of directory widths and depths (`dirgamma`, 1.5);
    /// 0 makes every directory exactly `dir_width` wide.
    pub dir_gamma: f64,
    /// `$meanfilesize` in bytes.
    pub mean_size: u64,
    /// Sizes drawn from a gamma distribution of shape 1.5 with that mean (Filebench's
    /// `sizegamma` default); else all equal.
    pub gamma_sizes: bool,
    /// Percent of the entries made and filled before the run (each with that chance).
    pub prealloc_pct: u32,
    /// `$nthreads`.
    pub threads: usize,
    /// `$iosize`: bytes per read and write of the whole-file flowops.
    pub iosize: usize,
    /// `$meanappendsize` (webproxy: `$meaniosize`): appends are uniform in [0, append_size).
    pub append_size: usize,
    /// The fileset is `readonly`: `openfile` opens read-only (webserver).
    pub read_only: bool,
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
            dir_gamma: 1.5,
            mean_size: 16 << 10,
            gamma_sizes: true,
            prealloc_pct: 80,
            threads,
            iosize: 1 << 20,
            append_size: 16 << 10,
            read_only: false,
            flowops: Vec::new(),
            duration_secs: 60.0,
            seed: 42,
        }
    }

    /// The named personality with its `.f` file's values (60 s runs).
    pub fn personality(name: &str) -> Option<FilebenchConfig> {
        use Flowop::*;
        Some(match name {
            // fileserver.f: nfiles 10000, meandirwidth 20, meanfilesize 128k, nthreads 50,
            // iosize 1m, meanappendsize 16k, prealloc 80
            "fileserver" => FilebenchConfig {
                mean_size: 128 << 10,
                flowops: vec![
                    Create, WriteWhole, Close, Open, Append, Close, Open, ReadWhole, Close, Delete,
                    Stat,
                ],
                ..Self::base(name, 10_000, 20, 50)
            },
            // varmail.f: nfiles 1000, meandirwidth 1000000, meanfilesize 16k, nthreads 16,
            // iosize 1m, meanappendsize 16k, prealloc 80
            "varmail" => FilebenchConfig {
                flowops: vec![
                    Delete, Create, Append, Fsync, Close, Open, ReadWhole, Append, Fsync, Close,
                    Open, ReadWhole, Close,
                ],
                ..Self::base(name, 1_000, 1_000_000, 16)
            },
            // webserver.f: nfiles 1000, meandirwidth 20, meanfilesize 16k, nthreads 100,
            // iosize 1m, meanappendsize 16k, prealloc 100, readonly; logfiles: 1 entry
            "webserver" => {
                let mut ops = Vec::new();
                for _ in 0..10 {
                    ops.extend([Open, ReadWhole, Close]);
                }
                ops.push(AppendLog);
                FilebenchConfig {
                    prealloc_pct: 100,
                    read_only: true,
                    flowops: ops,
                    ..Self::base(name, 1_000, 20, 100)
                }
            }
            // webproxy.f: nfiles 10000, meandirwidth 1000000, meanfilesize 16k, nthreads 100,
            // meaniosize 16k (appends), iosize 1m, prealloc 80; its `opslimit` does nothing
            // without a rate
            "webproxy" => {
                let mut ops = vec![Delete, Create, Append, Close];
                for _ in 0..5 {
                    ops.extend([Open, ReadWhole, Close]);
                }
                FilebenchConfig {
                    flowops: ops,
                    ..Self::base(name, 10_000, 1_000_000, 100)
                }
            }
            _ => return None,
        })
    }

    /// The fileset's entries multiplied by `f` (at least 1); threads, sizes and flowops stay
    /// as the personality says.
    pub fn scaled(mut self, f: f64) -> FilebenchConfig {
        self.files = ((self.files as f64 * f).round() as usize).max(1);
        self
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FilebenchResult {
    /// Flowops of the measured run, by kind.
    pub counts: BTreeMap<String, u64>,
    /// All flowops of the measured run.
    pub ops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Files made and filled before the run.
    pub preallocated: u64,
    /// Directories of the fileset.
    pub directories: u64,
    /// `deletefile`s that found their file open in another thread and did nothing (not
    /// counted as operations, as in Filebench).
    pub deletes_refused: u64,
    /// Why the run stopped before its time, if it did (a pick found no file).
    pub stopped_early: Option<String>,
    pub setup_secs: f64,
    pub run_secs: f64,
    pub ops_per_sec: f64,
    /// Latencies of the measured run by flowop kind.
    #[serde(skip)]
    pub latency: Latencies,
}

/// The directory tree and the files of a fileset, in Filebench's index order.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Directories, parents first (the fileset's root first).
    pub dirs: Vec<String>,
    pub files: Vec<String>,
    pub sizes: Vec<u64>,
    /// The widths drawn for the directories below the root.
    pub widths: Vec<f64>,
}

fn gamma(shape: f64, mean: f64, rng: &mut impl Rng) -> f64 {
    if shape <= 0.0 || mean <= 0.0 {
        return mean.max(0.0);
    }
    match Gamma::new(shape, mean / shape) {
        Ok(g) => g.sample(rng),
        Err(_) => mean,
    }
}

/// `fileset_populate`: the tree of `root` for `files` entries, directory widths of mean
/// `width`, file sizes of mean `mean_size` (gamma when `gamma_sizes`).
pub fn populate(
    root: &str,
    files: usize,
    width: usize,
    dir_gamma: f64,
    mean_size: u64,
    gamma_sizes: bool,
    rng: &mut impl Rng,
) -> Tree {
    struct P<'a, R> {
        files: usize,
        width: f64,
        depth_mean: f64,
        dir_gamma: f64,
        mean_size: u64,
        gamma_sizes: bool,
        rng: &'a mut R,
        t: Tree,
    }
    fn subdir<R: Rng>(p: &mut P<'_, R>, path: &str, is_root: bool, depth: f64) {
        let depth = depth + 1.0;
        let mut randepth = gamma(p.dir_gamma, p.depth_mean, p.rng).trunc();
        let mut ranwidth = gamma(p.dir_gamma, p.width, p.rng);
        if randepth == 0.0 {
            randepth = 1.0;
        }
        if ranwidth == 0.0 {
            ranwidth = 1.0;
        }
        if !is_root {
            p.t.widths.push(ranwidth);
        }
        let leaf = depth >= randepth;
        let mut i = 1usize;
        while (is_root || (i as f64) < ranwidth + 1.0) && p.t.files.len() < p.files {
            let child = format!("{path}/{i:08}");
            if !is_root && leaf {
                let size = if p.gamma_sizes {
                    gamma(1.5, p.mean_size as f64, p.rng) as u64
                } else {
                    p.mean_size
                };
                p.t.files.push(child);
                p.t.sizes.push(size);
            } else {
                p.t.dirs.push(child.clone());
                subdir(p, &child, false, depth);
            }
            i += 1;
        }
    }
    let width = width.max(2) as f64;
    let mut p = P {
        files,
        width,
        depth_mean: (files.max(1) as f64).ln() / width.ln(),
        dir_gamma,
        mean_size,
        gamma_sizes,
        rng,
        t: Tree {
            dirs: vec![root.to_string()],
            ..Tree::default()
        },
    };
    subdir(&mut p, root, true, 0.0);
    p.t
}

/// The fileset's state, under one lock (Filebench's `fs_pick_lock`).
struct Fileset {
    exists: Vec<bool>,
    busy: Vec<bool>,
    open_cnt: Vec<u32>,
    /// Bytes in the file as written through the run (appends go at its end).
    size: Vec<u64>,
    exist: BTreeSet<usize>,
    absent: BTreeSet<usize>,
    /// The next index to try among existing (`fs_file_exrotor[0]`) and absent entries
    /// (`fs_file_nerotor`).
    ex_rotor: usize,
    ne_rotor: usize,
}

impl Fileset {
    fn new(n: usize) -> Fileset {
        Fileset {
            exists: vec![false; n],
            busy: vec![false; n],
            open_cnt: vec![0; n],
            size: vec![0; n],
            exist: BTreeSet::new(),
            absent: (0..n).collect(),
            ex_rotor: 0,
            ne_rotor: 0,
        }
    }

    /// `fileset_pick` in rotation: the first entry at or after the rotor (wrapping), the
    /// rotor moved past it, then the next one not busy; marked busy.
    fn pick(&mut self, exists: bool) -> Option<usize> {
        let (set, rotor) = if exists {
            (&self.exist, &mut self.ex_rotor)
        } else {
            (&self.absent, &mut self.ne_rotor)
        };
        let first = *set.range(*rotor..).next().or_else(|| set.iter().next())?;
        *rotor = first + 1;
        let busy = &self.busy;
        let found = set
            .range(first..)
            .chain(set.range(..first))
            .copied()
            .find(|&i| !busy[i])?;
        self.busy[found] = true;
        Some(found)
    }

    fn set_exists(&mut self, i: usize, e: bool) {
        self.exists[i] = e;
        if e {
            self.absent.remove(&i);
            self.exist.insert(i);
        } else {
            self.exist.remove(&i);
            self.absent.insert(i);
        }
    }
}

const ROOT: &str = "bigfileset";
const LOG_ROOT: &str = "logfiles";

pub fn run(target: &dyn Target, cfg: &FilebenchConfig) -> io::Result<FilebenchResult> {
    run_with(target, cfg, &|| Ok(()))
}

/// As [`run`], with `between` run after the fileset is made and before the measured run.
pub fn run_with(
    target: &dyn Target,
    cfg: &FilebenchConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<FilebenchResult> {
    if cfg.files == 0 || cfg.threads == 0 || cfg.iosize == 0 || cfg.append_size == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "filebench: need files, threads, iosize and append_size > 0",
        ));
    }
    if cfg.dir_width < 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "filebench: need a mean directory width of at least 2",
        ));
    }
    let setup_start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let tree = populate(
        ROOT,
        cfg.files,
        cfg.dir_width,
        cfg.dir_gamma,
        cfg.mean_size,
        cfg.gamma_sizes,
        &mut rng,
    );
    let log = cfg.flowops.contains(&Flowop::AppendLog).then(|| {
        populate(
            LOG_ROOT,
            1,
            cfg.dir_width,
            cfg.dir_gamma,
            cfg.mean_size,
            cfg.gamma_sizes,
            &mut rng,
        )
    });
    let max_size = tree.sizes.iter().copied().max().unwrap_or(0) as usize;
    let data: Vec<u8> = (0..max_size.max(cfg.append_size).max(cfg.iosize).max(1))
        .map(|_| rng.gen())
        .collect();
    let mut set = Fileset::new(cfg.files);
    let mut dirs = 0;
    for t in std::iter::once(&tree).chain(log.as_ref()) {
        for d in &t.dirs {
            target.mkdir(d)?;
            dirs += 1;
        }
    }
    // fileset_create: every entry in random order, each made with prealloc % chance
    let mut order: Vec<usize> = (0..cfg.files).collect();
    let mut pre = 0u64;
    let chance = f64::from(cfg.prealloc_pct.min(100)) / 100.0;
    for k in 0..cfg.files {
        let j = rng.gen_range(k..cfg.files);
        order.swap(k, j);
        if !rng.gen_bool(chance) {
            continue;
        }
        let i = order[k];
        let len = tree.sizes[i] as usize;
        crate::target::create_file(target, &tree.files[i], &data[..len], 1 << 20)?;
        set.set_exists(i, true);
        set.size[i] = len as u64;
        pre += 1;
    }
    if let Some(l) = &log {
        let len = (l.sizes[0] as usize).min(data.len());
        crate::target::create_file(target, &l.files[0], &data[..len], 1 << 20)?;
    }
    let setup_secs = setup_start.elapsed().as_secs_f64();
    between()?;

    let set = Mutex::new(set);
    // a thread that fails, or finds no file, stops the others at their next flowop
    let stop = AtomicBool::new(false);
    let stopped_why: Mutex<Option<String>> = Mutex::new(None);
    let log_path = log.as_ref().map(|l| l.files[0].as_str());
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(cfg.duration_secs.max(0.0));
    let tallies: Vec<io::Result<Tally>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (set, tree, data, stop, stopped_why) =
                    (&set, &tree, &data, &stop, &stopped_why);
                s.spawn(move || {
                    let seed = cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let mut w = Worker {
                        target,
                        cfg,
                        set,
                        paths: &tree.files,
                        size_of: &tree.sizes,
                        data,
                        log_path,
                        rng: StdRng::seed_from_u64(seed),
                        open: None,
                        log: None,
                        buf: vec![0u8; cfg.iosize],
                        tally: Tally::default(),
                        stop,
                    };
                    let res = w.run(deadline);
                    match &res {
                        Err(e) => {
                            stop.store(true, Ordering::SeqCst);
                            let mut why = stopped_why.lock().unwrap_or_else(|e| e.into_inner());
                            why.get_or_insert_with(|| e.to_string());
                        }
                        Ok(Some(op)) => {
                            stop.store(true, Ordering::SeqCst);
                            let mut why = stopped_why.lock().unwrap_or_else(|e| e.into_inner());
                            why.get_or_insert_with(|| {
                                format!("{} could not obtain a file", op.name())
                            });
                        }
                        Ok(None) => {}
                    }
                    w.close_all();
                    res.map(|_| w.tally)
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
        preallocated: pre,
        directories: dirs,
        setup_secs,
        run_secs,
        stopped_early: stopped_why.into_inner().unwrap_or_else(|e| e.into_inner()),
        ..FilebenchResult::default()
    };
    for t in tallies {
        let t = t?;
        for (k, v) in t.counts {
            *r.counts.entry(k.to_string()).or_default() += v;
        }
        r.bytes_read += t.bytes_read;
        r.bytes_written += t.bytes_written;
        r.deletes_refused += t.deletes_refused;
        r.latency.merge(&t.latency);
    }
    r.ops = r.counts.values().sum();
    r.ops_per_sec = if run_secs > 0.0 {
        r.ops as f64 / run_secs
    } else {
        0.0
    };
    Ok(r)
}

/// Per-thread tallies, added up at the end.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<&'static str, u64>,
    bytes_read: u64,
    bytes_written: u64,
    deletes_refused: u64,
    latency: Latencies,
}

fn lock(set: &Mutex<Fileset>) -> std::sync::MutexGuard<'_, Fileset> {
    set.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a flowop did.
enum Done {
    /// Counted, with its latency.
    Op(Duration),
    /// Did nothing and is not counted (a delete of a file open elsewhere).
    Nothing,
    /// Its pick found no file.
    NoFile,
}

/// One Filebench thread.
struct Worker<'a> {
    target: &'a dyn Target,
    cfg: &'a FilebenchConfig,
    set: &'a Mutex<Fileset>,
    paths: &'a [String],
    size_of: &'a [u64],
    data: &'a [u8],
    log_path: Option<&'a str>,
    rng: StdRng,
    /// The thread's open file (Filebench's fd 1) and its entry.
    open: Option<(Fh, usize)>,
    /// The shared log, opened at the first append (webserver's fd 2).
    log: Option<Fh>,
    buf: Vec<u8>,
    tally: Tally,
    stop: &'a AtomicBool,
}

fn timed<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<(T, Duration)> {
    let t0 = Instant::now();
    let v = f()?;
    Ok((v, t0.elapsed()))
}

impl Worker<'_> {
    /// Loops until the deadline or a stop; `Some(flowop)` when a pick found no file.
    fn run(&mut self, deadline: Instant) -> io::Result<Option<Flowop>> {
        loop {
            for &op in &self.cfg.flowops {
                if crate::interrupted() {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
                }
                if self.stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    return Ok(None);
                }
                match self.flowop(op)? {
                    Done::Op(d) => {
                        *self.tally.counts.entry(op.name()).or_default() += 1;
                        self.tally.latency.record(op.name(), d);
                    }
                    Done::Nothing => self.tally.deletes_refused += 1,
                    Done::NoFile => return Ok(Some(op)),
                }
            }
        }
    }

    /// Waits until entry `i` is not busy and marks it busy (closefile's wait).
    fn claim(&self, i: usize) {
        loop {
            {
                let mut s = lock(self.set);
                if !s.busy[i] {
                    s.busy[i] = true;
                    return;
                }
            }
            std::thread::yield_now();
        }
    }

    fn no_open(op: Flowop) -> io::Error {
        io::Error::other(format!("filebench: {} without an open file", op.name()))
    }

    fn flowop(&mut self, op: Flowop) -> io::Result<Done> {
        let t = self.target;
        let d = match op {
            Flowop::Delete => {
                let picked = lock(self.set).pick(true);
                let Some(i) = picked else {
                    return Ok(Done::NoFile);
                };
                if lock(self.set).open_cnt[i] > 0 {
                    lock(self.set).busy[i] = false;
                    return Ok(Done::Nothing);
                }
                let res = timed(|| t.remove(&self.paths[i]));
                let mut set = lock(self.set);
                if res.is_ok() {
                    set.set_exists(i, false);
                    set.size[i] = 0;
                }
                set.busy[i] = false;
                res?.1
            }
            Flowop::Stat => {
                let picked = lock(self.set).pick(true);
                let Some(i) = picked else {
                    return Ok(Done::NoFile);
                };
                let res = timed(|| t.stat(&self.paths[i]));
                lock(self.set).busy[i] = false;
                res?.1
            }
            Flowop::Create | Flowop::Open => {
                if self.open.is_some() {
                    return Err(io::Error::other(format!(
                        "filebench: {} with a file still open",
                        op.name()
                    )));
                }
                let create = op == Flowop::Create;
                let picked = lock(self.set).pick(!create);
                let Some(i) = picked else {
                    return Ok(Done::NoFile);
                };
                let mode = match (create, self.cfg.read_only) {
                    (true, _) => Mode::Create,
                    (false, true) => Mode::Read,
                    (false, false) => Mode::ReadWrite,
                };
                let res = timed(|| t.open(&self.paths[i], mode));
                let mut set = lock(self.set);
                set.busy[i] = false;
                let (fh, d) = res?;
                if create {
                    set.set_exists(i, true);
                    set.size[i] = 0;
                }
                set.open_cnt[i] += 1;
                self.open = Some((fh, i));
                d
            }
            Flowop::WriteWhole => {
                let (fh, i) = self.open.as_ref().ok_or_else(|| Self::no_open(op))?;
                let len = self.size_of[*i] as usize;
                let (_, d) = timed(|| {
                    crate::target::write_blocks(t, fh, 0, &self.data[..len], self.cfg.iosize)
                })?;
                let mut set = lock(self.set);
                set.size[*i] = set.size[*i].max(len as u64);
                self.tally.bytes_written += len as u64;
                d
            }
            Flowop::Append => {
                let len = self.rng.gen_range(0..self.cfg.append_size);
                let (fh, i) = self.open.as_ref().ok_or_else(|| Self::no_open(op))?;
                // the end of the file, reserved: appends of threads sharing it do not overlap
                let at = {
                    let mut set = lock(self.set);
                    let at = set.size[*i];
                    set.size[*i] += len as u64;
                    at
                };
                let (_, d) = timed(|| {
                    if len > 0 {
                        t.write_at(fh, at, &self.data[..len])
                    } else {
                        Ok(())
                    }
                })?;
                self.tally.bytes_written += len as u64;
                d
            }
            Flowop::AppendLog => {
                let len = self.rng.gen_range(0..self.cfg.append_size);
                if self.log.is_none() {
                    let path = self
                        .log_path
                        .ok_or_else(|| io::Error::other("filebench: no log fileset"))?;
                    self.log = Some(t.open(path, Mode::Append)?);
                }
                let log = self.log.as_ref().expect("opened above");
                let (_, d) = timed(|| {
                    if len > 0 {
                        t.write_at(log, 0, &self.data[..len])
                    } else {
                        Ok(())
                    }
                })?;
                self.tally.bytes_written += len as u64;
                d
            }
            Flowop::Fsync => {
                let (fh, _) = self.open.as_ref().ok_or_else(|| Self::no_open(op))?;
                timed(|| t.fsync(fh))?.1
            }
            Flowop::ReadWhole => {
                let (fh, _) = self.open.as_ref().ok_or_else(|| Self::no_open(op))?;
                let (n, d) = timed(|| crate::target::read_whole(t, fh, &mut self.buf))?;
                self.tally.bytes_read += n;
                d
            }
            Flowop::Close => {
                let (fh, i) = self.open.take().ok_or_else(|| Self::no_open(op))?;
                self.claim(i);
                let res = timed(|| t.close(fh));
                let mut set = lock(self.set);
                set.open_cnt[i] -= 1;
                set.busy[i] = false;
                res?.1
            }
        };
        Ok(Done::Op(d))
    }

    /// Closes what the thread left open when the run ended (not counted).
    fn close_all(&mut self) {
        if let Some((fh, i)) = self.open.take() {
            let _ = self.target.close(fh);
            lock(self.set).open_cnt[i] -= 1;
        }
        if let Some(log) = self.log.take() {
            let _ = self.target.close(log);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_fileset_is_one_directory_under_the_root() {
        // dirwidth 1,000,000 for 1,000 files: the root's first subdirectory holds them all
        // (unless its drawn depth is 2 or more, which seed 1 does not give)
        let t = populate(
            ROOT,
            1000,
            1_000_000,
            1.5,
            16 << 10,
            true,
            &mut StdRng::seed_from_u64(1),
        );
        assert_eq!(t.files.len(), 1000);
        assert_eq!(t.dirs, ["bigfileset", "bigfileset/00000001"]);
        assert_eq!(t.files[0], "bigfileset/00000001/00000001");
        assert_eq!(t.files[999], "bigfileset/00000001/00001000");
    }

    #[test]
    fn directory_widths_vary_around_the_mean() {
        let t = populate(
            ROOT,
            10_000,
            20,
            1.5,
            1,
            true,
            &mut StdRng::seed_from_u64(3),
        );
        assert_eq!(t.files.len(), 10_000);
        // gamma of shape 1.5 and mean 20: the drawn widths average 20 and spread widely
        let n = t.widths.len() as f64;
        let mean = t.widths.iter().sum::<f64>() / n;
        assert!(n > 100.0, "{n} directories");
        assert!((mean - 20.0).abs() < 2.5, "mean width {mean}");
        assert!(t.widths.iter().any(|&w| w < 5.0) && t.widths.iter().any(|&w| w > 50.0));
        // the leaves really hold that many files: entries per leaf directory vary too
        let mut per_dir: BTreeMap<&str, usize> = BTreeMap::new();
        for f in &t.files {
            *per_dir.entry(f.rsplit_once('/').unwrap().0).or_default() += 1;
        }
        let sizes: Vec<usize> = per_dir.values().copied().collect();
        assert!(
            sizes.iter().min() < Some(&5) && sizes.iter().max() > Some(&50),
            "{sizes:?}"
        );
        // parents come before their children
        for (k, d) in t.dirs.iter().enumerate().skip(1) {
            let parent = d.rsplit_once('/').unwrap().0;
            assert!(t.dirs[..k].iter().any(|p| p == parent), "{d}");
        }
        // and every width 0 makes each directory exactly dir_width wide
        let fixed = populate(ROOT, 400, 20, 0.0, 1, true, &mut StdRng::seed_from_u64(3));
        assert!(fixed.widths.iter().all(|&w| w == 20.0));
    }

    #[test]
    fn gamma_sizes_have_the_mean() {
        let t = populate(
            ROOT,
            20_000,
            20,
            1.5,
            128 << 10,
            true,
            &mut StdRng::seed_from_u64(1),
        );
        let s = &t.sizes;
        let mean = s.iter().sum::<u64>() as f64 / s.len() as f64;
        assert!((mean / (128 << 10) as f64 - 1.0).abs() < 0.05, "{mean}");
        // shape 1.5: a spread, not a constant
        assert!(s.iter().any(|&x| x < 32 << 10) && s.iter().any(|&x| x > 400 << 10));
    }

    #[test]
    fn picks_go_round_and_pass_over_busy_entries() {
        let mut s = Fileset::new(6);
        for i in [1, 2, 4] {
            s.set_exists(i, true);
        }
        assert_eq!(s.pick(true), Some(1));
        assert_eq!(s.pick(true), Some(2));
        // 1 and 2 still busy: the rotor is at 3, finds 4
        assert_eq!(s.pick(true), Some(4));
        // rotor past the end: back to 1, busy, 2 busy, 4 busy: nothing
        assert_eq!(s.pick(true), None);
        s.busy[2] = false;
        assert_eq!(s.pick(true), Some(2));
        // absent entries have their own rotor
        assert_eq!(s.pick(false), Some(0));
        assert_eq!(s.pick(false), Some(3));
        assert_eq!(s.pick(false), Some(5));
    }
}
