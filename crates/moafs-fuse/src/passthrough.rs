//! The FUSE floor target: a minimal pass-through file system over a directory.
//!
//! [`Passthrough`] answers every request with the matching system call on a backing directory
//! and keeps no data of its own. It is served by [`crate::serve`] with the same [`Transport`]
//! as moafs — the same threads, io_uring or /dev/fuse choice, polling, FUSE_INIT capabilities,
//! limits, TTLs, mount options and bdi tuning — and it answers the requests moafs declines
//! the same way (OPEN, CREATE and FLUSH with ENOSYS; moafs answers OPEN only when it enforces
//! inode flags), so the kernel sends it the same requests for the same work. What `moafs bench` measures on it is the cost of the FUSE round trips
//! moafs makes, without moafs's engine: the floor under moafs on that transport.
//!
//! Inodes: each inode the kernel knows holds an `O_PATH` descriptor of its backing file
//! (lookup count as the kernel's; closed at the last FORGET), and, once read or written, a
//! read-write descriptor (no file handles: the kernel does not OPEN). Inode numbers are the
//! backing ones, with the backing root and backing inode 1 swapped (FUSE's root is 1); a file
//! on another file system below the source gets a number from a counter. Directories get a
//! handle at OPENDIR, under which the listing is taken when it starts (offset 0).
//!
//! The answers to each request are in `passthrough/requests.rs`.
//!
//! Not supported (not needed by the benchmarks): permission checks of its own (the kernel's
//! `default_permissions` does them), O_DIRECT to the backing file, locks, ioctl, lseek
//! SEEK_DATA/SEEK_HOLE (the kernel's generic one answers), copy_file_range (the kernel
//! copies), times of symbolic links, inode generations (always 0).

use crate::{to_system_time, uring, Adapter, MountConfig, Transport};
use fuser::{Errno, FileAttr, FileHandle, FileType, Generation, INodeNo, ReplyEntry, Request};
use moafs_core::fs::Timespec;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod requests;

/// FUSE's root inode number.
const ROOT: u64 = 1;
/// Numbers for files on other file systems below the source start here.
const FOREIGN_BASE: u64 = 1 << 63;

/// One inode the kernel knows.
#[derive(Debug)]
struct Inode {
    /// `O_PATH` descriptor of the backing file.
    fd: OwnedFd,
    /// Backing (device, inode number): the table's key.
    key: (u64, u64),
    /// A descriptor for reading and writing, opened at the first need (read-only when the
    /// file cannot be opened for writing; directories too).
    io: Mutex<Option<Arc<File>>>,
    /// Where the last read ended (the io_uring transport's stream probe, as moafs's).
    read_end: AtomicU64,
}

impl Inode {
    /// `/proc/self/fd/N` of the `O_PATH` descriptor: reopens the very inode with other flags.
    fn proc_path(&self) -> String {
        format!("/proc/self/fd/{}", self.fd.as_raw_fd())
    }

    fn io(&self) -> io::Result<Arc<File>> {
        let mut g = self.io.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = &*g {
            return Ok(f.clone());
        }
        let path = self.proc_path();
        let f = match File::options().read(true).write(true).open(&path) {
            Ok(f) => f,
            // a directory, a read-only file system, a running executable
            Err(_) => File::open(&path)?,
        };
        let f = Arc::new(f);
        *g = Some(f.clone());
        Ok(f)
    }
}

#[derive(Debug, Default)]
struct Table {
    /// FUSE inode number -> inode and the kernel's lookup count.
    by_ino: HashMap<u64, (Arc<Inode>, u64)>,
    /// Backing (device, inode) -> FUSE inode number.
    by_key: HashMap<(u64, u64), u64>,
    next_foreign: u64,
}

/// A directory listing: taken when the listing starts (offset 0), as moafs fixes its end.
#[derive(Debug, Default)]
struct DirStream {
    entries: Vec<(OsString, u64, FileType)>,
}

/// The pass-through file system over a backing directory.
pub struct Passthrough {
    transport: Transport,
    ttl: Duration,
    table: Arc<Mutex<Table>>,
    /// Backing (device, inode) of the source directory (FUSE inode 1).
    root_key: (u64, u64),
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    next_dir: AtomicU64,
}

