//! `moafs experiment`: paper experiments in-process (co-writing on the model disk).

use super::*;

#[derive(Args, Debug)]
pub(crate) struct ExperimentArgs {
    /// The experiment: `cowrite`.
    pub(crate) which: String,
    /// Image size (paper: 4G).
    #[arg(long, default_value = "4G")]
    pub(crate) size: String,
    /// Utilisations in percent, comma-separated (paper: 0,10,30,50,70,90).
    #[arg(long, default_value = "0,10,30,50,70,90")]
    pub(crate) utilisation: String,
    /// Layout score aging goes down to.
    #[arg(long, default_value_t = 0.8)]
    pub(crate) layout: f64,
    /// Tests, comma-separated: seq-write, rand-write, dir-read, large-write, large-read,
    /// postmark-rfsl, postmark-fsl (default: all).
    #[arg(long)]
    pub(crate) tests: Option<String>,
    /// Multiply the small-file and PostMark tests' file counts (1 = the paper's).
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
    if a.which != "cowrite" {
        return Err(format!(
            "unknown experiment {:?}; there is: cowrite",
            a.which
        ));
    }
    let size = moafs_core::parse_size(&a.size).map_err(|e| format!("--size: {e}"))?;
    if !(64 << 20..=64 << 30).contains(&size) {
        return Err("--size: between 64M and 64G (the image is held in memory)".into());
    }
    let utilisations = a
        .utilisation
        .split(',')
        .map(|u| match u.trim().parse::<f64>() {
            Ok(p) if (0.0..=95.0).contains(&p) => Ok(p / 100.0),
            _ => Err(format!("--utilisation: {u:?} is not a percentage in 0..95")),
        })
        .collect::<Result<Vec<f64>, String>>()?;
    if !(0.0..=1.0).contains(&a.layout) {
        return Err("--layout: a score in 0..1".into());
    }
    if !(a.scale > 0.0 && a.scale <= 10.0) {
        return Err("--scale: in (0, 10]".into());
    }
    let d = ExpConfig::default();
    let scale = |n: usize| ((n as f64 * a.scale).round() as usize).max(1);
    let cfg = ExpConfig {
        size,
        utilisations,
        layout: a.layout,
        per_dir: scale(d.per_dir),
        // Large files: an eighth of the image at the paper's 4 GiB, scaled with the image.
        large_size: (d.large_size as f64 * size as f64 / (4u64 << 30) as f64) as u64 & !0xfffff,
        postmark_scale: a.scale,
        tests: match &a.tests {
            Some(t) => t.split(',').map(|s| s.trim().to_string()).collect(),
            None => d.tests.clone(),
        },
        seed: a.seed,
        ..d
    };
    let report = match &a.from_json {
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
            serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a saved experiment: {e}", p.display()))?
        }
        None => cowrite_exp::run(&cfg, &mut |line| say!("{line}")).map_err(|e| e.to_string())?,
    };
    say!("\n{}", cowrite_exp::table(&report));
    if let Some(p) = &a.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(dir) = &a.svg_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, svg) in cowrite_exp::plots(&report)? {
            let p = dir.join(name);
            std::fs::write(&p, svg).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(())
}
