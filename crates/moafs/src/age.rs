//! `moafs age`: ages an image with a seeded create / grow / delete history.

use super::*;

#[derive(Args, Debug)]
pub(crate) struct AgeArgs {
    /// Share of the free space to fill (0 .. 0.95).
    #[arg(long, default_value_t = 0.5)]
    pub(crate) utilisation: f64,
    /// Layout score to reach (at most; Smith & Seltzer; 1 = contiguous).
    #[arg(long, default_value_t = 0.8)]
    pub(crate) layout: f64,
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Stop after this many steps even when the targets are not reached (exit 1).
    #[arg(long, default_value_t = 2_000_000)]
    pub(crate) max_steps: u64,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    pub(crate) image: PathBuf,
}

pub(crate) fn cmd_age(a: &AgeArgs) -> Result<(), String> {
    let dev = open_image(&a.image, FileDeviceOptions::default())?;
    let dev: std::sync::Arc<dyn moafs_core::device::BlockDevice> = std::sync::Arc::new(dev);
    let fs = Fs::mount(dev.clone(), moafs_core::fs::MountOptions::default())
        .map_err(|e| fs_error(&a.image, e))?;
    let cfg = moafs_bench::aging::AgingConfig {
        utilisation: a.utilisation,
        layout: a.layout,
        max_steps: a.max_steps,
        seed: a.seed,
        ..Default::default()
    };
    let res = moafs_bench::aging::age(&fs, dev.as_ref(), &cfg);
    let unmounted = fs.unmount().map_err(|e| fs_error(&a.image, e));
    let res = res.map_err(|e| format!("{}: {e}", a.image.display()))?;
    unmounted?;
    if a.json {
        let s = serde_json::to_string_pretty(&res).map_err(|e| e.to_string())?;
        say!("{s}");
    } else {
        say!(
            "aged in {} steps: {} files ({} deleted on the way), utilisation {:.3}, layout \
             score {:.3}",
            res.steps,
            res.files,
            res.files_deleted,
            res.utilisation,
            res.layout.score
        );
    }
    if !res.reached {
        return Err(format!(
            "targets not reached in {} steps (utilisation {}, layout {})",
            res.steps, a.utilisation, a.layout
        ));
    }
    Ok(())
}
