//! Attributes and extended attributes: setattr (with the set-id rules), access times,
//! statfs, xattrs (ACLs among them, `acl.rs`) and access checks.

use super::acl::{self, Acl};
use super::{AtimeMode, Attr, Caller, Inner, SetAttr, StatFs, TimeOrNow, Timespec, XattrFlags};
use crate::error::{FsError, FsResult};
use crate::format::{XattrBlock, NAME_MAX, XATTR_VALUE_MAX};

/// Whether a caller (`None`: privileged) counts as in group `gid`.
fn in_group(who: Option<&[u32]>, gid: u32) -> bool {
    who.is_none_or(|groups| groups.contains(&gid))
}

/// `mode` of a regular file of group `gid` after a change by `who` (`None`: privileged):
/// without set-user-ID, and without set-group-ID if group-executable or if `who` is not in
/// the group (the kernel's `setattr_should_drop_sgid`).
fn killed_suid(mode: u32, gid: u32, who: Option<&[u32]>) -> u32 {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return mode;
    }
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_ISGID != 0 && (m & libc::S_IXGRP != 0 || !in_group(who, gid)) {
        m &= !libc::S_ISGID;
    }
    m
}

impl Inner {
    pub(crate) fn setattr(&mut self, ino: u64, set: &SetAttr) -> FsResult<Attr> {
        self.check_writable()?;
        let now = Timespec::now();
        if let Some(size) = set.size {
            let node = self.inode(ino)?;
            if node.is_dir() {
                return Err(FsError::IsDir);
            }
            if node.kind_mode() != libc::S_IFREG {
                return Err(FsError::invalid("truncate of a non-regular file"));
            }
            let old = node.d.size;
            self.truncate(ino, size)?;
            if size != old || set.mtime.is_none() {
                let n = self.inode(ino)?;
                n.d.mtime = now.pair();
            }
        }
        let node = self.inode(ino)?;
        let who = set.unprivileged.as_deref();
        if let Some(uid) = set.uid {
            node.d.uid = uid;
        }
        if let Some(gid) = set.gid {
            node.d.gid = gid;
        }
        if let Some(mode) = set.mode {
            let mut perm = mode & 0o7777;
            if !in_group(who, node.d.gid) {
                perm &= !libc::S_ISGID;
            }
            node.d.mode = (node.d.mode & libc::S_IFMT) | perm;
            let has_xattrs = node.d.xattr_block != 0 || node.xattrs.is_some();
            if has_xattrs {
                if let Some(v) = self.xattrs(ino)?.get(acl::ACCESS) {
                    let mut a = Acl::decode(v)?;
                    a.chmod(perm);
                    let v = a.encode();
                    self.xattrs(ino)?.insert(acl::ACCESS.to_vec(), v);
                    self.inode(ino)?.xattr_dirty = true;
                }
            }
        }
        let node = self.inode(ino)?;
        if set.kill_suid && set.mode.is_none() {
            node.d.mode = killed_suid(node.d.mode, node.d.gid, who);
        }
        let t = |x: TimeOrNow| match x {
            TimeOrNow::Now => now.pair(),
            TimeOrNow::At(ts) => ts.pair(),
        };
        if let Some(a) = set.atime {
            node.d.atime = t(a);
        }
        if let Some(m) = set.mtime {
            node.d.mtime = t(m);
        }
        node.d.ctime = set.ctime.unwrap_or(now).pair();
        node.dirty = true;
        self.after_dirtying()?;
        self.attr(ino)
    }

    /// A write by an unprivileged caller drops set-user-ID/set-group-ID (HANDLE_KILLPRIV_V2).
    /// True when the mode changed.
    pub(crate) fn kill_suid(&mut self, ino: u64, who: Option<&[u32]>) -> FsResult<bool> {
        let node = self.inode(ino)?;
        let m = killed_suid(node.d.mode, node.d.gid, who);
        if m == node.d.mode {
            return Ok(false);
        }
        node.d.mode = m;
        node.d.ctime = Timespec::now().pair();
        node.dirty = true;
        Ok(true)
    }

    /// An access to `ino` (a read the engine serves, a listing): updates the access time as
    /// the policy says (the kernel's `atime_needs_update`/`relatime_need_update`).
    pub(crate) fn touch_atime(&mut self, ino: u64) -> FsResult<()> {
        let policy = self.atime;
        if policy.mode == AtimeMode::Never || self.opts.read_only || self.failed {
            return Ok(());
        }
        if self.no_atime(ino)? {
            return Ok(());
        }
        let now = Timespec::now();
        let node = self.inode(ino)?;
        if node.is_dir() && !policy.dirs {
            return Ok(());
        }
        let atime = Timespec::from_pair(node.d.atime);
        let due = match policy.mode {
            AtimeMode::Never => false,
            AtimeMode::Always => atime != now,
            AtimeMode::Relative => {
                Timespec::from_pair(node.d.mtime) >= atime
                    || Timespec::from_pair(node.d.ctime) >= atime
                    || now.sec.saturating_sub(atime.sec) >= 24 * 3600
            }
        };
        if due {
            node.d.atime = now.pair();
            node.dirty = true;
        }
        Ok(())
    }

