//! mkfs: lays out an empty file system with a root directory.

use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::extent::ExtNode;
use crate::format::{
    bitmap_crc, DiskInode, Geometry, GroupHeader, Superblock, FEATURE_BYTELOG, FEATURE_EXTENTS,
    FEATURE_JOURNAL, FORMAT_VERSION, FORMAT_VERSION_POINTERS, INODE_BYTES, STATE_CLEAN,
};
use crate::fs::Timespec;

#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// 4096 or 16384.
    pub block_size: u32,
    /// Number of allocation groups (None: one group per `8 * block_size` blocks).
    pub groups: Option<u32>,
    /// Bytes of space per inode (16 KiB, as ext4).
    pub bytes_per_inode: u64,
    pub label: String,
    /// Journal size in blocks (None: 1/64 of the image, 64 to 16384 blocks; Some(0): none).
    pub journal_blocks: Option<u32>,
    /// Byte-log size in blocks (None: 1/8 of the journal, 16 to 2048 blocks; Some(0): none).
    /// Needs a journal.
    pub bytelog_blocks: Option<u32>,
    /// Size of the file system in bytes (None: the whole device): it takes the device's
    /// first `size_bytes` bytes, at most all of them (`mkfs --size` on a block device or a
    /// larger image, as `mkfs.ext4 DEV BLOCKS`).
    pub size_bytes: Option<u64>,
    /// Block maps of pointers (a version-2 image, FORMAT.md section 5) instead of extents
    /// (version 3, section 6a).
    pub pointer_maps: bool,
    /// Owner and group of the root directory (mke2fs's `root_owner`; `moafs mkfs` gives the
    /// invoking user's, so that a user's own image is writable at its mount).
    pub root_owner: (u32, u32),
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            block_size: 4096,
            groups: None,
            bytes_per_inode: 16384,
            label: String::new(),
            journal_blocks: None,
            bytelog_blocks: None,
            size_bytes: None,
            pointer_maps: false,
            root_owner: (0, 0),
        }
    }
}

/// Smallest image mkfs accepts.
pub const MIN_IMAGE_BYTES: u64 = 1 << 20;

/// Chooses the layout for a device of `size_bytes`.
pub fn plan(size_bytes: u64, opts: &MkfsOptions) -> FsResult<Geometry> {
    let bs = opts.block_size;
    if bs != 4096 && bs != 16384 {
        return Err(FsError::invalid(format!(
            "block size {bs} is not 4096 or 16384"
        )));
    }
    if size_bytes < MIN_IMAGE_BYTES {
        return Err(FsError::invalid(format!(
            "image of {size_bytes} bytes is too small: moafs needs at least {MIN_IMAGE_BYTES} bytes"
        )));
    }
    let mut total = size_bytes / bs as u64;
    if total > 1u64 << 32 {
        return Err(FsError::invalid(format!(
            "{size_bytes} bytes is more than 2^32 blocks of {bs} bytes; use --block-size 16384 (up to 64 TiB)"
        )));
    }
    let bpg: u64 = match opts.groups {
        Some(0) => return Err(FsError::invalid("--groups must be at least 1")),
        Some(n) => total.div_ceil(n as u64),
        None => total.min(bs as u64 * 8),
    };
    if bpg < 64 {
        return Err(FsError::invalid(format!(
            "{bpg} blocks per group is too few (at least 64)"
        )));
    }
    let bpg = bpg.min(u32::MAX as u64) as u32;
    let ipb = bs / INODE_BYTES as u32;
    let per_group_bytes = bpg as u64 * bs as u64;
    let ipg = (per_group_bytes / opts.bytes_per_inode.max(1024))
        .clamp(ipb as u64, (bpg as u64 / 4) * ipb as u64);
    let ipg = (ipg.div_ceil(ipb as u64) * ipb as u64) as u32;
    let mut geo = Geometry::new(bs, total, bpg, ipg);
    // A last group too small to hold its metadata and some data is dropped.
    let last = geo.group_count - 1;
    if last > 0 && geo.group_len(last) < geo.meta_blocks() + 16 {
        total = geo.group_start(last);
        geo = Geometry::new(bs, total, bpg, ipg);
    }
    if geo.group_len(0) < geo.meta_blocks() + 16 {
        return Err(FsError::invalid("image too small for one allocation group"));
    }
    Ok(geo)
}

