//! `moafs crashcheck LOG`: checks every crash state of a mount recorded with `-o record=LOG`
//! (and its NVM tier, with `nvm=`) (`moafs_check::crashcheck`). Exit: 0 every state passed, 1 findings, 2 the log is unreadable.

use super::*;
use moafs_check::crashcheck::{crashcheck, CheckOptions};
use moafs_core::device::WriteLog;

#[derive(Args, Debug)]
pub(crate) struct CrashcheckArgs {
    /// States to check at least: every flush point, and seeded torn/reordered cuts between
    /// flushes shared out by the writes of each interval (as far as distinct cuts exist).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) states: u64,
    /// Seed of the random cuts: the same seed and --states check the same cuts.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Check only flush interval K (the number a finding names), with the same seed and
    /// --states as the run that found it.
    #[arg(long, value_name = "K")]
    pub(crate) interval: Option<usize>,
    /// Threads checking states (default: the CPUs available).
    #[arg(long)]
    pub(crate) jobs: Option<usize>,
    /// The write log (`-o record=LOG`).
    pub(crate) log: PathBuf,
}

pub(crate) fn cmd_crashcheck(a: &CrashcheckArgs) -> u8 {
    let start = std::time::Instant::now();
    let log = match WriteLog::read_file(&a.log) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("moafs crashcheck: {e}");
            return 2;
        }
    };
    let jobs = a.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let opts = CheckOptions {
        states: a.states,
        seed: a.seed,
        jobs: jobs.max(1),
        only_interval: a.interval,
    };
    let r = match crashcheck(&log, &opts, |_| {}) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("moafs crashcheck: {}: {e}", a.log.display());
            return 2;
        }
    };
    say!(
        "crashcheck: {}: {} records ({} writes, {} flushes, {} fsync promises, {} syncs){}",
        a.log.display(),
        r.records,
        r.writes,
        r.flushes,
        r.promises,
        r.syncs,
        if r.complete {
            ""
        } else {
            "; no End record (the mount did not end cleanly)"
        }
    );
    if log.tier_bytes().is_some() {
        say!(
            "crashcheck: NVM tier of {} bytes: {} stores, {} persists; {} tier persist points, {} states with the tier persisted past the device's last flush, {} with unpersisted tier stores dropped or torn",
            log.tier_bytes().unwrap_or(0),
            r.tier_stores,
            r.tier_persists,
            r.persist_points,
            r.tier_ahead_states,
            r.tier_lost_states
        );
    }
    say!(
        "crashcheck: {} states checked ({} flush points, {} torn/reordered cuts), {} sync promises, {} promise checks, {} orphan states (fsck -n flagged only inodes unlinked while open; the mount freed them), {} finding(s), {:.1} s",
        r.states,
        r.flush_points,
        r.random_cuts,
        r.sync_promises,
        r.promise_checks,
        r.orphan_states,
        r.findings.len(),
        start.elapsed().as_secs_f64()
    );
    for f in &r.findings {
        say!("FINDING in {}:\n  {}", f.state, f.what);
    }
    u8::from(!r.findings.is_empty())
}
