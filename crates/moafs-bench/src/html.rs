//! The static HTML report: per workload, an SVG plot of every target's mean rate with its
//! 95 % confidence interval, and a table with the comparison against the first target.

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

/// The report of a `moafs bench` JSON document (schema 2).
pub fn report(doc: &Value) -> String {
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>moafs bench</title>\n\
         <style>body{font-family:sans-serif;max-width:70em;margin:2em auto}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;\
         text-align:right}</style></head><body>\n<h1>moafs bench</h1>\n",
    );
    html.push_str(&format!(
        "<p>preset {}, {} repetitions, seed {}, cache {}. Bars: mean; whiskers: 95 % \
         confidence interval (Student t). Overlapping intervals are reported as no \
         difference.</p>\n",
        esc(doc["preset"].as_str().unwrap_or("none")),
        doc["reps"],
        doc["seed"],
        esc(doc["cache"].as_str().unwrap_or("")),
    ));
    for res in doc["results"].as_array().into_iter().flatten() {
        let workload = res["workload"].as_str().unwrap_or("?");
        let reports = res["reports"].as_array().cloned().unwrap_or_default();
        let unit = reports
            .first()
            .and_then(|r| r["unit"].as_str())
            .unwrap_or("ops")
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
             <th>vs first</th><th>verdict</th><th>device bytes written / op</th></tr>\n",
            esc(&unit)
        ));
        for (i, r) in reports.iter().enumerate() {
            let s = &r["rate"];
            let c = &res["comparison"][i];
            let per_op = r["device_bytes_written_per_op"]["mean"]
                .as_f64()
                .map_or("-".to_string(), |v| format!("{v:.0}"));
            html.push_str(&format!(
                "<tr><td>{}</td><td>{:.1}</td><td>± {:.1}</td><td>{}</td><td>{:.2}×</td>\
                 <td>{}</td><td>{}</td></tr>\n",
                esc(r["target"].as_str().unwrap_or("?")),
                s["mean"].as_f64().unwrap_or(0.0),
                s["ci95"].as_f64().unwrap_or(0.0),
                s["n"],
                c["ratio_to_baseline"].as_f64().unwrap_or(0.0),
                esc(c["verdict"].as_str().unwrap_or("")),
                per_op
            ));
        }
        html.push_str("</table>\n");
    }
    html.push_str("</body></html>\n");
    html
}
