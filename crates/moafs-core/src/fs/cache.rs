//! The block cache: each inode's cached blocks (`BlockCache`) and the books of all of them
//! (`CacheBook`). Every change of a cached block goes through a `BlockCache` method that
//! takes the book, so the counts (cached, dirty, reserved), the inode's set of dirty blocks
//! and the age order of clean blocks can never disagree with the blocks themselves — nothing
//! is counted by hand (`Inner::check_invariants` recounts them in tests). A commit finds a
//! file's dirty blocks in its dirty set, not by walking its cache; eviction takes the oldest
//! clean blocks from the age order, not by sorting every clean block.

use std::collections::{btree_map, BTreeMap, BTreeSet};
use std::ops::RangeBounds;
use std::sync::Arc;

/// Which 128-byte units of a block changed: bit `k` covers bytes `128k..128k+128` (a
/// 16 KiB block has 128 units).
pub(crate) type Units = u128;
/// The byte log's unit of change (paper 003 keeps 4 bytes per 4 KiB page: 128-byte units).
pub(crate) const UNIT: usize = 128;

/// The units `range` of a block touches.
pub(crate) fn units_of(range: std::ops::Range<usize>) -> Units {
    if range.is_empty() {
        return 0;
    }
    let (a, b) = (range.start / UNIT, (range.end - 1) / UNIT);
    let hi = if b >= 127 {
        Units::MAX
    } else {
        (1 << (b + 1)) - 1
    };
    hi & !((1 << a) - 1)
}

/// The units in which `old` and `new` (one block each) differ.
pub(crate) fn units_changed(old: &[u8], new: &[u8]) -> Units {
    units_changed_at(0, old, new)
}

/// The units in which the bytes at `start..` of a block (`old`: what it held there) and `new`
/// (what is written there) differ.
pub(crate) fn units_changed_at(start: usize, old: &[u8], new: &[u8]) -> Units {
    let end = start + new.len();
    let mut u = 0;
    let mut lo = start;
    while lo < end {
        let k = lo / UNIT;
        let hi = ((k + 1) * UNIT).min(end);
        if old[lo - start..hi - start] != new[lo - start..hi - start] {
            u |= 1 << k;
        }
        lo = hi;
    }
    u
}

/// A block's contents. The bytes are their own allocation of exactly a block (an
/// `Arc<[u8]>` put a 16-byte header in front of them: 4,112 bytes, which the allocator's size
/// classes round up to 5,120 — a full cache took a quarter more memory than its bound).
pub(crate) type Block = Arc<Vec<u8>>;

/// What a write did to a block, for its map of changed units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// These units changed.
    Units(Units),
    /// A whole block arrived and no copy of its old contents was cached: which units
    /// changed is found (by reading the old contents from home) only if the byte log wants
    /// to know.
    Unknown,
}

/// A cached file block.
pub(crate) struct CBlock {
    /// Never changed in place: a new version is a new buffer, so a commit or write-behind can
    /// write a snapshot outside the engine lock.
    pub data: Block,
    pub dirty: bool,
    /// A block was reserved for it (it had no disk address when it became dirty). Only
    /// dirty blocks hold one.
    pub reserved: bool,
    /// When it was last written (`CacheBook` stamps are unique): its place in the age order
    /// while clean.
    pub last_use: u64,
    /// Dirty blocks: the units changed since the block was last written home (or taken by
    /// a commit), and of those the ones no byte-log record holds yet. Clean blocks: zero.
    pub changed: Units,
    pub unlogged: Units,
    /// `changed` is not known (all ones until the byte log resolves it).
    pub unknown: bool,
    /// Records of this block since it was last home are in the byte log (or the tier): a
    /// commit writes it in place only if they hold every change (a torn write is repaired by
    /// replaying them), else through its transaction.
    pub logged: bool,
    /// The sequence number of the first device-log batch holding records of it since it was
    /// last home (0: none there).
    pub since: u64,
    /// Some record of it since it was last home is in the NVM tier (which a commit empties:
    /// a commit that keeps it homeless logs all its changed units again).
    pub tiered: bool,
    /// Clean for commits but not home: its bytes since it was last home are only in the
    /// byte log (a commit logged them, `bytelog.rs`). Never evicted (not in the age order);
    /// a later commit writes it home.
    pub homeless: bool,
    /// Times a commit wrote it home while it was cached (saturating): a block written home
    /// before is being rewritten, the case write-back logging pays for.
    pub homes: u8,
    /// Its contents came from home by a read and nothing wrote it since: its leaving the
    /// cache cannot make what a concurrent read fetched from home stale.
    pub fetched: bool,
    /// Fetched by readahead and no read used it yet (counted as wasted if it leaves so).
    pub prefetched: bool,
}

