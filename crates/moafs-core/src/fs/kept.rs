//! What the engine keeps of inodes it does not hold in memory (issue 44 item 3).
//!
//! The kernel references every inode it looked up (a `find` over a tree: every file in
//! it) until it forgets it, and only then may a file with no names be freed. That
//! reference is all the engine must keep for such an inode: its lookup count here (and the
//! directory it was last seen in, which co-writing groups its data by), 24 bytes a file.
//! The rest of an inode's in-memory state — its decoded image, block cache, directory
//! index, extended attributes, readahead state — is a cache: an inode nobody has open and
//! nothing unsaved holds is *idle*, and idle inodes are dropped whenever more of them are
//! in memory than [`Kept::idle_bound`] allows (read back from the inode table when needed).

use rustc_hash::FxHashMap as HashMap;

/// The least number of inodes kept in memory before idle ones are dropped.
const MIN_INODES: usize = 4096;
/// The most: at about 1-2 KiB an inode (with its share of its directory's index), ~100 MB.
const MAX_INODES: usize = 65_536;
/// Of the cache's budget, the share idle inodes may use: 1/32.
const CACHE_SHARE_DIV: u64 = 32;
/// What one in-memory inode costs, roughly (bytes), for that share.
const INODE_COST: u64 = 2048;

#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// The kernel's references (lookup-like replies it has not forgotten).
    lookups: u64,
    /// The directory the inode was last seen in when its state was dropped (0: not known).
    hint: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Kept {
    held: HashMap<u64, Held>,
    /// Inodes in memory above which the next look drops the idle ones.
    next_trim: usize,
    /// The most inodes in memory, and referenced by the kernel, at once.
    peak_in_memory: usize,
    peak_referenced: usize,
}

/// How many inodes the engine holds, now and at the most (`-o stats=`).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct InodeCounts {
    /// Inodes whose state is in memory.
    pub in_memory: usize,
    /// Inodes the kernel references (looked up, not forgotten).
    pub referenced: usize,
    pub peak_in_memory: usize,
    pub peak_referenced: usize,
    /// In-memory inodes above which idle ones are dropped.
    pub idle_bound: usize,
}

impl Kept {
    /// The kernel's references to `ino`.
    pub(crate) fn lookups(&self, ino: u64) -> u64 {
        self.held.get(&ino).map_or(0, |h| h.lookups)
    }

    /// The kernel took `n` more references to `ino`.
    pub(crate) fn add(&mut self, ino: u64, n: u64) {
        if n > 0 {
            let h = self.held.entry(ino).or_default();
            h.lookups = h.lookups.saturating_add(n);
            self.peak_referenced = self.peak_referenced.max(self.held.len());
        }
    }

    /// The kernel dropped `n` references to `ino` (a FORGET).
    pub(crate) fn release(&mut self, ino: u64, n: u64) {
        if let Some(h) = self.held.get_mut(&ino) {
            h.lookups = h.lookups.saturating_sub(n);
            if h.lookups == 0 {
                self.held.remove(&ino);
            }
        }
    }

    /// The kernel holds no reference to `ino` (a whiteout no reply handed out; an orphan at
    /// unmount).
    pub(crate) fn none(&mut self, ino: u64) {
        self.held.remove(&ino);
    }

    /// The in-memory state of `ino`, last seen in directory `hint`, is dropped: the hint
    /// stays while the kernel holds the inode.
    pub(crate) fn dropped(&mut self, ino: u64, hint: u64) {
        if let Some(h) = self.held.get_mut(&ino) {
            h.hint = hint;
        }
    }

    /// The directory `ino` was last seen in, as its dropped state said (0: not known).
    pub(crate) fn hint(&self, ino: u64) -> u64 {
        self.held.get(&ino).map_or(0, |h| h.hint)
    }

    /// An inode's state was loaded or made: `in_memory` are now.
    pub(crate) fn loaded(&mut self, in_memory: usize) {
        self.peak_in_memory = self.peak_in_memory.max(in_memory);
    }

    /// The counts, with `in_memory` inodes now and a cache budget of `cache_bytes`.
    pub(crate) fn counts(&self, in_memory: usize, cache_bytes: u64) -> InodeCounts {
        InodeCounts {
            in_memory,
            referenced: self.held.len(),
            peak_in_memory: self.peak_in_memory,
            peak_referenced: self.peak_referenced,
            idle_bound: Self::idle_bound(cache_bytes),
        }
    }

    /// How many inodes may be in memory before the idle ones are dropped, with a cache
    /// budget of `cache_bytes`.
    pub(crate) fn idle_bound(cache_bytes: u64) -> usize {
        let share = cache_bytes / CACHE_SHARE_DIV / INODE_COST;
        (share.min(MAX_INODES as u64) as usize).max(MIN_INODES)
    }

    /// Whether `in_memory` inodes are more than the bound (`idle_bound`, or, when the last
    /// drop left many busy, that many and half as many again: each drop walks every inode
    /// in memory, so the loads between two drops must pay for it).
    pub(crate) fn over(&self, in_memory: usize, cache_bytes: u64) -> bool {
        in_memory > self.next_trim.max(Self::idle_bound(cache_bytes))
    }

    /// Idle inodes were dropped and `left` stayed in memory, with a cache budget of
    /// `cache_bytes`.
    pub(crate) fn trimmed(&mut self, left: usize, cache_bytes: u64) {
        self.next_trim = left.saturating_add((left / 2).max(Self::idle_bound(cache_bytes)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_count_up_and_down_and_go() {
        let mut k = Kept::default();
        k.add(7, 2);
        k.add(7, 1);
        k.add(8, 0);
        assert_eq!((k.lookups(7), k.lookups(8), k.held.len()), (3, 0, 1));
        k.dropped(7, 42);
        k.dropped(8, 43); // not referenced: nothing kept
        assert_eq!((k.hint(7), k.hint(8)), (42, 0));
        k.release(7, 2);
        assert_eq!((k.lookups(7), k.hint(7)), (1, 42));
        k.release(7, 5);
        assert_eq!((k.lookups(7), k.hint(7), k.held.len()), (0, 0, 0));
        k.add(9, 1);
        k.none(9);
        k.loaded(3);
        k.loaded(2);
        let c = k.counts(1, 0);
        assert_eq!((c.referenced, c.peak_referenced, c.in_memory), (0, 1, 1));
        assert_eq!((c.peak_in_memory, c.idle_bound), (3, MIN_INODES));
    }

    #[test]
    fn the_bound_follows_the_cache_within_limits() {
        assert_eq!(Kept::idle_bound(0), MIN_INODES);
        assert_eq!(Kept::idle_bound(64 << 20), MIN_INODES);
        assert_eq!(Kept::idle_bound(1 << 30), 16_384);
        assert_eq!(Kept::idle_bound(64 << 30), MAX_INODES);
        let mut k = Kept::default();
        assert!(!k.over(MIN_INODES, 0));
        assert!(k.over(MIN_INODES + 1, 0));
        // a drop that left 4,000 busy: the next is due past 4,000 + 4,096
        k.trimmed(4_000, 0);
        assert!(!k.over(8_096, 0));
        assert!(k.over(8_097, 0));
        // one that left 10,000: past 15,000
        k.trimmed(10_000, 0);
        assert!(!k.over(15_000, 0));
        assert!(k.over(15_001, 0));
        k.trimmed(0, 0);
        assert!(k.over(MIN_INODES + 1, 0));
    }
}
