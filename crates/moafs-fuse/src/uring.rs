//! FUSE over io_uring (Linux 6.14+, `fuse.enable_uring=Y`).
//!
//! With plain /dev/fuse every request wakes a daemon thread on whichever CPU the scheduler
//! picks, usually the other one, and the reply wakes the caller back across CPUs: two
//! inter-processor wake-ups per round trip, which on a virtual machine dominate the cost of a
//! small operation (docs/BENCHMARKS.md). The io_uring transport has one request queue per CPU:
//! the kernel hands a request to the queue of the CPU the caller runs on. moafs serves each
//! queue from a thread pinned to that CPU, so the caller blocks, the server thread runs on the
//! same CPU, replies, and the caller continues there — no cross-CPU wake-up at all.
//!
//! Protocol (include/uapi/linux/fuse.h, "fuse-io-uring"): after FUSE_INIT negotiated
//! `FUSE_OVER_IO_URING`, each queue registers ring entries with `IORING_OP_URING_CMD` on the
//! /dev/fuse descriptor (`FUSE_IO_URING_CMD_REGISTER`, `sqe->addr` = two iovecs: a 288-byte
//! header — in/out header, per-opcode argument, entry info — and a payload buffer). An entry's
//! command completes when a request is put into it; the server answers by writing the
//! `fuse_out_header` into the header and the reply body into the payload, and submits
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also re-arms the entry. Once every queue has an
//! entry the kernel sends all requests this way, except FORGET and INTERRUPT, which keep
//! coming through /dev/fuse (read there by fuser's own threads).
//!
//! Requests are put back into /dev/fuse format (header, argument, payload — contiguous, in the
//! payload buffer's head room, so a 1 MiB write is not copied) and handed to fuser's
//! dispatcher; the reply it collects is split back into header and body.

use fuser::{CaptureSinkHandle, Dispatched, Dispatcher, ExtraWorkers, Filesystem, ReplySink};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::sync::{mpsc, Arc};
use std::time::Duration;

mod pool;
pub use pool::SyncCounts;
use pool::SyncPool;

/// `FUSE_IO_URING_CMD_REGISTER`.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `FUSE_URING_IN_OUT_HEADER_SZ`: room for `fuse_in_header` / `fuse_out_header`.
const IN_OUT_SZ: usize = 128;
/// `FUSE_URING_OP_IN_OUT_SZ`: room for the per-opcode argument (`in_args[0]`).
const OP_IN_SZ: usize = 128;
/// `struct fuse_uring_req_header`: in_out, op_in, `fuse_uring_ent_in_out` (32 bytes).
const HEADER_SZ: usize = IN_OUT_SZ + OP_IN_SZ + 32;
/// Offset of `fuse_uring_ent_in_out.commit_id` / `.payload_sz` in the header.
const COMMIT_ID_AT: usize = IN_OUT_SZ + OP_IN_SZ + 8;
const PAYLOAD_SZ_AT: usize = IN_OUT_SZ + OP_IN_SZ + 16;
/// `sizeof(struct fuse_in_header)` / `sizeof(struct fuse_out_header)`.
const IN_HEADER_SZ: usize = 40;
const OUT_HEADER_SZ: usize = 16;
/// Head room in front of the payload: the in header and the per-opcode argument are copied
/// there to rebuild the request in /dev/fuse format without moving the payload.
const HEAD_ROOM: usize = IN_HEADER_SZ + OP_IN_SZ;
/// `FUSE_READ`, and the offsets of `fuse_read_in.size` and `.flags` (the file's open flags)
/// in its argument.
const OP_READ: u32 = 15;
const READ_OFFSET_AT: usize = IN_OUT_SZ + 8;
const READ_SIZE_AT: usize = IN_OUT_SZ + 16;
const READ_FLAGS_AT: usize = IN_OUT_SZ + 32;
/// Offset of `fuse_in_header.pid` (the calling thread) in the header.
const PID_AT: usize = 32;
/// `FUSE_FSYNC`, `FUSE_FSYNCDIR`, `FUSE_SYNCFS`.
const OP_FSYNC: u32 = 20;
const OP_FSYNCDIR: u32 = 30;
const OP_SYNCFS: u32 = 50;
/// `user_data` of the read armed on a server's wake-up eventfd (slots are small indices).
const WAKE_UD: u64 = u64::MAX;
/// Iovecs per registration (`FUSE_URING_IOV_SEGS`).
const IOV_SEGS: u32 = 2;

