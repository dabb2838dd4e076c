//! Paper 001's experiment, re-made in-process (`moafs experiment readahead`): moafs on the
//! model HDD and SSD (`ModelDevice`), read cold under each readahead policy (`linux`,
//! `sizeaware`, `off`). Figures: throughput over *modelled* device time (the simulation's CPU
//! time is not counted: nothing here is wall-clock), blocks read from the device, and
//! readahead blocks no read used.
//!
//! The engine is driven as the kernel would drive it under an application, with the mount's
//! page cache emulated by the driver: a request whose pages were all read before is served
//! from it; any other request goes to the engine whole (as `read()` does when a page is
//! missing). Each run mounts the image afresh (cold engine cache) on a fresh model device.
//!
//! Tests (the paper's §4, scaled: `files` files of `file_mb` MiB):
//! * `rndrd-SIZE` (16k … 1m): sysbench `fileio --file-test-mode=rndrd`: `requests` reads of
//!   SIZE at a random SIZE-aligned offset of a random file.
//! * `seq-SIZE` (4k, 64k, 1m): one file read from start to end in requests of SIZE.
//! * `inter`: one file read as two interleaved 4 KiB streams (the paper's 1000, 3001, 1001,
//!   3002 …), the second starting mid-file.
//! * `mmap-rand`, `mmap-seq`: page faults of an mmap: 4 KiB reads at random pages of random
//!   files (`requests` of them), or through one file in order (the kernel sends a fault's read
//!   to the file system as one 4 KiB read when the region is advised random or read-around is
//!   off; the policy decides the rest).

