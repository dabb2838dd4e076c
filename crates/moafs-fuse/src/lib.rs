//! Thin FUSE adapter for the moafs engine (fuser 0.18).
//!
//! [`MoafsFuse`] converts between fuser's types and the engine's, maps [`FsError`] to errno and
//! keeps no file-system state of its own: lookup counts, open counts and everything else live
//! in [`Fs`]. File handles are always 0.
//!
//! [`serve`] is the transport, shared with the FUSE floor target ([`passthrough`]): it mounts,
//! negotiates FUSE_INIT through the adapter's [`Transport`], serves requests on `threads`
//! threads or over io_uring, polls, tunes the bdi and unmounts cleanly on SIGINT, SIGTERM or
//! SIGHUP. [`mount_blocking`] is `serve` with [`MoafsFuse`] plus the engine's write-back timer
//! (`Fs::tick` every second) and write-behind thread.

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, Notifier, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, Session, SessionACL, WriteFlags,
};
use moafs_core::fs::iflags;
use moafs_core::fs::{
    acl, AtimeMode, AtimePolicy, Attr, Caller, FileKind, RenameFlags as CoreRenameFlags, SetAttr,
    TimeOrNow, Timespec, XattrFlags,
};
use moafs_core::{Fs, FsError};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use poll::{Activity, Poller};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::thread::JoinHandleExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The requests every adapter of this transport declines, the same way, so that the kernel
/// sends moafs, the ceiling (`memfs`) and the floor (`passthrough`) the same requests for the
/// same work: OPEN and CREATE answer ENOSYS (sticky: the kernel then sends no OPEN and no
/// RELEASE, creates files with MKNOD and keeps page cache across opens — no adapter needs file
/// handles: the kernel's lookup reference keeps an unlinked-but-open file alive), FLUSH
/// answers ENOSYS (close() still writes dirty pages back first; durability is fsync's job),
/// and a RELEASE (of a handle from before OPEN was declined) has nothing to release.
/// Expands to those four methods of `fuser::Filesystem`; the adapter needs a `transport`.
macro_rules! declined_requests {
    () => {
        declined_requests!(@open);
        declined_requests!(except_open);
    };
    (@open) => {
        fn open(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _flags: fuser::OpenFlags,
            reply: fuser::ReplyOpen,
        ) {
            self.transport.note();
            reply.error(fuser::Errno::ENOSYS);
        }
    };
    // moafs answers OPEN itself when inode flags are enforced (`MoafsFuse::open`)
    (except_open) => {
        fn create(
            &self,
            _req: &fuser::Request,
            _parent: fuser::INodeNo,
            _name: &std::ffi::OsStr,
            _mode: u32,
            _umask: u32,
            _flags: i32,
            reply: fuser::ReplyCreate,
        ) {
            self.transport.note();
            reply.error(fuser::Errno::ENOSYS);
        }

        fn flush(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _fh: fuser::FileHandle,
            _lock_owner: fuser::LockOwner,
            reply: fuser::ReplyEmpty,
        ) {
            self.transport.note();
            reply.error(fuser::Errno::ENOSYS);
        }

        fn release(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _fh: fuser::FileHandle,
            _flags: fuser::OpenFlags,
            _lock_owner: Option<fuser::LockOwner>,
            _flush: bool,
            reply: fuser::ReplyEmpty,
        ) {
            self.transport.note();
            reply.ok();
        }
    };
}

mod ioctl;
mod late;
pub mod memfs;
pub mod passthrough;
pub mod poll;
mod statx;
pub mod uring;

/// Whether to serve FUSE over io_uring (`-o uring=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UringMode {
    /// Never: /dev/fuse only.
    Off,
    /// When the kernel offers it; as root, turn the kernel's `fuse.enable_uring` on first.
    Auto,
}

/// How to mount (FUSE side; the engine's own options are `moafs_core::fs::MountOptions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountConfig {
    /// Stay in the foreground (used by the binary only; the library never forks).
    pub foreground: bool,
    /// Threads reading FUSE requests (each with its own cloned /dev/fuse descriptor).
    pub threads: usize,
    /// Let users other than the mounter in (`allow_other`).
    pub allow_other: bool,
    /// Let the kernel check permissions from the mode bits (`default_permissions`).
    pub default_permissions: bool,
    /// How long the kernel may cache attributes, entries and negative entries.
    pub attr_ttl: Duration,
    /// Mount read-only at the VFS level too.
    pub read_only: bool,
    /// Source shown in /proc/mounts: the image's absolute path (the type reads `fuse.moafs`).
    pub fsname: String,
    /// The mount's type after `fuse.`: `moafs`, or `moafs-passthrough` for the floor target.
    pub subtype: String,
    /// `fsname` is a block device: mount as `fuseblk.SUBTYPE` (root only). The kernel then
    /// sends SYNCFS for sync(2) and syncfs(2), which a `fuse` mount never gets.
    pub blkdev: bool,
    /// mount(8)'s VFS options of the mount, passed to mount(2) as flags: `noatime`,
    /// `nodiratime`, `relatime`, `strictatime`, `lazytime`, `dev`, `suid`, `noexec`, `sync`,
    /// `dirsync` (and their opposites). FUSE mounts are `nodev,nosuid` unless `dev`/`suid`.
    pub vfs_options: Vec<String>,
    /// Readahead of the mount in KiB (0: kernel default).
    pub read_ahead_kb: u32,
    /// Share of dirty memory the mount may hold, in percent (0: kernel default, 1 % for FUSE).
    pub bdi_max_ratio: u32,
    /// Keep the kernel's strict per-mount dirty limit, which FUSE sets (`bdi_strict=1`); off
    /// by default: the writer is then throttled like one on a kernel file system, by the
    /// global dirty limits (`max_ratio` still bounds the mount's share).
    pub bdi_strict_limit: bool,
    /// Poll the FUSE device while requests keep coming, until this long without one
    /// (`poll_ms=`; zero: always sleep in `read()`). See [`poll`].
    pub poll_window: Duration,
    /// FUSE over io_uring (per-CPU request queues; see [`uring`]).
    pub uring: UringMode,
    /// Over io_uring, READs of at least this many KiB (a stream's readahead) are served on
    /// another CPU than the reader's (`uring_stream_kb=`; 0: always on the reader's CPU).
    pub uring_stream_kb: u32,
    /// Ask for the kernel's writeback cache (`writeback_cache=on|off`): writes gather in the
    /// page cache and reach the daemon at write-back or close (with a SETATTR of the times
    /// the kernel then owns); off, every write() is a WRITE request at once (write-through).
    pub writeback_cache: bool,
    /// How long a /dev/fuse thread waits before it serves a FORGET while io_uring carries the
    /// other requests (`forget_pause_ms=`, default 0: at once). See [`FORGET_PAUSE`].
    pub forget_pause: Duration,
    /// Over io_uring, threads that serve FSYNC, FSYNCDIR and SYNCFS while the queues go on
    /// (`sync_threads=`; 0: each queue's thread serves them itself). See `uring/pool.rs`.
    pub sync_threads: usize,
    /// Enforce the immutable and append-only inode flags (`iflags`): OPEN is answered (and
    /// checked) instead of declined, at one request per open(2). Also on when the image
    /// says one of its inodes carried such a flag (`Fs::inode_flags_in_use`).
    pub inode_flags: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            foreground: false,
            threads: 2,
            allow_other: false,
            default_permissions: true,
            // moafs is the only writer of its image: long TTLs save LOOKUP/GETATTR round trips
            attr_ttl: Duration::from_secs(60),
            read_only: false,
            fsname: "moafs".to_string(),
            subtype: "moafs".to_string(),
            blkdev: false,
            vfs_options: Vec::new(),
            read_ahead_kb: 1024,
            bdi_max_ratio: 20,
            bdi_strict_limit: false,
            poll_window: Duration::from_millis(5),
            uring: UringMode::Auto,
            uring_stream_kb: 256,
            writeback_cache: true,
            forget_pause: FORGET_PAUSE,
            sync_threads: SYNC_THREADS,
            inode_flags: false,
        }
    }
}

