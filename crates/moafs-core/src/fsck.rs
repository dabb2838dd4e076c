//! fsck and inspect: offline readers of an image that never trust what they read.
//!
//! `fsck` walks the tree from the root, decodes every inode, indirect, directory and xattr
//! block it reaches (checking each crc and the format's decode-time rules, `format::Bounds`),
//! and compares what it found with the bitmaps, the group counters and the link counts. Each
//! inconsistency is a [`Finding`]. With `repair` it rewrites the bitmaps, counters, link and
//! block counts from what is reachable, removes entries naming damaged or free inodes and
//! clears unreachable inodes — each finding's own repair ([`Finding::repair`]), unless one
//! says the walk is incomplete ([`Finding::blocks_repair`]). Damaged indirect and xattr
//! blocks themselves are not rebuilt (reported, exit code 4).

use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::{
    bitmap_crc, decode_indirect, ptrs_per_block, Bounds, DirBlock, DiskInode, Geometry,
    GroupHeader, Superblock, XattrBlock, XattrHead, INODE_BYTES, N_DIRECT, STATE_CLEAN,
};
use crate::fs::read_superblock;
use std::collections::{HashMap, VecDeque};

mod finding;
pub use finding::Finding;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FsckReport {
    /// Inconsistencies found (and not repaired).
    pub errors: Vec<Finding>,
    /// Inconsistencies found and repaired.
    pub repaired: Vec<Finding>,
    pub warnings: Vec<String>,
    /// Inodes without links that nothing names: files unlinked while open when the image
    /// was left (a crash or kill). Not an error: the next mount frees them.
    pub orphans: u64,
    pub files: u64,
    pub directories: u64,
    pub used_blocks: u64,
    /// Data layout of the regular files (Smith & Seltzer's layout score).
    pub layout: Layout,
    /// Free space as runs, from the block bitmaps as found.
    pub free_runs: FreeRuns,
    pub summary: String,
}

/// Smith & Seltzer's layout score: of every file's data blocks but its first (files of one
/// block left out), the share that directly follows the file's previous logical block on
/// the device. 1 = every file contiguous.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Layout {
    /// Files of two or more blocks.
    pub files: u64,
    /// Their blocks after the first.
    pub blocks: u64,
    /// Of those, the blocks right after their predecessor.
    pub contiguous: u64,
    /// `contiguous / blocks` (1 when there is nothing to score).
    pub score: f64,
}

impl Layout {
    /// Adds a file given as its mapped (logical index, block) pairs in logical order.
    pub fn add_file(&mut self, map: &[(u64, u64)]) {
        if map.len() < 2 {
            return;
        }
        self.files += 1;
        self.blocks += map.len() as u64 - 1;
        self.contiguous += map
            .windows(2)
            .filter(|w| w[1].0 == w[0].0 + 1 && w[1].1 == w[0].1 + 1)
            .count() as u64;
    }

    fn finish(&mut self) {
        self.score = if self.blocks == 0 {
            1.0
        } else {
            self.contiguous as f64 / self.blocks as f64
        };
    }
}

/// Free space as runs of free data blocks: how many runs of each size (power-of-two
/// buckets: `1`, `2-3`, `4-7` …) and the largest.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FreeRuns {
    pub free_blocks: u64,
    pub runs: u64,
    pub largest: u64,
    /// (smallest size of the bucket, runs in it), buckets with runs only.
    pub histogram: Vec<(u64, u64)>,
}

/// Free runs of one group's bitmap (bit set = used), data area `[from, to)`.
pub fn free_runs_in(bitmap: &[u8], from: u64, to: u64, acc: &mut FreeRuns) {
    for (_, len) in crate::fs::free_extents(bitmap, from, to) {
        acc.free_blocks += len;
        acc.runs += 1;
        acc.largest = acc.largest.max(len);
        let bucket = 1u64 << (63 - len.leading_zeros());
        match acc.histogram.iter_mut().find(|(b, _)| *b == bucket) {
            Some(e) => e.1 += 1,
            None => {
                acc.histogram.push((bucket, 1));
                acc.histogram.sort_unstable();
            }
        }
    }
}

