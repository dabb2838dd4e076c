//! The co-writing experiments of paper 000 (§5), in-process on the model disk (7200 RPM, 9 ms
//! average seek; `HddModel::paper`): a 4 GiB file system of 16 KiB blocks in 25 groups, aged
//! (`aging::age`, with co-writing off: an FFS history) to a utilisation and a layout score of
//! about 0.8, then each test run on its own copy of the aged image with `cowrite=on` and
//! `cowrite=off`:
//!
//! * `seq-write` (Fig. 11): 50 directories × 100 one-block files, directory by directory;
//! * `rand-write` (Fig. 12): the same files, each into a random directory;
//! * `dir-read` (Fig. 13): after `rand-write`, caches dropped, every directory read in order;
//! * `large-write` / `large-read` (Fig. 14, scaled down): large files written, then read;
//! * `postmark-rfsl`, `postmark-fsl` (Fig. 17 / Table 3): PostMark, scaled to the free space.
//!
//! Each test's figure is the *modelled* device time of its measured phase (deterministic: the
//! model charges each request seek + rotation + transfer), with the device requests and bytes
//! behind it; bandwidth is the test's payload over that time. Nothing here is wall-clock.

use crate::aging::{age, AgingConfig};
use crate::postmark::{self, PostmarkConfig};
use crate::target::{create_file, create_repeated, read_file, EngineTarget, Target};
use moafs_core::device::{
    BlockDevice, DeviceCounters, HddModel, MemDevice, ModelDevice, ModelKind,
};
use moafs_core::fs::{EngineCounters, MountOptions};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::Arc;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExpConfig {
    /// Image size in bytes (paper: 4 GiB).
    pub size: u64,
    pub block_size: u32,
    pub groups: u32,
    /// Utilisations to age to, 0..0.95 (paper: 0, .1, .3, .5, .7, .9).
    pub utilisations: Vec<f64>,
    /// Layout score aging goes down to (paper: about 0.8).
    pub layout: f64,
    /// Small-file tests: directories × files of `file_size` (paper: 50 × 100 × 16 KiB).
    pub dirs: usize,
    pub per_dir: usize,
    pub file_size: usize,
    /// Large-file test: files × bytes (paper: 50 dirs × 4 × 100 MB; scaled down).
    pub large_files: usize,
    pub large_size: u64,
    /// PostMark configurations are multiplied by this, and scaled further down to fit half
    /// the free space.
    pub postmark_scale: f64,
    pub tests: Vec<String>,
    /// Per-file write-back orders to run (false: the order files became dirty, the paper's
    /// FFS; true: sorted by address, as an elevator would send a commit's requests).
    pub elevator: Vec<bool>,
    pub seed: u64,
}

pub const TESTS: &[&str] = &[
    "seq-write",
    "rand-write",
    "dir-read",
    "large-write",
    "large-read",
    "postmark-rfsl",
    "postmark-fsl",
];

impl Default for ExpConfig {
    fn default() -> Self {
        ExpConfig {
            size: 4 << 30,
            block_size: 16384,
            groups: 25,
            utilisations: vec![0.0, 0.1, 0.3, 0.5, 0.7, 0.9],
            layout: 0.8,
            dirs: 50,
            per_dir: 100,
            file_size: 16384,
            large_files: 4,
            large_size: 64 << 20,
            postmark_scale: 1.0,
            tests: TESTS.iter().map(|s| s.to_string()).collect(),
            elevator: vec![false, true],
            seed: 42,
        }
    }
}

/// One test at one utilisation with co-writing on or off.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExpRow {
    pub test: String,
    pub utilisation: f64,
    pub cowrite: bool,
    /// Per-file write-back sorted by address (`wb_order=address`).
    pub elevator: bool,
    /// Modelled device time of the measured phase, seconds.
    pub modelled_secs: f64,
    /// Bytes the test wrote or read (its payload), and payload / modelled time in MB/s.
    pub payload_bytes: u64,
    pub bandwidth_mb_s: f64,
    pub device: DeviceCounters,
    pub engine: EngineCounters,
    /// What the test did (files, transactions, scale), for the record.
    pub detail: serde_json::Value,
}

