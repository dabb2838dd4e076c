//! In-memory inodes and the block map (12 direct pointers, then single, double and triple
//! indirect blocks of `block_size / 4 - 1` pointers each).

use super::cache::BlockCache;
use super::dir::Dir;
use super::Inner;
use crate::error::{FsError, FsResult};
use crate::format::blockmap::{self, bpath, BPath, Run};
use crate::format::bytelog::InodeAttrs;
use crate::format::{decode_indirect, ptrs_per_block, Bounds, DiskInode, N_DIRECT};
use std::collections::{BTreeMap, HashSet};

pub(crate) struct Inode {
    pub d: DiskInode,
    pub dirty: bool,
    pub opens: u32,
    pub cache: BlockCache,
    /// Readahead state of the file's readers.
    pub ra: super::readahead::Stream,
    /// Where the last read of the file ended (bytes): `Fs::read_follows`.
    pub read_end: u64,
    /// (boxed, as `saved` and `ext`: most inodes in memory are files the kernel looked up,
    /// and these would make every one of them ~450 bytes larger)
    pub dir: Option<Box<Dir>>,
    pub xattrs: Option<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Continuation blocks of the xattr set on disk (known once `xattrs` is loaded).
    pub xattr_cont: Vec<u64>,
    pub xattr_dirty: bool,
    /// A metadata block (the single indirect block) is reserved for this inode until the
    /// next commit allocates it.
    pub meta_reserved: bool,
    /// The double and triple indirect blocks reserved for this inode until the next commit
    /// allocates them (level, offsets: `Inner::missing_indirect`).
    pub deep_reserved: HashSet<(usize, Vec<usize>)>,
    /// The directory this file was last created, linked, renamed or looked up in (0: not
    /// known; in memory only): co-writing groups dirty small files by it.
    pub parent_hint: u64,
    /// The inode as the last commit wrote it (or as read from disk); None for an inode no
    /// commit has written yet. The byte log serves an fsync only when nothing but the
    /// attributes of an attribute record differs from it (`bytelog.rs`).
    pub saved: Option<Box<DiskInode>>,
    /// The attributes (mode, owner, flags, size, times) durable by the last commit or
    /// byte-log record.
    pub logged: InodeAttrs,
    /// The extent map (extent-mapped inodes, once used: `extents.rs`).
    pub ext: Option<Box<super::extents::ExtMap>>,
    /// An unnamed file of open(O_TMPFILE) without O_EXCL: `link` may give it its first name
    /// (the VFS's I_LINKABLE; in memory only — after a crash it is an orphan, freed).
    pub linkable: bool,
}

impl Inode {
    /// An inode read from disk (`saved`) or made in memory.
    pub fn new(d: DiskInode, saved: bool) -> Inode {
        Inode {
            saved: saved.then(|| Box::new(d.clone())),
            logged: InodeAttrs::of(&d),
            d,
            dirty: false,
            opens: 0,
            cache: BlockCache::default(),
            ra: Default::default(),
            read_end: 0,
            dir: None,
            meta_reserved: false,
            deep_reserved: HashSet::new(),
            parent_hint: 0,
            xattrs: None,
            xattr_cont: Vec::new(),
            xattr_dirty: false,
            ext: None,
            linkable: false,
        }
    }
    /// Changes no commit has taken yet.
    pub fn unsaved(&self) -> bool {
        self.dirty
            || self.xattr_dirty
            || self.cache.dirty_count() > 0
            || self.dir.as_ref().is_some_and(|d| d.any_dirty)
            || self.ext.as_ref().is_some_and(|e| e.is_dirty())
    }
    pub fn is_dir(&self) -> bool {
        self.d.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub fn kind_mode(&self) -> u32 {
        self.d.mode & libc::S_IFMT
    }
}

/// A cached indirect block.
pub(crate) struct IndBlock {
    pub ptrs: Vec<u32>,
    pub dirty: bool,
}

impl Inner {
    /// Loads inode `ino` into memory (if needed) and returns it.
    pub(crate) fn inode(&mut self, ino: u64) -> FsResult<&mut Inode> {
        if !self.inodes.contains_key(&ino) {
            if !self.alloc.geo.valid_ino(ino) || self.dead.contains_key(&ino) {
                return Err(FsError::Stale { ino });
            }
            let d = self.read_disk_inode(ino)?;
            if d.is_free() {
                return Err(FsError::Stale { ino });
            }
            let mut node = Inode::new(d, true);
            node.parent_hint = self.kept.hint(ino);
            self.inodes.insert(ino, node);
            self.kept.loaded(self.inodes.len());
        }
        // Every change of an inode comes through here: the next commit looks at these only.
        self.touched.insert(ino);
        self.inodes.get_mut(&ino).ok_or(FsError::Stale { ino })
    }

