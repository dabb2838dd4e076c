//! Inode flags (`chattr`/`lsattr`: `FS_IOC_GETFLAGS`/`SETFLAGS`, and `xfs_io -c chattr`:
//! `FS_IOC_FSGETXATTR`/`FSSETXATTR`), kept in the inode's `flags` word (docs/FORMAT.md §4)
//! with ext4's bit values, and enforced as ext4 and the VFS enforce them:
//!
//! * immutable (`i`): no open for writing or truncating, no change of data, size, mode,
//!   owner, times or extended attributes, no new name (link), no removal or rename of its
//!   names; a directory so flagged also takes no new, removed or renamed entries;
//! * append-only (`a`): opens for writing only with O_APPEND, no truncation, no fallocate but
//!   plain allocation, no change of mode or owner or extended attributes, no link, no removal
//!   or rename; a directory so flagged takes new entries but loses none;
//! * no-atime (`A`): reads and listings leave its access time alone;
//! * no-dump (`d`): kept for dump(8), no effect here.
//!
//! Other flags are refused (EOPNOTSUPP): moafs would not honour them. Who may change flags
//! (the owner or root; `i` and `a` only with CAP_LINUX_IMMUTABLE) is the kernel's check.
//!
//! The open check needs the kernel to send OPEN, which the FUSE adapter otherwise declines
//! (for speed): so the first time a file gets `i` or `a`, the superblock's compatible
//! feature [`COMPAT_INODE_FLAGS`] is made durable first, and a mount of an image with it
//! answers OPEN (`Fs::inode_flags_in_use`).

use super::{Fs, Inner, Ino, SetAttr, TimeOrNow, Timespec};
use crate::error::{FsError, FsResult};
use crate::format::COMPAT_INODE_FLAGS;

/// `FS_IMMUTABLE_FL`.
pub const FL_IMMUTABLE: u32 = 0x10;
/// `FS_APPEND_FL`.
pub const FL_APPEND: u32 = 0x20;
/// `FS_NODUMP_FL`.
pub const FL_NODUMP: u32 = 0x40;
/// `FS_NOATIME_FL`.
pub const FL_NOATIME: u32 = 0x80;
/// The flags moafs keeps and honours.
pub const FL_SUPPORTED: u32 = FL_IMMUTABLE | FL_APPEND | FL_NODUMP | FL_NOATIME;
/// Immutable or append-only: the flags that pin a file's names and attributes.
const FL_PINNED: u32 = FL_IMMUTABLE | FL_APPEND;

/// How an open asks for a file (the parts the flags care about).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenIntent {
    pub write: bool,
    pub append: bool,
    pub truncate: bool,
}

impl Fs {
    /// The inode's flags (`FS_*_FL` bits).
    pub fn inode_flags(&self, ino: Ino) -> FsResult<u32> {
        self.live()?;
        Ok(self.warm(|g| g.warm_inode(ino)).inode(ino)?.d.flags)
    }

    /// Sets the inode's flags to `flags` (all of them: the kernel passes the whole word);
    /// bits moafs does not honour are refused (EOPNOTSUPP). The first `i` or `a` of the file
    /// system makes [`COMPAT_INODE_FLAGS`] durable before the flag is set.
    pub fn set_inode_flags(&self, ino: Ino, flags: u32) -> FsResult<()> {
        self.live()?;
        if flags & !FL_SUPPORTED != 0 {
            return Err(FsError::NotSupported);
        }
        if flags & FL_PINNED != 0 && !self.inode_flags_in_use() {
            self.commit_superblock_change(|sb| sb.features_compat |= COMPAT_INODE_FLAGS)?;
        }
        self.mutate_warm(
            |g| g.warm_inode(ino),
            |g| {
                g.check_writable()?;
                g.note_mutated(ino);
                let node = g.inode(ino)?;
                node.d.flags = flags;
                node.d.ctime = Timespec::now().pair();
                node.dirty = true;
                Ok(())
            },
        )
    }

