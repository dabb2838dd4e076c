//! Drivers for the Debian tools (`postmark`, `sysbench`, `fio`, `bonnie++`, `tar`): each runs
//! the real program in the target's directory and reads its own result from its output (or,
//! for `tar`, counts what it made). They need a
//! mounted target and the tool installed (`moafs bench` says which is missing).

use crate::latency::LatencySummary;
use crate::outcome::Outcome;
pub use crate::programs::{installed, not_installed, package_of, spawn_error};
use crate::target::Target;
use serde::Serialize;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// postmark 1.53 with the FSL configuration (scaled).
    Postmark,
    /// sysbench fileio `rndrd`.
    Sysbench,
    /// fio random reads (psync engine).
    Fio,
    /// bonnie++ block phases (no small-file tests).
    Bonnie,
    /// fio random 4 KiB writes by several jobs, each write followed by an fsync (psync).
    FioFsync,
    /// tar extracting the Linux source tree Debian's `linux-source` package ships, then a
    /// sync of the target: files made durable per second.
    Untar,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolConfig {
    pub tool: Tool,
    /// postmark: its `number` of files; sysbench: its `--file-num`; fio with fsync: jobs;
    /// tar: the members extracted (0: the whole tree).
    pub files: usize,
    /// postmark: transactions; sysbench and fio: requests (fio with fsync: per job).
    pub transactions: usize,
    /// Bytes of the data set (sysbench, fio, bonnie++; fio with fsync: each job's file).
    pub total: u64,
    pub block: usize,
    pub seed: u64,
}

impl Tool {
    pub fn program(self) -> &'static str {
        match self {
            Tool::Postmark => "postmark",
            Tool::Sysbench => "sysbench",
            Tool::Fio => "fio",
            Tool::Bonnie => "bonnie++",
            Tool::FioFsync => "fio",
            Tool::Untar => "tar",
        }
    }
}

impl ToolConfig {
    /// Whether this machine can run the tool: the program on the PATH, and for [`Tool::Untar`]
    /// Debian's Linux source tarball; else why not, with the package that brings it.
    pub fn available(&self) -> Result<(), String> {
        let prog = self.tool.program();
        if !installed(prog) {
            return Err(not_installed(prog));
        }
        if self.tool == Tool::Untar && linux_tarball_xz().is_none() {
            return Err(NO_LINUX_SOURCE.to_string());
        }
        Ok(())
    }
}

const NO_LINUX_SOURCE: &str =
    "the Linux source tarball is not installed (Debian: apt-get install linux-source)";

/// Debian's `/usr/src/linux-source-*.tar.xz` (the newest).
fn linux_tarball_xz() -> Option<std::path::PathBuf> {
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/src")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with("linux-source-") && n.ends_with(".tar.xz")
        })
        .collect();
    found.sort();
    found.pop()
}

/// Runs `cmd` (in `dir`), returns stdout; a failure is an error with its stderr.
fn output(cmd: &mut Command, dir: &Path) -> io::Result<String> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    if crate::interrupted() {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
    }
    let out = cmd
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| spawn_error(&prog, e))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{prog} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn unparsed(tool: &str, what: &str, text: &str) -> io::Error {
    let head: String = text.chars().take(400).collect();
    io::Error::other(format!("{tool}: no {what} in its output: {head}"))
}

/// postmark's "N seconds of transactions (R per second)".
pub fn parse_postmark(text: &str) -> Option<(f64, f64)> {
    let line = text
        .lines()
        .find(|l| l.contains("seconds of transactions"))?;
    let secs: f64 = line.split_whitespace().next()?.parse().ok()?;
    let rate: f64 = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((secs, rate))
}