    pub(crate) fn read_disk_inode(&mut self, ino: u64) -> FsResult<DiskInode> {
        let (blk, off) = self.alloc.geo.inode_location(ino);
        let bounds = self.bounds();
        let buf = self.itable_block(blk)?;
        DiskInode::decode(
            &buf[off..off + crate::format::INODE_BYTES],
            ino,
            blk,
            &bounds,
        )
    }

    /// What pointers and sizes read from the image may be (checked when decoded).
    pub(crate) fn bounds(&self) -> Bounds {
        Bounds::from_superblock(&self.sb)
    }

    /// Marks the inode-table block of `ino` initialised (it reads as zeros until then).
    pub(crate) fn init_itable_slot(&mut self, ino: u64) -> FsResult<()> {
        let geo = self.alloc.geo;
        let g = geo.group_of_inode(ino);
        let idx = geo.inode_index_in_group(ino);
        let ipb = geo.inodes_per_block();
        let (blk, _) = geo.inode_location(ino);
        self.itable_block(blk)?;
        let grp = &mut self.alloc.groups[g as usize];
        let upto = (idx / ipb + 1) * ipb;
        if grp.hdr.itable_init < upto {
            grp.hdr.itable_init = upto;
            grp.dirty = true;
        }
        Ok(())
    }

    /// An inode table block, cached for read-modify-write.
    pub(crate) fn itable_block(&mut self, blk: u64) -> FsResult<&mut Vec<u8>> {
        if !self.itable.contains_key(&blk) {
            let geo = self.alloc.geo;
            let g = geo.group_of_block(blk);
            let first_slot = (blk - geo.itable_block(g)) as u32 * geo.inodes_per_block();
            let mut buf = vec![0u8; self.bs()];
            if first_slot < self.alloc.groups[g as usize].hdr.itable_init {
                self.read_block(blk, &mut buf)?;
            }
            self.itable.insert(blk, buf);
        }
        Ok(self.itable.get_mut(&blk).expect("inserted above"))
    }

    fn load_ind(&mut self, blk: u64) -> FsResult<&mut IndBlock> {
        if !self.ind.contains_key(&blk) {
            let mut buf = vec![0u8; self.bs()];
            self.read_block(blk, &mut buf)?;
            let ptrs = decode_indirect(&buf, blk, &self.bounds())?;
            self.ind.insert(blk, IndBlock { ptrs, dirty: false });
        }
        Ok(self.ind.get_mut(&blk).expect("inserted above"))
    }

    /// Indirect blocks the next commit allocates to map the reserved blocks of `ino`: those
    /// on their paths that do not exist yet (an indirect block not in memory counts as
    /// existing: a file with reservations has the paths it walked loaded).
    pub(crate) fn pending_indirect(&mut self, ino: u64) -> FsResult<u64> {
        if self.inode(ino)?.d.extents.is_some() {
            return self.pending_tree_blocks(ino);
        }
        let node = self.inode(ino)?;
        let top = node.d.indirect;
        let reserved: Vec<u64> = node.cache.reserved_blocks().collect();
        Ok(self.missing_indirect(top, reserved.into_iter()).len() as u64)
    }