fn errno(e: nix::Error) -> Errno {
    Errno::from_i32(e as i32)
}

fn io_errno(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// `openat(2)` returning an owned descriptor.
fn openat(dir: &OwnedFd, name: &OsStr, flags: OFlag) -> nix::Result<OwnedFd> {
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name,
        flags | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: `openat` just returned this descriptor; nothing else owns or closes it, so the
    // `OwnedFd` is its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    to_system_time(Timespec {
        sec,
        nsec: nsec.clamp(0, 999_999_999) as u32,
    })
}

fn attr_of(ino: u64, st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind_of(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// Raises the soft limit of open descriptors (each known inode holds one or two).
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let want = hard.max(1 << 20);
    if setrlimit(Resource::RLIMIT_NOFILE, want, want).is_err() && soft < hard {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

impl Passthrough {
    /// A pass-through file system over the directory `source`.
    pub fn new(source: &Path, cfg: &MountConfig) -> io::Result<Passthrough> {
        raise_fd_limit();
        let fd: OwnedFd = File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(source)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", source.display())))?
            .into();
        let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(io::Error::from)?;
        let root_key = (st.st_dev, st.st_ino);
        let mut table = Table {
            next_foreign: FOREIGN_BASE,
            ..Table::default()
        };
        let root = Inode {
            fd,
            key: root_key,
            io: Mutex::new(None),
            read_end: AtomicU64::new(0),
        };
        table.by_ino.insert(ROOT, (Arc::new(root), 1));
        table.by_key.insert(root_key, ROOT);
        Ok(Passthrough {
            transport: Transport::new(cfg),
            ttl: cfg.attr_ttl,
            table: Arc::new(Mutex::new(table)),
            root_key,
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
        })
    }

    /// The io_uring transport's probe: does a READ of (inode, offset) continue the last read
    /// of that file (within moafs's own distance, `FOLLOWS_BYTES`)? `None` when not known.
    pub fn stream_probe(&self) -> uring::StreamProbe {
        let table = self.table.clone();
        Arc::new(move |ino, offset| {
            let t = table.try_lock().ok()?;
            let end = t.by_ino.get(&ino)?.0.read_end.load(Ordering::Relaxed);
            Some(offset.abs_diff(end) <= moafs_core::fs::FOLLOWS_BYTES)
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn inode(&self, ino: INodeNo) -> Result<Arc<Inode>, Errno> {
        self.table()
            .by_ino
            .get(&ino.0)
            .map(|(i, _)| i.clone())
            .ok_or(Errno::ESTALE)
    }

    /// The FUSE number of a backing file on the source's file system (`None`: on another).
    fn number(&self, key: (u64, u64)) -> Option<u64> {
        if key == self.root_key {
            Some(ROOT)
        } else if key.0 != self.root_key.0 {
            None
        } else if key.1 == ROOT {
            Some(self.root_key.1)
        } else {
            Some(key.1)
        }
    }

    /// The number shown for a directory entry (readdir), without a lookup.
    fn shown_number(&self, dev: u64, ino: u64) -> u64 {
        self.number((dev, ino))
            .or_else(|| self.table().by_key.get(&(dev, ino)).copied())
            .unwrap_or(ino)
    }

    /// Takes a lookup reference on the backing file `fd` (stat `st`) and returns its number.
    fn remember(&self, fd: OwnedFd, st: &libc::stat) -> u64 {
        let key = (st.st_dev, st.st_ino);
        let mut t = self.table();
        if let Some(&ino) = t.by_key.get(&key) {
            if let Some(e) = t.by_ino.get_mut(&ino) {
                e.1 += 1;
                return ino;
            }
        }
        let ino = match self.number(key) {
            Some(n) => n,
            None => {
                t.next_foreign += 1;
                t.next_foreign
            }
        };
        let inode = Inode {
            fd,
            key,
            io: Mutex::new(None),
            read_end: AtomicU64::new(0),
        };
        t.by_ino.insert(ino, (Arc::new(inode), 1));
        t.by_key.insert(key, ino);
        ino
    }

    /// LOOKUP of `name` in `parent`: a lookup reference and the attributes.
    fn lookup_at(&self, parent: &Inode, is_root: bool, name: &OsStr) -> Result<FileAttr, Errno> {
        // ".." of the root stays inside the source
        let name = if is_root && name.as_bytes() == b".." {
            OsStr::new(".")
        } else {
            name
        };
        let fd = openat(&parent.fd, name, OFlag::O_PATH | OFlag::O_NOFOLLOW).map_err(errno)?;
        let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(errno)?;
        let ino = self.remember(fd, &st);
        Ok(attr_of(ino, &st))
    }

    fn forget_one(&self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let mut t = self.table();
        let gone = match t.by_ino.get_mut(&ino) {
            Some(e) => {
                e.1 = e.1.saturating_sub(n);
                e.1 == 0
            }
            None => false,
        };
        if gone {
            if let Some((inode, _)) = t.by_ino.remove(&ino) {
                t.by_key.remove(&inode.key);
            }
        }
    }

    fn stat(&self, inode: &Inode, ino: u64) -> Result<FileAttr, Errno> {
        let st = nix::sys::stat::fstat(inode.fd.as_raw_fd()).map_err(errno)?;
        Ok(attr_of(ino, &st))
    }

    fn entry(&self, reply: ReplyEntry, res: Result<FileAttr, Errno>) {
        match res {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Gives a file just made (as root) in `parent` to the caller of `req`; the group stays
    /// the parent's when the parent is set-group-ID.
    fn give_to_caller(&self, req: &Request, parent: &Inode, name: &OsStr) -> Result<(), Errno> {
        if req.uid() == 0 && req.gid() == 0 {
            return Ok(());
        }
        let pst = nix::sys::stat::fstat(parent.fd.as_raw_fd()).map_err(errno)?;
        let gid = (pst.st_mode & libc::S_ISGID == 0).then(|| nix::unistd::Gid::from_raw(req.gid()));
        let before = nix::sys::stat::fstatat(
            Some(parent.fd.as_raw_fd()),
            name,
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno)?;
        nix::unistd::fchownat(
            Some(parent.fd.as_raw_fd()),
            name,
            Some(nix::unistd::Uid::from_raw(req.uid())),
            gid,
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno)?;
        // chown drops set-user-ID and set-group-ID of a non-directory: the creator asked for them
        let special = before.st_mode & (libc::S_ISUID | libc::S_ISGID);
        if special != 0 && before.st_mode & libc::S_IFMT == libc::S_IFREG {
            nix::sys::stat::fchmodat(
                Some(parent.fd.as_raw_fd()),
                name,
                Mode::from_bits_truncate(before.st_mode & 0o7777),
                nix::sys::stat::FchmodatFlags::FollowSymlink,
            )
            .map_err(errno)?;
        }
        Ok(())
    }

    /// Drops set-user-ID (and set-group-ID with group execute) of a file written, truncated
    /// or allocated by an unprivileged caller (HANDLE_KILLPRIV_V2 leaves this to the file
    /// system; the backing one does not do it for this daemon, which runs as root).
    fn kill_suid(&self, ino: INodeNo, inode: &Inode) -> Result<(), Errno> {
        let st = nix::sys::stat::fstat(inode.fd.as_raw_fd()).map_err(errno)?;
        let mut kill = st.st_mode & libc::S_ISUID;
        if st.st_mode & libc::S_ISGID != 0 && st.st_mode & libc::S_IXGRP != 0 {
            kill |= libc::S_ISGID;
        }
        if kill == 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(());
        }
        nix::sys::stat::fchmodat(
            None,
            inode.proc_path().as_str(),
            Mode::from_bits_truncate(st.st_mode & 0o7777 & !kill),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(errno)?;
        if let Some(n) = self.transport.notifier() {
            // attributes only (offset < 0); the reply of a WRITE carries none
            if let Err(e) = n.inval_inode(ino, -1, 0) {
                log::debug!("attribute invalidation of {}: {e}", ino.0);
            }
        }
        Ok(())
    }

    /// The listing of directory `inode` (".", "..", then the backing entries).
    fn list(&self, inode: &Inode, ino: u64) -> Result<DirStream, Errno> {
        let st = nix::sys::stat::fstat(inode.fd.as_raw_fd()).map_err(errno)?;
        let parent = if ino == ROOT {
            ROOT
        } else {
            nix::sys::stat::fstatat(
                Some(inode.fd.as_raw_fd()),
                "..",
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map(|p| self.shown_number(p.st_dev, p.st_ino))
            .unwrap_or(ROOT)
        };
        let mut entries = vec![
            (OsString::from("."), ino, FileType::Directory),
            (OsString::from(".."), parent, FileType::Directory),
        ];
        for e in std::fs::read_dir(inode.proc_path()).map_err(|e| io_errno(&e))? {
            let e = e.map_err(|e| io_errno(&e))?;
            let kind = match e.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory,
                Ok(t) if t.is_symlink() => FileType::Symlink,
                Ok(t) => {
                    use std::os::unix::fs::FileTypeExt;
                    if t.is_fifo() {
                        FileType::NamedPipe
                    } else if t.is_socket() {
                        FileType::Socket
                    } else if t.is_char_device() {
                        FileType::CharDevice
                    } else if t.is_block_device() {
                        FileType::BlockDevice
                    } else {
                        FileType::RegularFile
                    }
                }
                Err(_) => continue, // removed meanwhile
            };
            entries.push((e.file_name(), self.shown_number(st.st_dev, e.ino()), kind));
        }
        Ok(DirStream { entries })
    }

    /// The stream of handle `fh`, listed afresh when a listing starts (offset 0).
    fn stream(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<Arc<Mutex<DirStream>>, Errno> {
        let s = self
            .dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
        if offset == 0 || g.entries.is_empty() {
            let inode = self.inode(ino)?;
            *g = self.list(&inode, ino.0)?;
        }
        drop(g);
        Ok(s)
    }
}

impl Adapter for Passthrough {
    fn transport(&self) -> &Transport {
        &self.transport
    }
}

/// Mounts a [`Passthrough`] of `source` on `mountpoint` with moafs's transport ([`crate::serve`])
/// and serves it until unmounted (or SIGINT/SIGTERM/SIGHUP); `ready` is called once the mount
/// is live.
pub fn mount_blocking(
    source: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> io::Result<()> {
    crate::serve(
        |c| Passthrough::new(source, c),
        mountpoint,
        cfg,
        |p: &Passthrough| Some(p.stream_probe()),
        |_| Ok(()),
        ready,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_are_the_backing_ones_with_root_and_1_swapped() {
        let dir = std::env::temp_dir();
        let p = Passthrough::new(&dir, &MountConfig::default()).unwrap();
        let (dev, root) = p.root_key;
        assert_eq!(p.number((dev, root)), Some(ROOT));
        assert_eq!(p.number((dev, ROOT)), Some(root));
        assert_eq!(p.number((dev, 12345)), Some(12345));
        // another file system below the source: numbered from the table
        assert_eq!(p.number((dev ^ 1, 12345)), None);
        // the root is known from the start and never forgotten
        p.forget_one(ROOT, 10);
        assert!(p.inode(INodeNo(ROOT)).is_ok());
        assert_eq!(p.inode(INodeNo(12345)).unwrap_err(), Errno::ESTALE);
    }

    #[test]
    fn lookups_count_and_the_last_forget_closes() {
        let dir = std::env::temp_dir().join(format!("moafs-pt-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        let p = Passthrough::new(&dir, &MountConfig::default()).unwrap();
        let root = p.inode(INodeNo(ROOT)).unwrap();
        let a = p.lookup_at(&root, true, OsStr::new("f")).unwrap();
        let b = p.lookup_at(&root, true, OsStr::new("f")).unwrap();
        assert_eq!(a.ino, b.ino);
        assert_eq!(a.size, 1);
        use std::os::unix::fs::MetadataExt;
        assert_eq!(a.ino.0, std::fs::metadata(dir.join("f")).unwrap().ino());
        // ".." of the root is the root
        assert_eq!(
            p.lookup_at(&root, true, OsStr::new("..")).unwrap().ino,
            INodeNo(ROOT)
        );
        p.forget_one(a.ino.0, 1);
        assert!(p.inode(a.ino).is_ok(), "one lookup left");
        p.forget_one(a.ino.0, 1);
        assert!(p.inode(a.ino).is_err(), "forgotten");
        assert!(p.table().by_key.len() == 1, "only the root is left");
        assert_eq!(
            p.lookup_at(&root, true, OsStr::new("missing")).unwrap_err(),
            Errno::ENOENT
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
