//! Each workload does the operation mix it is defined to do (counted), on the engine and on a
//! directory, and cleans up what it must.
use moafs_bench::filebench::{run as filebench, FilebenchConfig};
use moafs_bench::target::{DirTarget, EngineTarget, Fh, Mode, Target};
use moafs_bench::workload::{named, Spec};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;

fn fb(name: &str, scale: f64, secs: f64) -> FilebenchConfig {
    let mut c = FilebenchConfig::personality(name).unwrap().scaled(scale);
    c.duration_secs = secs;
    c
}

fn get(c: &BTreeMap<String, u64>, k: &str) -> u64 {
    c.get(k).copied().unwrap_or(0)
}

#[test]
fn filebench_personalities_do_their_flowops_in_proportion() {
    // one thread: whole loops (the last one maybe cut short by the deadline), no busy picks
    for name in ["fileserver", "varmail", "webserver", "webproxy"] {
        let mut cfg = fb(name, 0.02, 0.3);
        cfg.threads = 1;
        cfg.mean_size = 4096; // small files keep the test quick
        let t = EngineTarget::in_memory(512 << 20).unwrap();
        let r = filebench(&t, &cfg).unwrap();
        let c = &r.counts;
        assert_eq!(r.stopped_early, None, "{name}");
        assert_eq!(
            r.deletes_refused, 0,
            "{name}: one thread never holds what it deletes"
        );
        let per_loop: &[(&str, u64)] = match name {
            "fileserver" => &[
                ("create", 1),
                ("write_whole", 1),
                ("close", 3),
                ("open", 2),
                ("append", 1),
                ("read_whole", 1),
                ("delete", 1),
                ("stat", 1),
            ],
            "varmail" => &[
                ("delete", 1),
                ("create", 1),
                ("append", 2),
                ("fsync", 2),
                ("close", 3),
                ("open", 2),
                ("read_whole", 2),
            ],
            "webserver" => &[
                ("open", 10),
                ("read_whole", 10),
                ("close", 10),
                ("append_log", 1),
            ],
            _ => &[
                ("delete", 1),
                ("create", 1),
                ("append", 1),
                ("close", 6),
                ("open", 5),
                ("read_whole", 5),
            ],
        };
        // loops started: the most any flowop's count says
        let loops = per_loop
            .iter()
            .map(|&(op, n)| get(c, op).div_ceil(n))
            .max()
            .unwrap();
        assert!(loops > 1, "{name}: {c:?}");
        for &(op, n) in per_loop {
            let got = get(c, op);
            assert!(
                (n * (loops - 1)..=n * loops).contains(&got),
                "{name} {op}: {got} in {loops} loops: {c:?}"
            );
        }
        assert_eq!(c.len(), per_loop.len(), "{name}: no other flowops: {c:?}");
        assert_eq!(r.ops, c.values().sum::<u64>());
        // one latency sample per flowop, by kind
        let lat = r.latency.summary();
        for (op, n) in c {
            assert_eq!(lat[op.as_str()].count, *n, "{name} {op}");
        }
        assert!(r.bytes_read > 0 && r.bytes_written > 0, "{name}");
        // each entry made beforehand with prealloc % chance: binomial, within 5 sd
        let (n, p) = (cfg.files as f64, f64::from(cfg.prealloc_pct) / 100.0);
        let sd = (n * p * (1.0 - p)).sqrt();
        assert!(
            (r.preallocated as f64 - n * p).abs() <= 5.0 * sd + 0.5,
            "{name}: {} of {n}",
            r.preallocated
        );
        // varmail fsyncs after every append: each one is a commit of the engine or, for an
        // append inside the file's last block, a byte-log batch (an attribute record), but
        // for the rare fsync after an append of 0 bytes (appends are uniform in [0, 16 KiB):
        // about one in 16,384), which finds nothing to write
        if name == "varmail" {
            let counters = t.counters().unwrap();
            let commits = counters["commits"].as_u64().unwrap();
            let logged = counters["bytelog_fsyncs"].as_u64().unwrap();
            let fsyncs = get(c, "fsync");
            assert!(
                commits + logged + fsyncs / 1000 >= fsyncs,
                "{commits} commits, {logged} byte-log fsyncs, {c:?}"
            );
        }
    }
}

