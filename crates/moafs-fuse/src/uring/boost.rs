//! A queue's thread runs in SCHED_IDLE (`server.rs`: a caller woken by its reply stays on its
//! own CPU), which is right while one caller keeps the daemon busy and wrong when several
//! threads create and remove files in a directory: each such request holds the directory's
//! lock in the kernel (`i_rwsem`) across its round trip, every other caller of that directory
//! queues behind it, and a SCHED_IDLE thread woken for it waits until nothing else on its CPU
//! wants to run. Filebench varmail (16 threads, one directory) spent 12 of its 16 threads
//! waiting for that lock: its LOOKUP, MKNOD and UNLINK took 45-60 µs from the kernel's send
//! to its reply, of which the daemon served 6-9 µs (docs/results/HISTORY-benchmarks.md, issue 43).
//!
//! So a queue's thread leaves SCHED_IDLE for a normal priority ([`Boost::nice`]) while callers
//! take turns changing directories — a namespace change from another caller than the last
//! one, within [`WINDOW`] of it — and returns to SCHED_IDLE once [`HOLD`] has passed without
//! that. A single thread's work (PostMark, SQLite, one fsyncing writer) never switches: there
//! a normal priority halved PostMark's rate (the caller woken on the other CPU each time).
//!
//! Measured against `queue_boost=off` (docs/results/HISTORY-benchmarks.md, issue 43): varmail 1.15x on
//! /dev/shm and 1.02-1.07x on a disk, its fsyncs grouping (0.27-0.31 commits per fsync
//! against 0.42-0.58); webproxy (100 threads, one directory, mostly reads) 0.87-1.01x.
//!
//! Each queue keeps its own state, and a queue sees only the callers running on its CPU:
//! callers take turns in its eyes when two of them share that CPU (certain on the 2-CPU
//! machines measured; on many CPUs a few threads may never meet, and nothing switches).

use std::time::{Duration, Instant};

/// Two namespace changes from different callers at most this far apart: callers take turns.
pub(super) const WINDOW: Duration = Duration::from_millis(10);
/// How long a queue's thread stays boosted after the last sign of callers taking turns.
pub(super) const HOLD: Duration = Duration::from_millis(200);

/// FUSE opcodes that change a directory (the kernel holds its lock exclusively meanwhile):
/// SYMLINK, MKNOD, MKDIR, UNLINK, RMDIR, RENAME, LINK, CREATE, RENAME2, TMPFILE.
fn changes_namespace(opcode: u32) -> bool {
    matches!(opcode, 6 | 8..=13 | 35 | 45 | 51)
}

/// What a queue's thread should do with its scheduling class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Switch {
    /// Leave SCHED_IDLE for a normal priority.
    Up,
    /// Back to SCHED_IDLE.
    Down,
}

/// One queue thread's state: whether it is boosted, and the last namespace change it served.
#[derive(Debug)]
pub(super) struct Boost {
    /// Nice value while boosted; `None`: never boosted (`queue_boost=off`).
    nice: Option<i32>,
    last: Option<(u32, Instant)>,
    until: Option<Instant>,
}

impl Boost {
    pub(super) fn new(nice: Option<i32>) -> Boost {
        Boost {
            nice,
            last: None,
            until: None,
        }
    }

    /// Going back to SCHED_IDLE was refused at `now`: still boosted, try again after [`HOLD`].
    pub(super) fn down_refused(&mut self, now: Instant) {
        self.until = Some(now + HOLD);
    }

    /// The nice value while boosted.
    pub(super) fn nice(&self) -> Option<i32> {
        self.nice
    }

    /// Whether a request `opcode` could switch the thread (a namespace change, or any request
    /// while boosted): only then does [`Boost::note`] need it and the time.
    pub(super) fn concerns(&self, opcode: u32) -> bool {
        self.nice.is_some() && (self.until.is_some() || changes_namespace(opcode))
    }

