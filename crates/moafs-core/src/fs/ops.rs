//! Namespace operations: lookup, create (every kind), remove, link, rename, readdir, and the
//! directories and inodes they load; attributes and xattrs are `attrs.rs`'s.

use super::acl::{self, Acl};
use super::dir::Dir;
use super::node::Inode;
use super::{Attr, Caller, DirEntry, FileKind, Inner, RenameFlags, Timespec, XattrFlags, ROOT_INO};
use crate::error::{FsError, FsResult};
use crate::format::{DirBlock, DiskInode, XattrBlock, XattrHead, NAME_MAX, SYMLINK_MAX};

/// Most hard links to one inode.
const LINK_MAX: u32 = 65000;

fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(FsError::invalid("bad file name"));
    }
    Ok(())
}

impl Inner {
    pub(crate) fn add_lookup(&mut self, ino: u64) -> FsResult<()> {
        if self.opts.kernel_lookups {
            self.inode(ino)?;
            self.kept.add(ino, 1);
        }
        Ok(())
    }

    pub(crate) fn attr(&mut self, ino: u64) -> FsResult<Attr> {
        let bs = self.bs() as u32;
        let node = self.inode(ino)?;
        let d = &node.d;
        let kind = FileKind::from_mode(d.mode)
            .ok_or_else(|| FsError::corrupt("inode", ino, "unknown file type"))?;
        // Blocks not yet allocated (delayed allocation) still count, as on ext4, and so do
        // the indirect blocks the commit allocates to map them (ext4 allocates a fallocate's
        // extent blocks at once: st_blocks must not change when the commit comes).
        let mut pending = node.cache.reserved_count();
        if pending > 0 {
            pending += self.pending_indirect(ino)?;
        }
        let node = self.inode(ino)?;
        let d = &node.d;
        Ok(Attr {
            ino,
            size: d.size,
            blocks_512: (d.blocks + pending) * (bs as u64 / 512),
            atime: Timespec::from_pair(d.atime),
            mtime: Timespec::from_pair(d.mtime),
            ctime: Timespec::from_pair(d.ctime),
            crtime: Timespec::from_pair(d.crtime),
            kind,
            perm: (d.mode & 0o7777) as u16,
            nlink: d.nlink,
            uid: d.uid,
            gid: d.gid,
            rdev: d.rdev,
            blksize: bs,
            generation: d.generation,
        })
    }

    /// The loaded directory of `ino` (reads its blocks on first use).
    pub(crate) fn dir(&mut self, ino: u64) -> FsResult<&mut Dir> {
        let bs = self.bs();
        let node = self.inode(ino)?;
        if !node.is_dir() {
            return Err(FsError::NotDir);
        }
        if node.dir.is_none() {
            // decoded inodes have size / bs <= blocks <= the data blocks (`DiskInode::check`)
            let nblocks = node.d.size / bs as u64;
            let mut blocks = Vec::with_capacity(nblocks as usize);
            for idx in 0..nblocks {
                let phys = self.bmap(ino, idx)?;
                if phys == 0 {
                    blocks.push(DirBlock::default());
                    continue;
                }
                let mut buf = vec![0u8; bs];
                self.read_block(phys, &mut buf)?;
                blocks.push(DirBlock::decode(&buf, ino, idx, phys)?);
            }
            let dir = Dir::from_blocks(blocks, DirBlock::capacity(bs as u32));
            self.inode(ino)?.dir = Some(Box::new(dir));
        }
        Ok(self.inode(ino)?.dir.as_mut().expect("loaded above"))
    }