#[test]
fn filebench_scale_changes_the_fileset_not_the_threads() {
    for (name, files, threads) in [
        ("fileserver", 10_000, 50),
        ("varmail", 1_000, 16),
        ("webserver", 1_000, 100),
        ("webproxy", 10_000, 100),
    ] {
        let Some(Spec::Filebench(c)) = named(name, 0.1, 1, 10.0) else {
            panic!("{name}")
        };
        assert_eq!((c.files, c.threads), (files / 10, threads), "{name}");
        let full = FilebenchConfig::personality(name).unwrap();
        assert_eq!((full.files, full.threads), (files, threads), "{name}");
        assert_eq!(full.duration_secs, 60.0, "Filebench's default run");
        // the .f files' sizes: appends below 16 KiB, whole-file I/O in 1 MiB pieces
        assert_eq!(
            (full.iosize, full.append_size),
            (1 << 20, 16 << 10),
            "{name}"
        );
    }
    let fs = FilebenchConfig::personality("fileserver").unwrap();
    assert_eq!((fs.mean_size, fs.dir_width), (128 << 10, 20));
    let vm = FilebenchConfig::personality("varmail").unwrap();
    assert_eq!((vm.mean_size, vm.dir_width), (16 << 10, 1_000_000));
    // the quick preset's Filebench runs last long enough to mean something
    assert!(
        moafs_bench::workload::preset("quick")
            .unwrap()
            .duration_secs
            >= 10.0
    );
}

/// An engine target that records the mode of every open, by path.
struct Modes {
    inner: EngineTarget,
    opens: Mutex<Vec<(String, Mode)>>,
}