impl CBlock {
    /// Dirty, and not logged with no change since: an fsync by the byte log looks at it.
    fn to_log(&self) -> bool {
        self.dirty && (!self.logged || self.unlogged != 0 || self.unknown || self.reserved)
    }

    /// A clean block holding `data` (its home's contents), stamped `last_use`.
    fn clean(data: Block, last_use: u64) -> CBlock {
        CBlock {
            data,
            dirty: false,
            reserved: false,
            last_use,
            changed: 0,
            unlogged: 0,
            unknown: false,
            logged: false,
            since: 0,
            tiered: false,
            homeless: false,
            homes: 0,
            fetched: false,
            prefetched: false,
        }
    }
}

/// Counts over every inode's cache, and the clean blocks oldest first.
#[derive(Default)]
pub(crate) struct CacheBook {
    cached: u64,
    dirty: u64,
    /// Clean blocks by `last_use`: (inode, logical block).
    clean: BTreeMap<u64, (u64, u64)>,
    clock: u64,
    /// Blocks that left any cache so far, but those that only a read had put there
    /// (`fetched`): a read that went to the device may keep its blocks only if none left
    /// meanwhile (what it read may be older than a copy that was written home and dropped
    /// while it read).
    removals: u64,
    /// Prefetched blocks that left the cache (or were overwritten) before any read used them.
    ra_wasted: u64,
    /// Homeless blocks: (inode, logical block) → (home, `since`).
    homeless: BTreeMap<(u64, u64), (u64, u64)>,
    /// Blocks with records since they were last home (`logged`), dirty or homeless.
    logged: u64,
}

impl CacheBook {
    pub fn cached(&self) -> u64 {
        self.cached
    }
    pub fn dirty(&self) -> u64 {
        self.dirty
    }
    /// The `n` least recently written clean blocks: (inode, logical block).
    pub fn oldest_clean(&self, n: usize) -> Vec<(u64, u64)> {
        self.clean.values().take(n).copied().collect()
    }
    pub fn removals(&self) -> u64 {
        self.removals
    }
    pub fn ra_wasted(&self) -> u64 {
        self.ra_wasted
    }
    /// Every clean block is listed in the age order and nothing else is.
    pub fn clean_listed(&self) -> u64 {
        self.clean.len() as u64
    }
    /// Homeless blocks: ((inode, logical block), (home, since)), by inode and block.
    pub fn homeless(&self) -> impl Iterator<Item = (&(u64, u64), &(u64, u64))> {
        self.homeless.iter()
    }
    pub fn homeless_count(&self) -> u64 {
        self.homeless.len() as u64
    }
    pub fn logged(&self) -> u64 {
        self.logged
    }
    fn stamp(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

/// One inode's cached blocks.
#[derive(Default)]
pub(crate) struct BlockCache {
    map: BTreeMap<u64, CBlock>,
    /// Logical blocks that are dirty, ascending.
    dirty: BTreeSet<u64>,
    /// The dirty blocks an fsync by the byte log has to look at ([`CBlock::to_log`]): not
    /// those logged already with no change since, which pile up between commits in a file
    /// of small synced overwrites (a database's) and would make each fsync walk them all.
    to_log: BTreeSet<u64>,
    /// Blocks holding a reservation.
    reserved: u64,
}

/// What `BlockCache::put_dirty` replaced.
pub(crate) struct Put {
    /// The previous buffer (for recycling).
    pub old: Option<Block>,
    /// The inode had no dirty block before.
    pub first_dirty: bool,
}

impl BlockCache {
    pub fn get(&self, idx: &u64) -> Option<&CBlock> {
        self.map.get(idx)
    }
    pub fn contains_key(&self, idx: &u64) -> bool {
        self.map.contains_key(idx)
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn range<R: RangeBounds<u64>>(&self, r: R) -> btree_map::Range<'_, u64, CBlock> {
        self.map.range(r)
    }
    pub fn dirty_count(&self) -> u64 {
        self.dirty.len() as u64
    }
    /// Dirty logical blocks, ascending.
    pub fn dirty_blocks(&self) -> Vec<u64> {
        self.dirty.iter().copied().collect()
    }
    /// The dirty blocks with something the byte log has not logged, or that it cannot log
    /// (reserved: no home yet), ascending: every dirty block but those logged with no change
    /// since.
    pub fn to_log(&self) -> impl Iterator<Item = u64> + '_ {
        self.to_log.iter().copied()
    }
    /// Keeps `to_log` true of block `idx` after a change of its state.
    fn track(&mut self, idx: u64) {
        if self.map.get(&idx).is_some_and(CBlock::to_log) {
            self.to_log.insert(idx);
        } else {
            self.to_log.remove(&idx);
        }
    }
    /// Dirty logical blocks below `end`, ascending.
    pub fn dirty_below(&self, end: u64) -> impl Iterator<Item = u64> + '_ {
        self.dirty.range(..end).copied()
    }
    pub fn reserved_count(&self) -> u64 {
        self.reserved
    }

