//! The co-writing experiment on the model disk, at a small size: every test runs for both
//! variants, co-writing cuts the device writes of small files and leaves large files alone,
//! and the modelled figures are reproducible.
use moafs_bench::cowrite_exp::{ratios, run, table, ExpConfig, ExpReport};

fn small(tests: &[&str], utilisations: Vec<f64>) -> ExpConfig {
    ExpConfig {
        size: 192 << 20,
        utilisations,
        // (0.8 needs more files than this image holds)
        layout: 0.9,
        dirs: 6,
        per_dir: 30,
        large_files: 2,
        large_size: 4 << 20,
        postmark_scale: 0.02,
        tests: tests.iter().map(|s| s.to_string()).collect(),
        ..ExpConfig::default()
    }
}

fn row<'a>(
    r: &'a ExpReport,
    test: &str,
    util: f64,
    on: bool,
    el: bool,
) -> &'a moafs_bench::cowrite_exp::ExpRow {
    r.rows
        .iter()
        .find(|x| x.test == test && x.cowrite == on && x.elevator == el && x.utilisation == util)
        .unwrap_or_else(|| panic!("no row {test} {util} {on} {el}"))
}

#[test]
fn every_test_runs_for_both_variants_and_cowriting_cuts_small_file_writes() {
    let all = moafs_bench::cowrite_exp::TESTS;
    let r = run(&small(all, vec![0.0, 0.3]), &mut |_| {}).unwrap();
    assert_eq!(r.rows.len(), all.len() * 2 * 2 * 2);
    assert_eq!(r.images.len(), 2);
    assert!(r.images[1].reached, "{:?}", r.images[1]);
    assert!(r.images[1].utilisation >= 0.3, "{:?}", r.images[1]);
    for el in [false, true] {
        for u in [0.0, 0.3] {
            let (on, off) = (
                row(&r, "rand-write", u, true, el),
                row(&r, "rand-write", u, false, el),
            );
            assert_eq!(on.payload_bytes, off.payload_bytes);
            assert!(on.engine.cowrite_batches > 0 && off.engine.cowrite_batches == 0);
            assert!(
                on.device.writes * 3 <= off.device.writes,
                "writes on {} off {}",
                on.device.writes,
                off.device.writes
            );
            // Dirty order: a seek per file saved. Address order: on an empty image both
            // sweep once (a few per cent either way), on an aged one co-writing gains.
            let bound = match (el, u > 0.0) {
                (false, _) => 0.5,
                (true, false) => 1.05,
                (true, true) => 0.99,
            };
            assert!(
                on.modelled_secs <= off.modelled_secs * bound,
                "{}",
                table(&r)
            );
            // Large files are not co-written: the same requests either way.
            let (lon, loff) = (
                row(&r, "large-write", u, true, el),
                row(&r, "large-write", u, false, el),
            );
            assert_eq!(lon.engine.cowrite_files, 0);
            assert_eq!(lon.device.writes, loff.device.writes);
            // Reading a directory's files back is no slower for co-written files.
            assert!(
                row(&r, "dir-read", u, true, el).modelled_secs
                    <= row(&r, "dir-read", u, false, el).modelled_secs * 1.02
            );
            let (bw, time, wr) = ratios(&r, "rand-write", u, el).unwrap();
            assert!(
                (bw - 1.0 / time).abs() < 1e-6 && wr >= 3.0,
                "{bw} {time} {wr}"
            );
        }
    }
    // The paper's FFS baseline (dirty order) seeks between directories for every file.
    assert!(
        row(&r, "rand-write", 0.0, false, false).modelled_secs
            > 2.0 * row(&r, "rand-write", 0.0, false, true).modelled_secs
    );
    let t = table(&r);
    assert!(t.contains("| rand-write | address | 30 % |"), "{t}");
    let svgs = moafs_bench::cowrite_exp::plots(&r).unwrap();
    assert_eq!(svgs.len(), all.len());
    assert!(svgs.iter().all(|(_, s)| s.contains("<svg")));
}

#[test]
fn modelled_results_are_reproducible_and_bad_tests_are_refused() {
    let cfg = ExpConfig {
        elevator: vec![true],
        ..small(&["rand-write"], vec![0.2])
    };
    let a = run(&cfg, &mut |_| {}).unwrap();
    let b = run(&cfg, &mut |_| {}).unwrap();
    let key = |r: &ExpReport| {
        r.rows
            .iter()
            .map(|x| (x.modelled_secs, x.device.writes, x.engine.cowrite_batches))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&a), key(&b));
    assert_eq!(a.images[0].layout_score, b.images[0].layout_score);
    let bad = ExpConfig {
        tests: vec!["nope".into()],
        ..cfg
    };
    let e = run(&bad, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("unknown test"), "{e}");
}
