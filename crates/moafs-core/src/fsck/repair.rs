//! Repair (`fsck -y`): `salvage` applies the structural fixes the walk noted and empties the
//! inode slots it did not reach; `rebuild` then writes the link and block counts, the bitmaps,
//! the group headers and every superblock from what the walk reached.

use super::walk::{Checker, Fix};
use crate::error::FsResult;
use crate::format::{bitmap_crc, DirBlock, DiskInode, Superblock, INODE_BYTES};

/// Applies the structural fixes: directory blocks rewritten, parents corrected, and every
/// inode slot the walk did not reach emptied (damaged or unreachable inodes — orphans are
/// reached, by `Checker::orphans`; their blocks become free with the bitmaps `rebuild`
/// writes).
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

/// After `salvage`: rewrites link counts (and the block counts, sizes and parents `salvage`
/// set), bitmaps, group counters and every superblock from what the walk reached.
pub(super) fn rebuild(ck: &mut Checker<'_>, sb: &Superblock) -> FsResult<()> {
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
