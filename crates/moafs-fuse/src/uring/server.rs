//! The threads that serve the io_uring queues: one per queue pinned to its CPU (and a stream
//! helper on the next CPU), each with its own ring in which it registers and commits entries
//! ([`Server`]), what serves a request in an entry ([`Servant`]), the hand-offs between
//! threads (`inbox.rs`), and [`start`], which sets them all up with the sync pools
//! (`pool.rs`).

use super::boost::{self, Boost};
use super::inbox::{Handed, Inbox};
use super::pool::{SyncCounts, SyncPool};
use super::{
    Entry, EntrySink, OnFatal, StreamProbe, UringConfig, CMD_COMMIT_AND_FETCH, CMD_REGISTER,
    COMMIT_ID_AT, DIRECT, HEAD_ROOM, IOV_SEGS, PAYLOAD_SZ_AT, PID_AT, WAKE_UD,
};
use fuser::{CaptureSinkHandle, Dispatched, Dispatcher, ExtraWorkers, Filesystem};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// `struct fuse_uring_cmd_req` in the 80-byte command area of a 128-byte SQE.
fn cmd_area(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

/// A URING_CMD SQE for /dev/fuse; `iov` (REGISTER only) sets `addr` and `len`.
fn fuse_cmd(
    fd: i32,
    op: u32,
    commit_id: u64,
    qid: u16,
    iov: Option<&[libc::iovec; 2]>,
    slot: usize,
) -> squeue::Entry128 {
    let mut b = opcode::UringCmd80::new(types::Fd(fd), op).cmd(cmd_area(commit_id, qid));
    if let Some(iov) = iov {
        b = b.addr(Some(iov.as_ptr() as u64));
    }
    let sqe = b.build().user_data(slot as u64);
    if iov.is_none() {
        return sqe;
    }
    // io-uring's builder has no setter for `len`, which FUSE reads as the iovec count.
    // SAFETY: Entry128 is `#[repr(C)]` around `io_uring_sqe` (plain integers and unions of
    // integers) and 64 command bytes: 128 bytes in which every bit pattern is valid, so it
    // may be viewed as bytes and changed. `len` is the u32 at offset 24 of `io_uring_sqe`.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(sqe) };
    raw[24..28].copy_from_slice(&IOV_SEGS.to_ne_bytes());
    // SAFETY: as above; the bytes came from a valid Entry128 and only `len` changed.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// What serves a request in an entry: fuser's dispatcher and the sink its reply goes to. A
/// server thread has one, and so has each thread of the sync pool.
pub(super) struct Servant<FS: Filesystem> {
    /// For log lines: the queue (or the pool thread) serving.
    qid: u16,
    dispatcher: Dispatcher<FS>,
    sink: Arc<EntrySink>,
    handle: CaptureSinkHandle,
    /// A request without payload, rebuilt in /dev/fuse format (the entry's buffer is lent to
    /// the sink meanwhile).
    small_req: Vec<u8>,
}

impl<FS: Filesystem> Servant<FS> {
    pub(super) fn new(qid: u16, dispatcher: Dispatcher<FS>) -> Servant<FS> {
        let sink = Arc::new(EntrySink::default());
        Servant {
            qid,
            dispatcher,
            sink: sink.clone(),
            handle: CaptureSinkHandle::new(sink),
            small_req: Vec::with_capacity(HEAD_ROOM),
        }
    }

    /// Dispatches `req` (or `small_req`); a panic in the file system becomes an EIO reply
    /// instead of the end of this queue's thread (whose CPU would be left without entries).
    fn dispatch_guarded(&self, req: Option<&[u8]>) -> Dispatched {
        let req = req.unwrap_or(&self.small_req);
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.dispatcher.dispatch(req, &self.handle)
        }));
        res.unwrap_or_else(|_| {
            log::error!(
                "io_uring queue {}: a request panicked; answered EIO",
                self.qid
            );
            // whatever the panic left half-written is discarded: no reply → EIO
            self.sink.state().clear();
            Dispatched::Handled
        })
    }

    /// Runs the request in `entry` through fuser and writes the reply into the entry.
    /// Returns the commit id and whether the kernel is tearing the file system down.
    pub(super) fn serve(&mut self, entry: &mut Entry) -> (u64, bool) {
        let unique = Entry::u64_at(&entry.header, 8);
        let payload = Entry::u32_at(&entry.header, PAYLOAD_SZ_AT);
        let commit_id = Entry::u64_at(&entry.header, COMMIT_ID_AT);
        crate::synctime::set_arrived(entry.arrived.take());
        let outcome = match entry.request() {
            None => {
                log::error!("io_uring: malformed request header; answering EIO");
                None
            }
            Some(range) if payload == 0 => {
                // The request is header and argument only: copy those out (at most 168
                // bytes) and lend the buffer to the sink, which writes the reply body (a
                // read's data) straight into the payload area.
                self.small_req.clear();
                self.small_req.extend_from_slice(&entry.buf[range]);
                {
                    let mut st = self.sink.state();
                    st.at = entry.at;
                    st.cap = entry.payload_cap();
                    st.direct = Some(std::mem::take(&mut entry.buf));
                }
                DIRECT.with(|d| *d.borrow_mut() = Some(self.sink.clone()));
                let outcome = self.dispatch_guarded(None);
                DIRECT.with(|d| *d.borrow_mut() = None);
                if let Some(buf) = self.sink.state().direct.take() {
                    entry.buf = buf;
                }
                Some(outcome)
            }
            Some(range) => Some(self.dispatch_guarded(Some(&entry.buf[range]))),
        };
        if outcome == Some(Dispatched::Invalid) {
            log::error!("io_uring: request fuser could not parse; answering EIO");
        }
        entry.served = crate::synctime::take_served();
        let mut st = self.sink.state();
        entry.set_reply(&mut st, unique);
        (commit_id, outcome == Some(Dispatched::Destroy))
    }
}

