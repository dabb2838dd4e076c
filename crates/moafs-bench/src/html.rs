//! The static HTML report: the environment, then per workload an SVG plot of every target's
//! mean rate with its 95 % confidence interval, a table with the paired comparison against the
//! first target and the outlying runs, the latency percentiles by operation type, the mount
//! options, and the order the targets ran in.

use plotters::prelude::*;
use serde_json::Value;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One bar per target: mean with the interval as a whisker.
fn plot(title: &str, unit: &str, bars: &[(String, f64, f64, f64)]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let width = 160 + 110 * bars.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (width, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let top = bars.iter().map(|b| b.3).fold(0.0f64, f64::max).max(1e-9) * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d((0..bars.len()).into_segmented(), 0.0..top)
            .map_err(|e| e.to_string())?;
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(format!("{unit}/s"))
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), b.1),
                    ],
                    BLUE.mix(0.5).filled(),
                );
                r.set_margin(0, 0, 18, 18);
                r
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                PathElement::new(
                    vec![
                        (SegmentValue::CenterOf(i), b.2),
                        (SegmentValue::CenterOf(i), b.3),
                    ],
                    BLACK.stroke_width(2),
                )
            }))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// A number with at most `d` decimals, or "-" when absent.
fn num(v: &Value, d: usize) -> String {
    v.as_f64().map_or("-".to_string(), |x| format!("{x:.d$}"))
}

/// The environment record as a definition list (schema 3 and later; nothing for older
/// documents).
fn environment(e: &Value) -> String {
    if !e.is_object() {
        return String::new();
    }
    let s = |v: &Value| match v {
        Value::Null => "none".to_string(),
        Value::String(x) => esc(x),
        other => esc(&other.to_string()),
    };
    let gib = |v: &Value| {
        v.as_f64()
            .map_or_else(|| s(v), |b| format!("{:.1} GiB", b / (1u64 << 30) as f64))
    };
    let limit = match e["memory_limit"].as_str().map(str::parse::<f64>) {
        Some(Ok(b)) => format!("{:.1} GiB", b / (1u64 << 30) as f64),
        _ => s(&e["memory_limit"]),
    };
    let b = &e["backing"];
    let backing = if b.is_object() {
        format!(
            "{}: {} on {} ({}), device {}, scheduler {}, rotational {}",
            s(&b["path"]),
            s(&b["fs_type"]),
            s(&b["source"]),
            s(&b["mount_options"]),
            s(&b["device"]),
            s(&b["scheduler"]),
            s(&b["rotational"])
        )
    } else {
        "-".to_string()
    };
    let tools: Vec<String> = e["tool_versions"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{}: {}", esc(k), v.as_str().map_or("-".to_string(), esc)))
        .collect();
    let rows = [
        ("run id", s(&e["run_id"])),
        ("time (UTC)", s(&e["time"])),
        (
            "moafs",
            format!("{} (commit {})", s(&e["moafs_version"]), s(&e["commit"])),
        ),
        ("host", s(&e["hostname"])),
        (
            "kernel",
            format!(
                "{} ({})",
                s(&e["kernel"]["release"]),
                s(&e["kernel"]["version"])
            ),
        ),
        (
            "CPU",
            format!(
                "{} × {} online ({} available), governor {}",
                s(&e["cpu_model"]),
                e["cpus"]["online"],
                e["cpus"]["available"],
                s(&e["governor"])
            ),
        ),
        (
            "memory",
            format!("{}, limit in force {limit}", gib(&e["memory_bytes"])),
        ),
        ("backing", backing),
        ("tools", tools.join("; ")),
    ];
    let mut h = String::from("<table class=\"env\">\n");
    for (k, v) in rows {
        h.push_str(&format!("<tr><th>{k}</th><td>{v}</td></tr>\n"));
    }
    h.push_str("</table>\n");
    h
}

/// Outliers as `run 3 (123.4; tukey+mad)`.
fn outliers(o: &Value, d: usize) -> String {
    let list: Vec<String> = o
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let rules: Vec<&str> = o["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            format!(
                "run {} ({}; {})",
                o["rep"],
                num(&o["value"], d),
                rules.join("+")
            )
        })
        .collect();
    if list.is_empty() {
        "-".to_string()
    } else {
        esc(&list.join(", "))
    }
}

