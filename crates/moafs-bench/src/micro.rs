//! The small workloads: sysbench-fileio-style random reads, tiobench-style random small
//! writes, Bonnie-style sequential transfers, and the micro tests of paper 000.
//!
//! Each has a setup phase (not measured) and a measured phase; `between` runs in between
//! (the harness drops caches there for scenario A).

use crate::target::{create_file, create_repeated, Fh, Mode, Target};
use crate::workload::Outcome;
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

/// sysbench fileio `rndrd`: `files` files of `total / files` bytes are written (prepare), then
/// `requests` reads of `block` bytes at block-aligned offsets uniform over the total size,
/// through handles opened once (sysbench keeps its files open).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RandReadConfig {
    pub files: usize,
    pub total: u64,
    pub block: usize,
    pub requests: usize,
    pub seed: u64,
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
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let chunk = random_bytes(1 << 20, &mut rng);
    t.mkdir("rr")?;
    for f in 0..cfg.files {
        let fh = t.open(&format!("rr/test_file.{f}"), Mode::Create)?;
        let mut off = 0;
        while off < per {
            let n = (per - off).min(chunk.len() as u64) as usize;
            t.write_at(&fh, off, &chunk[..n])?;
            off += n as u64;
        }
        t.close(fh)?;
    }
    between()?;
    let handles: Vec<Fh> = (0..cfg.files)
        .map(|f| t.open(&format!("rr/test_file.{f}"), Mode::Read))
        .collect::<io::Result<_>>()?;
    let blocks_per_file = per / cfg.block as u64;
    let mut buf = vec![0u8; cfg.block];
    let mut read = 0u64;
    let measured = Instant::now();
    for _ in 0..cfg.requests {
        let f = rng.gen_range(0..cfg.files);
        let b = rng.gen_range(0..blocks_per_file);
        read += t.read_at(&handles[f], b * cfg.block as u64, &mut buf)? as u64;
    }
    let secs = measured.elapsed().as_secs_f64();
    for h in handles {
        t.close(h)?;
    }
    Ok(Outcome::new(cfg.requests as f64, "reads", secs, start)
        .count("prepare_files", cfg.files as u64)
        .count("reads", cfg.requests as u64)
        .bytes(read, per * cfg.files as u64))
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
    let results: Vec<io::Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cfg.threads)
            .map(|k| {
                let data = &data;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(cfg.seed ^ (k as u64 + 1) << 32);
                    let fh = t.open(&format!("tio/file.{k}"), Mode::ReadWrite)?;
                    let slots = cfg.file_size / cfg.io as u64;
                    for _ in 0..cfg.writes {
                        let at = rng.gen_range(0..slots) * cfg.io as u64;
                        let from = rng.gen_range(0..=data.len() - cfg.io);
                        t.write_at(&fh, at, &data[from..from + cfg.io])?;
                        if cfg.fsync {
                            t.fsync(&fh)?;
                        }
                    }
                    t.close(fh)
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
    results.into_iter().collect::<io::Result<Vec<()>>>()?;
    let n = (cfg.threads * cfg.writes) as u64;
    Ok(Outcome::new(n as f64, "writes", secs, start)
        .count("files", cfg.threads as u64)
        .count("writes", n)
        .bytes(0, n * cfg.io as u64 + cfg.file_size * cfg.threads as u64))
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
    between()?;
    let measured = Instant::now();
    // sequential output, block: write, then fsync so the data is on the device
    let t0 = Instant::now();
    let fh = t.open("bonnie.dat", Mode::Create)?;
    for b in 0..blocks {
        t.write_at(&fh, b * cfg.block as u64, &block)?;
    }
    t.fsync(&fh)?;
    t.close(fh)?;
    phase.insert("write_mib_per_sec", mib / t0.elapsed().as_secs_f64());
    // rewrite: read each block and write it back in place
    let t0 = Instant::now();
    let fh = t.open("bonnie.dat", Mode::ReadWrite)?;
    let mut buf = vec![0u8; cfg.block];
    for b in 0..blocks {
        let off = b * cfg.block as u64;
        t.read_at(&fh, off, &mut buf)?;
        buf[0] ^= 1;
        t.write_at(&fh, off, &buf)?;
    }
    t.fsync(&fh)?;
    t.close(fh)?;
    phase.insert("rewrite_mib_per_sec", mib / t0.elapsed().as_secs_f64());
    // sequential input, block
    let t0 = Instant::now();
    let fh = t.open("bonnie.dat", Mode::Read)?;
    let read = crate::target::read_whole(t, &fh, &mut buf)?;
    t.close(fh)?;
    phase.insert("read_mib_per_sec", mib / t0.elapsed().as_secs_f64());
    let secs = measured.elapsed().as_secs_f64();
    t.remove("bonnie.dat")?;
    Ok(Outcome::new(mib * 4.0, "MiB", secs, start)
        .count("block_writes", 2 * blocks)
        .count("block_reads", 2 * blocks)
        .count("fsyncs", 2)
        .bytes(read + bytes, 2 * bytes)
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
                let measured = Instant::now();
                let mut read = 0;
                for &(d, f) in &order {
                    read += crate::target::read_file(t, &path(d, f), cfg.file_size)?;
                }
                let secs = measured.elapsed().as_secs_f64();
                return Ok(Outcome::new(n as f64, "files", secs, start)
                    .count("creates", n)
                    .count("reads", n)
                    .bytes(read, n * cfg.file_size as u64));
            }
            between()?;
            let measured = Instant::now();
            for &(d, f) in &order {
                create_file(t, &path(d, f), &data, cfg.file_size)?;
            }
            t.sync()?;
            let secs = measured.elapsed().as_secs_f64();
            Ok(Outcome::new(n as f64, "files", secs, start)
                .count("creates", n)
                .count("syncs", 1)
                .bytes(0, n * cfg.file_size as u64))
        }
        MicroTest::Large => {
            let block = 1 << 20;
            let data = random_bytes(block, &mut rng);
            between()?;
            let measured = Instant::now();
            let mut written = 0;
            for k in 0..cfg.large_files {
                written += create_repeated(t, &format!("large.{k}"), &data, cfg.large_size)?;
            }
            t.sync()?;
            let mut read = 0;
            for k in 0..cfg.large_files {
                read += crate::target::read_file(t, &format!("large.{k}"), block)?;
            }
            let secs = measured.elapsed().as_secs_f64();
            let mib = (written + read) as f64 / f64::from(1 << 20);
            Ok(Outcome::new(mib, "MiB", secs, start)
                .count("files", cfg.large_files as u64)
                .count("syncs", 1)
                .bytes(read, written))
        }
    }
}
