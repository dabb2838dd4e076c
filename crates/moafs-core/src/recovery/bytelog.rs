//! Byte-log replay: the records that count (above the floor of the last durable commit, in
//! a batch that commit or a later fsync made durable), read from the device's log or the
//! NVM tier, and applied after the journal (FORMAT.md section 13). Used by the mount and by
//! fsck; it reads the device and the format, never the engine's state.

use crate::device::{BlockDevice, Nvm};
use crate::error::{FsError, FsResult};
use crate::format::bytelog::{
    batch_header_bytes, batch_salt, decode_batch, tier_batch_salt, Batch, Record, RecordBody,
    TierHeader, LOG_SECTOR, TIER_HEADER,
};
use crate::format::{
    bitmap_crc, Bounds, DiskInode, Geometry, GroupHeader, Superblock, INODE_BYTES,
};
use std::collections::{BTreeMap, HashMap};

/// What replaying the byte log does (after the journal).
#[derive(Debug, Default)]
pub struct ByteLogReplay {
    /// Records applied.
    pub records: usize,
    /// The newest sequence number found in the log (applied or not; 0: none): a mount
    /// numbers on after it.
    pub last_seq: u64,
    /// Records found but not applied: made void by a later durable commit, or written by a
    /// commit that is not durable.
    pub voided: usize,
    pub uncommitted: usize,
    /// What each record names, for fsck to check against the replayed image.
    pub targets: Vec<RecordTarget>,
}

/// What a record names: inode `ino` and, for file bytes, (logical block, home block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordTarget {
    pub seq: u64,
    pub ino: u64,
    pub block: Option<(u64, u64)>,
}

/// Reads the records of the byte log that count (`read_live_records`) for the superblock
/// `sb` (as the journal's replay leaves it) and applies them to `blocks` (home block →
/// image; blocks not in it are read from `dev`), in order.
pub fn plan_bytelog_replay(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    tier: Option<&dyn Nvm>,
    blocks: &mut BTreeMap<u64, Vec<u8>>,
) -> FsResult<ByteLogReplay> {
    let live = read_live_records(dev, sb, tier)?;
    let mut out = ByteLogReplay {
        last_seq: live.last_seq,
        voided: live.voided,
        uncommitted: live.uncommitted,
        ..Default::default()
    };
    for r in live.records {
        apply_record(dev, sb, blocks, &r)?;
        out.records += 1;
        out.targets.push(RecordTarget {
            seq: r.seq,
            ino: r.ino,
            block: match r.body {
                RecordBody::Bytes { block, home, .. } => Some((block, home)),
                RecordBody::Times(_)
                | RecordBody::Attr(_)
                | RecordBody::Void { .. }
                | RecordBody::Alloc { .. }
                | RecordBody::Slot(_) => None,
            },
        });
    }
    Ok(out)
}

/// The records of the byte log that count, as a reader finds them (FORMAT.md section 13).
#[derive(Debug, Default)]
pub struct LiveRecords {
    /// The records to apply, in order.
    pub records: Vec<Record>,
    /// The newest sequence number found (0: none).
    pub last_seq: u64,
    /// Records found at or below the floor that a later durable commit made void (or times
    /// it holds), and records of a commit batch that is not durable.
    pub voided: usize,
    pub uncommitted: usize,
}

/// Reads bytes at an offset of a log.
type ReadFn<'a> = Box<dyn Fn(u64, &mut [u8]) -> FsResult<()> + 'a>;

/// Where live batches are read from: the device log (units of 512 bytes) or the tier
/// (units of 8 bytes, after its header).
struct Source<'a> {
    read: ReadFn<'a>,
    unit: u64,
    units: u64,
    salt: Box<dyn Fn(u64) -> u64 + 'a>,
    pos: u64,
    what: &'static str,
}