/// Default of [`MountConfig::sync_threads`].
pub const SYNC_THREADS: usize = 4;

/// The FUSE file system: an [`Fs`] behind fuser's `Filesystem` trait.
pub struct MoafsFuse {
    fs: Arc<Fs>,
    ttl: Duration,
    /// What INIT asks of the kernel, the request counter, the notifier (shared with
    /// [`passthrough::Passthrough`]).
    transport: Transport,
    /// Open directory streams: handle -> the offset that ends the listing (set when the
    /// listing starts at offset 0, see `Fs::readdir_end`).
    dir_streams: Mutex<HashMap<u64, u64>>,
    next_dir_handle: AtomicU64,
    /// Write-back errors the writer sees at its next write (`late.rs`).
    late: late::LateErrors,
    /// OPEN is answered, so that opens are checked against inode flags (`iflags`).
    check_opens: bool,
}

impl MoafsFuse {
    pub fn new(fs: Arc<Fs>, cfg: &MountConfig) -> MoafsFuse {
        MoafsFuse {
            ttl: cfg.attr_ttl,
            transport: Transport::new(cfg),
            dir_streams: Mutex::new(HashMap::new()),
            next_dir_handle: AtomicU64::new(1),
            late: late::LateErrors::default(),
            check_opens: cfg.inode_flags || fs.inode_flags_in_use(),
            fs,
        }
    }

    /// The engine this adapter serves.
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Where the listing of directory `ino` through handle `fh` ends: fixed when it starts
    /// (offset 0, also after rewinddir), so entries made meanwhile — renamed ones included —
    /// cannot keep it going forever.
    fn listing_end(&self, ino: u64, fh: FileHandle, offset: u64) -> Result<u64, FsError> {
        if offset == 0 {
            self.fs.note_listing(ino)?;
            let end = self.fs.readdir_end(ino)?;
            let mut streams = self.dir_streams.lock().unwrap_or_else(|e| e.into_inner());
            streams.insert(fh.0, end);
            return Ok(end);
        }
        let streams = self.dir_streams.lock().unwrap_or_else(|e| e.into_inner());
        Ok(streams.get(&fh.0).copied().unwrap_or(u64::MAX))
    }

    /// Drops set-user-ID/set-group-ID for a write-like change by the caller of `req`; when
    /// the mode changed, the kernel is told to forget the attributes it caches (the reply of
    /// a WRITE or FALLOCATE carries none, and the kernel keeps the old mode for the TTL).
    fn kill_suid(&self, req: &Request, ino: u64) -> Result<(), FsError> {
        let groups = unprivileged_groups(req);
        if self.fs.kill_suid(ino, groups.as_deref())? {
            self.forget_attributes(ino);
        }
        Ok(())
    }

    /// Tells the kernel to forget the attributes it caches of `ino` (it asks for them again).
    fn forget_attributes(&self, ino: u64) {
        if let Some(n) = self.transport.notifier.get() {
            // offset < 0: attributes only, no page is touched (safe inside a request)
            if let Err(e) = n.inval_inode(INodeNo(ino), -1, 0) {
                log::debug!("attribute invalidation of {ino}: {e}");
            }
        }
    }

    /// Drops set-group-ID of `ino` if the unprivileged caller of `req` is not in its group.
    fn strip_sgid_of_outsider(&self, req: &Request, ino: u64) -> Result<(), FsError> {
        let Some(groups) = unprivileged_groups(req) else {
            return Ok(());
        };
        let a = self.fs.getattr(ino)?;
        if a.perm & libc::S_ISGID as u16 != 0 && !groups.contains(&a.gid) {
            let set = SetAttr {
                mode: Some(u32::from(a.perm)),
                unprivileged: Some(groups),
                ..SetAttr::default()
            };
            self.fs.setattr(ino, &set)?;
        }
        Ok(())
    }
}

/// The FUSE transport both adapters share ([`MoafsFuse`] and [`passthrough::Passthrough`]):
/// what FUSE_INIT asks of the kernel, the request counter that drives polling, and the
/// notifier. Served by [`serve`], which sets up everything else (threads, io_uring or
/// /dev/fuse, polling, bdi tuning, signals), so the two differ only in what answers requests.
#[derive(Debug, Clone)]
pub struct Transport {
    activity: Arc<Activity>,
    /// Ask for FUSE_OVER_IO_URING in INIT; `uring_granted` tells whether the kernel agreed.
    want_uring: bool,
    uring_granted: Arc<AtomicBool>,
    /// Tells the kernel to drop cached attributes (set once the session exists).
    notifier: Arc<OnceLock<Notifier>>,
    /// Ask for POSIX ACLs (only with default_permissions, which they need).
    posix_acl: bool,
    /// Ask for the writeback cache.
    writeback_cache: bool,
    /// The wait before a FORGET request is served ([`FORGET_PAUSE`] by default).
    forget_pause: Duration,
    /// FORGET and BATCH_FORGET requests served, and the inodes they named.
    forget_requests: Arc<AtomicU64>,
    forget_nodes: Arc<AtomicU64>,
}

/// How long a /dev/fuse thread waits before it serves a FORGET request while io_uring carries
/// every other request (`forget_pause_ms=`; by default it does not wait). Forgets (which the
/// kernel sends only through /dev/fuse) are not urgent: meanwhile the kernel queues those of
/// other inodes it evicts, and the next read takes them all as one BATCH_FORGET, so deleting
/// N files costs a few wake-ups of a /dev/fuse thread instead of N. But a deleted file's data
/// stays in the engine until its forget, and dirty data kept longer is written back more
/// often: Filebench fileserver ran 7 % slower with 3 ms (docs/BENCHMARKS.md, issue 29), while
/// PostMark and webproxy gained nothing measurable beyond ~7 % less CPU per operation. Without
/// io_uring those threads serve every request and never wait.
pub const FORGET_PAUSE: Duration = Duration::ZERO;

