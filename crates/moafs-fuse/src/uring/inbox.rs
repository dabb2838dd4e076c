//! The hand-offs between the threads that serve the io_uring queues ([`Inbox`]): the
//! lowest part of the io_uring server, used by the server threads (`server.rs`) and the sync
//! pool (`pool.rs`).

use super::Entry;
use std::io;
use std::sync::Mutex;

/// Entries handed from one server thread of a queue to the other. Each queue has a thread
/// pinned to its CPU and, when `stream_min` > 0 and there is another CPU, a *stream helper*
/// pinned to the next CPU: the queue thread hands it READs of `stream_min` bytes and more,
/// the helper hands back whatever else arrives in an entry it holds. An entry belongs to the
/// ring that last committed it (the kernel puts the entry's next request there), so the
/// receiving thread serves *and* commits a handed entry.
///
/// Why: a stream's readahead requests land in the queue of the reader's CPU, where the queue
/// thread (SCHED_IDLE, so that small requests keep their caller on its CPU) runs only while
/// the reader waits: the daemon's copy into the payload, the kernel's copy from it into the
/// page cache and the reader's copy out ran one after the other on one CPU. The helper makes
/// the first two on the other CPU while the reader copies (docs/results/HISTORY-benchmarks.md).
///
/// A queue's sync pool ((`pool.rs`)) hands entries back here too, served: the thread only
/// commits them (`Handed::commit`).
pub(super) struct Inbox {
    entries: Mutex<Handed>,
    /// Counts hand-offs; the receiving thread keeps a read armed on it in its ring.
    efd: nix::sys::eventfd::EventFd,
}

/// What other threads handed to a server thread.
#[derive(Default)]
pub(super) struct Handed {
    /// Entries whose request this thread serves (and commits).
    pub(super) serve: Vec<Entry>,
    /// Entries served elsewhere (the sync pool, (`pool.rs`)), with their replies in place and
    /// their commit ids: this thread only commits them, in its ring.
    pub(super) commit: Vec<(Entry, u64)>,
}

impl Inbox {
    pub(super) fn new() -> io::Result<Inbox> {
        Ok(Inbox {
            entries: Mutex::new(Handed::default()),
            efd: nix::sys::eventfd::EventFd::from_value_and_flags(
                0,
                nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
            )
            .map_err(io::Error::from)?,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Handed> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands over an entry to serve.
    pub(super) fn put(&self, entry: Entry) -> io::Result<()> {
        self.lock().serve.push(entry);
        self.wake()
    }

    /// Hands back an entry served elsewhere, its reply in place, to be committed.
    pub(super) fn put_replied(&self, entry: Entry, commit_id: u64) -> io::Result<()> {
        self.lock().commit.push((entry, commit_id));
        self.wake()
    }

    /// The eventfd that counts hand-offs: the receiving thread keeps a read armed on it.
    pub(super) fn wake_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::{AsFd, AsRawFd};
        self.efd.as_fd().as_raw_fd()
    }

    fn wake(&self) -> io::Result<()> {
        self.efd.write(1).map(drop).map_err(io::Error::from)
    }

    pub(super) fn take(&self) -> Handed {
        std::mem::take(&mut *self.lock())
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Handed entries are still registered with the kernel (see `Server::drop`).
        std::mem::forget(self.take());
    }
}