/// The server thread of a queue: its ring and the entries armed in it.
struct Server<FS: Filesystem> {
    qid: u16,
    fd: i32,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Entries armed in this ring; `user_data` is the index.
    slots: Vec<Option<Entry>>,
    servant: Servant<FS>,
    /// Completions of one wake-up (kept to reuse its allocation).
    ready: Vec<(u64, i32)>,
    /// Entries handed to this thread (see [`Inbox`]).
    inbox: Arc<Inbox>,
    /// The queue's other thread (queue thread ↔ stream helper); `None`: no helpers.
    peer: Option<Arc<Inbox>>,
    /// Tells a stream's READs from random ones ([`StreamProbe`]).
    probe: Option<StreamProbe>,
    /// This thread is the stream helper: it keeps large READs and hands the rest back.
    helper: bool,
    stream_min: usize,
    /// Serves the requests that may wait for a commit (`None`: served here).
    pool: Option<Arc<SyncPool>>,
    /// The thread that sent the last of those (`fuse_in_header.pid`).
    last_sync_caller: Option<u32>,
    /// Leaves SCHED_IDLE while callers take turns changing directories (`boost.rs`).
    boost: Boost,
    sync_counts: Arc<SyncCounts>,
    /// Where the armed eventfd read puts its 8 bytes; leaked, like the entries, because the
    /// kernel may complete the read after this thread is gone.
    wake_buf: &'static mut [u8; 8],
    /// Entries of this queue still registered, whichever of its threads holds them: when the
    /// kernel has refused the last one, the queue's callers would wait for ever.
    live: Arc<std::sync::atomic::AtomicUsize>,
}

impl<FS: Filesystem> Server<FS> {
    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: the SQE refers to an entry's header and payload (and, for REGISTER, to
            // iovecs the caller keeps until submission), which stay allocated as long as the
            // kernel may use them: entries are never freed (see `Drop`).
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Takes the completions that are ready: (`user_data`, result), in a buffer reused from
    /// one wake-up to the next (hand it back with [`Server::recycle`]).
    fn completions(&mut self) -> Vec<(u64, i32)> {
        let mut ready = std::mem::take(&mut self.ready);
        ready.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        ready
    }