/// Journal blocks for `geo` (placed in group 0 right after its metadata).
pub fn plan_journal(geo: &Geometry, opts: &MkfsOptions) -> FsResult<u32> {
    let room = (geo.group_len(0) - geo.meta_blocks()).saturating_sub(16) as u64;
    let want = match opts.journal_blocks {
        Some(n) => n as u64,
        None => (geo.total_blocks / 64).clamp(64, 16384).min(room / 2),
    };
    if want == 0 {
        return Ok(0);
    }
    if want < 32 || want > room {
        return Err(FsError::invalid(format!(
            "a journal of {want} blocks does not fit (32 to {room} blocks here)"
        )));
    }
    Ok(want as u32)
}

/// Byte-log blocks for `geo` (placed in group 0 right after the journal).
pub fn plan_bytelog(geo: &Geometry, journal_blocks: u32, opts: &MkfsOptions) -> FsResult<u32> {
    let room = (geo.group_len(0) - geo.meta_blocks())
        .saturating_sub(16)
        .saturating_sub(journal_blocks) as u64;
    let want = match opts.bytelog_blocks {
        Some(n) => n as u64,
        None if journal_blocks == 0 => 0,
        None => (journal_blocks as u64 / 8).clamp(16, 2048).min(room / 2),
    };
    if want == 0 {
        return Ok(0);
    }
    if journal_blocks == 0 {
        return Err(FsError::invalid("a byte log needs a journal"));
    }
    if want < 2 || want > room {
        return Err(FsError::invalid(format!(
            "a byte log of {want} blocks does not fit (2 to {room} blocks here)"
        )));
    }
    Ok(want as u32)
}

