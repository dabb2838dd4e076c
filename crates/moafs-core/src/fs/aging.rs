//! Data that ages in memory, as the kernel's page cache and ext4's delayed allocation keep it
//! (`dirty_expire_ms`, the kernel's `vm.dirty_expire_centisecs`).
//!
//! A file's data becomes *young* when a write dirties it while nothing of it is dirty (the
//! kernel's `dirtied_when`). A commit of the write-back timer (`Fs::tick`) *holds back* the
//! data of young files: their dirty blocks stay in the cache, without disk addresses if they
//! had none, and the commit writes their inode with the size it had when the data became
//! young (the *disk size*: ext4's `i_disksize`), so a crash shows the file's older size and
//! older contents, never blocks that were not written. A file deleted while young is never
//! written at all. Every other commit writes all dirty data: an fsync's or sync's (what
//! `docs/SEMANTICS.md` promises is unchanged), one under memory pressure (`dirty_max`), a
//! cleaning of the byte log, unmount, ENOSPC.
//!
//! What is never held back, whatever its age:
//! - a file with a dirty block the byte log knows (records in the log or the tier, or
//!   homeless): the log's floor moves with every commit (`homeless.rs`), and its records
//!   must be covered by a write home or stay pinned;
//! - a file made *due*: truncated down (the block holding the new end has its tail zeroed in
//!   the cache; the disk's old tail would reappear if the file grew again after a crash),
//!   fallocated, written behind (`behind.rs` gives blocks addresses past the disk size), or
//!   the source of a rename that replaced another file (ext4's `auto_da_alloc`:
//!   write-then-rename never leaves an empty file);
//! - data dirtied other than by a write (a truncate's zeroed tail): it was never young.
//!
//! The state here is this module's alone; the engine asks it questions (`young`,
//! `disk_size`) and tells it what happened (`note_write`, `make_due`, `begin_commit`,
//! `held`).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::time::{Duration, Instant};

struct Young {
    /// When its data became dirty (nothing of it was dirty before).
    since: Instant,
    /// Its size then: the size its inode carries while its data is held back.
    disk_size: u64,
    /// Written at the next commit, young or not.
    due: bool,
}

pub(crate) struct Aging {
    /// Zero: every commit writes all dirty data.
    expire: Duration,
    files: HashMap<u64, Young>,
    /// The next commit is the write-back timer's: it may hold young data back.
    timer: bool,
    /// Someone waits for the next commit to make everything durable (fsync, sync, a
    /// throttled writer): it holds nothing back, even if the timer started it.
    all: bool,
    /// The files whose data the commit being planned holds back.
    holding: HashSet<u64>,
}

impl Aging {
    pub(crate) fn new(expire_ms: u64) -> Self {
        Aging {
            expire: Duration::from_millis(expire_ms),
            files: HashMap::default(),
            timer: false,
            all: false,
            holding: HashSet::default(),
        }
    }

    /// A write dirtied data of `ino`, whose size before it was `size`.
    pub(crate) fn note_write(&mut self, ino: u64, size: u64) {
        if self.expire.is_zero() {
            return;
        }
        self.files.entry(ino).or_insert_with(|| Young {
            since: Instant::now(),
            disk_size: size,
            due: false,
        });
    }

    /// Inode `ino` was freed: its number may name another file before the next commit.
    pub(crate) fn forget(&mut self, ino: u64) {
        self.files.remove(&ino);
    }

    /// The next commit writes the data of `ino` whatever its age (module comment).
    pub(crate) fn make_due(&mut self, ino: u64) {
        if let Some(y) = self.files.get_mut(&ino) {
            y.due = true;
        }
    }

    /// Its data became dirty less than the expiry ago and nothing made it due.
    pub(crate) fn young(&self, ino: u64, now: Instant) -> bool {
        self.files
            .get(&ino)
            .is_some_and(|y| !y.due && now.saturating_duration_since(y.since) < self.expire)
    }

    /// The next commit is the timer's (it may hold young data back).
    pub(crate) fn timer_commit(&mut self) {
        self.timer = true;
    }

    /// The next commit must write every dirty block (an fsync or sync waits for it).
    pub(crate) fn write_all(&mut self) {
        self.all = true;
    }

    /// A commit's plan starts: whether it may hold young data back (the timer's, nobody
    /// waiting for all of it, and `pressure` — dirty data above its bound — false).
    pub(crate) fn begin_commit(&mut self, pressure: bool) -> bool {
        let timer = std::mem::take(&mut self.timer);
        let all = std::mem::take(&mut self.all);
        self.holding.clear();
        timer && !all && !pressure && !self.expire.is_zero()
    }

    /// The commit being planned holds back the data of `held`: every other file's data it
    /// writes (or the file is gone), so only these stay young.
    pub(crate) fn held(&mut self, held: &[u64]) {
        self.holding = held.iter().copied().collect();
        let holding = &self.holding;
        self.files.retain(|ino, _| holding.contains(ino));
    }

    /// The commit being planned holds back the data of `ino`.
    pub(crate) fn holds(&self, ino: u64) -> bool {
        self.holding.contains(&ino)
    }

    /// The size the commit being planned writes into the inode of `ino` in place of its
    /// own: the disk size while its data is held back.
    pub(crate) fn disk_size(&self, ino: u64) -> Option<u64> {
        self.files
            .get(&ino)
            .filter(|_| self.holds(ino))
            .map(|y| y.disk_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_timer_commit_with_nobody_waiting_holds_data_back() {
        let mut a = Aging::new(30_000);
        a.note_write(5, 100);
        let now = Instant::now();
        assert!(a.young(5, now));
        assert!(!a.begin_commit(false), "not the timer's");
        a.timer_commit();
        assert!(a.begin_commit(false));
        a.timer_commit();
        a.write_all();
        assert!(!a.begin_commit(false), "an fsync waits for it");
        a.timer_commit();
        assert!(!a.begin_commit(true), "memory pressure");
        assert!(!Aging::new(0).begin_commit(false), "off");
    }

    #[test]
    fn the_disk_size_is_the_size_before_the_first_write_and_only_while_held() {
        let mut a = Aging::new(30_000);
        a.note_write(5, 100);
        a.note_write(5, 900); // already young: its disk size stays
        a.note_write(6, 0);
        assert_eq!(a.disk_size(5), None, "not held by any commit yet");
        a.held(&[5]);
        assert_eq!(a.disk_size(5), Some(100));
        assert_eq!(a.disk_size(6), None, "written by that commit");
        assert!(
            !a.young(6, Instant::now()),
            "its data went home: no longer young"
        );
        a.make_due(5);
        assert!(!a.young(5, Instant::now()));
    }

    #[test]
    fn data_older_than_the_expiry_is_not_young() {
        let mut a = Aging::new(1);
        a.note_write(5, 0);
        std::thread::sleep(Duration::from_millis(5));
        assert!(!a.young(5, Instant::now()));
        let mut off = Aging::new(0);
        off.note_write(5, 0);
        assert!(!off.young(5, Instant::now()), "off: nothing is young");
    }
}
