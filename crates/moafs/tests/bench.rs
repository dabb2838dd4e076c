//! `moafs bench` from the command line: the report, and errors for bad input.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_moafs");

#[test]
fn bench_writes_a_report_with_every_run() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("report.json");
    let out = Command::new(BIN)
        .args([
            "bench", "--reps", "3", "--scale", "0.02", "--seed", "5", "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["schema"], 1);
    assert_eq!(v["workload"], "postmark-quick");
    assert_eq!(v["config"]["files"], 20);
    assert_eq!(v["config"]["transactions"], 200);
    assert_eq!(v["config"]["seed"], 5);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for r in runs {
        let c = &r["result"]["counts"];
        let sum: u64 = ["reads", "appends", "creates", "deletes", "skipped"]
            .iter()
            .map(|k| c[k].as_u64().unwrap())
            .sum();
        assert_eq!(sum, 400, "two halves per transaction");
        // engine counters come with every run (data may never reach the device: PostMark
        // deletes its files before write-back, which delayed allocation turns into no I/O)
        assert!(
            r["engine"]["data_blocks_written"].is_u64(),
            "{}",
            r["engine"]
        );
    }
    let s = &v["transactions_per_sec"];
    assert_eq!(s["n"], 3);
    assert!(s["mean"].as_f64().unwrap() > 0.0);
    assert!(s["ci95"].as_f64().unwrap() >= 0.0);
}

#[test]
fn bench_lists_and_refuses_bad_input() {
    let out = Command::new(BIN)
        .args(["bench", "--list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("postmark-fsl") && text.contains("engine"),
        "{text}"
    );
    for args in [
        vec!["bench", "--workload", "nope"],
        vec!["bench", "--target", "/nonexistent/dir"],
        vec!["bench", "--scale", "0"],
        vec!["bench", "--scale", "nan"],
        vec!["bench", "--reps", "0"],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("moafs: ") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}