/// The aged image of one utilisation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgedImage {
    pub utilisation_target: f64,
    pub utilisation: f64,
    pub layout_score: f64,
    pub files: u64,
    pub reached: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExpReport {
    pub config: ExpConfig,
    pub images: Vec<AgedImage>,
    pub rows: Vec<ExpRow>,
}

fn engine_err(e: moafs_core::FsError) -> io::Error {
    io::Error::other(e.to_string())
}

/// What one run is: utilisation, co-writing, write-back order.
#[derive(Debug, Clone, Copy)]
struct Variant {
    util: f64,
    cowrite: bool,
    elevator: bool,
}

/// A phase being measured on an engine target.
struct Meter<'a> {
    t: &'a EngineTarget,
    dev: DeviceCounters,
    eng: EngineCounters,
}

impl<'a> Meter<'a> {
    fn start(t: &'a EngineTarget) -> Meter<'a> {
        Meter {
            t,
            dev: t.fs().device_counters(),
            eng: t.fs().counters(),
        }
    }
    fn row(self, test: &str, v: Variant, payload: u64, detail: serde_json::Value) -> ExpRow {
        let device = self.t.fs().device_counters().since(&self.dev);
        let engine = self.t.fs().counters().since(&self.eng);
        let secs = device.modelled_ns as f64 / 1e9;
        ExpRow {
            test: test.to_string(),
            utilisation: v.util,
            cowrite: v.cowrite,
            elevator: v.elevator,
            modelled_secs: secs,
            payload_bytes: payload,
            bandwidth_mb_s: if secs > 0.0 {
                payload as f64 / 1e6 / secs
            } else {
                0.0
            },
            device,
            engine,
            detail,
        }
    }
}

/// Makes and ages the image of one utilisation (in memory, no model: aging is setup).
fn aged_image(cfg: &ExpConfig, util: f64) -> io::Result<(Vec<u8>, AgedImage)> {
    let mem = Arc::new(MemDevice::new(cfg.size));
    mkfs(
        mem.as_ref(),
        &MkfsOptions {
            block_size: cfg.block_size,
            groups: Some(cfg.groups),
            ..MkfsOptions::default()
        },
    )
    .map_err(engine_err)?;
    let mut info = AgedImage {
        utilisation_target: util,
        utilisation: 0.0,
        layout_score: 1.0,
        files: 0,
        reached: true,
    };
    if util > 0.0 {
        let fs = Fs::mount(
            mem.clone() as Arc<dyn BlockDevice>,
            MountOptions {
                cowrite: false,
                flush_interval_ms: u64::MAX,
                ..MountOptions::default()
            },
        )
        .map_err(engine_err)?;
        let r = age(
            &fs,
            mem.as_ref(),
            &AgingConfig {
                utilisation: util,
                layout: cfg.layout,
                seed: cfg.seed,
                ..AgingConfig::default()
            },
        )?;
        fs.unmount().map_err(engine_err)?;
        info.utilisation = r.utilisation;
        info.layout_score = r.layout.score;
        info.files = r.files;
        info.reached = r.reached;
    }
    Ok((mem.snapshot(), info))
}

/// The aged image mounted on the model disk as `v` says.
fn mount_copy(image: &[u8], v: Variant) -> io::Result<EngineTarget> {
    let mem = Arc::new(MemDevice::from_bytes(image.to_vec()));
    let dev = Arc::new(ModelDevice::new(mem, ModelKind::Hdd(HddModel::paper())));
    let fs = Fs::mount(
        dev as Arc<dyn BlockDevice>,
        MountOptions {
            cowrite: v.cowrite,
            wb_sorted: v.elevator,
            flush_interval_ms: u64::MAX,
            ..MountOptions::default()
        },
    )
    .map_err(engine_err)?;
    Ok(EngineTarget::from_fs(
        fs,
        format!(
            "engine:hdd@cowrite={};wb_order={}",
            if v.cowrite { "on" } else { "off" },
            if v.elevator { "address" } else { "dirty" }
        ),
    ))
}

/// Small-file write (sequential or random directory order), then optionally the per-directory
/// read of what was written.
fn small_files(
    cfg: &ExpConfig,
    t: &EngineTarget,
    v: Variant,
    random: bool,
    read_after: bool,
) -> io::Result<Vec<ExpRow>> {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let data: Vec<u8> = (0..cfg.file_size).map(|_| rng.gen()).collect();
    let tag = if random { "r" } else { "s" };
    for d in 0..cfg.dirs {
        t.mkdir(&format!("{tag}{d}"))?;
    }
    t.sync()?;
    let n = cfg.dirs * cfg.per_dir;
    let mut per_dir = vec![0usize; cfg.dirs];
    let order: Vec<(usize, usize)> = (0..n)
        .map(|i| {
            let d = if random {
                rng.gen_range(0..cfg.dirs)
            } else {
                i / cfg.per_dir
            };
            per_dir[d] += 1;
            (d, per_dir[d] - 1)
        })
        .collect();
    let m = Meter::start(t);
    for &(d, f) in &order {
        create_file(t, &format!("{tag}{d}/f{f}"), &data, cfg.file_size)?;
    }
    t.sync()?;
    let detail = serde_json::json!({"files": n, "dirs": cfg.dirs, "file_size": cfg.file_size});
    let name = if random { "rand-write" } else { "seq-write" };
    let mut rows = vec![m.row(name, v, (n * cfg.file_size) as u64, detail)];
    if read_after {
        t.drop_own_cache()?;
        let m = Meter::start(t);
        let mut read = 0;
        for (d, &count) in per_dir.iter().enumerate() {
            for f in 0..count {
                read += read_file(t, &format!("{tag}{d}/f{f}"), cfg.file_size)?;
            }
        }
        rows.push(m.row(
            "dir-read",
            v,
            read,
            serde_json::json!({"files": n, "after": name}),
        ));
    }
    Ok(rows)
}

fn large(cfg: &ExpConfig, t: &EngineTarget, v: Variant) -> io::Result<Vec<ExpRow>> {
    let block = 1 << 20;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let data: Vec<u8> = (0..block).map(|_| rng.gen()).collect();
    let m = Meter::start(t);
    let mut written = 0;
    for k in 0..cfg.large_files {
        written += create_repeated(t, &format!("large.{k}"), &data, cfg.large_size)?;
    }
    t.sync()?;
    let detail = serde_json::json!({"files": cfg.large_files, "size": cfg.large_size});
    let mut rows = vec![m.row("large-write", v, written, detail.clone())];
    t.drop_own_cache()?;
    let m = Meter::start(t);
    let mut read = 0;
    for k in 0..cfg.large_files {
        read += read_file(t, &format!("large.{k}"), block)?;
    }
    rows.push(m.row("large-read", v, read, detail));
    Ok(rows)
}

fn postmark_run(cfg: &ExpConfig, t: &EngineTarget, v: Variant, rfsl: bool) -> io::Result<ExpRow> {
    let base = if rfsl {
        PostmarkConfig::rfsl()
    } else {
        PostmarkConfig::fsl()
    };
    // Fit: at most half the free space for the initial files (about two blocks each for
    // R-FSL, one for FSL), whatever the utilisation.
    let st = t.fs().statfs();
    let free = st.free_blocks * u64::from(st.block_size);
    let per_file = if rfsl { 2 } else { 1 } * u64::from(st.block_size);
    let want = (base.files as f64 * cfg.postmark_scale) as u64 * per_file;
    let fit = (free as f64 / 2.0 / want.max(1) as f64).min(1.0);
    let scale = cfg.postmark_scale * fit;
    let pm = PostmarkConfig {
        seed: cfg.seed,
        ..base.scaled(scale)
    };
    let m = Meter::start(t);
    let r = postmark::run(t, &pm)?;
    t.sync()?;
    let name = if rfsl {
        "postmark-rfsl"
    } else {
        "postmark-fsl"
    };
    let payload = r.counts.bytes_written + r.counts.bytes_read;
    Ok(m.row(
        name,
        v,
        payload,
        serde_json::json!({"scale": scale, "files": pm.files, "transactions": pm.transactions,
                           "counts": r.counts}),
    ))
}

/// Runs every configured test at every utilisation, `off` then `on` on copies of one aged
/// image; `progress` hears each finished row.
pub fn run(cfg: &ExpConfig, progress: &mut dyn FnMut(&str)) -> io::Result<ExpReport> {
    for t in &cfg.tests {
        if !TESTS.contains(&t.as_str()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown test {t:?}; the tests are {}", TESTS.join(", ")),
            ));
        }
    }
    let has = |t: &str| cfg.tests.iter().any(|x| x == t);
    let mut report = ExpReport {
        config: cfg.clone(),
        images: Vec::new(),
        rows: Vec::new(),
    };
    for &util in &cfg.utilisations {
        progress(&format!("aging to {:.0} % …", util * 100.0));
        let (image, info) = aged_image(cfg, util)?;
        progress(&format!(
            "aged: utilisation {:.3}, layout score {:.3}, {} files{}",
            info.utilisation,
            info.layout_score,
            info.files,
            if info.reached {
                ""
            } else {
                " (targets not reached)"
            }
        ));
        report.images.push(info);
        let variants = cfg.elevator.iter().flat_map(|&elevator| {
            [false, true].map(|cowrite| Variant {
                util,
                cowrite,
                elevator,
            })
        });
        for v in variants {
            let mut rows = Vec::new();
            if has("seq-write") {
                let t = mount_copy(&image, v)?;
                rows.extend(small_files(cfg, &t, v, false, false)?);
                t.unmount()?;
            }
            if has("rand-write") || has("dir-read") {
                let t = mount_copy(&image, v)?;
                rows.extend(small_files(cfg, &t, v, true, has("dir-read"))?);
                t.unmount()?;
            }
            if has("large-write") || has("large-read") {
                let t = mount_copy(&image, v)?;
                rows.extend(large(cfg, &t, v)?);
                t.unmount()?;
            }
            for (name, rfsl) in [("postmark-rfsl", true), ("postmark-fsl", false)] {
                if has(name) {
                    let t = mount_copy(&image, v)?;
                    rows.push(postmark_run(cfg, &t, v, rfsl)?);
                    t.unmount()?;
                }
            }
            for r in rows {
                if has(&r.test) {
                    progress(&format!(
                        "{:>4.0} % {:<14} cowrite={:<3} wb_order={:<7} {:>9.3} s modelled  \
                         {:>8} writes  {:>8.2} MB/s",
                        util * 100.0,
                        r.test,
                        if v.cowrite { "on" } else { "off" },
                        if v.elevator { "address" } else { "dirty" },
                        r.modelled_secs,
                        r.device.writes,
                        r.bandwidth_mb_s
                    ));
                    report.rows.push(r);
                }
            }
        }
    }
    Ok(report)
}