/// How the transport is set up.
#[derive(Debug, Clone, Copy)]
pub struct UringConfig {
    /// Queues: one per possible CPU (the kernel requires all of them).
    pub queues: usize,
    /// Ring entries per queue (requests in flight per CPU).
    pub depth: usize,
    /// Payload buffer per entry: at least the negotiated max_write and max_pages.
    pub payload: usize,
    /// READ requests of at least this many bytes (readahead of a sequential stream) are
    /// served by the queue's stream helper on another CPU; 0: no helpers (see [`Inbox`]).
    pub stream_min: usize,
    /// Threads of each queue's sync pool, which serves FSYNC, FSYNCDIR and SYNCFS so that the
    /// queue's thread goes on serving while they wait for a commit ([`pool`]); 0: no pool,
    /// the queue's thread serves them itself.
    pub sync_threads: usize,
}

/// Tells whether a READ of (inode, offset) continues a sequential stream of the file (`None`:
/// not known). A large READ that does not — a random read the caller waits for whole — is
/// served on the caller's CPU, not by the stream helper.
pub type StreamProbe = Arc<dyn Fn(u64, u64) -> Option<bool> + Send + Sync>;

/// `true` when the kernel's FUSE module allows the io_uring transport.
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

/// Turns the kernel's `fuse.enable_uring` on (root only). It only allows servers that ask
/// for the transport in FUSE_INIT to use it; others are not affected.
pub fn kernel_enable() -> io::Result<()> {
    std::fs::write("/sys/module/fuse/parameters/enable_uring", "Y")
}

/// Number of possible CPUs (`/sys/devices/system/cpu/possible`, e.g. "0-1"); the kernel makes
/// one queue for each.
pub fn possible_cpus() -> io::Result<usize> {
    parse_possible(&std::fs::read_to_string(
        "/sys/devices/system/cpu/possible",
    )?)
}

/// The number of CPUs in a CPU list like "0-1" or "0-3,8-11"; an error when the numbering
/// has holes (queue ids are CPU numbers here, which holes would break) or cannot be read.
fn parse_possible(s: &str) -> io::Result<usize> {
    let bad = || io::Error::other(format!("cannot parse possible CPUs {s:?}"));
    let mut max = None;
    let mut count = 0usize;
    for part in s.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let lo: usize = lo.trim().parse().map_err(|_| bad())?;
        let hi: usize = hi.trim().parse().map_err(|_| bad())?;
        if hi < lo {
            return Err(bad());
        }
        count += hi - lo + 1;
        max = Some(max.map_or(hi, |m: usize| m.max(hi)));
    }
    let n = max.ok_or_else(bad)? + 1;
    if count != n {
        return Err(io::Error::other(format!("possible CPUs {s:?} have holes")));
    }
    Ok(n)
}

/// Whether this process can set up a ring as the transport needs (128-byte SQEs): io_uring
/// may be disabled (`kernel.io_uring_disabled`, seccomp). Checked before FUSE_INIT asks for
/// the transport, because once granted the kernel holds every request until the rings are
/// ready.
pub fn probe() -> io::Result<()> {
    possible_cpus()?;
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .setup_single_issuer()
        .build(2)
        .map(drop)
}

/// The two buffers of one ring entry and the iovecs that name them. They are handed to the
/// kernel at registration and must stay valid as long as the kernel may write into them, so
/// they are never freed (see [`Queue::drop`]).
struct Entry {
    header: Box<[u8]>,
    /// At least HEAD_ROOM bytes, then (from `at`, page-aligned) the payload the kernel sees.
    buf: Box<[u8]>,
    /// Offset of the payload in `buf`: page-aligned in memory, because the kernel's copies
    /// between the payload and the page cache are several times slower from a misaligned
    /// source.
    at: usize,
}