impl Transport {
    pub fn new(cfg: &MountConfig) -> Transport {
        Transport {
            activity: Arc::new(Activity::default()),
            want_uring: cfg.uring != UringMode::Off,
            uring_granted: Arc::new(AtomicBool::new(false)),
            notifier: Arc::new(OnceLock::new()),
            posix_acl: cfg.default_permissions,
            writeback_cache: cfg.writeback_cache,
            forget_pause: cfg.forget_pause,
            forget_requests: Arc::new(AtomicU64::new(0)),
            forget_nodes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Counts a request (polling keeps going while requests come).
    pub fn note(&self) {
        self.activity.note();
    }

    /// Counts one inode of a FORGET or BATCH_FORGET request (fuser's `batch_forget` calls
    /// `forget` once per inode, with the same request). The first inode of a request waits
    /// [`FORGET_PAUSE`] first when io_uring serves the other requests.
    pub fn forget_arrived(&self, req: &Request) {
        thread_local! {
            /// The request this thread served a forget of last.
            static LAST: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        self.note();
        let unique = req.unique().0;
        if LAST.with(|l| l.replace(unique)) != unique {
            self.forget_requests.fetch_add(1, Ordering::Relaxed);
            if !self.forget_pause.is_zero() && self.uring_granted.load(Ordering::Relaxed) {
                thread::sleep(self.forget_pause);
            }
        }
        self.forget_nodes.fetch_add(1, Ordering::Relaxed);
    }

    /// FORGET/BATCH_FORGET requests served so far, and the inodes they named.
    pub fn forgets(&self) -> (u64, u64) {
        (
            self.forget_requests.load(Ordering::Relaxed),
            self.forget_nodes.load(Ordering::Relaxed),
        )
    }

    /// The request counter that drives polling.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Set once FUSE_INIT granted the io_uring transport.
    pub fn uring_granted(&self) -> &Arc<AtomicBool> {
        &self.uring_granted
    }

    /// The session's notifier, once the session exists.
    pub fn notifier(&self) -> Option<&Notifier> {
        self.notifier.get()
    }

    /// Where the session's notifier goes once the session exists.
    pub fn notifier_slot(&self) -> &Arc<OnceLock<Notifier>> {
        &self.notifier
    }

    /// The adapter's part of FUSE_INIT: the capabilities and limits both adapters ask for.
    pub fn negotiate(&self, config: &mut KernelConfig) {
        // HANDLE_KILLPRIV_V2: the adapter clears suid/sgid itself (on chown, on truncate and
        // write by unprivileged callers, as the kernel flags them); in return the kernel sets SB_NOSEC
        // and stops asking getxattr("security.capability") before every write.
        // No ATOMIC_O_TRUNC: open is answered with ENOSYS (NO_OPEN), so the VFS truncates.
        let wanted = [
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_CACHE_SYMLINKS,
            // File handles (name_to_handle_at/open_by_handle_at, NFS export): a handle holds
            // the inode number and generation; the kernel finds an inode it no longer caches
            // by LOOKUP of "." in it (and a directory's parent by "..").
            InitFlags::FUSE_EXPORT_SUPPORT,
            // Not FUSE_ASYNC_DIO: with it the kernel completes an asynchronous O_DIRECT write
            // (aio, io_uring) without invalidating the page cache afterwards, so a page that a
            // buffered reader cached during the write stays stale (xfstests generic/451).
            // Without it the write waits in the kernel, which then invalidates the range.
        ];
        let writeback = self
            .writeback_cache
            .then_some(InitFlags::FUSE_WRITEBACK_CACHE);
        for flag in wanted.into_iter().chain(writeback) {
            if let Err(missing) = config.add_capabilities(flag) {
                log::info!("kernel does not support {missing:?}");
            }
        }
        // POSIX ACLs: the kernel checks permissions against the ACL xattrs (it needs
        // default_permissions for that) and caches them; the engine (or the passthrough's
        // backing file system) keeps mode and ACL in step and inherits default ACLs, so the
        // kernel must not apply the umask itself (DONT_MASK: the file system applies it when
        // there is no default ACL).
        if self.posix_acl {
            match config.add_capabilities(InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK) {
                Ok(()) => {}
                Err(missing) => log::info!("kernel does not support {missing:?}"),
            }
        }
        if self.want_uring {
            match config.add_capabilities(InitFlags::FUSE_OVER_IO_URING) {
                Ok(()) => self.uring_granted.store(true, Ordering::SeqCst),
                Err(_) => log::info!("kernel does not offer FUSE over io_uring"),
            }
        }
        if let Err(nearest) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(nearest);
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
    }
}

/// A fuser file system served by [`serve`] with the shared [`Transport`].
pub trait Adapter: Filesystem {
    fn transport(&self) -> &Transport;
}

impl Adapter for MoafsFuse {
    fn transport(&self) -> &Transport {
        &self.transport
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.to_errno())
}

/// The caller's groups (primary first) for set-group-ID decisions, or `None` when it counts as
/// privileged. FUSE passes neither capabilities nor supplementary groups: uid 0 stands for
/// CAP_FSETID, and the groups come from /proc/PID/status.
fn unprivileged_groups(req: &Request) -> Option<Vec<u32>> {
    if req.uid() == 0 {
        return None;
    }
    let mut groups = vec![req.gid()];
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) {
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:")) {
            groups.extend(
                line.split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
    }
    Some(groups)
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        umask: 0,
    }
}

/// The caller of a create, mkdir or mknod with the umask the kernel passed: with DONT_MASK
/// (granted with POSIX_ACL) the mode arrives unmasked, and the engine applies the umask unless
/// the directory has a default ACL.
fn creator(req: &Request, umask: u32) -> Caller {
    Caller {
        umask: umask & 0o777,
        ..caller(req)
    }
}

/// Converts an engine time to `SystemTime` without panicking on any input.
pub fn to_system_time(t: Timespec) -> SystemTime {
    let nsec = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    let base = if t.sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(t.sec as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(t.sec.unsigned_abs()))
    };
    base.and_then(|b| b.checked_add(nsec)).unwrap_or(UNIX_EPOCH)
}

/// Converts a `SystemTime` to an engine time (seconds may be negative).
pub fn from_system_time(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            // before the epoch: seconds down to i64::MIN itself (whose magnitude no i64 holds)
            let d = e.duration();
            let (mut sec, mut nsec) = (-i128::from(d.as_secs()), d.subsec_nanos());
            if nsec != 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timespec {
                sec: sec.clamp(i128::from(i64::MIN), 0) as i64,
                nsec,
            }
        }
    }
}

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// Converts engine attributes to fuser's.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks_512,
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.crtime),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn time_or_now(t: fuser::TimeOrNow) -> TimeOrNow {
    match t {
        fuser::TimeOrNow::Now => TimeOrNow::Now,
        fuser::TimeOrNow::SpecificTime(st) => TimeOrNow::At(from_system_time(st)),
    }
}

