//! How [`Passthrough`] answers each FUSE request: the matching system call on the backing
//! file, and the helpers only those answers use (times for utimensat, the creator's umask,
//! full reads).

use super::{errno, io_errno, DirStream, Passthrough, ROOT};
use crate::reply::{empty, negative_attr, xattr_reply};
use crate::{from_system_time, uring};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, WriteFlags,
};
use nix::fcntl::AtFlags;
use nix::sys::stat::{Mode, SFlag};
use nix::sys::time::TimeSpec;
use std::cell::Cell;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

fn utime(t: Option<fuser::TimeOrNow>) -> TimeSpec {
    match t {
        None => TimeSpec::UTIME_OMIT,
        Some(fuser::TimeOrNow::Now) => TimeSpec::UTIME_NOW,
        Some(fuser::TimeOrNow::SpecificTime(st)) => {
            let t = from_system_time(st);
            TimeSpec::new(t.sec, i64::from(t.nsec))
        }
    }
}

thread_local! {
    /// This thread's umask once it has its own (`unshare(CLONE_FS)`); `None` before.
    static UMASK: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Makes `umask` the umask of the calling thread for the creation that follows, so that the
/// backing file system applies it, or a default ACL of the parent instead (the kernel passes
/// the mode unmasked, DONT_MASK). Each serving thread gets its own umask (`unshare(CLONE_FS)`)
/// the first time. Returns the mode to create with: `mode` itself, or, where the thread cannot
/// have its own umask, `mode` masked here (default ACLs then do not replace the umask).
fn with_umask(mode: u32, umask: u32) -> u32 {
    let umask = umask & 0o777;
    UMASK.with(|u| match u.get() {
        Some(cur) if cur == umask => mode,
        Some(_) => {
            nix::sys::stat::umask(Mode::from_bits_truncate(umask));
            u.set(Some(umask));
            mode
        }
        None => match nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS) {
            Ok(()) => {
                nix::sys::stat::umask(Mode::from_bits_truncate(umask));
                u.set(Some(umask));
                mode
            }
            Err(e) => {
                log::debug!("unshare(CLONE_FS): {e}; masking modes here");
                mode & !umask
            }
        },
    })
}