/// sysbench's "reads/s: R".
pub fn parse_sysbench(text: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.trim_start().starts_with("reads/s:"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// fio's JSON document's first job (fio may print notes before the document).
fn fio_job(text: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&text[text.find('{')?..]).ok()?;
    Some(v["jobs"][0].clone())
}

/// The IOPS and runtime (ms) of one direction (`read`, `write`) of fio's first job.
fn fio_rate(text: &str, dir: &str) -> Option<(f64, f64)> {
    let d = &fio_job(text)?[dir];
    Some((d["iops"].as_f64()?, d["runtime"].as_f64()?))
}

/// A latency record of fio's first job (`read.clat_ns`, `sync.lat_ns` …), in µs.
fn fio_latency(text: &str, dir: &str, kind: &str) -> Option<LatencySummary> {
    let job = fio_job(text)?;
    let c = &job[dir][kind];
    let pct = |p: &str| c["percentile"][p].as_f64().map(|ns| ns / 1000.0);
    Some(LatencySummary {
        count: c["N"].as_u64()?,
        mean_us: c["mean"].as_f64()? / 1000.0,
        p50_us: pct("50.000000")?,
        p99_us: pct("99.000000")?,
        p999_us: pct("99.900000")?,
        max_us: c["max"].as_f64()? / 1000.0,
    })
}

/// fio's JSON: the first job's read IOPS and runtime (ms).
pub fn parse_fio(text: &str) -> Option<(f64, f64)> {
    fio_rate(text, "read")
}

/// fio's JSON: the first job's read completion latencies (`clat_ns`), in µs.
pub fn parse_fio_latency(text: &str) -> Option<LatencySummary> {
    fio_latency(text, "read", "clat_ns")
}

/// sysbench's `--histogram` (values in ms, one line per bucket: `value |*** count`) and its
/// "Latency (ms)" avg and max: the events' latency percentiles, in µs (to the histogram's
/// bucket values).
pub fn parse_sysbench_latency(text: &str) -> Option<LatencySummary> {
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        if l.contains("Latency histogram") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        let Some((value, rest)) = l.split_once('|') else {
            if !buckets.is_empty() {
                break;
            }
            continue;
        };
        let (Ok(v), Some(Ok(n))) = (
            value.trim().parse::<f64>(),
            rest.split_whitespace().last().map(str::parse::<u64>),
        ) else {
            continue;
        };
        buckets.push((v * 1000.0, n));
    }
    let count: u64 = buckets.iter().map(|b| b.1).sum();
    if count == 0 {
        return None;
    }
    let at = |q: f64| {
        let want = (q * count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for &(v, n) in &buckets {
            seen += n;
            if seen >= want {
                return v;
            }
        }
        buckets[buckets.len() - 1].0
    };
    let summary = |name: &str| -> Option<f64> {
        let l = text.lines().find(|l| l.trim_start().starts_with(name))?;
        l.split(':')
            .nth(1)?
            .trim()
            .parse::<f64>()
            .ok()
            .map(|ms| ms * 1000.0)
    };
    Some(LatencySummary {
        count,
        mean_us: summary("avg:")?,
        p50_us: at(0.50),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: summary("max:")?,
    })
}

/// postmark's "N created", "N read", "N appended", "N deleted".
pub fn parse_postmark_counts(text: &str) -> Option<[u64; 4]> {
    let num = |what: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(what))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some([
        num("created")?,
        num("read")?,
        num("appended")?,
        num("deleted")?,
    ])
}

/// A postmark run as [`postmark_timed`] saw it.
struct PostmarkRun {
    text: String,
    start: Instant,
    /// When "Performing transactions" and "Deleting files" appeared.
    tx_start: Option<Instant>,
    tx_end: Option<Instant>,
    end: Instant,
}

/// Runs postmark with `conf`, reading its output as it comes: postmark flushes "Performing
/// transactions" right before its transaction phase and "Deleting files..." right after it,
/// so the time each appears is the phase's start and end by our clock.
fn postmark_timed(conf: &Path, dir: &Path) -> io::Result<PostmarkRun> {
    use std::io::Read;
    if crate::interrupted() {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
    }
    let start = Instant::now();
    let mut child = Command::new("postmark")
        .arg(conf)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| spawn_error("postmark", e))?;
    let mut out = child.stdout.take().expect("piped");
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    let (mut tx_start, mut tx_end) = (None, None);
    loop {
        let n = out.read(&mut buf)?;
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
        let now = Instant::now();
        let seen = |what: &[u8]| text.windows(what.len()).any(|w| w == what);
        if tx_start.is_none() && seen(b"Performing transactions") {
            tx_start = Some(now);
        }
        if tx_end.is_none() && seen(b"Deleting files") {
            tx_end = Some(now);
        }
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err)?;
    }
    let status = child.wait()?;
    let end = Instant::now();
    if !status.success() {
        return Err(io::Error::other(format!(
            "postmark failed ({status}): {}",
            err.trim()
        )));
    }
    Ok(PostmarkRun {
        text: String::from_utf8_lossy(&text).into_owned(),
        start,
        tx_start,
        tx_end,
        end,
    })
}