    /// The indirect blocks missing on the paths of `blocks` (ascending) in a file whose top
    /// indirect pointers are `top`: each as its level and the offsets that lead to it. An
    /// indirect block not in memory counts as existing.
    pub(crate) fn missing_indirect(
        &self,
        top: [u32; 3],
        blocks: impl Iterator<Item = u64>,
    ) -> HashSet<(usize, Vec<usize>)> {
        let bs = self.alloc.geo.block_size;
        let mut missing = HashSet::default();
        // Blocks under one last-level indirect block share their path: walk it once. Every
        // level starts at a multiple of the pointers per block past the direct blocks, so
        // that block is (idx - N_DIRECT) / pointers at every level.
        let per = ptrs_per_block(bs);
        let mut last_leaf = None;
        for idx in blocks.filter(|&i| i >= N_DIRECT as u64) {
            let leaf = (idx - N_DIRECT as u64) / per;
            if last_leaf == Some(leaf) {
                continue;
            }
            last_leaf = Some(leaf);
            let Some(BPath::Indirect { level, offsets }) = bpath(idx, bs) else {
                continue;
            };
            let mut blk = top[level] as u64;
            for depth in 0..offsets.len() {
                if blk == 0 {
                    for d in depth..offsets.len() {
                        missing.insert((level, offsets[..d].to_vec()));
                    }
                    break;
                }
                if depth + 1 == offsets.len() {
                    break;
                }
                match self.ind.get(&blk) {
                    Some(b) => blk = b.ptrs[offsets[depth]] as u64,
                    None => break,
                }
            }
        }
        missing
    }

    /// The map of `ino` as runs in logical order (`format::blockmap::runs` over the indirect
    /// blocks as the engine holds them, loading those it has not read).
    pub(crate) fn map_runs(&mut self, ino: u64) -> FsResult<Vec<Run>> {
        let d = self.inode(ino)?.d.clone();
        if d.extents.is_some() {
            return Ok(self.ext_map(ino)?.runs());
        }
        let bs = self.alloc.geo.block_size;
        let no_extents = |b| {
            Err(FsError::corrupt(
                "inode",
                b,
                "an extent block in a pointer map",
            ))
        };
        blockmap::runs(
            &d,
            bs,
            |blk| Ok(Some(self.load_ind(blk)?.ptrs.clone())),
            no_extents,
        )
    }

    /// The most blocks `ino` can map (its kind of map decides: FORMAT.md sections 5, 6a).
    pub(crate) fn max_blocks_of(&mut self, ino: u64) -> FsResult<u64> {
        let bs = self.alloc.geo.block_size;
        Ok(match self.inode(ino)?.d.extents {
            Some(_) => crate::format::extent::max_file_blocks(bs),
            None => crate::format::pointer_map_blocks(bs),
        })
    }

    /// Disk block of logical block `idx` of `ino`, 0 for a hole.
    pub(crate) fn bmap(&mut self, ino: u64, idx: u64) -> FsResult<u64> {
        let bs = self.alloc.geo.block_size;
        let node = self.inode(ino)?;
        if let Some(map) = &node.ext {
            return Ok(map.get(idx)); // (one lookup: this runs for every block mapped)
        }
        if node.d.extents.is_some() {
            return Ok(self.ext_map(ino)?.get(idx));
        }
        let Some(path) = bpath(idx, bs) else {
            return Ok(0);
        };
        match path {
            BPath::Direct(i) => Ok(node.d.direct[i] as u64),
            BPath::Indirect { level, offsets } => {
                let mut blk = node.d.indirect[level] as u64;
                for o in offsets {
                    if blk == 0 {
                        return Ok(0);
                    }
                    blk = self.load_ind(blk)?.ptrs[o] as u64;
                }
                Ok(blk)
            }
        }
    }