/// The layout score of the files and the free-run histogram of `dev` (read only; a journal
/// that needs recovery is read as replayed, as `fsck -n` does).
pub fn layout(dev: &dyn BlockDevice) -> FsResult<(Layout, FreeRuns)> {
    let report = fsck(dev, false)?;
    Ok((report.layout, report.free_runs))
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.repaired.is_empty()
    }
    /// e2fsck's exit code: 0 clean, 1 errors corrected, 4 errors left uncorrected, both
    /// bits (5) when some were corrected and some left. (8, an operational error, is an
    /// `Err` from [`fsck`].)
    pub fn exit_code(&self) -> i32 {
        let corrected = if self.repaired.is_empty() { 0 } else { 1 };
        let left = if self.errors.is_empty() { 0 } else { 4 };
        corrected | left
    }
}

struct Checker<'a> {
    dev: &'a dyn BlockDevice,
    geo: Geometry,
    /// What pointers and sizes may be: an inode or block that breaks them is damaged.
    bounds: Bounds,
    headers: Vec<Option<GroupHeader>>,
    used: Vec<bool>,
    found: Vec<Finding>,
    /// Links counted from directory entries (plus "." and ".." for directories).
    links: HashMap<u64, u32>,
    inodes: HashMap<u64, DiskInode>,
    files_count: u64,
    /// Blocks (data and indirect) claimed by the last `map_blocks`.
    claimed_for_inode: u64,
    /// The journal's and the byte log's blocks: no inode may point into them.
    journal: std::ops::Range<u64>,
    /// Block maps of the inodes byte-log records name (checked after the walk).
    maps: HashMap<u64, Vec<(u64, u64)>>,
    /// What `fsck -y` will change besides the derived state.
    fixes: Vec<Fix>,
    layout: Layout,
}

