//! The walker: [`Checker`] reads the tree from the root, breadth first, decoding every inode,
//! indirect, directory and xattr block it reaches; it claims each block (one claimed twice, or
//! outside the data area, is a finding), counts the links the entries make, and notes the
//! structural repairs `-y` would make ([`Fix`]). The orphans (allocated, unlinked, reached by
//! no entry) are walked after the tree.

use super::finding::Finding;
use super::layout::Layout;
use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::blockmap::{walk, MapVisitor};
use crate::format::extent::ExtNode;
use crate::format::{
    decode_indirect, Bounds, DirBlock, DiskInode, Geometry, GroupHeader, Superblock, XattrBlock,
    XattrHead, INODE_BYTES,
};
use std::collections::{HashMap, VecDeque};

pub(super) struct Checker<'a> {
    pub(super) dev: &'a dyn BlockDevice,
    pub(super) geo: Geometry,
    /// What pointers and sizes may be: an inode or block that breaks them is damaged.
    pub(super) bounds: Bounds,
    pub(super) headers: Vec<Option<GroupHeader>>,
    pub(super) used: Vec<bool>,
    pub(super) found: Vec<Finding>,
    /// Links counted from directory entries (plus "." and ".." for directories).
    pub(super) links: HashMap<u64, u32>,
    pub(super) inodes: HashMap<u64, DiskInode>,
    pub(super) files_count: u64,
    /// Blocks (data and indirect) claimed by the last `map_blocks`.
    pub(super) claimed_for_inode: u64,
    /// The journal's and the byte log's blocks: no inode may point into them.
    pub(super) journal: std::ops::Range<u64>,
    /// Block maps of the inodes byte-log records name (checked after the walk).
    pub(super) maps: HashMap<u64, Vec<(u64, u64)>>,
    /// What `fsck -y` will change besides the derived state.
    pub(super) fixes: Vec<Fix>,
    pub(super) layout: Layout,
}

/// A structural repair `salvage` applies (in `rebuild`). Where a directory block sits: (dir, index, block).
#[derive(Debug, Clone)]
pub(super) enum Fix {
    /// A directory block that does not decode becomes empty (its entries are lost).
    EmptyDirBlock { at: (u64, u64, u64) },
    /// An entry naming an invalid, free or damaged inode is removed. Entries are matched by
    /// name *and* inode: a damaged block may hold one name twice, and the other may be good.
    RemoveEntry {
        at: (u64, u64, u64),
        name: Vec<u8>,
        ino: u64,
    },
    /// An entry's type byte is set to its inode's type.
    EntryType {
        at: (u64, u64, u64),
        name: Vec<u8>,
        ino: u64,
        kind: u8,
    },
    /// A directory's parent field is set to the directory that lists it.
    Parent { ino: u64, parent: u64 },
    /// An inode's block count is set to the blocks found below it.
    Blocks { ino: u64, blocks: u64 },
    /// A directory's size is set to whole blocks.
    Size { ino: u64, size: u64 },
}