/// Reads at `offset` until `out` is full or the file ends; the bytes read.
fn read_full(f: &File, out: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match f.read_at(&mut out[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Filesystem for Passthrough {
    declined_requests!();

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.transport.negotiate(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.transport.note();
        let res = self
            .inode(parent)
            .and_then(|p| self.lookup_at(&p, parent.0 == ROOT, name));
        match res {
            Err(e) if e == Errno::ENOENT && !self.ttl.is_zero() => {
                // a negative entry the kernel may cache for the TTL, as moafs answers
                reply.entry(&self.ttl, &negative_attr(), Generation(0));
            }
            res => self.entry(reply, res),
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.transport.forget_arrived(req);
        self.forget_one(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.transport.note();
        match self.inode(ino).and_then(|i| self.stat(&i, ino.0)) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
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
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.transport.note();
        let res = (|| {
            let inode = self.inode(ino)?;
            let path = inode.proc_path();
            if let Some(m) = mode {
                nix::sys::stat::fchmodat(
                    None,
                    path.as_str(),
                    Mode::from_bits_truncate(m & 0o7777),
                    nix::sys::stat::FchmodatFlags::FollowSymlink,
                )
                .map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                // the backing file system drops set-user-ID/-group-ID as chown does
                nix::unistd::fchownat(
                    Some(inode.fd.as_raw_fd()),
                    "",
                    uid.map(nix::unistd::Uid::from_raw),
                    gid.map(nix::unistd::Gid::from_raw),
                    AtFlags::AT_EMPTY_PATH | AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(errno)?;
            }
            if let Some(len) = size {
                inode
                    .io()
                    .and_then(|f| f.set_len(len))
                    .map_err(|e| io_errno(&e))?;
                if req.uid() != 0 {
                    self.kill_suid(ino, &inode)?;
                }
            }
            if atime.is_some() || mtime.is_some() {
                nix::sys::stat::utimensat(
                    None,
                    path.as_str(),
                    &utime(atime),
                    &utime(mtime),
                    nix::sys::stat::UtimensatFlags::FollowSymlink,
                )
                .map_err(errno)?;
            }
            self.stat(&inode, ino.0)
        })();
        match res {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.transport.note();
        let res = self
            .inode(ino)
            .and_then(|i| nix::fcntl::readlinkat(Some(i.fd.as_raw_fd()), "").map_err(errno));
        match res {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
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
        let res = self.inode(parent).and_then(|p| {
            let m = with_umask(mode & 0o7777, umask);
            nix::sys::stat::mknodat(
                Some(p.fd.as_raw_fd()),
                name,
                SFlag::from_bits_truncate(mode & libc::S_IFMT),
                Mode::from_bits_truncate(m),
                libc::dev_t::from(rdev),
            )
            .map_err(errno)?;
            self.give_to_caller(req, &p, name)?;
            self.lookup_at(&p, parent.0 == ROOT, name)
        });
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
        let res = self.inode(parent).and_then(|p| {
            let m = with_umask(mode & 0o7777, umask);
            nix::sys::stat::mkdirat(Some(p.fd.as_raw_fd()), name, Mode::from_bits_truncate(m))
                .map_err(errno)?;
            self.give_to_caller(req, &p, name)?;
            self.lookup_at(&p, parent.0 == ROOT, name)
        });
        self.entry(reply, res);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        let res = self.inode(parent).and_then(|p| {
            nix::unistd::unlinkat(
                Some(p.fd.as_raw_fd()),
                name,
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )
            .map_err(errno)
        });
        empty(reply, res);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        let res = self.inode(parent).and_then(|p| {
            nix::unistd::unlinkat(
                Some(p.fd.as_raw_fd()),
                name,
                nix::unistd::UnlinkatFlags::RemoveDir,
            )
            .map_err(errno)
        });
        empty(reply, res);
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
        let res = self.inode(parent).and_then(|p| {
            nix::unistd::symlinkat(target, Some(p.fd.as_raw_fd()), link_name).map_err(errno)?;
            self.give_to_caller(req, &p, link_name)?;
            self.lookup_at(&p, parent.0 == ROOT, link_name)
        });
        self.entry(reply, res);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        let res = (|| {
            let flags = nix::fcntl::RenameFlags::from_bits(flags.bits()).ok_or(Errno::EINVAL)?;
            let p = self.inode(parent)?;
            let np = self.inode(newparent)?;
            nix::fcntl::renameat2(
                Some(p.fd.as_raw_fd()),
                name,
                Some(np.fd.as_raw_fd()),
                newname,
                flags,
            )
            .map_err(errno)
        })();
        empty(reply, res);
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
        let res = (|| {
            let i = self.inode(ino)?;
            let np = self.inode(newparent)?;
            // through /proc: needs no CAP_DAC_READ_SEARCH, unlike AT_EMPTY_PATH
            let path = i.proc_path();
            nix::unistd::linkat(
                None,
                Path::new(&path),
                Some(np.fd.as_raw_fd()),
                Path::new(newname),
                AtFlags::AT_SYMLINK_FOLLOW,
            )
            .map_err(errno)?;
            self.lookup_at(&np, newparent.0 == ROOT, newname)
        })();
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
        let (inode, file) = match self.inode(ino).and_then(|i| {
            let f = i.io().map_err(|e| io_errno(&e))?;
            Ok((i, f))
        }) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let done = |n: usize| inode.read_end.store(offset + n as u64, Ordering::Relaxed);
        // Over io_uring the data goes straight into the ring entry's payload, as moafs's does.
        let mut placed = 0;
        match uring::read_direct(size as usize, |out| {
            let n = read_full(&file, out, offset)?;
            placed = n;
            Ok::<usize, io::Error>(n)
        }) {
            Some(Ok(())) => {
                done(placed);
                return reply.data(&[]);
            }
            Some(Err(e)) => return reply.error(io_errno(&e)),
            None => {}
        }
        let mut buf = vec![0u8; size as usize];
        match read_full(&file, &mut buf, offset) {
            Ok(n) => {
                done(n);
                reply.data(&buf[..n])
            }
            Err(e) => reply.error(io_errno(&e)),
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
        let res = (|| {
            let inode = self.inode(ino)?;
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) && req.uid() != 0 {
                self.kill_suid(ino, &inode)?;
            }
            let f = inode.io().map_err(|e| io_errno(&e))?;
            f.write_all_at(data, offset).map_err(|e| io_errno(&e))?;
            Ok(data.len() as u32)
        })();
        match res {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        let res = self.inode(ino).and_then(|i| {
            let f = i.io().map_err(|e| io_errno(&e))?;
            if datasync {
                f.sync_data()
            } else {
                f.sync_all()
            }
            .map_err(|e| io_errno(&e))
        });
        empty(reply, res);
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.transport.note();
        let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
        self.dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(Mutex::new(DirStream::default())));
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
        let s = match self.stream(ino, fh, offset) {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        let g = s.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (name, n, kind)) in g.entries.iter().enumerate().skip(start) {
            if reply.add(INodeNo(*n), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
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
        let (s, dir) = match self
            .stream(ino, fh, offset)
            .and_then(|s| Ok((s, self.inode(ino)?)))
        {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let dir_attr = match self.stat(&dir, ino.0) {
            Ok(a) => a,
            Err(e) => return reply.error(e),
        };
        let g = s.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (name, n, _)) in g.entries.iter().enumerate().skip(start) {
            let dot = name == "." || name == "..";
            // "." and ".." take no lookup reference (the kernel skips them); real entries do
            let attr = if dot {
                FileAttr {
                    ino: INodeNo(*n),
                    ..dir_attr
                }
            } else {
                match self.lookup_at(&dir, ino.0 == ROOT, name) {
                    Ok(a) => a,
                    Err(_) => continue, // removed since the listing
                }
            };
            if reply.add(
                attr.ino,
                i as u64 + 1,
                name,
                &self.ttl,
                &attr,
                Generation(0),
            ) {
                if !dot {
                    self.forget_one(attr.ino.0, 1);
                }
                break;
            }
        }
        reply.ok();
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
        self.dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        // the directory's own descriptor (read-only), fsynced as a file's
        self.fsync(req, ino, fh, datasync, reply);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.transport.note();
        let res = self
            .inode(ino)
            .or_else(|_| self.inode(INodeNo(ROOT)))
            .and_then(|i| nix::sys::statvfs::fstatvfs(i.fd.as_fd()).map_err(errno));
        match res {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                s.block_size() as u32,
                s.name_max() as u32,
                s.fragment_size() as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        let res = self.inode(ino).and_then(|i| {
            let path = i.proc_path();
            if flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
                let exists = xattr::get_deref(&path, name)
                    .map_err(|e| io_errno(&e))?
                    .is_some();
                if exists && flags & libc::XATTR_CREATE != 0 {
                    return Err(Errno::EEXIST);
                }
                if !exists && flags & libc::XATTR_REPLACE != 0 {
                    return Err(Errno::NO_XATTR);
                }
            }
            xattr::set_deref(&path, name, value).map_err(|e| io_errno(&e))
        });
        empty(reply, res);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.transport.note();
        let res = self.inode(ino).and_then(|i| {
            xattr::get_deref(i.proc_path(), name)
                .map_err(|e| io_errno(&e))?
                .ok_or(Errno::NO_XATTR)
        });
        match res {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.transport.note();
        let res = self.inode(ino).and_then(|i| {
            let mut buf = Vec::new();
            for n in xattr::list_deref(i.proc_path()).map_err(|e| io_errno(&e))? {
                buf.extend_from_slice(n.as_bytes());
                buf.push(0);
            }
            Ok(buf)
        });
        match res {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        let res = self
            .inode(ino)
            .and_then(|i| xattr::remove_deref(i.proc_path(), name).map_err(|e| io_errno(&e)));
        empty(reply, res);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.transport.note();
        // Permissions are the kernel's (default_permissions); the file must exist.
        empty(reply, self.inode(ino).map(drop));
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
        let res = (|| {
            let inode = self.inode(ino)?;
            if req.uid() != 0 {
                self.kill_suid(ino, &inode)?;
            }
            let f = inode.io().map_err(|e| io_errno(&e))?;
            let off = libc::off_t::try_from(offset).map_err(|_| Errno::EFBIG)?;
            let len = libc::off_t::try_from(length).map_err(|_| Errno::EFBIG)?;
            nix::fcntl::fallocate(
                f.as_raw_fd(),
                nix::fcntl::FallocateFlags::from_bits_truncate(mode),
                off,
                len,
            )
            .map_err(errno)
        })();
        empty(reply, res);
    }
}
