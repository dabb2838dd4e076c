//! Seeded aging of a file system in the Smith & Seltzer manner (WORKLOADS.md "Aging"): a long
//! create / grow / delete history replayed on the engine until the file system is as full as
//! asked and its layout score has fallen to the target.
//!
//! Files grow in turns — several files of a directory are written a few blocks at a time,
//! with a commit every few steps — so that delayed allocation cannot keep each file in one
//! run; deletions free holes of many sizes that later files fill. Everything depends on the
//! seed only: the same seed on the same empty image gives the same aged image.

use moafs_core::fs::{Caller, ROOT_INO};
use moafs_core::fsck::{layout, Layout};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::io;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgingConfig {
    /// Fraction of the data blocks in use to reach (0 … 0.95).
    pub utilisation: f64,
    /// Layout score to reach (at most; 1 = no aging of the layout).
    pub layout: f64,
    /// Directories the files live in.
    pub dirs: usize,
    /// Files growing at the same time.
    pub growing: usize,
    /// Steps (a write or a delete) at most, then stop where it got.
    pub max_steps: u64,
    pub seed: u64,
}

impl Default for AgingConfig {
    fn default() -> Self {
        AgingConfig {
            utilisation: 0.5,
            layout: 0.8,
            dirs: 50,
            growing: 8,
            max_steps: 2_000_000,
            seed: 42,
        }
    }
}

/// Where aging got.
#[derive(Debug, Clone, Serialize)]
pub struct AgingResult {
    pub steps: u64,
    pub files: u64,
    pub files_deleted: u64,
    pub utilisation: f64,
    pub layout: Layout,
    /// Both targets met (else `max_steps` ran out first).
    pub reached: bool,
}

const ROOT: Caller = Caller::ROOT;

fn err(e: moafs_core::FsError) -> io::Error {
    io::Error::from_raw_os_error(e.to_errno())
}

/// A file being written: its inode and the blocks it still gets.
struct Growing {
    ino: u64,
    written: u64,
    left: u64,
}

/// Ages the file system `fs` mounted on `dev`; the layout score is read from `dev` after a
/// sync (the image is exact after every commit). Utilisation is the share of the space that
/// was free at the start now in use.
pub fn age(
    fs: &Fs,
    dev: &dyn moafs_core::device::BlockDevice,
    cfg: &AgingConfig,
) -> io::Result<AgingResult> {
    if !(0.0..=0.95).contains(&cfg.utilisation) || !(0.0..=1.0).contains(&cfg.layout) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "aging: utilisation must be in 0..0.95 and layout in 0..1",
        ));
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let bs = u64::from(fs.statfs().block_size);
    // utilisation: the share of the space free at the start (the data area) now in use
    let free0 = fs.statfs().free_blocks;
    let used = |fs: &Fs| {
        let free = fs.statfs().free_blocks;
        free0.saturating_sub(free) as f64 / free0.max(1) as f64
    };
    let mut dirs = Vec::with_capacity(cfg.dirs.max(1));
    // a fresh top directory (`aged`, `aged.1` … on an image aged before)
    let mut top = None;
    for k in 0..1000 {
        let name = if k == 0 {
            "aged".to_string()
        } else {
            format!("aged.{k}")
        };
        match fs.mkdir(ROOT_INO, name.as_bytes(), 0o755, ROOT) {
            Ok(a) => {
                top = Some(a.ino);
                break;
            }
            Err(moafs_core::FsError::Exists) => continue,
            Err(e) => return Err(err(e)),
        }
    }
    let top = top.ok_or_else(|| io::Error::other("aging: no free name for its directory"))?;
    for d in 0..cfg.dirs.max(1) {
        dirs.push(
            fs.mkdir(top, format!("d{d}").as_bytes(), 0o755, ROOT)
                .map_err(err)?
                .ino,
        );
    }
    let block: Vec<u8> = (0..bs).map(|_| rng.gen()).collect();
    let mut files: Vec<(u64, Vec<u8>)> = Vec::new(); // (dir inode, name) of finished files
    let mut growing: Vec<Growing> = Vec::new();
    let (mut steps, mut made, mut deleted) = (0u64, 0u64, 0u64);
    let mut score = 1.0f64;
    let mut next_measure = 2_000u64;
    while steps < cfg.max_steps {
        steps += 1;
        let util = used(fs);
        let full = util >= cfg.utilisation;
        if full && score <= cfg.layout {
            if growing.is_empty() {
                break;
            }
            // Release the files still growing first: one a churn unlinked while it grew is
            // freed now, and the image may fall back under the target (then aging goes on).
            for g in growing.drain(..) {
                fs.release(g.ino).map_err(err)?;
            }
            fs.sync().map_err(err)?;
            continue;
        }
        // at the target utilisation: churn (delete one, so the next writes fill holes)
        if full && !files.is_empty() && rng.gen_bool(0.5) {
            let (dir, name) = files.swap_remove(rng.gen_range(0..files.len()));
            fs.unlink(dir, &name).map_err(|e| {
                io::Error::other(format!(
                    "unlink {dir}/{:?}: {e}",
                    String::from_utf8_lossy(&name)
                ))
            })?;
            deleted += 1;
        } else {
            if growing.len() < cfg.growing.max(1) {
                let dir = dirs[rng.gen_range(0..dirs.len())];
                let name = format!("f{made}").into_bytes();
                // open while it grows (a churn may unlink it meanwhile), released when complete
                let a = fs.create(dir, &name, 0o644, ROOT).map_err(err)?;
                fs.open(a.ino).map_err(err)?;
                fs.forget(a.ino, 1);
                made += 1;
                // sizes: mostly small, some large (1 … 64 blocks, skewed to small)
                let left = 1 + (rng.gen_range(0.0f64..1.0).powi(3) * 64.0) as u64;
                growing.push(Growing {
                    ino: a.ino,
                    written: 0,
                    left,
                });
                files.push((dir, name));
            }
            let k = rng.gen_range(0..growing.len());
            let g = &mut growing[k];
            let n = g.left.min(rng.gen_range(1..=4));
            for _ in 0..n {
                match fs.write(g.ino, g.written * bs, &block) {
                    Ok(_) => {}
                    Err(moafs_core::FsError::NoSpace) => {
                        return Err(io::Error::other(
                            "aging: the file system filled up before the target was reached",
                        ))
                    }
                    Err(e) => {
                        return Err(io::Error::other(format!("write to inode {}: {e}", g.ino)))
                    }
                }
                g.written += 1;
            }
            g.left -= n;
            if g.left == 0 {
                fs.release(g.ino).map_err(err)?;
                growing.swap_remove(k);
            }
        }
        if steps.is_multiple_of(16) {
            fs.sync().map_err(err)?;
        }
        if full && steps >= next_measure {
            fs.sync().map_err(err)?;
            score = layout(dev)
                .map_err(|e| io::Error::other(format!("layout: {e}")))?
                .0
                .score;
            next_measure = steps + (steps / 4).max(2_000);
        }
    }
    for g in growing.drain(..) {
        fs.release(g.ino).map_err(err)?;
    }
    fs.sync().map_err(err)?;
    let last = layout(dev).map_err(err)?.0;
    let utilisation = used(fs);
    Ok(AgingResult {
        steps,
        files: files.len() as u64,
        files_deleted: deleted,
        utilisation,
        reached: utilisation >= cfg.utilisation && last.score <= cfg.layout,
        layout: last,
    })
}
