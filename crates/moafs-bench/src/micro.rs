//! The small workloads: sysbench-fileio-style random reads, tiobench-style random small
//! writes, Bonnie-style sequential transfers, and the micro tests of paper 000.
//!
//! Each has a setup phase (not measured) and a measured phase; `between` runs in between
//! (the harness drops caches there for scenario A).

use crate::latency::Latencies;
use crate::outcome::Outcome;
use crate::target::{create_file, Fh, Mode, Target};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::time::Instant;

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

fn random_bytes(n: usize, rng: &mut StdRng) -> Vec<u8> {
    (0..n).map(|_| rng.gen()).collect()
}

/// sysbench fileio `rndrd` as paper 001 ran it: `files` files of `total / files` bytes are
/// written (prepare), written back and dropped from every cache (`sync`, the kernel's
/// `drop_caches` — root — and the file system's own cache), then `requests` reads of `block`
/// bytes at block-aligned offsets uniform over the total size, through handles opened once
/// (sysbench keeps its files open). Whether the cache was dropped is in the outcome's detail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RandReadConfig {
    pub files: usize,
    pub total: u64,
    pub block: usize,
    pub requests: usize,
    pub seed: u64,
}

impl RandReadConfig {
    /// Paper 001: 128 files, 4 GiB in all, 1,000 requests of `block` bytes.
    pub fn paper(block: usize, seed: u64) -> RandReadConfig {
        RandReadConfig {
            files: 128,
            total: 4 << 30,
            block,
            requests: 1000,
            seed,
        }
    }
}

/// Bytes free for an unprivileged writer in `dir`.
fn free_bytes(dir: &std::path::Path) -> io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
    Ok(st.blocks_available() as u64 * st.fragment_size() as u64)
}

fn too_small(need: u64, have: Option<u64>) -> io::Error {
    let have = match have {
        Some(h) => format!("has {} MiB free", h >> 20),
        None => "ran out of space".to_string(),
    };
    io::Error::other(format!(
        "rndrd: its files need {} MiB and the target {have}: give the target a larger image \
         (--size {}G) or a smaller --scale",
        need >> 20,
        (need >> 30) + 2
    ))
}

/// `sync`, then the kernel's caches (for a target with a directory; needs root) and the
/// target's own. Returns whether everything was dropped, and why not.
fn drop_all_caches(t: &dyn Target) -> io::Result<(bool, Option<String>)> {
    t.sync()?;
    let mut why = None;
    if t.dir().is_some() {
        if let Err(e) = crate::hygiene::drop_caches() {
            eprintln!("warning: {e}: the page cache was not dropped before the measured reads");
            why = Some(e.to_string());
        }
    }
    t.drop_own_cache()?;
    Ok((why.is_none(), why))
}