impl Entry {
    fn new(payload: usize) -> Entry {
        const PAGE: usize = 4096;
        let buf = vec![0u8; HEAD_ROOM + PAGE + payload].into_boxed_slice();
        let addr = buf.as_ptr() as usize + HEAD_ROOM;
        let at = HEAD_ROOM + (PAGE - addr % PAGE) % PAGE;
        Entry {
            header: vec![0u8; HEADER_SZ].into_boxed_slice(),
            buf,
            at,
        }
    }

    /// The two iovecs REGISTER hands to the kernel: the header and the payload buffer. The
    /// kernel copies the iovecs themselves during the submission; the buffers they name must
    /// stay allocated while the entry is registered (they live on the heap and do not move
    /// when the `Entry` does).
    fn iovecs(&mut self) -> [libc::iovec; 2] {
        [
            libc::iovec {
                iov_base: self.header.as_mut_ptr().cast(),
                iov_len: self.header.len(),
            },
            libc::iovec {
                iov_base: self.buf[self.at..].as_mut_ptr().cast(),
                iov_len: self.payload_cap(),
            },
        ]
    }

    /// Bytes of payload the kernel may use.
    fn payload_cap(&self) -> usize {
        (self.buf.len() - self.at).min(self.buf.len() - HEAD_ROOM - 4096)
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
    }

    /// Whether the request in the entry is a READ of at least `min` bytes (`min` > 0) into
    /// the page cache — a stream's readahead, which the reader does not wait for as a whole.
    /// An O_DIRECT read is a synchronous round trip for its caller: a hand-off to another CPU
    /// only adds a wake-up there (1 GiB of 1 MiB O_DIRECT reads: 0.37–0.44 s handed off,
    /// 0.29–0.36 s served on the caller's CPU).
    fn large_read(&self, min: usize) -> bool {
        min > 0
            && Entry::u32_at(&self.header, 4) == OP_READ
            && Entry::u32_at(&self.header, READ_SIZE_AT) as usize >= min
            && Entry::u32_at(&self.header, READ_FLAGS_AT) & libc::O_DIRECT as u32 == 0
    }

    /// Whether the request may wait for a commit of the file system (FSYNC, FSYNCDIR,
    /// SYNCFS): served by the sync pool, so that the queue goes on meanwhile.
    fn waits_for_commit(&self) -> bool {
        matches!(
            Entry::u32_at(&self.header, 4),
            OP_FSYNC | OP_FSYNCDIR | OP_SYNCFS
        )
    }

    /// The request's inode and, for a READ, its offset.
    fn read_at(&self) -> (u64, u64) {
        (
            Entry::u64_at(&self.header, 16),
            Entry::u64_at(&self.header, READ_OFFSET_AT),
        )
    }

    /// Rebuilds the request in /dev/fuse format in front of the payload; returns its range in
    /// `buf`, or `None` when the header does not add up.
    fn request(&mut self) -> Option<std::ops::Range<usize>> {
        let len = Entry::u32_at(&self.header, 0) as usize;
        let payload = Entry::u32_at(&self.header, PAYLOAD_SZ_AT) as usize;
        let arg0 = len.checked_sub(IN_HEADER_SZ + payload)?;
        // fuser reads arguments in place and needs them 8-byte aligned (every per-opcode
        // struct is a multiple of 8 bytes; anything else is refused with EIO).
        if arg0 > OP_IN_SZ || arg0 % 8 != 0 || payload > self.payload_cap() {
            return None;
        }
        let at = self.at;
        let start = at - IN_HEADER_SZ - arg0;
        self.buf[start..start + IN_HEADER_SZ].copy_from_slice(&self.header[..IN_HEADER_SZ]);
        self.buf[start + IN_HEADER_SZ..at]
            .copy_from_slice(&self.header[IN_OUT_SZ..IN_OUT_SZ + arg0]);
        Some(start..at + payload)
    }