/// A structural repair `rebuild` applies. Where a directory block sits: (dir, index, block).
#[derive(Debug, Clone)]
enum Fix {
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
    fn itable_init_after(&self, g: u32) -> u32 {
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

    fn read(&self, blk: u64) -> FsResult<Vec<u8>> {
        let mut buf = vec![0u8; self.geo.block_size as usize];
        self.dev
            .read_at(blk * self.geo.block_size as u64, &mut buf)?;
        Ok(buf)
    }

    fn err(&mut self, f: Finding) {
        self.found.push(f);
    }

    fn read_inode(&mut self, ino: u64) -> FsResult<Option<DiskInode>> {
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
    fn orphans(&mut self, bitmaps: &[(Vec<u8>, Vec<u8>)]) -> FsResult<Vec<u64>> {
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

    /// Every mapped (logical index, block) of the inode, claiming data and indirect blocks.
    fn map_blocks(&mut self, ino: u64, d: &DiskInode) -> FsResult<Vec<(u64, u64)>> {
        self.claimed_for_inode = 0;
        let mut out = Vec::new();
        for (i, &p) in d.direct.iter().enumerate() {
            if p != 0 && self.claim(p as u64, ino) {
                out.push((i as u64, p as u64));
            }
        }
        let p = ptrs_per_block(self.geo.block_size);
        let mut base = N_DIRECT as u64;
        let mut span = p;
        for (level, &root) in d.indirect.iter().enumerate() {
            if root != 0 {
                self.walk_ind(ino, root as u64, level, base, span / p, &mut out)?;
            }
            base += span;
            span *= p;
        }
        Ok(out)
    }

    fn walk_ind(
        &mut self,
        ino: u64,
        blk: u64,
        level: usize,
        base: u64,
        child_span: u64,
        out: &mut Vec<(u64, u64)>,
    ) -> FsResult<()> {
        if !self.claim(blk, ino) {
            return Ok(());
        }
        let buf = self.read(blk)?;
        let ptrs = match decode_indirect(&buf, blk, &self.bounds) {
            Ok(p) => p,
            Err(e) => {
                self.err(Finding::BlockDamaged {
                    ino,
                    detail: e.to_string(),
                });
                return Ok(());
            }
        };
        let p = ptrs_per_block(self.geo.block_size);
        for (i, &c) in ptrs.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let lo = base + i as u64 * child_span;
            if level == 0 {
                if self.claim(c as u64, ino) {
                    out.push((lo, c as u64));
                }
            } else {
                self.walk_ind(ino, c as u64, level - 1, lo, child_span / p, out)?;
            }
        }
        Ok(())
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

    fn walk(&mut self, sb: &Superblock) -> FsResult<()> {
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

/// Checks (and with `repair`, fixes) the file system on `dev`. A journal that needs replaying
/// is replayed first with `repair`; without it, the image is checked as the replay would leave
/// it (through an overlay; nothing is written).
pub fn fsck(dev: &dyn BlockDevice, repair: bool) -> FsResult<FsckReport> {
    fsck_with(dev, repair, None)
}

/// [`fsck`] of an image with an NVM tier (needed when records may be in it).
pub fn fsck_with(
    dev: &dyn BlockDevice,
    repair: bool,
    tier: Option<&dyn crate::device::Nvm>,
) -> FsResult<FsckReport> {
    let sb = read_superblock(dev)?;
    let mut notes = Vec::new();
    let mut targets = Vec::new();
    if sb.state != STATE_CLEAN && sb.has_journal() {
        if repair {
            let r = crate::fs::journal::replay_with(dev, &sb, tier)?;
            if r.transactions > 0 {
                // As a mount does: the floor past what was replayed, so that the next
                // replay does not apply those transactions again over the repairs below.
                let mut now = read_superblock(dev)?;
                if now.journal_seq < r.last_seq {
                    now.journal_seq = r.last_seq;
                    dev.write_at(0, &now.encode(now.block_size))?;
                    dev.flush()?;
                }
            }
            if r.transactions > 0 || r.bytelog.records > 0 {
                notes.push(format!(
                    "journal: replayed {} transaction(s) and {} byte-log record(s) ({} blocks)",
                    r.transactions,
                    r.bytelog.records,
                    r.blocks.len()
                ));
            }
            targets = r.bytelog.targets;
        } else {
            let r = crate::fs::journal::plan_replay_with(dev, &sb, tier)?;
            if r.transactions > 0 || r.bytelog.records > 0 {
                let view = crate::device::OverlayDevice::new(dev, sb.block_size, r.blocks);
                let mut report = check(&view, false, &r.bytelog.targets)?;
                report.warnings.push(format!(
                    "journal needs recovery ({} transaction(s), {} byte-log record(s)): \
                     checked as replayed",
                    r.transactions, r.bytelog.records
                ));
                return Ok(report);
            }
        }
    }
    let mut report = check(dev, repair, &targets)?;
    report.warnings.extend(notes);
    Ok(report)
}

/// `targets`: what the byte-log records replayed (or to be replayed) name: each must be a
/// live inode and, for file bytes, the block the inode maps at that index.
fn check(
    dev: &dyn BlockDevice,
    repair: bool,
    targets: &[crate::fs::RecordTarget],
) -> FsResult<FsckReport> {
    let sb = read_superblock(dev)?;
    let geo = Geometry::from_superblock(&sb);
    if dev.size() < geo.total_blocks * geo.block_size as u64 {
        return Err(FsError::corrupt(
            "superblock",
            0,
            "image is smaller than the file system",
        ));
    }
    let mut report = FsckReport::default();
    if sb.state != STATE_CLEAN {
        report
            .warnings
            .push("file system was not cleanly unmounted".into());
    }
    let mut ck = Checker {
        dev,
        geo,
        bounds: Bounds::from_superblock(&sb),
        headers: Vec::new(),
        used: vec![false; geo.total_blocks as usize],
        found: Vec::new(),
        links: HashMap::new(),
        inodes: HashMap::new(),
        files_count: 0,
        claimed_for_inode: 0,
        journal: sb.log_range(),
        maps: targets.iter().map(|t| (t.ino, Vec::new())).collect(),
        fixes: Vec::new(),
        layout: Layout::default(),
    };
    let mut bitmaps = Vec::new();
    for g in 0..geo.group_count {
        let hblk = geo.header_block(g);
        let hdr = match GroupHeader::decode(&ck.read(hblk)?, hblk, g) {
            Ok(h) => Some(h),
            Err(e) => {
                ck.err(Finding::GroupHeader {
                    group: g,
                    detail: e.to_string(),
                });
                None
            }
        };
        let bs = geo.block_size as u64;
        let mut bm = vec![0u8; (geo.bitmap_blocks as u64 * bs) as usize];
        dev.read_at(geo.bitmap_block(g) * bs, &mut bm)?;
        // metadata blocks (and the journal, in group 0) are marked used in the bitmap
        free_runs_in(
            &bm,
            geo.meta_blocks() as u64,
            geo.group_len(g) as u64,
            &mut report.free_runs,
        );
        let mut ibm = vec![0u8; (geo.ibitmap_blocks as u64 * bs) as usize];
        dev.read_at(geo.ibitmap_block(g) * bs, &mut ibm)?;
        if let Some(h) = &hdr {
            if bitmap_crc(&bm, g) != h.bitmap_crc {
                ck.err(Finding::BitmapChecksum {
                    group: g,
                    inodes: false,
                });
            }
            if bitmap_crc(&ibm, g) != h.ibitmap_crc {
                ck.err(Finding::BitmapChecksum {
                    group: g,
                    inodes: true,
                });
            }
        }
        for i in 0..geo.meta_blocks() as u64 {
            let b = geo.group_start(g) + i;
            if b < geo.total_blocks {
                ck.used[b as usize] = true;
            }
        }
        if g == 0 {
            for b in sb.log_range() {
                ck.used[b as usize] = true;
            }
        }
        ck.headers.push(hdr);
        bitmaps.push((bm, ibm));
    }
    // read_superblock falls back to a backup: say so when the primary is damaged.
    let mut primary = vec![0u8; geo.block_size as usize];
    dev.read_at(0, &mut primary)?;
    if let Err(e) = crate::format::Superblock::decode(&primary, 0) {
        ck.err(Finding::PrimarySuperblock {
            detail: e.to_string(),
        });
    }
    for g in geo.backup_groups() {
        let b = geo.group_start(g);
        let mut buf = vec![0u8; geo.block_size as usize];
        dev.read_at(b * geo.block_size as u64, &mut buf)?;
        if let Err(e) = crate::format::Superblock::decode(&buf, b) {
            ck.err(Finding::BackupSuperblock {
                group: g,
                detail: e.to_string(),
            });
        }
    }
    ck.walk(&sb)?;
    let orphans = ck.orphans(&bitmaps)?;
    if !orphans.is_empty() {
        report.orphans = orphans.len() as u64;
        report.warnings.push(format!(
            "{} orphan inode(s) (unlinked while open when the image was left: {:?}); the next \
             mount frees them",
            orphans.len(),
            &orphans[..orphans.len().min(10)]
        ));
    }
    for t in targets {
        if !ck.inodes.contains_key(&t.ino) {
            ck.err(Finding::RecordUnlisted {
                seq: t.seq,
                ino: t.ino,
            });
        } else if let Some((idx, home)) = t.block {
            if ck.maps[&t.ino].binary_search(&(idx, home)).is_err() {
                ck.err(Finding::RecordUnmapped {
                    seq: t.seq,
                    ino: t.ino,
                    index: idx,
                    home,
                });
            }
        }
    }
    // Free slots in the initialised part of each inode table must be empty or a valid free
    // inode (a freed slot keeps its generation under a crc).
    for g in 0..geo.group_count {
        let Some(h) = ck.headers[g as usize].clone() else {
            continue;
        };
        let ibm = &bitmaps[g as usize].1;
        let mut cur = (u64::MAX, Vec::new());
        for i in 0..h.itable_init.min(geo.inodes_per_group) as u64 {
            if ibm[(i / 8) as usize] & (1 << (i % 8)) != 0 {
                continue;
            }
            let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
            let (blk, off) = geo.inode_location(ino);
            if cur.0 != blk {
                cur = (blk, ck.read(blk)?);
            }
            let slot = &cur.1[off..off + INODE_BYTES];
            if slot.iter().all(|b| *b == 0) {
                continue;
            }
            match DiskInode::decode(slot, ino, blk, &ck.bounds) {
                Ok(d) if d.is_free() => {}
                Ok(_) => ck.err(Finding::FreeSlotInUse { ino }),
                Err(e) => ck.err(Finding::FreeSlotDamaged {
                    ino,
                    detail: e.to_string(),
                }),
            }
        }
    }
    compare(&mut ck, &bitmaps, &mut report)?;
    let found = std::mem::take(&mut ck.found);
    let used = ck.used.iter().filter(|u| **u).count() as u64;
    report.used_blocks = used;
    report.directories = ck
        .inodes
        .values()
        .filter(|d| d.mode & libc::S_IFMT == libc::S_IFDIR)
        .count() as u64;
    report.files = ck.files_count;
    ck.layout.finish();
    report.layout = ck.layout;
    // Repair per finding, unless one says the walk could not account for everything
    // (`Finding::blocks_repair`): then nothing is changed.
    if repair && !found.is_empty() && !found.iter().any(Finding::blocks_repair) {
        rebuild(&mut ck, &sb)?;
        let (fixed, left) = found.into_iter().partition(|f| f.repair().is_some());
        report.repaired = fixed;
        report.errors = left;
    } else {
        report.errors = found;
    }
    report.summary = format!(
        "{} directories, {} files, {} of {} blocks used, {} error(s), {} repaired",
        report.directories,
        report.files,
        used,
        geo.total_blocks,
        report.errors.len(),
        report.repaired.len()
    );
    Ok(report)
}

fn compare(
    ck: &mut Checker<'_>,
    bitmaps: &[(Vec<u8>, Vec<u8>)],
    report: &mut FsckReport,
) -> FsResult<()> {
    let geo = ck.geo;
    for g in 0..geo.group_count {
        let (bm, ibm) = &bitmaps[g as usize];
        let start = geo.group_start(g);
        let mut free = 0u32;
        let mut leaked = 0u64;
        let mut missing = 0u64;
        for i in 0..geo.group_len(g) as u64 {
            let on = bm[(i / 8) as usize] & (1 << (i % 8)) != 0;
            let used = ck.used[(start + i) as usize];
            if !on {
                free += 1;
            }
            if on && !used {
                leaked += 1;
            }
            if used && !on {
                missing += 1;
            }
        }
        if leaked > 0 {
            ck.err(Finding::BlocksLeaked {
                group: g,
                count: leaked,
            });
        }
        if missing > 0 {
            ck.err(Finding::BlocksMarkedFree {
                group: g,
                count: missing,
            });
        }
        let mut ifree = 0u32;
        for i in 0..geo.inodes_per_group as u64 {
            let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
            let on = ibm[(i / 8) as usize] & (1 << (i % 8)) != 0;
            let reached = ck.inodes.contains_key(&ino);
            if !on {
                ifree += 1;
            }
            if reached && !on {
                ck.err(Finding::InodeMarkedFree { ino });
            }
            if on && !reached {
                let what = match ck.read_inode(ino)? {
                    Some(d) => Finding::Unreachable {
                        ino,
                        nlink: d.nlink,
                    },
                    None => Finding::MarkedButFree { ino },
                };
                ck.err(what);
            }
        }
        if let Some(h) = ck.headers[g as usize].clone() {
            if h.free_blocks != free {
                ck.err(Finding::FreeBlocksCount {
                    group: g,
                    stored: h.free_blocks,
                    found: free,
                });
            }
            if h.dirs > geo.inodes_per_group {
                ck.err(Finding::DirCount {
                    group: g,
                    stored: h.dirs,
                });
            }
            if h.free_inodes != ifree {
                ck.err(Finding::FreeInodesCount {
                    group: g,
                    stored: h.free_inodes,
                    found: ifree,
                });
            }
        }
    }
    let mut bad_links = Vec::new();
    for (ino, d) in &ck.inodes {
        let counted = ck.links.get(ino).copied().unwrap_or(0);
        if d.nlink != counted {
            bad_links.push(Finding::LinkCount {
                ino: *ino,
                stored: d.nlink,
                found: counted,
            });
        }
    }
    bad_links.sort_by_key(|f| match f {
        Finding::LinkCount { ino, .. } => *ino,
        _ => 0,
    });
    ck.found.extend(bad_links);
    let _ = report;
    Ok(())
}

/// Rewrites bitmaps, group counters and link counts from what the walk reached.
/// Applies the structural fixes: directory blocks rewritten, parents corrected, and every
/// inode slot the walk did not reach emptied (damaged or orphaned inodes; their blocks become
/// free with the bitmaps rebuilt below).
fn salvage(ck: &mut Checker<'_>) -> FsResult<()> {
    let geo = ck.geo;
    let bs = geo.block_size as u64;
    let mut blocks: std::collections::BTreeMap<(u64, u64, u64), DirBlock> = Default::default();
    for fix in ck.fixes.clone() {
        let at = match &fix {
            Fix::EmptyDirBlock { at } | Fix::RemoveEntry { at, .. } | Fix::EntryType { at, .. } => {
                *at
            }
            Fix::Blocks { ino, blocks } => {
                if let Some(d) = ck.inodes.get_mut(ino) {
                    d.blocks = *blocks; // written by `rebuild` with the link counts
                }
                continue;
            }
            Fix::Size { ino, size } => {
                if let Some(d) = ck.inodes.get_mut(ino) {
                    d.size = *size;
                }
                continue;
            }
            Fix::Parent { ino, parent } => {
                let (blk, off) = geo.inode_location(*ino);
                let mut buf = ck.read(blk)?;
                if let Ok(mut d) =
                    DiskInode::decode(&buf[off..off + INODE_BYTES], *ino, blk, &ck.bounds)
                {
                    d.parent = *parent;
                    d.encode_into(&mut buf[off..off + INODE_BYTES], *ino);
                    ck.dev.write_at(blk * bs, &buf)?;
                }
                // the link-count fix re-encodes the inode from here: keep the parent
                if let Some(d) = ck.inodes.get_mut(ino) {
                    d.parent = *parent;
                }
                continue;
            }
        };
        let db = match blocks.entry(at) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let buf = ck.read(at.2)?;
                v.insert(DirBlock::decode(&buf, at.0, at.1, at.2).unwrap_or_default())
            }
        };
        match fix {
            Fix::EmptyDirBlock { .. } => db.entries.clear(),
            Fix::RemoveEntry { name, ino, .. } => {
                db.entries.retain(|e| e.name != name || e.ino != ino)
            }
            Fix::EntryType {
                name, ino, kind, ..
            } => {
                for e in db
                    .entries
                    .iter_mut()
                    .filter(|e| e.name == name && e.ino == ino)
                {
                    e.kind = kind;
                }
            }
            Fix::Parent { .. } | Fix::Blocks { .. } | Fix::Size { .. } => {}
        }
    }
    for ((dir, idx, phys), db) in blocks {
        ck.dev
            .write_at(phys * bs, &db.encode(dir, idx, geo.block_size))?;
    }
    for g in 0..geo.group_count {
        // up to the table's initialised end as `rebuild` writes it: a slot it brings in
        // (a header that said less than the reached inodes need) must not keep old bytes
        let init = ck.itable_init_after(g);
        for i in 0..init as u64 {
            let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
            if ck.inodes.contains_key(&ino) {
                continue;
            }
            let (blk, off) = geo.inode_location(ino);
            let mut buf = ck.read(blk)?;
            if buf[off..off + INODE_BYTES].iter().any(|b| *b != 0) {
                let free = matches!(
                    DiskInode::decode(&buf[off..off + INODE_BYTES], ino, blk, &ck.bounds),
                    Ok(d) if d.is_free()
                );
                if !free {
                    buf[off..off + INODE_BYTES].fill(0);
                    ck.dev.write_at(blk * bs, &buf)?;
                }
            }
        }
    }
    Ok(())
}

fn rebuild(ck: &mut Checker<'_>, sb: &Superblock) -> FsResult<()> {
    salvage(ck)?;
    let geo = ck.geo;
    let bs = geo.block_size as u64;
    let mut free_blocks = 0u64;
    let mut free_inodes = 0u64;
    let inodes: Vec<(u64, DiskInode)> = ck.inodes.iter().map(|(i, d)| (*i, d.clone())).collect();
    for (ino, mut d) in inodes {
        // link counts here, block counts, sizes and parents from `salvage`'s fixes
        d.nlink = ck.links.get(&ino).copied().unwrap_or(0);
        let (blk, off) = geo.inode_location(ino);
        let mut buf = ck.read(blk)?;
        let slot = &mut buf[off..off + INODE_BYTES];
        if DiskInode::decode_unchecked(slot, ino, blk).ok().as_ref() != Some(&d) {
            d.encode_into(slot, ino);
            ck.dev.write_at(blk * bs, &buf)?;
        }
    }
    for g in 0..geo.group_count {
        let start = geo.group_start(g);
        let mut bm = vec![0xffu8; (geo.bitmap_blocks as u64 * bs) as usize];
        let mut free = 0;
        for i in 0..geo.group_len(g) as u64 {
            if !ck.used[(start + i) as usize] {
                bm[(i / 8) as usize] &= !(1 << (i % 8));
                free += 1;
            }
        }
        let mut ibm = vec![0xffu8; (geo.ibitmap_blocks as u64 * bs) as usize];
        let mut ifree = 0;
        let mut init = 0;
        for i in 0..geo.inodes_per_group as u64 {
            let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
            if ck.inodes.contains_key(&ino) {
                init = i as u32 + 1;
            } else {
                ibm[(i / 8) as usize] &= !(1 << (i % 8));
                ifree += 1;
            }
        }
        let mut hdr = ck.headers[g as usize].clone().unwrap_or_default();
        hdr.group = g;
        hdr.free_blocks = free;
        hdr.free_inodes = ifree;
        debug_assert!(init <= ck.itable_init_after(g));
        hdr.itable_init = ck.itable_init_after(g);
        hdr.dirs = ck
            .inodes
            .iter()
            .filter(|(i, d)| geo.group_of_inode(**i) == g && d.mode & libc::S_IFMT == libc::S_IFDIR)
            .count() as u32;
        hdr.bitmap_crc = bitmap_crc(&bm, g);
        hdr.ibitmap_crc = bitmap_crc(&ibm, g);
        ck.dev.write_at(geo.bitmap_block(g) * bs, &bm)?;
        ck.dev.write_at(geo.ibitmap_block(g) * bs, &ibm)?;
        ck.dev.write_at(
            geo.header_block(g) * bs,
            &hdr.encode(geo.header_block(g), geo.block_size),
        )?;
        free_blocks += free as u64;
        free_inodes += ifree as u64;
    }
    let mut sb = sb.clone();
    sb.free_blocks = free_blocks;
    sb.free_inodes = free_inodes;
    let bytes = sb.encode(geo.block_size);
    ck.dev.write_at(0, &bytes)?;
    for g in geo.backup_groups() {
        ck.dev.write_at(geo.group_start(g) * bs, &bytes)?;
    }
    ck.dev.flush()?;
    Ok(())
}

/// What `moafs inspect` prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InspectReport {
    pub format_version: u32,
    pub block_size: u32,
    pub total_blocks: u64,
    pub size_bytes: u64,
    pub group_count: u32,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub meta_blocks_per_group: u32,
    pub state: &'static str,
    pub mount_count: u32,
    pub uuid: String,
    pub label: String,
    pub free_blocks: u64,
    pub free_inodes: u64,
    pub total_inodes: u64,
    pub data_blocks: u64,
    /// Transactions a mount would replay (not clean, with a journal): the report shows the
    /// image as that replay leaves it (lazy checkpoints keep the newest metadata in the
    /// journal); `journal_error` when the journal cannot be read or replayed (the report then
    /// shows the blocks at home).
    pub journal_replay: Option<usize>,
    pub journal_error: Option<String>,
    /// The byte log, if the image has one.
    pub bytelog: Option<ByteLogInfo>,
    pub groups: Vec<GroupInfo>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ByteLogInfo {
    pub start_block: u64,
    pub blocks: u32,
    /// Records up to this sequence number are home but for homeless blocks' (whose records
    /// are read from `first` on); live records begin at this sector.
    pub floor: u64,
    pub first: u64,
    pub tail_sector: u32,
    /// Records that count found in the log (a mount would apply them after the journal;
    /// only an image not cleanly unmounted has any), and records found that do not (void,
    /// or of a commit that is not durable).
    pub live_records: Option<usize>,
    pub void_records: Option<usize>,
    pub error: Option<String>,
    /// The NVM tier the byte log uses (its path when last mounted, uuid, size, tail).
    pub nvm_path: Option<String>,
    pub nvm_uuid: Option<String>,
    pub nvm_size: Option<u64>,
    pub nvm_tail: Option<u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupInfo {
    pub group: u32,
    pub start_block: u64,
    pub blocks: u32,
    pub free_blocks: Option<u32>,
    pub free_inodes: Option<u32>,
    pub dirs: Option<u32>,
    pub error: Option<String>,
}

/// Decodes as much as it can; never writes.
pub fn inspect(dev: &dyn BlockDevice) -> FsResult<InspectReport> {
    inspect_with(dev, None)
}

/// [`inspect`] with the image's NVM tier (its live records are counted too).
pub fn inspect_with(
    dev: &dyn BlockDevice,
    tier: Option<&dyn crate::device::Nvm>,
) -> FsResult<InspectReport> {
    let home = read_superblock(dev)?;
    let (mut journal_replay, mut journal_error) = (None, None);
    let mut blocks = std::collections::BTreeMap::new();
    if home.state != STATE_CLEAN && home.has_journal() {
        match crate::fs::journal::plan_journal_replay(dev, &home) {
            Ok(r) => {
                journal_replay = Some(r.transactions);
                blocks = r.blocks;
            }
            Err(e) => journal_error = Some(e.to_string()),
        }
    }
    let view = crate::device::OverlayDevice::new(dev, home.block_size, blocks);
    let dev: &dyn BlockDevice = &view;
    let sb = read_superblock(dev)?;
    let geo = Geometry::from_superblock(&sb);
    let bs = geo.block_size as u64;
    let mut groups = Vec::new();
    for g in 0..geo.group_count {
        let hblk = geo.header_block(g);
        let mut buf = vec![0u8; bs as usize];
        let hdr = dev
            .read_at(hblk * bs, &mut buf)
            .map_err(FsError::from)
            .and_then(|_| GroupHeader::decode(&buf, hblk, g));
        let (fb, fi, dirs, error) = match hdr {
            Ok(h) => (Some(h.free_blocks), Some(h.free_inodes), Some(h.dirs), None),
            Err(e) => (None, None, None, Some(e.to_string())),
        };
        groups.push(GroupInfo {
            group: g,
            start_block: geo.group_start(g),
            blocks: geo.group_len(g),
            free_blocks: fb,
            free_inodes: fi,
            dirs,
            error,
        });
    }
    let hex = crate::format::hex(&sb.uuid);
    let label_end = sb.label.iter().position(|b| *b == 0).unwrap_or(32);
    Ok(InspectReport {
        format_version: sb.format_version,
        block_size: sb.block_size,
        total_blocks: sb.total_blocks,
        size_bytes: sb.total_blocks * bs,
        group_count: geo.group_count,
        blocks_per_group: geo.blocks_per_group,
        inodes_per_group: geo.inodes_per_group,
        meta_blocks_per_group: geo.meta_blocks(),
        state: if sb.state == STATE_CLEAN {
            "clean"
        } else {
            "not clean (mounted or crashed)"
        },
        mount_count: sb.mount_count,
        uuid: hex,
        label: String::from_utf8_lossy(&sb.label[..label_end]).into_owned(),
        free_blocks: groups
            .iter()
            .filter_map(|g| g.free_blocks)
            .map(|x| x as u64)
            .sum(),
        free_inodes: groups
            .iter()
            .filter_map(|g| g.free_inodes)
            .map(|x| x as u64)
            .sum(),
        total_inodes: geo.total_inodes(),
        data_blocks: geo.data_blocks(),
        journal_replay,
        journal_error,
        bytelog: sb.has_bytelog().then(|| {
            // a clean image has every record home (its floor covers them)
            let live = if sb.state == STATE_CLEAN {
                Ok(Default::default())
            } else {
                crate::fs::read_live_records(dev, &sb, tier)
            };
            ByteLogInfo {
                start_block: sb.bytelog_start,
                blocks: sb.bytelog_blocks,
                floor: sb.bytelog_floor,
                first: sb.bytelog_first,
                tail_sector: sb.bytelog_tail,
                live_records: live.as_ref().ok().map(|l| l.records.len()),
                void_records: live.as_ref().ok().map(|l| l.voided + l.uncommitted),
                error: live.err().map(|e| e.to_string()),
                nvm_path: sb.has_nvm().then(|| sb.nvm_path.clone()),
                nvm_uuid: sb.has_nvm().then(|| crate::format::hex(&sb.nvm_uuid)),
                nvm_size: sb.has_nvm().then_some(sb.nvm_size),
                nvm_tail: sb.has_nvm().then_some(sb.nvm_tail),
            }
        }),
        groups,
    })
}