impl Target for Modes {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn mkdir(&self, p: &str) -> io::Result<()> {
        self.inner.mkdir(p)
    }
    fn rmdir(&self, p: &str) -> io::Result<()> {
        self.inner.rmdir(p)
    }
    fn remove(&self, p: &str) -> io::Result<()> {
        self.inner.remove(p)
    }
    fn stat(&self, p: &str) -> io::Result<u64> {
        self.inner.stat(p)
    }
    fn open(&self, p: &str, mode: Mode) -> io::Result<Fh> {
        self.opens.lock().unwrap().push((p.to_string(), mode));
        self.inner.open(p, mode)
    }
    fn write_at(&self, fh: &Fh, off: u64, d: &[u8]) -> io::Result<()> {
        self.inner.write_at(fh, off, d)
    }
    fn read_at(&self, fh: &Fh, off: u64, b: &mut [u8]) -> io::Result<usize> {
        self.inner.read_at(fh, off, b)
    }
    fn fsync(&self, fh: &Fh) -> io::Result<()> {
        self.inner.fsync(fh)
    }
    fn close(&self, fh: Fh) -> io::Result<()> {
        self.inner.close(fh)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn drop_own_cache(&self) -> io::Result<()> {
        self.inner.drop_own_cache()
    }
}

#[test]
fn webserver_opens_its_files_read_only_and_fileserver_read_write() {
    for (name, expect) in [("webserver", Mode::Read), ("fileserver", Mode::ReadWrite)] {
        let mut cfg = fb(name, 0.02, 0.3);
        cfg.threads = 4;
        cfg.mean_size = 4096;
        let t = Modes {
            inner: EngineTarget::in_memory(256 << 20).unwrap(),
            opens: Mutex::new(Vec::new()),
        };
        let r = filebench(&t, &cfg).unwrap();
        let opens = t.opens.lock().unwrap();
        // the fileset's opens during the run: Create while making it, then the flowops'
        let run_opens: Vec<Mode> = opens
            .iter()
            .skip(r.preallocated as usize)
            .filter(|(p, _)| p.starts_with("bigfileset/"))
            .map(|(_, m)| *m)
            .filter(|m| *m != Mode::Create)
            .collect();
        assert_eq!(run_opens.len() as u64, get(&r.counts, "open"), "{name}");
        assert!(
            run_opens.iter().all(|m| *m == expect),
            "{name}: {run_opens:?}"
        );
        // the webserver's log: appended to, opened once per thread that got to it
        let log: Vec<Mode> = opens
            .iter()
            .filter(|(p, _)| p.starts_with("logfiles/"))
            .map(|(_, m)| *m)
            .collect();
        if name == "webserver" {
            assert_eq!(log[0], Mode::Create, "made before the run");
            assert!(log[1..].iter().all(|m| *m == Mode::Append));
            assert!(log.len() > 1 && log.len() <= 1 + cfg.threads);
        } else {
            assert!(log.is_empty());
        }
    }
}

#[test]
fn latencies_are_recorded_per_operation_of_the_measured_phase() {
    // a tiny Filebench and PostMark on the engine in-process, through `Spec::run`
    for name in ["varmail", "fileserver", "postmark-quick"] {
        // enough entries that 16-50 threads seldom find every candidate busy
        let spec = named(name, 0.1, 5, 0.3).unwrap();
        let t = EngineTarget::in_memory(512 << 20).unwrap();
        let o = spec.run(&t, &|| Ok(())).unwrap();
        assert!(!o.latency.is_empty(), "{name}");
        let expect: Vec<(&str, u64)> = match &spec {
            Spec::Filebench(_) => o.detail["flowops"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_u64().unwrap()))
                .collect(),
            _ => {
                let c = &o.detail["counts"];
                ["read", "append", "create", "delete"]
                    .into_iter()
                    .map(|k| {
                        let n = match k {
                            "read" => c["reads"].as_u64(),
                            "append" => c["appends"].as_u64(),
                            "create" => c["creates"].as_u64(),
                            _ => c["deletes"].as_u64(),
                        };
                        (k, n.unwrap())
                    })
                    .collect()
            }
        };
        assert!(expect.len() >= 4, "{name}: {expect:?}");
        for (op, n) in expect {
            assert!(n > 0, "{name}: no {op}");
            let l = &o.latency[op];
            assert_eq!(l.count, n, "{name} {op}");
            assert!(
                l.p50_us <= l.p99_us && l.p99_us <= l.max_us,
                "{name} {op}: {l:?}"
            );
        }
    }
}

/// Files under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += files_under(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

#[test]
fn filebench_threads_never_share_an_entry() {
    // Many threads on few files: picks collide. Every create must have made a file
    // that did not exist and every delete removed one that did, so the files left are
    // exactly prealloc + creates − deletes.
    let parent = tempfile::tempdir().unwrap();
    let t = DirTarget::scratch(parent.path(), "fb").unwrap();
    let mut cfg = fb("fileserver", 0.004, 0.5); // 40 files
    cfg.threads = 6;
    cfg.mean_size = 2048;
    let r = filebench(&t, &cfg).unwrap();
    let c = &r.counts;
    assert!(get(c, "create") > 0, "{c:?}");
    let left = files_under(&t.dir().unwrap().join("bigfileset"));
    assert_eq!(
        left,
        r.preallocated + get(c, "create") - get(c, "delete"),
        "{c:?}"
    );
}