/// Creates an empty moafs on `dev`.
pub fn mkfs(dev: &dyn BlockDevice, opts: &MkfsOptions) -> FsResult<Superblock> {
    let size = match opts.size_bytes {
        Some(s) if s > dev.size() => {
            return Err(FsError::invalid(format!(
                "a file system of {s} bytes does not fit on a device of {} bytes",
                dev.size()
            )))
        }
        Some(s) => s,
        None => dev.size(),
    };
    let geo = plan(size, opts)?;
    let journal_blocks = plan_journal(&geo, opts)?;
    let journal_start = if journal_blocks > 0 {
        geo.meta_blocks() as u64
    } else {
        0
    };
    let bytelog_blocks = plan_bytelog(&geo, journal_blocks, opts)?;
    let bytelog_start = if bytelog_blocks > 0 {
        journal_start + journal_blocks as u64
    } else {
        0
    };
    // The journal and the byte log, in use in group 0's bitmap.
    let logs = journal_start..journal_start + journal_blocks as u64 + bytelog_blocks as u64;
    let bs = geo.block_size as u64;
    let now = Timespec::now();
    let mut uuid = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut uuid[..]);
    let mut label = [0u8; 32];
    let lb = opts.label.as_bytes();
    if lb.len() > 32 {
        return Err(FsError::invalid("label longer than 32 bytes"));
    }
    label[..lb.len()].copy_from_slice(lb);

    // Root directory: inode 1, group 0, empty (no blocks yet).
    let root = DiskInode {
        mode: libc::S_IFDIR | 0o755,
        uid: opts.root_owner.0,
        gid: opts.root_owner.1,
        nlink: 2,
        atime: now.pair(),
        mtime: now.pair(),
        ctime: now.pair(),
        crtime: now.pair(),
        generation: 1,
        parent: 1,
        extents: (!opts.pointer_maps).then(ExtNode::default),
        ..Default::default()
    };
    let mut free_blocks = 0u64;
    let mut free_inodes = 0u64;
    for g in 0..geo.group_count {
        let len = geo.group_len(g);
        let meta = geo.meta_blocks();
        let mut bitmap = vec![0u8; (geo.bitmap_blocks as u64 * bs) as usize];
        for i in 0..(geo.bitmap_blocks as u64 * bs * 8) {
            // metadata blocks and bits past the end of the group are "in use"
            let journal = g == 0 && journal_blocks > 0 && logs.contains(&i);
            if i < meta as u64 || i >= len as u64 || journal {
                bitmap[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
        let mut ibitmap = vec![0u8; (geo.ibitmap_blocks as u64 * bs) as usize];
        for i in geo.inodes_per_group as u64..(geo.ibitmap_blocks as u64 * bs * 8) {
            ibitmap[(i / 8) as usize] |= 1 << (i % 8);
        }
        let mut hdr = GroupHeader {
            group: g,
            free_blocks: len - meta,
            free_inodes: geo.inodes_per_group,
            ..Default::default()
        };
        if g == 0 {
            hdr.free_blocks -= journal_blocks + bytelog_blocks;
            ibitmap[0] |= 1;
            hdr.free_inodes -= 1;
            hdr.dirs = 1;
            hdr.itable_init = geo.inodes_per_block();
            let mut itb = vec![0u8; bs as usize];
            root.encode_into(&mut itb[..INODE_BYTES], 1);
            dev.write_at(geo.itable_block(0) * bs, &itb)?;
        }
        hdr.bitmap_crc = bitmap_crc(&bitmap, g);
        hdr.ibitmap_crc = bitmap_crc(&ibitmap, g);
        dev.write_at(geo.bitmap_block(g) * bs, &bitmap)?;
        dev.write_at(geo.ibitmap_block(g) * bs, &ibitmap)?;
        dev.write_at(
            geo.header_block(g) * bs,
            &hdr.encode(geo.header_block(g), geo.block_size),
        )?;
        free_blocks += hdr.free_blocks as u64;
        free_inodes += hdr.free_inodes as u64;
    }
    let sb = Superblock {
        format_version: if opts.pointer_maps {
            FORMAT_VERSION_POINTERS
        } else {
            FORMAT_VERSION
        },
        block_size: geo.block_size,
        total_blocks: geo.total_blocks,
        blocks_per_group: geo.blocks_per_group,
        inodes_per_group: geo.inodes_per_group,
        uuid,
        created_sec: now.sec as u64,
        mount_count: 0,
        state: STATE_CLEAN,
        free_blocks,
        free_inodes,
        root_ino: 1,
        features_compat: 0,
        features_incompat: if journal_blocks > 0 {
            FEATURE_JOURNAL
        } else {
            0
        } | if bytelog_blocks > 0 {
            FEATURE_BYTELOG
        } else {
            0
        } | if opts.pointer_maps {
            0
        } else {
            FEATURE_EXTENTS
        },
        features_ro_compat: 0,
        label,
        last_write_sec: now.sec as u64,
        journal_start,
        journal_blocks,
        journal_seq: 0,
        bytelog_start,
        bytelog_blocks,
        bytelog_tail: 0,
        bytelog_floor: 0,
        bytelog_first: 0,
        nvm_uuid: [0; 16],
        nvm_tail: 0,
        nvm_size: 0,
        nvm_path: String::new(),
    };
    // A zeroed journal and byte log: no stale block of an earlier file system on this device
    // can look like a transaction or a batch (the crc salt, the uuid, already rules that
    // out; this is tidiness).
    if journal_blocks > 0 {
        let zero = vec![0u8; bs as usize * 256];
        let mut b = journal_start;
        let end = logs.end;
        while b < end {
            let n = (end - b).min(256);
            dev.write_at(b * bs, &zero[..(n * bs) as usize])?;
            b += n;
        }
    }
    let bytes = sb.encode(geo.block_size);
    for g in geo.backup_groups() {
        dev.write_at(geo.group_start(g) * bs, &bytes)?;
    }
    dev.write_at(0, &bytes)?;
    dev.flush()?;
    Ok(sb)
}