    /// Puts a reply collected by `sink` into the entry: the `fuse_out_header` into the
    /// header, the body into the payload (unless it is there already), the body's size into
    /// the entry info. A missing or oversized reply becomes EIO.
    fn set_reply(&mut self, st: &mut SinkState, unique: u64) {
        if !st.direct_done && st.ok() && st.body.len() <= self.payload_cap() {
            self.buf[self.at..self.at + st.body.len()].copy_from_slice(&st.body);
            st.len = st.body.len();
        } else if !st.direct_done || !st.ok() {
            log::error!("io_uring: reply missing or larger than the payload buffer; EIO");
            st.out = [0; OUT_HEADER_SZ];
            st.out[..4].copy_from_slice(&(OUT_HEADER_SZ as u32).to_ne_bytes());
            st.out[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            st.out[8..16].copy_from_slice(&unique.to_ne_bytes());
            st.len = 0;
        }
        if st.ok() {
            // The body may have been placed before the reply (`read_direct`): the header's
            // length is what was placed.
            let total = (OUT_HEADER_SZ + st.len) as u32;
            st.out[..4].copy_from_slice(&total.to_ne_bytes());
        }
        self.header[..OUT_HEADER_SZ].copy_from_slice(&st.out);
        self.header[PAYLOAD_SZ_AT..PAYLOAD_SZ_AT + 4]
            .copy_from_slice(&(st.len as u32).to_ne_bytes());
        st.clear();
    }
}

/// Where fuser's replies go while a ring request is dispatched.
#[derive(Debug, Default)]
struct SinkState {
    /// The `fuse_out_header`.
    out: [u8; OUT_HEADER_SZ],
    /// Header bytes received so far.
    out_len: usize,
    /// For requests without payload: the entry's buffer, lent for the dispatch; the body is
    /// written straight into its payload area (no copy through `body`).
    direct: Option<Box<[u8]>>,
    /// The body was written into `direct`.
    direct_done: bool,
    /// Payload offset and size in `direct`.
    at: usize,
    cap: usize,
    /// Otherwise the body collects here (small replies to requests that carry a payload,
    /// which occupies the buffer while the request is served).
    body: Vec<u8>,
    /// Body length.
    len: usize,
    /// The body did not fit into the payload buffer.
    overflow: bool,
    /// Replies received for this request (exactly one expected).
    replies: u32,
    /// The body was written into `direct` before the reply by [`read_direct`] (this many
    /// bytes); the reply itself then carries no body.
    prefilled: Option<usize>,
}

impl SinkState {
    fn ok(&self) -> bool {
        self.replies == 1 && self.out_len == OUT_HEADER_SZ && !self.overflow
    }

