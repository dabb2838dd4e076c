//! Records of a grown block map (issue 43 item 2, the first part: fast commit's "add range"):
//! an fsync of a file whose only changes beyond what the byte log already says are new
//! blocks — an append, a write into a hole — is served by records instead of a commit.
//!
//! The file must map by extents with its whole map in the inode (no tree blocks, now or
//! after the new blocks: `ExtMap::in_root_with`), every extent of the last commit's map still
//! there and no block unmapped or remapped since that commit (`ExtMap::only_grew`: earlier
//! records' allocations must stay true — a truncate of blocks they placed commits), and its
//! inode otherwise as the last commit wrote it but for what an attribute record carries. Then, as a job of the committer (no
//! commit in flight, `bytelog.rs`), the fsync gives its blocks without a home an address
//! (`place_blocks`, as a commit would), and its batch says:
//!
//! * an **allocation record** per physically contiguous run of the new blocks (replay sets
//!   their bits in the group's block bitmap and recomputes the group's free count and crc);
//! * a **whole-block record** per new block: its data inline, so that nothing orders a home
//!   write before the batch (the home holds another file's old bytes until the next commit
//!   writes it, or replay does);
//! * the usual records of the file's other changed blocks;
//! * a **slot record**: the inode's whole slot as the next commit would write it (size,
//!   times, block count, the extent root with the new extents), which replaces the slot at
//!   replay.
//!
//! One device request and one flush, no transaction. The blocks stay dirty and logged: the
//! next commit writes them home (or keeps them homeless) and writes the bitmaps and the
//! inode as for any other allocation; its floor retires the records (allocation and slot
//! records at or below the floor are never applied: the commit holds what they say).
//!
//! Why it is safe: the records name blocks the allocator handed out while no commit was in
//! flight, so they are free in the durable image (a freed block is reusable only two commits
//! later); a later fsync of the same file before the next commit may serve blocks earlier
//! records placed (dirty and logged: their allocation records are in the log), never blocks
//! another path placed and wrote home (write-behind, fallocate): those would need their data
//! ordered before the records, so such a file commits. Anything else commits, counted as a
//! fallback.

use super::Inner;
use crate::error::FsResult;
use crate::format::bytelog::{Record, RecordBody};
use crate::format::extent::ExtNode;
use crate::format::INODE_BYTES;

/// The most blocks one fsync's records give an address (more: a commit writes them).
const MAX_PLACED: u64 = 64;
/// The most blocks new since the last commit that records may stand for (more: a commit).
const MAX_GROWN: u64 = 256;

impl Inner {
    /// Whether an fsync of `ino`, whose block map grew or is about to (blocks without a
    /// home), can be served by records (module comment). Cheap: the inode, its in-memory
    /// map and the cache entries of the blocks new since the last commit.
    pub(super) fn grown_map_fits(&self, ino: u64) -> bool {
        let Some(n) = self.inodes.get(&ino) else {
            return false;
        };
        let (Some(saved), Some(map)) = (&n.saved, &n.ext) else {
            return false;
        };
        let Some(ExtNode::Leaf(old)) = &saved.extents else {
            return false;
        };
        let placing = n.cache.reserved_count();
        if !n.d.same_but_attrs(saved, true)
            || placing > MAX_PLACED
            || !map.in_root_with(placing as usize)
            || !map.only_grew()
            || !old.iter().all(|e| map.covers(e.logical, e.physical, e.len))
        {
            return false;
        }
        // every mapped block the last commit did not map: placed by earlier records of this
        // file (dirty, logged), none written home by another path
        let mut grown = 0u64;
        for r in map.runs() {
            for idx in r.logical..r.logical + r.len {
                if old
                    .iter()
                    .any(|e| (e.logical..e.logical + e.len).contains(&idx))
                {
                    continue;
                }
                grown += 1;
                let ok = n.cache.get(&idx).is_some_and(|b| b.dirty && b.logged);
                if !ok || grown > MAX_GROWN {
                    return false;
                }
            }
        }
        true
    }

    /// Gives the blocks `placing` of `ino` (ascending, without a home) an address for an
    /// fsync's records: their allocation records, appended to `records` (numbered on from
    /// its last), and (logical block, home) of each, to be logged whole.
    pub(super) fn place_for_records(
        &mut self,
        ino: u64,
        placing: Vec<u64>,
        records: &mut Vec<Record>,
    ) -> FsResult<Vec<(u64, u64)>> {
        let placed = self.place_blocks(ino, placing)?;
        let geo = self.alloc.geo;
        let mut k = 0;
        while k < placed.len() {
            let first = placed[k].0;
            let mut n = 1;
            while k + n < placed.len()
                && placed[k + n].0 == first + n as u64
                && geo.group_of_block(first + n as u64) == geo.group_of_block(first)
            {
                n += 1;
            }
            records.push(Record {
                seq: records.last().map_or(0, |r| r.seq + 1),
                ino,
                body: RecordBody::Alloc {
                    first,
                    count: n as u64,
                },
            });
            k += n;
        }
        Ok(placed.into_iter().map(|(p, l, _)| (l, p)).collect())
    }

    /// The slot of `ino` as the next commit would write it (its map in the inode), or None
    /// when the map does not fit there.
    pub(super) fn slot_record(&self, ino: u64, seq: u64) -> Option<Record> {
        let n = self.inodes.get(&ino)?;
        let root = n.ext.as_ref()?.root_image()?;
        let mut img = n.d.clone();
        img.extents = Some(root);
        let mut slot = vec![0u8; INODE_BYTES];
        img.encode_into(&mut slot, ino);
        Some(Record {
            seq,
            ino,
            body: RecordBody::Slot(slot),
        })
    }
}