pub fn rand_read(
    t: &dyn Target,
    cfg: &RandReadConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<Outcome> {
    let per = cfg.total / cfg.files.max(1) as u64;
    if cfg.files == 0 || cfg.block == 0 || per < cfg.block as u64 {
        return Err(invalid(
            "rndrd: need files > 0 and files of at least one block",
        ));
    }
    let need = per * cfg.files as u64;
    if let Some(dir) = t.dir() {
        let free = free_bytes(dir)?;
        // room for the data and a little metadata
        if free < need + need / 64 {
            return Err(too_small(need, Some(free)));
        }
    }
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let chunk = random_bytes(1 << 20, &mut rng);
    let nospace = |e: io::Error| {
        if e.raw_os_error() == Some(nix::libc::ENOSPC) {
            too_small(need, None)
        } else {
            e
        }
    };
    t.mkdir("rr")?;
    for f in 0..cfg.files {
        let fh = t.open(&format!("rr/test_file.{f}"), Mode::Create)?;
        let mut off = 0;
        while off < per {
            let n = (per - off).min(chunk.len() as u64) as usize;
            t.write_at(&fh, off, &chunk[..n]).map_err(nospace)?;
            off += n as u64;
        }
        t.close(fh).map_err(nospace)?;
    }
    let (dropped, why) = drop_all_caches(t).map_err(nospace)?;
    between()?;
    let handles: Vec<Fh> = (0..cfg.files)
        .map(|f| t.open(&format!("rr/test_file.{f}"), Mode::Read))
        .collect::<io::Result<_>>()?;
    let blocks_per_file = per / cfg.block as u64;
    let mut buf = vec![0u8; cfg.block];
    let mut read = 0u64;
    let mut lat = Latencies::new();
    let measured = Instant::now();
    for _ in 0..cfg.requests {
        let f = rng.gen_range(0..cfg.files);
        let b = rng.gen_range(0..blocks_per_file);
        let t0 = Instant::now();
        read += t.read_at(&handles[f], b * cfg.block as u64, &mut buf)? as u64;
        lat.record("read", t0.elapsed());
    }
    let secs = measured.elapsed().as_secs_f64();
    for h in handles {
        t.close(h)?;
    }
    Ok(Outcome::new(cfg.requests as f64, "reads", secs, start)
        .count("prepare_files", cfg.files as u64)
        .count("reads", cfg.requests as u64)
        .bytes(read, need)
        .latency(&lat)
        .detail(serde_json::json!({
            "files": cfg.files,
            "file_bytes": per,
            "cache_dropped": dropped,
            "cache_not_dropped_because": why,
        })))
}

/// tiotest's random write phase: each of `threads` files of `file_size` is written
/// sequentially (setup), then `writes` writes of `io` bytes each at random `io`-aligned
/// offsets, one thread per file, no fsync (paper 003's 128 B and 1.5 KB updates).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SmallWritesConfig {
    pub threads: usize,
    pub file_size: u64,
    pub io: usize,
    /// Writes per thread.
    pub writes: usize,
    /// fsync the file after every write (group commit's workload).
    pub fsync: bool,
    /// Each write appends to the file (a log's writer) instead of overwriting at random.
    pub append: bool,
    pub seed: u64,
}

pub fn small_writes(
    t: &dyn Target,
    cfg: &SmallWritesConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<Outcome> {
    if cfg.threads == 0 || cfg.io == 0 || cfg.file_size < cfg.io as u64 {
        return Err(invalid(
            "small writes: need threads > 0 and files of at least one write",
        ));
    }
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let data = random_bytes(cfg.file_size as usize, &mut rng);
    t.mkdir("tio")?;
    for k in 0..cfg.threads {
        create_file(t, &format!("tio/file.{k}"), &data, 1 << 20)?;
    }
    between()?;
    let measured = Instant::now();
    let results: Vec<io::Result<Latencies>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cfg.threads)
            .map(|k| {
                let data = &data;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(cfg.seed ^ (k as u64 + 1) << 32);
                    let mut lat = Latencies::new();
                    let fh = t.open(&format!("tio/file.{k}"), Mode::ReadWrite)?;
                    let slots = cfg.file_size / cfg.io as u64;
                    for i in 0..cfg.writes {
                        let at = if cfg.append {
                            cfg.file_size + (i * cfg.io) as u64
                        } else {
                            rng.gen_range(0..slots) * cfg.io as u64
                        };
                        let from = rng.gen_range(0..=data.len() - cfg.io);
                        let t0 = Instant::now();
                        t.write_at(&fh, at, &data[from..from + cfg.io])?;
                        lat.record("write", t0.elapsed());
                        if cfg.fsync {
                            let t0 = Instant::now();
                            t.fsync(&fh)?;
                            lat.record("fsync", t0.elapsed());
                        }
                    }
                    t.close(fh)?;
                    Ok(lat)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("thread panicked")))
            })
            .collect()
    });
    let secs = measured.elapsed().as_secs_f64();
    let mut lat = Latencies::new();
    for l in results {
        lat.merge(&l?);
    }
    let n = (cfg.threads * cfg.writes) as u64;
    Ok(Outcome::new(n as f64, "writes", secs, start)
        .count("files", cfg.threads as u64)
        .count("writes", n)
        .bytes(0, n * cfg.io as u64 + cfg.file_size * cfg.threads as u64)
        .latency(&lat))
}