/// bonnie++ `-q` CSV (format 1.98, as `bon_csv2txt` reads it): block write, rewrite and block
/// read in KiB/s (fields 11, 13 and 17, counting from 0); `+++++` (too fast to measure) is
/// `None`.
pub fn parse_bonnie(text: &str) -> Option<[Option<f64>; 3]> {
    let line = text.lines().rev().find(|l| l.starts_with("1.98,"))?;
    let f: Vec<&str> = line.split(',').collect();
    let k = |i: usize| f.get(i).and_then(|s| s.trim().parse::<f64>().ok());
    f.get(17)?;
    Some([k(11), k(13), k(17)])
}

pub fn run(
    t: &dyn Target,
    cfg: &ToolConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<Outcome> {
    let prog = cfg.tool.program();
    let Some(dir) = t.dir() else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{prog} needs a mounted target (a directory), not the in-process engine"),
        ));
    };
    cfg.available()
        .map_err(|why| io::Error::new(io::ErrorKind::NotFound, why))?;
    let start = Instant::now();
    match cfg.tool {
        Tool::Postmark => {
            let work = dir.join("pm");
            std::fs::create_dir(&work)?;
            let conf =
                std::env::temp_dir().join(format!("moafs-postmark-{}.cfg", std::process::id()));
            std::fs::write(
                &conf,
                format!(
                    "set location {}\nset number {}\nset subdirectories 200\nset size 512 10240\n\
                     set read 4096\nset write 4096\nset buffering false\nset transactions {}\n\
                     set seed {}\nrun\nquit\n",
                    work.display(),
                    cfg.files,
                    cfg.transactions,
                    tool_seed(cfg.seed)
                ),
            )?;
            between()?;
            let ran = postmark_timed(&conf, dir);
            let _ = std::fs::remove_file(&conf);
            let PostmarkRun {
                text,
                start: p0,
                tx_start: tx0,
                tx_end: tx1,
                end: p1,
            } = ran?;
            std::fs::remove_dir_all(&work)?;
            let (own_secs, own_rate) =
                parse_postmark(&text).ok_or_else(|| unparsed(prog, "rate", &text))?;
            let [created, read, appended, deleted] =
                parse_postmark_counts(&text).ok_or_else(|| unparsed(prog, "counts", &text))?;
            let program_secs = (p1 - p0).as_secs_f64();
            // the transaction phase by our clock (sub-millisecond), else the whole program
            let (secs, timed) = match (tx0, tx1) {
                (Some(a), Some(b)) if b > a => ((b - a).as_secs_f64(), "transactions"),
                _ => (program_secs, "whole program"),
            };
            let tx = cfg.transactions as f64;
            let o = Outcome::new(tx, "transactions", secs, start)
                .count("creates", created)
                .count("reads", read)
                .count("appends", appended)
                .count("deletes", deleted);
            Ok(o.detail(serde_json::json!({
                "timed": timed,
                "program_secs": program_secs,
                "creation_secs": tx0.map(|a| (a - p0).as_secs_f64()),
                "transaction_secs": tx0.zip(tx1).map(|(a, b)| (b - a).as_secs_f64()),
                "deletion_secs": tx1.map(|b| (p1 - b).as_secs_f64()),
                "postmark_transaction_secs": own_secs,
                "postmark_rate": own_rate,
                "latency": "postmark reports none",
            })))
        }
        Tool::Sysbench => {
            let args = |mode: &str| {
                let mut c = Command::new(prog);
                c.args([
                    "fileio",
                    &format!("--file-num={}", cfg.files.max(1)),
                    &format!("--file-total-size={}", cfg.total),
                    &format!("--file-block-size={}", cfg.block),
                    "--file-test-mode=rndrd",
                    "--time=0",
                    &format!("--events={}", cfg.transactions),
                    &format!("--rand-seed={}", tool_seed(cfg.seed)),
                    "--histogram=on",
                    mode,
                ]);
                c
            };
            let free = {
                let st = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
                st.blocks_available() as u64 * st.fragment_size() as u64
            };
            if free < cfg.total + cfg.total / 64 {
                return Err(io::Error::other(format!(
                    "sysbench: its files need {} MiB and the target has {} MiB free: give it \
                     a larger image (--size {}G) or a smaller --scale",
                    cfg.total >> 20,
                    free >> 20,
                    (cfg.total >> 30) + 2
                )));
            }
            output(&mut args("prepare"), dir)?;
            // paper 001: the cache dropped after prepare, before the measured reads
            t.sync()?;
            let dropped = crate::hygiene::drop_caches();
            if let Err(e) = &dropped {
                eprintln!("warning: {e}: the page cache was not dropped before the reads");
            }
            t.drop_own_cache()?;
            between()?;
            let measured = Instant::now();
            let text = output(&mut args("run"), dir);
            let secs = measured.elapsed().as_secs_f64();
            let cleaned = output(&mut args("cleanup"), dir);
            let text = text?;
            cleaned?;
            let rate = parse_sysbench(&text).ok_or_else(|| unparsed(prog, "reads/s", &text))?;
            let mut o = Outcome::new(cfg.transactions as f64, "reads", secs, start)
                .count("reads", cfg.transactions as u64);
            o.rate = rate;
            if let Some(l) = parse_sysbench_latency(&text) {
                o.latency.insert("read".to_string(), l);
            }
            Ok(o.detail(serde_json::json!({
                "files": cfg.files,
                "total_bytes": cfg.total,
                "cache_dropped": dropped.is_ok(),
                "cache_not_dropped_because": dropped.err().map(|e| e.to_string()),
            })))
        }
        Tool::Fio => {
            let job = |extra: &[&str]| {
                let mut c = Command::new(prog);
                c.args([
                    "--name=randread",
                    "--directory=.",
                    "--rw=randread",
                    "--ioengine=psync",
                    &format!("--bs={}", cfg.block),
                    &format!("--size={}", cfg.total),
                    &format!("--number_ios={}", cfg.transactions),
                    &format!("--randseed={}", tool_seed(cfg.seed)),
                    // fio drops its files' pages before a run by default: leave the cache
                    // state to the harness, as for every other workload
                    "--invalidate=0",
                    "--output-format=json",
                ]);
                c.args(extra);
                c
            };
            output(&mut job(&["--create_only=1"]), dir)?;
            between()?;
            let measured = Instant::now();
            let text = output(&mut job(&[]), dir);
            let secs = measured.elapsed().as_secs_f64();
            remove_prefixed(dir, "randread.")?;
            let text = text?;
            let (iops, _) = parse_fio(&text).ok_or_else(|| unparsed(prog, "read IOPS", &text))?;
            let mut o = Outcome::new(cfg.transactions as f64, "reads", secs, start)
                .count("reads", cfg.transactions as u64);
            o.rate = iops;
            if let Some(l) = parse_fio_latency(&text) {
                o.latency.insert("read".to_string(), l);
            }
            Ok(o)
        }
        Tool::FioFsync => {
            let fio = || {
                let mut c = Command::new(prog);
                c.args(fio_fsync_args(cfg));
                c
            };
            output(fio().arg("--create_only=1"), dir)?;
            between()?;
            let measured = Instant::now();
            let text = output(&mut fio(), dir);
            let secs = measured.elapsed().as_secs_f64();
            remove_prefixed(dir, "fsyncw.")?;
            let text = text?;
            let (iops, _) =
                parse_fio_write(&text).ok_or_else(|| unparsed(prog, "write IOPS", &text))?;
            let writes = (cfg.transactions * cfg.files.max(1)) as u64;
            let mut o = Outcome::new(writes as f64, "writes", secs, start)
                .count("writes", writes)
                .count("fsyncs", writes);
            o.rate = iops;
            if let Some(l) = parse_fio_sync_latency(&text) {
                o.latency.insert("fsync".to_string(), l);
            }
            Ok(o.detail(serde_json::json!({ "jobs": cfg.files.max(1) })))
        }
        Tool::Untar => {
            let archive = linux_tarball()?;
            let members = if cfg.files == 0 {
                None
            } else {
                Some(first_members(&archive, cfg.files)?)
            };
            let work = dir.join("untar");
            let run = || -> io::Result<(f64, (u64, u64, u64))> {
                std::fs::create_dir(&work)?;
                between()?;
                let measured = Instant::now();
                let mut c = Command::new(prog);
                c.arg("-xf").arg(&archive).arg("-C").arg(&work);
                if let Some(list) = &members {
                    // each member once, and no reading past the last one
                    c.args(["--no-recursion", "--occurrence", "-T"]).arg(list);
                }
                output(&mut c, dir)?;
                // what a user waits for: the tree on the device
                t.sync()?;
                let secs = measured.elapsed().as_secs_f64();
                Ok((secs, count_tree(&work)?))
            };
            let ran = run();
            // the list and the tree go whatever happened (a next run makes them anew)
            if let Some(list) = &members {
                let _ = std::fs::remove_file(list);
            }
            let removed = match std::fs::remove_dir_all(&work) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
            let (secs, (files, dirs, bytes)) = ran?;
            removed?;
            let entries = files + dirs;
            let o = Outcome::new(entries as f64, "entries", secs, start)
                .count("files", files)
                .count("directories", dirs)
                .bytes(0, bytes);
            Ok(o.detail(serde_json::json!({
                "archive": archive.display().to_string(),
                "members": cfg.files,
                "timed": "tar -xf, then a sync of the target",
            })))
        }
        Tool::Bonnie => {
            let mib = (cfg.total >> 20).max(1);
            between()?;
            let measured = Instant::now();
            let text = output(
                Command::new(prog).args([
                    "-d",
                    ".",
                    "-s",
                    &format!("{mib}M"),
                    "-r",
                    &format!("{}", (mib / 2).max(1)),
                    "-n",
                    "0",
                    "-u",
                    "root",
                    "-q",
                    "-f",
                    &format!("-z{}", tool_seed(cfg.seed)),
                ]),
                dir,
            )?;
            let secs = measured.elapsed().as_secs_f64();
            let phases = parse_bonnie(&text).ok_or_else(|| unparsed(prog, "CSV line", &text))?;
            let rates: Vec<f64> = phases.iter().flatten().map(|k| k / 1024.0).collect();
            if rates.is_empty() {
                return Err(io::Error::other(format!(
                    "bonnie++: every phase took under 0.5 s (+++++): too fast to measure; \
                     use a larger --scale (the file is {mib} MiB)"
                )));
            }
            let mean = rates.iter().sum::<f64>() / rates.len() as f64;
            let mut o =
                Outcome::new(mean * secs, "MiB", secs, start).count("phases", rates.len() as u64);
            o.rate = mean;
            Ok(o.detail(serde_json::json!({
                "write_mib_per_sec": phases[0].map(|k| k / 1024.0),
                "rewrite_mib_per_sec": phases[1].map(|k| k / 1024.0),
                "read_mib_per_sec": phases[2].map(|k| k / 1024.0),
            })))
        }
    }
}