    /// Sets the disk block of logical block `idx`, allocating indirect blocks near `goal`.
    pub(crate) fn set_bmap(&mut self, ino: u64, idx: u64, phys: u64) -> FsResult<()> {
        let bs = self.alloc.geo.block_size;
        if self.inode(ino)?.d.extents.is_some() {
            if idx >= crate::format::extent::max_file_blocks(bs) {
                return Err(FsError::FileTooBig);
            }
            self.ext_map(ino)?.set(idx, phys);
            self.inodes.get_mut(&ino).expect("loaded above").dirty = true;
            return Ok(());
        }
        let path = bpath(idx, bs).ok_or(FsError::FileTooBig)?;
        match path {
            BPath::Direct(i) => {
                let node = self.inode(ino)?;
                node.d.direct[i] = phys as u32;
                node.dirty = true;
            }
            BPath::Indirect { level, offsets } => {
                let mut blk = self.inode(ino)?.d.indirect[level] as u64;
                if blk == 0 {
                    blk = self.new_ind_block(ino, phys)?;
                    let node = self.inode(ino)?;
                    node.d.indirect[level] = blk as u32;
                    node.dirty = true;
                }
                for (depth, o) in offsets.iter().enumerate() {
                    if depth + 1 == offsets.len() {
                        let ib = self.load_ind(blk)?;
                        ib.ptrs[*o] = phys as u32;
                        ib.dirty = true;
                        self.ind_dirty.push(blk);
                    } else {
                        let mut next = self.load_ind(blk)?.ptrs[*o] as u64;
                        if next == 0 {
                            next = self.new_ind_block(ino, phys)?;
                            let ib = self.load_ind(blk)?;
                            ib.ptrs[*o] = next as u32;
                            ib.dirty = true;
                            self.ind_dirty.push(blk);
                        }
                        blk = next;
                    }
                }
            }
        }
        Ok(())
    }

    fn new_ind_block(&mut self, ino: u64, goal: u64) -> FsResult<u64> {
        let (b, _) = self.alloc.alloc_blocks(goal, 1).ok_or(FsError::NoSpace)?;
        let p = ptrs_per_block(self.alloc.geo.block_size) as usize;
        self.ind.insert(
            b,
            IndBlock {
                ptrs: vec![0; p],
                dirty: true,
            },
        );
        self.ind_dirty.push(b);
        self.inode(ino)?.d.blocks += 1;
        Ok(b)
    }

    /// Frees every data and indirect block of `ino` at logical index `from` or beyond.
    pub(crate) fn free_from(&mut self, ino: u64, from: u64) -> FsResult<()> {
        if self.inode(ino)?.d.extents.is_some() {
            return self.free_extents_from(ino, from);
        }
        let p = ptrs_per_block(self.alloc.geo.block_size);
        let mut freed = 0u64;
        let node = self.inode(ino)?;
        let mut direct = node.d.direct;
        let mut roots = node.d.indirect;
        for (i, ptr) in direct.iter_mut().enumerate() {
            if i as u64 >= from && *ptr != 0 {
                self.alloc.free_later(*ptr as u64, 1);
                *ptr = 0;
                freed += 1;
            }
        }
        let mut base = N_DIRECT as u64;
        let mut span = p;
        for (level, root) in roots.iter_mut().enumerate() {
            if *root != 0 && from < base + span {
                let keep = from.saturating_sub(base);
                if self.free_subtree(*root as u64, level, keep, span / p, &mut freed)? {
                    *root = 0;
                }
            }
            base += span;
            span *= p;
        }
        let node = self.inode(ino)?;
        node.d.direct = direct;
        node.d.indirect = roots;
        node.d.blocks = node.d.blocks.saturating_sub(freed);
        node.dirty = true;
        Ok(())
    }

    /// Frees entries at relative index >= `keep` below `blk` (each child covers `child_span`
    /// logical blocks). Returns true when `blk` itself was freed (nothing left in it).
    fn free_subtree(
        &mut self,
        blk: u64,
        level: usize,
        keep: u64,
        child_span: u64,
        freed: &mut u64,
    ) -> FsResult<bool> {
        let ptrs = self.load_ind(blk)?.ptrs.clone();
        let mut new = ptrs.clone();
        for (i, &c) in ptrs.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let lo = i as u64 * child_span;
            if lo + child_span <= keep {
                continue;
            }
            if level == 0 {
                self.alloc.free_later(c as u64, 1);
                *freed += 1;
                new[i] = 0;
            } else {
                let child_keep = keep.saturating_sub(lo);
                let p = ptrs_per_block(self.alloc.geo.block_size);
                if self.free_subtree(c as u64, level - 1, child_keep, child_span / p, freed)? {
                    new[i] = 0;
                }
            }
        }
        if new.iter().all(|p| *p == 0) {
            self.ind.remove(&blk);
            self.alloc.free_later(blk, 1);
            *freed += 1;
            return Ok(true);
        }
        let ib = self.load_ind(blk)?;
        if ib.ptrs != new {
            ib.ptrs = new;
            ib.dirty = true;
            self.ind_dirty.push(blk);
        }
        Ok(false)
    }
}
