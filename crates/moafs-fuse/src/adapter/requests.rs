//! How [`MoafsFuse`] answers each FUSE request: fuser's `Filesystem` trait on the engine.

use super::DROP_CACHES_XATTR;
use crate::convert::{
    caller, creator, errno, file_attr, file_type, from_system_time, time_or_now,
    unprivileged_groups,
};
use crate::reply::{negative_attr, xattr_reply};
use crate::{ioctl, statx, synctime, uring, MoafsFuse};
use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyBmap, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, WriteFlags,
};
use moafs_core::fs::iflags;
use moafs_core::fs::FsyncPhase;
use moafs_core::fs::{acl, RenameFlags as CoreRenameFlags, SetAttr, XattrFlags};
use moafs_core::FsError;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

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
        // an fsync that came over io_uring carries its arrival (and its reply's commit to the
        // ring is timed by the thread that makes it); one from /dev/fuse does not
        let arrived = synctime::take_arrived();
        if let Some(at) = arrived {
            self.fs.note_fsync_phase(FsyncPhase::Queue, at.elapsed());
        }
        let r = self.fs.fsync_for(ino.0, datasync, caller);
        if arrived.is_some() {
            // the thread that commits the reply to the ring reports its time
            synctime::mark_served();
            Self::empty(reply, r);
        } else {
            let at = Instant::now();
            Self::empty(reply, r);
            self.fs.note_fsync_phase(FsyncPhase::Reply, at.elapsed());
        }
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
            Ok(ioctl::Ioctl::Writable) => match self.fs.make_writable() {
                Ok(()) => reply.ioctl(0, &[]),
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

    /// FIBMAP on a `fuseblk` mount (`filefrag` without FIEMAP, boot loaders): the file's
    /// block on the device, everything written home first (`Fs::bmap`).
    fn bmap(&self, _req: &Request, ino: INodeNo, blocksize: u32, idx: u64, reply: ReplyBmap) {
        self.transport.note();
        match self.fs.bmap(ino.0, idx, blocksize) {
            Ok(block) => reply.bmap(block),
            Err(e) => reply.error(errno(&e)),
        }
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