/// The seed a tool is given: the harness's 64-bit seed folded into 31 bits. The tools read
/// theirs as a signed number (fio refuses one above 2^63, PostMark and bonnie++ take an
/// `int`), and sysbench takes 0 as "seed from the clock", so never 0.
fn tool_seed(seed: u64) -> u64 {
    ((seed ^ (seed >> 32)) & 0x7fff_ffff).max(1)
}

/// fio's arguments for the measured run of [`Tool::FioFsync`].
fn fio_fsync_args(cfg: &ToolConfig) -> Vec<String> {
    vec![
        "--name=fsyncw".to_string(),
        "--directory=.".to_string(),
        "--rw=randwrite".to_string(),
        "--ioengine=psync".to_string(),
        "--fsync=1".to_string(),
        format!("--numjobs={}", cfg.files.max(1)),
        "--group_reporting".to_string(),
        format!("--bs={}", cfg.block),
        format!("--size={}", cfg.total),
        format!("--number_ios={}", cfg.transactions),
        format!("--randseed={}", tool_seed(cfg.seed)),
        "--invalidate=0".to_string(),
        "--output-format=json".to_string(),
    ]
}

/// Removes the files of `dir` whose names start with `prefix` (fio's job files).
fn remove_prefixed(dir: &Path, prefix: &str) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        {
            std::fs::remove_file(p)?;
        }
    }
    Ok(())
}