#[test]
fn every_named_workload_runs_and_counts_what_it_did() {
    let parent = tempfile::tempdir().unwrap();
    for (name, _) in moafs_bench::WORKLOADS {
        // bonnie++ cannot time phases under 0.5 s: it needs a file of some size
        let scale = match *name {
            "tool-bonnie" => 0.5,
            // Filebench's threads stay as many at any scale: keep some files for them
            "fileserver" | "varmail" | "webserver" | "webproxy" => 0.05,
            _ => 0.01,
        };
        // a seed above 2^63, as a repetition's may be (fio refused one as its randseed)
        let spec = named(name, scale, u64::MAX - 9, 0.2).unwrap();
        if let Spec::Tool(c) = &spec {
            // `./run test` installs them; elsewhere a missing tool is skipped here
            if let Err(why) = c.available() {
                eprintln!("{name}: skipped: {why}");
                continue;
            }
        }
        let between_calls = Cell::new(0);
        let between = || -> io::Result<()> {
            between_calls.set(between_calls.get() + 1);
            Ok(())
        };
        let t = DirTarget::scratch(parent.path(), name).unwrap();
        let o = spec
            .run(&t, &between)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(o.rate > 0.0 && o.secs > 0.0, "{name}: {o:?}");
        assert!(o.operations() > 0, "{name}");
        let expected_between = if matches!(spec, Spec::Postmark(_)) {
            0
        } else {
            1
        };
        assert_eq!(between_calls.get(), expected_between, "{name}");
        match &spec {
            Spec::RandRead(c) => {
                assert_eq!(o.counts["reads"], c.requests as u64);
                // every read is a whole block: the offsets are block-aligned inside the files
                assert_eq!(o.bytes_read, (c.requests * c.block) as u64, "{name}");
            }
            Spec::SmallWrites(c) => {
                assert_eq!(o.counts["writes"], (c.threads * c.writes) as u64);
                // random writes land inside the files: sizes unchanged; appends add theirs
                let size = if c.append {
                    c.file_size + (c.writes * c.io) as u64
                } else {
                    c.file_size
                };
                for k in 0..c.threads {
                    let f = t.dir().unwrap().join(format!("tio/file.{k}"));
                    assert_eq!(std::fs::metadata(f).unwrap().len(), size, "{name}");
                }
            }
            Spec::Sqlite(c) => {
                assert_eq!(o.counts["updates"], c.updates as u64);
                // the database is removed afterwards
                assert_eq!(std::fs::read_dir(t.dir().unwrap()).unwrap().count(), 0);
            }
            Spec::Bonnie(c) => {
                let bytes = c.size / c.block as u64 * c.block as u64;
                assert_eq!(o.bytes_read, 2 * bytes, "rewrite and read each read it all");
                assert_eq!(o.bytes_written, 2 * bytes);
                for k in [
                    "write_mib_per_sec",
                    "rewrite_mib_per_sec",
                    "read_mib_per_sec",
                ] {
                    assert!(o.detail[k].as_f64().unwrap() > 0.0, "{k}");
                }
            }
            Spec::Micro(c) => {
                let n = (c.dirs * c.per_dir) as u64;
                match c.test {
                    moafs_bench::micro::MicroTest::Large => {
                        let total = c.large_size * c.large_files as u64;
                        assert_eq!((o.bytes_read, o.bytes_written), (total, total));
                    }
                    moafs_bench::micro::MicroTest::DirRead => {
                        assert_eq!(o.counts["reads"], n);
                        assert_eq!(o.bytes_read, n * c.file_size as u64);
                    }
                    _ => {
                        assert_eq!(o.counts["creates"], n);
                        let made = (0..c.dirs)
                            .map(|d| {
                                std::fs::read_dir(t.dir().unwrap().join(format!("m{d}")))
                                    .unwrap()
                                    .count() as u64
                            })
                            .sum::<u64>();
                        assert_eq!(made, n, "{name}");
                    }
                }
            }
            Spec::Tool(c) if c.tool == moafs_bench::tools::Tool::Untar => {
                // as many entries as the members asked for (a member may be a directory, and
                // a directory made for its members counts too), and the tree removed
                let members = c.files as u64;
                let made = o.counts["files"] + o.counts["directories"];
                assert!(
                    made >= members && made <= members + 64,
                    "{made} for {members}"
                );
                assert!(o.bytes_written > 0);
                assert_eq!(std::fs::read_dir(t.dir().unwrap()).unwrap().count(), 0);
            }
            Spec::Tool(c) if c.tool == moafs_bench::tools::Tool::FioFsync => {
                let writes = (c.files * c.transactions) as u64;
                assert_eq!((o.counts["writes"], o.counts["fsyncs"]), (writes, writes));
                assert!(o.latency.contains_key("fsync"), "{:?}", o.latency.keys());
                assert_eq!(std::fs::read_dir(t.dir().unwrap()).unwrap().count(), 0);
            }
            Spec::Tool(_) => {
                // the tools clean up after themselves (or the driver does)
                assert_eq!(
                    std::fs::read_dir(t.dir().unwrap()).unwrap().count(),
                    0,
                    "{name}"
                );
            }
            Spec::Postmark(_) | Spec::Filebench(_) => {}
        }
    }
}