    /// A request `opcode` from `caller` (`fuse_in_header.pid`) arrives at `now`: whether the
    /// thread switches, before serving it.
    pub(super) fn note(&mut self, opcode: u32, caller: u32, now: Instant) -> Option<Switch> {
        self.nice?;
        let was = self.until.is_some();
        if changes_namespace(opcode) {
            let turns = self
                .last
                .is_some_and(|(c, at)| c != caller && now.saturating_duration_since(at) <= WINDOW);
            self.last = Some((caller, now));
            if turns {
                self.until = Some(now + HOLD);
            }
        }
        if self.until.is_some_and(|u| now > u) {
            self.until = None;
        }
        match (was, self.until.is_some()) {
            (false, true) => Some(Switch::Up),
            (true, false) => Some(Switch::Down),
            _ => None,
        }
    }
}

/// Applies `s` to the calling thread: a normal priority of `nice` (the nice it had when that
/// one is not allowed), or SCHED_IDLE.
pub(super) fn apply(s: Switch, nice: i32) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = match s {
        Switch::Up => libc::SCHED_OTHER,
        Switch::Down => libc::SCHED_IDLE,
    };
    // SAFETY: sched_setscheduler reads `param` (a valid, initialised struct on our stack) and
    // changes only the calling thread's policy (pid 0).
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if s == Switch::Up {
        // SAFETY: setpriority takes plain integers; `who` 0 is the calling thread on Linux.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
            let e = std::io::Error::last_os_error();
            log::debug!("queue boost: nice {nice} refused ({e}); the nice it had");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MKNOD: u32 = 8;
    const UNLINK: u32 = 10;
    const GETATTR: u32 = 3;

    #[test]
    fn one_caller_never_switches() {
        let mut b = Boost::new(Some(-10));
        let t = Instant::now();
        for i in 0..100 {
            let at = t + Duration::from_micros(50 * i);
            assert_eq!(b.note(if i % 2 == 0 { MKNOD } else { UNLINK }, 7, at), None);
        }
    }

    #[test]
    fn callers_taking_turns_boost_until_hold_passes() {
        let mut b = Boost::new(Some(-10));
        let t = Instant::now();
        assert_eq!(b.note(MKNOD, 1, t), None);
        // another caller's namespace change soon after: up
        let t2 = t + Duration::from_millis(1);
        assert_eq!(b.note(UNLINK, 2, t2), Some(Switch::Up));
        // other requests meanwhile change nothing
        assert_eq!(b.note(GETATTR, 3, t2 + Duration::from_millis(5)), None);
        assert_eq!(b.note(MKNOD, 3, t2 + Duration::from_millis(6)), None);
        // the hold runs from the last turn (6 ms after t2): down once it has passed
        assert_eq!(b.note(GETATTR, 3, t2 + Duration::from_millis(150)), None);
        assert_eq!(
            b.note(GETATTR, 3, t2 + HOLD + Duration::from_millis(2)),
            None
        );
        assert!(b.concerns(GETATTR), "boosted: every request may end it");
        assert_eq!(
            b.note(
                GETATTR,
                3,
                t2 + Duration::from_millis(6) + HOLD + Duration::from_millis(1)
            ),
            Some(Switch::Down)
        );
    }

    #[test]
    fn a_refused_down_is_tried_again_after_a_hold() {
        let mut b = Boost::new(Some(-10));
        let t = Instant::now();
        b.note(MKNOD, 1, t);
        assert_eq!(b.note(MKNOD, 2, t), Some(Switch::Up));
        let later = t + HOLD + Duration::from_millis(1);
        assert_eq!(b.note(GETATTR, 2, later), Some(Switch::Down));
        b.down_refused(later);
        assert_eq!(b.note(GETATTR, 2, later + Duration::from_millis(1)), None);
        assert_eq!(
            b.note(GETATTR, 2, later + HOLD + Duration::from_millis(1)),
            Some(Switch::Down)
        );
    }

    #[test]
    fn changes_far_apart_do_not_boost_and_off_never_does() {
        let mut b = Boost::new(Some(-10));
        let t = Instant::now();
        assert_eq!(b.note(MKNOD, 1, t), None);
        assert_eq!(
            b.note(MKNOD, 2, t + WINDOW + Duration::from_millis(1)),
            None
        );
        let mut off = Boost::new(None);
        assert_eq!(off.note(MKNOD, 1, t), None);
        assert_eq!(off.note(MKNOD, 2, t), None);
        assert!(!off.concerns(MKNOD));
        // not boosted: only namespace changes are looked at (the clock read for them alone)
        assert!(b.concerns(MKNOD) && !b.concerns(GETATTR));
    }
}
