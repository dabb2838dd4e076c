//! The comparison chart: for each workload, each target's rate as a multiple of the
//! baseline's (the first target), paired by repetition, with its 95 % interval as a whisker,
//! on a log scale around 1 (a bar up: faster than the baseline; down: slower). The `--html`
//! report opens with it, `moafs bench --chart` writes it alone, and the evidence run
//! (`scripts/evidence.sh`) draws README's from its result files.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

/// One target's bar in a workload's group.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub target: String,
    /// Geometric mean of the paired ratios to the baseline (1 for the baseline itself).
    pub ratio: f64,
    /// The 95 % interval of the ratio (the ratio itself where there is none).
    pub low: f64,
    pub high: f64,
}

/// A workload's bars, one per target, in the targets' order.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// The groups of a `moafs bench` JSON document: each result's comparison with the first
/// target; the baseline's name.
pub fn groups_of(doc: &Value) -> (String, Vec<Group>) {
    let mut baseline = String::new();
    let mut groups = Vec::new();
    for res in doc["results"].as_array().into_iter().flatten() {
        let reports = res["reports"].as_array().cloned().unwrap_or_default();
        if baseline.is_empty() {
            baseline = reports
                .first()
                .and_then(|r| r["target"].as_str())
                .unwrap_or("")
                .to_string();
        }
        let bars = reports
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let c = &res["comparison"][i];
                let ratio = c["ratio_to_baseline"].as_f64()?;
                Some(Bar {
                    target: r["target"].as_str().unwrap_or("?").to_string(),
                    ratio,
                    low: c["ci95_low"].as_f64().unwrap_or(ratio),
                    high: c["ci95_high"].as_f64().unwrap_or(ratio),
                })
            })
            .collect();
        groups.push(Group {
            label: res["workload"].as_str().unwrap_or("?").to_string(),
            bars,
        });
    }
    (baseline, groups)
}

/// Fixed colours by target name, so that a target looks the same in every chart.
fn colour(target: &str, i: usize) -> RGBColor {
    let base = target.split(['@', ':']).next().unwrap_or(target);
    match base {
        "moafs" => RGBColor(0xd6, 0x27, 0x28),
        "ext4" => RGBColor(0x1f, 0x77, 0xb4),
        "xfs" => RGBColor(0x2c, 0xa0, 0x2c),
        "btrfs" => RGBColor(0x94, 0x67, 0xbd),
        "fuse2fs" => RGBColor(0x8c, 0x56, 0x4b),
        "memfs" => RGBColor(0xff, 0x7f, 0x0e),
        "passthrough" => RGBColor(0x7f, 0x7f, 0x7f),
        "ext4-fc" => RGBColor(0x17, 0xbe, 0xcf),
        _ => {
            let (r, g, b) = Palette99::pick(i).to_rgba().rgb();
            RGBColor(r, g, b)
        }
    }
}

/// A ratio with two significant digits at least (0.015 is not 0.01, 0.004 not 0.00).
fn ratio_label(r: f64) -> String {
    match r {
        r if r >= 0.1 => format!("{r:.2}"),
        r if r >= 0.001 => format!("{r:.3}"),
        r => format!("{r:.0e}"),
    }
}