#[test]
fn sqlite_needs_a_directory_and_refuses_the_engine() {
    let spec = named("sqlite-delete", 0.05, 1, 1.0).unwrap();
    let e = EngineTarget::in_memory(64 << 20).unwrap();
    let err = spec.run(&e, &|| Ok(())).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Unsupported);
    assert!(spec.needs_dir());
}

#[test]
fn the_engine_runs_the_handle_api_like_a_directory() {
    // the same seeded single-threaded workloads give the same counts on both kinds
    let parent = tempfile::tempdir().unwrap();
    for name in ["micro-rand-write", "rndrd-16k", "bonnie", "postmark-quick"] {
        let spec = named(name, 0.01, 4, 0.2).unwrap();
        let e = EngineTarget::in_memory(1 << 30).unwrap();
        let on_engine = spec.run(&e, &|| Ok(())).unwrap();
        let d = DirTarget::scratch(parent.path(), name).unwrap();
        let on_dir = spec.run(&d, &|| Ok(())).unwrap();
        assert_eq!(on_engine.counts, on_dir.counts, "{name}");
        assert_eq!(on_engine.bytes_read, on_dir.bytes_read, "{name}");
        assert_eq!(on_engine.bytes_written, on_dir.bytes_written, "{name}");
    }
}

#[test]
fn html_report_has_a_plot_per_workload_and_escapes_names() {
    let doc = serde_json::json!({
        "schema": 2, "preset": null, "reps": 2, "seed": 1, "cache": "fresh",
        "results": [
            {"workload": "varmail", "comparison": [
                {"target": "a", "ratio_to_baseline": 1.0, "verdict": "no_difference"},
                {"target": "<b>", "ratio_to_baseline": 2.0, "verdict": "higher"}],
             "reports": [
                {"target": "a", "unit": "ops", "rate": {"mean": 10.0, "ci95": 1.0, "n": 2},
                 "device_bytes_written_per_op": null},
                {"target": "<b>", "unit": "ops", "rate": {"mean": 20.0, "ci95": 2.0, "n": 2},
                 "device_bytes_written_per_op": {"mean": 512.0}}]},
            {"workload": "bonnie", "comparison": [
                {"target": "a", "ratio_to_baseline": 1.0, "verdict": "no_difference"}],
             "reports": [{"target": "a", "unit": "MiB", "rate": {"mean": 5.0, "ci95": 0.5, "n": 2}}]}
        ]
    });
    let html = moafs_bench::html::report(&doc);
    // the summary chart, then one plot per workload
    assert_eq!(html.matches("<svg").count(), 3);
    assert!(
        !html.contains("><b><"),
        "a target name reached the SVG unescaped"
    );
    assert!(html.contains("&lt;b&gt;") && !html.contains("<td><b>"));
    assert!(html.contains("2.00×") && html.contains("512"));
}