    fn clear(&mut self) {
        self.out_len = 0;
        self.direct_done = false;
        self.body.clear();
        self.len = 0;
        self.overflow = false;
        self.replies = 0;
        self.prefilled = None;
    }
}

thread_local! {
    /// The sink of the request this thread dispatches, while its entry's payload buffer is
    /// lent to it (requests without payload).
    static DIRECT: std::cell::RefCell<Option<Arc<EntrySink>>> =
        const { std::cell::RefCell::new(None) };
}

/// For the adapter's `read`: when the request being served came over io_uring and its entry's
/// payload buffer is free, `fill` reads straight into it (at most `size` bytes) and returns
/// how many bytes it placed; the reply must then carry no body (`reply.data(&[])`), the data
/// being in place already. `None`: no such buffer here (read as usual).
pub fn read_direct<E>(
    size: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
) -> Option<Result<(), E>> {
    let sink = DIRECT.with(|d| d.borrow().clone())?;
    let mut st = sink.state();
    let (at, cap) = (st.at, st.cap);
    let buf = st.direct.as_mut()?;
    let n = size.min(cap);
    match fill(&mut buf[at..at + n]) {
        Ok(k) => {
            st.prefilled = Some(k.min(n));
            Some(Ok(()))
        }
        Err(e) => Some(Err(e)),
    }
}

/// The reply sink of one server thread.
#[derive(Debug, Default)]
struct EntrySink(Mutex<SinkState>);

impl EntrySink {
    fn state(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ReplySink for EntrySink {
    fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let mut st = self.state();
        st.replies += 1;
        if st.replies > 1 {
            return Err(io::Error::other("second reply to one request"));
        }
        if let Some(n) = st.prefilled {
            st.len = n;
            st.direct_done = true;
        }
        for slice in data {
            let mut bytes: &[u8] = slice;
            if st.out_len < OUT_HEADER_SZ {
                let n = bytes.len().min(OUT_HEADER_SZ - st.out_len);
                let at = st.out_len;
                st.out[at..at + n].copy_from_slice(&bytes[..n]);
                st.out_len += n;
                bytes = &bytes[n..];
            }
            if bytes.is_empty() {
                continue;
            }
            let st = &mut *st;
            if let Some(buf) = st.direct.as_mut() {
                let at = st.at + st.len;
                if st.len + bytes.len() > st.cap {
                    st.overflow = true;
                } else {
                    buf[at..at + bytes.len()].copy_from_slice(bytes);
                    st.len += bytes.len();
                    st.direct_done = true;
                }
            } else {
                st.body.extend_from_slice(bytes);
            }
        }
        Ok(())
    }
}

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
/// the first two on the other CPU while the reader copies (docs/BENCHMARKS.md).
///
/// A queue's sync pool ([`pool`]) hands entries back here too, served: the thread only
/// commits them (`Handed::commit`).
struct Inbox {
    entries: Mutex<Handed>,
    /// Counts hand-offs; the receiving thread keeps a read armed on it in its ring.
    efd: nix::sys::eventfd::EventFd,
}

/// What other threads handed to a server thread.
#[derive(Default)]
struct Handed {
    /// Entries whose request this thread serves (and commits).
    serve: Vec<Entry>,
    /// Entries served elsewhere (the sync pool, [`pool`]), with their replies in place and
    /// their commit ids: this thread only commits them, in its ring.
    commit: Vec<(Entry, u64)>,
}

impl Inbox {
    fn new() -> io::Result<Inbox> {
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
    fn put(&self, entry: Entry) -> io::Result<()> {
        self.lock().serve.push(entry);
        self.wake()
    }

    /// Hands back an entry served elsewhere, its reply in place, to be committed.
    fn put_replied(&self, entry: Entry, commit_id: u64) -> io::Result<()> {
        self.lock().commit.push((entry, commit_id));
        self.wake()
    }

    fn wake(&self) -> io::Result<()> {
        self.efd.write(1).map(drop).map_err(io::Error::from)
    }

    fn take(&self) -> Handed {
        std::mem::take(&mut *self.lock())
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Handed entries are still registered with the kernel (see `Server::drop`).
        std::mem::forget(self.take());
    }
}

/// What serves a request in an entry: fuser's dispatcher and the sink its reply goes to. A
/// server thread has one, and so has each thread of the sync pool.
struct Servant<FS: Filesystem> {
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
    fn new(qid: u16, dispatcher: Dispatcher<FS>) -> Servant<FS> {
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
    fn serve(&mut self, entry: &mut Entry) -> (u64, bool) {
        let unique = Entry::u64_at(&entry.header, 8);
        let payload = Entry::u32_at(&entry.header, PAYLOAD_SZ_AT);
        let commit_id = Entry::u64_at(&entry.header, COMMIT_ID_AT);
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
    fn commit(&mut self, entry: Entry, commit_id: u64) -> io::Result<()> {
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
        use std::os::fd::AsFd;
        let fd = self.inbox.efd.as_fd().as_raw_fd();
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
        if entry.waits_for_commit() {
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
/// it runs at the lowest weight (measured in docs/BENCHMARKS.md).
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

fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(io::Error::from)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(io::Error::from)
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
        if let Err(e) = sched_idle() {
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
            match pool::spawn(&pool, cfg.sync_threads, &dispatcher, qid) {
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

/// Called when a queue can no longer be served: ends the session (unmounts), so that callers
/// get errors instead of waiting for ever.
pub type OnFatal = Arc<dyn Fn() + Send + Sync>;

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

    #[test]
    fn request_is_rebuilt_in_dev_fuse_format() {
        let mut e = Entry::new(4096);
        // fuse_in_header: len = 40 + 16 (arg0) + 5 (payload), opcode 16 (WRITE), unique 7
        let len = (IN_HEADER_SZ + 16 + 5) as u32;
        e.header[..4].copy_from_slice(&len.to_ne_bytes());
        e.header[4..8].copy_from_slice(&16u32.to_ne_bytes());
        e.header[8..16].copy_from_slice(&7u64.to_ne_bytes());
        e.header[IN_OUT_SZ..IN_OUT_SZ + 16].copy_from_slice(&[0xAB; 16]);
        e.header[COMMIT_ID_AT..COMMIT_ID_AT + 8].copy_from_slice(&7u64.to_ne_bytes());
        e.header[PAYLOAD_SZ_AT..PAYLOAD_SZ_AT + 4].copy_from_slice(&5u32.to_ne_bytes());
        let at = e.at;
        e.buf[at..at + 5].copy_from_slice(b"hello");
        let range = e.request().expect("valid");
        assert_eq!(Entry::u64_at(&e.header, COMMIT_ID_AT), 7);
        let req = &e.buf[range];
        assert_eq!(req.len(), len as usize);
        assert_eq!(&req[..4], &len.to_ne_bytes());
        assert_eq!(&req[IN_HEADER_SZ..IN_HEADER_SZ + 16], &[0xAB; 16]);
        assert_eq!(&req[IN_HEADER_SZ + 16..], b"hello");
    }

    #[test]
    fn large_reads_are_told_apart() {
        let mut e = Entry::new(64);
        e.header[4..8].copy_from_slice(&OP_READ.to_ne_bytes());
        e.header[READ_SIZE_AT..READ_SIZE_AT + 4].copy_from_slice(&(256u32 << 10).to_ne_bytes());
        assert!(e.large_read(256 << 10));
        assert!(!e.large_read((256 << 10) + 1));
        assert!(!e.large_read(0), "0: no stream helpers");
        let direct = libc::O_RDONLY as u32 | libc::O_DIRECT as u32;
        e.header[READ_FLAGS_AT..READ_FLAGS_AT + 4].copy_from_slice(&direct.to_ne_bytes());
        assert!(!e.large_read(4096), "O_DIRECT: served on the caller's CPU");
        e.header[READ_FLAGS_AT..READ_FLAGS_AT + 4].copy_from_slice(&0u32.to_ne_bytes());
        assert!(e.large_read(4096));
        e.header[4..8].copy_from_slice(&16u32.to_ne_bytes()); // WRITE of the same size
        assert!(!e.large_read(4096));
    }

    #[test]
    fn inconsistent_header_is_refused() {
        let mut e = Entry::new(4096);
        // len smaller than header + payload
        e.header[..4].copy_from_slice(&(IN_HEADER_SZ as u32).to_ne_bytes());
        e.header[PAYLOAD_SZ_AT..PAYLOAD_SZ_AT + 4].copy_from_slice(&5u32.to_ne_bytes());
        assert!(e.request().is_none());
        // argument larger than the op_in area
        let len = (IN_HEADER_SZ + OP_IN_SZ + 1) as u32;
        e.header[..4].copy_from_slice(&len.to_ne_bytes());
        e.header[PAYLOAD_SZ_AT..PAYLOAD_SZ_AT + 4].copy_from_slice(&0u32.to_ne_bytes());
        assert!(e.request().is_none());
    }

    fn out_header(len: usize, error: i32, unique: u64) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&(len as u32).to_ne_bytes());
        h.extend_from_slice(&error.to_ne_bytes());
        h.extend_from_slice(&unique.to_ne_bytes());
        h
    }

    #[test]
    fn reply_is_split_into_header_and_payload() {
        // collected body (request with payload): copied into the payload area
        let mut e = Entry::new(8);
        let sink = EntrySink::default();
        let header = out_header(OUT_HEADER_SZ + 3, 0, 9);
        sink.send(&[IoSlice::new(&header), IoSlice::new(b"abc")])
            .unwrap();
        e.set_reply(&mut sink.state(), 9);
        assert_eq!(&e.header[..OUT_HEADER_SZ], &header[..]);
        assert_eq!(&e.buf[e.at..e.at + 3], b"abc");
        assert_eq!(Entry::u32_at(&e.header, PAYLOAD_SZ_AT), 3);
        // too big for the payload buffer: EIO with an empty body
        sink.send(&[IoSlice::new(&header), IoSlice::new(&[7; 9])])
            .unwrap();
        e.set_reply(&mut sink.state(), 9);
        assert_eq!(Entry::u32_at(&e.header, 4) as i32, -libc::EIO);
        assert_eq!(Entry::u32_at(&e.header, PAYLOAD_SZ_AT), 0);
        // no reply at all: EIO
        e.set_reply(&mut sink.state(), 9);
        assert_eq!(Entry::u32_at(&e.header, 4) as i32, -libc::EIO);
    }

    fn lend(sink: &EntrySink, e: &mut Entry) {
        let mut st = sink.state();
        st.at = e.at;
        st.cap = e.payload_cap();
        st.direct = Some(std::mem::take(&mut e.buf));
    }

    #[test]
    fn payload_is_page_aligned() {
        for n in [8, 4096, 1 << 20] {
            let mut e = Entry::new(n);
            assert_eq!(e.payload_cap(), n);
            assert!(e.at >= HEAD_ROOM);
            assert_eq!(e.iovecs()[1].iov_base as usize % 4096, 0);
            assert_eq!(e.iovecs()[1].iov_len, n);
        }
    }

    #[test]
    fn direct_reply_lands_in_the_lent_buffer() {
        let mut e = Entry::new(8);
        let sink = EntrySink::default();
        lend(&sink, &mut e);
        // header split across slices, body in two slices
        let header = out_header(OUT_HEADER_SZ + 5, 0, 4);
        sink.send(&[
            IoSlice::new(&header[..10]),
            IoSlice::new(&header[10..]),
            IoSlice::new(b"he"),
            IoSlice::new(b"llo"),
        ])
        .unwrap();
        e.buf = sink.state().direct.take().unwrap();
        e.set_reply(&mut sink.state(), 4);
        assert_eq!(&e.header[..OUT_HEADER_SZ], &header[..]);
        assert_eq!(&e.buf[e.at..e.at + 5], b"hello");
        assert_eq!(Entry::u32_at(&e.header, PAYLOAD_SZ_AT), 5);
        // a second reply to one request is refused and the request answered EIO
        sink.state().direct = Some(std::mem::take(&mut e.buf));
        sink.send(&[IoSlice::new(&header), IoSlice::new(b"x")])
            .unwrap();
        assert!(sink.send(&[IoSlice::new(&header)]).is_err());
        e.buf = sink.state().direct.take().unwrap();
        e.set_reply(&mut sink.state(), 4);
        assert_eq!(Entry::u32_at(&e.header, 4) as i32, -libc::EIO);
        // overflow of the lent buffer: EIO
        lend(&sink, &mut e);
        sink.send(&[IoSlice::new(&header), IoSlice::new(&[1; 9])])
            .unwrap();
        e.buf = sink.state().direct.take().unwrap();
        e.set_reply(&mut sink.state(), 4);
        assert_eq!(Entry::u32_at(&e.header, 4) as i32, -libc::EIO);
    }

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

    #[test]
    fn possible_cpus_is_at_least_one() {
        assert!(possible_cpus().unwrap() >= 1);
        assert_eq!(parse_possible("0-1\n").unwrap(), 2);
        assert_eq!(parse_possible("0").unwrap(), 1);
        assert_eq!(parse_possible("0-3,4-7").unwrap(), 8);
        assert!(parse_possible("0-3,8-11").is_err(), "holes");
        assert!(parse_possible("").is_err());
        assert!(parse_possible("3-1").is_err());
        assert!(parse_possible("x").is_err());
    }
}
