//! The FUSE ceiling target: a file system in the daemon's memory, served by moafs's transport.
//!
//! [`Memfs`] keeps every inode, directory and data page in one table in memory: no engine, no
//! device, no journal. It is served by [`crate::serve`] with the same [`Transport`] as moafs —
//! the same threads, io_uring or /dev/fuse choice, polling, FUSE_INIT capabilities, limits,
//! TTLs (negative entries included), mount options and bdi tuning — and it declines the same
//! requests moafs declines (OPEN, CREATE and FLUSH with ENOSYS; moafs answers OPEN only when
//! it enforces inode flags), so the kernel sends it the requests it sends moafs for the same
//! work. What `moafs bench` measures on it is the most any
//! file system served this way can do on this machine: moafs's distance to it is the cost of
//! moafs's engine, its distance to ext4 the cost of FUSE.
//!
//! Data lives in 4 KiB pages (a missing page reads as zeros: sparse files cost nothing); the
//! capacity given at mount bounds the pages (ENOSPC beyond it). Inode numbers count up and are
//! never reused; an unlinked inode lives until the kernel forgets it. One mutex guards the
//! table: a request holds it only while it copies its data in or out.
//!
//! Not kept (a ceiling, not a product): anything across unmounts, permission checks of its own
//! (it is always mounted with `default_permissions`: the kernel checks the mode bits), default
//! ACLs (ACL xattrs are stored as plain values; the umask always applies), locks, ioctl,
//! SEEK_DATA/SEEK_HOLE (the kernel's generic lseek answers), fallocate modes other than
//! allocation and punching holes.
//!
//! The answers to each request are in `memfs/requests.rs`.

use crate::{uring, Adapter, MountConfig, Transport};
use fuser::{Errno, FileAttr, FileType, Generation, INodeNo, ReplyEntry, Request};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

mod requests;

/// FUSE's root inode number.
const ROOT: u64 = 1;
/// Data page size (also the block size statfs and `st_blocks` count in).
const PAGE: u64 = 4096;
/// Longest name (as ext4's and moafs's).
const NAME_MAX: usize = 255;
/// Largest file (as ext4's with 4 KiB blocks).
const MAX_FILE: u64 = 16 << 40;
/// Offsets of "." and ".." in a listing; entries' offsets (cookies) start above them.
const FIRST_COOKIE: u64 = 3;
/// Inodes statfs reports (there is no table to fill).
const TOTAL_INODES: u64 = 1 << 32;

/// A directory: names, and a cookie per name so that a listing resumes where it stopped
/// whatever was added or removed since.
#[derive(Debug, Default)]
struct Dir {
    parent: u64,
    names: HashMap<Vec<u8>, (u64, u64)>,
    /// cookie -> name, in the order the names came
    order: BTreeMap<u64, Vec<u8>>,
    next_cookie: u64,
}

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir {
            parent,
            next_cookie: FIRST_COOKIE,
            ..Dir::default()
        }
    }

    fn get(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).map(|&(_, ino)| ino)
    }

    fn insert(&mut self, name: &[u8], ino: u64) {
        if let Some(e) = self.names.get_mut(name) {
            e.1 = ino;
            return;
        }
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.names.insert(name.to_vec(), (cookie, ino));
        self.order.insert(cookie, name.to_vec());
    }

    fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let (cookie, ino) = self.names.remove(name)?;
        self.order.remove(&cookie);
        Some(ino)
    }
}

#[derive(Debug)]
enum Body {
    /// Page index -> page; a missing page is zeros.
    File(BTreeMap<u64, Box<[u8]>>),
    Dir(Dir),
    Symlink(Vec<u8>),
    /// Devices, FIFOs, sockets.
    Special,
}

#[derive(Debug)]
struct Node {
    kind: FileType,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
    rdev: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    crtime: SystemTime,
    /// The kernel's lookup count: the node lives while it or `nlink` is above zero.
    lookups: u64,
    body: Body,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Where the last read ended (the io_uring transport's stream probe).
    read_end: u64,
}

impl Node {
    fn new(kind: FileType, perm: u16, uid: u32, gid: u32, body: Body) -> Node {
        let now = now();
        Node {
            kind,
            perm,
            uid,
            gid,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            size: 0,
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            lookups: 0,
            body,
            xattrs: BTreeMap::new(),
            read_end: 0,
        }
    }