#[test]
fn engine_on_a_model_disk_reports_modelled_time_and_file_images_are_removed() {
    use moafs_bench::target::EngineDevice;
    let spec = named("micro-rand-write", 0.05, 3, 1.0).unwrap();
    let mut times = Vec::new();
    for dev in [EngineDevice::Hdd, EngineDevice::Ssd] {
        let mut t = EngineTarget::on(dev, 256 << 20, std::path::Path::new(".")).unwrap();
        spec.run(&t, &|| Ok(())).unwrap();
        let io = t.finish().unwrap().unwrap();
        let secs = io.modelled_secs.unwrap();
        assert!(secs > 0.0 && io.writes > 0, "{dev:?}: {io:?}");
        assert_eq!(io.seek_distance_bytes.is_some(), dev == EngineDevice::Hdd);
        times.push(secs);
    }
    // the same writes cost the modelled disk more than the modelled SSD
    assert!(times[0] > times[1], "{times:?}");
    // a memory device has no model
    let mut m = EngineTarget::in_memory(64 << 20).unwrap();
    spec.run(&m, &|| Ok(())).unwrap();
    assert!(m.finish().unwrap().unwrap().modelled_secs.is_none());
    // an image file lives in the backing directory while the target does, not after
    let backing = tempfile::tempdir().unwrap();
    {
        let t = EngineTarget::on(EngineDevice::File, 64 << 20, backing.path()).unwrap();
        spec.run(&t, &|| Ok(())).unwrap();
        assert_eq!(std::fs::read_dir(backing.path()).unwrap().count(), 1);
    }
    assert_eq!(std::fs::read_dir(backing.path()).unwrap().count(), 0);
    assert!(EngineTarget::on(
        EngineDevice::File,
        64 << 20,
        std::path::Path::new("/nonexistent")
    )
    .is_err());
}

#[test]
fn io_size_suffix_sets_postmark_buffers_and_bonnie_blocks() {
    for (name, io) in [
        ("postmark-fsl:512", 512),
        ("postmark-rfsl:8k", 8192),
        ("bonnie:1m", 1 << 20),
    ] {
        match named(name, 1.0, 1, 1.0).unwrap() {
            Spec::Postmark(c) => assert_eq!((c.read_block, c.write_block), (io, io), "{name}"),
            Spec::Bonnie(c) => assert_eq!(c.block, io),
            other => panic!("{name}: {other:?}"),
        }
    }
    for bad in [
        "postmark-fsl:0",
        "postmark-fsl:x",
        "varmail:4k",
        "bonnie:1g",
        "nope:4k",
    ] {
        assert!(named(bad, 1.0, 1, 1.0).is_none(), "{bad}");
    }
    // 512-byte buffers: more, smaller writes for the same files (counted by bytes, not calls)
    let t = EngineTarget::in_memory(256 << 20).unwrap();
    let o = named("postmark-quick:512", 0.1, 1, 1.0)
        .unwrap()
        .run(&t, &|| Ok(()))
        .unwrap();
    assert!(o.bytes_written > 0);
}

#[test]
fn rndrd_is_paper_001s_and_reads_cold() {
    // paper 001: 128 files x 32 MiB = 4 GiB, 1,000 requests; --scale scales the size only
    for (name, block) in [("rndrd-16k", 16 << 10), ("rndrd-1m", 1 << 20)] {
        let Some(Spec::RandRead(c)) = named(name, 1.0, 1, 60.0) else {
            panic!("{name}")
        };
        assert_eq!(
            (c.files, c.total, c.requests),
            (128, 4 << 30, 1000),
            "{name}"
        );
        assert_eq!(c.total / c.files as u64, 32 << 20);
        assert_eq!(c.block, block);
        let Some(Spec::RandRead(half)) = named(name, 0.5, 1, 60.0) else {
            panic!("{name}")
        };
        assert_eq!(
            (half.files, half.total, half.requests),
            (128, 2 << 30, 1000)
        );
    }
    let Some(Spec::Tool(sb)) = named("tool-sysbench", 1.0, 1, 60.0) else {
        panic!("tool-sysbench")
    };
    assert_eq!((sb.files, sb.total, sb.transactions), (128, 4 << 30, 1000));
    // on the engine: its own cache dropped after prepare, one latency sample per read
    let spec = named("rndrd-64k", 0.01, 2, 1.0).unwrap();
    let t = EngineTarget::in_memory(256 << 20).unwrap();
    let o = spec.run(&t, &|| Ok(())).unwrap();
    assert_eq!(o.detail["cache_dropped"], true);
    assert_eq!(o.latency["read"].count, 1000);
    // a target too small for the files: a clear error, not a bare ENOSPC
    let small = EngineTarget::in_memory(32 << 20).unwrap();
    let err = spec.run(&small, &|| Ok(())).unwrap_err().to_string();
    assert!(err.contains("--size") && err.contains("MiB"), "{err}");
}