    pub(crate) fn statfs(&mut self) -> StatFs {
        let geo = self.alloc.geo;
        StatFs {
            block_size: geo.block_size,
            total_blocks: geo.data_blocks(),
            free_blocks: self.free_unpromised(),
            avail_blocks: self.avail_blocks(),
            total_inodes: geo.total_inodes(),
            free_inodes: self.alloc.free_inodes() + self.alloc.pending_inode_count(),
            name_max: NAME_MAX as u32,
        }
    }

    pub(crate) fn setxattr(
        &mut self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> FsResult<()> {
        if name == acl::DEFAULT || name == acl::ACCESS {
            let a = Acl::decode(value)?;
            if name == acl::DEFAULT && !self.inode(ino)?.is_dir() {
                return Err(FsError::Access);
            }
            if name == acl::ACCESS {
                // The mode follows the ACL; an ACL that says no more than the mode is not
                // kept (posix_acl_update_mode). The mode changes only once the ACL is
                // stored: an ACL refused (no space for it) leaves the mode as it was.
                self.check_writable()?;
                if a.is_equivalent_to_mode() {
                    match self.removexattr(ino, name) {
                        Ok(()) | Err(FsError::NoAttr) => {}
                        Err(e) => return Err(e),
                    }
                } else {
                    self.set_xattr_raw(ino, name, value, flags)?;
                }
                let node = self.inode(ino)?;
                node.d.mode = (node.d.mode & !0o777) | a.mode_bits();
                node.d.ctime = Timespec::now().pair();
                node.dirty = true;
                return Ok(());
            }
        }
        self.set_xattr_raw(ino, name, value, flags)
    }

    pub(super) fn set_xattr_raw(
        &mut self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> FsResult<()> {
        self.check_writable()?;
        if name.is_empty() || name.len() > 255 {
            return Err(if name.is_empty() {
                FsError::invalid("empty xattr name")
            } else {
                FsError::Range
            });
        }
        if value.len() > XATTR_VALUE_MAX {
            return Err(FsError::Range);
        }
        let bs = self.bs();
        let x = self.xattrs(ino)?;
        let exists = x.contains_key(name);
        if flags.create && exists {
            return Err(FsError::Exists);
        }
        if flags.replace && !exists {
            return Err(FsError::NoAttr);
        }
        let mut next = x.clone();
        next.insert(name.to_vec(), value.to_vec());
        let needed = XattrBlock::blocks_needed(&next, bs as u32).ok_or(FsError::NoSpace)?;
        let node = self.inode(ino)?;
        let have = if node.d.xattr_block != 0 {
            1 + node.xattr_cont.len()
        } else {
            0
        };
        // all or none: a partial reservation would stay held after the error
        self.reserve_meta_blocks(needed.saturating_sub(have) as u64)?;
        *self.xattrs(ino)? = next;
        let node = self.inode(ino)?;
        node.xattr_dirty = true;
        node.d.ctime = Timespec::now().pair();
        node.dirty = true;
        Ok(())
    }

    pub(crate) fn getxattr(&mut self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        self.xattrs(ino)?.get(name).cloned().ok_or(FsError::NoAttr)
    }

    pub(crate) fn listxattr(&mut self, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        Ok(self.xattrs(ino)?.keys().cloned().collect())
    }

    pub(crate) fn removexattr(&mut self, ino: u64, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        self.xattrs(ino)?.remove(name).ok_or(FsError::NoAttr)?;
        let node = self.inode(ino)?;
        node.xattr_dirty = true;
        node.d.ctime = Timespec::now().pair();
        node.dirty = true;
        Ok(())
    }

    pub(crate) fn access(&mut self, ino: u64, mask: u32, who: Caller) -> FsResult<()> {
        let d = &self.inode(ino)?.d;
        if mask == 0 {
            return Ok(());
        }
        let mode = d.mode;
        if who.uid == 0 {
            // root may do anything but execute a file nobody may execute
            if mask & 1 != 0 && mode & libc::S_IFMT != libc::S_IFDIR && mode & 0o111 == 0 {
                return Err(FsError::Access);
            }
            return Ok(());
        }
        let bits = if who.uid == d.uid {
            (mode >> 6) & 7
        } else if who.gid == d.gid {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        if bits & mask == mask {
            Ok(())
        } else {
            Err(FsError::Access)
        }
    }
}