    fn pages(&self) -> u64 {
        match &self.body {
            Body::File(p) => p.len() as u64,
            _ => 0,
        }
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let size = match &self.body {
            Body::Symlink(t) => t.len() as u64,
            Body::Dir(d) => (d.names.len() as u64 + 2) * 32,
            _ => self.size,
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: self.pages() * (PAGE / 512),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: PAGE as u32,
            flags: 0,
        }
    }

    fn dir(&self) -> Result<&Dir, Errno> {
        match &self.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self) -> Result<&mut Dir, Errno> {
        match &mut self.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// Drops set-user-ID, and set-group-ID where group execution makes it one (a write, a
    /// chown, a truncation by an unprivileged caller: HANDLE_KILLPRIV_V2).
    fn kill_suid(&mut self) {
        let mut perm = u32::from(self.perm);
        perm &= !libc::S_ISUID;
        if perm & libc::S_IXGRP != 0 {
            perm &= !libc::S_ISGID;
        }
        self.perm = perm as u16;
    }
}

/// Everything the file system holds.
#[derive(Debug)]
struct Table {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Pages held by files, and the most there may be.
    pages: u64,
    max_pages: u64,
}

impl Table {
    /// An empty file system (its root owned by the daemon's user) of `capacity` bytes.
    fn new(capacity: u64) -> Table {
        let mut root = Node::new(
            FileType::Directory,
            0o755,
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
            Body::Dir(Dir::new(ROOT)),
        );
        root.lookups = 1;
        Table {
            nodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            pages: 0,
            max_pages: capacity / PAGE,
        }
    }

    fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    /// Looks `name` up in `parent` and counts the kernel's reference.
    fn lookup(&mut self, parent: u64, name: &[u8]) -> Result<FileAttr, Errno> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.node(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let n = self.node_mut(ino)?;
        n.lookups += 1;
        Ok(n.attr(ino))
    }

    /// Drops the node when neither a name nor the kernel refers to it any more.
    fn reap(&mut self, ino: u64) {
        let gone = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.nlink == 0 && n.lookups == 0 && ino != ROOT);
        if gone {
            if let Some(n) = self.nodes.remove(&ino) {
                self.pages -= n.pages();
            }
        }
    }

    /// Makes a new node named `name` in `parent`, counted once by the kernel.
    fn create(&mut self, parent: u64, name: &[u8], mut node: Node) -> Result<FileAttr, Errno> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let dir = self.node(parent)?;
        if dir.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if dir.dir()?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let is_dir = node.kind == FileType::Directory;
        // a directory inherits its parent's set-group-ID and group; a file its group
        if dir.perm & libc::S_ISGID as u16 != 0 {
            node.gid = dir.gid;
            if is_dir {
                node.perm |= libc::S_ISGID as u16;
            }
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        if let Body::Dir(d) = &mut node.body {
            d.parent = parent;
        }
        node.lookups = 1;
        let attr = node.attr(ino);
        self.nodes.insert(ino, node);
        let now = now();
        let p = self.node_mut(parent)?;
        p.dir_mut()?.insert(name, ino);
        if is_dir {
            p.nlink += 1;
        }
        p.mtime = now;
        p.ctime = now;
        Ok(attr)
    }

