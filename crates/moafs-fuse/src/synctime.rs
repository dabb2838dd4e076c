//! The transport's share of an fsync's time (issue 43 item 1): how long the request waited
//! in the daemon before the engine took it (a hand-off to a sync pool included), and how long
//! its reply took from the engine's return to its commit to the kernel (a pool's hand-back to
//! the queue's thread included). The engine measures the rest (`Fs::fsync_report`).
//!
//! Over io_uring the queue's thread stamps a sync request's entry when it sees it arrive; the
//! thread that serves the entry passes the stamp to the adapter through a thread-local
//! ([`set_arrived`], [`take_arrived`]) for the length of the dispatch, and the adapter marks
//! when the engine returned ([`mark_served`]); the thread that commits the reply reports the
//! time since then to the [`SyncTimer`]. Over /dev/fuse no arrival is known: the adapter
//! reports the reply's write alone.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A phase the transport measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPhase {
    Queue,
    Reply,
}

/// Where the transport reports its phases of an fsync (the adapter's engine).
#[derive(Clone)]
pub struct SyncTimer(Arc<dyn Fn(SyncPhase, Duration) + Send + Sync>);

impl SyncTimer {
    pub fn new(f: impl Fn(SyncPhase, Duration) + Send + Sync + 'static) -> SyncTimer {
        SyncTimer(Arc::new(f))
    }

    pub(crate) fn report(&self, phase: SyncPhase, d: Duration) {
        (self.0)(phase, d)
    }
}

impl std::fmt::Debug for SyncTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncTimer")
    }
}

thread_local! {
    static ARRIVED: Cell<Option<Instant>> = const { Cell::new(None) };
    static SERVED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Before a dispatch: when the request being dispatched arrived (`None`: not a sync request
/// or not known).
pub(crate) fn set_arrived(at: Option<Instant>) {
    ARRIVED.with(|a| a.set(at));
}

/// In the adapter: when the request being served arrived, if the transport knows.
pub(crate) fn take_arrived() -> Option<Instant> {
    ARRIVED.with(|a| a.take())
}

/// In the adapter: the engine has returned; the reply follows.
pub(crate) fn mark_served() {
    SERVED.with(|s| s.set(Some(Instant::now())));
}

/// After a dispatch: when the engine returned, if the adapter marked it.
pub(crate) fn take_served() -> Option<Instant> {
    SERVED.with(|s| s.take())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_pass_once_through_the_thread() {
        assert_eq!(take_arrived(), None);
        let t = Instant::now();
        set_arrived(Some(t));
        assert_eq!(take_arrived(), Some(t));
        assert_eq!(take_arrived(), None);
        mark_served();
        assert!(take_served().is_some());
        assert!(take_served().is_none());
        // another thread sees none of this thread's stamps
        set_arrived(Some(t));
        std::thread::spawn(|| assert_eq!(take_arrived(), None))
            .join()
            .unwrap();
    }
}