/// Bonnie++'s block phases: write a `size`-byte file in `block` writes, rewrite it (read a
/// block, write it back), read it (block reads). The headline is MiB moved per second over
/// the three phases; each phase's MiB/s is in the detail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BonnieConfig {
    pub size: u64,
    pub block: usize,
    pub seed: u64,
}

pub fn bonnie(
    t: &dyn Target,
    cfg: &BonnieConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<Outcome> {
    if cfg.block == 0 || cfg.size < cfg.block as u64 {
        return Err(invalid("bonnie: need a file of at least one block"));
    }
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let block = random_bytes(cfg.block, &mut rng);
    let blocks = cfg.size / cfg.block as u64;
    let bytes = blocks * cfg.block as u64;
    let mib = bytes as f64 / f64::from(1 << 20);
    let mut phase = BTreeMap::new();
    let mut lat = Latencies::new();
    between()?;
    let measured = Instant::now();
    // sequential output, block: write, then fsync so the data is on the device
    let t0 = Instant::now();
    let fh = t.open("bonnie.dat", Mode::Create)?;
    for b in 0..blocks {
        lat.time("write", || t.write_at(&fh, b * cfg.block as u64, &block))?;
    }
    lat.time("fsync", || t.fsync(&fh))?;
    t.close(fh)?;
    phase.insert("write_mib_per_sec", mib / t0.elapsed().as_secs_f64());
    // rewrite: read each block and write it back in place
    let t0 = Instant::now();
    let fh = t.open("bonnie.dat", Mode::ReadWrite)?;
    let mut buf = vec![0u8; cfg.block];
    for b in 0..blocks {
        let off = b * cfg.block as u64;
        lat.time("rewrite_read", || t.read_at(&fh, off, &mut buf))?;
        buf[0] ^= 1;
        lat.time("rewrite_write", || t.write_at(&fh, off, &buf))?;
    }
    lat.time("fsync", || t.fsync(&fh))?;
    t.close(fh)?;
    phase.insert("rewrite_mib_per_sec", mib / t0.elapsed().as_secs_f64());
    // sequential input, block
    let t0 = Instant::now();
    let fh = t.open("bonnie.dat", Mode::Read)?;
    let mut read = 0u64;
    loop {
        match lat.time("read", || t.read_at(&fh, read, &mut buf))? {
            0 => break,
            n => read += n as u64,
        }
    }
    t.close(fh)?;
    phase.insert("read_mib_per_sec", mib / t0.elapsed().as_secs_f64());
    let secs = measured.elapsed().as_secs_f64();
    t.remove("bonnie.dat")?;
    Ok(Outcome::new(mib * 4.0, "MiB", secs, start)
        .count("block_writes", 2 * blocks)
        .count("block_reads", 2 * blocks)
        .count("fsyncs", 2)
        .bytes(read + bytes, 2 * bytes)
        .latency(&lat)
        .detail(serde_json::to_value(phase).unwrap_or_default()))
}

/// Paper 000's micro tests (§5.2): `dirs` directories of `per_dir` files of `file_size`
/// bytes (one block).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MicroConfig {
    pub test: MicroTest,
    pub dirs: usize,
    pub per_dir: usize,
    pub file_size: usize,
    /// Large-file test: files of this size (`dirs` × `per_dir` ignored; `large_files` used).
    pub large_size: u64,
    pub large_files: usize,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MicroTest {
    /// Directory by directory, file by file, then sync (Fig. 11).
    SeqWrite,
    /// Each file into a random directory, then sync (Fig. 12).
    RandWrite,
    /// After a sequential write (setup), read every directory's files in order (Fig. 13).
    DirRead,
    /// Write large files, sync, read them back (Fig. 14).
    Large,
}

pub fn micro(
    t: &dyn Target,
    cfg: &MicroConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<Outcome> {
    if cfg.dirs == 0 || cfg.per_dir == 0 || cfg.file_size == 0 {
        return Err(invalid("micro: need dirs, files and a file size"));
    }
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let path = |d: usize, f: usize| format!("m{d}/f{f}");
    let n = (cfg.dirs * cfg.per_dir) as u64;
    match cfg.test {
        MicroTest::SeqWrite | MicroTest::RandWrite | MicroTest::DirRead => {
            let data = random_bytes(cfg.file_size, &mut rng);
            for d in 0..cfg.dirs {
                t.mkdir(&format!("m{d}"))?;
            }
            let order: Vec<(usize, usize)> = if cfg.test == MicroTest::RandWrite {
                let mut next = vec![0usize; cfg.dirs];
                (0..n)
                    .map(|_| {
                        let d = rng.gen_range(0..cfg.dirs);
                        next[d] += 1;
                        (d, next[d] - 1)
                    })
                    .collect()
            } else {
                (0..cfg.dirs)
                    .flat_map(|d| (0..cfg.per_dir).map(move |f| (d, f)))
                    .collect()
            };
            if cfg.test == MicroTest::DirRead {
                for &(d, f) in &order {
                    create_file(t, &path(d, f), &data, cfg.file_size)?;
                }
                t.sync()?;
                between()?;
                let mut lat = Latencies::new();
                let measured = Instant::now();
                let mut read = 0;
                for &(d, f) in &order {
                    read += lat.time("read_file", || {
                        crate::target::read_file(t, &path(d, f), cfg.file_size)
                    })?;
                }
                let secs = measured.elapsed().as_secs_f64();
                return Ok(Outcome::new(n as f64, "files", secs, start)
                    .count("creates", n)
                    .count("reads", n)
                    .bytes(read, n * cfg.file_size as u64)
                    .latency(&lat));
            }
            between()?;
            let mut lat = Latencies::new();
            let measured = Instant::now();
            for &(d, f) in &order {
                lat.time("create_file", || {
                    create_file(t, &path(d, f), &data, cfg.file_size)
                })?;
            }
            lat.time("sync", || t.sync())?;
            let secs = measured.elapsed().as_secs_f64();
            Ok(Outcome::new(n as f64, "files", secs, start)
                .count("creates", n)
                .count("syncs", 1)
                .bytes(0, n * cfg.file_size as u64)
                .latency(&lat))
        }
        MicroTest::Large => {
            let block = 1 << 20;
            let data = random_bytes(block, &mut rng);
            between()?;
            let mut lat = Latencies::new();
            let measured = Instant::now();
            let mut written = 0;
            for k in 0..cfg.large_files {
                // as create_repeated: 1 MiB writes, the last one shorter
                let fh = t.open(&format!("large.{k}"), Mode::Create)?;
                let mut off = 0;
                while off < cfg.large_size {
                    let len = (cfg.large_size - off).min(block as u64) as usize;
                    lat.time("write", || t.write_at(&fh, off, &data[..len]))?;
                    off += len as u64;
                }
                t.close(fh)?;
                written += off;
            }
            lat.time("sync", || t.sync())?;
            let mut read = 0;
            let mut buf = vec![0u8; block];
            for k in 0..cfg.large_files {
                let fh = t.open(&format!("large.{k}"), Mode::Read)?;
                let mut off = 0u64;
                loop {
                    match lat.time("read", || t.read_at(&fh, off, &mut buf))? {
                        0 => break,
                        n => off += n as u64,
                    }
                }
                t.close(fh)?;
                read += off;
            }
            let secs = measured.elapsed().as_secs_f64();
            let mib = (written + read) as f64 / f64::from(1 << 20);
            Ok(Outcome::new(mib, "MiB", secs, start)
                .count("files", cfg.large_files as u64)
                .count("syncs", 1)
                .bytes(read, written)
                .latency(&lat))
        }
    }
}