    /// Removes `name` from `parent` (a directory only when `dir`, and only when empty).
    fn remove(&mut self, parent: u64, name: &[u8], dir: bool) -> Result<(), Errno> {
        let ino = self.node(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let child = self.node(ino)?;
        match (dir, child.kind == FileType::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !child.dir()?.names.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        let now = now();
        let p = self.node_mut(parent)?;
        p.dir_mut()?.remove(name);
        if dir {
            p.nlink -= 1;
        }
        p.mtime = now;
        p.ctime = now;
        let c = self.node_mut(ino)?;
        c.nlink = if dir { 0 } else { c.nlink.saturating_sub(1) };
        c.ctime = now;
        self.reap(ino);
        Ok(())
    }

    fn rename(
        &mut self,
        from: (u64, &[u8]),
        to: (u64, &[u8]),
        noreplace: bool,
        exchange: bool,
    ) -> Result<(), Errno> {
        if to.1.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let src = self.node(from.0)?.dir()?.get(from.1).ok_or(Errno::ENOENT)?;
        let dst = self.node(to.0)?.dir()?.get(to.1);
        if dst == Some(src) {
            return Ok(());
        }
        let src_dir = self.node(src)?.kind == FileType::Directory;
        let now = now();
        if exchange {
            let dst = dst.ok_or(Errno::ENOENT)?;
            let dst_dir = self.node(dst)?.kind == FileType::Directory;
            self.node_mut(from.0)?.dir_mut()?.insert(from.1, dst);
            self.node_mut(to.0)?.dir_mut()?.insert(to.1, src);
            for (ino, is_dir, parent) in [(src, src_dir, to.0), (dst, dst_dir, from.0)] {
                let n = self.node_mut(ino)?;
                n.ctime = now;
                if is_dir {
                    n.dir_mut()?.parent = parent;
                }
            }
            if src_dir != dst_dir && from.0 != to.0 {
                let (gain, lose) = if src_dir {
                    (to.0, from.0)
                } else {
                    (from.0, to.0)
                };
                self.node_mut(gain)?.nlink += 1;
                self.node_mut(lose)?.nlink -= 1;
            }
        } else {
            if let Some(dst) = dst {
                if noreplace {
                    return Err(Errno::EEXIST);
                }
                let d = self.node(dst)?;
                match (src_dir, d.kind == FileType::Directory) {
                    (true, false) => return Err(Errno::ENOTDIR),
                    (false, true) => return Err(Errno::EISDIR),
                    (true, true) if !d.dir()?.names.is_empty() => return Err(Errno::ENOTEMPTY),
                    _ => {}
                }
                // the replaced name goes as by unlink/rmdir
                self.remove(to.0, to.1, src_dir)?;
            }
            self.node_mut(from.0)?.dir_mut()?.remove(from.1);
            self.node_mut(to.0)?.dir_mut()?.insert(to.1, src);
            let n = self.node_mut(src)?;
            n.ctime = now;
            if src_dir {
                n.dir_mut()?.parent = to.0;
                if from.0 != to.0 {
                    self.node_mut(from.0)?.nlink -= 1;
                    self.node_mut(to.0)?.nlink += 1;
                }
            }
        }
        for p in [from.0, to.0] {
            let p = self.node_mut(p)?;
            p.mtime = now;
            p.ctime = now;
        }
        Ok(())
    }

    /// Sets the size of a file: pages past it go, the tail of its last page is zeroed.
    fn truncate(&mut self, ino: u64, size: u64) -> Result<(), Errno> {
        if size > MAX_FILE {
            return Err(Errno::EFBIG);
        }
        let n = self.node_mut(ino)?;
        let Body::File(pages) = &mut n.body else {
            return Err(if n.kind == FileType::Directory {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            });
        };
        let before = pages.len() as u64;
        if size < n.size {
            let keep = size.div_ceil(PAGE);
            pages.split_off(&keep);
            if !size.is_multiple_of(PAGE) {
                if let Some(p) = pages.get_mut(&(size / PAGE)) {
                    p[(size % PAGE) as usize..].fill(0);
                }
            }
        }
        let after = pages.len() as u64;
        n.size = size;
        self.pages -= before - after;
        Ok(())
    }

    /// Makes sure pages `first..=last` of a file exist (zeros); ENOSPC when they do not fit.
    fn allocate(&mut self, ino: u64, first: u64, last: u64) -> Result<(), Errno> {
        let free = self.max_pages - self.pages;
        let n = self.node_mut(ino)?;
        let Body::File(pages) = &mut n.body else {
            return Err(Errno::EISDIR);
        };
        let missing = (last - first + 1) - pages.range(first..=last).count() as u64;
        if missing > free {
            return Err(Errno::ENOSPC);
        }
        for i in first..=last {
            pages
                .entry(i)
                .or_insert_with(|| vec![0; PAGE as usize].into_boxed_slice());
        }
        self.pages += missing;
        Ok(())
    }

    fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE)
            .ok_or(Errno::EFBIG)?;
        self.allocate(ino, offset / PAGE, (end - 1) / PAGE)?;
        let now = now();
        let n = self.node_mut(ino)?;
        let Body::File(pages) = &mut n.body else {
            return Err(Errno::EISDIR);
        };
        let mut at = offset;
        let mut src = data;
        while !src.is_empty() {
            let in_page = (at % PAGE) as usize;
            let k = src.len().min(PAGE as usize - in_page);
            let page = pages.get_mut(&(at / PAGE)).ok_or(Errno::EIO)?;
            page[in_page..in_page + k].copy_from_slice(&src[..k]);
            src = &src[k..];
            at += k as u64;
        }
        n.size = n.size.max(end);
        n.mtime = now;
        n.ctime = now;
        Ok(data.len() as u32)
    }