/// fio's JSON (group reporting): the write IOPS and runtime (ms) of all jobs.
pub fn parse_fio_write(text: &str) -> Option<(f64, f64)> {
    fio_rate(text, "write")
}

/// fio's JSON: the fsync latencies (`sync.lat_ns`), in µs.
pub fn parse_fio_sync_latency(text: &str) -> Option<LatencySummary> {
    fio_latency(text, "sync", "lat_ns")
}

/// The Linux source tree as an uncompressed tar (decompressing xz would cost every target the
/// same CPU and hide their differences): Debian's `/usr/src/linux-source-*.tar.xz`,
/// decompressed once into `$MOAFS_BENCH_CACHE` (default /var/tmp/moafs-bench-cache).
pub fn linux_tarball() -> io::Result<std::path::PathBuf> {
    let Some(xz) = linux_tarball_xz() else {
        return Err(io::Error::new(io::ErrorKind::NotFound, NO_LINUX_SOURCE));
    };
    let cache = std::env::var_os("MOAFS_BENCH_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/tmp/moafs-bench-cache".into());
    std::fs::create_dir_all(&cache)?;
    // named by the xz file's size and time too: Debian keeps the name across 6.1.x updates
    let m = std::fs::metadata(&xz)?;
    let mtime = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let stem = xz
        .file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let name = format!("{}-{}-{mtime}.tar", stem.trim_end_matches(".tar"), m.len());
    let tar = cache.join(&name);
    if tar.exists() {
        return Ok(tar);
    }
    // a part of this process's own: two runs starting at once each make theirs
    let part = cache.join(format!("{name}.part.{}", std::process::id()));
    let out = std::fs::File::create(&part)?;
    let st = Command::new("xz")
        .arg("-dc")
        .arg(&xz)
        .stdout(out)
        .status()
        .map_err(|e| spawn_error("xz", e))?;
    if !st.success() {
        let _ = std::fs::remove_file(&part);
        return Err(io::Error::other(format!("xz -dc {} failed", xz.display())));
    }
    std::fs::rename(&part, &tar)?;
    Ok(tar)
}