/// The report of a `moafs bench` JSON document (schema 4; older ones without the new parts:
/// "-" where a number is missing).
pub fn report(doc: &Value) -> String {
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>moafs bench</title>\n\
         <style>body{font-family:sans-serif;max-width:70em;margin:2em auto}\
         table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;\
         padding:.2em .6em;text-align:right}table.env td,table.env th{text-align:left}\
         </style></head><body>\n<h1>moafs bench</h1>\n",
    );
    html.push_str(&environment(&doc["environment"]));
    // the comparison at a glance, when there is one
    let (baseline, groups) = crate::chart::groups_of(doc);
    if groups.iter().any(|g| g.bars.len() > 1) {
        let title = format!("each target's rate as a multiple of {baseline}'s");
        match crate::chart::ratio_chart(&title, &baseline, &groups) {
            Ok(svg) => html.push_str(&format!("<h2>Summary</h2>\n{svg}\n")),
            Err(e) => html.push_str(&format!("<p>(no summary chart: {})</p>", esc(&e))),
        }
    }
    html.push_str(&format!(
        "<p>preset {}, {} repetitions, base seed {} (each repetition its own seed, every \
         target of a repetition the same), cache {}. Targets run in a random order within each \
         repetition. Bars: mean rate; whiskers: 95 % confidence interval (Student t). The \
         comparison is paired by repetition: the geometric mean of the ratios of rates with \
         the 95 % t-interval of the mean log ratio; <i>higher</i>/<i>lower</i> when that \
         interval excludes 1, <i>no difference</i> only when it contains 1 and lies within \
         ±{:.0} % of it, otherwise <i>inconclusive</i>. Outliers (Tukey fences, 3 MADs) are \
         listed and kept. Device columns: bytes and write requests a managed target's loop \
         device completed from right after the mount to after the unmount (setup, run, sync \
         and unmount write-back), per operation the workload counted.</p>\n",
        esc(doc["preset"].as_str().unwrap_or("none")),
        doc["reps"],
        doc["seed"],
        esc(doc["cache"].as_str().unwrap_or("")),
        crate::stats::NO_DIFFERENCE_BAND * 100.0,
    ));
    for res in doc["results"].as_array().into_iter().flatten() {
        let workload = res["workload"].as_str().unwrap_or("?");
        let reports = res["reports"].as_array().cloned().unwrap_or_default();
        let unit = reports
            .first()
            .and_then(|r| r["unit"].as_str())
            .unwrap_or("ops")
            .to_string();
        let base = reports
            .first()
            .and_then(|r| r["target"].as_str())
            .unwrap_or("the first")
            .to_string();
        let bars: Vec<(String, f64, f64, f64)> = reports
            .iter()
            .map(|r| {
                let s = &r["rate"];
                let mean = s["mean"].as_f64().unwrap_or(0.0);
                let ci = s["ci95"].as_f64().unwrap_or(0.0);
                (
                    r["target"].as_str().unwrap_or("?").to_string(),
                    mean,
                    (mean - ci).max(0.0),
                    mean + ci,
                )
            })
            .collect();
        html.push_str(&format!("<h2>{}</h2>\n", esc(workload)));
        match plot(workload, &unit, &bars) {
            Ok(svg) => html.push_str(&svg),
            Err(e) => html.push_str(&format!("<p>(no plot: {})</p>", esc(&e))),
        }
        html.push_str(&format!(
            "\n<table><tr><th>target</th><th>{}/s mean</th><th>95 % CI</th><th>n</th>\
             <th>× {}'s rate (paired)</th><th>95 % CI of the ratio</th><th>verdict</th>\
             <th>outlying runs</th><th>device bytes written / op</th>\
             <th>device write requests / op</th><th>device bytes / byte written</th></tr>\n",
            esc(&unit),
            esc(&base)
        ));
        for (i, r) in reports.iter().enumerate() {
            let s = &r["rate"];
            let c = &res["comparison"][i];
            let ci = if c["ci95_low"].is_f64() {
                format!("{} – {}", num(&c["ci95_low"], 3), num(&c["ci95_high"], 3))
            } else {
                "-".to_string()
            };
            html.push_str(&format!(
                "<tr><td>{}</td><td>{:.1}</td><td>± {:.1}</td><td>{}</td><td>{:.2}×</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                esc(r["target"].as_str().unwrap_or("?")),
                s["mean"].as_f64().unwrap_or(0.0),
                s["ci95"].as_f64().unwrap_or(0.0),
                s["n"],
                c["ratio_to_baseline"].as_f64().unwrap_or(0.0),
                ci,
                esc(c["verdict"].as_str().unwrap_or("")),
                outliers(&r["rate_outliers"], 1),
                num(&r["device_bytes_written_per_op"]["mean"], 0),
                num(&r["device_writes_per_op"]["mean"], 3),
                num(&r["device_bytes_per_byte_written"]["mean"], 3),
            ));
        }
        html.push_str("</table>\n");
        // latency percentiles by operation type
        let mut lat = String::new();
        for r in &reports {
            for (op, l) in r["latency"].as_object().into_iter().flatten() {
                lat.push_str(&format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td>{}</td><td>{}</td></tr>\n",
                    esc(r["target"].as_str().unwrap_or("?")),
                    esc(op),
                    num(&l["p50_us"], 0),
                    num(&l["p99_us"], 0),
                    num(&l["p999_us"], 0),
                    num(&l["max_us"], 0),
                    num(&l["count"], 0),
                ));
            }
        }
        if !lat.is_empty() {
            html.push_str(
                "<p>Latency, µs: each percentile the mean over the runs of that run's \
                 percentile; max the largest of any run.</p>\n<table><tr><th>target</th>\
                 <th>operation</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th>\
                 <th>ops per run</th></tr>\n",
            );
            html.push_str(&lat);
            html.push_str("</table>\n");
        }
        // mount options, and the order the targets ran in
        let mut mounts = String::new();
        for r in &reports {
            for m in r["mount_options"].as_array().into_iter().flatten() {
                mounts.push_str(&format!(
                    "<li>{}: {}</li>",
                    esc(r["target"].as_str().unwrap_or("?")),
                    esc(m.as_str().unwrap_or(""))
                ));
            }
        }
        if !mounts.is_empty() {
            html.push_str(&format!("<p>Mounted:</p><ul>{mounts}</ul>\n"));
        }
        // every run: its seed, rate and the page cache it started from
        let mut runs = String::new();
        let mib = |v: &Value| {
            v.as_f64().map_or("-".to_string(), |b| {
                format!("{:.0}", b / (1u64 << 20) as f64)
            })
        };
        for r in &reports {
            for run in r["runs"].as_array().into_iter().flatten() {
                let c = &run["cache_before"];
                runs.push_str(&format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td>{}</td><td>{}</td></tr>\n",
                    esc(r["target"].as_str().unwrap_or("?")),
                    run["rep"],
                    run["seed"],
                    num(&run["outcome"]["rate"], 1),
                    mib(&c["cached_bytes"]),
                    mib(&c["dirty_bytes"]),
                    mib(&c["writeback_bytes"]),
                    mib(&c["mem_free_bytes"]),
                ));
            }
        }
        if !runs.is_empty() {
            html.push_str(&format!(
                "<p>Runs, and the page cache at the start of each measured phase (MiB, \
                 /proc/meminfo):</p>\n<table><tr><th>target</th><th>run</th><th>seed</th>\
                 <th>{}/s</th><th>cached</th><th>dirty</th><th>writeback</th><th>free</th>\
                 </tr>\n{runs}</table>\n",
                esc(&unit)
            ));
        }
        let orders: Vec<String> = res["repetitions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let names: Vec<&str> = r["order"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                format!(
                    "<li>run {} (seed {}): {}</li>",
                    r["rep"],
                    r["seed"],
                    esc(&names.join(", "))
                )
            })
            .collect();
        if !orders.is_empty() {
            html.push_str(&format!(
                "<p>Order of the targets in each repetition:</p><ul>{}</ul>\n",
                orders.join("")
            ));
        }
    }
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_3_parts_are_shown() {
        let doc = serde_json::json!({
            "schema": 3, "preset": null, "reps": 2, "seed": 1, "cache": "fresh",
            "environment": {"run_id": "20261126T000000-abc1234-00ff", "commit": "abc1234",
                "backing": {"path": "/dev/shm", "fs_type": "tmpfs", "device": null},
                "kernel": {"release": "6.1.0", "version": "#1"}, "cpus": {"online": 2,
                "available": 2}, "memory_bytes": 1073741824u64, "memory_limit": "max",
                "tool_versions": {"fio": "fio-3.33", "postmark": null}},
            "results": [{"workload": "varmail",
                "repetitions": [{"rep": 1, "seed": 7, "order": ["b", "a"]}],
                "comparison": [
                    {"target": "a", "ratio_to_baseline": 1.0, "ci95_low": 1.0,
                     "ci95_high": 1.0, "verdict": "no_difference"},
                    {"target": "b", "ratio_to_baseline": 0.26, "ci95_low": 0.24,
                     "ci95_high": 0.28, "verdict": "lower"}],
                "reports": [
                    {"target": "a", "unit": "ops", "rate": {"mean": 10.0, "ci95": 1.0, "n": 2},
                     "rate_outliers": [{"rep": 2, "value": 99.0, "rules": ["tukey", "mad"]}],
                     "latency": {"fsync": {"p50_us": 120.0, "p99_us": 4567.0,
                        "p999_us": 8901.0, "max_us": 9999.0, "count": 10.0}},
                     "mount_options": ["ext4 /dev/loop0 rw,relatime"],
                     "runs": [{"rep": 1, "seed": 7, "outcome": {"rate": 10.5},
                        "cache_before": {"cached_bytes": 2097152, "dirty_bytes": 1048576,
                            "writeback_bytes": 0, "mem_free_bytes": 10485760}}]},
                    {"target": "b", "unit": "ops", "rate": {"mean": 2.6, "ci95": 0.1, "n": 2},
                     "device_bytes_written_per_op": {"mean": 4096.0},
                     "device_writes_per_op": {"mean": 0.125},
                     "device_bytes_per_byte_written": {"mean": 1.5}}]}]
        });
        let html = report(&doc);
        for want in [
            "20261126T000000-abc1234-00ff",
            "6.1.0",
            "fio-3.33",
            "postmark: -",
            "limit in force max",
            "device none",
            "0.240 – 0.280",
            "run 2 (99.0; tukey+mad)",
            "<td>fsync</td><td>120</td><td>4567</td><td>8901</td>",
            "ext4 /dev/loop0 rw,relatime",
            "run 1 (seed 7): b, a",
            "<td>a</td><td>1</td><td>7</td><td>10.5</td><td>2</td><td>1</td><td>0</td><td>10</td>",
            "× a&#39;s rate",
            "device write requests / op",
            "<td>4096</td><td>0.125</td><td>1.500</td>",
            "<td>-</td><td>-</td><td>-</td></tr>",
        ] {
            assert!(html.contains(&want.replace("&#39;", "'")), "{want}: {html}");
        }
    }
}