impl Checker<'_> {
    /// Group `g`'s `itable_init` after a repair: as found (all of the table when the header
    /// is damaged), raised to the end of the table block holding the last reached inode.
    pub(super) fn itable_init_after(&self, g: u32) -> u32 {
        let geo = self.geo;
        let first = g as u64 * geo.inodes_per_group as u64 + 1;
        let reached = self
            .inodes
            .keys()
            .filter(|&&i| (first..first + geo.inodes_per_group as u64).contains(&i))
            .map(|&i| (i - first + 1) as u32)
            .max()
            .unwrap_or(0);
        let ipb = geo.inodes_per_block();
        let stored = self.headers[g as usize]
            .as_ref()
            .map_or(geo.inodes_per_group, |h| h.itable_init);
        stored
            .max(reached.div_ceil(ipb) * ipb)
            .min(geo.inodes_per_group)
    }

    pub(super) fn read(&self, blk: u64) -> FsResult<Vec<u8>> {
        let mut buf = vec![0u8; self.geo.block_size as usize];
        self.dev
            .read_at(blk * self.geo.block_size as u64, &mut buf)?;
        Ok(buf)
    }

    pub(super) fn err(&mut self, f: Finding) {
        self.found.push(f);
    }

    pub(super) fn read_inode(&mut self, ino: u64) -> FsResult<Option<DiskInode>> {
        let geo = self.geo;
        let g = geo.group_of_inode(ino) as usize;
        let idx = geo.inode_index_in_group(ino);
        let init = self.headers[g]
            .as_ref()
            .map(|h| h.itable_init)
            .unwrap_or(u32::MAX);
        if idx >= init {
            return Ok(None);
        }
        let (blk, off) = geo.inode_location(ino);
        let buf = self.read(blk)?;
        match DiskInode::decode(&buf[off..off + INODE_BYTES], ino, blk, &self.bounds) {
            Ok(d) if d.is_free() => Ok(None),
            Ok(d) => Ok(Some(d)),
            Err(e) => {
                self.err(Finding::InodeDamaged {
                    ino,
                    detail: e.to_string(),
                });
                Ok(None)
            }
        }
    }

    /// Inodes allocated in the bitmaps that the walk did not reach and that have no links:
    /// files (or directories) unlinked while open when the image was left. Their blocks
    /// and xattrs are theirs until the next mount frees them (`reclaim_orphans`), and are
    /// checked as any file's. Damaged ones are left to `compare`, which reports them.
    pub(super) fn orphans(&mut self, bitmaps: &[(Vec<u8>, Vec<u8>)]) -> FsResult<Vec<u64>> {
        let geo = self.geo;
        let mut out = Vec::new();
        for g in 0..geo.group_count {
            let init = self.headers[g as usize]
                .as_ref()
                .map_or(0, |h| h.itable_init.min(geo.inodes_per_group));
            for i in 0..init as u64 {
                if bitmaps[g as usize].1[(i / 8) as usize] & (1 << (i % 8)) == 0 {
                    continue;
                }
                let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
                if self.inodes.contains_key(&ino) {
                    continue;
                }
                let (blk, off) = geo.inode_location(ino);
                let buf = self.read(blk)?;
                let d =
                    match DiskInode::decode(&buf[off..off + INODE_BYTES], ino, blk, &self.bounds) {
                        Ok(d) if !d.is_free() && d.nlink == 0 => d,
                        _ => continue,
                    };
                let mut map = self.map_blocks(ino, &d)?;
                map.sort_unstable();
                if let Some(m) = self.maps.get_mut(&ino) {
                    // byte-log records of the orphan: their blocks must still be its own
                    m.clone_from(&map);
                }
                let n = self.claimed_for_inode;
                let x = self.xattrs(ino, &d)?;
                self.check_inode_fields(ino, &d, n + x);
                self.inodes.insert(ino, d);
                out.push(ino);
            }
        }
        Ok(out)
    }

    /// Marks a block as used by `owner`; reports pointers outside the data area and blocks
    /// claimed twice.
    fn claim(&mut self, blk: u64, owner: u64) -> bool {
        let geo = self.geo;
        if blk >= geo.total_blocks
            || blk - geo.group_start(geo.group_of_block(blk)) < geo.meta_blocks() as u64
            || self.journal.contains(&blk)
        {
            self.err(Finding::PointerOutside {
                ino: owner,
                block: blk,
            });
            return false;
        }
        if self.used[blk as usize] {
            self.err(Finding::BlockUsedTwice {
                ino: owner,
                block: blk,
            });
            return false;
        }
        self.used[blk as usize] = true;
        self.claimed_for_inode += 1;
        true
    }

    /// Every mapped (logical index, block) of the inode, claiming data and indirect blocks
    /// (`format::blockmap::walk`; a block claimed before, or an indirect block that does
    /// not decode, is reported and not followed).
    fn map_blocks(&mut self, ino: u64, d: &DiskInode) -> FsResult<Vec<(u64, u64)>> {
        /// The walk's visitor: claims what it is told, reads and decodes indirect blocks.
        struct Claim<'a, 'c> {
            checker: &'a mut Checker<'c>,
            ino: u64,
            out: Vec<(u64, u64)>,
        }
        impl MapVisitor for Claim<'_, '_> {
            fn indirect(&mut self, blk: u64, _level: usize) -> FsResult<Option<Vec<u32>>> {
                let (c, ino) = (&mut *self.checker, self.ino);
                if !c.claim(blk, ino) {
                    return Ok(None);
                }
                let buf = c.read(blk)?;
                match decode_indirect(&buf, blk, &c.bounds) {
                    Ok(p) => Ok(Some(p)),
                    Err(e) => {
                        c.err(Finding::BlockDamaged {
                            ino,
                            detail: e.to_string(),
                        });
                        Ok(None)
                    }
                }
            }
            fn extent_block(&mut self, blk: u64, _depth: u16) -> FsResult<Option<ExtNode>> {
                let (c, ino) = (&mut *self.checker, self.ino);
                if !c.claim(blk, ino) {
                    return Ok(None);
                }
                let buf = c.read(blk)?;
                match ExtNode::decode_block(&buf, blk, &c.bounds) {
                    Ok(n) => Ok(Some(n)),
                    Err(e) => {
                        c.err(Finding::BlockDamaged {
                            ino,
                            detail: e.to_string(),
                        });
                        Ok(None)
                    }
                }
            }
            fn data(&mut self, logical: u64, physical: u64) {
                if self.checker.claim(physical, self.ino) {
                    self.out.push((logical, physical));
                }
            }
        }
        self.claimed_for_inode = 0;
        let bs = self.geo.block_size;
        let mut v = Claim {
            checker: self,
            ino,
            out: Vec::new(),
        };
        match walk(d, bs, &mut v) {
            Ok(()) => {}
            // a tree block that decodes but does not fit where it hangs (depth, range)
            Err(e @ FsError::Corrupt { .. }) => v.checker.err(Finding::BlockDamaged {
                ino,
                detail: e.to_string(),
            }),
            Err(e) => return Err(e),
        }
        Ok(v.out)
    }

    fn check_inode_fields(&mut self, ino: u64, d: &DiskInode, nblocks: u64) {
        let bs = self.geo.block_size as u64;
        let counted = nblocks;
        if d.blocks != counted {
            self.err(Finding::BlockCount {
                ino,
                stored: d.blocks,
                found: counted,
            });
            self.fixes.push(Fix::Blocks {
                ino,
                blocks: counted,
            });
        }
        if d.mode & libc::S_IFMT == libc::S_IFDIR {
            if !d.size.is_multiple_of(bs) {
                self.err(Finding::DirSize { ino, size: d.size });
            }
            // whole blocks, and (a rule of decode) no more of them than the inode will count
            let size = (d.size - d.size % bs).min(counted * bs);
            if size != d.size {
                self.fixes.push(Fix::Size { ino, size });
            }
        }
    }

    pub(super) fn walk(&mut self, sb: &Superblock) -> FsResult<()> {
        let mut queue = VecDeque::new();
        let root = sb.root_ino;
        let Some(rd) = self.read_inode(root)? else {
            self.err(Finding::RootDamaged);
            return Ok(());
        };
        if rd.mode & libc::S_IFMT != libc::S_IFDIR {
            self.err(Finding::RootNotDirectory);
            return Ok(());
        }
        self.inodes.insert(root, rd);
        *self.links.entry(root).or_default() += 2; // "." and the root's own ".."
        queue.push_back(root);
        while let Some(dir_ino) = queue.pop_front() {
            let d = self.inodes[&dir_ino].clone();
            let blocks = self.map_blocks(dir_ino, &d)?;
            let n = self.claimed_for_inode;
            let x = self.xattrs(dir_ino, &d)?;
            self.check_inode_fields(dir_ino, &d, n + x);
            for (idx, phys) in blocks {
                let buf = self.read(phys)?;
                let at = (dir_ino, idx, phys);
                let db = match DirBlock::decode(&buf, dir_ino, idx, phys) {
                    Ok(db) => db,
                    Err(e) => {
                        self.err(Finding::DirBlockUnreadable {
                            dir: dir_ino,
                            index: idx,
                            detail: e.to_string(),
                        });
                        self.fixes.push(Fix::EmptyDirBlock { at });
                        continue;
                    }
                };
                for e in db.entries {
                    self.entry(at, &e.name, e.ino, e.kind, &mut queue)?;
                }
            }
        }
        Ok(())
    }

    fn entry(
        &mut self,
        at: (u64, u64, u64),
        name: &[u8],
        ino: u64,
        kind: u8,
        queue: &mut VecDeque<u64>,
    ) -> FsResult<()> {
        let dir = at.0;
        let shown = String::from_utf8_lossy(name).into_owned();
        let remove = Fix::RemoveEntry {
            at,
            name: name.to_vec(),
            ino,
        };
        if !self.geo.valid_ino(ino) {
            self.err(Finding::EntryInvalidInode {
                dir,
                name: shown,
                ino,
            });
            self.fixes.push(remove);
            return Ok(());
        }
        if let Some(d) = self.inodes.get(&ino) {
            if d.mode & libc::S_IFMT == libc::S_IFDIR {
                self.err(Finding::SecondDirLink {
                    dir,
                    name: shown,
                    ino,
                });
                // a directory has one name: the one the walk met first stays
                self.fixes.push(remove);
            } else {
                *self.links.entry(ino).or_default() += 1;
            }
            return Ok(());
        }
        let Some(d) = self.read_inode(ino)? else {
            self.err(Finding::EntryFreeInode {
                dir,
                name: shown,
                ino,
            });
            self.fixes.push(remove);
            return Ok(());
        };
        let is_dir = d.mode & libc::S_IFMT == libc::S_IFDIR;
        let want = crate::fs::FileKind::from_mode(d.mode).map(|k| k.dirent_type());
        if want != Some(kind) {
            self.err(Finding::EntryType {
                dir,
                name: shown.clone(),
                kind,
                ino,
            });
            match want {
                Some(kind) => self.fixes.push(Fix::EntryType {
                    at,
                    name: name.to_vec(),
                    ino,
                    kind,
                }),
                None => {
                    // No valid type at all: treat the inode as damaged.
                    self.fixes.push(remove);
                    self.err(Finding::InodeDamaged {
                        ino,
                        detail: format!("mode {:#o}", d.mode),
                    });
                    return Ok(());
                }
            }
        }
        self.inodes.insert(ino, d.clone());
        *self.links.entry(ino).or_default() += 1;
        if is_dir {
            if d.parent != dir {
                self.err(Finding::WrongParent {
                    ino,
                    name: shown,
                    parent: d.parent,
                    listed_in: dir,
                });
                self.fixes.push(Fix::Parent { ino, parent: dir });
            }
            *self.links.entry(ino).or_default() += 1; // its "."
            *self.links.entry(dir).or_default() += 1; // its ".."
            queue.push_back(ino);
        } else {
            let mut map = self.map_blocks(ino, &d)?;
            map.sort_unstable();
            if let Some(m) = self.maps.get_mut(&ino) {
                m.clone_from(&map);
            }
            if d.mode & libc::S_IFMT == libc::S_IFREG {
                self.layout.add_file(&map);
            }
            let n = self.claimed_for_inode;
            let x = self.xattrs(ino, &d)?;
            self.check_inode_fields(ino, &d, n + x);
            self.files_count += 1;
        }
        Ok(())
    }

    /// Claims and checks the inode's xattr blocks; returns how many it points to.
    fn xattrs(&mut self, ino: u64, d: &DiskInode) -> FsResult<u64> {
        if d.xattr_block == 0 {
            return Ok(0);
        }
        let xb = d.xattr_block as u64;
        if !self.claim(xb, ino) {
            return Ok(1);
        }
        let buf = self.read(xb)?;
        match XattrBlock::decode_head(&buf, ino, xb, &self.bounds) {
            Err(e) => {
                self.err(Finding::BlockDamaged {
                    ino,
                    detail: e.to_string(),
                });
                Ok(1)
            }
            Ok(XattrHead::Single(_)) => Ok(1),
            Ok(XattrHead::Large {
                count,
                stream_len,
                cont,
                mut first,
            }) => {
                let mut whole = true;
                for (i, &c) in cont.iter().enumerate() {
                    if !self.claim(c, ino) {
                        whole = false;
                        continue;
                    }
                    let buf = self.read(c)?;
                    match XattrBlock::decode_cont(&buf, ino, i + 1, c) {
                        Ok(bytes) => first.extend_from_slice(bytes),
                        Err(e) => {
                            self.err(Finding::BlockDamaged {
                                ino,
                                detail: e.to_string(),
                            });
                            whole = false;
                        }
                    }
                }
                if whole {
                    first.truncate(stream_len);
                    if let Err(e) = XattrBlock::decode_stream(&first, count, xb) {
                        self.err(Finding::BlockDamaged {
                            ino,
                            detail: e.to_string(),
                        });
                    }
                }
                Ok(1 + cont.len() as u64)
            }
        }
    }
}
