//! Paper 003's experiment, re-made in-process (`moafs experiment bytelog`): moafs on a model
//! flash card (`FlashDevice`: page-mapped FTL, greedy garbage collection, no TRIM) filled to
//! 75 % and aged by random overwrites, then each workload run on its own copy of that state
//! with block-only write-back (`bytelog=off`), two-level logging (the byte log), and two-level
//! logging with an NVM tier (a `MemNvm` charged as Optane DC). Figures: what the flash
//! programmed for the host, what garbage collection copied and erased, and operations per
//! second of *modelled* time (flash time plus the tier's persist time; the simulation's own
//! CPU time is not counted). Nothing here is wall-clock.
//!
//! Workloads (paper 003 §5, scaled to the image):
//! * `sqlite-delete`: Mobibench's SQLite update in DELETE journal mode, as the file system
//!   sees it: a rollback journal is created, gets a 512-byte header and the page's old 4 KiB
//!   and is fsynced; the database page gets a 1 KB row and its 16-byte page header changed,
//!   and the database header its change counter, and the database is fsynced; the journal is
//!   deleted.
//! * `sqlite-wal`: the same updates in WAL mode: a 4 KiB + 24-byte frame appended to the WAL
//!   and the WAL fsynced; every 1,000 frames a checkpoint writes the pages back to the
//!   database (whole pages of which 1 KB changed), fsyncs it and restarts the WAL at its
//!   start.
//! * `tio-1536`, `tio-128`: tiobench's random writes of 1.5 KB and 128 bytes into four 16 MiB
//!   files, no fsync (write-back by the timer: here a commit every 1,000 writes), then sync.
//!
//! The files are 16 MiB, or an eighth of the aged image's free space when that is less.

