//! FUSE over io_uring (Linux 6.14+, `fuse.enable_uring=Y`).
//!
//! With plain /dev/fuse every request wakes a daemon thread on whichever CPU the scheduler
//! picks, usually the other one, and the reply wakes the caller back across CPUs: two
//! inter-processor wake-ups per round trip, which on a virtual machine dominate the cost of a
//! small operation (docs/results/HISTORY-benchmarks.md). The io_uring transport has one request queue per CPU:
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
//!
//! This file: the protocol's layout, the setup checks, and one ring entry — its buffers, the
//! request rebuilt from it and the reply put back into it. The threads that serve the queues
//! are in `uring/server.rs`, the sync pool in `uring/pool.rs`.

use fuser::ReplySink;
use io_uring::{cqueue, squeue, IoUring};
use std::io;
use std::io::IoSlice;
use std::sync::Arc;
use std::sync::Mutex;

mod boost;
mod inbox;
mod pool;
mod server;
pub use pool::SyncCounts;
pub use server::start;

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
    /// served by the queue's stream helper on another CPU; 0: no helpers (see
    /// [`Inbox`](inbox::Inbox)).
    pub stream_min: usize,
    /// Threads of each queue's sync pool, which serves FSYNC, FSYNCDIR and SYNCFS so that the
    /// queue's thread goes on serving while they wait for a commit ([`pool`]); 0: no pool,
    /// the queue's thread serves them itself.
    pub sync_threads: usize,
    /// Nice value of a queue's thread while callers take turns changing directories (it
    /// leaves SCHED_IDLE meanwhile, `uring/boost.rs`); `None`: always SCHED_IDLE.
    pub boost: Option<i32>,
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
/// they are never freed (see `Server::drop` in `uring/server.rs`).
struct Entry {
    header: Box<[u8]>,
    /// At least HEAD_ROOM bytes, then (from `at`, page-aligned) the payload the kernel sees.
    buf: Box<[u8]>,
    /// Offset of the payload in `buf`: page-aligned in memory, because the kernel's copies
    /// between the payload and the page cache are several times slower from a misaligned
    /// source.
    at: usize,
    /// A sync request: when the queue's thread saw it arrive, and when the engine returned
    /// (`synctime.rs`).
    arrived: Option<std::time::Instant>,
    served: Option<std::time::Instant>,
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
            arrived: None,
            served: None,
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

/// Called when a queue can no longer be served: ends the session (unmounts), so that callers
/// get errors instead of waiting for ever.
pub type OnFatal = Arc<dyn Fn() + Send + Sync>;

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