fn find<'a>(
    report: &'a ExpReport,
    test: &str,
    util: f64,
    cowrite: bool,
    elevator: bool,
) -> Option<&'a ExpRow> {
    report.rows.iter().find(|r| {
        r.test == test
            && r.cowrite == cowrite
            && r.elevator == elevator
            && (r.utilisation - util).abs() < 1e-9
    })
}

/// on/off of one test at one utilisation and write-back order: (bandwidth ratio, time
/// ratio, write-count ratio off/on).
pub fn ratios(
    report: &ExpReport,
    test: &str,
    util: f64,
    elevator: bool,
) -> Option<(f64, f64, f64)> {
    let find = |on: bool| find(report, test, util, on, elevator);
    let (on, off) = (find(true)?, find(false)?);
    Some((
        on.bandwidth_mb_s / off.bandwidth_mb_s.max(1e-12),
        on.modelled_secs / off.modelled_secs.max(1e-12),
        off.device.writes as f64 / (on.device.writes as f64).max(1.0),
    ))
}

/// A markdown table: per test, write-back order and utilisation, both variants and the
/// ratios.
pub fn table(report: &ExpReport) -> String {
    let mut s = String::from(
        "| test | wb_order | util. | off: modelled s | on: modelled s | on/off bandwidth | \
         off/on device writes | on: co-writes (files, bytes per batch) | on: choosing µs/batch |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for test in TESTS {
        for &elevator in &report.config.elevator {
            for &u in &report.config.utilisations {
                let (Some(on), Some(off)) = (
                    find(report, test, u, true, elevator),
                    find(report, test, u, false, elevator),
                ) else {
                    continue;
                };
                let (bw, _, wr) = ratios(report, test, u, elevator).unwrap_or_default();
                let b = on.engine.cowrite_batches;
                let (per, choose) = if b > 0 {
                    (
                        format!(
                            "{b} ({:.1}, {:.0} KiB)",
                            on.engine.cowrite_files as f64 / b as f64,
                            (on.engine.cowrite_blocks * u64::from(report.config.block_size)) as f64
                                / b as f64
                                / 1024.0
                        ),
                        format!("{:.1}", on.engine.cowrite_choose_ns as f64 / b as f64 / 1e3),
                    )
                } else {
                    ("0".into(), "–".into())
                };
                let writes = if off.device.writes + on.device.writes > 0 {
                    format!("{wr:.1}×")
                } else {
                    "–".into()
                };
                s.push_str(&format!(
                    "| {test} | {} | {:.0} % | {:.3} | {:.3} | {bw:.2}× | {writes} | {per} | \
                     {choose} |\n",
                    if elevator { "address" } else { "dirty" },
                    u * 100.0,
                    off.modelled_secs,
                    on.modelled_secs,
                ));
            }
        }
    }
    s
}