use moafs_core::device::{BlockDevice, HddModel, MemDevice, ModelDevice, ModelKind, SsdModel};
use moafs_core::fs::{EngineCounters, MountOptions, ReadaheadPolicy, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io;
use std::sync::Arc;

pub const TESTS: &[&str] = &[
    "rndrd-16k",
    "rndrd-32k",
    "rndrd-64k",
    "rndrd-128k",
    "rndrd-256k",
    "rndrd-512k",
    "rndrd-1m",
    "seq-4k",
    "seq-64k",
    "seq-1m",
    "inter",
    "mmap-rand",
    "mmap-seq",
];
pub const POLICIES: &[&str] = &["linux", "sizeaware", "off"];
pub const DEVICES: &[&str] = &["hdd", "ssd"];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadaheadExpConfig {
    pub files: usize,
    pub file_mb: u64,
    /// Random requests per `rndrd`/`mmap-rand` test (the paper: 1,000).
    pub requests: usize,
    pub tests: Vec<String>,
    pub devices: Vec<String>,
    pub readahead_max_kb: u32,
    pub seed: u64,
}

impl Default for ReadaheadExpConfig {
    fn default() -> Self {
        ReadaheadExpConfig {
            files: 32,
            file_mb: 16,
            requests: 1000,
            tests: TESTS.iter().map(|s| s.to_string()).collect(),
            devices: DEVICES.iter().map(|s| s.to_string()).collect(),
            readahead_max_kb: 256,
            seed: 42,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadaheadRow {
    pub device: String,
    pub test: String,
    pub policy: String,
    /// Requests that reached the engine, of all the test made.
    pub engine_requests: u64,
    pub requests: u64,
    /// Bytes the application asked for.
    pub requested_bytes: u64,
    /// Device read requests and the file data blocks they read.
    pub device_reads: u64,
    pub blocks_read: u64,
    /// Readahead blocks no read used.
    pub blocks_wasted: u64,
    pub modelled_secs: f64,
    /// Requested MB (10^6 bytes) per modelled second.
    pub mb_per_sec: f64,
    pub engine: EngineCounters,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadaheadReport {
    pub config: ReadaheadExpConfig,
    pub rows: Vec<ReadaheadRow>,
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn size_of(test: &str) -> u64 {
    let s = test.rsplit('-').next().unwrap_or("4k");
    let (n, unit) = s.split_at(s.len() - 1);
    let n: u64 = n.parse().unwrap_or(4);
    if unit == "m" {
        n << 20
    } else {
        n << 10
    }
}

/// The image with the test files, written once.
fn build(cfg: &ReadaheadExpConfig) -> io::Result<(Arc<MemDevice>, Vec<u64>)> {
    let total = cfg.files as u64 * (cfg.file_mb << 20);
    let mem = Arc::new(MemDevice::new(total + total / 4 + (64 << 20)));
    mkfs(mem.as_ref(), &MkfsOptions::default()).map_err(io_err)?;
    let fs =
        Fs::mount(mem.clone() as Arc<dyn BlockDevice>, MountOptions::default()).map_err(io_err)?;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let chunk: Vec<u8> = (0..1 << 20).map(|_| rng.gen()).collect();
    let mut inos = Vec::new();
    for f in 0..cfg.files {
        let name = format!("f{f}");
        let ino = fs
            .create(
                ROOT_INO,
                name.as_bytes(),
                0o644,
                moafs_core::fs::Caller::ROOT,
            )
            .map_err(io_err)?
            .ino;
        for k in 0..cfg.file_mb {
            fs.write(ino, k << 20, &chunk).map_err(io_err)?;
        }
        inos.push(ino);
        fs.sync().map_err(io_err)?;
    }
    fs.unmount().map_err(io_err)?;
    Ok((mem, inos))
}

/// The requests of `test`: (file index, offset, length).
fn requests(cfg: &ReadaheadExpConfig, test: &str) -> Vec<(usize, u64, u64)> {
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x001);
    let fsize = cfg.file_mb << 20;
    let random = |rng: &mut StdRng, n: usize, size: u64| -> Vec<(usize, u64, u64)> {
        (0..n)
            .map(|_| {
                let f = rng.gen_range(0..cfg.files);
                (f, rng.gen_range(0..fsize / size) * size, size)
            })
            .collect()
    };
    match test {
        "inter" => {
            let half = fsize / 2;
            (0..half / 4096)
                .flat_map(|i| [(0, i * 4096, 4096), (0, half + i * 4096, 4096)])
                .collect()
        }
        "mmap-rand" => random(&mut rng, cfg.requests, 4096),
        "mmap-seq" => (0..fsize / 4096).map(|i| (0, i * 4096, 4096)).collect(),
        t if t.starts_with("seq-") => {
            let size = size_of(t);
            (0..fsize / size).map(|i| (0, i * size, size)).collect()
        }
        t => random(&mut rng, cfg.requests, size_of(t)),
    }
}

fn run_one(
    mem: &Arc<MemDevice>,
    inos: &[u64],
    cfg: &ReadaheadExpConfig,
    device: &str,
    test: &str,
    policy: &str,
) -> io::Result<ReadaheadRow> {
    let kind = match device {
        "hdd" => ModelKind::Hdd(HddModel::paper()),
        _ => ModelKind::Ssd(SsdModel::default()),
    };
    let dev = Arc::new(ModelDevice::new(mem.clone() as Arc<dyn BlockDevice>, kind));
    let opts = MountOptions {
        read_only: true,
        readahead: policy.parse::<ReadaheadPolicy>().map_err(io_err)?,
        readahead_max_kb: cfg.readahead_max_kb,
        ..MountOptions::default()
    };
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts).map_err(io_err)?;
    // (the mount's own reads are not part of the test)
    let (d0, e0) = (dev.counters(), fs.counters());
    let reqs = requests(cfg, test);
    let mut page_cache: HashSet<(usize, u64)> = HashSet::new();
    let (mut asked, mut sent) = (0u64, 0u64);
    for &(f, off, len) in &reqs {
        asked += len;
        let pages = off / 4096..(off + len).div_ceil(4096);
        if pages.clone().all(|p| page_cache.contains(&(f, p))) {
            continue;
        }
        sent += 1;
        let got = fs.read(inos[f], off, len as u32).map_err(io_err)?;
        if got.len() as u64 != len {
            return Err(io_err(format!("short read at {off} of file {f}")));
        }
        page_cache.extend(pages.map(|p| (f, p)));
    }
    let d = dev.counters().since(&d0);
    let e = fs.counters().since(&e0);
    fs.unmount().map_err(io_err)?;
    let secs = d.modelled_ns as f64 / 1e9;
    Ok(ReadaheadRow {
        device: device.into(),
        test: test.into(),
        policy: policy.into(),
        engine_requests: sent,
        requests: reqs.len() as u64,
        requested_bytes: asked,
        device_reads: d.reads,
        blocks_read: e.data_blocks_read,
        blocks_wasted: e.ra_read.saturating_sub(e.ra_used),
        modelled_secs: secs,
        mb_per_sec: if secs > 0.0 {
            asked as f64 / 1e6 / secs
        } else {
            0.0
        },
        engine: e,
    })
}

/// Builds the image, then runs every device × test × policy.
pub fn run(
    cfg: &ReadaheadExpConfig,
    progress: &mut dyn FnMut(&str),
) -> io::Result<ReadaheadReport> {
    progress(&format!(
        "writing {} files of {} MiB",
        cfg.files, cfg.file_mb
    ));
    let (mem, inos) = build(cfg)?;
    let mut rows = Vec::new();
    for device in &cfg.devices {
        for test in &cfg.tests {
            for policy in POLICIES {
                let row = run_one(&mem, &inos, cfg, device, test, policy)?;
                progress(&format!(
                    "{device} {test:10} {policy:9} {:9.2} MB/s  {:7} blocks read  {:6} wasted",
                    row.mb_per_sec, row.blocks_read, row.blocks_wasted
                ));
                rows.push(row);
            }
        }
    }
    Ok(ReadaheadReport {
        config: cfg.clone(),
        rows,
    })
}

/// The results as a table, each policy against `linux`.
pub fn table(r: &ReadaheadReport) -> String {
    let mut s = String::from(
        "device test       policy      MB/s (modelled)  dev reads  blocks read  wasted  read/asked  MB/s vs linux\n",
    );
    for row in &r.rows {
        let base = r
            .rows
            .iter()
            .find(|b| b.device == row.device && b.test == row.test && b.policy == "linux")
            .unwrap_or(row);
        s.push_str(&format!(
            "{:6} {:10} {:9} {:17.2} {:10} {:12} {:7} {:11.3} {:14.2}\n",
            row.device,
            row.test,
            row.policy,
            row.mb_per_sec,
            row.device_reads,
            row.blocks_read,
            row.blocks_wasted,
            (row.blocks_read * 4096) as f64 / row.requested_bytes.max(1) as f64,
            row.mb_per_sec / base.mb_per_sec.max(1e-9),
        ));
    }
    s
}

/// Two charts (SVG) over the `rndrd` request sizes, as the paper's Fig. 3 and 5: throughput
/// of each policy against `linux`, and blocks read from the device per requested block, one
/// line per device and policy.
pub fn plots(r: &ReadaheadReport) -> Result<Vec<(String, String)>, String> {
    use plotters::prelude::*;
    let sizes: Vec<&str> = TESTS
        .iter()
        .copied()
        .filter(|t| t.starts_with("rndrd-") && r.rows.iter().any(|x| x.test == *t))
        .collect();
    if sizes.is_empty() {
        return Ok(Vec::new());
    }
    let get = |d: &str, t: &str, p: &str| {
        r.rows
            .iter()
            .find(|x| x.device == d && x.test == t && x.policy == p)
    };
    let mut out = Vec::new();
    type Value = fn(&ReadaheadRow, &ReadaheadRow) -> f64;
    let charts: [(&str, &str, Value); 2] = [
        (
            "readahead-throughput.svg",
            "random reads: throughput (modelled) vs linux",
            |x, base| x.mb_per_sec / base.mb_per_sec.max(1e-9),
        ),
        (
            "readahead-blocks.svg",
            "random reads: device bytes per requested byte",
            |x, _| (x.blocks_read * 4096) as f64 / x.requested_bytes.max(1) as f64,
        ),
    ];
    for (file, what, value) in charts {
        let mut lines = Vec::new();
        for d in &r.config.devices {
            for p in POLICIES {
                let pts: Vec<(f64, f64)> = sizes
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| {
                        Some((i as f64, value(get(d, t, p)?, get(d, t, "linux")?)))
                    })
                    .collect();
                lines.push((format!("{d} {p}"), pts));
            }
        }
        let top = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.1))
            .fold(1.0, f64::max)
            * 1.15;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (640, 380)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| e.to_string())?;
            let mut chart = ChartBuilder::on(&root)
                .caption(format!("paper 001: {what}"), ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(50)
                .build_cartesian_2d(-0.3..(sizes.len() as f64 - 0.7), 0.0..top)
                .map_err(|e| e.to_string())?;
            let labels = sizes.clone();
            chart
                .configure_mesh()
                .x_labels(sizes.len())
                .x_label_formatter(&|x| {
                    let i = x.round() as usize;
                    labels
                        .get(i)
                        .map(|t| t.trim_start_matches("rndrd-").to_string())
                        .unwrap_or_default()
                })
                .x_desc("request size")
                .draw()
                .map_err(|e| e.to_string())?;
            let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
            for (k, (name, pts)) in lines.into_iter().enumerate() {
                let c = colors[k % colors.len()];
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
            root.present().map_err(|e| e.to_string())?;
        }
        out.push((file.to_string(), svg));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizeaware_reads_what_random_reads_ask_and_keeps_interleaved_streams() {
        let cfg = ReadaheadExpConfig {
            files: 4,
            file_mb: 4,
            requests: 60,
            tests: vec!["rndrd-256k".into(), "inter".into()],
            devices: vec!["hdd".into()],
            ..ReadaheadExpConfig::default()
        };
        let r = run(&cfg, &mut |_| {}).unwrap();
        let row = |t: &str, p: &str| {
            r.rows
                .iter()
                .find(|x| x.test == t && x.policy == p)
                .unwrap()
                .clone()
        };
        let (s, l) = (row("rndrd-256k", "sizeaware"), row("rndrd-256k", "linux"));
        assert!(s.blocks_read * 4096 <= s.requested_bytes, "{s:?}");
        assert!(
            l.blocks_read > s.blocks_read && l.blocks_wasted > 0,
            "{l:?}"
        );
        assert!(s.mb_per_sec > l.mb_per_sec);
        let (s, l) = (row("inter", "sizeaware"), row("inter", "linux"));
        assert!(s.device_reads * 4 < l.device_reads, "{s:?} vs {l:?}");
        assert!(s.mb_per_sec > 2.0 * l.mb_per_sec);
    }
}