impl MoafsFuse {
    fn entry(&self, reply: ReplyEntry, res: Result<Attr, FsError>) {
        match res {
            Ok(a) => reply.entry(
                &self.ttl,
                &file_attr(&a),
                Generation(u64::from(a.generation)),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn empty(reply: ReplyEmpty, res: Result<(), FsError>) {
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

impl Filesystem for MoafsFuse {
    declined_requests!(except_open);

    /// Declined (ENOSYS: the kernel then sends no more OPEN or RELEASE) unless inode flags
    /// are enforced; then an open for writing or truncating an immutable file, or for writing
    /// an append-only one without O_APPEND, is refused (EPERM). No file handle either way.
    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.transport.note();
        if !self.check_opens {
            return reply.error(Errno::ENOSYS);
        }
        let intent = moafs_core::fs::iflags::OpenIntent {
            write: flags.0 & libc::O_ACCMODE != libc::O_RDONLY,
            append: flags.0 & libc::O_APPEND != 0,
            // without ATOMIC_O_TRUNC the kernel strips O_TRUNC and truncates by SETATTR
            truncate: flags.0 & libc::O_TRUNC != 0,
        };
        match self.fs.may_open(ino.0, intent) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.transport.negotiate(config);
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.fs.unmount() {
            log::error!("unmount: {e}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.transport.note();
        match self.fs.lookup(parent.0, name.as_bytes()) {
            Ok(a) => reply.entry(
                &self.ttl,
                &file_attr(&a),
                Generation(u64::from(a.generation)),
            ),
            Err(FsError::NotFound) if !self.ttl.is_zero() => {
                // A negative entry (node id 0) that the kernel may cache for the TTL.
                reply.entry(&self.ttl, &negative_attr(), Generation(0));
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.transport.forget_arrived(req);
        self.fs.forget(ino.0, nlookup);
    }

    // batch_forget: fuser's default calls `forget` for each node (its `ForgetOne` is private).

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.transport.note();
        // asked with a handle: before a buffered write, among others (`late.rs`)
        if fh.is_some() && self.late.take_no_space(ino.0) {
            return reply.error(Errno::ENOSPC);
        }
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.transport.note();
        let kill_suid = uid.is_some() || gid.is_some() || (size.is_some() && req.uid() != 0);
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(from_system_time),
            // HANDLE_KILLPRIV_V2: chown always drops suid/sgid; truncation by an unprivileged
            // caller does too (fuser does not pass FATTR_KILL_SUIDGID, so decide by uid).
            kill_suid,
            unprivileged: if kill_suid || mode.is_some_and(|m| m & libc::S_ISGID != 0) {
                unprivileged_groups(req)
            } else {
                None
            },
        };
        match self.fs.setattr(ino.0, &set) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.transport.note();
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.transport.note();
        let res = self
            .fs
            .mknod(parent.0, name.as_bytes(), mode, rdev, creator(req, umask));
        self.entry(reply, res);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.transport.note();
        let res = self.fs.mkdir(
            parent.0,
            name.as_bytes(),
            mode & 0o7777,
            creator(req, umask),
        );
        self.entry(reply, res);
    }

    /// open(O_TMPFILE): an unnamed file, opened (no file handle: handles are not used, as
    /// for the files OPEN is declined for; the kernel's reference keeps the file alive).
    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.transport.note();
        let linkable = flags & libc::O_EXCL == 0;
        let res = self
            .fs
            .tmpfile(parent.0, mode & 0o7777, creator(req, umask), linkable);
        match res {
            Ok(a) => reply.created(
                &self.ttl,
                &file_attr(&a),
                Generation(u64::from(a.generation)),
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        Self::empty(reply, self.fs.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        Self::empty(reply, self.fs.rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.transport.note();
        let res = self.fs.symlink(
            parent.0,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            caller(req),
        );
        self.entry(reply, res);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        let bits = flags.bits();
        if bits & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT) != 0 {
            return reply.error(Errno::EINVAL);
        }
        if bits & libc::RENAME_WHITEOUT != 0 {
            if bits & libc::RENAME_EXCHANGE != 0 {
                return reply.error(Errno::EINVAL);
            }
            return Self::empty(
                reply,
                self.fs.rename_whiteout(
                    parent.0,
                    name.as_bytes(),
                    newparent.0,
                    newname.as_bytes(),
                    bits & libc::RENAME_NOREPLACE != 0,
                    caller(req),
                ),
            );
        }
        let flags = CoreRenameFlags {
            noreplace: bits & libc::RENAME_NOREPLACE != 0,
            exchange: bits & libc::RENAME_EXCHANGE != 0,
        };
        Self::empty(
            reply,
            self.fs.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags,
            ),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.transport.note();
        let res = self.fs.link(ino.0, newparent.0, newname.as_bytes());
        self.entry(reply, res);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.transport.note();
        // Over io_uring the engine reads straight into the ring entry's payload.
        match uring::read_direct(size as usize, |out| self.fs.read_into(ino.0, offset, out)) {
            Some(Ok(())) => return reply.data(&[]),
            Some(Err(e)) => return reply.error(errno(&e)),
            None => {}
        }
        match self.fs.read(ino.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.transport.note();
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            if let Err(e) = self.kill_suid(req, ino.0) {
                return reply.error(errno(&e));
            }
        }
        match self.fs.write(ino.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => {
                if e.to_errno() == libc::ENOSPC
                    && write_flags.contains(WriteFlags::FUSE_WRITE_CACHE)
                {
                    // the writer learns it at its next write (`late.rs`)
                    self.late.note_no_space(ino.0);
                    self.forget_attributes(ino.0);
                }
                reply.error(errno(&e))
            }
        }
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        // the caller's thread (the kernel's request header names it), for group commit
        let caller = u64::from(req.pid());
        Self::empty(reply, self.fs.fsync_for(ino.0, datasync, caller));
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.transport.note();
        let fh = self.next_dir_handle.fetch_add(1, Ordering::Relaxed);
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.transport.note();
        const BATCH: usize = 128;
        let end = match self.listing_end(ino.0, fh, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut offset = offset;
        loop {
            let entries = match self.fs.readdir_until(ino.0, offset, BATCH, end) {
                Ok(e) => e,
                Err(e) => return reply.error(errno(&e)),
            };
            let n = entries.len();
            for e in entries {
                if reply.add(
                    INodeNo(e.ino),
                    e.offset,
                    file_type(e.kind),
                    OsStr::from_bytes(&e.name),
                ) {
                    return reply.ok();
                }
                offset = e.offset;
            }
            if n < BATCH {
                return reply.ok();
            }
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.transport.note();
        const BATCH: usize = 64;
        let end = match self.listing_end(ino.0, fh, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut offset = offset;
        loop {
            let entries = match self.fs.readdir_until(ino.0, offset, BATCH, end) {
                Ok(e) => e,
                Err(e) => return reply.error(errno(&e)),
            };
            let n = entries.len();
            for e in entries {
                let dot = e.name == b"." || e.name == b"..";
                // "." and ".." take no lookup reference in the kernel; real entries do.
                let attr = if dot {
                    self.fs.getattr(e.ino)
                } else {
                    self.fs.lookup(ino.0, &e.name)
                };
                let attr = match attr {
                    Ok(a) => a,
                    Err(err) => {
                        // Removed since the listing (or unreadable): skip it.
                        log::debug!("readdirplus: {:?}: {err}", String::from_utf8_lossy(&e.name));
                        offset = e.offset;
                        continue;
                    }
                };
                let full = reply.add(
                    INodeNo(attr.ino),
                    e.offset,
                    OsStr::from_bytes(&e.name),
                    &self.ttl,
                    &file_attr(&attr),
                    Generation(u64::from(attr.generation)),
                );
                if full {
                    if !dot {
                        self.fs.forget(attr.ino, 1);
                    }
                    return reply.ok();
                }
                offset = e.offset;
            }
            if n < BATCH {
                return reply.ok();
            }
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        self.dir_streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        Self::empty(reply, self.fs.sync());
    }

    fn ioctl_arg(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        arg: u64,
        in_data: &[u8],
        out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        self.transport.note();
        // before anything of the caller is read (uid 0 stands for CAP_SYS_ADMIN)
        if ioctl::needs_root(cmd) && req.uid() != 0 {
            return reply.error(Errno::EPERM);
        }
        match ioctl::decode(cmd, req.pid(), arg, in_data) {
            Err(e) => reply.error(Errno::from_i32(e)),
            Ok(ioctl::Ioctl::Unknown) => reply.error(Errno::from_i32(libc::ENOTTY)),
            Ok(ioctl::Ioctl::Shutdown { flush, word }) => {
                let Some(flush) = flush else {
                    return reply.error(Errno::EINVAL);
                };
                match self.fs.shutdown(flush) {
                    // the kernel copies `out_size` bytes back: the caller's word unchanged
                    Ok(()) => ioctl::reply_out(reply, &word, out_size),
                    Err(e) => reply.error(errno(&e)),
                }
            }
            Ok(ioctl::Ioctl::Trim {
                start,
                len,
                min_len,
            }) => match self.fs.trim(start, len, min_len) {
                Ok(n) => {
                    let out = ioctl::trim_reply(start, n, min_len);
                    ioctl::reply_out(reply, &out, out_size)
                }
                Err(e) => reply.error(errno(&e)),
            },
            Ok(ioctl::Ioctl::GetLabel) => match self.fs.label() {
                Ok(l) => {
                    let out = ioctl::label_reply(&l);
                    ioctl::reply_out(reply, &out, out_size)
                }
                Err(e) => reply.error(errno(&e)),
            },
            Ok(ioctl::Ioctl::SetLabel(label)) => match self.fs.set_label(&label) {
                Ok(()) => reply.ioctl(0, &[]),
                Err(e) => reply.error(errno(&e)),
            },
            Ok(ioctl::Ioctl::GetFlags { xattr }) => match self.fs.inode_flags(ino.0) {
                Ok(flags) => {
                    let out = ioctl::flags_reply(flags, xattr);
                    ioctl::reply_out(reply, &out, out_size)
                }
                Err(e) => reply.error(errno(&e)),
            },
            Ok(ioctl::Ioctl::SetFlags(flags)) => {
                let pinned = iflags::FL_IMMUTABLE | iflags::FL_APPEND;
                if flags & pinned != 0 && !self.check_opens {
                    log::warn!(
                        "chattr +i/+a refused: this mount does not check opens against inode \
                         flags (mount with -o iflags)"
                    );
                    return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
                }
                match self.fs.set_inode_flags(ino.0, flags) {
                    Ok(()) => {
                        // the new ctime: the kernel would show its cached one for the TTL
                        self.forget_attributes(ino.0);
                        reply.ioctl(0, &[])
                    }
                    Err(e) => reply.error(errno(&e)),
                }
            }
        }
    }

    /// statx(2) asking for the birth time: every basic field, `crtime` and the statx
    /// attributes of the inode flags.
    fn statx(&self, _req: &Request, ino: INodeNo, _mask: u32, _flags: u32, reply: ReplyData) {
        self.transport.note();
        let attr_and_flags = self
            .fs
            .getattr(ino.0)
            .and_then(|a| Ok((a, self.fs.inode_flags(ino.0)?)));
        match attr_and_flags {
            Ok((a, flags)) => reply.data(&statx::statx_reply(&a, flags, self.ttl)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// moafs copies no ranges itself: the kernel copies by splice through the page cache.
    /// Without inode flags enforced, ENOSYS (the kernel then stops asking). With them, EPERM
    /// into an immutable file (an fd opened before `chattr +i`: the VFS's check, which FUSE
    /// inodes cannot carry), else EOPNOTSUPP: the kernel falls back to its splice copy.
    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.transport.note();
        if !self.check_opens {
            return reply.error(Errno::ENOSYS);
        }
        match self.fs.inode_flags(ino_out.0) {
            Ok(f) if f & iflags::FL_IMMUTABLE != 0 => reply.error(Errno::EPERM),
            Ok(_) => reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn syncfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyEmpty) {
        self.transport.note();
        Self::empty(reply, self.fs.sync());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.transport.note();
        let s = self.fs.statfs();
        reply.statfs(
            s.total_blocks,
            s.free_blocks,
            s.avail_blocks,
            s.total_inodes,
            s.free_inodes,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        if ino.0 == moafs_core::fs::ROOT_INO && name.as_bytes() == DROP_CACHES_XATTR {
            // benchmark scenario A; the kernel lets only CAP_SYS_ADMIN set trusted.* names
            match self.fs.drop_caches() {
                Ok(n) => {
                    log::info!("drop_caches: {n} blocks dropped");
                    reply.ok();
                }
                Err(e) => reply.error(errno(&e)),
            }
            return;
        }
        let flags = XattrFlags {
            create: flags & libc::XATTR_CREATE != 0,
            replace: flags & libc::XATTR_REPLACE != 0,
        };
        let mut res = self.fs.setxattr(ino.0, name.as_bytes(), value, flags);
        if res.is_ok() && name.as_bytes() == acl::ACCESS {
            // Setting an access ACL is a chmod: an unprivileged caller outside the file's
            // group loses set-group-ID (the kernel asks for it only with SETXATTR_EXT).
            res = self.strip_sgid_of_outsider(req, ino.0);
        }
        Self::empty(reply, res);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.transport.note();
        match self.fs.getxattr(ino.0, name.as_bytes()) {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.transport.note();
        match self.fs.listxattr(ino.0) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                xattr_reply(reply, &buf, size);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        Self::empty(reply, self.fs.removexattr(ino.0, name.as_bytes()));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.transport.note();
        Self::empty(
            reply,
            self.fs.access(ino.0, mask.bits() as u32, caller(req)),
        );
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        // Changing a file's blocks counts as a write: an unprivileged caller drops
        // set-user-ID and set-group-ID (xfstests generic/683, 684).
        if req.uid() != 0 {
            if let Err(e) = self.kill_suid(req, ino.0) {
                return reply.error(errno(&e));
            }
        }
        Self::empty(reply, self.fs.fallocate(ino.0, offset, length, mode));
    }
}

/// Attributes of a negative entry (node 0): only the timeout matters to the kernel.
pub(crate) fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// Answers GETXATTR/LISTXATTR with `data`: its size when asked for the size (`size` 0),
/// ERANGE when it does not fit in `size`.
pub(crate) fn xattr_reply(reply: ReplyXattr, data: &[u8], size: u32) {
    if size == 0 {
        match u32::try_from(data.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(Errno::E2BIG),
        }
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

/// The write-back timer: calls `Fs::tick` every second until stopped.
struct Ticker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<thread::JoinHandle<()>>,
}

/// The access-time policy of the mount on `mountpoint`, from its flags in
/// /proc/self/mountinfo (no request to this very mount): `noatime`, `relatime` or neither
/// (`strictatime`), and `nodiratime`. The first mount on that directory is this daemon's.
pub fn mount_atime_policy(mountpoint: &Path) -> Option<AtimePolicy> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint
        .to_string_lossy()
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012");
    let opts = info.lines().find_map(|l| {
        let mut f = l.split(' ');
        (f.nth(4)? == want).then(|| f.next())?
    })?;
    let has = |o: &str| opts.split(',').any(|x| x == o);
    let mode = if has("noatime") {
        AtimeMode::Never
    } else if has("relatime") {
        AtimeMode::Relative
    } else {
        AtimeMode::Always
    };
    Some(AtimePolicy {
        mode,
        dirs: !has("nodiratime"),
    })
}

impl Ticker {
    fn start(fs: Arc<Fs>, mountpoint: PathBuf) -> io::Result<Ticker> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let handle = thread::Builder::new()
            .name("moafs-tick".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                // The mount's atime flags, followed once a second (a remount changes them).
                let mut policy = None;
                let mut follow_atime = || {
                    let now = mount_atime_policy(&mountpoint);
                    if now.is_some() && now != policy {
                        policy = now;
                        fs.set_atime_policy(now.unwrap_or_default());
                    }
                };
                follow_atime();
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let (g, _) = cv
                        .wait_timeout(stopped, Duration::from_secs(1))
                        .unwrap_or_else(|e| e.into_inner());
                    stopped = g;
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    follow_atime();
                    if let Err(e) = fs.tick() {
                        log::error!("write-back: {e}");
                    }
                    stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                }
            })?;
        Ok(Ticker {
            stop,
            handle: Some(handle),
        })
    }
}

/// The write-behind thread (`Fs::write_behind_worker`): writes new blocks of large files
/// between commits, outside the engine lock. Stopped and joined when dropped.
struct WriteBehind {
    fs: Arc<Fs>,
    handle: Option<thread::JoinHandle<()>>,
}

impl WriteBehind {
    fn start(fs: Arc<Fs>) -> io::Result<WriteBehind> {
        let f = fs.clone();
        let handle = thread::Builder::new()
            .name("moafs-behind".into())
            .spawn(move || f.write_behind_worker())?;
        Ok(WriteBehind {
            fs,
            handle: Some(handle),
        })
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        self.fs.stop_write_behind();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Waits for SIGINT/SIGTERM/SIGHUP (blocked in every thread) and unmounts on the first one.
struct SignalWatcher {
    done: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

fn watched_signals() -> SigSet {
    let mut s = SigSet::empty();
    s.add(Signal::SIGINT);
    s.add(Signal::SIGTERM);
    s.add(Signal::SIGHUP);
    s
}

impl SignalWatcher {
    fn start(mut unmounter: fuser::SessionUnmounter, mountpoint: PathBuf) -> io::Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let handle = thread::Builder::new()
            .name("moafs-signals".into())
            .spawn(move || {
                let set = watched_signals();
                loop {
                    let sig = match set.wait() {
                        Ok(s) => s,
                        Err(e) => {
                            log::error!("sigwait: {e}");
                            return;
                        }
                    };
                    if d.load(Ordering::SeqCst) {
                        return;
                    }
                    log::info!("{sig:?}: unmounting {}", mountpoint.display());
                    if let Err(e) = unmounter.unmount() {
                        log::warn!("unmount failed ({e}); detaching lazily");
                        if let Err(e) =
                            nix::mount::umount2(&mountpoint, nix::mount::MntFlags::MNT_DETACH)
                        {
                            log::error!("lazy unmount of {} failed: {e}", mountpoint.display());
                        }
                    }
                }
            })?;
        Ok(SignalWatcher {
            done,
            handle: Some(handle),
        })
    }
}

impl Drop for SignalWatcher {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            // Wake the thread out of sigwait; it sees `done` and returns.
            if nix::sys::pthread::pthread_kill(h.as_pthread_t(), Signal::SIGHUP).is_ok() {
                let _ = h.join();
            }
        }
    }
}

/// Restores the calling thread's signal mask on drop.
struct MaskGuard(SigSet);

impl Drop for MaskGuard {
    fn drop(&mut self) {
        let _ = self.0.thread_set_mask();
    }
}

/// Largest write the kernel may send (and the io_uring payload buffer size).
const MAX_WRITE: u32 = 1 << 20;

/// Setting this extended attribute on the root (any value; root only, as every `trusted.`
/// name) writes everything back and drops moafs's block cache: `moafs bench --cache dropped`
/// uses it beside the kernel's drop_caches. It is never stored.
pub const DROP_CACHES_XATTR: &[u8] = b"trusted.moafs.drop_caches";

/// The names mount(8) gives VFS flags of a mount, as fuser's options (`None`: not one of them).
/// Opposites of the defaults (`nodev`, `nosuid`, `exec`, `atime`, `async`, `rw`) map to
/// nothing to add but are still known.
pub fn vfs_mount_option(name: &str) -> Option<MountOption> {
    Some(match name {
        "dev" => MountOption::Dev,
        "suid" => MountOption::Suid,
        "noexec" => MountOption::NoExec,
        "noatime" => MountOption::NoAtime,
        "sync" => MountOption::Sync,
        "dirsync" => MountOption::DirSync,
        // fuser has no variants for these; its (patched) mount turns them into flags
        "nodiratime" | "relatime" | "strictatime" | "lazytime" => {
            MountOption::CUSTOM(name.to_string())
        }
        _ => return None,
    })
}

/// Whether `name` is a VFS option of mount(8) that [`MountConfig::vfs_options`] takes.
pub fn is_vfs_option(name: &str) -> bool {
    vfs_mount_option(name).is_some()
        || matches!(
            name,
            "nodev"
                | "nosuid"
                | "exec"
                | "atime"
                | "async"
                | "diratime"
                | "norelatime"
                | "nostrictatime"
                | "nolazytime"
        )
}

/// Builds fuser's configuration from ours.
pub fn fuser_config(cfg: &MountConfig) -> fuser::Config {
    let mut c = fuser::Config::default();
    c.mount_options = vec![
        MountOption::FSName(cfg.fsname.clone()),
        MountOption::Subtype(cfg.subtype.clone()),
    ];
    if cfg.blkdev {
        c.mount_options
            .push(MountOption::CUSTOM("blkdev".to_string()));
    }
    if cfg.default_permissions {
        c.mount_options.push(MountOption::DefaultPermissions);
    }
    if cfg.read_only {
        c.mount_options.push(MountOption::RO);
    }
    for name in &cfg.vfs_options {
        if let Some(o) = vfs_mount_option(name) {
            c.mount_options.push(o);
        }
    }
    c.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let threads = cfg.threads.max(1);
    c.n_threads = Some(threads);
    c.clone_fd = threads > 1;
    c
}

/// Raises the FUSE connection's readahead and dirty-memory share (root only; best effort).
/// The kernel's defaults for a FUSE bdi are 128 KiB readahead and 1 % of dirty memory, which
/// split large sequential reads into small requests and throttle buffered writers early.
fn tune_bdi(mountpoint: &Path, cfg: &MountConfig) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    // a fuseblk mount's bdi is "MAJ:MIN-fuseblk", MAJ:MIN being its block device's, whose own
    // bdi ("MAJ:MIN") is not ours to change
    let bdi = if cfg.blkdev {
        format!("/sys/class/bdi/{major}:{minor}-fuseblk")
    } else {
        format!("/sys/class/bdi/{major}:{minor}")
    };
    // strict_limit first: a test that sees max_ratio set knows strict_limit is too.
    let strict = u8::from(cfg.bdi_strict_limit);
    if let Err(e) = std::fs::write(format!("{bdi}/strict_limit"), strict.to_string()) {
        log::info!("cannot set {bdi}/strict_limit to {strict}: {e}");
    }
    for (file, value) in [
        ("read_ahead_kb", cfg.read_ahead_kb),
        ("max_ratio", cfg.bdi_max_ratio),
    ] {
        if value == 0 {
            continue;
        }
        if let Err(e) = std::fs::write(format!("{bdi}/{file}"), value.to_string()) {
            log::info!("cannot set {bdi}/{file} to {value}: {e}");
        }
    }
}

/// prctl(2) `PR_SET_IO_FLUSHER` (Linux 5.6; not in the libc crate for Linux yet).
const PR_SET_IO_FLUSHER: libc::c_int = 57;

/// Marks this thread, and every thread it starts afterwards (the flags are inherited), as an
/// I/O flusher, as prctl(2) asks of a FUSE daemon: its memory allocations do no I/O for
/// reclaim (which could wait for this mount's own dirty pages, i.e. for the daemon), and its
/// writes to the image are throttled by the image's device alone, not by the global dirty
/// memory, which includes this mount's pages that only the daemon can clean. Needs
/// CAP_SYS_RESOURCE (root); without it the daemon runs as before.
fn mark_io_flusher() {
    // SAFETY: prctl with integer arguments only (no pointers); it changes flags of the calling
    // thread and cannot affect memory safety.
    let r = unsafe { libc::prctl(PR_SET_IO_FLUSHER, 1 as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        log::info!(
            "cannot mark the daemon as an I/O flusher: {}",
            io::Error::last_os_error()
        );
    }
}

/// Aborts the FUSE connection of the mount at `mountpoint` through the fusectl file system
/// (mounting it at /sys/fs/fuse/connections when it is not; root).
fn abort_connection(mountpoint: &Path) -> io::Result<()> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = mountpoint.to_string_lossy();
    let dev = info
        .lines()
        .rev() // the newest mount on that point
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let mp = f.get(4)?.replace("\\040", " ");
            (mp == want).then(|| f.get(2).map(|d| d.to_string()))?
        })
        .next()
        .ok_or_else(|| io::Error::other("mount point not in /proc/self/mountinfo"))?;
    let minor = dev
        .split(':')
        .nth(1)
        .ok_or_else(|| io::Error::other(format!("odd device {dev:?}")))?;
    let conns = Path::new("/sys/fs/fuse/connections");
    if !conns.join(minor).exists() {
        nix::mount::mount(
            Some("fusectl"),
            conns,
            Some("fusectl"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(io::Error::from)?;
    }
    std::fs::write(conns.join(minor).join("abort"), "1")
}

/// Mounts the adapter that `make` builds on `mountpoint`, calls `ready` once the mount is live,
/// serves requests until the file system is unmounted (by `umount`/`fusermount3 -u`, or by
/// SIGINT/SIGTERM/SIGHUP, which this function handles), and returns once the session has ended.
/// This is the transport shared by moafs and the passthrough floor target: threads, io_uring
/// or /dev/fuse (with polling), bdi tuning, I/O-flusher marking, signals.
///
/// `make` gets the configuration as it will be used (`uring` off when io_uring cannot be
/// used). `probe` gives the io_uring transport a way to tell whether a large READ continues
/// a stream.
/// `background` starts the adapter's own threads once the session exists; what it returns is
/// dropped after the session ended (and after the signal watcher).
///
/// Call it before spawning other threads if signals should reach the watcher: the signals are
/// blocked in the calling thread (and so in every thread spawned from here) and restored on
/// return.
pub fn serve<A: Adapter, G>(
    make: impl FnOnce(&MountConfig) -> io::Result<A>,
    mountpoint: &Path,
    cfg: &MountConfig,
    probe: impl FnOnce(&A) -> Option<uring::StreamProbe>,
    background: impl FnOnce(&Path) -> io::Result<G>,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let old_mask = watched_signals()
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(io::Error::from)?;
    let _mask = MaskGuard(old_mask);

    mark_io_flusher();
    let mountpoint = mountpoint.canonicalize()?;
    let mut adapter_cfg = cfg.clone();
    if cfg.uring == UringMode::Auto {
        if let Err(e) = uring::probe() {
            log::info!("FUSE over io_uring not used: {e}");
            adapter_cfg.uring = UringMode::Off;
        }
    }
    let adapter = make(&adapter_cfg)?;
    let transport = adapter.transport().clone();
    let probe = probe(&adapter);
    if cfg.uring == UringMode::Auto && !uring::kernel_enabled() && nix::unistd::geteuid().is_root()
    {
        match uring::kernel_enable() {
            Ok(()) => log::info!("turned on the kernel's fuse.enable_uring"),
            Err(e) => log::info!("cannot turn on fuse.enable_uring: {e}"),
        }
    }
    let mut session = Session::new(adapter, &mountpoint, &fuser_config(cfg))?;
    let _ = transport.notifier_slot().set(session.notifier());
    // FUSE over io_uring when INIT granted it; otherwise /dev/fuse, where the thread reading
    // the session's own descriptor polls (fuser gives the other threads descriptors of their
    // own, which keep sleeping in read()).
    let uring_setup = if transport.uring_granted().load(Ordering::SeqCst) {
        Some((
            session.as_fd().try_clone_to_owned()?,
            uring::UringConfig {
                queues: uring::possible_cpus()?,
                // two entries for the requests served in turn, and one for each fsync the
                // sync pool may hold meanwhile
                depth: 2 + cfg.sync_threads,
                payload: MAX_WRITE as usize,
                stream_min: cfg.uring_stream_kb as usize * 1024,
                sync_threads: cfg.sync_threads,
            },
        ))
    } else {
        None
    };
    let poll_fd = session.as_fd().try_clone_to_owned()?;
    let poller: Mutex<Option<Poller>> = Mutex::new(None);
    let activity = transport.activity().clone();
    let start_poller = || {
        if !cfg.poll_window.is_zero() {
            match Poller::start(poll_fd, activity, cfg.poll_window) {
                Ok(p) => *poller.lock().unwrap_or_else(|e| e.into_inner()) = Some(p),
                Err(e) => log::warn!("cannot start polling: {e}"),
            }
        }
    };
    // stat() of the mount point is served by this very session: do it from a thread, once
    // `session.run()` below is answering requests (doing it here would deadlock).
    // The mount is "ready" only after this is done: a umount racing the thread's stat would
    // find the mount busy.
    let bdi_done = {
        let (mp, cfg) = (mountpoint.clone(), cfg.clone());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("moafs-bdi".into())
            .spawn(move || {
                tune_bdi(&mp, &cfg);
                let _ = tx.send(());
            })?;
        rx
    };
    let ready = move || {
        if bdi_done.recv_timeout(Duration::from_secs(10)).is_err() {
            log::warn!("tuning the mount's bdi did not finish in 10 s");
        }
        ready()
    };
    let background = background(&mountpoint)?;
    let watcher = SignalWatcher::start(session.unmount_callable(), mountpoint.clone())?;
    log::info!("mounted on {}", mountpoint.display());
    // Ends the session from an io_uring queue that can no longer be served: abort the FUSE
    // connection (every waiting and later request fails at once, /dev/fuse reads end, and
    // the daemon exits as at unmount); unmount if that is not possible.
    let unmounter = Arc::new(Mutex::new(session.unmount_callable()));
    let abort_mp = mountpoint.clone();
    let on_fatal: uring::OnFatal = Arc::new(move || {
        if let Err(e) = abort_connection(&abort_mp) {
            log::error!("cannot abort the FUSE connection: {e}; unmounting");
            let mut u = unmounter.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = u.unmount() {
                log::error!("unmount after an io_uring failure: {e}");
            }
        }
    });
    let sync_counts = Arc::new(uring::SyncCounts::default());
    let res = session.run_with_extra(|dispatcher| {
        if let Some((fd, ucfg)) = uring_setup {
            match uring::start(
                fd,
                dispatcher,
                ucfg,
                probe,
                on_fatal.clone(),
                sync_counts.clone(),
            ) {
                Ok(workers) => {
                    log::info!("serving FUSE over io_uring ({} queues)", ucfg.queues);
                    // Ready once every request path is set up (the /dev/fuse threads run).
                    ready();
                    return workers;
                }
                Err(e) => {
                    // INIT granted the transport: the kernel holds every request until the
                    // rings are ready, so /dev/fuse cannot take over. End the mount with a
                    // clear error instead of hanging its users.
                    log::error!(
                        "cannot serve FUSE over io_uring ({e}); unmounting — mount with \
                         -o uring=off to use /dev/fuse"
                    );
                    on_fatal();
                    return fuser::ExtraWorkers::default();
                }
            }
        }
        start_poller();
        ready();
        fuser::ExtraWorkers::default()
    });
    drop(poller);
    drop(watcher);
    drop(background);
    let (forgets, forgotten) = transport.forgets();
    log::info!(
        "session on {} ended ({forgets} FORGET requests for {forgotten} inodes; over \
         io_uring {} sync requests served by the sync pools, {} in the queues' threads)",
        mountpoint.display(),
        sync_counts.pooled.load(Ordering::Relaxed),
        sync_counts.inline.load(Ordering::Relaxed),
    );
    res
}

/// Mounts `fs` on `mountpoint` with [`serve`] (plus the engine's write-back timer and
/// write-behind thread), and returns after the engine has written everything back
/// (`Fs::unmount`).
pub fn mount_blocking(
    fs: Arc<Fs>,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let res = serve(
        |c| Ok(MoafsFuse::new(fs.clone(), c)),
        mountpoint,
        cfg,
        |a: &MoafsFuse| {
            let fs = a.fs().clone();
            let probe: uring::StreamProbe =
                Arc::new(move |ino, offset| fs.read_follows(ino, offset));
            Some(probe)
        },
        |mp| {
            let ticker = Ticker::start(fs.clone(), mp.to_path_buf())?;
            let behind = WriteBehind::start(fs.clone())?;
            // dropped in this order: write-behind first, then the timer
            Ok((behind, ticker))
        },
        ready,
    );
    // `destroy` has normally done this already; later calls do nothing.
    let unmounted = fs.unmount();
    log::info!("unmounted {}", mountpoint.display());
    res?;
    unmounted.map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_including_before_1970() {
        for (sec, nsec) in [
            (0, 0),
            (1, 5),
            (1_700_000_000, 999_999_999),
            (-1, 0),
            (-1, 1),
            (-86_400, 500),
            // the ends of the signed 64-bit range (xfstests generic/402)
            (i64::MIN, 0),
            (i64::MIN + 1, 7),
            (i64::MAX, 0),
        ] {
            let t = Timespec { sec, nsec };
            assert_eq!(from_system_time(to_system_time(t)), t, "{sec}.{nsec}");
        }
        // Out-of-range inputs do not panic.
        let _ = to_system_time(Timespec {
            sec: i64::MIN,
            nsec: u32::MAX,
        });
        let _ = to_system_time(Timespec {
            sec: i64::MAX,
            nsec: u32::MAX,
        });
    }

    #[test]
    fn config_maps_options() {
        let cfg = MountConfig {
            threads: 4,
            allow_other: true,
            read_only: true,
            ..MountConfig::default()
        };
        let c = fuser_config(&cfg);
        assert_eq!(c.n_threads, Some(4));
        assert!(c.clone_fd);
        assert_eq!(c.acl, SessionACL::All);
        assert!(c.mount_options.contains(&MountOption::DefaultPermissions));
        assert!(c.mount_options.contains(&MountOption::RO));
        let c = fuser_config(&MountConfig {
            threads: 0,
            default_permissions: false,
            ..MountConfig::default()
        });
        assert_eq!(c.n_threads, Some(1));
        assert!(!c.mount_options.contains(&MountOption::DefaultPermissions));
    }
}
