use moafs_bench::postmark::{run, PostmarkConfig};
use moafs_bench::target::{append_file, create_file, DirTarget, EngineTarget, Fh, Mode, Target};
use std::io;
use std::sync::Mutex;

fn small(seed: u64) -> PostmarkConfig {
    PostmarkConfig {
        files: 300,
        subdirs: 7,
        transactions: 2_000,
        seed,
        ..PostmarkConfig::fsl()
    }
}

#[test]
fn operation_mix_adds_up_and_leaves_nothing_behind() {
    let cfg = small(42);
    let t = EngineTarget::in_memory(256 << 20).unwrap();
    let r = run(&t, &cfg).unwrap();
    let c = &r.counts;
    assert_eq!(c.created_initial, 300);
    // every transaction is one (read | append) and one (create | delete); a half that did
    // nothing (an append to a full file, a create with the table full) is `skipped`
    assert_eq!(r.transactions_done, 2_000);
    assert_eq!(
        c.reads + c.appends + c.creates + c.deletes + c.skipped,
        2 * 2_000
    );
    // biases 5/10: each side near half (binomial, n = 2000: ±6 sd is ±134)
    for (n, what) in [(c.reads, "reads"), (c.creates, "creates")] {
        assert!((866..=1134).contains(&n), "{what} = {n}");
    }
    assert_eq!(c.deleted_final, 300 + c.creates - c.deletes);
    // one latency sample per transaction half of each kind
    let l = moafs_bench::latency::Latencies::summary(&r.latency);
    for (k, n) in [
        ("read", c.reads),
        ("append", c.appends),
        ("create", c.creates),
        ("delete", c.deletes),
    ] {
        assert_eq!(l[k].count, n, "{k}");
    }
    // bytes written: the initial files, the creates, the appends — each at least 1 byte
    assert!(c.bytes_written >= 512 * (300 + c.creates) + c.appends);
    assert!(c.bytes_read > 0);
    assert!(r.transactions_per_sec > 0.0);
    // the engine target reports its counters
    assert!(t.counters().is_some());
    t.unmount().unwrap();
}

#[test]
fn same_seed_same_operations_on_every_target() {
    let cfg = small(7);
    let e = EngineTarget::in_memory(256 << 20).unwrap();
    let on_engine = run(&e, &cfg).unwrap().counts;
    e.unmount().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = DirTarget::new(dir.path()).unwrap();
    let on_dir = run(&d, &cfg).unwrap().counts;
    assert_eq!(
        on_engine, on_dir,
        "the op sequence depends on the seed only"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "all removed"
    );
    // bytes read are what the files held: equal on both targets (checked above), and another
    // seed gives another sequence
    let e = EngineTarget::in_memory(256 << 20).unwrap();
    let other = run(&e, &small(8)).unwrap().counts;
    assert_ne!(other, on_engine);
}

#[test]
fn reads_return_what_was_written_and_running_out_of_files_ends_the_phase() {
    // One file, reads only, deletes only: the first transaction reads it and deletes it, the
    // second finds no file ("out of files!") and the phase ends, as postmark's does.
    let cfg = PostmarkConfig {
        files: 1,
        subdirs: 0,
        transactions: 50,
        size_low: 1000,
        size_high: 1000,
        read_bias: 10,
        create_bias: 0,
        ..PostmarkConfig::fsl()
    };
    let t = EngineTarget::in_memory(64 << 20).unwrap();
    let r = run(&t, &cfg).unwrap();
    let c = &r.counts;
    assert_eq!((c.reads, c.deletes), (1, 1));
    assert_eq!(c.bytes_read, 1000);
    assert_eq!(r.transactions_done, 1);
    assert_eq!(c.deleted_final, 0);
}

/// An engine target that remembers the largest file it was asked to delete and every open
/// mode.
struct Watch {
    inner: EngineTarget,
    largest_deleted: Mutex<u64>,
}

impl Target for Watch {
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
        let size = self.inner.stat(p)?;
        let mut m = self.largest_deleted.lock().unwrap();
        *m = (*m).max(size);
        self.inner.remove(p)
    }
    fn stat(&self, p: &str) -> io::Result<u64> {
        self.inner.stat(p)
    }
    fn open(&self, p: &str, mode: Mode) -> io::Result<Fh> {
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
}

#[test]
fn appends_never_grow_a_file_past_the_high_size() {
    // appends only (no creates or deletes): 20 files, 3,000 appends. Without postmark's cap
    // (append RND(high - size) + 1 bytes, only below high) the files would reach ~ 1 MB.
    let cfg = PostmarkConfig {
        files: 20,
        subdirs: 0,
        transactions: 3_000,
        size_low: 512,
        size_high: 4096,
        read_bias: 0,
        create_bias: -1,
        ..PostmarkConfig::fsl()
    };
    let t = Watch {
        inner: EngineTarget::in_memory(64 << 20).unwrap(),
        largest_deleted: Mutex::new(0),
    };
    let r = run(&t, &cfg).unwrap();
    let c = &r.counts;
    assert_eq!(c.appends + c.skipped, 3_000);
    assert!(
        c.appends > 20 && c.skipped > 2_000,
        "the files fill up: {c:?}"
    );
    assert_eq!(c.deleted_final, 20);
    let largest = *t.largest_deleted.lock().unwrap();
    assert!(largest <= 4096, "a file of {largest} bytes");
    // the files end full or nearly: all written bytes are in them, at most 20 × high
    assert!(c.bytes_written <= 20 * 4096, "{c:?}");
    assert!(largest > 4000, "{largest}");
}