impl Source<'_> {
    /// The valid batch at unit `p` whose first record's sequence number `ok` accepts: (the
    /// unit after it, the batch).
    fn batch_at(
        &self,
        p: u64,
        ok: impl Fn(u64) -> bool,
        block_size: u32,
    ) -> FsResult<Option<(u64, Batch)>> {
        if p >= self.units {
            return Ok(None);
        }
        let mut head = [0u8; crate::format::bytelog::BATCH_HEADER];
        if p * self.unit + head.len() as u64 > self.units * self.unit {
            return Ok(None);
        }
        (self.read)(p * self.unit, &mut head)?;
        let Some((seq, bytes, _)) = batch_header_bytes(&head) else {
            return Ok(None);
        };
        let n = (bytes as u64).div_ceil(self.unit);
        if !ok(seq) || p + n > self.units {
            return Ok(None);
        }
        let mut b = vec![0u8; (n * self.unit) as usize];
        (self.read)(p * self.unit, &mut b)?;
        let batch =
            decode_batch(&b, (self.salt)(p), block_size).map_err(|e| at(e, self.what, p))?;
        Ok(batch.filter(|b| !b.records.is_empty()).map(|b| (p + n, b)))
    }
}

/// The records of the byte log that count for the superblock `sb` (module comment,
/// FORMAT.md section 13). Batches are read in sequence order from `bytelog_first` (or the
/// floor + 1) at the device log's tail and, above the floor, from the NVM tier's tail too:
/// at each step the batch with the expected first sequence number in either ring — at the
/// unit after that ring's last batch, or at its start when a batch did not fit before the
/// end — and, at or below the floor, the device log's next batch even if it begins later
/// (records in between were in the tier, which the floor's commit covers) or, if it has
/// none, the batch after the floor, until neither has it, or a commit's batch above the floor (a commit that is not durable) is found.
/// Of the records at or below the floor, only file bytes count, and only those no void
/// record (which a commit writes for blocks it writes home or frees) at or below the floor
/// names later. An image whose superblock says records may be in a tier needs that tier:
/// without it (or with another) this is an error naming it.
pub fn read_live_records(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    tier: Option<&dyn Nvm>,
) -> FsResult<LiveRecords> {
    let mut out = LiveRecords::default();
    if !sb.has_bytelog() {
        return Ok(out);
    }
    let start = sb.bytelog_start * sb.block_size as u64;
    let mut sources = vec![Source {
        read: Box::new(move |off, buf| Ok(dev.read_at(start + off, buf)?)),
        unit: LOG_SECTOR as u64,
        units: sb.bytelog_blocks as u64 * (sb.block_size as u64 / LOG_SECTOR as u64),
        salt: Box::new(|p| batch_salt(&sb.uuid, p)),
        pos: sb.bytelog_tail as u64,
        what: "byte log",
    }];
    if sb.has_nvm() {
        let t = check_tier(sb, tier)?;
        let tier_uuid = sb.nvm_uuid;
        sources.push(Source {
            read: Box::new(move |off, buf| Ok(t.read(TIER_HEADER + off, buf)?)),
            unit: 8,
            units: (sb.nvm_size.min(t.size()).saturating_sub(TIER_HEADER)) / 8,
            salt: Box::new(move |p| tier_batch_salt(&sb.uuid, &tier_uuid, p)),
            pos: sb.nvm_tail / 8,
            what: "NVM tier",
        });
    }
    let floor = sb.bytelog_floor;
    let mut want = match sb.bytelog_first {
        0 => floor + 1,
        f => f,
    };
    let mut found: Vec<Record> = Vec::new();
    'next: loop {
        for (k, src) in sources.iter_mut().enumerate() {
            let device = k == 0;
            if !device && want <= floor {
                continue;
            }
            let ok = |s: u64| s == want || (device && want <= floor && s > want && s <= floor + 1);
            for p in [src.pos, 0] {
                let Some((next, b)) = src.batch_at(p, ok, sb.block_size)? else {
                    continue;
                };
                let (first, n) = (b.records[0].seq, b.records.len() as u64);
                out.last_seq = out.last_seq.max(first + n - 1);
                if b.by_commit() && first > floor {
                    out.uncommitted += n as usize;
                    break 'next;
                }
                want = first + n;
                found.extend(b.records);
                src.pos = next;
                continue 'next;
            }
        }
        if want <= floor {
            // the rest up to the floor was in the tier, which the floor's commit emptied
            want = floor + 1;
            continue;
        }
        break;
    }
    let mut void: HashMap<u64, u64> = HashMap::new();
    for r in &found {
        if let RecordBody::Void { home, .. } = r.body {
            if r.seq <= floor {
                void.insert(home, r.seq);
            }
        }
    }
    for r in found {
        let counts = match &r.body {
            RecordBody::Void { .. } => continue,
            _ if r.seq > floor => true,
            // the floor's commit holds what these say
            RecordBody::Times(_)
            | RecordBody::Attr(_)
            | RecordBody::Alloc { .. }
            | RecordBody::Slot(_) => false,
            RecordBody::Bytes { home, .. } => void.get(home).is_none_or(|v| *v < r.seq),
        };
        if counts {
            out.records.push(r);
        } else {
            out.voided += 1;
        }
    }
    Ok(out)
}

