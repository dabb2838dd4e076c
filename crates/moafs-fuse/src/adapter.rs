//! [`MoafsFuse`], the adapter: an [`Fs`] behind fuser's `Filesystem` trait, with the little
//! state it keeps of its own and the helpers its answers share. The answers to each request
//! are in `adapter/requests.rs`.

use crate::convert::{errno, file_attr, unprivileged_groups};
use crate::synctime::{SyncPhase, SyncTimer};
use crate::{late, reply, Adapter, MountConfig, Transport};
use fuser::{FileHandle, Generation, INodeNo, ReplyEmpty, ReplyEntry, Request};
use moafs_core::fs::{Attr, FsyncPhase, SetAttr};
use moafs_core::{Fs, FsError};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod requests;

/// The FUSE file system: an [`Fs`] behind fuser's `Filesystem` trait.
pub struct MoafsFuse {
    fs: Arc<Fs>,
    ttl: Duration,
    /// What INIT asks of the kernel, the request counter, the notifier (shared with
    /// [`Passthrough`](crate::passthrough::Passthrough) and [`Memfs`](crate::memfs::Memfs)).
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
        let transport = Transport::new(cfg);
        let engine = fs.clone();
        transport.set_sync_timer(SyncTimer::new(move |phase, d| {
            engine.note_fsync_phase(
                match phase {
                    SyncPhase::Queue => FsyncPhase::Queue,
                    SyncPhase::Reply => FsyncPhase::Reply,
                },
                d,
            )
        }));
        MoafsFuse {
            ttl: cfg.attr_ttl,
            transport,
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
        if let Some(n) = self.transport.notifier() {
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

impl Adapter for MoafsFuse {
    fn transport(&self) -> &Transport {
        &self.transport
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

    /// [`reply::empty`] with the engine's error as errno.
    fn empty(reply: ReplyEmpty, res: Result<(), FsError>) {
        reply::empty(reply, res.map_err(|e| errno(&e)));
    }
}

/// Setting this extended attribute on the root (any value; root only, as every `trusted.`
/// name) writes everything back and drops moafs's block cache: `moafs bench --cache dropped`
/// uses it beside the kernel's drop_caches. It is never stored.
pub const DROP_CACHES_XATTR: &[u8] = b"trusted.moafs.drop_caches";