    fn recycle(&mut self, mut ready: Vec<(u64, i32)>) {
        ready.clear();
        self.ready = ready;
    }

    fn free_slot(&mut self) -> usize {
        match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        }
    }

    /// Commits the reply in `entry` and re-arms it in this ring.
    fn commit(&mut self, mut entry: Entry, commit_id: u64) -> io::Result<()> {
        if let (Some(at), Some(timer)) = (entry.served.take(), &self.sync_counts.timer) {
            timer.report(crate::synctime::SyncPhase::Reply, at.elapsed());
        }
        let slot = self.free_slot();
        let sqe = fuse_cmd(
            self.fd,
            CMD_COMMIT_AND_FETCH,
            commit_id,
            self.qid,
            None,
            slot,
        );
        self.slots[slot] = Some(entry);
        self.push(&sqe)
    }

    /// Registers `entries`; an error completion from any of them is returned.
    fn register(&mut self, entries: Vec<Entry>) -> io::Result<()> {
        // The iovec arrays must stay put until the kernel has read them (at submission).
        let mut iovs: Vec<Box<[libc::iovec; 2]>> = Vec::new();
        for mut e in entries {
            let iov = Box::new(e.iovecs());
            let slot = self.free_slot();
            let sqe = fuse_cmd(self.fd, CMD_REGISTER, 0, self.qid, Some(&iov), slot);
            iovs.push(iov);
            self.slots[slot] = Some(e);
            self.push(&sqe)?;
        }
        self.ring.submit()?;
        drop(iovs);
        // A successful REGISTER stays pending until a request arrives; errors complete now.
        let ready = self.completions();
        for &(ud, res) in &ready {
            if res < 0 {
                return Err(io::Error::from_raw_os_error(-res));
            }
            self.completed(ud)?;
        }
        self.recycle(ready);
        Ok(())
    }

    /// Arms a read on this thread's eventfd, which completes when an entry is handed over.
    fn arm_wake(&mut self) -> io::Result<()> {
        let fd = self.inbox.wake_fd();
        let sqe: squeue::Entry128 = opcode::Read::new(types::Fd(fd), self.wake_buf.as_mut_ptr(), 8)
            .build()
            .user_data(WAKE_UD)
            .into();
        self.push(&sqe)
    }

    /// Serves the entries handed to this thread and re-arms the wake-up.
    fn take_handed(&mut self) -> io::Result<()> {
        let Handed { serve, commit } = self.inbox.take();
        let (mut serve, mut commit) = (serve.into_iter(), commit.into_iter());
        let mut failed = None;
        for (entry, commit_id) in commit.by_ref() {
            if let Err(e) = self.commit(entry, commit_id) {
                failed = Some(e);
                break;
            }
        }
        if failed.is_none() {
            for entry in serve.by_ref() {
                if let Err(e) = self.serve_commit(entry) {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            // still registered: never freed
            commit.for_each(std::mem::forget);
            serve.for_each(std::mem::forget);
            return Err(e);
        }
        self.arm_wake()
    }

    /// Serves the request that arrived in slot `ud` and re-arms its entry, or hands the
    /// entry to the queue's other thread when the request is that thread's kind.
    fn completed(&mut self, ud: u64) -> io::Result<()> {
        let slot = ud as usize;
        let Some(entry) = self.slots.get_mut(slot).and_then(Option::take) else {
            return Err(io::Error::other(format!(
                "io_uring: completion for empty slot {ud}"
            )));
        };
        let mut entry = entry;
        let op = Entry::u32_at(&entry.header, 4);
        if let (Some(nice), true) = (self.boost.nice(), self.boost.concerns(op)) {
            let caller = Entry::u32_at(&entry.header, PID_AT);
            let now = std::time::Instant::now();
            if let Some(s) = self.boost.note(op, caller, now) {
                match (boost::apply(s, nice), s) {
                    (Ok(()), boost::Switch::Up) => {
                        self.sync_counts.boosts.fetch_add(1, Ordering::Relaxed);
                    }
                    (Ok(()), boost::Switch::Down) => {}
                    (Err(e), boost::Switch::Up) => {
                        // still SCHED_IDLE (unprivileged: RLIMIT_NICE): no boost here
                        log::info!("io_uring queue {}: cannot leave SCHED_IDLE: {e}", self.qid);
                        self.boost = Boost::new(None);
                    }
                    (Err(e), boost::Switch::Down) => {
                        // still boosted: try again after another hold
                        log::warn!(
                            "io_uring queue {}: back to SCHED_IDLE refused: {e}",
                            self.qid
                        );
                        self.boost.down_refused(now);
                    }
                }
            }
        }
        if entry.waits_for_commit() {
            entry.arrived = Some(std::time::Instant::now());
            if let Some(pool) = &self.pool {
                let caller = Entry::u32_at(&entry.header, PID_AT);
                let others = self
                    .last_sync_caller
                    .replace(caller)
                    .is_some_and(|c| c != caller);
                if others || pool.busy() {
                    pool.put(entry, self.inbox.clone());
                    return Ok(());
                }
            }
            self.sync_counts.inline.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(peer) = &self.peer {
            let stream = entry.large_read(self.stream_min) && {
                let (ino, offset) = entry.read_at();
                self.probe
                    .as_ref()
                    .and_then(|p| p(ino, offset))
                    .unwrap_or(true)
            };
            if stream != self.helper {
                return peer.put(entry);
            }
        }
        self.serve_commit(entry)
    }

    fn serve_commit(&mut self, mut entry: Entry) -> io::Result<()> {
        let (commit_id, destroy) = self.servant.serve(&mut entry);
        if destroy {
            log::debug!("io_uring queue {}: destroy", self.qid);
        }
        self.commit(entry, commit_id)
    }

    /// Serves requests until the connection ends or `stop` is set.
    /// Serves requests until the connection ends (`true`), `stop` is set (`true`), or an
    /// error this thread cannot get past (`false`: the queue has lost its entries and the
    /// caller must end the session, or that CPU's callers would wait for ever).
    fn run(&mut self, stop: &AtomicBool) -> bool {
        let wait = types::Timespec::from(Duration::from_millis(200));
        let args = types::SubmitArgs::new().timespec(&wait);
        while !stop.load(Ordering::Relaxed) {
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                    ) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM)) => {
                    // transient shortage: the submission stays queued; try again shortly
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => {
                    log::error!("io_uring queue {}: {e}", self.qid);
                    return false;
                }
            }
            let ready = self.completions();
            for &(ud, res) in &ready {
                if ud == WAKE_UD {
                    if res < 0 {
                        let e = io::Error::from_raw_os_error(-res);
                        log::error!("io_uring queue {}: hand-off wake-up: {e}", self.qid);
                        return false;
                    }
                    if let Err(e) = self.take_handed() {
                        log::error!("io_uring queue {}: {e}", self.qid);
                        return false;
                    }
                    continue;
                }
                if res < 0 {
                    let e = io::Error::from_raw_os_error(-res);
                    if matches!(-res, libc::ENOTCONN | libc::ENODEV | libc::ECANCELED) {
                        log::debug!("io_uring queue {} slot {ud}: {e}", self.qid);
                        return true; // the connection is being torn down
                    }
                    // The kernel refused this entry's command: the entry is gone.
                    log::error!("io_uring queue {} slot {ud}: {e}; entry dropped", self.qid);
                    if let Some(slot) = self.slots.get_mut(ud as usize) {
                        if let Some(entry) = slot.take() {
                            std::mem::forget(entry); // the kernel may still know its buffers
                        }
                    }
                    if self.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                        log::error!("io_uring queue {}: no entries left", self.qid);
                        return false;
                    }
                    continue;
                }
                if let Err(e) = self.completed(ud) {
                    log::error!("io_uring queue {}: {e}", self.qid);
                    return false;
                }
            }
            self.recycle(ready);
        }
        true
    }
}

