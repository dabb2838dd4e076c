use moafs_bench::postmark::{run, PostmarkConfig};
use moafs_bench::target::{append_file, create_file, DirTarget, EngineTarget, Target};

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
    // every transaction is one (read | append) and one (create | delete)
    assert_eq!(
        c.reads + c.appends + c.creates + c.deletes + c.skipped,
        2 * 2_000
    );
    assert_eq!(c.skipped, 0, "300 files never run out here");
    // biases 5/10: each side near half (binomial, n = 2000: ±6 sd is ±134)
    for (n, what) in [(c.reads, "reads"), (c.creates, "creates")] {
        assert!((866..=1134).contains(&n), "{what} = {n}");
    }
    assert_eq!(c.deleted_final, 300 + c.creates - c.deletes);
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
fn reads_return_what_was_written() {
    // One file, no transactions that create or delete: reads see the initial size plus appends.
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
    // create_bias 0 means every second half is a delete: the only file goes at once, and the
    // rest of the transactions find nothing.
    let t = EngineTarget::in_memory(64 << 20).unwrap();
    let c = run(&t, &cfg).unwrap().counts;
    assert_eq!((c.reads, c.deletes), (1, 1));
    assert_eq!(c.bytes_read, 1000);
    assert_eq!(c.skipped, 2 * 50 - 2);
    assert_eq!(c.deleted_final, 0);
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
