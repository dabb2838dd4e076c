//! The `--html` report in a real browser: headless Chromium renders a report of three
//! workloads and four targets, and the test looks at the screenshot — not blank, the summary
//! chart there (moafs's red bars and the other targets' colours), and one plot per workload
//! (the bands of the per-workload plots' blue bars, counted down the page).

use std::path::Path;
use std::process::Command;

fn doc() -> serde_json::Value {
    let result = |w: &str, moafs: f64| {
        serde_json::json!({"workload": w,
          "reports": [
            {"target": "ext4", "unit": "ops", "rate": {"mean": 100.0, "ci95": 5.0, "n": 3}},
            {"target": "moafs", "unit": "ops", "rate": {"mean": 100.0 * moafs, "ci95": 4.0, "n": 3}},
            {"target": "memfs", "unit": "ops", "rate": {"mean": 120.0, "ci95": 6.0, "n": 3}},
            {"target": "fuse2fs", "unit": "ops", "rate": {"mean": 20.0, "ci95": 2.0, "n": 3}}],
          "comparison": [
            {"ratio_to_baseline": 1.0},
            {"ratio_to_baseline": moafs, "ci95_low": moafs * 0.9, "ci95_high": moafs * 1.1},
            {"ratio_to_baseline": 1.2, "ci95_low": 1.1, "ci95_high": 1.3},
            {"ratio_to_baseline": 0.2, "ci95_low": 0.18, "ci95_high": 0.22}]})
    };
    serde_json::json!({"schema": 4, "reps": 3, "seed": 1, "cache": "fresh",
        "results": [result("varmail", 0.45), result("postmark-quick", 0.3),
                    result("webproxy", 0.6)]})
}

/// Headless Chromium: the first of its names on the PATH.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new("sh")
                .args(["-c", &format!("command -v {c}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// The screenshot as RGB rows.
fn screenshot(html: &Path, png: &Path, width: u32, height: u32) -> (u32, u32, Vec<u8>) {
    let browser = chromium()
        .expect("headless Chromium is missing: apt-get install chromium (./run test installs it)");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            &format!("--window-size={width},{height}"),
            &format!("--screenshot={}", png.display()),
        ])
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        png.exists(),
        "{browser} made no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::fs::File::open(png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    let rgb: Vec<u8> = buf[..info.buffer_size()]
        .chunks(step)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    (info.width, info.height, rgb)
}

fn near(p: &[u8], c: [u8; 3]) -> bool {
    p.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= 12)
}

#[test]
fn the_report_renders_in_headless_chromium_with_every_chart() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    std::fs::write(&html, moafs_bench::html::report(&doc())).unwrap();
    let png = dir.path().join("shot.png");
    let (w, h, rgb) = screenshot(&html, &png, 1200, 5000);
    let px = |x: u32, y: u32| &rgb[((y * w + x) * 3) as usize..((y * w + x) * 3 + 3) as usize];
    // not blank: a good share of the page is not background
    let inked = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .filter(|&(x, y)| !near(px(x, y), [255, 255, 255]))
        .count();
    assert!(
        inked > (w * h) as usize / 200,
        "the page is (nearly) blank: {inked} pixels inked"
    );
    // the summary chart: moafs's red, fuse2fs's brown and memfs's orange bars
    let rows_with = |c: [u8; 3]| -> Vec<u32> {
        (0..h)
            .filter(|&y| (0..w).filter(|&x| near(px(x, y), c)).count() >= 8)
            .collect()
    };
    for (name, c) in [
        ("moafs", [0xd6, 0x27, 0x28]),
        ("fuse2fs", [0x8c, 0x56, 0x4b]),
        ("memfs", [0xff, 0x7f, 0x0e]),
    ] {
        assert!(
            !rows_with(c).is_empty(),
            "no {name} bar in the summary chart"
        );
    }
    // one plot per workload: bands of rows with the plots' half-blue bars, apart by gaps
    let blue = rows_with([127, 127, 255]);
    let mut bands = 0;
    let mut last: Option<u32> = None;
    for y in blue {
        if last.is_none_or(|l| y > l + 40) {
            bands += 1;
        }
        last = Some(y);
    }
    assert_eq!(bands, 3, "plots of workloads seen in the screenshot");
}
