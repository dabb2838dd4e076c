//! The run ([`crashcheck`]): per flush interval, and in it per tier segment (one without a
//! tier), the states to check — the segment's barrier point and seeded random cuts, each
//! named so that it can be found again — checked on `opts.jobs` threads over the durable
//! image and tier, which then advance to the next barrier.

use super::cow::{CowDevice, CowNvm};
use super::plan::{plan, sync_promises, Interval, Segment};
use super::promise::Promise;
use super::state::check_state;
use super::{CheckOptions, CheckReport, Finding};
use moafs_core::device::{nvm_cut, LogRecord, NvmCut, WriteLog};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Findings after which the run stops (the first ones say what is wrong).
const FINDINGS_MAX: usize = 20;

/// A state's device writes: (index into the interval's writes, bytes of it that land), in
/// order.
type Cut = Vec<(usize, u64)>;

/// A state's unpersisted tier stores: runs of kept bytes (index into the segment's pending
/// stores, first byte within the store, length), in order.
type TierCut = Vec<(usize, usize, usize)>;

/// `FaultDevice`'s random cut (each write kept with probability ½, one kept write torn at a
/// random sector); a write torn to nothing is a write dropped: the same state.
fn random_cut(writes: &[(u64, u64)], seed: u64) -> Cut {
    let mut kept = moafs_core::device::random_cut(writes, seed);
    kept.retain(|&(_, n)| n > 0);
    kept
}

/// The tier's cut of a draw: a quarter drop every unpersisted store, a quarter keep them
/// all, half keep each 8-byte word by a coin (`FaultNvm`'s `NvmCut::Words`).
fn tier_cut(stores: &[(u64, usize)], seed: u64) -> (TierCut, NvmCut) {
    let t = mix(seed ^ 0x7469_6572);
    let how = match t % 4 {
        0 => NvmCut::DropAll,
        1 => NvmCut::KeepAll,
        _ => NvmCut::Words(t),
    };
    (nvm_cut(stores, how), how)
}

/// splitmix64: one seed per (run seed, interval, draw).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// One state of a segment to check.
struct Job {
    name: String,
    cut: Cut,
    tier: TierCut,
    /// Record indices between which the state may be the disk and the tier: from its last
    /// kept write or store (or the segment's start) to the segment's end.
    from: usize,
    to: usize,
    /// Some unpersisted tier store is dropped or torn.
    tier_lost: bool,
}

/// What the run keeps while it walks the log: the durable image and tier.
struct Durable {
    image: Arc<Vec<u8>>,
    tier: Option<Arc<Vec<u8>>>,
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
    let segments: u64 = plan.intervals.iter().map(|i| i.segments.len() as u64).sum();
    let random_total = opts.states.saturating_sub(segments);
    let weight_total: u64 = plan
        .intervals
        .iter()
        .flat_map(|i| &i.segments)
        .map(weight)
        .sum();
    let mut durable = Durable {
        image: Arc::new(std::mem::take(&mut plan.base)),
        tier: plan.tier.take().map(Arc::new),
    };
    let mut promises = std::mem::take(&mut plan.promises);
    for (k, iv) in plan.intervals.iter().enumerate() {
        for &(start, end) in plan
            .syncs
            .iter()
            .filter(|s| (iv.start..iv.end).contains(&s.1))
        {
            let made = sync_promises(&plan, &durable.image, durable.tier.as_ref(), start, end);
            report.sync_promises += made.len() as u64;
            promises.extend(made);
        }
        for (j, seg) in iv.segments.iter().enumerate() {
            if opts.only_interval.is_none_or(|only| only == k) {
                let want = (random_total * weight(seg)).div_ceil(weight_total.max(1));
                let jobs = draw(log, opts, (k, iv), (j, seg), want);
                run_segment(log, &promises, iv, seg, &durable, &jobs, opts, &mut report);
                if j == 0 {
                    report.flush_points += 1;
                } else {
                    report.persist_points += 1;
                }
            }
            if seg.persisted {
                // the next tier persist point: every store since the last one is persistent
                let tier = durable
                    .tier
                    .as_mut()
                    .ok_or("a tier persist without a tier")?;
                let img = Arc::make_mut(tier);
                for &r in &seg.stores {
                    if let LogRecord::TierStore { offset, data } = &log.records[r] {
                        let o = *offset as usize;
                        img[o..o + data.len()].copy_from_slice(data);
                    }
                }
            }
        }
        if opts.only_interval.is_none_or(|only| only == k) {
            progress(&report);
        }
        if opts.only_interval.is_some_and(|only| only <= k) {
            break;
        }
        if report.findings.len() >= FINDINGS_MAX {
            break;
        }
        // the next flush point: every write of this interval landed
        let img = Arc::make_mut(&mut durable.image);
        for &r in &iv.writes {
            if let LogRecord::Write { offset, data } = &log.records[r] {
                let o = *offset as usize;
                img[o..o + data.len()].copy_from_slice(data);
            }
        }
    }
    Ok(report)
}

/// How much of the random cuts a segment gets: the writes and stores a cut of it decides on.
fn weight(seg: &Segment) -> u64 {
    (seg.writes + seg.stores.len()) as u64
}

/// (offset, length) of each of `records` (writes or tier stores).
fn spans(log: &WriteLog, records: &[usize]) -> Vec<(u64, u64)> {
    records
        .iter()
        .map(|&r| match &log.records[r] {
            LogRecord::Write { offset, data } | LogRecord::TierStore { offset, data } => {
                (*offset, data.len() as u64)
            }
            _ => (0, 0),
        })
        .collect()
}