/// The chart as an SVG document: `title` above, one group of bars per workload.
pub fn ratio_chart(title: &str, baseline: &str, groups: &[Group]) -> Result<String, String> {
    let targets: Vec<String> = {
        let mut t: Vec<String> = Vec::new();
        // the baseline is the line at 1, not a bar
        for b in groups.iter().flat_map(|g| &g.bars) {
            if b.target != baseline && !t.contains(&b.target) {
                t.push(b.target.clone());
            }
        }
        t
    };
    if groups.is_empty() || targets.is_empty() {
        return Err("nothing to chart".into());
    }
    // the y range: every bar and 1, with room for the whiskers; a whisker reaching further
    // (few repetitions make wide intervals) is cut at the edge
    let values = groups
        .iter()
        .flat_map(|g| &g.bars)
        .map(|b| b.ratio)
        .filter(|v| v.is_finite() && *v > 0.0);
    let (mut lo, mut hi) = (1.0f64, 1.0f64);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let (lo, hi) = (lo / 2.0, hi * 2.0);
    let n = groups.len();
    const LEGEND: u32 = 170;
    let width = (160 + 36 * n * targets.len()).clamp(480, 1400) as u32 + LEGEND;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (plot, legend) = root.split_horizontally(width - LEGEND);
        // the legend beside the plot, where no bar can hide it: the baseline's line first
        let text = ("sans-serif", 14).into_font();
        legend
            .draw(&PathElement::new(
                vec![(8, 60), (26, 60)],
                BLACK.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
        legend
            .draw(&Text::new(
                format!("{baseline} (1×)"),
                (32, 53),
                text.clone(),
            ))
            .map_err(|e| e.to_string())?;
        for (k, t) in targets.iter().enumerate() {
            let y = 84 + 24 * k as i32;
            legend
                .draw(&Rectangle::new(
                    [(10, y - 6), (24, y + 6)],
                    colour(t, k).filled(),
                ))
                .map_err(|e| e.to_string())?;
            legend
                .draw(&Text::new(t.clone(), (32, y - 7), text.clone()))
                .map_err(|e| e.to_string())?;
        }
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, (lo..hi).log_scale())
            .map_err(|e| e.to_string())?;
        let labels: Vec<String> = groups.iter().map(|g| g.label.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                // a label at each group's middle only
                if (x - (i as f64 + 0.5)).abs() < 1e-6 {
                    labels.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(format!("rate as a multiple of {baseline}'s (log scale)"))
            .y_label_formatter(&|y| format!("{}×", ratio_label(*y)))
            .draw()
            .map_err(|e| e.to_string())?;
        // the baseline
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 1.0), (n as f64, 1.0)],
                BLACK.stroke_width(1),
            )))
            .map_err(|e| e.to_string())?;
        let slot = 0.8 / targets.len() as f64;
        for (k, t) in targets.iter().enumerate() {
            let c = colour(t, k);
            let bars: Vec<(f64, &Bar)> = groups
                .iter()
                .enumerate()
                .filter_map(|(i, g)| {
                    g.bars
                        .iter()
                        .find(|b| &b.target == t)
                        .map(|b| (i as f64 + 0.1 + slot * k as f64, b))
                })
                .collect();
            chart
                .draw_series(bars.iter().map(|(x, b)| {
                    Rectangle::new(
                        [(*x + slot * 0.1, 1.0), (*x + slot * 0.9, b.ratio.max(lo))],
                        c.filled(),
                    )
                }))
                .map_err(|e| e.to_string())?;
            // each bar's ratio, written just beyond its end
            let small = ("sans-serif", 11).into_font();
            chart
                .draw_series(bars.iter().map(|(x, b)| {
                    let end = if b.ratio >= 1.0 {
                        b.ratio * 1.04
                    } else {
                        b.ratio / 1.04
                    };
                    let style = TextStyle::from(small.clone()).pos(Pos::new(
                        HPos::Center,
                        if b.ratio >= 1.0 {
                            VPos::Bottom
                        } else {
                            VPos::Top
                        },
                    ));
                    Text::new(
                        ratio_label(b.ratio),
                        (*x + slot * 0.5, end.clamp(lo, hi)),
                        style,
                    )
                }))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(bars.iter().map(|(x, b)| {
                    let mid = *x + slot * 0.5;
                    PathElement::new(
                        vec![(mid, b.low.max(lo)), (mid, b.high.min(hi))],
                        BLACK.stroke_width(1),
                    )
                }))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        serde_json::json!({"results": [
            {"workload": "varmail",
             "reports": [{"target": "ext4"}, {"target": "moafs"}, {"target": "memfs"}],
             "comparison": [{"ratio_to_baseline": 1.0},
                            {"ratio_to_baseline": 0.43, "ci95_low": 0.40, "ci95_high": 0.47},
                            {"ratio_to_baseline": 1.08, "ci95_low": 1.01, "ci95_high": 1.15}]},
            {"workload": "postmark-quick",
             "reports": [{"target": "ext4"}, {"target": "moafs"}],
             "comparison": [{"ratio_to_baseline": 1.0},
                            {"ratio_to_baseline": 0.3, "ci95_low": 0.25, "ci95_high": 0.35}]}
        ]})
    }

    #[test]
    fn groups_follow_the_comparison() {
        let (base, g) = groups_of(&doc());
        assert_eq!(base, "ext4");
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].bars.len(), 3);
        assert_eq!(g[0].bars[1].target, "moafs");
        assert_eq!((g[0].bars[1].low, g[0].bars[1].high), (0.40, 0.47));
        // the baseline has no interval: its ratio stands for both ends
        assert_eq!((g[0].bars[0].low, g[0].bars[0].high), (1.0, 1.0));
        assert_eq!(g[1].bars.len(), 2);
    }

    #[test]
    fn the_chart_names_every_workload_and_target() {
        let (base, g) = groups_of(&doc());
        let svg = ratio_chart("moafs beside ext4", &base, &g).unwrap();
        assert!(svg.starts_with("<svg"));
        for w in [
            "varmail",
            "postmark-quick",
            "moafs",
            "ext4",
            "memfs",
            "moafs beside ext4",
        ] {
            assert!(svg.contains(w), "{w} missing");
        }
        // one bar per target and workload (5), each in its target's colour
        // moafs's two bars and its legend key, in its colour; no bar for the baseline
        assert_eq!(svg.to_lowercase().matches("fill=\"#d62728\"").count(), 3);
        assert_eq!(svg.to_lowercase().matches("fill=\"#1f77b4\"").count(), 0);
        assert!(ratio_chart("x", "ext4", &[]).is_err());
    }
}