/// The tier `sb` names, or an error that names it.
fn check_tier<'a>(sb: &Superblock, tier: Option<&'a dyn Nvm>) -> FsResult<&'a dyn Nvm> {
    let hex = crate::format::hex(&sb.nvm_uuid);
    let Some(t) = tier else {
        return Err(FsError::invalid(format!(
            "acknowledged updates may be in the NVM tier {} (tier {hex}), which was not given: \
             mount with -o nvm={} (fsck and inspect: --nvm {})",
            sb.nvm_path, sb.nvm_path, sb.nvm_path
        )));
    };
    let mut h = [0u8; 64];
    t.read(0, &mut h)?;
    match TierHeader::decode(&h) {
        Some(th) if th.uuid == sb.nvm_uuid && th.fs_uuid == sb.uuid => Ok(t),
        _ => Err(FsError::invalid(format!(
            "the NVM tier given is not this file system's tier {hex} (last mounted as {}): \
             acknowledged updates may be in that one",
            sb.nvm_path
        ))),
    }
}

/// Names the place of a byte-log error.
fn at(e: FsError, log: &str, unit: u64) -> FsError {
    match e {
        FsError::Corrupt { what, detail, .. } => FsError::Corrupt {
            what,
            block: unit,
            detail: format!("{detail} (unit {unit} of the {log})"),
        },
        e => e,
    }
}