#[test]
fn small_writes_sqlite_and_micro_record_latencies() {
    let parent = tempfile::tempdir().unwrap();
    for (name, op) in [
        ("fsync-4k-t2", "fsync"),
        ("tio-128", "write"),
        ("sqlite-wal", "update"),
        ("micro-rand-write", "create_file"),
        ("bonnie", "rewrite_write"),
    ] {
        let spec = named(name, 0.01, 3, 1.0).unwrap();
        let t = DirTarget::scratch(parent.path(), name).unwrap();
        let o = spec.run(&t, &|| Ok(())).unwrap();
        let n = match &spec {
            Spec::SmallWrites(c) => (c.threads * c.writes) as u64,
            Spec::Sqlite(c) => c.updates as u64,
            Spec::Micro(c) => (c.dirs * c.per_dir) as u64,
            Spec::Bonnie(c) => c.size / c.block as u64,
            other => panic!("{other:?}"),
        };
        assert_eq!(o.latency[op].count, n, "{name}");
    }
}

#[test]
fn tool_drivers_time_by_our_clock_and_read_latencies() {
    let parent = tempfile::tempdir().unwrap();
    for name in ["tool-postmark", "tool-sysbench", "tool-fio"] {
        let mut spec = named(name, 0.01, 3, 1.0).unwrap();
        let Spec::Tool(c) = &spec else { panic!() };
        if !moafs_bench::tools::installed(c.tool.program()) {
            eprintln!("{name}: not installed, skipped");
            continue;
        }
        let t = DirTarget::scratch(parent.path(), name).unwrap();
        let mut o = spec
            .run(&t, &|| Ok(()))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // A transaction phase shorter than one read of postmark's output (both phase lines
        // arrive together on a busy machine) falls back to the whole program's time; ten
        // times the transactions, up to three times, make a phase our clock can see.
        for _ in 0..3 {
            if name != "tool-postmark" || o.detail["timed"] == "transactions" {
                break;
            }
            assert_eq!(o.detail["timed"], "whole program", "{o:?}");
            assert_eq!(o.secs, o.detail["program_secs"].as_f64().unwrap());
            let Spec::Tool(c) = &mut spec else { panic!() };
            c.transactions *= 10;
            o = spec.run(&t, &|| Ok(())).unwrap();
        }
        let Spec::Tool(c) = &spec else { panic!() };
        assert!(o.secs > 0.0 && o.rate > 0.0, "{name}: {o:?}");
        match name {
            "tool-postmark" => {
                // the transaction phase by our clock, inside the program's run
                assert_eq!(o.detail["timed"], "transactions", "{o:?}");
                let prog = o.detail["program_secs"].as_f64().unwrap();
                assert!(o.secs < prog, "{} of {prog}", o.secs);
                let phases: f64 = ["creation_secs", "transaction_secs", "deletion_secs"]
                    .iter()
                    .map(|k| o.detail[k].as_f64().unwrap())
                    .sum();
                assert!(
                    (phases - prog).abs() < 0.05 * prog + 0.01,
                    "{phases} vs {prog}"
                );
                assert!(o.counts["reads"] + o.counts["appends"] > 0);
                assert!(o.latency.is_empty(), "postmark reports no latencies");
            }
            _ => {
                assert_eq!(o.latency["read"].count, c.transactions as u64, "{name}");
                if name == "tool-sysbench" {
                    assert_eq!(o.detail["cache_dropped"], true);
                }
            }
        }
        assert_eq!(
            std::fs::read_dir(t.dir().unwrap()).unwrap().count(),
            0,
            "{name}"
        );
    }
}