    /// Whether an inode of this file system may carry `i` or `a` (the superblock says one
    /// did): OPEN must then be checked ([`Fs::may_open`]).
    pub fn inode_flags_in_use(&self) -> bool {
        self.lock().sb.features_compat & COMPAT_INODE_FLAGS != 0
    }

    /// Whether `ino` may be opened as `intent` asks: EPERM for writing or truncating an
    /// immutable file, or writing an append-only file without O_APPEND or truncating it.
    pub fn may_open(&self, ino: Ino, intent: OpenIntent) -> FsResult<()> {
        self.live()?;
        let flags = self.warm(|g| g.warm_inode(ino)).inode(ino)?.d.flags;
        let refused = if flags & FL_IMMUTABLE != 0 {
            intent.write || intent.truncate
        } else if flags & FL_APPEND != 0 {
            (intent.write && !intent.append) || intent.truncate
        } else {
            false
        };
        if refused {
            return Err(FsError::NotPermitted);
        }
        Ok(())
    }
}

impl Inner {
    fn flags_of(&mut self, ino: u64) -> FsResult<u32> {
        Ok(self.inode(ino)?.d.flags)
    }

    /// EPERM if `ino` is immutable or append-only: its names, mode, owner and extended
    /// attributes are fixed (unlink, rename, link, chmod, chown, setxattr).
    pub(crate) fn refuse_pinned(&mut self, ino: u64) -> FsResult<()> {
        if self.flags_of(ino)? & FL_PINNED != 0 {
            return Err(FsError::NotPermitted);
        }
        Ok(())
    }

    /// EPERM if `ino` is immutable (its data, size and times are fixed too).
    pub(crate) fn refuse_immutable(&mut self, ino: u64) -> FsResult<()> {
        if self.flags_of(ino)? & FL_IMMUTABLE != 0 {
            return Err(FsError::NotPermitted);
        }
        Ok(())
    }

    /// EPERM unless directory `dir` may lose the entry of `victim`: neither the directory
    /// nor the victim immutable or append-only.
    pub(crate) fn refuse_entry_removal(&mut self, dir: u64, victim: u64) -> FsResult<()> {
        self.refuse_pinned(dir)?;
        self.refuse_pinned(victim)
    }

    /// Whether reads and listings of `ino` leave its access time alone (`A`).
    pub(crate) fn no_atime(&mut self, ino: u64) -> FsResult<bool> {
        Ok(self.flags_of(ino)? & FL_NOATIME != 0)
    }

    /// EPERM for a change of `ino`'s attributes its flags forbid. Both flags: mode, owner,
    /// size, and an access time set to a given value (utime(2) with times). Immutable: any
    /// time but mtime (with ctime) set alone — which is how the kernel's write-back cache
    /// hands over the times of writes made before the flag was set (FUSE does not tell that
    /// from `touch -m -d`, which is thus let through). utime(2) without times (atime now,
    /// mtime given: the write-back cache keeps mtime in the kernel) append-only allows, as
    /// the VFS does.
    pub(crate) fn refuse_setattr(&mut self, ino: u64, set: &SetAttr) -> FsResult<()> {
        let flags = self.flags_of(ino)?;
        if flags & FL_PINNED == 0 {
            return Ok(());
        }
        let flush = set.atime.is_none() && set.mtime.is_some();
        let refused = set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.size.is_some()
            || matches!(set.atime, Some(TimeOrNow::At(_)))
            || flags & FL_IMMUTABLE != 0
                && (set.atime.is_some() || set.mtime.is_some() && !flush || set.kill_suid);
        if refused {
            return Err(FsError::NotPermitted);
        }
        Ok(())
    }

    /// EPERM for a fallocate its flags forbid: any on an immutable file, anything but plain
    /// allocation (`mode` 0 or KEEP_SIZE) on an append-only one.
    pub(crate) fn refuse_fallocate(&mut self, ino: u64, mode: i32) -> FsResult<()> {
        let flags = self.flags_of(ino)?;
        let refused = flags & FL_IMMUTABLE != 0
            || flags & FL_APPEND != 0 && mode & !libc::FALLOC_FL_KEEP_SIZE != 0;
        if refused {
            return Err(FsError::NotPermitted);
        }
        Ok(())
    }
}
