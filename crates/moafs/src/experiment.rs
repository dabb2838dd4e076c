//! `moafs experiment`: paper experiments in-process (co-writing on the model disk, two-level
//! logging on the model flash card, readahead on the model disk and SSD).

use super::*;

#[derive(Args, Debug)]
pub(crate) struct ExperimentArgs {
    /// The experiment: `cowrite` (paper 000), `bytelog` (paper 003) or `readahead` (paper
    /// 001).
    pub(crate) which: String,
    /// Image size (default: cowrite 4G as the paper, bytelog 256M).
    #[arg(long)]
    pub(crate) size: Option<String>,
    /// Utilisations in percent, comma-separated (cowrite, paper: 0,10,30,50,70,90; bytelog:
    /// one, default 75 as the paper).
    #[arg(long)]
    pub(crate) utilisation: Option<String>,
    /// Layout score aging goes down to.
    #[arg(long, default_value_t = 0.8)]
    pub(crate) layout: f64,
    /// Tests, comma-separated: cowrite: seq-write, rand-write, dir-read, large-write,
    /// large-read, postmark-rfsl, postmark-fsl; bytelog: sqlite-delete, sqlite-wal, tio-1536,
    /// tio-128; readahead: rndrd-16k … rndrd-1m, seq-4k, seq-64k, seq-1m, inter, mmap-rand,
    /// mmap-seq (default: all).
    #[arg(long)]
    pub(crate) tests: Option<String>,
    /// Multiply the small-file and PostMark tests' file counts (1 = the paper's); bytelog:
    /// the operations per workload (1 = 2,000 SQLite transactions, 20,000 tiobench writes);
    /// readahead: the random requests (1 = the paper's 1,000).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) scale: f64,
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Write one SVG plot per test into this directory.
    #[arg(long)]
    pub(crate) svg_dir: Option<PathBuf>,
    /// Run nothing: print the table (and write the plots) of a saved --json report.
    #[arg(long)]
    pub(crate) from_json: Option<PathBuf>,
}

pub(crate) fn cmd_experiment(a: &ExperimentArgs) -> Result<(), String> {
    use moafs_bench::cowrite_exp::{self, ExpConfig};
    match a.which.as_str() {
        "cowrite" => {}
        "bytelog" => return cmd_bytelog(a),
        "readahead" => return cmd_readahead(a),
        w => {
            return Err(format!(
                "unknown experiment {w:?}; there are: cowrite, bytelog, readahead"
            ))
        }
    }
    let size = moafs_core::parse_size(a.size.as_deref().unwrap_or("4G"))
        .map_err(|e| format!("--size: {e}"))?;
    if !(64 << 20..=64 << 30).contains(&size) {
        return Err("--size: between 64M and 64G (the image is held in memory)".into());
    }
    let utilisations = a
        .utilisation
        .as_deref()
        .unwrap_or("0,10,30,50,70,90")
        .split(',')
        .map(|u| match u.trim().parse::<f64>() {
            Ok(p) if (0.0..=95.0).contains(&p) => Ok(p / 100.0),
            _ => Err(format!("--utilisation: {u:?} is not a percentage in 0..95")),
        })
        .collect::<Result<Vec<f64>, String>>()?;
    if !(0.0..=1.0).contains(&a.layout) {
        return Err("--layout: a score in 0..1".into());
    }
    let d = ExpConfig::default();
    let cfg = ExpConfig {
        size,
        utilisations,
        layout: a.layout,
        per_dir: scaled(a, d.per_dir)?,
        // Large files: an eighth of the image at the paper's 4 GiB, scaled with the image.
        large_size: (d.large_size as f64 * size as f64 / (4u64 << 30) as f64) as u64 & !0xfffff,
        postmark_scale: a.scale,
        tests: tests_of(a, &d.tests, cowrite_exp::TESTS)?,
        seed: a.seed,
        ..d
    };
    report(
        a,
        || cowrite_exp::run(&cfg, &mut |line| say!("{line}")),
        cowrite_exp::table,
        cowrite_exp::plots,
    )
}

/// `--tests` (comma-separated, each one of `known`), or `default`.
fn tests_of(a: &ExperimentArgs, default: &[String], known: &[&str]) -> Result<Vec<String>, String> {
    let tests: Vec<String> = match &a.tests {
        Some(t) => t.split(',').map(|s| s.trim().to_string()).collect(),
        None => default.to_vec(),
    };
    match tests.iter().find(|t| !known.contains(&t.as_str())) {
        Some(t) => Err(format!(
            "--tests: unknown test {t:?}; there are: {}",
            known.join(", ")
        )),
        None => Ok(tests),
    }
}

