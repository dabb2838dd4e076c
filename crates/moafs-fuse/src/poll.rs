//! Adaptive polling of the FUSE device.
//!
//! A FUSE request costs two wake-ups: the kernel wakes a daemon thread sleeping in `read()`
//! on /dev/fuse, and the daemon's reply wakes the caller. When the sleeping thread's CPU is
//! idle, each wake-up is an inter-processor interrupt to a halted CPU; on a virtual machine
//! that is a VM exit and costs tens of microseconds, more than moafs needs to serve most
//! requests (measured in docs/results/HISTORY-benchmarks.md). While requests keep coming, one daemon thread
//! therefore polls instead of sleeping: its descriptor is switched to `O_NONBLOCK`, so its
//! `read()` returns `EAGAIN` at once and fuser's loop reads again. After `window` without a
//! request the descriptor goes back to blocking and the thread sleeps; the next request wakes
//! it the ordinary way and polling starts again.
//!
//! The cost is one CPU kept busy during bursts of requests and for at most about two windows
//! after the last one. `-o poll_ms=0` turns polling off.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, OFlag};

const SLEEPING: u8 = 0;
const WAKING: u8 = 1;
const POLLING: u8 = 2;

/// Counts requests; the request handlers call [`Activity::note`] once per request.
#[derive(Debug, Default)]
pub struct Activity {
    requests: AtomicU64,
    state: AtomicU8,
    governor: std::sync::OnceLock<thread::Thread>,
}

impl Activity {
    /// Records one request; wakes the governor if the device is in blocking mode.
    #[inline]
    pub fn note(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if self.state.load(Ordering::Relaxed) == SLEEPING
            && self
                .state
                .compare_exchange(SLEEPING, WAKING, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            if let Some(t) = self.governor.get() {
                t.unpark();
            }
        }
    }

    /// Requests seen so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// The thread that switches one /dev/fuse descriptor between polling and blocking.
pub struct Poller {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
    let new = if on {
        flags | OFlag::O_NONBLOCK
    } else {
        flags - OFlag::O_NONBLOCK
    };
    if new != flags {
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(new))?;
    }
    Ok(())
}

impl Poller {
    /// Starts polling on `fd` (a duplicate of one session descriptor: the flag is shared by
    /// every descriptor of that open file description, so the thread reading it polls).
    pub fn start(fd: OwnedFd, activity: Arc<Activity>, window: Duration) -> io::Result<Poller> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::Builder::new()
            .name("moafs-poll".into())
            .spawn(move || {
                let _ = activity.governor.set(thread::current());
                activity.state.store(POLLING, Ordering::SeqCst);
                if let Err(e) = set_nonblocking(fd.as_fd(), true) {
                    log::warn!("polling the FUSE device is off: {e}");
                    return;
                }
                while !s.load(Ordering::SeqCst) {
                    let before = activity.requests();
                    thread::sleep(window);
                    if activity.requests() != before {
                        continue;
                    }
                    // Idle for a whole window: sleep in read() until the next request.
                    activity.state.store(SLEEPING, Ordering::SeqCst);
                    if let Err(e) = set_nonblocking(fd.as_fd(), false) {
                        log::warn!("polling the FUSE device is off: {e}");
                        return;
                    }
                    while activity.state.load(Ordering::SeqCst) == SLEEPING
                        && !s.load(Ordering::SeqCst)
                    {
                        thread::park();
                    }
                    if s.load(Ordering::SeqCst) {
                        break;
                    }
                    activity.state.store(POLLING, Ordering::SeqCst);
                    if let Err(e) = set_nonblocking(fd.as_fd(), true) {
                        log::warn!("polling the FUSE device is off: {e}");
                        return;
                    }
                }
                // The session is ending: leave the descriptor blocking.
                let _ = set_nonblocking(fd.as_fd(), false);
            })?;
        Ok(Poller {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    fn is_nonblocking(fd: BorrowedFd<'_>) -> bool {
        OFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL).unwrap())
            .contains(OFlag::O_NONBLOCK)
    }

    fn wait_for(cond: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if cond() {
                return true;
            }
            thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn polls_while_busy_blocks_when_idle_and_wakes_on_a_request() {
        let (mut a, _b) = UnixStream::pair().unwrap();
        let fd: OwnedFd = a.try_clone().unwrap().into();
        let activity = Arc::new(Activity::default());
        let poller = Poller::start(fd, activity.clone(), Duration::from_millis(5)).unwrap();
        // Polling at first: a read returns at once.
        assert!(wait_for(|| is_nonblocking(a.as_fd())));
        let mut buf = [0u8; 1];
        assert_eq!(
            a.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // Idle: back to blocking, governor asleep.
        assert!(wait_for(|| !is_nonblocking(a.as_fd())));
        assert!(wait_for(
            || activity.state.load(Ordering::SeqCst) == SLEEPING
        ));
        // A request wakes it and polling resumes.
        activity.note();
        assert!(wait_for(|| is_nonblocking(a.as_fd())));
        assert_eq!(activity.requests(), 1);
        drop(poller);
        assert!(
            !is_nonblocking(a.as_fd()),
            "left blocking when the session ends"
        );
    }
}
