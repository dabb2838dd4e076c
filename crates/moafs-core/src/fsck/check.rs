//! The check: fsck's entry points (with `repair` the journal is replayed first, without it the
//! image is read as replayed) and its passes in order — group headers, bitmaps and
//! superblocks read, the walk, the orphans, the byte-log targets, the free inode slots, then
//! the compare and, with `repair`, the rebuild.

use super::compare::compare;
use super::finding::Finding;
use super::layout::{free_runs_in, FreeRuns, Layout};
use super::repair::rebuild;
use super::report::FsckReport;
use super::walk::Checker;
use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::{
    bitmap_crc, Bounds, DiskInode, Geometry, GroupHeader, INODE_BYTES, STATE_CLEAN,
};
use crate::recovery::read_superblock;
use std::collections::HashMap;

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
            let r = crate::recovery::replay_with(dev, &sb, tier)?;
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
            let r = crate::recovery::plan_replay_with(dev, &sb, tier)?;
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

/// The layout score of the files and the free-run histogram of `dev` (read only; a journal
/// that needs recovery is read as replayed, as `fsck -n` does).
pub fn layout(dev: &dyn BlockDevice) -> FsResult<(Layout, FreeRuns)> {
    let report = fsck(dev, false)?;
    Ok((report.layout, report.free_runs))
}

/// `targets`: what the byte-log records replayed (or to be replayed) name: each must be a
/// live inode and, for file bytes, the block the inode maps at that index.
fn check(
    dev: &dyn BlockDevice,
    repair: bool,
    targets: &[crate::recovery::RecordTarget],
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
        // metadata blocks (and the journal and the byte log, in group 0) are marked used in the
        // bitmap
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