/// `n` multiplied by `--scale` (in (0, 10]), at least 1.
fn scaled(a: &ExperimentArgs, n: usize) -> Result<usize, String> {
    if !(a.scale > 0.0 && a.scale <= 10.0) {
        return Err("--scale: in (0, 10]".into());
    }
    Ok(((n as f64 * a.scale).round() as usize).max(1))
}

/// An experiment's plots: (file name, SVG) each.
type Plots<R> = fn(&R) -> Result<Vec<(String, String)>, String>;

/// Runs an experiment (or reads the report `--from-json` saved), prints its table, and
/// writes `--json` and the `--svg-dir` plots.
fn report<R: serde::Serialize + serde::de::DeserializeOwned>(
    a: &ExperimentArgs,
    run: impl FnOnce() -> std::io::Result<R>,
    table: fn(&R) -> String,
    plots: Plots<R>,
) -> Result<(), String> {
    // the environment of the measurement: captured before it runs, or the saved report's own
    let capture = || {
        serde_json::to_value(moafs_bench::env::Environment::capture(
            env!("MOAFS_COMMIT"),
            env!("CARGO_PKG_VERSION"),
            None,
        ))
        .unwrap_or_default()
    };
    let mut environment = a.from_json.is_none().then(capture);
    let report: R = match &a.from_json {
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a saved experiment: {e}", p.display()))?;
            environment = v.get("environment").filter(|e| e.is_object()).cloned();
            serde_json::from_value(v)
                .map_err(|e| format!("{}: not a saved experiment: {e}", p.display()))?
        }
        None => run().map_err(|e| e.to_string())?,
    };
    say!("\n{}", table(&report));
    if let Some(p) = &a.json {
        let mut v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        let environment = match environment {
            Some(e) => e,
            None => {
                // a report saved before environments were recorded
                let mut e = capture();
                e["note"] = "captured when this file was written from a saved report that \
                             had none, not when it was measured"
                    .into();
                e
            }
        };
        if let Some(o) = v.as_object_mut() {
            o.insert("environment".to_string(), environment);
        }
        let s = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        std::fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(dir) = &a.svg_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, svg) in plots(&report)? {
            let p = dir.join(name);
            std::fs::write(&p, svg).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(())
}

/// `moafs experiment readahead` (paper 001 on the model disk and SSD).
fn cmd_readahead(a: &ExperimentArgs) -> Result<(), String> {
    use moafs_bench::readahead_exp::{self, ReadaheadExpConfig, TESTS};
    let d = ReadaheadExpConfig::default();
    if a.size.is_some() || a.utilisation.is_some() {
        return Err("readahead takes no --size or --utilisation (32 files of 16 MiB)".into());
    }
    let tests = tests_of(a, &d.tests, TESTS)?;
    let cfg = ReadaheadExpConfig {
        requests: scaled(a, d.requests)?,
        tests,
        seed: a.seed,
        ..d
    };
    report(
        a,
        || readahead_exp::run(&cfg, &mut |line| say!("{line}")),
        readahead_exp::table,
        readahead_exp::plots,
    )
}

/// `moafs experiment bytelog` (paper 003 on the model flash card).
fn cmd_bytelog(a: &ExperimentArgs) -> Result<(), String> {
    use moafs_bench::bytelog_exp::{self, BytelogExpConfig, WORKLOADS};
    let d = BytelogExpConfig::default();
    let size = moafs_core::parse_size(a.size.as_deref().unwrap_or("256M"))
        .map_err(|e| format!("--size: {e}"))?;
    if !(128 << 20..=4 << 30).contains(&size) {
        return Err("--size: between 128M and 4G (the image is held in memory)".into());
    }
    let utilisation = match a.utilisation.as_deref() {
        None => d.utilisation,
        Some(u) => match u.trim().parse::<f64>() {
            Ok(p) if (0.0..=85.0).contains(&p) => p / 100.0,
            _ => {
                return Err(format!(
                    "--utilisation: {u:?} is not one percentage in 0..85"
                ))
            }
        },
    };
    let workloads = tests_of(a, &d.workloads, WORKLOADS)?;
    let cfg = BytelogExpConfig {
        size,
        utilisation,
        ops: scaled(a, d.ops)?,
        workloads,
        seed: a.seed,
    };
    report(
        a,
        || bytelog_exp::run(&cfg, &mut |line| say!("{line}")),
        bytelog_exp::table,
        bytelog_exp::plots,
    )
}
