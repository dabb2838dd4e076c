//! Epochs and commit timing: which commit is the newest started and the newest durable,
//! whether a committer job (a commit, a write-behind round, a byte-log batch, a checkpoint)
//! is writing with the engine lock released, when the last commit ran, and what jbd2's
//! batching rule needs (the average commit time, who asked for the last fsync).
//!
//! Commits are numbered from 1 on each mount. A commit's own phase (B) runs between
//! `started` and `durable` (`commit_begin`/`commit_end`); `Fs::wait_durable` waits here.

use std::time::{Duration, Instant};

/// The longest an fsync waits for others to join its commit (jbd2's `max_batch_time`
/// defaults to 15 ms; a flush on the slowest devices moafs is for takes a few).
const MAX_BATCH: Duration = Duration::from_millis(2);

/// Commits quicker than this on average are not batched: waking a waiting thread takes
/// about as long (tens of µs), so waiting could not gather more changes than it costs.
const MIN_BATCH_COMMIT_NS: u64 = 20_000;

#[derive(Debug)]
pub(crate) struct Epochs {
    started: u64,
    durable: u64,
    /// A committer job is writing with the engine lock released: nothing may start another,
    /// evict cached blocks or drop caches until it ends.
    writing: bool,
    /// When the last commit ended (or the write-back timer found nothing to write).
    last_commit: Instant,
    /// When the last commit took its changes (its phase A).
    last_start: Instant,
    /// The average time of a commit's I/O (phase B), ns: three parts old, one part new.
    avg_ns: u64,
    /// Who asked for the last fsync (`Fs::fsync_for`).
    last_sync_caller: Option<u64>,
    /// The newest commit a syncing thread waits for (it will run it or join it): while it
    /// has not started, a byte-log batch for a grown map leaves its fsyncs to that commit
    /// (`grown.rs`).
    wanted: u64,
}

impl Default for Epochs {
    fn default() -> Epochs {
        let now = Instant::now();
        Epochs {
            started: 0,
            durable: 0,
            writing: false,
            last_commit: now,
            last_start: now,
            avg_ns: 0,
            last_sync_caller: None,
            wanted: 0,
        }
    }
}

impl Epochs {
    /// The newest commit started.
    pub(crate) fn started(&self) -> u64 {
        self.started
    }

    /// Whether commit `epoch` is durable.
    pub(crate) fn is_durable(&self, epoch: u64) -> bool {
        self.durable >= epoch
    }

    /// Whether a committer job is writing with the engine lock released.
    pub(crate) fn writing(&self) -> bool {
        self.writing
    }

    /// A committer job other than a commit (write-behind, a byte-log batch, a checkpoint)
    /// starts or ends its I/O with the engine lock released.
    pub(crate) fn set_writing(&mut self, writing: bool) {
        debug_assert_ne!(self.writing, writing);
        self.writing = writing;
    }

    /// Commit `epoch` took its changes and starts its I/O.
    pub(crate) fn commit_started(&mut self, epoch: u64) {
        debug_assert_eq!(epoch, self.started + 1);
        self.started = epoch;
        self.writing = true;
        self.last_start = Instant::now();
    }

    /// The I/O of the commit in flight ended (or panicked: `Inner::fail` follows).
    pub(crate) fn io_ended(&mut self) {
        self.writing = false;
    }

    /// Commit `epoch` is durable.
    pub(crate) fn commit_durable(&mut self, epoch: u64) {
        self.durable = epoch;
        self.last_commit = Instant::now();
    }

    /// How long since the last commit ended (or the timer last found nothing to write).
    pub(crate) fn since_last_commit(&self) -> Duration {
        self.last_commit.elapsed()
    }

    /// The write-back timer found nothing to write: its next look is a whole interval away.
    pub(crate) fn nothing_to_write(&mut self) {
        self.last_commit = Instant::now();
    }

    /// A commit's I/O took `ns`.
    pub(crate) fn note_commit_time(&mut self, ns: u64) {
        // as jbd2's average commit time: three parts old, one part new
        self.avg_ns = (self.avg_ns * 3 + ns) / 4;
    }

    /// An fsync from `caller`: whether it should batch (jbd2's rule: the last fsync came
    /// from another thread, so several are syncing).
    pub(crate) fn fsync_from(&mut self, caller: u64) -> bool {
        let batch = self.last_sync_caller.is_some_and(|t| t != caller);
        self.last_sync_caller = Some(caller);
        batch
    }

    /// How long a syncing thread that would lead the next commit should wait for others to
    /// join it: until the changes gathered since the last commit started are about one
    /// commit's time old, at most `MAX_BATCH`; none when commits are quicker than waking a
    /// thread (nobody could join).
    pub(crate) fn batch_wait(&self) -> Option<Duration> {
        let gathered = self.last_start.elapsed().as_nanos() as u64;
        (self.avg_ns >= MIN_BATCH_COMMIT_NS && self.avg_ns > gathered)
            .then(|| Duration::from_nanos(self.avg_ns - gathered).min(MAX_BATCH))
    }

    /// A syncing thread waits for commit `epoch` to run it or join it.
    pub(crate) fn want_commit(&mut self, epoch: u64) {
        self.wanted = self.wanted.max(epoch);
    }

    /// Whether some syncing thread waits for a commit that has not started: an fsync that
    /// could be served by records may as well join it. (An epoch, not a count of waiting
    /// threads: once the commit starts nobody waits for a future one, however long the
    /// waiters take to wake.)
    pub(crate) fn commit_wanted(&self) -> bool {
        self.wanted > self.started
    }

    /// Part of `check_invariants`: `failed` is whether the file system failed (a commit
    /// that failed never becomes durable).
    pub(crate) fn check(&self, failed: bool) -> Result<(), String> {
        if self.durable > self.started || (!self.writing && self.durable != self.started && !failed)
        {
            return Err(format!(
                "epochs: started {}, durable {}, writing {}",
                self.started, self.durable, self.writing
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Epochs;

    #[test]
    fn a_wanted_commit_stops_being_wanted_once_it_starts() {
        let mut e = Epochs::default();
        assert!(!e.commit_wanted());
        e.want_commit(1);
        e.want_commit(1); // a second waiter for the same commit
        assert!(e.commit_wanted());
        e.commit_started(1);
        // both waiters may still be asleep: nobody waits for a commit not yet started
        assert!(!e.commit_wanted());
        e.io_ended();
        e.commit_durable(1);
        e.want_commit(2);
        assert!(e.commit_wanted());
    }
}
