//! The memory budgets of the block cache and of its dirty data (issue 44).
//!
//! Pinned (`cache_size=` / `dirty_max=`, or an engine mounted in process), a budget is the
//! number given. Following memory (what `moafs mount` does for a budget not given), it is a
//! share of what this process could hold — what the machine or its memory cgroup still has
//! (`crate::memory`) plus what the cache holds already — as the kernel sizes its dirty
//! limits from dirtyable memory (`vm.dirty_ratio`, 20 %; its background share,
//! `vm.dirty_background_ratio`, is half of it here too: `behind.rs`). The engine looks again
//! at most once a second (the write-back timer's tick): when memory gets tight the budgets
//! shrink, clean blocks are evicted and dirty data is written back — writers wait at the
//! dirty budget, as before — so the daemon gives memory back instead of being killed for it.

use super::types::MountOptions;
use std::time::{Duration, Instant};

/// The dirty budget's share of what the process could hold, percent (`vm.dirty_ratio`).
const DIRTY_SHARE_PCT: u64 = 20;
/// The cache's share, percent: the daemon's cache is not reclaimable by the kernel, and
/// the kernel's page cache holds much of the same data, so less than all of it.
const CACHE_SHARE_PCT: u64 = 40;
/// The least a budget following memory shrinks to.
const MIN_CACHE: u64 = 16 << 20;
const MIN_DIRTY: u64 = 8 << 20;
/// How often memory is looked at again.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct Budget {
    cache: u64,
    dirty: u64,
    cache_follows: bool,
    dirty_follows: bool,
    looked: Option<Instant>,
}

impl Budget {
    /// The budgets of `opts`: pinned, or following memory from those numbers on.
    pub(crate) fn new(opts: &MountOptions) -> Budget {
        Budget {
            cache: opts.cache_bytes,
            dirty: opts.dirty_bytes_max,
            cache_follows: opts.cache_follows_memory,
            dirty_follows: opts.dirty_follows_memory,
            looked: None,
        }
    }

    /// [`Budget::new`], having looked at memory once when a budget follows it (the cache
    /// holds nothing yet).
    pub(crate) fn at_mount(opts: &MountOptions) -> Budget {
        let mut b = Budget::new(opts);
        let now = Instant::now();
        if b.due(now) {
            if let Some(room) = crate::memory::available() {
                b.follow(room, 0, now);
            }
        }
        b
    }

    /// Bytes of cached blocks (clean and dirty) the cache keeps.
    pub(crate) fn cache_bytes(&self) -> u64 {
        self.cache
    }

    /// Bytes of dirty blocks above which writers wait for a commit.
    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.dirty
    }

    /// Whether memory should be looked at now (a budget follows it, and a second passed).
    pub(crate) fn due(&self, now: Instant) -> bool {
        (self.cache_follows || self.dirty_follows)
            && self
                .looked
                .is_none_or(|t| now.saturating_duration_since(t) >= LOOK_EVERY)
    }

    /// Sets the budgets that follow memory from `room`, the bytes the process could still
    /// use, and `holding`, the bytes the cache holds now; `now` is when.
    pub(crate) fn follow(&mut self, room: u64, holding: u64, now: Instant) {
        self.looked = Some(now);
        let could = room.saturating_add(holding);
        if self.cache_follows {
            self.cache = (could / 100 * CACHE_SHARE_PCT).max(MIN_CACHE);
        }
        if self.dirty_follows {
            // dirty blocks are cached blocks: at most half the cache, the rest for reads
            self.dirty = (could / 100 * DIRTY_SHARE_PCT)
                .min(self.cache / 2)
                .max(MIN_DIRTY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(cache_follows: bool, dirty_follows: bool) -> MountOptions {
        MountOptions {
            cache_bytes: 256 << 20,
            dirty_bytes_max: 64 << 20,
            cache_follows_memory: cache_follows,
            dirty_follows_memory: dirty_follows,
            ..MountOptions::default()
        }
    }

    #[test]
    fn budgets_follow_memory_both_ways_unless_pinned() {
        let now = Instant::now();
        let mut b = Budget::new(&opts(true, true));
        assert!(b.due(now));
        // 10 GiB left, 1 GiB held: 4.4 GiB of cache, 2.2 GiB dirty
        b.follow(10 << 30, 1 << 30, now);
        assert_eq!(b.cache_bytes(), (11u64 << 30) / 100 * 40);
        assert_eq!(b.dirty_bytes(), (11u64 << 30) / 100 * 20);
        assert!(!b.due(now + Duration::from_millis(500)));
        assert!(b.due(now + LOOK_EVERY));
        // memory gets tight: 50 MiB left, 30 MiB held — they shrink, to their floors
        b.follow(50 << 20, 30 << 20, now + LOOK_EVERY);
        assert_eq!(b.cache_bytes(), MIN_CACHE.max((80u64 << 20) / 100 * 40));
        assert_eq!(b.dirty_bytes(), MIN_DIRTY.max((80u64 << 20) / 100 * 20));
        b.follow(0, 0, now);
        assert_eq!((b.cache_bytes(), b.dirty_bytes()), (MIN_CACHE, MIN_DIRTY));

        // pinned: never looked at, never changed
        let mut p = Budget::new(&opts(false, false));
        assert!(!p.due(now));
        p.follow(10 << 30, 0, now);
        assert_eq!((p.cache_bytes(), p.dirty_bytes()), (256 << 20, 64 << 20));
        // a pinned cache caps the dirty budget that follows memory at half of it
        let mut d = Budget::new(&opts(false, true));
        d.follow(10 << 30, 0, now);
        assert_eq!((d.cache_bytes(), d.dirty_bytes()), (256 << 20, 128 << 20));
    }
}
