//! How [`Memfs`] answers each FUSE request: on its table, under its one mutex, and the helpers
//! only those answers use (times to set, the kind of a node to make).

use super::{now, Body, Dir, Memfs, Node, FIRST_COOKIE, MAX_FILE, NAME_MAX, PAGE, TOTAL_INODES};
use crate::reply::{empty, negative_attr, xattr_reply};
use crate::uring;
use fuser::{
    AccessFlags, Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, WriteFlags,
};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

fn time_or_now(t: fuser::TimeOrNow) -> SystemTime {
    match t {
        fuser::TimeOrNow::Now => now(),
        fuser::TimeOrNow::SpecificTime(t) => t,
    }
}

fn kind_of(mode: u32) -> Option<FileType> {
    Some(match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => FileType::RegularFile,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => return None,
    })
}

impl Filesystem for Memfs {
    declined_requests!();

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.transport.negotiate(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.transport.note();
        match self.table().lookup(parent.0, name.as_bytes()) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(Errno::ENOENT) if !self.ttl.is_zero() => {
                reply.entry(&self.ttl, &negative_attr(), Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.transport.forget_arrived(req);
        let mut t = self.table();
        if let Some(n) = t.nodes.get_mut(&ino.0) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        t.reap(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.transport.note();
        match self.table().node(ino.0) {
            Ok(n) => reply.attr(&self.ttl, &n.attr(ino.0)),
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
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.transport.note();
        let mut t = self.table();
        let res = (|| {
            if let Some(size) = size {
                t.truncate(ino.0, size)?;
            }
            let now = now();
            let n = t.node_mut(ino.0)?;
            if let Some(m) = mode {
                n.perm = (m & 0o7777) as u16;
            }
            if let Some(u) = uid {
                n.uid = u;
            }
            if let Some(g) = gid {
                n.gid = g;
            }
            if uid.is_some() || gid.is_some() || (size.is_some() && req.uid() != 0) {
                n.kill_suid();
            }
            if let Some(a) = atime {
                n.atime = time_or_now(a);
            }
            if let Some(m) = mtime {
                n.mtime = time_or_now(m);
            } else if size.is_some() {
                n.mtime = now;
            }
            n.ctime = ctime.unwrap_or(now);
            Ok(n.attr(ino.0))
        })();
        match res {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.transport.note();
        match self.table().node(ino.0).map(|n| &n.body) {
            Ok(Body::Symlink(t)) => reply.data(t),
            Ok(_) => reply.error(Errno::EINVAL),
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
        let Some(kind) = kind_of(mode) else {
            return reply.error(Errno::EINVAL);
        };
        let body = if kind == FileType::RegularFile {
            Body::File(BTreeMap::new())
        } else {
            Body::Special
        };
        let mut node = Node::new(
            kind,
            (mode & !umask & 0o7777) as u16,
            req.uid(),
            req.gid(),
            body,
        );
        node.rdev = rdev;
        let res = self.table().create(parent.0, name.as_bytes(), node);
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
        let body = Body::Dir(Dir::new(parent.0));
        let res = self.make(req, parent, name, FileType::Directory, mode & !umask, body);
        self.entry(reply, res);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        empty(reply, self.table().remove(parent.0, name.as_bytes(), false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        empty(reply, self.table().remove(parent.0, name.as_bytes(), true));
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
        let body = Body::Symlink(target.as_os_str().as_bytes().to_vec());
        let res = self.make(req, parent, link_name, FileType::Symlink, 0o777, body);
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
        let bits = flags.bits();
        if bits & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0
            || bits == libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE
        {
            return reply.error(Errno::EINVAL);
        }
        let res = self.table().rename(
            (parent.0, name.as_bytes()),
            (newparent.0, newname.as_bytes()),
            bits & libc::RENAME_NOREPLACE != 0,
            bits & libc::RENAME_EXCHANGE != 0,
        );
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
        let name = newname.as_bytes();
        let res = (|| {
            let mut t = self.table();
            if name.len() > NAME_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            if t.node(ino.0)?.kind == FileType::Directory {
                return Err(Errno::EPERM);
            }
            if t.node(newparent.0)?.dir()?.get(name).is_some() {
                return Err(Errno::EEXIST);
            }
            let now = now();
            let p = t.node_mut(newparent.0)?;
            p.dir_mut()?.insert(name, ino.0);
            p.mtime = now;
            p.ctime = now;
            let n = t.node_mut(ino.0)?;
            n.nlink += 1;
            n.lookups += 1;
            n.ctime = now;
            Ok(n.attr(ino.0))
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
        // Over io_uring straight into the ring entry's payload, as moafs.
        match uring::read_direct(size as usize, |out| self.table().read(ino.0, offset, out)) {
            Some(Ok(())) => return reply.data(&[]),
            Some(Err(e)) => return reply.error(e),
            None => {}
        }
        let mut buf = vec![0; size as usize];
        match self.table().read(ino.0, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(e),
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
        let mut t = self.table();
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) && req.uid() != 0 {
            if let Ok(n) = t.node_mut(ino.0) {
                n.kill_suid();
            }
        }
        match t.write(ino.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
        // Memory is as durable as this file system gets.
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.transport.note();
        let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.transport.note();
        let t = self.table();
        let dir = match t.node(ino.0).and_then(Node::dir) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        if offset < 1 && reply.add(ino, 1, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset < 2 && reply.add(INodeNo(dir.parent), 2, FileType::Directory, "..") {
            return reply.ok();
        }
        for (&cookie, name) in dir.order.range(offset.max(FIRST_COOKIE - 1) + 1..) {
            let Some(child) = dir.get(name) else { continue };
            let kind = t
                .nodes
                .get(&child)
                .map_or(FileType::RegularFile, |n| n.kind);
            if reply.add(INodeNo(child), cookie, kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.transport.note();
        let mut t = self.table();
        let (parent, names) = match t.node(ino.0).and_then(Node::dir) {
            Ok(d) => (
                d.parent,
                d.order
                    .range(offset.max(FIRST_COOKIE - 1) + 1..)
                    .map(|(&c, n)| (c, n.clone()))
                    .take(256)
                    .collect::<Vec<_>>(),
            ),
            Err(e) => return reply.error(e),
        };
        // "." and ".." take no lookup reference in the kernel; real entries do
        for (cookie, name, of) in [(1, ".", ino.0), (2, "..", parent)] {
            if offset < cookie {
                let Ok(n) = t.node(of) else { continue };
                let attr = n.attr(of);
                if reply.add(attr.ino, cookie, name, &self.ttl, &attr, Generation(0)) {
                    return reply.ok();
                }
            }
        }
        for (cookie, name) in names {
            let Ok(attr) = t.lookup(ino.0, &name) else {
                continue;
            };
            if reply.add(
                attr.ino,
                cookie,
                OsStr::from_bytes(&name),
                &self.ttl,
                &attr,
                Generation(0),
            ) {
                if let Ok(n) = t.node_mut(attr.ino.0) {
                    n.lookups -= 1;
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
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.transport.note();
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
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.transport.note();
        let t = self.table();
        let free = t.max_pages - t.pages;
        let files = t.nodes.len() as u64;
        reply.statfs(
            t.max_pages,
            free,
            free,
            TOTAL_INODES,
            TOTAL_INODES.saturating_sub(files),
            PAGE as u32,
            NAME_MAX as u32,
            PAGE as u32,
        );
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
        let mut t = self.table();
        let res = t.node_mut(ino.0).and_then(|n| {
            let name = name.as_bytes();
            let exists = n.xattrs.contains_key(name);
            if flags & libc::XATTR_CREATE != 0 && exists {
                return Err(Errno::EEXIST);
            }
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return Err(Errno::ENODATA);
            }
            n.xattrs.insert(name.to_vec(), value.to_vec());
            n.ctime = now();
            Ok(())
        });
        empty(reply, res);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.transport.note();
        let t = self.table();
        match t.node(ino.0).map(|n| n.xattrs.get(name.as_bytes())) {
            Ok(Some(v)) => xattr_reply(reply, v, size),
            Ok(None) => reply.error(Errno::ENODATA),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.transport.note();
        let t = self.table();
        match t.node(ino.0) {
            Ok(n) => {
                let mut buf = Vec::new();
                for k in n.xattrs.keys() {
                    buf.extend_from_slice(k);
                    buf.push(0);
                }
                xattr_reply(reply, &buf, size);
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.transport.note();
        let mut t = self.table();
        let res = t.node_mut(ino.0).and_then(|n| {
            n.xattrs.remove(name.as_bytes()).ok_or(Errno::ENODATA)?;
            n.ctime = now();
            Ok(())
        });
        empty(reply, res);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.transport.note();
        // default_permissions: the kernel has checked the mode bits already
        empty(reply, self.table().node(ino.0).map(|_| ()));
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
        let mut t = self.table();
        let res = (|| {
            let end = offset
                .checked_add(length)
                .filter(|&e| e <= MAX_FILE && length > 0)
                .ok_or(Errno::EINVAL)?;
            if req.uid() != 0 {
                t.node_mut(ino.0)?.kill_suid();
            }
            const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            match mode {
                0 | libc::FALLOC_FL_KEEP_SIZE => {
                    t.allocate(ino.0, offset / PAGE, (end - 1) / PAGE)?;
                    let n = t.node_mut(ino.0)?;
                    if mode == 0 && end > n.size {
                        n.size = end;
                    }
                }
                PUNCH => t.punch(ino.0, offset, length)?,
                _ => return Err(Errno::EOPNOTSUPP),
            }
            let now = now();
            let n = t.node_mut(ino.0)?;
            n.mtime = now;
            n.ctime = now;
            Ok(())
        })();
        empty(reply, res);
    }
}
