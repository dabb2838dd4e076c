//! PostMark, natively and seeded (WORKLOADS.md "PostMark"; Katcher 1997, postmark 1.53):
//! create `files` files of uniform sizes in [low, high] over `subdirs` random subdirectories;
//! then `transactions` pairs of (read the whole file | append) and (create | delete), each
//! chosen with the biases (out of 10) on a random existing file; then delete everything.
//! No fsync. Our reading of "append": a uniform length in [1, high] written at the end of the
//! file, in `write_block` pieces (R-FSL: a length drawn from the real size distribution).

use crate::target::{append_file, create_file, read_file, Target};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::io;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostmarkConfig {
    pub files: usize,
    pub subdirs: usize,
    pub size_low: usize,
    pub size_high: usize,
    pub transactions: usize,
    pub read_block: usize,
    pub write_block: usize,
    /// Out of 10: reads (the rest appends).
    pub read_bias: u32,
    /// Out of 10: creates (the rest deletes).
    pub create_bias: u32,
    /// File sizes: `uniform` in [size_low, size_high] (PostMark's own), or `real` — the
    /// distribution of paper 000's R-FSL (see [`real_size`]).
    pub sizes: Sizes,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sizes {
    Uniform,
    Real,
}

/// Cumulative share of files up to each size: paper 000's R-FSL distribution, anchored on the
/// two points the paper gives (79 % of files ≤ 8 KB, 80 % ≤ 10 KB) with the shape of the
/// file-size survey it cites (Tanenbaum et al. 2006) around them, capped at 1 MiB. Sizes are
/// uniform within a step.
pub const REAL_SIZES: &[(usize, f64)] = &[
    (512, 0.24),
    (1 << 10, 0.32),
    (2 << 10, 0.45),
    (4 << 10, 0.60),
    (8 << 10, 0.79),
    (10 << 10, 0.80),
    (16 << 10, 0.85),
    (32 << 10, 0.91),
    (64 << 10, 0.95),
    (128 << 10, 0.98),
    (256 << 10, 0.995),
    (1 << 20, 1.0),
];

/// A size drawn from [`REAL_SIZES`].
pub fn real_size(rng: &mut StdRng) -> usize {
    let u: f64 = rng.gen();
    let mut low = 1usize;
    for &(high, cum) in REAL_SIZES {
        if u < cum {
            return rng.gen_range(low..=high);
        }
        low = high + 1;
    }
    REAL_SIZES[REAL_SIZES.len() - 1].0
}

impl PostmarkConfig {
    /// The FSL configuration: 20,000 files, 200 subdirectories, 512 B – 10 KiB, 4 KiB blocks,
    /// 200,000 transactions, seed 42.
    pub fn fsl() -> PostmarkConfig {
        PostmarkConfig {
            files: 20_000,
            subdirs: 200,
            size_low: 512,
            size_high: 10 * 1024,
            transactions: 200_000,
            read_block: 4096,
            write_block: 4096,
            read_bias: 5,
            create_bias: 5,
            sizes: Sizes::Uniform,
            seed: 42,
        }
    }

    /// Paper 000's R-FSL: 25,000 files, 200 subdirectories, the real size distribution
    /// ([`REAL_SIZES`]), 50,000 transactions.
    pub fn rfsl() -> PostmarkConfig {
        PostmarkConfig {
            files: 25_000,
            transactions: 50_000,
            size_low: 1,
            size_high: REAL_SIZES[REAL_SIZES.len() - 1].0,
            sizes: Sizes::Real,
            ..PostmarkConfig::fsl()
        }
    }

    /// Files and transactions multiplied by `f` (at least 1 each); sizes unchanged.
    pub fn scaled(mut self, f: f64) -> PostmarkConfig {
        let scale = |n: usize| ((n as f64 * f).round() as usize).max(1);
        self.files = scale(self.files);
        self.transactions = scale(self.transactions);
        self
    }
}

/// What a run did, counted as it went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PostmarkCounts {
    pub created_initial: u64,
    pub reads: u64,
    pub appends: u64,
    pub creates: u64,
    pub deletes: u64,
    /// Transactions whose read/append or delete found no file.
    pub skipped: u64,
    pub deleted_final: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PostmarkResult {
    pub counts: PostmarkCounts,
    pub creation_secs: f64,
    pub transaction_secs: f64,
    pub deletion_secs: f64,
    pub total_secs: f64,
    /// Transactions per second of the transaction phase.
    pub transactions_per_sec: f64,
}

pub fn run(target: &dyn Target, cfg: &PostmarkConfig) -> io::Result<PostmarkResult> {
    if cfg.size_low > cfg.size_high || cfg.size_high == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "postmark: need 0 < size_high and size_low <= size_high",
        ));
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let data: Vec<u8> = (0..cfg.size_high).map(|_| rng.gen()).collect();
    let mut c = PostmarkCounts::default();
    let mut live: Vec<String> = Vec::with_capacity(cfg.files);
    let mut next_id = 0u64;
    let start = Instant::now();

    for d in 0..cfg.subdirs {
        target.mkdir(&format!("s{d}"))?;
    }
    let mut new_path = |rng: &mut StdRng| {
        next_id += 1;
        if cfg.subdirs == 0 {
            format!("f{next_id}")
        } else {
            format!("s{}/f{next_id}", rng.gen_range(0..cfg.subdirs))
        }
    };
    let size = |rng: &mut StdRng| match cfg.sizes {
        Sizes::Uniform => rng.gen_range(cfg.size_low..=cfg.size_high),
        Sizes::Real => real_size(rng).min(cfg.size_high),
    };
    for _ in 0..cfg.files {
        let path = new_path(&mut rng);
        let len = size(&mut rng);
        create_file(target, &path, &data[..len], cfg.write_block)?;
        c.created_initial += 1;
        c.bytes_written += len as u64;
        live.push(path);
    }
    let created = Instant::now();

    for _ in 0..cfg.transactions {
        if live.is_empty() {
            c.skipped += 1;
        } else {
            let i = rng.gen_range(0..live.len());
            if rng.gen_range(0..10) < cfg.read_bias {
                c.bytes_read += read_file(target, &live[i], cfg.read_block)?;
                c.reads += 1;
            } else {
                // FSL: uniform in [1, high]; R-FSL: from the same real distribution as the
                // files (uniform up to 1 MiB would append ~12 GiB per run)
                let len = match cfg.sizes {
                    Sizes::Uniform => rng.gen_range(1..=cfg.size_high),
                    Sizes::Real => real_size(&mut rng).min(cfg.size_high),
                };
                append_file(target, &live[i], &data[..len], cfg.write_block)?;
                c.bytes_written += len as u64;
                c.appends += 1;
            }
        }
        if rng.gen_range(0..10) < cfg.create_bias {
            let path = new_path(&mut rng);
            let len = size(&mut rng);
            create_file(target, &path, &data[..len], cfg.write_block)?;
            c.bytes_written += len as u64;
            c.creates += 1;
            live.push(path);
        } else if live.is_empty() {
            c.skipped += 1;
        } else {
            let i = rng.gen_range(0..live.len());
            let path = live.swap_remove(i);
            target.remove(&path)?;
            c.deletes += 1;
        }
    }
    let transacted = Instant::now();

    for path in live.drain(..) {
        target.remove(&path)?;
        c.deleted_final += 1;
    }
    for d in 0..cfg.subdirs {
        target.rmdir(&format!("s{d}"))?;
    }
    let end = Instant::now();
    let tx_secs = (transacted - created).as_secs_f64();
    Ok(PostmarkResult {
        counts: c,
        creation_secs: (created - start).as_secs_f64(),
        transaction_secs: tx_secs,
        deletion_secs: (end - transacted).as_secs_f64(),
        total_secs: (end - start).as_secs_f64(),
        transactions_per_sec: if tx_secs > 0.0 {
            cfg.transactions as f64 / tx_secs
        } else {
            0.0
        },
    })
}
