//! `moafs inspect`: prints an image's structures (and layout score).

use super::*;

#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also the layout score of the files (Smith & Seltzer) and a histogram of free runs
    /// (reads every inode: slower).
    #[arg(long)]
    pub(crate) layout: bool,
    /// The image's NVM tier: its live records are counted too.
    #[arg(long)]
    pub(crate) nvm: Option<PathBuf>,
    pub(crate) image: PathBuf,
}

pub(crate) fn cmd_inspect(a: &InspectArgs) -> Result<(), String> {
    let dev = FileDevice::open(
        &a.image,
        FileDeviceOptions {
            read_only: true,
            direct: false,
            lock: false,
        },
    )
    .map_err(|e| dev_error(&a.image, e))?;
    let tier = match a.nvm.as_deref() {
        Some(p) => Some(mount::open_tier(p, Default::default())?.0),
        None => None,
    };
    let rep =
        moafs_core::fsck::inspect_with(&dev, tier.as_deref()).map_err(|e| fs_error(&a.image, e))?;
    let mut v = serde_json::to_value(&rep).map_err(|e| e.to_string())?;
    let layout = if a.layout {
        let (l, free) = moafs_core::fsck::layout(&dev).map_err(|e| fs_error(&a.image, e))?;
        v["layout"] = serde_json::to_value(l).map_err(|e| e.to_string())?;
        v["free_runs"] = serde_json::to_value(&free).map_err(|e| e.to_string())?;
        Some((l, free))
    } else {
        None
    };
    if a.json {
        let s = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        say!("{s}");
        return Ok(());
    }
    if let (Some(map), Some((l, free))) = (v.as_object_mut(), &layout) {
        map.remove("layout");
        map.remove("free_runs");
        print_human(&v);
        say!(
            "layout score: {:.3} ({} of {} blocks after their predecessor, {} files of 2+ blocks)",
            l.score,
            l.contiguous,
            l.blocks,
            l.files
        );
        say!(
            "free runs: {} runs, {} free blocks, largest {} blocks",
            free.runs,
            free.free_blocks,
            free.largest
        );
        for (low, n) in &free.histogram {
            let shown = if *low == 1 {
                "1".to_string()
            } else {
                format!("{low}-{}", low * 2 - 1)
            };
            say!("  {shown:>14} blocks: {n} runs");
        }
        return Ok(());
    }
    print_human(&v);
    Ok(())
}

pub(crate) fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints a report: scalars as `key: value`, lists of objects as one line per item.
pub(crate) fn print_human(v: &serde_json::Value) {
    let serde_json::Value::Object(map) = v else {
        say!("{}", scalar(v));
        return;
    };
    let width = map.keys().map(|k| k.len()).max().unwrap_or(0);
    let mut lists = Vec::new();
    for (k, val) in map {
        match val {
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => lists.push((k, val)),
            _ => say!("{k:width$}  {}", scalar(val)),
        }
    }
    for (k, val) in lists {
        say!("{k}:");
        let items: Vec<&serde_json::Value> = match val {
            serde_json::Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        for item in items {
            match item {
                serde_json::Value::Object(o) => {
                    let line: Vec<String> = o
                        .iter()
                        .filter(|(_, x)| !x.is_null())
                        .map(|(k, x)| format!("{k}={}", scalar(x)))
                        .collect();
                    say!("  {}", line.join(" "));
                }
                other => say!("  {}", scalar(other)),
            }
        }
    }
}
