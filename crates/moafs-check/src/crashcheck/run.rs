//! The run ([`crashcheck`]): per flush interval, the states to check — its flush point and
//! seeded random cuts, each named so that it can be found again — checked on `opts.jobs`
//! threads over the durable image, which then advances to the next flush point.

use super::cow::CowDevice;
use super::plan::{plan, sync_promises, Interval};
use super::promise::Promise;
use super::state::check_state;
use super::{CheckOptions, CheckReport, Finding};
use moafs_core::device::{LogRecord, WriteLog};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Findings after which the run stops (the first ones say what is wrong).
const FINDINGS_MAX: usize = 20;

/// A state to check: (index into the interval's writes, bytes of it that land), in order.
type Cut = Vec<(usize, u64)>;

/// `FaultDevice`'s random cut (each write kept with probability ½, one kept write torn at a
/// random sector); a write torn to nothing is a write dropped: the same state.
fn random_cut(writes: &[(u64, u64)], seed: u64) -> Cut {
    let mut kept = moafs_core::device::random_cut(writes, seed);
    kept.retain(|&(_, n)| n > 0);
    kept
}

/// splitmix64: one seed per (run seed, interval, draw).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// One state of an interval to check.
struct Job {
    name: String,
    cut: Cut,
    /// Record index from which the state may be the disk (its last kept write, or the
    /// interval's start).
    from: usize,
}

/// Checks the crash states of `log`; `progress` is called after each interval with the
/// states checked so far.
pub fn crashcheck(
    log: &WriteLog,
    opts: &CheckOptions,
    mut progress: impl FnMut(&CheckReport),
) -> Result<CheckReport, String> {
    let mut report = CheckReport::default();
    let mut plan = plan(log, &mut report)?;
    let n_int = plan.intervals.len() as u64;
    let random_total = opts.states.saturating_sub(n_int);
    let writes_total: u64 = plan.intervals.iter().map(|i| i.writes.len() as u64).sum();
    let mut image = Arc::new(std::mem::take(&mut plan.base));
    let mut promises = std::mem::take(&mut plan.promises);
    for (k, iv) in plan.intervals.iter().enumerate() {
        let writes: Vec<(u64, u64)> = iv
            .writes
            .iter()
            .map(|&r| match &log.records[r] {
                LogRecord::Write { offset, data } => (*offset, data.len() as u64),
                _ => (0, 0),
            })
            .collect();
        let mut jobs = vec![Job {
            name: format!("flush point {k} (log record {}; no write since)", iv.start),
            cut: Vec::new(),
            from: iv.start,
        }];
        if !writes.is_empty() && writes_total > 0 {
            let want = (random_total * writes.len() as u64).div_ceil(writes_total);
            let mut seen: HashSet<Cut> = HashSet::new();
            seen.insert(Vec::new());
            for draw in 0..want.saturating_mul(4) {
                if jobs.len() as u64 > want {
                    break;
                }
                let seed = mix(opts.seed ^ mix(k as u64) ^ mix(draw.wrapping_add(1) << 32));
                let cut = random_cut(&writes, seed);
                if !seen.insert(cut.clone()) {
                    continue;
                }
                let from = cut.last().map_or(iv.start, |&(w, _)| iv.writes[w]);
                jobs.push(Job {
                    name: describe(k, iv, &writes, &cut, seed),
                    cut,
                    from,
                });
            }
        }
        for &(start, end) in plan
            .syncs
            .iter()
            .filter(|s| (iv.start..iv.end).contains(&s.1))
        {
            let made = sync_promises(&plan, &image, start, end);
            report.sync_promises += made.len() as u64;
            promises.extend(made);
        }
        if opts.only_interval.is_none_or(|only| only == k) {
            run_interval(log, &promises, iv, &image, &jobs, opts, &mut report);
            progress(&report);
        }
        if opts.only_interval.is_some_and(|only| only <= k) {
            break;
        }
        if report.findings.len() >= FINDINGS_MAX {
            break;
        }
        // the next flush point: every write of this interval landed
        let img = Arc::make_mut(&mut image);
        for &r in &iv.writes {
            if let LogRecord::Write { offset, data } = &log.records[r] {
                let o = *offset as usize;
                img[o..o + data.len()].copy_from_slice(data);
            }
        }
    }
    Ok(report)
}

fn describe(k: usize, iv: &Interval, writes: &[(u64, u64)], cut: &Cut, seed: u64) -> String {
    let torn: Vec<String> = cut
        .iter()
        .filter(|&&(w, n)| n < writes[w].1)
        .map(|&(w, n)| {
            format!(
                "write {w} (log record {}, {} bytes at {}) torn to {n} bytes",
                iv.writes[w], writes[w].1, writes[w].0
            )
        })
        .collect();
    format!(
        "flush interval {k} (after log record {}): {} of its {} writes kept [{}]{}; cut seed {seed:#x}",
        iv.start,
        cut.len(),
        writes.len(),
        cut.iter().map(|(w, _)| w.to_string()).collect::<Vec<_>>().join(","),
        if torn.is_empty() {
            String::new()
        } else {
            format!(", {}", torn.join(", "))
        }
    )
}

/// Checks `jobs` (states of interval `iv` over the durable `image`) on `opts.jobs` threads.
fn run_interval(
    log: &WriteLog,
    promises: &[Promise],
    iv: &Interval,
    image: &Arc<Vec<u8>>,
    jobs: &[Job],
    opts: &CheckOptions,
    report: &mut CheckReport,
) {
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let found: Mutex<Vec<(usize, Finding)>> = Mutex::new(Vec::new());
    let checks = AtomicU64::new(0);
    let orphaned = AtomicU64::new(0);
    let worker = || loop {
        let j = next.fetch_add(1, Ordering::Relaxed) as usize;
        if j >= jobs.len() || stop.load(Ordering::Relaxed) {
            return;
        }
        let job = &jobs[j];
        let dev = Arc::new(CowDevice::new(image.clone()));
        for &(w, n) in &job.cut {
            if let LogRecord::Write { offset, data } = &log.records[iv.writes[w]] {
                dev.write_bytes(*offset, &data[..n as usize]);
            }
        }
        let due: Vec<Promise> = promises
            .iter()
            .filter(|p| p.start < iv.end && p.end > job.from)
            .cloned()
            .collect();
        let (bad, n, orphans) = check_state(dev, &due);
        checks.fetch_add(n, Ordering::Relaxed);
        orphaned.fetch_add(u64::from(orphans), Ordering::Relaxed);
        if !bad.is_empty() {
            let mut f = found.lock().unwrap_or_else(|e| e.into_inner());
            f.push((
                j,
                Finding {
                    state: job.name.clone(),
                    what: bad.join("; "),
                },
            ));
            if f.len() >= FINDINGS_MAX {
                stop.store(true, Ordering::Relaxed);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..opts.jobs.max(1) {
            s.spawn(worker);
        }
        worker();
    });
    let done = (next.load(Ordering::Relaxed) as usize).min(jobs.len()) as u64;
    report.states += done;
    report.flush_points += 1;
    report.random_cuts += done.saturating_sub(1);
    report.promise_checks += checks.load(Ordering::Relaxed);
    report.orphan_states += orphaned.load(Ordering::Relaxed);
    let mut f = found.into_inner().unwrap_or_else(|e| e.into_inner());
    f.sort_by_key(|(j, _)| *j);
    report.findings.extend(f.into_iter().map(|(_, f)| f));
}
