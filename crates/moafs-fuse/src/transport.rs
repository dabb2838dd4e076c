//! The FUSE transport every adapter shares: what FUSE_INIT asks of the kernel, the request
//! counter that drives polling, the notifier, the wait before FORGETs, and the requests every
//! adapter declines the same way (`declined_requests!`).

use crate::poll::Activity;
use crate::{MountConfig, UringMode};
use fuser::{Filesystem, InitFlags, KernelConfig, Notifier, Request};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

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

/// The FUSE transport every adapter shares ([`MoafsFuse`](crate::MoafsFuse),
/// [`Passthrough`](crate::passthrough::Passthrough) and [`Memfs`](crate::memfs::Memfs)):
/// what FUSE_INIT asks of the kernel, the request counter that drives polling, and the
/// notifier. Served by [`serve`](crate::serve), which sets up everything else (threads,
/// io_uring or /dev/fuse, polling, bdi tuning, signals), so the adapters differ only in what
/// answers requests.
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
    /// Where the transport reports its phases of each fsync (`synctime.rs`), if anywhere.
    sync_timer: OnceLock<crate::synctime::SyncTimer>,
}

/// How long a /dev/fuse thread waits before it serves a FORGET request while io_uring carries
/// every other request (`forget_pause_ms=`; by default it does not wait). Forgets (which the
/// kernel sends only through /dev/fuse) are not urgent: meanwhile the kernel queues those of
/// other inodes it evicts, and the next read takes them all as one BATCH_FORGET, so deleting
/// N files costs a few wake-ups of a /dev/fuse thread instead of N. But a deleted file's data
/// stays in the engine until its forget, and dirty data kept longer is written back more
/// often: Filebench fileserver ran 7 % slower with 3 ms (docs/results/HISTORY-benchmarks.md, issue 29), while
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
            sync_timer: OnceLock::new(),
        }
    }

    /// Reports the transport's phases of each fsync to `timer` (set once, by the adapter).
    pub fn set_sync_timer(&self, timer: crate::synctime::SyncTimer) {
        let _ = self.sync_timer.set(timer);
    }

    /// Where the transport reports its phases of each fsync, if anywhere.
    pub fn sync_timer(&self) -> Option<crate::synctime::SyncTimer> {
        self.sync_timer.get().cloned()
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

    /// The adapter's part of FUSE_INIT: the capabilities and limits every adapter asks for.
    pub fn negotiate(&self, config: &mut KernelConfig) {
        // HANDLE_KILLPRIV_V2: the adapter clears suid/sgid itself (on chown, on truncate and
        // write by unprivileged callers, as the kernel flags them); in return the kernel sets SB_NOSEC
        // and stops asking getxattr("security.capability") before every write.
        // No ATOMIC_O_TRUNC: open is answered with ENOSYS (NO_OPEN), or by moafs only to check
        // inode flags; either way the VFS truncates (by SETATTR).
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

/// A fuser file system served by [`serve`](crate::serve) with the shared [`Transport`].
pub trait Adapter: Filesystem {
    fn transport(&self) -> &Transport;
}

/// Largest write the kernel may send (and the io_uring payload buffer size).
pub(crate) const MAX_WRITE: u32 = 1 << 20;
