//! The sync pool: threads that serve the requests which may wait for a commit (FSYNC,
//! FSYNCDIR, SYNCFS) for the io_uring queues.
//!
//! A queue has one thread, and it serves its requests one after another. An fsync waits
//! for a commit of the file system — the journal's writes and a device flush, or a commit
//! already in flight — and while the queue's thread waited, every other request of that CPU
//! waited with it (a create holding its directory's lock in the kernel included), and at most
//! one fsync per CPU could join a commit: the group commit (`Fs::fsync`) had nobody to group.
//! With the pool, the queue's thread hands the entry over and goes on; a pool thread serves
//! the request, and hands the entry back to the thread that owns its ring (`inbox.rs`), which
//! commits the reply there (an entry belongs to the ring that last committed it). Concurrent
//! fsyncs then wait together, in as many pool threads, and share commits. The pool's threads
//! are started by `server::spawn_pool`.
//!
//! A queue's thread hands a sync request over only when it can wait together with another:
//! when the pool is busy with one already, or the last came from another caller (jbd2's
//! signal that several threads are syncing). A lone syncing thread's fsyncs are served in
//! the queue's thread as before, without the two hand-offs (1.2x as many fsyncs per second
//! for one thread on a disk than when every fsync was handed over).
//!
//! Each queue has a pool of its own, pinned to the queue's CPU: handing an entry over wakes a
//! thread on the same CPU, and so does handing it back (a wake-up across CPUs costs an
//! inter-processor interrupt on a virtual machine: a lone fsync took 1.4x as long on a disk
//! with one shared, unpinned pool). The pool threads run at normal priority, above the
//! queue's SCHED_IDLE thread: they sleep in the commit's wait, and the commit they run is
//! work every syncing caller waits for.

use super::inbox::Inbox;
use super::Entry;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The entries waiting for a pool thread, each with the inbox of the thread that commits it.
pub(super) struct SyncPool {
    state: Mutex<State>,
    ready: Condvar,
    counts: Arc<SyncCounts>,
}

/// Sync requests (FSYNC, FSYNCDIR, SYNCFS) served over io_uring, by where: for the log at the
/// end of a session, and for tests.
#[derive(Debug, Default)]
pub struct SyncCounts {
    /// Handed to a sync pool.
    pub pooled: AtomicU64,
    /// Served in the queue's own thread (a lone syncing thread, or no pool).
    pub inline: AtomicU64,
    /// Not a sync request: times a queue's thread left SCHED_IDLE (`queue_boost`, `boost.rs`).
    pub boosts: AtomicU64,
    /// Where the time of an fsync's reply is reported (`synctime.rs`), if anywhere.
    pub timer: Option<crate::synctime::SyncTimer>,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<(Entry, Arc<Inbox>)>,
    /// Entries a pool thread is serving.
    serving: usize,
    stop: bool,
}

impl SyncPool {
    pub(super) fn new(counts: Arc<SyncCounts>) -> SyncPool {
        SyncPool {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            counts,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `entry` to a pool thread; its reply goes back to `back` to be committed.
    pub(super) fn put(&self, entry: Entry, back: Arc<Inbox>) {
        let mut st = self.lock();
        if st.stop {
            // the session is ending: the entry stays registered with the kernel, never freed
            std::mem::forget(entry);
            return;
        }
        st.jobs.push_back((entry, back));
        drop(st);
        self.counts.pooled.fetch_add(1, Ordering::Relaxed);
        self.ready.notify_one();
    }

    /// Whether the pool holds an entry (waiting or being served): an fsync is in progress.
    pub(super) fn busy(&self) -> bool {
        let st = self.lock();
        st.serving > 0 || !st.jobs.is_empty()
    }

    /// Ends the pool's threads once they are done with the request in hand.
    pub(super) fn stop(&self) {
        let mut st = self.lock();
        st.stop = true;
        // still registered with the kernel: never freed (see `Server::drop`)
        for job in st.jobs.drain(..) {
            std::mem::forget(job.0);
        }
        drop(st);
        self.ready.notify_all();
    }

    /// The next entry to serve, or `None` once the pool is stopped.
    pub(super) fn next(&self) -> Option<(Entry, Arc<Inbox>)> {
        let mut st = self.lock();
        loop {
            if st.stop {
                return None;
            }
            if let Some(job) = st.jobs.pop_front() {
                st.serving += 1;
                return Some(job);
            }
            st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A pool thread is done serving the entry `next` gave it.
    pub(super) fn served(&self) {
        self.lock().serving -= 1;
    }
}