    /// Copies what the file holds at `offset` into `out`; returns how many bytes (short at the
    /// end of the file).
    fn read(&mut self, ino: u64, offset: u64, out: &mut [u8]) -> Result<usize, Errno> {
        let n = self.node_mut(ino)?;
        let Body::File(pages) = &n.body else {
            return Err(Errno::EISDIR);
        };
        let len = n.size.saturating_sub(offset).min(out.len() as u64) as usize;
        let mut done = 0;
        while done < len {
            let at = offset + done as u64;
            let in_page = (at % PAGE) as usize;
            let k = (len - done).min(PAGE as usize - in_page);
            match pages.get(&(at / PAGE)) {
                Some(p) => out[done..done + k].copy_from_slice(&p[in_page..in_page + k]),
                None => out[done..done + k].fill(0),
            }
            done += k;
        }
        n.read_end = offset + len as u64;
        Ok(len)
    }

    /// Removes the whole pages inside `offset..offset + len` and zeroes the parts of pages at
    /// its ends.
    fn punch(&mut self, ino: u64, offset: u64, len: u64) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        let Body::File(pages) = &mut n.body else {
            return Err(Errno::EISDIR);
        };
        let end = offset.saturating_add(len).min(n.size.max(offset));
        let mut at = offset;
        let mut freed = 0;
        while at < end {
            let in_page = (at % PAGE) as usize;
            let k = (end - at).min(PAGE - in_page as u64) as usize;
            if in_page == 0 && k == PAGE as usize {
                freed += u64::from(pages.remove(&(at / PAGE)).is_some());
            } else if let Some(p) = pages.get_mut(&(at / PAGE)) {
                p[in_page..in_page + k].fill(0);
            }
            at += k as u64;
        }
        self.pages -= freed;
        Ok(())
    }
}

/// The in-memory file system.
pub struct Memfs {
    transport: Transport,
    ttl: Duration,
    table: Arc<Mutex<Table>>,
    next_dir: AtomicU64,
}

/// The time the kernel would stamp now (its coarse clock), as moafs's engine stamps: a time
/// from a finer clock would be later than the kernel's own stamp at the next write, which then
/// dirties the inode's times and costs a SETATTR at close that moafs does not get.
fn now() -> SystemTime {
    crate::to_system_time(moafs_core::fs::Timespec::now())
}