/// A file listing the first `n` members of `archive` (for `tar -T`).
fn first_members(archive: &Path, n: usize) -> io::Result<std::path::PathBuf> {
    let list = output(Command::new("tar").arg("-tf").arg(archive), Path::new("/"))?;
    let path = std::env::temp_dir().join(format!("moafs-untar-{}.list", std::process::id()));
    let mut text: String = list.lines().take(n).collect::<Vec<_>>().join("\n");
    text.push('\n');
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Files (and symlinks), directories and file bytes under `root`.
fn count_tree(root: &Path) -> io::Result<(u64, u64, u64)> {
    let (mut files, mut dirs, mut bytes) = (0u64, 0u64, 0u64);
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let m = e.metadata()?;
            if m.is_dir() {
                dirs += 1;
                stack.push(e.path());
            } else {
                files += 1;
                bytes += m.len();
            }
        }
    }
    Ok((files, dirs, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_fsync_output_gives_write_iops_and_fsync_latency() {
        // the shape of fio-3.33's JSON for `--fsync=1 --group_reporting` (trimmed)
        let text = r#"note: a line fio may print first
{"jobs": [{"jobname": "fsyncw",
  "write": {"iops": 5000.0, "runtime": 8},
  "sync": {"lat_ns": {"min": 181851, "max": 1288750, "mean": 331646.2, "N": 38,
    "percentile": {"50.000000": 268288, "99.000000": 1286144, "99.900000": 1286144}}}}]}"#;
        assert_eq!(parse_fio_write(text), Some((5000.0, 8.0)));
        let l = parse_fio_sync_latency(text).unwrap();
        assert_eq!(l.count, 38);
        assert!((l.p50_us - 268.288).abs() < 1e-9 && (l.max_us - 1288.75).abs() < 1e-9);
        assert_eq!(parse_fio_write("{}"), None);
        // a read job's output has no fsync latencies
        assert!(parse_fio_sync_latency(r#"{"jobs":[{"read":{}}]}"#).is_none());
    }

    #[test]
    fn tools_get_a_seed_they_can_parse() {
        // a repetition's seed uses all 64 bits (fio failed on randseed=10247000711120590919)
        for seed in [0, 1, 42, 1 << 31, 10247000711120590919, u64::MAX] {
            let s = tool_seed(seed);
            assert!((1..=i32::MAX as u64).contains(&s), "{seed} -> {s}");
        }
        assert_ne!(
            tool_seed(10247000711120590919),
            tool_seed(10247000711120590918)
        );
        let cfg = match crate::workload::named("tool-fio-fsync-8", 1.0, u64::MAX, 1.0) {
            Some(crate::workload::Spec::Tool(c)) => c,
            _ => panic!("tool-fio-fsync-8 is a tool workload"),
        };
        let seed_arg = fio_fsync_args(&cfg)
            .into_iter()
            .find(|a| a.starts_with("--randseed="))
            .unwrap();
        assert_eq!(seed_arg, format!("--randseed={}", tool_seed(u64::MAX)));
    }

    #[test]
    fn a_missing_tool_is_named_with_its_package() {
        assert_eq!(package_of("/sbin/mkfs.xfs"), "xfsprogs");
        assert_eq!(package_of("fusermount3"), "fuse3");
        assert_eq!(package_of("bonnie++"), "bonnie++");
        let e = output(&mut Command::new("moafs-no-such-tool-here"), Path::new("/")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(
            e.to_string()
                .contains("apt-get install moafs-no-such-tool-here"),
            "{e}"
        );
    }

    #[test]
    fn parses_the_tools_outputs() {
        let pm = "Time:\n\t73 seconds total\n\t71 seconds of transactions (2816 per second)\n";
        assert_eq!(parse_postmark(pm), Some((71.0, 2816.0)));
        assert_eq!(parse_postmark("nothing"), None);
        let sb =
            "File operations:\n    reads/s:                      61234.56\n    writes/s: 0.00\n";
        assert_eq!(parse_sysbench(sb), Some(61234.56));
        let fio = "note: both iodepth >= 1 and synchronous I/O engine are selected\n\
                   {\"jobs\": [{\"read\": {\"iops\": 1234.5, \"runtime\": 810}}]}";
        assert_eq!(parse_fio(fio), Some((1234.5, 810.0)));
        assert_eq!(parse_fio("{}"), None);
        // bonnie++ 2.00a -f output: per-char phases empty, seeks too fast (+++++)
        let bonnie = "1.98,2.00a,vm,1,42,1G,,8192,5,,,512000,50,256000,30,,,1024000,60,\
                      +++++,+++,,,,,,,,,,,,,,,,,,,83us,74us,,61us,9222us,,,,,,";
        let p = parse_bonnie(bonnie).unwrap();
        assert_eq!(p, [Some(512000.0), Some(256000.0), Some(1024000.0)]);
        let too_fast = "1.98,2.00a,vm,1,42,25M,,8192,5,,,+++++,+++,+++++,+++,,,+++++,+++,\
                        +++++,+++,,,,,,,,,,,,,,,,,,,83us,74us,,61us,9222us,,,,,,";
        assert_eq!(parse_bonnie(too_fast), Some([None, None, None]));
        assert_eq!(parse_bonnie("Using uid:0, gid:0."), None);
    }

    #[test]
    fn parses_the_tools_latencies_and_counts() {
        // sysbench 1.0.20 --histogram=on: 10 events, 8 at 2 µs, one at 5 µs, one at 40 µs
        let sb = "Latency histogram (values are in milliseconds)\n\
                  \x20      value  ------------- distribution ------------- count\n\
                  \x20      0.002 |****************************************  8\n\
                  \x20      0.005 |*****                                     1\n\
                  \x20      0.040 |*****                                     1\n\
                  \n\
                  Latency (ms):\n\
                  \x20        min:                                    0.00\n\
                  \x20        avg:                                    0.01\n\
                  \x20        max:                                    0.04\n";
        let l = parse_sysbench_latency(sb).unwrap();
        assert_eq!(l.count, 10);
        assert_eq!((l.p50_us, l.p99_us, l.max_us), (2.0, 40.0, 40.0));
        assert!((l.mean_us - 10.0).abs() < 1e-9);
        assert_eq!(parse_sysbench_latency("reads/s: 5"), None);
        let fio = r#"{"jobs": [{"read": {"iops": 10, "runtime": 1, "clat_ns": {"N": 1000,
            "mean": 25000.0, "max": 900000, "percentile": {"50.000000": 20480,
            "99.000000": 102400, "99.900000": 872448}}}}]}"#;
        let l = parse_fio_latency(fio).unwrap();
        assert_eq!(l.count, 1000);
        assert_eq!((l.mean_us, l.p50_us, l.p999_us), (25.0, 20.48, 872.448));
        let pm = "Files:\n\t698 created (698 per second)\n\t\tCreation alone: 200 files\n\
                  \t525 read (525 per second)\n\t475 appended (475 per second)\n\
                  \t698 deleted (698 per second)\n";
        assert_eq!(parse_postmark_counts(pm), Some([698, 525, 475, 698]));
    }
}