use moafs_core::device::{
    BlockDevice, FlashCounters, FlashDevice, FlashModel, MemDevice, MemNvm, Nvm, NvmModel,
};
use moafs_core::fs::{EngineCounters, MountOptions, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::Arc;

pub const WORKLOADS: &[&str] = &["sqlite-delete", "sqlite-wal", "tio-1536", "tio-128"];
pub const CONFIGS: &[&str] = &["block", "two-level", "two-level+wb", "two-level+nvm"];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BytelogExpConfig {
    pub size: u64,
    pub utilisation: f64,
    /// Operations per workload: SQLite transactions, tiobench writes (x10).
    pub ops: usize,
    pub workloads: Vec<String>,
    pub seed: u64,
}

impl Default for BytelogExpConfig {
    fn default() -> Self {
        BytelogExpConfig {
            size: 256 << 20,
            utilisation: 0.75,
            ops: 2000,
            workloads: WORKLOADS.iter().map(|s| s.to_string()).collect(),
            seed: 42,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BytelogRow {
    pub workload: String,
    pub config: String,
    pub ops: u64,
    /// Bytes the file system wrote to the device, and to the tier.
    pub device_bytes: u64,
    pub tier_bytes: u64,
    pub flash: FlashCounters,
    /// Flash pages programmed in all (host + garbage collection), as bytes.
    pub flash_bytes: u64,
    /// Modelled seconds: the flash's and the tier's.
    pub modelled_secs: f64,
    pub ops_per_sec: f64,
    pub engine: EngineCounters,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BytelogReport {
    pub config: BytelogExpConfig,
    pub flash: FlashModel,
    pub rows: Vec<BytelogRow>,
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn opts(config: &str) -> MountOptions {
    MountOptions {
        bytelog: config != "block",
        bytelog_writeback: config == "two-level+wb",
        flush_interval_ms: u64::MAX,
        ..MountOptions::default()
    }
}

/// The aged image: its bytes and the flash's state.
struct Aged {
    image: Vec<u8>,
    flash: Arc<FlashDevice>,
}

fn age(cfg: &BytelogExpConfig, progress: &mut dyn FnMut(&str)) -> io::Result<Aged> {
    let mem = Arc::new(MemDevice::new(cfg.size));
    mkfs(mem.as_ref(), &MkfsOptions::default()).map_err(io_err)?;
    let flash = Arc::new(FlashDevice::new(
        mem.clone() as Arc<dyn BlockDevice>,
        FlashModel::default(),
    ));
    let fs = Fs::mount(flash.clone() as Arc<dyn BlockDevice>, opts("block")).map_err(io_err)?;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut files = Vec::new();
    let chunk: Vec<u8> = (0..1 << 20).map(|_| rng.gen()).collect();
    let dir = fs
        .mkdir(ROOT_INO, b"fill", 0o755, moafs_core::fs::Caller::ROOT)
        .map_err(io_err)?
        .ino;
    loop {
        let st = fs.statfs();
        let used = 1.0 - st.avail_blocks as f64 / st.total_blocks as f64;
        if used >= cfg.utilisation {
            break;
        }
        let name = format!("f{}", files.len());
        let ino = fs
            .create(dir, name.as_bytes(), 0o644, moafs_core::fs::Caller::ROOT)
            .map_err(io_err)?
            .ino;
        fs.write(ino, 0, &chunk).map_err(io_err)?;
        files.push(ino);
        if files.len() % 64 == 0 {
            fs.sync().map_err(io_err)?;
        }
    }
    fs.sync().map_err(io_err)?;
    progress(&format!(
        "filled to {:.0} % with {} files of 1 MiB; random overwrites",
        cfg.utilisation * 100.0,
        files.len()
    ));
    // random 4 KiB overwrites, as many as half the image, so that the flash's blocks hold
    // valid and invalid pages mixed and garbage collection must copy
    let n = cfg.size / 2 / 4096;
    let block = vec![7u8; 4096];
    for k in 0..n {
        let ino = files[rng.gen_range(0..files.len())];
        let off = rng.gen_range(0..256u64) * 4096;
        fs.write(ino, off, &block).map_err(io_err)?;
        if k % 4096 == 0 {
            fs.sync().map_err(io_err)?;
        }
    }
    fs.unmount().map_err(io_err)?;
    drop(fs);
    Ok(Aged {
        image: mem.snapshot(),
        flash,
    })
}

/// A fresh copy of the aged state, mounted as `config` says.
fn mount_copy(
    aged: &Aged,
    config: &str,
) -> io::Result<(Fs, Arc<FlashDevice>, Option<Arc<MemNvm>>)> {
    let mem = Arc::new(MemDevice::from_bytes(aged.image.clone()));
    let flash = Arc::new(aged.flash.fork(mem as Arc<dyn BlockDevice>));
    let tier =
        (config == "two-level+nvm").then(|| Arc::new(MemNvm::new(16 << 20, NvmModel::Optane)));
    let fs = Fs::mount_with_tier(
        flash.clone() as Arc<dyn BlockDevice>,
        tier.clone()
            .map(|t| (t as Arc<dyn Nvm>, "/experiment/tier".to_string())),
        opts(config),
    )
    .map_err(io_err)?;
    Ok((fs, flash, tier))
}

fn run_one(
    aged: &Aged,
    cfg: &BytelogExpConfig,
    workload: &str,
    config: &str,
) -> io::Result<BytelogRow> {
    let (fs, flash, tier) = mount_copy(aged, config)?;
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed);
    let root = ROOT_INO;
    let who = moafs_core::fs::Caller::ROOT;
    // the workload's files, made durable before the measurement
    let setup = |name: &str, len: usize| -> io::Result<u64> {
        let ino = fs
            .create(root, name.as_bytes(), 0o644, who)
            .map_err(io_err)?
            .ino;
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        fs.write(ino, 0, &data).map_err(io_err)?;
        Ok(ino)
    };
    // 16 MiB files (the paper's), or less when the aged image has no room for them
    let st = fs.statfs();
    let room = st.avail_blocks * st.block_size as u64;
    let file_size = (room / 8).min(16 << 20) & !0xffff;
    let (db, wal, tio) = match workload {
        "sqlite-delete" | "sqlite-wal" => (
            setup("db", file_size as usize)?,
            setup("db-wal", 0)?,
            vec![],
        ),
        _ => {
            let mut v = Vec::new();
            for k in 0..4 {
                v.push(setup(&format!("tio{k}"), file_size as usize)?);
            }
            (0, 0, v)
        }
    };
    fs.sync().map_err(io_err)?;
    let (f0, e0, d0) = (flash.flash_counters(), fs.counters(), fs.device_counters());
    let t0 = tier.as_ref().map(|t| t.counters().modelled_ns).unwrap_or(0);
    let pages = file_size / 4096;
    let mut ops = 0u64;
    match workload {
        "sqlite-delete" => {
            for _ in 0..cfg.ops {
                let p = rng.gen_range(1..pages);
                let j = fs
                    .create(root, b"db-journal", 0o644, who)
                    .map_err(io_err)?
                    .ino;
                fs.write(j, 0, &[0xd9; 512]).map_err(io_err)?;
                let old = fs.read(db, p * 4096, 4096).map_err(io_err)?;
                fs.write(j, 512, &old).map_err(io_err)?;
                fs.fsync(j, false).map_err(io_err)?;
                let row: Vec<u8> = (0..1024).map(|_| rng.gen()).collect();
                let at = rng.gen_range(0..3u64) * 1024 + 512;
                fs.write(db, p * 4096 + at, &row).map_err(io_err)?;
                fs.write(db, p * 4096, &rng.gen::<[u8; 16]>())
                    .map_err(io_err)?;
                fs.write(db, 24, &rng.gen::<[u8; 4]>()).map_err(io_err)?;
                fs.fsync(db, false).map_err(io_err)?;
                fs.unlink(root, b"db-journal").map_err(io_err)?;
                ops += 1;
            }
        }
        "sqlite-wal" => {
            let mut frame = 0u64;
            let mut dirty: Vec<u64> = Vec::new();
            for _ in 0..cfg.ops {
                let p = rng.gen_range(1..pages);
                let mut page = fs.read(db, p * 4096, 4096).map_err(io_err)?;
                let at = rng.gen_range(0..3usize) * 1024 + 512;
                rng.fill(&mut page[at..at + 1024]);
                rng.fill(&mut page[0..16]);
                let mut f = vec![0u8; 24];
                rng.fill(&mut f[..]);
                f.extend_from_slice(&page);
                fs.write(wal, 32 + frame * 4120, &f).map_err(io_err)?;
                fs.fsync(wal, false).map_err(io_err)?;
                dirty.push(p);
                frame += 1;
                if frame == 1000 {
                    // checkpoint: the pages back into the database, then the WAL restarts
                    for q in dirty.drain(..) {
                        let mut page = fs.read(db, q * 4096, 4096).map_err(io_err)?;
                        rng.fill(&mut page[512..1536]);
                        fs.write(db, q * 4096, &page).map_err(io_err)?;
                    }
                    fs.fsync(db, false).map_err(io_err)?;
                    frame = 0;
                }
                ops += 1;
            }
        }
        "tio-1536" | "tio-128" => {
            let n = if workload == "tio-128" { 128 } else { 1536 };
            let buf = vec![0x5au8; n];
            for k in 0..cfg.ops * 10 {
                let f = tio[rng.gen_range(0..tio.len())];
                let off = rng.gen_range(0..file_size - n as u64);
                fs.write(f, off, &buf).map_err(io_err)?;
                if k % 1000 == 999 {
                    fs.sync().map_err(io_err)?; // the write-back timer
                }
                ops += 1;
            }
            fs.sync().map_err(io_err)?;
        }
        w => return Err(io_err(format!("unknown workload {w}"))),
    }
    let fl = flash.flash_counters().since(&f0);
    let e = fs.counters().since(&e0);
    let d = fs.device_counters();
    let tier_ns = tier.as_ref().map(|t| t.counters().modelled_ns).unwrap_or(0) - t0;
    let secs = (fl.modelled_ns + tier_ns) as f64 / 1e9;
    fs.unmount().map_err(io_err)?;
    Ok(BytelogRow {
        workload: workload.into(),
        config: config.into(),
        ops,
        device_bytes: d.write_bytes - d0.write_bytes,
        tier_bytes: e.tier_bytes,
        flash_bytes: (fl.host_programs + fl.gc_copies) * 4096,
        flash: fl,
        modelled_secs: secs,
        ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        engine: e,
    })
}

pub fn run(cfg: &BytelogExpConfig, progress: &mut dyn FnMut(&str)) -> io::Result<BytelogReport> {
    progress(&format!(
        "aging a {} MiB image on the flash model",
        cfg.size >> 20
    ));
    let aged = age(cfg, progress)?;
    let mut rows = Vec::new();
    for w in &cfg.workloads {
        for c in CONFIGS {
            progress(&format!("{w}: {c}"));
            rows.push(run_one(&aged, cfg, w, c)?);
        }
    }
    Ok(BytelogReport {
        config: cfg.clone(),
        flash: FlashModel::default(),
        rows,
    })
}

/// The results as a table, each configuration against block-only write-back.
pub fn table(r: &BytelogReport) -> String {
    let mut s = String::from(
        "workload       config          device MB  tier MB  flash MB  (GC MB)  erases  ops/s (modelled)  bytes vs block  ops/s vs block\n",
    );
    for row in &r.rows {
        let base = r
            .rows
            .iter()
            .find(|b| b.workload == row.workload && b.config == "block")
            .unwrap_or(row);
        s.push_str(&format!(
            "{:14} {:15} {:9.2} {:8.2} {:9.2} {:8.2} {:7} {:17.1} {:14.2} {:14.2}\n",
            row.workload,
            row.config,
            row.device_bytes as f64 / 1e6,
            row.tier_bytes as f64 / 1e6,
            row.flash_bytes as f64 / 1e6,
            (row.flash.gc_copies * 4096) as f64 / 1e6,
            row.flash.erases,
            row.ops_per_sec,
            row.flash_bytes as f64 / base.flash_bytes.max(1) as f64,
            row.ops_per_sec / base.ops_per_sec.max(1e-9),
        ));
    }
    s
}

/// Two bar charts (SVG): flash bytes and operations per second of each configuration,
/// relative to block-only write-back, per workload.
pub fn plots(r: &BytelogReport) -> Result<Vec<(String, String)>, String> {
    use plotters::prelude::*;
    let workloads: Vec<&str> = {
        let mut w: Vec<&str> = Vec::new();
        for row in &r.rows {
            if !w.contains(&row.workload.as_str()) {
                w.push(&row.workload);
            }
        }
        w
    };
    let colors = [RED, BLUE, GREEN];
    let mut out = Vec::new();
    for (file, what, value) in [
        (
            "bytelog-flash-bytes.svg",
            "flash bytes written, vs block-only",
            (|x: &BytelogRow| x.flash_bytes as f64) as fn(&BytelogRow) -> f64,
        ),
        (
            "bytelog-ops.svg",
            "operations per second (modelled), vs block-only",
            |x: &BytelogRow| x.ops_per_sec,
        ),
    ] {
        let ratio = |w: &str, c: &str| -> f64 {
            let get = |c: &str| {
                r.rows
                    .iter()
                    .find(|x| x.workload == w && x.config == c)
                    .map(value)
            };
            match (get(c), get("block")) {
                (Some(v), Some(b)) if b > 0.0 => v / b,
                _ => 0.0,
            }
        };
        let top = workloads
            .iter()
            .flat_map(|w| CONFIGS.iter().map(move |c| (w, c)))
            .map(|(w, c)| ratio(w, c))
            .fold(1.0, f64::max)
            * 1.2;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (640, 360)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| e.to_string())?;
            let n = workloads.len() as f64;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("paper 003 on a model flash card: {what}"),
                    ("sans-serif", 16),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(50)
                .build_cartesian_2d(0.0..n, 0.0..top)
                .map_err(|e| e.to_string())?;
            let names = workloads.clone();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(workloads.len() * 2 + 1)
                .x_label_formatter(&|x| {
                    let k = *x - 0.5;
                    if (k - k.round()).abs() < 1e-6 && k >= 0.0 {
                        names
                            .get(k.round() as usize)
                            .map_or(String::new(), |s| s.to_string())
                    } else {
                        String::new()
                    }
                })
                .y_desc("ratio to block-only")
                .draw()
                .map_err(|e| e.to_string())?;
            for (ci, c) in CONFIGS.iter().enumerate() {
                let color = colors[ci % colors.len()];
                let bars: Vec<Rectangle<(f64, f64)>> = workloads
                    .iter()
                    .enumerate()
                    .map(|(wi, w)| {
                        let x0 = wi as f64 + 0.15 + ci as f64 * 0.23;
                        Rectangle::new([(x0, 0.0), (x0 + 0.2, ratio(w, c))], color.filled())
                    })
                    .collect();
                chart
                    .draw_series(bars)
                    .map_err(|e| e.to_string())?
                    .label(*c)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .draw()
                .map_err(|e| e.to_string())?;
            root.present().map_err(|e| e.to_string())?;
        }
        out.push((file.to_string(), svg));
    }
    Ok(out)
}
