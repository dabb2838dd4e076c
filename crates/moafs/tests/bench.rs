//! `moafs bench` from the command line: the report, and errors for bad input.
use moafs_bench::managed::leftovers;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_moafs");

/// Runs `moafs ARGS --json JSON`, requires success, returns stdout and the parsed report.
fn bench_json(args: &[&str], json: &std::path::Path) -> (String, serde_json::Value) {
    let out = Command::new(BIN)
        .args(args)
        .arg("--json")
        .arg(json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), v)
}

#[test]
fn bench_writes_a_report_with_every_run() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("report.json");
    let (_, v) = bench_json(
        &["bench", "--reps", "3", "--scale", "0.02", "--seed", "5"],
        &json,
    );
    assert_eq!(v["schema"], 4);
    assert_eq!(v["results"][0]["workload"], "postmark-quick");
    let v = &v["results"][0]["reports"][0];
    assert_eq!(v["config"]["kind"], "postmark");
    assert_eq!(v["config"]["files"], 20);
    assert_eq!(v["config"]["transactions"], 200);
    assert_eq!(v["config"]["seed"], 5);
    assert_eq!(v["unit"], "transactions");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for r in runs {
        let c = &r["outcome"]["detail"]["counts"];
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
    let s = &v["rate"];
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
        vec!["bench", "--cache", "nope"],
        vec!["bench", "--preset", "nope"],
        vec!["bench", "--duration", "0"],
        vec!["bench", "--workload", "postmark-quick,nope"],
        vec!["bench", "--workload", "sqlite-wal"],
        vec!["bench", "--cache", "polluted"],
        vec!["bench", "--background", "fsync"],
        vec!["bench", "--background", "nope"],
        vec!["bench", "--memory-limit", "1G"],
        vec!["bench", "--memory-limit", "lots"],
        vec![
            "bench",
            "--target",
            "engine:file",
            "--backing",
            "/nonexistent",
        ],
        vec!["bench", "--target", "engine:nope"],
        vec!["bench", "--target", "ext4@journal=data"],
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

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn managed_targets_run_and_are_always_taken_down() {
    if !is_root() || !have("losetup") || !have("fusermount3") {
        return; // managed targets need root, loop devices and FUSE
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    for (kind, tool) in [
        ("moafs", "fusermount3"),
        ("ext4", "mkfs.ext4"),
        ("xfs", "mkfs.xfs"),
        ("btrfs", "mkfs.btrfs"),
        ("fuse2fs", "fuse2fs"),
    ] {
        if !have(tool) {
            continue;
        }
        let json = backing.path().join("r.json");
        let b = backing.path().to_str().unwrap();
        let (_, v) = bench_json(
            &[
                "bench",
                "--target",
                kind,
                "--size",
                "512M",
                "--reps",
                "2",
                "--scale",
                "0.05",
                "--backing",
                b,
            ],
            &json,
        );
        let v = &v["results"][0]["reports"][0];
        assert_eq!(v["target"], kind);
        assert_eq!(v["runs"].as_array().unwrap().len(), 2);
        for r in v["runs"].as_array().unwrap() {
            // CPU time: the harness always; a FUSE daemon's too, with its I/O counters
            let cost = &r["cost"];
            assert!(cost["harness"]["sys_s"].is_f64(), "{cost}");
            let fuse = kind == "moafs" || kind == "fuse2fs";
            assert_eq!(cost["daemon"].is_object(), fuse, "{kind}: {cost}");
            assert_eq!(cost["daemon_io"]["wchar"].is_u64(), fuse, "{kind}: {cost}");
            // moafs's engine counters come from its stats= file at unmount
            assert_eq!(r["engine"]["commits"].is_u64(), kind == "moafs", "{kind}");
            // the mount as /proc/mounts showed it while mounted: type, source (every kind
            // is mounted from a loop device: moafs as fuseblk, which gets sync(2)), options
            let mount = r["mount_options"].as_str().unwrap();
            let want = match kind {
                "moafs" => "fuseblk.moafs /dev/loop".to_string(),
                "fuse2fs" => "fuse".to_string(),
                k => format!("{k} /dev/loop"),
            };
            assert!(mount.starts_with(&want), "{kind}: {mount}");
            assert!(mount.contains(" /dev/loop"), "{kind}: {mount}");
            assert!(mount.contains("rw"), "{kind}: {mount}");
            // files were created and the unmount wrote them back: bytes and write requests,
            // counted at the loop device for every kind
            let d = &r["device"];
            assert_eq!(d["source"], "loop", "{kind}: {d}");
            assert!(d["write_bytes"].as_u64().unwrap() > 0, "{kind}: {d}");
            assert!(d["writes"].as_u64().unwrap() > 0, "{kind}: {d}");
            assert_eq!(r["device_write_requests"], d["writes"], "{kind}");
            assert!(r["device_bytes_written_per_op"].as_f64().unwrap() > 0.0);
            assert!(r["device_writes_per_op"].as_f64().unwrap() > 0.0, "{kind}");
            // moafs's own device counters stay beside the loop device's
            if kind == "moafs" {
                let e = &r["engine_device"];
                assert_eq!(e["source"], "moafs", "{e}");
                assert!(e["writes"].as_u64().unwrap() > 0, "{e}");
            } else {
                assert!(r["engine_device"].is_null(), "{kind}");
            }
        }
        for summary in ["device_writes_per_op", "device_write_requests"] {
            assert_eq!(v[summary]["n"], 2, "{kind}: {summary}");
            assert!(v[summary]["mean"].as_f64().unwrap() > 0.0, "{kind}");
        }
        std::fs::remove_file(&json).unwrap();
        assert_eq!(leftovers(backing.path()), Vec::<String>::new(), "{kind}");
    }
}

#[test]
fn one_command_on_a_disk_directory_counts_every_target_at_its_loop_device() {
    if !is_root() || !have("losetup") || !have("fusermount3") || !have("mkfs.ext4") {
        return;
    }
    // a disk directory, not tmpfs (the loop devices are over files on the VM's disk)
    let backing = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut targets = vec!["moafs", "ext4", "passthrough"];
    for (kind, tool) in [
        ("fuse2fs", "fuse2fs"),
        ("xfs", "mkfs.xfs"),
        ("btrfs", "mkfs.btrfs"),
    ] {
        if have(tool) {
            targets.push(kind);
        }
    }
    let json = backing.path().join("r.json");
    let html = backing.path().join("r.html");
    let (text, v) = bench_json(
        &[
            "bench",
            "--target",
            &targets.join(","),
            "--size",
            "512M",
            "--reps",
            "1",
            "--scale",
            "0.02",
            "--watch-ms",
            "0",
            "--html",
            html.to_str().unwrap(),
            "--backing",
            backing.path().to_str().unwrap(),
        ],
        &json,
    );
    assert_eq!(v["schema"], 4);
    assert_eq!(
        v["environment"]["backing"]["fs_type"]
            .as_str()
            .map(|t| t != "tmpfs"),
        Some(true)
    );
    let reports = v["results"][0]["reports"].as_array().unwrap();
    assert_eq!(reports.len(), targets.len());
    for r in reports {
        let run = &r["runs"][0];
        let d = &run["device"];
        assert_eq!(d["source"], "loop", "{}: {d}", r["target"]);
        assert!(d["writes"].as_u64().unwrap() > 0, "{}: {d}", r["target"]);
        assert!(
            d["write_bytes"].as_u64().unwrap() > 0,
            "{}: {d}",
            r["target"]
        );
        assert!(r["device_writes_per_op"]["mean"].as_f64().unwrap() > 0.0);
    }
    // the text report gives write requests per operation beside the bytes, for every target
    assert_eq!(
        text.matches("at the loop device) per operation counted: ")
            .count(),
        targets.len(),
        "{text}"
    );
    assert!(text.contains(" write requests (95 % CI "), "{text}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<th>device write requests / op</th>"));
    std::fs::remove_file(&json).unwrap();
    std::fs::remove_file(&html).unwrap();
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}

#[test]
fn a_managed_moafs_is_on_a_loop_device_and_taken_down_also_after_its_daemon_died() {
    use moafs_bench::managed::{Kind, Managed, ManagedOptions, LOOP_READAHEAD_SECTORS};
    if !is_root() || !have("losetup") || !have("fusermount3") {
        return;
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let opts = ManagedOptions {
        kind: Kind::Moafs,
        size: 256 << 20,
        backing: backing.path().to_path_buf(),
        moafs: BIN.into(),
        mount_options: String::new(),
    };
    let write_files = |dir: &std::path::Path| {
        for i in 0..20 {
            std::fs::write(dir.join(format!("f{i}")), vec![i as u8; 30_000]).unwrap();
        }
        let f = std::fs::File::open(dir.join("f0")).unwrap();
        f.sync_all().unwrap();
    };
    // taken down normally: counted at the loop device, moafs's own counters beside it
    let m = Managed::create(&opts).unwrap();
    let dev = m.loop_device().unwrap().to_string();
    let name = dev.trim_start_matches("/dev/");
    let ra = std::fs::read_to_string(format!("/sys/block/{name}/queue/read_ahead_kb")).unwrap();
    assert_eq!(ra.trim(), (LOOP_READAHEAD_SECTORS / 2).to_string());
    assert_eq!(
        moafs_bench::hygiene::mount_device(m.mount_point()).as_deref(),
        Some(name)
    );
    write_files(m.mount_point());
    let f = m.finish().unwrap();
    let (d, e) = (f.device.unwrap(), f.engine_device.unwrap());
    assert_eq!((d.source, e.source), ("loop", "moafs"));
    // everything moafs wrote after the mount went through the loop device: 600 KB of files
    assert!(d.writes > 0 && d.write_bytes >= 600_000, "{d:?}");
    assert!(e.write_bytes >= d.write_bytes, "{e:?} {d:?}");
    assert!(f.engine.unwrap()["commits"].is_u64());
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
    // the daemon (started by Managed) dies mid-run: dropping the target still takes it down
    let m = Managed::create(&opts).unwrap();
    write_files(m.mount_point());
    let pid = m.daemon_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    drop(m);
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}

#[test]
fn a_failing_or_interrupted_run_still_takes_the_target_down() {
    if !is_root() || !have("losetup") || !have("mkfs.ext4") {
        return;
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    // fails: the image is too small for the files (ENOSPC mid-run)
    let out = Command::new(BIN)
        .args(["bench", "--target", "ext4", "--size", "16M", "--reps", "1"])
        .args(["--workload", "postmark-fsl", "--scale", "0.2"])
        .arg("--backing")
        .arg(backing.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("moafs: benchmark postmark-fsl on ext4"),
        "{err}"
    );
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
    // interrupted: SIGINT to the running bench
    let child = Command::new(BIN)
        .args(["bench", "--target", "ext4", "--size", "1G", "--reps", "1"])
        .args(["--workload", "postmark-fsl"])
        .arg("--backing")
        .arg(backing.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}

#[test]
fn a_filebench_run_that_stops_early_says_so() {
    // webproxy's 10,000 files at 1/10,000: one file for its 100 threads, a pick soon finds
    // none (on the in-process engine: no root needed)
    let out = Command::new(BIN)
        .args(["bench", "--workload", "webproxy", "--scale", "0.0001"])
        .args(["--duration", "3", "--reps", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("stopped early after") && err.contains("could not obtain a file"),
        "{err}"
    );
}

#[test]
fn sigterm_to_its_process_group_still_takes_a_fuse_target_down() {
    // `kill -- -PGID` reaches the bench and the FUSE daemon it started alike: the daemon dies
    // under its mount, and the bench must still unmount it, detach the loop device and remove
    // the image (before the fix it died at once and left all three)
    if !is_root() || !have("losetup") || !have("fuse2fs") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let child = Command::new(BIN)
        .args([
            "bench", "--target", "fuse2fs", "--size", "1G", "--reps", "1",
        ])
        .args(["--workload", "postmark-fsl"])
        .arg("--backing")
        .arg(backing.path())
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    // running: fuse2fs's mount over our image is listed (the workload starts right after)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while leftovers(backing.path())
        .iter()
        .all(|l| !l.contains("fuse"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "fuse2fs never mounted"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(1000));
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(leftovers(backing.path()), Vec::<String>::new(), "{err}");
}

/// Memory cgroups `moafs bench` process `pid` made (under its cgroup, which is ours).
fn cgroups_of(pid: u32) -> Vec<String> {
    let Ok(place) = moafs_bench::cgroup::here() else {
        return Vec::new();
    };
    let prefix = format!("moafs-bench-{pid}-");
    std::fs::read_dir(place.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn a_memory_limit_is_recorded_per_run_and_its_cgroup_removed_also_on_ctrl_c() {
    if !is_root() || !have("losetup") || moafs_bench::cgroup::here().is_err() {
        return; // managed targets and cgroups need root and a memory controller
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let json = backing.path().join("m.json");
    let out = Command::new(BIN)
        .args(["bench", "--target", "ext4", "--size", "512M", "--reps", "1"])
        .args([
            "--workload",
            "varmail",
            "--scale",
            "0.1",
            "--duration",
            "0.5",
        ])
        .args(["--cache", "dropped,polluted", "--memory-limit", "1G"])
        .arg("--backing")
        .arg(backing.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["memory_limit"], 1u64 << 30);
    for r in v["results"][0]["reports"].as_array().unwrap() {
        for run in r["runs"].as_array().unwrap() {
            assert_eq!(run["memory_limit"], 1u64 << 30, "{run}");
            assert_eq!(run["memory"]["limit"], 1u64 << 30, "{run}");
            assert!(run["memory"]["peak"].as_u64().unwrap() > 0, "{run}");
            assert!(run["loop_direct_io"].is_boolean(), "{run}");
        }
    }
    std::fs::remove_file(&json).unwrap();
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
    // interrupted inside the cgroup
    let child = Command::new(BIN)
        .args(["bench", "--target", "ext4", "--size", "1G", "--reps", "1"])
        .args(["--workload", "postmark-fsl", "--memory-limit", "1G"])
        .arg("--backing")
        .arg(backing.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(std::time::Duration::from_millis(2000));
    assert_eq!(cgroups_of(pid).len(), 1, "the run is in its cgroup");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(cgroups_of(pid), Vec::<String>::new());
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}

#[test]
fn several_targets_take_turns_and_are_compared_with_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    let json = tmp.path().join("cmp.json");
    let targets = format!("engine,{}", dir.display());
    let (text, v) = bench_json(
        &[
            "bench", "--reps", "2", "--scale", "0.02", "--target", &targets,
        ],
        &json,
    );
    // progress lines: both targets in every repetition, in the order the JSON records
    let ran: Vec<(String, String)> = text
        .lines()
        .filter(|l| l.starts_with("  ") && l.contains(" run ") && l.contains("/s,"))
        .map(|l| {
            let (name, rest) = l.trim_start().split_once(" run ").unwrap();
            (
                name.to_string(),
                rest.split(':').next().unwrap().to_string(),
            )
        })
        .collect();
    let recorded: Vec<(String, String)> = v["results"][0]["repetitions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let rep = r["rep"].to_string();
            r["order"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |n| (n.as_str().unwrap().to_string(), rep.clone()))
        })
        .collect();
    assert_eq!(ran, recorded, "{text}");
    assert_eq!(ran.len(), 4, "{text}");
    for rep in ["1", "2"] {
        let mut names: Vec<&str> = ran
            .iter()
            .filter(|r| r.1 == rep)
            .map(|r| &r.0[..1])
            .collect();
        names.sort();
        assert_eq!(names, ["d", "e"], "{text}");
    }
    assert!(text.contains("compared with engine"), "{text}");
    let v = &v["results"][0];
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert!(reports
        .iter()
        .all(|r| r["runs"].as_array().unwrap().len() == 2));
    let cmp = v["comparison"].as_array().unwrap();
    assert_eq!(cmp[0]["ratio_to_baseline"], 1.0);
    let verdicts = ["higher", "lower", "no_difference", "inconclusive"];
    assert!(verdicts.contains(&cmp[1]["verdict"].as_str().unwrap()));
    // the scratch directories are gone
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn dropped_caches_and_disk_watch_are_recorded_per_run() {
    if !is_root() {
        return; // dropping the page cache needs root
    }
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("r.json");
    let (_, v) = bench_json(
        &[
            "bench",
            "--reps",
            "2",
            "--scale",
            "0.02",
            "--cache",
            "dropped",
            "--watch-ms",
            "50",
        ],
        &json,
    );
    for r in v["results"][0]["reports"][0]["runs"].as_array().unwrap() {
        assert_eq!(r["cache"], "dropped");
        assert!(r["other_disk_bytes_before"].is_u64(), "{r}");
    }
    let (_, v) = bench_json(
        &["bench", "--reps", "1", "--scale", "0.02", "--watch-ms", "0"],
        &json,
    );
    let run = &v["results"][0]["reports"][0]["runs"][0];
    assert_eq!(run["cache"], "fresh");
    assert!(run["other_disk_bytes_before"].is_null());
}

#[test]
fn a_preset_runs_its_workloads_and_writes_an_html_report() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    let json = tmp.path().join("q.json");
    let html = tmp.path().join("q.html");
    let (text, v) = bench_json(
        &[
            "bench",
            "--preset",
            "quick",
            "--scale",
            "0.02",
            "--duration",
            "0.2",
            "--reps",
            "2",
            "--target",
            dir.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        &json,
    );
    let want: Vec<String> = {
        let out = Command::new(BIN)
            .args(["bench", "--list"])
            .output()
            .unwrap();
        let list = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = list
            .lines()
            .find(|l| l.trim_start().starts_with("quick"))
            .unwrap();
        line.split(": ")
            .nth(1)
            .unwrap()
            .split(", ")
            .map(String::from)
            .collect()
    };
    let results = v["results"].as_array().unwrap();
    let got: Vec<&str> = results
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(got, want, "{text}");
    for r in results {
        let rep = &r["reports"][0];
        assert_eq!(
            rep["runs"].as_array().unwrap().len(),
            2,
            "{}",
            r["workload"]
        );
        assert!(
            rep["rate"]["mean"].as_f64().unwrap() > 0.0,
            "{}",
            r["workload"]
        );
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<svg").count(), results.len());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "scratch dirs removed"
    );
    // on the engine, a workload that needs a directory is skipped with a note
    let out = Command::new(BIN)
        .args([
            "bench",
            "--preset",
            "quick",
            "--scale",
            "0.01",
            "--duration",
            "0.1",
        ])
        .args(["--reps", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sqlite-wal: skipped"), "{text}");
}

#[test]
fn scenarios_and_background_jobs_are_columns_of_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    let json = tmp.path().join("s.json");
    let (text, v) = bench_json(
        &[
            "bench",
            "--workload",
            "varmail",
            "--scale",
            "0.05",
            "--duration",
            "0.3",
            "--reps",
            "2",
            "--target",
            dir.to_str().unwrap(),
            "--cache",
            "fresh,polluted",
            "--background",
            "none,fsync",
        ],
        &json,
    );
    let reports = v["results"][0]["reports"].as_array().unwrap();
    let names: Vec<String> = reports
        .iter()
        .map(|r| {
            r["target"]
                .as_str()
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        ["[B]", "[B+bg-fsync]", "[C]", "[C+bg-fsync]"],
        "{text}"
    );
    for r in reports {
        for run in r["runs"].as_array().unwrap() {
            let bg = run["background"].as_str().unwrap();
            let files = &run["background_files"];
            if bg == "none" {
                assert!(files.is_null());
            } else {
                assert_eq!(bg, "write_fsync");
                assert!(
                    files.as_u64().unwrap() > 0,
                    "the job wrote while varmail ran"
                );
            }
            let polluted = r["target"].as_str().unwrap().contains("[C");
            assert_eq!(run["cache"], if polluted { "polluted" } else { "fresh" });
        }
    }
    // pollution runs, background files and scratch directories are all gone
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn a_drop_after_setup_on_moafs_drops_its_own_cache_too() {
    if !is_root() || !have("fusermount3") {
        return; // managed moafs and drop_caches need root
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let json = backing.path().join("a.json");
    let (text, v) = bench_json(
        &[
            "bench",
            "--workload",
            "micro-dir-read",
            "--scale",
            "0.1",
            "--reps",
            "1",
            "--target",
            "moafs",
            "--size",
            "256M",
            "--backing",
            backing.path().to_str().unwrap(),
            "--cache",
            "fresh,cold",
        ],
        &json,
    );
    let reports = v["results"][0]["reports"].as_array().unwrap();
    assert_eq!(reports[1]["runs"][0]["cache"], "dropped_after_setup");
    let read = |i: usize| {
        reports[i]["runs"][0]["device"]["read_bytes"]
            .as_u64()
            .unwrap()
    };
    let files = reports[0]["runs"][0]["outcome"]["counts"]["reads"]
        .as_u64()
        .unwrap();
    assert_eq!(files, 500, "{text}");
    // fresh: the files just written are still cached (moafs's block cache, the page cache);
    // dropped: every one of them comes from the image
    assert!(
        read(1) >= files * 4096,
        "dropped read {} bytes: {text}",
        read(1)
    );
    assert!(
        read(0) < read(1),
        "fresh {} vs dropped {}",
        read(0),
        read(1)
    );
    std::fs::remove_file(&json).unwrap();
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}

#[test]
fn engine_on_a_modelled_disk_prints_its_modelled_time() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("m.json");
    let (text, v) = bench_json(
        &[
            "bench",
            "--workload",
            "micro-rand-write",
            "--scale",
            "0.05",
            "--reps",
            "2",
            "--size",
            "256M",
            "--target",
            "engine:hdd,engine",
        ],
        &json,
    );
    assert!(text.contains("modelled device time"), "{text}");
    let reports = v["results"][0]["reports"].as_array().unwrap();
    assert!(reports[0]["target"]
        .as_str()
        .unwrap()
        .starts_with("engine:hdd"));
    for run in reports[0]["runs"].as_array().unwrap() {
        assert!(run["device"]["modelled_secs"].as_f64().unwrap() > 0.0);
    }
    assert!(reports[1]["runs"][0]["device"]["modelled_secs"].is_null());
}

#[test]
fn moafs_targets_take_mount_options_and_bad_ones_fail_cleanly() {
    if !is_root() || !have("fusermount3") {
        return;
    }
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = backing.path().to_str().unwrap();
    let json = backing.path().join("o.json");
    let (_, v) = bench_json(
        &[
            "bench",
            "--scale",
            "0.02",
            "--reps",
            "1",
            "--size",
            "256M",
            "--backing",
            b,
            "--target",
            "moafs,moafs@journal=writeback;dirty_max=1G",
        ],
        &json,
    );
    let names: Vec<&str> = v["results"][0]["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["moafs", "moafs@journal=writeback;dirty_max=1G"]);
    std::fs::remove_file(&json).unwrap();
    let out = Command::new(BIN)
        .args(["bench", "--reps", "1", "--size", "256M", "--backing", b])
        .args(["--target", "moafs@no_such_option=1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no_such_option") && !err.contains("panicked"),
        "{err}"
    );
    assert_eq!(leftovers(backing.path()), Vec::<String>::new());
}

#[test]
fn ctrl_c_stops_an_engine_run_and_removes_its_image() {
    let backing = tempfile::tempdir().unwrap();
    let child = Command::new(BIN)
        .args([
            "bench",
            "--workload",
            "postmark-fsl",
            "--target",
            "engine:file",
        ])
        .args(["--size", "512M", "--reps", "3", "--backing"])
        .arg(backing.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(t0.elapsed().as_secs() < 20, "stopped promptly");
    assert_eq!(std::fs::read_dir(backing.path()).unwrap().count(), 0);
}

#[test]
fn cowrite_experiment_prints_a_table_and_writes_json_and_plots() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("exp.json");
    let svg = tmp.path().join("svg");
    let out = Command::new(BIN)
        .args([
            "experiment",
            "cowrite",
            "--size",
            "128M",
            "--utilisation",
            "0",
            "--tests",
            "rand-write,dir-read",
            "--scale",
            "0.2",
            "--svg-dir",
        ])
        .arg(&svg)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| rand-write | dirty | 0 % |"), "{stdout}");
    assert!(stdout.contains("| dir-read | address | 0 % |"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // 2 tests × cowrite on/off × 2 write-back orders
    assert_eq!(v["rows"].as_array().unwrap().len(), 8);
    assert_eq!(v["config"]["per_dir"], 20);
    assert!(v["rows"][0]["modelled_secs"].as_f64().unwrap() > 0.0);
    assert!(svg.join("cowrite-rand-write.svg").exists());
    assert!(svg.join("cowrite-dir-read.svg").exists());
    // The table again from the saved report, without running anything.
    let again = Command::new(BIN)
        .args(["experiment", "cowrite", "--from-json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(again.status.success());
    let table = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with('|'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        table(&String::from_utf8_lossy(&again.stdout)),
        table(&stdout)
    );
    let bad = Command::new(BIN)
        .args(["experiment", "cowrite", "--from-json", "/nonexistent.json"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
}

#[test]
fn cowrite_experiment_refuses_bad_input() {
    for (args, msg) in [
        (vec!["experiment", "nope"], "unknown experiment"),
        (
            vec!["experiment", "cowrite", "--utilisation", "99"],
            "not a percentage",
        ),
        (vec!["experiment", "cowrite", "--size", "1M"], "--size"),
        (
            vec!["experiment", "cowrite", "--size", "64M", "--tests", "x"],
            "unknown test",
        ),
        (vec!["experiment", "cowrite", "--scale", "0"], "--scale"),
        (
            vec!["experiment", "bytelog", "--utilisation", "90"],
            "not one percentage",
        ),
        (vec!["experiment", "bytelog", "--size", "64M"], "--size"),
        (vec!["experiment", "bytelog", "--tests", "x"], "unknown"),
        (
            vec!["experiment", "readahead", "--tests", "x"],
            "unknown test",
        ),
        (vec!["experiment", "readahead", "--scale", "0"], "--scale"),
        (vec!["experiment", "readahead", "--size", "1G"], "no --size"),
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

/// Every object key anywhere in `v`.
fn keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                keys(x, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

/// The environment record of a result file: present, and filled where it must be.
fn assert_environment(e: &serde_json::Value) {
    let text = |k: &str| {
        e[k].as_str()
            .unwrap_or_else(|| panic!("{k}: {e}"))
            .to_string()
    };
    for k in [
        "run_id",
        "time",
        "hostname",
        "cpu_model",
        "governor",
        "commit",
    ] {
        assert!(!text(k).is_empty(), "{k}: {e}");
    }
    assert!(!text("memory_limit").is_empty(), "{e}");
    assert_eq!(text("moafs_version"), env!("CARGO_PKG_VERSION"));
    // this test runs from a git checkout: the commit is known, 40 hex digits
    let commit = text("commit");
    assert!(
        commit == "unknown" || commit.trim_end_matches("-dirty").len() == 40,
        "{commit}"
    );
    assert!(text("run_id").contains(&commit[..7]), "{e}");
    let release = e["kernel"]["release"].as_str().unwrap();
    assert!(!release.is_empty() && release != "unknown", "{e}");
    assert!(e["kernel"]["version"].is_string(), "{e}");
    assert!(e["cpus"]["available"].as_u64().unwrap() >= 1, "{e}");
    assert!(e["cpus"]["online"].as_u64().unwrap() >= 1, "{e}");
    assert!(e["memory_bytes"].as_u64().unwrap() > 0, "{e}");
    let tools = e["tool_versions"].as_object().unwrap();
    for t in [
        "postmark",
        "sysbench",
        "fio",
        "bonnie++",
        "mkfs.ext4",
        "mkfs.xfs",
        "mkfs.btrfs",
        "fuse2fs",
    ] {
        let v = &tools[t];
        // null where the tool is missing, its version line where it is there
        assert_eq!(v.is_string(), have(t), "{t}: {v}");
    }
}

#[test]
fn bench_records_the_environment_seeds_and_order() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("env.json");
    let backing = tmp.path().to_str().unwrap();
    let (text, v) = bench_json(
        &[
            "bench",
            "--reps",
            "2",
            "--scale",
            "0.02",
            "--seed",
            "9",
            "--target",
            "engine,engine:file",
            "--backing",
            backing,
        ],
        &json,
    );
    assert_eq!(v["schema"], 4);
    let e = &v["environment"];
    assert_environment(e);
    assert_eq!(e["backing"]["path"], backing);
    assert!(
        e["backing"]["fs_type"].as_str().unwrap() != "unknown",
        "{e}"
    );
    // the header shows it
    for want in [
        "run_id ",
        "kernel ",
        "governor ",
        "limit ",
        "backing ",
        "tools: ",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    assert!(text.contains(e["run_id"].as_str().unwrap()), "{text}");
    let res = &v["results"][0];
    // a fresh seed per repetition, the same for every target of a repetition
    let reps = res["repetitions"].as_array().unwrap();
    assert_eq!(reps.len(), 2);
    let seeds: Vec<u64> = reps.iter().map(|r| r["seed"].as_u64().unwrap()).collect();
    assert_ne!(seeds[0], seeds[1]);
    assert!(res["order_seed"].is_u64());
    for report in res["reports"].as_array().unwrap() {
        let runs = report["runs"].as_array().unwrap();
        let run_seeds: Vec<u64> = runs.iter().map(|r| r["seed"].as_u64().unwrap()).collect();
        assert_eq!(run_seeds, seeds, "{}", report["target"]);
        for run in runs {
            assert!(run["mount_options"]
                .as_str()
                .unwrap()
                .contains("in-process"));
            assert!(run["cache_before"]["cached_bytes"].is_u64(), "{run}");
            assert!(run["cache_before"]["dirty_bytes"].is_u64(), "{run}");
        }
        // the order: each repetition lists every target once
        for r in reps {
            let order = r["order"].as_array().unwrap();
            assert_eq!(order.len(), 2);
            assert!(order.contains(&report["target"]), "{r}");
        }
        assert!(report["latency"].is_object() && report["rate_outliers"].is_array());
    }
    // the workload ran with each repetition's seed: PostMark is deterministic, so the two
    // targets of a repetition wrote the same bytes, and the two repetitions did not
    let written = |t: usize, r: usize| {
        res["reports"][t]["runs"][r]["outcome"]["bytes_written"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(written(0, 0), written(1, 0));
    assert_eq!(written(0, 1), written(1, 1));
    assert_ne!(written(0, 0), written(0, 1));
    let mut found = std::collections::BTreeSet::new();
    keys(&v, &mut found);
    for k in ["kernel", "commit", "mount_options", "seed", "run_id"] {
        assert!(found.contains(k), "{k}");
    }
    // every operation type timed has its percentiles
    for report in res["reports"].as_array().unwrap() {
        for (op, l) in report["latency"].as_object().unwrap() {
            for k in ["p50_us", "p99_us", "p999_us"] {
                assert!(l[k].as_f64().unwrap() > 0.0, "{op} {k}: {l}");
            }
        }
    }
    // the comparison is paired: the second target's ratios, one per repetition
    let c = &res["comparison"][1];
    assert_eq!(c["pairs"], 2);
    assert_eq!(c["ratios"].as_array().unwrap().len(), 2);
    assert!(c["ci95_low"].as_f64().unwrap() <= c["ratio_to_baseline"].as_f64().unwrap());
    assert!(c["ci95_high"].as_f64().unwrap() >= c["ratio_to_baseline"].as_f64().unwrap());
    // the printed comparison reads one way: "× BASE's rate", never "0.x× slower"
    let line = text
        .lines()
        .find(|l| l.contains("'s rate (95 % CI"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!line.contains("slower"), "{line}");
}

#[test]
fn every_experiment_result_file_records_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, args) in [
        (
            "cowrite",
            vec![
                "--size",
                "64M",
                "--utilisation",
                "0",
                "--tests",
                "rand-write",
            ],
        ),
        ("bytelog", vec!["--size", "128M", "--tests", "tio-128"]),
        ("readahead", vec!["--tests", "rndrd-16k"]),
    ] {
        let json = tmp.path().join(format!("{name}.json"));
        let out = Command::new(BIN)
            .args(["experiment", name])
            .args(&args)
            .args(["--scale", "0.01", "--json"])
            .arg(&json)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_environment(&v["environment"]);
        assert!(v["rows"].is_array(), "{name}");
        // written again from the saved file: the measurement's environment is kept
        let again = tmp.path().join(format!("{name}-again.json"));
        let out = Command::new(BIN)
            .args(["experiment", name, "--from-json"])
            .arg(&json)
            .arg("--json")
            .arg(&again)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        let w: serde_json::Value = serde_json::from_slice(&std::fs::read(&again).unwrap()).unwrap();
        assert_eq!(w["environment"], v["environment"], "{name}");
    }
}

/// Without fuse3's fusermount3 (root needs none to mount moafs), `moafs bench` mounts and
/// takes down a moafs target as `moafs umount` does; a missing tool is named with the package
/// that brings it.
#[test]
fn bench_needs_no_fusermount3_and_names_missing_tools_with_their_package() {
    if !is_root() || !have("losetup") {
        return;
    }
    // a PATH with every program of the system's but fusermount3
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for dir in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name();
            let to = bin.join(&name);
            if name != "fusermount3" && !to.exists() {
                let _ = std::os::unix::fs::symlink(e.path(), to);
            }
        }
    }
    let backing = tmp.path().join("backing");
    std::fs::create_dir(&backing).unwrap();
    let run = |target: &str| {
        Command::new(BIN)
            .env("PATH", &bin)
            .args(["bench", "--target", target, "--size", "256M", "--reps", "1"])
            .args(["--scale", "0.02", "--backing"])
            .arg(&backing)
            .output()
            .unwrap()
    };
    let out = run("moafs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("fusermount3"), "{err}");
    assert_eq!(leftovers(&backing), Vec::<String>::new());
    // a tool that is missing: named, with its package
    std::fs::remove_file(bin.join("mkfs.xfs")).ok();
    let out = run("xfs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("apt-get install xfsprogs"), "{err}");
    assert_eq!(leftovers(&backing), Vec::<String>::new());
}