    pub(crate) fn lookup_name(&mut self, parent: u64, name: &[u8]) -> FsResult<u64> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if name == b"." {
            // Also of files: the kernel looks an inode up by "." in itself to open a file
            // handle (open_by_handle_at, NFS export) it no longer caches. An inode without
            // links is gone for handles (ESTALE), as on ext4.
            if self.inode(parent)?.d.nlink == 0 {
                return Err(FsError::Stale { ino: parent });
            }
            return Ok(parent);
        }
        if name == b".." {
            self.dir(parent)?;
            let p = self.inode(parent)?.d.parent;
            return Ok(if p == 0 { ROOT_INO } else { p });
        }
        self.dir(parent)?
            .get(name)
            .map(|e| e.ino)
            .ok_or(FsError::NotFound)
    }

    fn touch_dir(&mut self, ino: u64, now: (i64, u32)) -> FsResult<()> {
        let node = self.inode(ino)?;
        node.d.mtime = now;
        node.d.ctime = now;
        node.dirty = true;
        Ok(())
    }

    /// Creates an inode of any type in `parent`.
    pub(crate) fn make(
        &mut self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        who: Caller,
        target: Option<&[u8]>,
    ) -> FsResult<Attr> {
        self.make_in(parent, Some(name), mode, rdev, who, target)
    }

    /// Creates a regular file with no name (open(O_TMPFILE) in `parent`): link count 0, so an
    /// orphan (freed when the kernel forgets it, or at the next mount after a crash) until
    /// `link` gives it a name — which it may only if `linkable` (no O_EXCL), as the VFS's
    /// I_LINKABLE says.
    pub(crate) fn make_unnamed(
        &mut self,
        parent: u64,
        perm: u32,
        who: Caller,
        linkable: bool,
    ) -> FsResult<Attr> {
        let a = self.make_in(parent, None, libc::S_IFREG | (perm & 0o7777), 0, who, None)?;
        self.inode(a.ino)?.linkable = linkable;
        Ok(a)
    }

    /// `make` with a name, or an unnamed regular file (`make_unnamed`).
    fn make_in(
        &mut self,
        parent: u64,
        name: Option<&[u8]>,
        mode: u32,
        rdev: u32,
        who: Caller,
        target: Option<&[u8]>,
    ) -> FsResult<Attr> {
        self.check_writable()?;
        if let Some(name) = name {
            check_name(name)?;
        }
        let kind =
            FileKind::from_mode(mode).ok_or_else(|| FsError::invalid("unknown file type"))?;
        if let Some(t) = target {
            if t.len() > SYMLINK_MAX {
                return Err(FsError::NameTooLong);
            }
            if t.is_empty() {
                return Err(FsError::NotFound);
            }
        }
        if let Some(name) = name {
            if self.dir(parent)?.get(name).is_some() {
                return Err(FsError::Exists);
            }
        } else if !self.inode(parent)?.is_dir() {
            return Err(FsError::NotDir);
        }
        self.refuse_immutable(parent)?;
        let is_dir = kind == FileKind::Directory;
        let pnode = self.inode(parent)?;
        if is_dir && pnode.d.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        let (pmode, pgid) = (pnode.d.mode, pnode.d.gid);
        let pgroup = self.alloc.geo.group_of_inode(parent);
        let group = if is_dir {
            self.alloc.pick_dir_group(pgroup)
        } else {
            pgroup
        };
        if name.is_some() {
            // A directory entry may need a new block.
            self.check_space(1)?;
        }
        if self.alloc.free_inodes() == 0 && self.alloc.pending_inode_count() > 0 {
            self.commit_to_free()?;
        }
        let ino = self
            .alloc
            .alloc_inode(group, is_dir)
            .ok_or(FsError::NoSpace)?;
        let now = Timespec::now().pair();
        let mut perm = mode & 0o7777;
        // The directory's default ACL replaces the umask (not for symlinks, always 0777).
        let (mut access_acl, mut default_acl) = (None, None);
        if kind != FileKind::Symlink {
            match self.default_acl(parent)? {
                Some(dacl) => {
                    let mut a = dacl.clone();
                    perm = (perm & !0o777) | a.create_masq(perm);
                    if !a.is_equivalent_to_mode() {
                        access_acl = Some(a.encode());
                    }
                    if is_dir {
                        default_acl = Some(dacl.encode());
                    }
                }
                None => perm &= !who.umask,
            }
        }
        let mut gid = who.gid;
        if pmode & libc::S_ISGID != 0 {
            gid = pgid;
            if is_dir {
                perm |= libc::S_ISGID;
            }
        }
        // a number freed since the last commit (never written: `maybe_reap`) has its last
        // generation in `dead`, whose zeroed slot it replaces; else the slot on disk
        let old_gen = match self.dead.remove(&ino) {
            Some(d) => d.generation,
            None => self.read_disk_inode(ino).map(|d| d.generation).unwrap_or(0),
        };
        self.init_itable_slot(ino)?;
        let d = DiskInode {
            mode: kind.mode_bits() | perm,
            uid: who.uid,
            gid,
            nlink: match (name, is_dir) {
                (None, _) => 0,
                (Some(_), true) => 2,
                (Some(_), false) => 1,
            },
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev,
            generation: old_gen.wrapping_add(1),
            parent: if is_dir { parent } else { 0 },
            extents: self
                .sb
                .has_extents()
                .then(crate::format::extent::ExtNode::default),
            ..Default::default()
        };
        let mut node = Inode::new(d, false);
        node.dirty = true;
        node.parent_hint = parent;
        if is_dir {
            node.dir = Some(Box::new(Dir::new(DirBlock::capacity(self.bs() as u32))));
        }
        self.inodes.insert(ino, node);
        self.kept.loaded(self.inodes.len());
        self.kept.add(ino, self.opts.kernel_lookups as u64);
        if let Some(name) = name {
            let before = self.dir(parent)?.blocks.len();
            self.dir(parent)?.insert(name, ino, kind.dirent_type());
            self.note_dir_growth(parent, before)?;
            self.touch_dir(parent, now)?;
        }
        if is_dir {
            self.inode(parent)?.d.nlink += 1;
        }
        if let Some(t) = target {
            self.write(ino, 0, t)?;
            let node = self.inode(ino)?;
            node.d.mtime = now;
            node.d.ctime = now;
        }
        for (name, value) in [(acl::ACCESS, access_acl), (acl::DEFAULT, default_acl)] {
            if let Some(v) = value {
                self.set_xattr_raw(ino, name, &v, XattrFlags::default())?;
            }
        }
        self.attr(ino)
    }

    /// The default ACL of directory `dir`, if it has one (no xattr block: none, unread).
    fn default_acl(&mut self, dir: u64) -> FsResult<Option<Acl>> {
        let node = self.inode(dir)?;
        if node.d.xattr_block == 0 && node.xattrs.is_none() {
            return Ok(None);
        }
        match self.xattrs(dir)?.get(acl::DEFAULT) {
            Some(v) => Acl::decode(v).map(Some),
            None => Ok(None),
        }
    }

    pub(crate) fn readlink(&mut self, ino: u64) -> FsResult<Vec<u8>> {
        let node = self.inode(ino)?;
        if node.kind_mode() != libc::S_IFLNK {
            return Err(FsError::invalid("not a symlink"));
        }
        let size = node.d.size;
        // The target is stored as the link's file data: the data path reads it as it is.
        self.read(ino, 0, size as u32)
    }

    /// unlink (`want_dir` false) or rmdir (true).
    pub(crate) fn remove(&mut self, parent: u64, name: &[u8], want_dir: bool) -> FsResult<()> {
        self.check_writable()?;
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if want_dir && name == b"." {
            return Err(FsError::invalid("rmdir ."));
        }
        if want_dir && name == b".." {
            return Err(FsError::NotEmpty);
        }
        let e = self.dir(parent)?.get(name).ok_or(FsError::NotFound)?;
        // before the type and emptiness checks, as the VFS's may_delete
        self.refuse_entry_removal(parent, e.ino)?;
        let is_dir = self.inode(e.ino)?.is_dir();
        if want_dir && !is_dir {
            return Err(FsError::NotDir);
        }
        if !want_dir && is_dir {
            return Err(FsError::IsDir);
        }
        if is_dir && self.dir(e.ino)?.len() > 0 {
            return Err(FsError::NotEmpty);
        }
        self.dir(parent)?.remove(name);
        let now = Timespec::now().pair();
        self.touch_dir(parent, now)?;
        self.drop_link(e.ino, now)?;
        if is_dir {
            let p = self.inode(parent)?;
            p.d.nlink = p.d.nlink.saturating_sub(1);
        }
        self.maybe_reap(e.ino)
    }

    /// One name of `ino` is gone.
    fn drop_link(&mut self, ino: u64, now: (i64, u32)) -> FsResult<()> {
        let node = self.inode(ino)?;
        if node.is_dir() {
            node.d.nlink = 0;
        } else {
            node.d.nlink = node.d.nlink.saturating_sub(1);
        }
        node.d.ctime = now;
        node.dirty = true;
        Ok(())
    }

    /// Frees an inode that has no names, no open handles and no kernel references.
    pub(crate) fn maybe_reap(&mut self, ino: u64) -> FsResult<()> {
        let Some(node) = self.inodes.get(&ino) else {
            return Ok(());
        };
        if node.d.nlink > 0 || self.kept.lookups(ino) > 0 || node.opens > 0 || ino == ROOT_INO {
            return Ok(());
        }
        if self.opts.read_only {
            self.inodes.remove(&ino);
            return Ok(());
        }
        let is_dir = self.inode(ino)?.is_dir();
        self.truncate_all(ino)?;
        if self.inode(ino)?.d.xattr_block != 0 {
            // the continuation blocks are known once the set is read
            if let Err(e) = self.xattrs(ino) {
                log::warn!("inode {ino}: xattrs unreadable ({e}); freeing their first block only");
            }
            let node = self.inode(ino)?;
            let blocks: Vec<u64> = std::iter::once(node.d.xattr_block as u64)
                .chain(node.xattr_cont.iter().copied())
                .collect();
            for b in blocks {
                self.alloc.free_later(b, 1);
            }
        }
        if is_dir {
            self.alloc.note_dir_removed(ino);
        }
        let generation = self.inode(ino)?.d.generation;
        // No commit wrote it (not even one in flight: those take `saved` when they plan).
        let never_saved = self.inode(ino)?.saved.is_none();
        self.inodes.remove(&ino);
        self.aging.forget(ino);
        // The zeroed slot (keeping the generation) is written at the next commit.
        self.dead.insert(
            ino,
            DiskInode {
                generation,
                ..Default::default()
            },
        );
        if never_saved {
            // reusable at once: the next create of this number takes its generation from
            // `dead` (the slot is written zeroed at the next commit if nobody takes it)
            self.alloc.free_inode_now(ino);
        } else {
            self.alloc.free_inode_later(ino);
        }
        Ok(())
    }

    fn truncate_all(&mut self, ino: u64) -> FsResult<()> {
        self.drop_cached_from(ino, 0)?;
        self.inode(ino)?.dir = None;
        self.free_from(ino, 0)
    }

    pub(crate) fn link(&mut self, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr> {
        self.check_writable()?;
        check_name(newname)?;
        if self.dir(newparent)?.get(newname).is_some() {
            return Err(FsError::Exists);
        }
        self.refuse_pinned(ino)?;
        self.refuse_immutable(newparent)?;
        let node = self.inode(ino)?;
        if node.is_dir() {
            return Err(FsError::NotPermitted);
        }
        if node.d.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        if node.d.nlink == 0 && !node.linkable {
            return Err(FsError::NotFound);
        }
        node.linkable = false;
        let kind = FileKind::from_mode(node.d.mode)
            .ok_or_else(|| FsError::corrupt("inode", ino, "unknown file type"))?;
        if self.dir(newparent)?.get(newname).is_some() {
            return Err(FsError::Exists);
        }
        self.check_space(1)?;
        let before = self.dir(newparent)?.blocks.len();
        self.dir(newparent)?
            .insert(newname, ino, kind.dirent_type());
        self.note_dir_growth(newparent, before)?;
        let now = Timespec::now().pair();
        self.touch_dir(newparent, now)?;
        let node = self.inode(ino)?;
        node.d.nlink += 1;
        node.d.ctime = now;
        node.dirty = true;
        node.parent_hint = newparent;
        self.add_lookup(ino)?;
        self.attr(ino)
    }

    /// Whether `anc` is `ino` or one of its ancestors.
    fn is_ancestor(&mut self, anc: u64, mut ino: u64) -> FsResult<bool> {
        for _ in 0..100_000 {
            if ino == anc {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            ino = self.inode(ino)?.d.parent;
            if ino == 0 {
                return Ok(false);
            }
        }
        Err(FsError::corrupt(
            "directory tree",
            ino,
            "parent chain does not reach the root",
        ))
    }

    pub(crate) fn rename(
        &mut self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: RenameFlags,
    ) -> FsResult<()> {
        self.check_writable()?;
        if name.len() > NAME_MAX || newname.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        check_name(newname)?;
        if flags.exchange && flags.noreplace {
            return Err(FsError::invalid("RENAME_EXCHANGE with RENAME_NOREPLACE"));
        }
        let src = self.dir(parent)?.get(name).ok_or(FsError::NotFound)?;
        let dst = self.dir(newparent)?.get(newname);
        self.refuse_entry_removal(parent, src.ino)?;
        self.refuse_immutable(newparent)?;
        if let Some(d) = dst {
            self.refuse_entry_removal(newparent, d.ino)?;
        }
        let src_dir = self.inode(src.ino)?.is_dir();
        if src_dir && newparent != parent && self.is_ancestor(src.ino, newparent)? {
            return Err(FsError::invalid("cannot move a directory below itself"));
        }
        let now = Timespec::now().pair();
        if flags.exchange {
            let dst = dst.ok_or(FsError::NotFound)?;
            let dst_dir = self.inode(dst.ino)?.is_dir();
            if dst_dir && newparent != parent && self.is_ancestor(dst.ino, parent)? {
                return Err(FsError::invalid("cannot move a directory below itself"));
            }
            self.dir(parent)?.replace(name, dst.ino, dst.kind);
            self.dir(newparent)?.replace(newname, src.ino, src.kind);
            self.reparent(src.ino, src_dir, parent, newparent)?;
            self.reparent(dst.ino, dst_dir, newparent, parent)?;
            for i in [src.ino, dst.ino] {
                let n = self.inode(i)?;
                n.d.ctime = now;
                n.dirty = true;
            }
            self.touch_dir(parent, now)?;
            return self.touch_dir(newparent, now);
        }
        if let Some(d) = dst {
            if flags.noreplace {
                return Err(FsError::Exists);
            }
            if d.ino == src.ino {
                return Ok(()); // two names of one inode: POSIX says do nothing
            }
            let dst_dir = self.inode(d.ino)?.is_dir();
            if src_dir && !dst_dir {
                return Err(FsError::NotDir);
            }
            if !src_dir && dst_dir {
                return Err(FsError::IsDir);
            }
            if dst_dir && self.dir(d.ino)?.len() > 0 {
                return Err(FsError::NotEmpty);
            }
            self.dir(newparent)?.replace(newname, src.ino, src.kind);
            self.dir(parent)?.remove(name);
            self.drop_link(d.ino, now)?;
            // A file replaced by rename: its successor's data goes before the metadata even
            // with journal=writeback, so write-then-rename never leaves an empty file.
            self.building.replaced_by_rename();
            self.aging.make_due(src.ino); // ext4's auto_da_alloc
            if dst_dir {
                let p = self.inode(newparent)?;
                p.d.nlink = p.d.nlink.saturating_sub(1);
            }
            self.reparent(src.ino, src_dir, parent, newparent)?;
            self.maybe_reap(d.ino)?;
        } else {
            self.check_space(1)?;
            self.dir(parent)?.remove(name);
            let before = self.dir(newparent)?.blocks.len();
            self.dir(newparent)?.insert(newname, src.ino, src.kind);
            self.note_dir_growth(newparent, before)?;
            self.reparent(src.ino, src_dir, parent, newparent)?;
        }
        let n = self.inode(src.ino)?;
        n.d.ctime = now;
        n.dirty = true;
        self.touch_dir(parent, now)?;
        self.touch_dir(newparent, now)
    }

    /// A directory moved from `from` to `to`: fix its ".." and both link counts.
    fn reparent(&mut self, ino: u64, is_dir: bool, from: u64, to: u64) -> FsResult<()> {
        if !is_dir {
            self.inode(ino)?.parent_hint = to;
        }
        if !is_dir || from == to {
            return Ok(());
        }
        let n = self.inode(ino)?;
        n.d.parent = to;
        n.dirty = true;
        let f = self.inode(from)?;
        f.d.nlink = f.d.nlink.saturating_sub(1);
        f.dirty = true;
        let t = self.inode(to)?;
        t.d.nlink += 1;
        t.dirty = true;
        Ok(())
    }

    /// The `readdir` offset past every entry the directory holds now: entries made later
    /// (a rename within the directory included) get offsets beyond it.
    pub(crate) fn readdir_end(&mut self, ino: u64) -> FsResult<u64> {
        Ok(self.dir(ino)?.next_seq + 2)
    }

    /// Entries from `offset` on, at most `max`, none at or past the offset `end` (see
    /// [`Self::readdir_end`]).
    pub(crate) fn readdir(
        &mut self,
        ino: u64,
        offset: u64,
        max: usize,
        end: u64,
    ) -> FsResult<Vec<DirEntry>> {
        let parent = {
            self.dir(ino)?;
            let p = self.inode(ino)?.d.parent;
            if p == 0 {
                ROOT_INO
            } else {
                p
            }
        };
        let mut out = Vec::new();
        if offset < 1 {
            out.push(DirEntry {
                ino,
                kind: FileKind::Directory,
                name: b".".to_vec(),
                offset: 1,
            });
        }
        if offset < 2 {
            out.push(DirEntry {
                ino: parent,
                kind: FileKind::Directory,
                name: b"..".to_vec(),
                offset: 2,
            });
        }
        let dir = self.dir(ino)?;
        let from = offset.saturating_sub(2);
        let until = end.saturating_sub(2);
        if from >= until {
            return Ok(out);
        }
        for (seq, name) in dir.order.range(from..until) {
            if out.len() >= max {
                break;
            }
            if let Some(e) = dir.index.get(name) {
                out.push(DirEntry {
                    ino: e.ino,
                    kind: FileKind::from_dirent_type(e.kind).unwrap_or(FileKind::Regular),
                    name: name.clone(),
                    offset: seq + 3,
                });
            }
        }
        Ok(out)
    }

    pub(super) fn xattrs(
        &mut self,
        ino: u64,
    ) -> FsResult<&mut std::collections::BTreeMap<Vec<u8>, Vec<u8>>> {
        let bs = self.bs();
        let node = self.inode(ino)?;
        if node.xattrs.is_none() {
            let xb = node.d.xattr_block as u64;
            let mut cont_blocks = Vec::new();
            let attrs = if xb == 0 {
                Default::default()
            } else {
                let mut buf = vec![0u8; bs];
                self.read_block(xb, &mut buf)?;
                match XattrBlock::decode_head(&buf, ino, xb, &self.bounds())? {
                    XattrHead::Single(attrs) => attrs,
                    XattrHead::Large {
                        count,
                        stream_len,
                        cont,
                        mut first,
                    } => {
                        for (i, &c) in cont.iter().enumerate() {
                            self.read_block(c, &mut buf)?;
                            first.extend_from_slice(XattrBlock::decode_cont(&buf, ino, i + 1, c)?);
                        }
                        first.truncate(stream_len);
                        cont_blocks = cont;
                        XattrBlock::decode_stream(&first, count, xb)?
                    }
                }
            };
            let node = self.inode(ino)?;
            node.xattrs = Some(attrs);
            node.xattr_cont = cont_blocks;
        }
        Ok(self.inode(ino)?.xattrs.as_mut().expect("loaded above"))
    }
}