    /// Logical blocks holding a reservation, ascending (reserved blocks are dirty).
    pub fn reserved_blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.dirty
            .iter()
            .copied()
            .filter(|i| self.map.get(i).is_some_and(|b| b.reserved))
    }

    /// New dirty contents of block `idx`; `reserve`: a reservation was taken for it (kept
    /// if it already held one).
    pub fn put_dirty(
        &mut self,
        book: &mut CacheBook,
        ino: u64,
        idx: u64,
        data: Block,
        reserve: bool,
        change: Change,
    ) -> Put {
        let last_use = book.stamp();
        let (delta, unknown) = match change {
            Change::Units(u) => (u, false),
            Change::Unknown => (Units::MAX, true),
        };
        let (was_dirty, had_reservation, old) = match self.map.get_mut(&idx) {
            Some(cb) => {
                if cb.homeless {
                    // changed again: the next commit takes it (logs it or writes it home)
                    book.homeless.remove(&(ino, idx));
                    cb.homeless = false;
                } else if !cb.dirty {
                    book.clean.remove(&cb.last_use);
                }
                let was = (cb.dirty, cb.reserved);
                book.ra_wasted += cb.prefetched as u64;
                (cb.fetched, cb.prefetched) = (false, false);
                cb.changed |= delta;
                cb.unlogged |= delta;
                cb.unknown |= unknown;
                cb.dirty = true;
                cb.reserved |= reserve;
                cb.last_use = last_use;
                (was.0, was.1, Some(std::mem::replace(&mut cb.data, data)))
            }
            None => {
                book.cached += 1;
                let mut cb = CBlock::clean(data, last_use);
                (cb.changed, cb.unlogged, cb.unknown) = (delta, delta, unknown);
                (cb.dirty, cb.reserved) = (true, reserve);
                self.map.insert(idx, cb);
                (false, false, None)
            }
        };
        let reserved = reserve || had_reservation;
        if !was_dirty {
            self.dirty.insert(idx);
            book.dirty += 1;
        }
        self.reserved += (reserved && !had_reservation) as u64;
        self.track(idx);
        Put {
            old,
            first_dirty: !was_dirty && self.dirty.len() == 1,
        }
    }

    /// Keeps `data`, just read from block `idx`'s home, as a clean cached copy (in the age
    /// order), unless the block is cached already; `prefetched`: by readahead, for no read
    /// yet. Returns whether it was kept.
    pub fn put_clean(
        &mut self,
        book: &mut CacheBook,
        ino: u64,
        idx: u64,
        data: Block,
        prefetched: bool,
    ) -> bool {
        if self.map.contains_key(&idx) {
            return false;
        }
        let last_use = book.stamp();
        book.cached += 1;
        book.clean.insert(last_use, (ino, idx));
        let mut cb = CBlock::clean(data, last_use);
        (cb.fetched, cb.prefetched) = (true, prefetched);
        self.map.insert(idx, cb);
        true
    }

    /// A read uses block `idx`: whether readahead had fetched it for this read (counted
    /// once).
    pub fn use_prefetched(&mut self, idx: u64) -> bool {
        match self.map.get_mut(&idx) {
            Some(cb) if cb.prefetched => {
                cb.prefetched = false;
                true
            }
            _ => false,
        }
    }

    /// Block `idx` got a disk address: its reservation is used up. Returns whether it held
    /// one.
    pub fn unreserve(&mut self, idx: u64) -> bool {
        match self.map.get_mut(&idx) {
            Some(cb) if cb.reserved => {
                cb.reserved = false;
                self.reserved -= 1;
                self.track(idx);
                true
            }
            _ => false,
        }
    }

    /// Block `idx` is written (or taken by a commit): clean, in the age order. Returns
    /// whether it held a reservation (released here).
    pub fn mark_clean(&mut self, book: &mut CacheBook, ino: u64, idx: u64) -> bool {
        let unreserved = self.unreserve(idx);
        if let Some(cb) = self.map.get_mut(&idx) {
            cb.changed = 0;
            cb.unlogged = 0;
            cb.unknown = false;
            book.logged -= cb.logged as u64;
            cb.logged = false;
            cb.since = 0;
            cb.tiered = false;
            if cb.homeless {
                cb.homeless = false;
                book.homeless.remove(&(ino, idx));
                book.clean.insert(cb.last_use, (ino, idx));
            }
            if cb.dirty {
                cb.dirty = false;
                cb.homes = cb.homes.saturating_add(1);
                self.dirty.remove(&idx);
                book.dirty -= 1;
                book.clean.insert(cb.last_use, (ino, idx));
            }
        }
        self.track(idx);
        unreserved
    }

    /// The byte log found which units of dirty block `idx` changed since it was last home
    /// (`changed`: it read the old contents), or logged them all (`changed: None`): in the
    /// device-log batch whose first record is `batch`, or in the tier (`batch` None).
    pub fn set_logged(
        &mut self,
        book: &mut CacheBook,
        idx: u64,
        changed: Option<Units>,
        batch: Option<u64>,
    ) {
        if let Some(cb) = self.map.get_mut(&idx) {
            if let Some(c) = changed {
                cb.changed = c;
                cb.unknown = false;
            }
            cb.unlogged = 0;
            book.logged += !cb.logged as u64;
            cb.logged = true;
            match batch {
                Some(s) if cb.since == 0 => cb.since = s,
                Some(_) => {}
                None => cb.tiered = true,
            }
        }
        self.track(idx);
    }

    /// A commit logged dirty block `idx` (home `home`): homeless from now on. Its records
    /// since it was last home begin in the batch `since` (`bytelog.rs` decides: the batch
    /// the commit writes when it logged every changed unit again, else the first one).
    pub fn make_homeless(
        &mut self,
        book: &mut CacheBook,
        ino: u64,
        idx: u64,
        home: u64,
        since: u64,
    ) {
        let Some(cb) = self.map.get_mut(&idx) else {
            return;
        };
        debug_assert!(cb.dirty && !cb.reserved && !cb.unknown && since != 0);
        if cb.dirty {
            cb.dirty = false;
            self.dirty.remove(&idx);
            book.dirty -= 1;
        }
        cb.unlogged = 0;
        book.logged += !cb.logged as u64;
        cb.logged = true;
        cb.since = since;
        cb.tiered = false;
        cb.homeless = true;
        book.homeless.insert((ino, idx), (home, since));
        self.track(idx);
    }

    /// Homeless block `idx` is to go home with the next commit: dirty again, every change
    /// in records (the commit may write it in place).
    pub fn unhome(&mut self, book: &mut CacheBook, ino: u64, idx: u64) {
        if let Some(cb) = self.map.get_mut(&idx).filter(|c| c.homeless) {
            cb.homeless = false;
            book.homeless.remove(&(ino, idx));
            cb.dirty = true;
            self.dirty.insert(idx);
            book.dirty += 1;
        }
        self.track(idx);
    }

    /// Which units of dirty block `idx` changed since it was last home is known now
    /// (none of them logged).
    pub fn set_changed(&mut self, idx: u64, changed: Units) {
        if let Some(cb) = self.map.get_mut(&idx) {
            cb.changed = changed;
            cb.unlogged = changed;
            cb.unknown = false;
        }
        self.track(idx);
    }

    /// Drops block `idx`; the caller returns its reservation (`reserved`) if it held one.
    pub fn remove(&mut self, book: &mut CacheBook, ino: u64, idx: u64) -> Option<CBlock> {
        let cb = self.map.remove(&idx)?;
        self.forget(book, ino, idx, &cb);
        Some(cb)
    }

    fn forget(&mut self, book: &mut CacheBook, ino: u64, idx: u64, cb: &CBlock) {
        book.cached -= 1;
        book.removals += !cb.fetched as u64;
        book.ra_wasted += cb.prefetched as u64;
        book.logged -= cb.logged as u64;
        self.to_log.remove(&idx);
        if cb.dirty {
            self.dirty.remove(&idx);
            book.dirty -= 1;
        } else if cb.homeless {
            book.homeless.remove(&(ino, idx));
        } else {
            book.clean.remove(&cb.last_use);
        }
        if cb.reserved {
            self.reserved -= 1;
        }
    }

    /// Drops every block at `from` or beyond; returns how many reservations they held.
    pub fn drop_from(&mut self, book: &mut CacheBook, ino: u64, from: u64) -> u64 {
        let gone = self.map.split_off(&from);
        let mut reserved = 0;
        for (idx, cb) in &gone {
            reserved += cb.reserved as u64;
            self.forget(book, ino, *idx, cb);
        }
        reserved
    }

    /// Drops every clean block (homeless ones stay); returns how many.
    pub fn drop_clean(&mut self, book: &mut CacheBook, ino: u64) -> u64 {
        let clean: Vec<u64> = self
            .map
            .iter()
            .filter(|(_, c)| !c.dirty && !c.homeless)
            .map(|(i, _)| *i)
            .collect();
        for idx in &clean {
            self.remove(book, ino, *idx);
        }
        clean.len() as u64
    }

    /// Recounts this cache: (cached, dirty, reserved, logged, homeless) as the blocks say,
    /// or the first disagreement with its own sets.
    pub fn recount(&self, book: &CacheBook, ino: u64) -> Result<[u64; 5], String> {
        let mut dirty = 0;
        let mut reserved = 0;
        let (mut logged, mut homeless) = (0, 0);
        let mut to_log = 0;
        for (idx, cb) in &self.map {
            if cb.dirty != self.dirty.contains(idx) {
                return Err(format!("inode {ino} block {idx}: dirty set disagrees"));
            }
            if cb.to_log() != self.to_log.contains(idx) {
                return Err(format!("inode {ino} block {idx}: to-log set disagrees"));
            }
            to_log += cb.to_log() as usize;
            if cb.reserved && !cb.dirty {
                return Err(format!("inode {ino} block {idx}: clean but reserved"));
            }
            if cb.homeless {
                if cb.dirty || !cb.logged || cb.since == 0 || cb.unlogged != 0 || cb.unknown {
                    return Err(format!("inode {ino} block {idx}: homeless but not logged"));
                }
                if book.homeless.get(&(ino, *idx)).map(|h| h.1) != Some(cb.since) {
                    return Err(format!("inode {ino} block {idx}: homeless but not listed"));
                }
            } else if !cb.dirty && (cb.changed != 0 || cb.unlogged != 0 || cb.unknown || cb.logged)
            {
                return Err(format!("inode {ino} block {idx}: clean but changed units"));
            }
            if (cb.prefetched && !cb.fetched) || (cb.fetched && (cb.dirty || cb.homeless)) {
                return Err(format!("inode {ino} block {idx}: fetched but written"));
            }
            if !cb.logged && (cb.since != 0 || cb.tiered) {
                return Err(format!("inode {ino} block {idx}: records but not logged"));
            }
            if cb.unlogged & !cb.changed != 0 || (cb.unknown && cb.changed != Units::MAX) {
                return Err(format!(
                    "inode {ino} block {idx}: unlogged units outside the changed ones"
                ));
            }
            let listed = book.clean.get(&cb.last_use) == Some(&(ino, *idx));
            if !cb.dirty && !cb.homeless && !listed {
                return Err(format!(
                    "inode {ino} block {idx}: clean but not in the age order"
                ));
            }
            if cb.homeless && listed {
                return Err(format!(
                    "inode {ino} block {idx}: homeless in the age order"
                ));
            }
            dirty += cb.dirty as u64;
            reserved += cb.reserved as u64;
            logged += cb.logged as u64;
            homeless += cb.homeless as u64;
        }
        if dirty != self.dirty.len() as u64 || reserved != self.reserved {
            return Err(format!(
                "inode {ino}: dirty set {} / reserved {} but {dirty} / {reserved} blocks",
                self.dirty.len(),
                self.reserved
            ));
        }
        if to_log != self.to_log.len() {
            return Err(format!(
                "inode {ino}: {} blocks in the to-log set, {to_log} to log",
                self.to_log.len()
            ));
        }
        Ok([self.map.len() as u64, dirty, reserved, logged, homeless])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fsync_looks_only_at_blocks_with_something_to_log() {
        let mut book = CacheBook::default();
        let mut c = BlockCache::default();
        let blk = || Arc::new(vec![1u8; 4096]);
        let listed = |c: &BlockCache| c.to_log().collect::<Vec<u64>>();
        for idx in 0..4 {
            c.put_dirty(&mut book, 9, idx, blk(), idx == 3, Change::Units(1));
        }
        assert_eq!(listed(&c), [0, 1, 2, 3]);
        // logged: nothing new in blocks 0 and 1; block 3 holds a reservation (no home yet)
        for idx in [0, 1] {
            c.set_logged(&mut book, idx, None, Some(7));
        }
        assert_eq!(listed(&c), [2, 3]);
        c.recount(&book, 9).unwrap();
        // changed again after its record: looked at again
        c.put_dirty(&mut book, 9, 1, blk(), false, Change::Units(2));
        assert_eq!(listed(&c), [1, 2, 3]);
        // a whole block without its old contents: looked at (its home is read)
        c.set_logged(&mut book, 1, None, Some(8));
        c.put_dirty(&mut book, 9, 1, blk(), false, Change::Unknown);
        assert_eq!(listed(&c), [1, 2, 3]);
        c.unreserve(3);
        c.set_logged(&mut book, 3, None, Some(9));
        assert_eq!(listed(&c), [1, 2]);
        // written home, dropped: gone from the set
        c.mark_clean(&mut book, 9, 2);
        c.remove(&mut book, 9, 1);
        assert_eq!(listed(&c), Vec::<u64>::new());
        c.recount(&book, 9).unwrap();
        assert_eq!(
            c.dirty_count(),
            2,
            "blocks 0 and 3: dirty, logged, nothing new"
        );
    }

    #[test]
    fn units_changed_at_counts_only_units_whose_bytes_differ() {
        let old = vec![7u8; 1000];
        let mut new = old.clone();
        // a write of bytes 100..1100 of a block: the same bytes but 300 (unit 3) and the
        // last byte 1099 (unit 8)
        new[200] = 0;
        new[999] = 1;
        assert_eq!(units_changed_at(100, &old, &new), (1 << 2) | (1 << 8));
        assert_eq!(units_changed_at(100, &old, &old), 0);
        // an unaligned start: byte 5 of unit 0 and byte 0 of unit 1
        let mut one = vec![0u8; 200];
        one[123] = 9;
        assert_eq!(units_changed_at(5, &[0u8; 200], &one), 1 << 1);
    }
}