impl Memfs {
    /// An empty file system that holds at most `capacity` bytes of data.
    pub fn new(capacity: u64, cfg: &MountConfig) -> Memfs {
        Memfs {
            transport: Transport::new(cfg),
            ttl: cfg.attr_ttl,
            table: Arc::new(Mutex::new(Table::new(capacity))),
            next_dir: AtomicU64::new(1),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The io_uring transport's probe: does a READ of (inode, offset) continue the last read
    /// of that file (within moafs's own distance, `FOLLOWS_BYTES`)? `None` when not known.
    pub fn stream_probe(&self) -> uring::StreamProbe {
        let table = self.table.clone();
        Arc::new(move |ino, offset| {
            let t = table.try_lock().ok()?;
            let end = t.nodes.get(&ino)?.read_end;
            Some(offset.abs_diff(end) <= moafs_core::fs::FOLLOWS_BYTES)
        })
    }

    fn entry(&self, reply: ReplyEntry, res: Result<FileAttr, Errno>) {
        match res {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        perm: u32,
        body: Body,
    ) -> Result<FileAttr, Errno> {
        let node = Node::new(kind, (perm & 0o7777) as u16, req.uid(), req.gid(), body);
        self.table().create(parent.0, name.as_bytes(), node)
    }
}

impl Adapter for Memfs {
    fn transport(&self) -> &Transport {
        &self.transport
    }
}

/// Mounts an empty in-memory file system of `capacity` bytes on `mountpoint` with
/// [`crate::serve`] and serves it until it is unmounted; everything in it is gone then.
pub fn mount_blocking(
    capacity: u64,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let mut cfg = cfg.clone();
    // memfs checks no permissions of its own
    cfg.default_permissions = true;
    crate::serve(
        |c| Ok(Memfs::new(capacity, c)),
        mountpoint,
        &cfg,
        |m: &Memfs| Some(m.stream_probe()),
        |_| Ok(()),
        ready,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pages: u64) -> Table {
        Table::new(pages * PAGE)
    }

    fn file(t: &mut Table, name: &[u8]) -> u64 {
        let n = Node::new(
            FileType::RegularFile,
            0o644,
            0,
            0,
            Body::File(BTreeMap::new()),
        );
        t.create(ROOT, name, n).unwrap().ino.0
    }

    #[test]
    fn data_round_trips_sparse_and_truncated() {
        let mut t = table(16);
        let f = file(&mut t, b"f");
        assert_eq!(t.write(f, 5000, b"hello").unwrap(), 5);
        assert_eq!(t.pages, 1, "only the page written is held");
        let mut out = vec![7u8; 6000];
        assert_eq!(t.read(f, 0, &mut out).unwrap(), 5005);
        assert!(out[..5000].iter().all(|&b| b == 0), "a hole reads as zeros");
        assert_eq!(&out[5000..5005], b"hello");
        t.truncate(f, 5002).unwrap();
        t.truncate(f, 9000).unwrap();
        let mut out = vec![7u8; 9000];
        assert_eq!(t.read(f, 0, &mut out).unwrap(), 9000);
        assert_eq!(
            &out[5000..5004],
            b"he\0\0",
            "a shrink zeroes the rest of its page"
        );
        t.truncate(f, 0).unwrap();
        assert_eq!(t.pages, 0);
    }

    #[test]
    fn capacity_is_enforced_and_freed_pages_return() {
        let mut t = table(4);
        let f = file(&mut t, b"f");
        assert_eq!(t.write(f, 0, &[1; 4 * 4096]).unwrap(), 4 * 4096);
        assert_eq!(t.write(f, 4 * 4096, b"x"), Err(Errno::ENOSPC));
        t.punch(f, 4096, 2 * 4096).unwrap();
        assert_eq!(t.pages, 2);
        t.remove(ROOT, b"f", false).unwrap();
        assert_eq!(t.pages, 2, "the kernel still holds the unlinked file");
        t.nodes.get_mut(&f).unwrap().lookups = 0;
        t.reap(f);
        assert_eq!(t.pages, 0);
        assert!(!t.nodes.contains_key(&f));
    }

    #[test]
    fn rename_replaces_exchanges_and_keeps_link_counts() {
        let mut t = table(4);
        let a = file(&mut t, b"a");
        let b = file(&mut t, b"b");
        let d = Node::new(FileType::Directory, 0o755, 0, 0, Body::Dir(Dir::new(ROOT)));
        let d = t.create(ROOT, b"d", d).unwrap().ino.0;
        assert_eq!(t.node(ROOT).unwrap().nlink, 3);
        assert_eq!(
            t.rename((ROOT, b"a"), (ROOT, b"b"), true, false),
            Err(Errno::EEXIST)
        );
        t.rename((ROOT, b"a"), (ROOT, b"b"), false, false).unwrap();
        assert_eq!(
            t.node(b).unwrap().nlink,
            0,
            "the replaced file lost its name"
        );
        assert_eq!(t.node(ROOT).unwrap().dir().unwrap().get(b"b"), Some(a));
        t.rename((ROOT, b"b"), (d, b"x"), false, false).unwrap();
        let e = Node::new(FileType::Directory, 0o755, 0, 0, Body::Dir(Dir::new(ROOT)));
        let e = t.create(ROOT, b"e", e).unwrap().ino.0;
        t.rename((ROOT, b"e"), (d, b"x"), false, true).unwrap();
        assert_eq!(t.node(d).unwrap().dir().unwrap().get(b"x"), Some(e));
        assert_eq!(t.node(e).unwrap().dir().unwrap().parent, d);
        assert_eq!(t.node(d).unwrap().nlink, 3, "d gained a subdirectory");
        assert_eq!(
            t.node(ROOT).unwrap().nlink,
            3,
            "the root traded a directory for a file"
        );
        assert_eq!(t.remove(ROOT, b"d", true), Err(Errno::ENOTEMPTY));
        assert!(t.node(d).unwrap().mtime > std::time::UNIX_EPOCH);
    }

    #[test]
    fn listing_cookies_survive_removals() {
        let mut t = table(4);
        for i in 0..10u8 {
            file(&mut t, &[b'a' + i]);
        }
        let d = t.node(ROOT).unwrap().dir().unwrap();
        let third = *d.order.keys().nth(2).unwrap();
        t.remove(ROOT, b"b", false).unwrap();
        t.remove(ROOT, b"d", false).unwrap();
        let d = t.node(ROOT).unwrap().dir().unwrap();
        let rest: Vec<_> = d.order.range(third + 1..).map(|(_, n)| n[0]).collect();
        assert_eq!(rest, b"efghij");
    }
}