/// The states of segment `j` of interval `k`: its barrier point (none of the interval's
/// writes, no unpersisted store) and up to `want` distinct seeded cuts. Segment 0 draws as
/// the checker did before tiers were recorded (the same seeds).
fn draw(
    log: &WriteLog,
    opts: &CheckOptions,
    (k, iv): (usize, &Interval),
    (j, seg): (usize, &Segment),
    want: u64,
) -> Vec<Job> {
    let writes = spans(log, &iv.writes[..seg.writes]);
    let stores: Vec<(u64, usize)> = spans(log, &seg.stores)
        .into_iter()
        .map(|(o, n)| (o, n as usize))
        .collect();
    let name = if j == 0 {
        format!("flush point {k} (log record {}; no write since)", iv.start)
    } else {
        format!(
            "flush interval {k} (after log record {}) at tier persist {j} (log record {}): none \
             of its writes kept, no unpersisted tier store",
            iv.start, seg.start
        )
    };
    let mut jobs = vec![Job {
        name,
        cut: Vec::new(),
        tier: Vec::new(),
        from: seg.start,
        to: seg.end,
        tier_lost: !stores.is_empty(),
    }];
    if writes.is_empty() && stores.is_empty() {
        return jobs;
    }
    let salt = if j == 0 { 0 } else { mix((j as u64) << 40) };
    let mut seen: HashSet<(Cut, TierCut)> = HashSet::new();
    seen.insert((Vec::new(), Vec::new()));
    for d in 0..want.saturating_mul(4) {
        if jobs.len() as u64 > want {
            break;
        }
        let seed = mix(opts.seed ^ mix(k as u64) ^ mix(d.wrapping_add(1) << 32)) ^ salt;
        let cut = random_cut(&writes, seed);
        let (tier, how) = if stores.is_empty() {
            (Vec::new(), NvmCut::DropAll)
        } else {
            tier_cut(&stores, seed)
        };
        if !seen.insert((cut.clone(), tier.clone())) {
            continue;
        }
        let last_write = cut.last().map_or(0, |&(w, _)| iv.writes[w]);
        let last_store = tier.last().map_or(0, |&(s, _, _)| seg.stores[s]);
        let kept: usize = tier.iter().map(|r| r.2).sum();
        let stored: usize = stores.iter().map(|s| s.1).sum();
        let mut name = describe(k, iv, &writes, &cut, seed);
        if j > 0 && stores.is_empty() {
            name = format!(
                "{name}; tier segment {j} (after log record {}): no unpersisted store",
                seg.start
            );
        } else if !stores.is_empty() {
            name = format!(
                "{name}; tier segment {j} (after log record {}): {kept} of the {stored} bytes of \
                 its {} unpersisted stores [{}] kept ({how:?})",
                seg.start,
                stores.len(),
                seg.stores
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
        jobs.push(Job {
            name,
            cut,
            tier,
            from: seg.start.max(last_write).max(last_store),
            to: seg.end,
            tier_lost: kept < stored,
        });
    }
    jobs
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

/// Builds a job's state: the durable image with its kept writes, the durable tier with its
/// kept stores.
fn build(
    log: &WriteLog,
    iv: &Interval,
    seg: &Segment,
    durable: &Durable,
    job: &Job,
) -> (Arc<CowDevice>, Option<Arc<CowNvm>>) {
    let dev = Arc::new(CowDevice::new(durable.image.clone()));
    for &(w, n) in &job.cut {
        if let LogRecord::Write { offset, data } = &log.records[iv.writes[w]] {
            dev.write_bytes(*offset, &data[..n as usize]);
        }
    }
    let tier = durable
        .tier
        .as_ref()
        .map(|t| Arc::new(CowNvm::new(t.clone())));
    if let Some(t) = &tier {
        for &(s, from, len) in &job.tier {
            if let LogRecord::TierStore { offset, data } = &log.records[seg.stores[s]] {
                t.write_bytes(offset + from as u64, &data[from..from + len]);
            }
        }
    }
    (dev, tier)
}

/// Checks `jobs` (states of segment `seg` of interval `iv` over the durable image and tier)
/// on `opts.jobs` threads.
#[allow(clippy::too_many_arguments)]
fn run_segment(
    log: &WriteLog,
    promises: &[Promise],
    iv: &Interval,
    seg: &Segment,
    durable: &Durable,
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
        let (dev, tier) = build(log, iv, seg, durable, job);
        // every promise alive at some moment the state may be: logged before its window
        // ends (so made durable by a barrier at or before the segment's start) and not
        // ended before the window begins
        let due: Vec<Promise> = promises
            .iter()
            .filter(|p| p.start < job.to && p.end > job.from)
            .cloned()
            .collect();
        let (bad, n, orphans) = check_state(dev, tier, &due);
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
    let done = (next.load(Ordering::Relaxed) as usize).min(jobs.len());
    report.states += done as u64;
    report.random_cuts += done.saturating_sub(1) as u64;
    let ahead = seg.start > iv.start;
    if ahead {
        report.tier_ahead_states += done as u64;
    }
    report.tier_lost_states += jobs[..done].iter().filter(|j| j.tier_lost).count() as u64;
    report.promise_checks += checks.load(Ordering::Relaxed);
    report.orphan_states += orphaned.load(Ordering::Relaxed);
    let mut f = found.into_inner().unwrap_or_else(|e| e.into_inner());
    f.sort_by_key(|(j, _)| *j);
    report.findings.extend(f.into_iter().map(|(_, f)| f));
}