fn apply_record(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    blocks: &mut BTreeMap<u64, Vec<u8>>,
    r: &Record,
) -> FsResult<()> {
    let geo = Geometry::from_superblock(sb);
    let bs = sb.block_size as u64;
    let bad = |d: String| FsError::corrupt("byte log", r.seq, d);
    let image = |b: u64, blocks: &mut BTreeMap<u64, Vec<u8>>| -> FsResult<()> {
        if let std::collections::btree_map::Entry::Vacant(v) = blocks.entry(b) {
            let mut buf = vec![0u8; bs as usize];
            dev.read_at(b * bs, &mut buf)?;
            v.insert(buf);
        }
        Ok(())
    };
    // the inode-table block holding the slot of `r.ino`, read into `blocks`, and where in it
    let slot_at = |blocks: &mut BTreeMap<u64, Vec<u8>>| -> FsResult<(u64, usize)> {
        if !geo.valid_ino(r.ino) {
            return Err(bad(format!("record {} names inode {}", r.seq, r.ino)));
        }
        let (blk, off) = geo.inode_location(r.ino);
        image(blk, blocks)?;
        Ok((blk, off))
    };
    match &r.body {
        RecordBody::Bytes {
            home, offset, data, ..
        } => {
            let h = *home;
            if !Bounds::from_superblock(sb).is_data_block(h) {
                return Err(bad(format!("record {} targets block {h}", r.seq)));
            }
            image(h, blocks)?;
            let b = blocks.get_mut(&h).expect("read above");
            b[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
        RecordBody::Times(_) | RecordBody::Attr(_) => {
            let (blk, off) = slot_at(blocks)?;
            let b = blocks.get_mut(&blk).expect("read above");
            let slot = &mut b[off..off + INODE_BYTES];
            let mut d = DiskInode::decode_unchecked(slot, r.ino, blk)?;
            if d.is_free() {
                return Err(bad(format!(
                    "record {} sets attributes of free inode {}",
                    r.seq, r.ino
                )));
            }
            match &r.body {
                RecordBody::Attr(a) => {
                    if a.mode & libc::S_IFMT != d.mode & libc::S_IFMT {
                        return Err(bad(format!(
                            "record {} changes the type of inode {} ({:o} to {:o})",
                            r.seq, r.ino, d.mode, a.mode
                        )));
                    }
                    a.apply(&mut d);
                }
                RecordBody::Times(t) => [d.atime, d.mtime, d.ctime] = *t,
                _ => unreachable!("matched above"),
            }
            d.encode_into(slot, r.ino);
        }
        RecordBody::Alloc { first, count } => {
            let (first, count) = (*first, *count);
            let g = geo.group_of_block(first);
            let end = first.saturating_add(count);
            if count > geo.blocks_per_group as u64
                || !Bounds::from_superblock(sb).is_data_run(first, count)
                || geo.group_of_block(end - 1) != g
            {
                return Err(bad(format!(
                    "record {} allocates blocks {first}..{end} (not one group's data blocks)",
                    r.seq
                )));
            }
            // the group's bitmap area as one buffer: bits set, then the free count and the
            // bitmap's crc in the header recomputed from it (applying it twice is harmless)
            let area: Vec<u64> = (0..geo.bitmap_blocks as u64)
                .map(|k| geo.bitmap_block(g) + k)
                .collect();
            let mut bits = Vec::with_capacity(area.len() * bs as usize);
            for &b in &area {
                image(b, blocks)?;
                bits.extend_from_slice(&blocks[&b]);
            }
            let from = first - geo.group_start(g);
            for i in from..from + count {
                crate::format::bitmap::set_bit(&mut bits, i, true);
            }
            for (k, &b) in area.iter().enumerate() {
                let chunk = &bits[k * bs as usize..(k + 1) * bs as usize];
                blocks
                    .get_mut(&b)
                    .expect("read above")
                    .copy_from_slice(chunk);
            }
            let hb = geo.header_block(g);
            image(hb, blocks)?;
            let mut h = GroupHeader::decode(&blocks[&hb], hb, g)?;
            h.free_blocks =
                crate::format::bitmap::count_clear(&bits, geo.group_len(g) as u64) as u32;
            h.bitmap_crc = bitmap_crc(&bits, g);
            blocks.insert(hb, h.encode(hb, sb.block_size));
        }
        RecordBody::Slot(bytes) => {
            let (blk, off) = slot_at(blocks)?;
            let b = blocks.get_mut(&blk).expect("read above");
            let slot = &mut b[off..off + INODE_BYTES];
            let old = DiskInode::decode_unchecked(slot, r.ino, blk)?;
            let new = DiskInode::decode(bytes, r.ino, blk, &Bounds::from_superblock(sb))
                .map_err(|e| bad(format!("record {}: {e}", r.seq)))?;
            if old.is_free() || new.is_free() || old.mode & libc::S_IFMT != new.mode & libc::S_IFMT
            {
                return Err(bad(format!(
                    "record {} replaces the slot of inode {} ({:o}) with one of mode {:o}",
                    r.seq, r.ino, old.mode, new.mode
                )));
            }
            slot.copy_from_slice(bytes);
        }
        RecordBody::Void { .. } => {} // read_live_records does not return them
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::format::bitmap::{bit, count_clear};
    use crate::mkfs::{mkfs, MkfsOptions};

    fn image() -> (MemDevice, Superblock) {
        let dev = MemDevice::new(16 << 20);
        let sb = mkfs(&dev, &MkfsOptions::default()).expect("mkfs");
        (dev, sb)
    }

    fn rec(ino: u64, body: RecordBody) -> Record {
        Record { seq: 9, ino, body }
    }

    #[test]
    fn an_allocation_record_sets_its_bits_and_the_group_counts_follow() {
        let (dev, sb) = image();
        let geo = Geometry::from_superblock(&sb);
        let first = geo.group_start(0) + geo.meta_blocks() as u64 + 500;
        let mut blocks = BTreeMap::new();
        let r = rec(5, RecordBody::Alloc { first, count: 3 });
        apply_record(&dev, &sb, &mut blocks, &r).expect("applied");
        // twice: the same image (replay may run again after a crash during replay)
        let once = blocks.clone();
        apply_record(&dev, &sb, &mut blocks, &r).expect("applied again");
        assert_eq!(once, blocks);
        let bits = &blocks[&geo.bitmap_block(0)];
        for b in first - 1..first + 4 {
            let i = b - geo.group_start(0);
            assert_eq!(bit(bits, i), (first..first + 3).contains(&b), "block {b}");
        }
        let hb = geo.header_block(0);
        let h = GroupHeader::decode(&blocks[&hb], hb, 0).expect("a sealed header");
        assert_eq!(
            h.free_blocks as u64,
            count_clear(bits, geo.group_len(0) as u64)
        );
        assert_eq!(h.bitmap_crc, bitmap_crc(bits, 0));
    }

    #[test]
    fn bad_allocation_and_slot_records_are_errors_not_panics() {
        let (dev, sb) = image();
        let geo = Geometry::from_superblock(&sb);
        let data = geo.group_start(0) + geo.meta_blocks() as u64;
        let bad = [
            // group metadata, past the image, across groups, the count's overflow
            RecordBody::Alloc { first: 1, count: 1 },
            RecordBody::Alloc {
                first: geo.total_blocks,
                count: 1,
            },
            RecordBody::Alloc {
                first: geo.group_start(1) - 1,
                count: 2,
            },
            RecordBody::Alloc {
                first: data,
                count: u64::MAX,
            },
        ];
        for body in bad {
            let r = rec(5, body.clone());
            let e = apply_record(&dev, &sb, &mut BTreeMap::new(), &r);
            assert!(matches!(e, Err(FsError::Corrupt { .. })), "{body:?}: {e:?}");
        }
        // a slot for a free inode, a slot that is not an inode, a slot of another type
        let mut root = vec![0u8; INODE_BYTES];
        let (blk, off) = geo.inode_location(1);
        let mut b = vec![0u8; sb.block_size as usize];
        dev.read_at(blk * sb.block_size as u64, &mut b).unwrap();
        root.copy_from_slice(&b[off..off + INODE_BYTES]);
        let mut file = DiskInode::decode_unchecked(&root, 1, blk).unwrap();
        file.mode = libc::S_IFREG | 0o644;
        let mut as_file = vec![0u8; INODE_BYTES];
        file.encode_into(&mut as_file, 1);
        for (ino, slot) in [
            (9, root.clone()),
            (1, vec![0xa5; INODE_BYTES]),
            (1, as_file),
        ] {
            let r = rec(ino, RecordBody::Slot(slot));
            let e = apply_record(&dev, &sb, &mut BTreeMap::new(), &r);
            assert!(
                matches!(e, Err(FsError::Corrupt { .. })),
                "inode {ino}: {e:?}"
            );
        }
        // the root's own slot again: applied
        let r = rec(1, RecordBody::Slot(root));
        apply_record(&dev, &sb, &mut BTreeMap::new(), &r).expect("the same slot");
    }
}