impl<FS: Filesystem> Drop for Server<FS> {
    fn drop(&mut self) {
        // The kernel holds the entries' buffers until it tears the queue down, which may be
        // after this thread is gone: leave them allocated (a few MiB, at unmount only).
        std::mem::forget(std::mem::take(&mut self.slots));
    }
}

/// Puts the calling thread in SCHED_IDLE. The scheduler counts a CPU that runs only
/// SCHED_IDLE threads as idle when it places a waking task, so a caller woken by our reply
/// stays on its own CPU (where the next request is served again) instead of being moved to
/// the other, halted one — which costs an inter-processor wake-up per round trip. The thread
/// sleeps while its caller runs, so it yields nothing in the common case; under CPU contention
/// it runs at the lowest weight (measured in docs/results/HISTORY-benchmarks.md).
fn sched_idle() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param` (a valid, initialised struct on our stack) and
    // changes only the calling thread's policy (pid 0).
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(io::Error::from)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(io::Error::from)
}

/// Starts `n` pool threads serving `pool`'s entries through `dispatcher`, pinned to `cpu`.
fn spawn_pool<FS: Filesystem>(
    pool: &Arc<SyncPool>,
    n: usize,
    dispatcher: &Dispatcher<FS>,
    cpu: usize,
) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut threads = Vec::with_capacity(n);
    for i in 0..n {
        let (mine, dispatcher) = (pool.clone(), dispatcher.clone());
        // (the log names pool threads from 1000 on, queues by their CPU)
        let mut servant = Servant::new(1000 + i as u16, dispatcher);
        let t = std::thread::Builder::new()
            .name(format!("moafs-sync-{cpu}"))
            .spawn(move || {
                if let Err(e) = pin_to_cpu(cpu) {
                    log::info!("io_uring sync pool: not pinned to CPU {cpu}: {e}");
                }
                while let Some((mut entry, back)) = mine.next() {
                    let (commit_id, _destroy) = servant.serve(&mut entry);
                    mine.served();
                    if let Err(e) = back.put_replied(entry, commit_id) {
                        // The eventfd cannot be written (it is never full: a u64 counter).
                        log::error!("io_uring sync pool: cannot hand a reply back: {e}");
                    }
                }
            });
        match t {
            Ok(t) => threads.push(t),
            Err(e) => {
                pool.stop();
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
    }
    Ok(threads)
}

/// What a server thread needs to start.
struct Plan<FS: Filesystem> {
    qid: usize,
    /// The CPU to pin to: the queue's own, or the next one for a stream helper.
    cpu: usize,
    /// Entries to register (none for a stream helper, which gets them handed over).
    depth: usize,
    /// Entries the queue has, all of which this thread may come to hold (ring size).
    queue_depth: usize,
    live: Arc<std::sync::atomic::AtomicUsize>,
    payload: usize,
    dev: Arc<OwnedFd>,
    dispatcher: Dispatcher<FS>,
    inbox: Arc<Inbox>,
    peer: Option<Arc<Inbox>>,
    helper: bool,
    stream_min: usize,
    probe: Option<StreamProbe>,
    pool: Option<Arc<SyncPool>>,
    sync_counts: Arc<SyncCounts>,
    boost: Option<i32>,
}

impl<FS: Filesystem> Plan<FS> {
    fn setup(self) -> io::Result<Server<FS>> {
        // A CPU that is possible but offline cannot run the thread; its queue still needs
        // entries, served from wherever the scheduler puts us.
        if let Err(e) = pin_to_cpu(self.cpu) {
            log::info!("io_uring queue {}: not pinned: {e}", self.qid);
        }
        // SCHED_IDLE for the stream helper too: at normal priority it starved the SCHED_IDLE
        // queue thread of the CPU it runs on, so small requests from that CPU took 3.7× as long
        // beside a stream (`scripts/bench-stream-mix.sh`; 1.65× with SCHED_IDLE).
        let idle = sched_idle();
        if let Err(e) = &idle {
            log::info!("io_uring queue {}: SCHED_IDLE refused: {e}", self.qid);
        }
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build((self.queue_depth.max(1) as u32 * 2 + 2).next_power_of_two())?;
        let qid = u16::try_from(self.qid).map_err(|_| io::Error::other("too many CPUs"))?;
        let entries = (0..self.depth).map(|_| Entry::new(self.payload)).collect();
        let mut server = Server {
            qid,
            fd: self.dev.as_raw_fd(),
            ring,
            slots: Vec::new(),
            servant: Servant::new(qid, self.dispatcher),
            ready: Vec::new(),
            inbox: self.inbox,
            helper: self.helper,
            probe: self.probe,
            stream_min: if self.peer.is_some() {
                self.stream_min
            } else {
                0
            },
            peer: self.peer,
            pool: self.pool,
            last_sync_caller: None,
            // (the stream helper serves READs only; without SCHED_IDLE nothing to leave)
            boost: Boost::new(self.boost.filter(|_| !self.helper && idle.is_ok())),
            sync_counts: self.sync_counts,
            wake_buf: Box::leak(Box::new([0; 8])),
            live: self.live,
        };
        server.register(entries)?;
        // Armed after the registration, whose completions are not expected to include it;
        // a hand-off meanwhile is kept by the eventfd's counter.
        if server.peer.is_some() || server.pool.is_some() {
            server.arm_wake()?;
        }
        Ok(server)
    }
}

/// Starts one server thread per queue on `dev` (a duplicate of the session's /dev/fuse
/// descriptor), pinned to the queue's CPU and in SCHED_IDLE, with `cfg.depth` entries each,
/// and with `cfg.stream_min` > 0 a stream helper per queue on the next CPU ([`Inbox`]).
/// Returns once every entry is registered, or the first error (the session then keeps using
/// /dev/fuse: the kernel switches to the rings only when every queue has entries).
pub fn start<FS: Filesystem>(
    dev: OwnedFd,
    dispatcher: Dispatcher<FS>,
    cfg: UringConfig,
    probe: Option<StreamProbe>,
    on_fatal: OnFatal,
    sync_counts: Arc<SyncCounts>,
) -> io::Result<ExtraWorkers> {
    let dev = Arc::new(dev);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<io::Result<()>>();
    let mut threads = Vec::new();
    let mut first_err = None;
    // Stream helpers need another CPU to run on.
    let helpers = cfg.stream_min > 0 && cfg.queues > 1;
    let mut pools: Vec<Arc<SyncPool>> = Vec::new();
    let mut pool_threads = 0;
    for qid in 0..cfg.queues {
        // The queue's sync pool, on the queue's CPU: a hand-off wakes a thread there, not
        // across CPUs (which costs an inter-processor interrupt on a virtual machine).
        let pool = if cfg.sync_threads > 0 {
            let pool = Arc::new(SyncPool::new(sync_counts.clone()));
            match spawn_pool(&pool, cfg.sync_threads, &dispatcher, qid) {
                Ok(mut t) => {
                    pool_threads += t.len();
                    threads.append(&mut t);
                    pools.push(pool.clone());
                    Some(pool)
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                    break;
                }
            }
        } else {
            None
        };
        let inbox = Arc::new(Inbox::new()?);
        let live = Arc::new(std::sync::atomic::AtomicUsize::new(cfg.depth));
        let helper_inbox = if helpers {
            Some(Arc::new(Inbox::new()?))
        } else {
            None
        };
        let plan = Plan {
            qid,
            cpu: qid,
            depth: cfg.depth,
            queue_depth: cfg.depth,
            live: live.clone(),
            payload: cfg.payload,
            dev: dev.clone(),
            dispatcher: dispatcher.clone(),
            inbox: inbox.clone(),
            peer: helper_inbox.clone(),
            helper: false,
            stream_min: cfg.stream_min,
            probe: probe.clone(),
            pool: pool.clone(),
            sync_counts: sync_counts.clone(),
            boost: cfg.boost,
        };
        let mut plans = vec![(format!("moafs-uring-{qid}"), plan)];
        if let Some(helper_inbox) = helper_inbox {
            let plan = Plan {
                qid,
                cpu: (qid + 1) % cfg.queues,
                depth: 0,
                queue_depth: cfg.depth,
                live,
                payload: cfg.payload,
                dev: dev.clone(),
                dispatcher: dispatcher.clone(),
                inbox: helper_inbox,
                peer: Some(inbox),
                helper: true,
                stream_min: cfg.stream_min,
                probe: probe.clone(),
                pool: pool.clone(),
                sync_counts: sync_counts.clone(),
                boost: None,
            };
            plans.push((format!("moafs-stream-{qid}"), plan));
        }
        for (name, plan) in plans {
            match spawn(name, plan, &stop, &tx, &on_fatal) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    first_err.get_or_insert(e);
                    break;
                }
            }
        }
        if first_err.is_some() {
            break;
        }
    }
    drop(tx); // a thread that dies before reporting then ends the wait below
    for _ in pool_threads..threads.len() {
        let res = match rx.recv() {
            Ok(res) => res,
            Err(_) => Err(io::Error::other("io_uring thread ended early")),
        };
        if let Err(e) = res {
            first_err.get_or_insert(e);
        }
    }
    let stop_all: Box<dyn FnOnce() + Send> = Box::new(move || {
        stop.store(true, Ordering::SeqCst);
        for pool in pools {
            pool.stop();
        }
    });
    let workers = ExtraWorkers {
        threads,
        stop: Some(stop_all),
    };
    match first_err {
        None => Ok(workers),
        Some(e) => {
            if let Some(stop) = workers.stop {
                stop();
            }
            for t in workers.threads {
                let _ = t.join();
            }
            Err(e)
        }
    }
}

fn spawn<FS: Filesystem>(
    name: String,
    plan: Plan<FS>,
    stop: &Arc<AtomicBool>,
    tx: &mpsc::Sender<io::Result<()>>,
    on_fatal: &OnFatal,
) -> io::Result<std::thread::JoinHandle<()>> {
    let (stop, tx, on_fatal) = (stop.clone(), tx.clone(), on_fatal.clone());
    std::thread::Builder::new().name(name).spawn(move || {
        let dev = plan.dev.clone();
        match plan.setup() {
            Ok(mut server) => {
                let _ = tx.send(Ok(()));
                if !server.run(&stop) && !stop.load(Ordering::SeqCst) {
                    log::error!("FUSE over io_uring cannot go on; unmounting");
                    on_fatal();
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
        drop(dev);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::{CMD_REGISTER, IOV_SEGS};

    #[test]
    fn register_sqe_carries_iovec_count_and_address() {
        let mut e = Entry::new(16);
        let iov = e.iovecs();
        let sqe = fuse_cmd(5, CMD_REGISTER, 0, 1, Some(&iov), 3);
        // SAFETY: test-only view of a valid Entry128 as bytes (see fuse_cmd).
        let raw: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(sqe) };
        assert_eq!(
            u32::from_ne_bytes(raw[24..28].try_into().unwrap()),
            IOV_SEGS
        );
        let addr = u64::from_ne_bytes(raw[16..24].try_into().unwrap());
        assert_eq!(addr, iov.as_ptr() as u64);
        assert_eq!(u32::from_ne_bytes(raw[4..8].try_into().unwrap()), 5, "fd");
        // cmd area starts at byte 48: qid at 48 + 16
        assert_eq!(
            u16::from_ne_bytes(raw[64..66].try_into().unwrap()),
            1,
            "qid"
        );
    }
}