/// postmark's verbose report: (created, read, appended, deleted) and the bytes read and
/// written as it prints them ("3.27 megabytes", "953.12 kilobytes").
type Report = ((u64, u64, u64, u64), String, String);

fn postmark_report(text: &str) -> Option<Report> {
    let num = |what: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(what))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let amount = |what: &str| -> Option<String> {
        let l = text
            .lines()
            .find(|l| l.contains(what) && l.contains("bytes"))?;
        let w: Vec<&str> = l.split_whitespace().collect();
        Some(format!("{} {}", w.first()?, w.get(1)?))
    };
    Some((
        (
            num("created")?,
            num("read")?,
            num("appended")?,
            num("deleted")?,
        ),
        amount(" read (")?,
        amount(" written (")?,
    ))
}

/// postmark's `scalef`.
fn scalef(b: u64) -> String {
    let b = b as f32;
    if b / 1_048_576.0 > 1.0 {
        format!("{:.2} megabytes", b / 1_048_576.0)
    } else {
        format!("{:.2} kilobytes", b / 1024.0)
    }
}

#[test]
fn same_operations_as_the_postmark_program() {
    // The native run draws postmark's random numbers in postmark's order: with the same
    // configuration it creates, reads, appends and deletes exactly what `postmark` does.
    if !moafs_bench::tools::installed("postmark") {
        eprintln!("postmark not installed: skipped");
        return;
    }
    for (seed, subdirs, low, high, block) in [(7, 5, 500, 10_000, 512), (42, 0, 100, 3000, 4096)] {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("pm.cfg");
        std::fs::create_dir(dir.path().join("work")).unwrap();
        std::fs::write(
            &conf,
            format!(
                "set location {}\nset number 200\nset subdirectories {subdirs}\n\
                 set size {low} {high}\nset read {block}\nset write {block}\n\
                 set buffering false\nset transactions 1000\nset seed {seed}\nrun\nquit\n",
                dir.path().join("work").display()
            ),
        )
        .unwrap();
        let out = std::process::Command::new("postmark")
            .arg(&conf)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let theirs = postmark_report(&text).unwrap_or_else(|| panic!("{text}"));
        let cfg = PostmarkConfig {
            files: 200,
            subdirs,
            size_low: low,
            size_high: high,
            transactions: 1000,
            read_block: block,
            write_block: block,
            seed,
            ..PostmarkConfig::fsl()
        };
        let t = EngineTarget::in_memory(256 << 20).unwrap();
        let r = run(&t, &cfg).unwrap();
        let c = &r.counts;
        let ours = (
            (
                c.created_initial + c.creates,
                c.reads,
                c.appends,
                c.deletes + c.deleted_final,
            ),
            scalef(c.bytes_read),
            scalef(c.bytes_written),
        );
        assert_eq!(ours, theirs, "seed {seed}: {text}");
    }
}

#[test]
fn bad_configuration_is_an_error_not_a_panic() {
    let cfg = PostmarkConfig {
        size_low: 10,
        size_high: 5,
        ..small(1)
    };
    let t = EngineTarget::in_memory(64 << 20).unwrap();
    assert!(run(&t, &cfg).is_err());
    assert!(DirTarget::new(std::path::Path::new("/nonexistent/moafs")).is_err());
}

#[test]
fn scratch_directories_are_removed_also_after_a_failed_run() {
    let parent = tempfile::tempdir().unwrap();
    {
        let t = DirTarget::scratch(parent.path(), "run1").unwrap();
        t.mkdir("s0").unwrap();
        create_file(&t, "s0/f", b"x", 4096).unwrap();
        // a failing operation mid-run
        assert!(append_file(&t, "s0/missing", b"y", 4096).is_err());
    }
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    assert!(DirTarget::scratch(std::path::Path::new("/nonexistent/x"), "r").is_err());
}

#[test]
fn rfsl_sizes_follow_the_papers_distribution() {
    use moafs_bench::postmark::real_size;
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let n = 100_000;
    let sizes: Vec<usize> = (0..n).map(|_| real_size(&mut rng)).collect();
    let share = |limit: usize| sizes.iter().filter(|&&s| s <= limit).count() as f64 / n as f64;
    // paper 000: 79 % of files up to 8 KB, 80 % up to 10 KB
    assert!((share(8 << 10) - 0.79).abs() < 0.01, "{}", share(8 << 10));
    assert!((share(10 << 10) - 0.80).abs() < 0.01, "{}", share(10 << 10));
    assert!(sizes.iter().all(|&s| (1..=1 << 20).contains(&s)));
    let cfg = PostmarkConfig {
        files: 200,
        transactions: 500,
        ..PostmarkConfig::rfsl()
    };
    let t = EngineTarget::in_memory(256 << 20).unwrap();
    let c = run(&t, &cfg).unwrap().counts;
    assert_eq!(c.created_initial, 200);
    assert_eq!(c.deleted_final, 200 + c.creates - c.deletes);
}