/// A plotted series: points, colour, legend.
type Line = (Vec<(f64, f64)>, RGBColor, &'static str);

/// One SVG per test: bandwidth of `off` and `on` against utilisation.
pub fn plots(report: &ExpReport) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for test in TESTS {
        let series = |on: bool, elevator: bool| -> Vec<(f64, f64)> {
            report
                .rows
                .iter()
                .filter(|r| r.test == *test && r.cowrite == on && r.elevator == elevator)
                .map(|r| (r.utilisation * 100.0, r.bandwidth_mb_s))
                .collect()
        };
        let lines: Vec<Line> = [
            (false, false, RED, "off, dirty order"),
            (true, false, BLUE, "on, dirty order"),
            (false, true, MAGENTA, "off, address order"),
            (true, true, CYAN, "on, address order"),
        ]
        .into_iter()
        .map(|(on, el, c, l)| (series(on, el), c, l))
        .filter(|(pts, _, _)| !pts.is_empty())
        .collect();
        if lines.is_empty() {
            continue;
        }
        let top = lines
            .iter()
            .flat_map(|l| l.0.iter().map(|p| p.1))
            .fold(0.0, f64::max)
            .max(1e-9)
            * 1.15;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (560, 340)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| e.to_string())?;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("{test}: model HDD, cowrite on vs off"),
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..100.0, 0.0..top)
                .map_err(|e| e.to_string())?;
            chart
                .configure_mesh()
                .x_desc("utilisation %")
                .y_desc("MB/s (modelled)")
                .draw()
                .map_err(|e| e.to_string())?;
            for (pts, color, label) in &lines {
                let color = *color;
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(*label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
                    .map_err(|e| e.to_string())?;
            }
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .draw()
                .map_err(|e| e.to_string())?;
            root.present().map_err(|e| e.to_string())?;
        }
        out.push((format!("cowrite-{test}.svg"), svg));
    }
    Ok(out)
}
