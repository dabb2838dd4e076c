//! The engine's API: `Fs`'s POSIX operations on inode numbers, each taking the engine lock
//! (after a warm pass that reads what it needs with the lock released, `fetch.rs`) and
//! calling the `Inner` method that does the work.

use super::fsynctime::{FsyncPhase, FsyncReport, Trace};
use super::{
    data, this_thread_key, AtimePolicy, Attr, Caller, DirEntry, EngineCounters, Fs, FsError,
    FsResult, Geometry, InFlight, Inner, Ino, InodeCounts, MountOptions, RenameFlags, SetAttr,
    StatFs, XattrFlags, FOLLOWS_BYTES,
};
use crate::device::DeviceCounters;
use crate::format::Superblock;
use std::time::{Duration, Instant};

impl Fs {
    pub fn geometry(&self) -> Geometry {
        self.lock().alloc.geo
    }
    pub fn superblock(&self) -> Superblock {
        self.lock().sb.clone()
    }
    pub fn counters(&self) -> EngineCounters {
        let g = self.lock();
        EngineCounters {
            ra_wasted: g.book.ra_wasted(),
            ..g.counters
        }
    }
    /// The NVM tier's counters, if the byte log has a tier.
    pub fn tier_counters(&self) -> Option<crate::device::NvmCounters> {
        let g = self.lock();
        g.bytelog
            .as_ref()
            .and_then(|l| l.tier.as_ref())
            .map(|t| t.nvm.counters())
    }
    pub fn device_counters(&self) -> DeviceCounters {
        self.lock().dev.counters()
    }
    pub fn options(&self) -> MountOptions {
        self.lock().opts.clone()
    }
    /// The cache's and its dirty data's budgets now, bytes (they follow memory unless
    /// pinned: `MountOptions::cache_follows_memory`).
    pub fn budgets(&self) -> (u64, u64) {
        let g = self.lock();
        (g.budget.cache_bytes(), g.budget.dirty_bytes())
    }
    /// How many inodes the engine holds in memory and the kernel references (`kept.rs`).
    pub fn inode_counts(&self) -> InodeCounts {
        let g = self.lock();
        g.kept.counts(g.inodes.len(), g.budget.cache_bytes())
    }
    /// Checks the engine's bookkeeping against the state it summarises (cache, dirty and
    /// reservation counts, the sets the next commit visits, epochs, group free counts):
    /// the first disagreement, described. For tests; costs a walk of everything in memory.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.lock().check_invariants()
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        self.live()?;
        let mut g = self.warm(|g| {
            g.warm_entry(parent, name, false);
        });
        let ino = g.lookup_name(parent, name)?;
        g.add_lookup(ino)?;
        let node = g.inode(ino)?;
        if !node.is_dir() {
            node.parent_hint = parent;
        }
        let attr = g.attr(ino);
        // a walk looks up more inodes in a second than the bound allows (`kept.rs`)
        g.trim_inode_caches();
        attr
    }
    /// The kernel drops `n` references taken by lookup-like replies.
    pub fn forget(&self, ino: Ino, n: u64) {
        if self.is_shut_down() {
            return; // nothing is freed any more
        }
        let mut g = self.warm(|g| g.warm_reap(ino, n, 0));
        g.kept.release(ino, n);
        let was = g.inodes.contains_key(&ino);
        if let Err(e) = g.maybe_reap(ino) {
            log::error!("freeing inode {ino}: {e}");
        }
        let freed = was && !g.inodes.contains_key(&ino);
        drop(g);
        if freed {
            // a writer short of space may wait for this (`FsError::SpaceHeld`)
            self.done.notify_all();
        }
    }
    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        self.live()?;
        self.warm(|g| g.warm_inode(ino)).attr(ino)
    }
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> FsResult<Attr> {
        self.live()?;
        let need = |g: &mut Inner| match set.size {
            Some(size) => g.warm_truncate(ino, size),
            None => g.warm_inode(ino),
        };
        self.mutate_warm(need, |g| {
            if set.size.is_some() {
                g.symlink_data_refused(ino)?;
            }
            g.refuse_setattr(ino, set)?;
            g.note_mutated(ino);
            g.setattr(ino, set)
        })
    }
    /// Creates any kind of inode but a directory or symlink (`mode` includes the type bits).
    pub fn mknod(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        who: Caller,
    ) -> FsResult<Attr> {
        self.live()?;
        self.mutate_warm(
            |g| g.warm_dir(parent),
            |g| {
                g.note_mutated(parent);
                g.make(parent, name, mode, rdev, who, None)
            },
        )
    }
    pub fn create(&self, parent: Ino, name: &[u8], perm: u32, who: Caller) -> FsResult<Attr> {
        self.live()?;
        self.mutate_warm(
            |g| g.warm_dir(parent),
            |g| {
                g.note_mutated(parent);
                g.make(parent, name, libc::S_IFREG | (perm & 0o7777), 0, who, None)
            },
        )
    }
    /// open(O_TMPFILE): a regular file with no name in directory `parent` (link count 0: an
    /// orphan until `link` names it, which it may if `linkable`, i.e. without O_EXCL). The
    /// caller holds one kernel reference to it, as after `create`.
    pub fn tmpfile(&self, parent: Ino, perm: u32, who: Caller, linkable: bool) -> FsResult<Attr> {
        self.live()?;
        self.mutate_warm(
            |g| g.warm_dir(parent),
            |g| g.make_unnamed(parent, perm, who, linkable),
        )
    }
    pub fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, who: Caller) -> FsResult<Attr> {
        self.live()?;
        self.mutate_warm(
            |g| g.warm_dir(parent),
            |g| {
                g.note_mutated(parent);
                g.make(parent, name, libc::S_IFDIR | (perm & 0o7777), 0, who, None)
            },
        )
    }
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], who: Caller) -> FsResult<Attr> {
        self.live()?;
        self.mutate_warm(
            |g| g.warm_dir(parent),
            |g| {
                g.note_mutated(parent);
                g.make(parent, name, libc::S_IFLNK | 0o777, 0, who, Some(target))
            },
        )
    }
    pub fn readlink(&self, ino: Ino) -> FsResult<Vec<u8>> {
        self.live()?;
        self.lock().readlink(ino)
    }
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.live()?;
        let mut g = self.warm(|g| g.warm_victim(parent, name));
        g.note_mutated(parent);
        g.note_victim(parent, name);
        g.remove(parent, name, false)
    }
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.live()?;
        let mut g = self.warm(|g| g.warm_victim(parent, name));
        g.note_mutated(parent);
        g.note_victim(parent, name);
        g.remove(parent, name, true)
    }
    pub fn rename(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> FsResult<()> {
        self.live()?;
        let need = |g: &mut Inner| {
            g.warm_dir(parent);
            g.warm_dir(newparent);
            g.warm_entry(parent, name, true);
            g.warm_victim(newparent, newname);
        };
        self.mutate_warm(need, |g| {
            g.note_rename(parent, name, newparent, newname);
            g.rename(parent, name, newparent, newname, flags)
        })
    }
    /// rename(2) with RENAME_WHITEOUT (overlayfs's upper layers): the rename, and in the same
    /// step a whiteout — a character device 0:0 owned by `who` — where the source was.
    pub fn rename_whiteout(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        noreplace: bool,
        who: Caller,
    ) -> FsResult<()> {
        self.live()?;
        let mut g = self.lock();
        // the whiteout's inode must be there before anything moves
        if g.alloc.free_inodes() == 0 && g.alloc.pending_inode_count() == 0 {
            return Err(FsError::NoSpace);
        }
        if g.alloc.free_inodes() == 0 {
            drop(g);
            self.commit_to_free()?;
            g = self.lock();
            // another operation may have taken the inode the commits freed meanwhile:
            // refuse before the rename rather than leave it done without its whiteout
            if g.alloc.free_inodes() == 0 {
                return Err(FsError::NoSpace);
            }
        }
        let flags = RenameFlags {
            noreplace,
            exchange: false,
        };
        g.note_rename(parent, name, newparent, newname);
        g.rename(parent, name, newparent, newname, flags)?;
        let who = Caller { umask: 0, ..who };
        let w = g.make(parent, name, libc::S_IFCHR, 0, who, None)?;
        // no entry reply hands the whiteout to the kernel: it holds no reference to it
        g.kept.none(w.ino);
        Ok(())
    }
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Attr> {
        self.live()?;
        let need = |g: &mut Inner| {
            g.warm_inode(ino);
            g.warm_dir(newparent);
        };
        self.mutate_warm(need, |g| {
            g.note_mutated(ino);
            g.note_mutated(newparent);
            g.link(ino, newparent, newname)
        })
    }
    /// Notes an open file handle (an unlinked inode lives until its last close).
    pub fn open(&self, ino: Ino) -> FsResult<Attr> {
        self.live()?;
        let mut g = self.warm(|g| g.warm_inode(ino));
        g.inode(ino)?.opens += 1;
        g.attr(ino)
    }
    pub fn release(&self, ino: Ino) -> FsResult<()> {
        if self.is_shut_down() {
            return Ok(()); // a close succeeds; nothing is freed any more
        }
        let mut g = self.warm(|g| g.warm_reap(ino, 0, 1));
        if let Some(node) = g.inodes.get_mut(&ino) {
            node.opens = node.opens.saturating_sub(1);
        }
        g.maybe_reap(ino)
    }
    /// Whether a read at `offset` of `ino` would continue the file's last read (it starts
    /// within [`FOLLOWS_BYTES`] of where that one ended): a sequential stream, such as the
    /// kernel's readahead of it. `None` when the engine is busy (this never waits for the
    /// engine lock) or the inode is not in memory. The FUSE transport serves a stream's reads
    /// on another CPU and everything else on the caller's.
    pub fn read_follows(&self, ino: Ino, offset: u64) -> Option<bool> {
        let g = self.inner.try_lock().ok()?;
        let end = g.inodes.get(&ino)?.read_end;
        Some(offset.abs_diff(end) <= FOLLOWS_BYTES)
    }
    /// Reads; the device I/O happens outside the engine lock, so reads run in parallel.
    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        self.read_with(ino, offset, size, |n| vec![0u8; n])
    }
    /// Reads into `out` (up to its length) and returns how many bytes the file had there:
    /// like [`Fs::read`] without allocating (a transport reads straight into its reply
    /// buffer).
    pub fn read_into(&self, ino: Ino, offset: u64, out: &mut [u8]) -> FsResult<usize> {
        let size = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let mut len = 0;
        self.read_with(ino, offset, size, |n| {
            len = n;
            &mut out[..n]
        })?;
        Ok(len)
    }
    fn read_with<O: AsMut<[u8]>>(
        &self,
        ino: Ino,
        offset: u64,
        size: u32,
        make: impl FnOnce(usize) -> O,
    ) -> FsResult<O> {
        self.live()?;
        let mut g = self.warm(|g| g.warm_read(ino, offset, size));
        let mut plan = g.read_plan(ino, offset, size, make)?;
        g.touch_atime(ino)?;
        if plan.is_complete() {
            return Ok(plan.out);
        }
        // Taken before the engine lock is released: no commit can make the planned blocks
        // reusable (`release_pending` waits for the gate) until the reads below are done.
        let gate = g.io_gate.clone();
        let shared = gate.read().unwrap_or_else(|e| e.into_inner());
        let (dev, bs) = (g.dev.clone(), g.bs() as u64);
        plan.keep_demand = g.keeps_read(&plan);
        drop(g);
        data::read_runs(dev.as_ref(), bs, &mut plan)?;
        drop(shared);
        if plan.keep_demand || !plan.ahead.is_empty() {
            self.lock().keep_fetched(ino, &mut plan)?;
        }
        Ok(plan.out)
    }
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.live()?;
        let need = |g: &mut Inner| g.warm_write(ino, offset, data.len() as u64);
        let (n, wake, over) = self.mutate_warm(need, |g| {
            g.symlink_data_refused(ino)?;
            g.refuse_immutable(ino)?;
            g.note_mutated(ino);
            let n = g.write(ino, offset, data)?;
            Ok((n, g.wants_write_behind(), g.over_dirty_max()))
        })?;
        if wake {
            self.wake_write_behind();
        }
        if over {
            self.throttle()?;
        }
        Ok(n)
    }
    /// A writer that took dirty data above `dirty_bytes_max` waits for a commit (the next
    /// one, or the one in flight if that brings dirty data below the threshold).
    fn throttle(&self) -> FsResult<()> {
        let epoch = {
            let mut g = self.lock();
            if !g.over_dirty_max() {
                return Ok(());
            }
            g.aging.write_all();
            g.epochs.started() + 1
        };
        self.wait_durable(epoch)
    }
    /// `mode`: 0, `FALLOC_FL_KEEP_SIZE`, or `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`.
    pub fn fallocate(&self, ino: Ino, offset: u64, len: u64, mode: i32) -> FsResult<()> {
        self.live()?;
        self.mutate_warm(
            |g| g.warm_write(ino, offset, len),
            |g| {
                g.symlink_data_refused(ino)?;
                g.refuse_fallocate(ino, mode)?;
                g.note_mutated(ino);
                g.fallocate(ino, offset, len, mode)
            },
        )?;
        self.throttle()
    }
    /// Makes the file durable (`docs/SEMANTICS.md`). A file whose only changes are small
    /// overwrites (and its times) goes to the byte log: that file alone, one batch shared
    /// with concurrent such fsyncs (`bytelog.rs`). Otherwise a commit of the whole file
    /// system: returns after the device flush of the commit that took the changes;
    /// concurrent fsyncs share one commit; nothing unsaved and no commit in flight: at once.
    pub fn fsync(&self, ino: Ino, datasync: bool) -> FsResult<()> {
        self.fsync_for(ino, datasync, this_thread_key())
    }
    /// [`Fs::fsync`] for `caller`: who asks, as jbd2's batching rule tells syncing threads
    /// apart (a FUSE adapter passes the calling thread's id from the request, not its own
    /// serving thread's: those are few, and any of them may serve any caller).
    pub fn fsync_for(&self, ino: Ino, _datasync: bool, caller: u64) -> FsResult<()> {
        self.live()?;
        let mut t = Trace::default();
        let r = if self.promise_start(ino) {
            self.fsync_now(ino, caller, &mut t)
                .map(|()| self.promise_end(ino))
        } else {
            self.fsync_now(ino, caller, &mut t)
        };
        if r.is_ok() {
            self.fsync_times.record(t);
        }
        r
    }
    /// Where the fsyncs of this mount spent their time, by phase and by the way they were
    /// served (`fsynctime.rs`).
    pub fn fsync_report(&self) -> FsyncReport {
        self.fsync_times.report()
    }
    /// Adds a phase of an fsync measured outside the engine: the transport's
    /// [`FsyncPhase::Queue`] (the request's wait before [`Fs::fsync_for`]) and
    /// [`FsyncPhase::Reply`] (its reply's after it).
    pub fn note_fsync_phase(&self, phase: FsyncPhase, d: Duration) {
        self.fsync_times.note(phase, d);
    }
    fn fsync_now(&self, ino: Ino, caller: u64, t: &mut Trace) -> FsResult<()> {
        if self.fsync_bytelog(ino, t)? {
            return Ok(());
        }
        let (epoch, batch) = {
            let from = Instant::now();
            let mut g = self.warm(|g| g.warm_inode(ino));
            t.since(FsyncPhase::Lock, from);
            g.inode(ino)?;
            // jbd2's batching rule: when the last fsync came from another thread, several
            // are syncing, and one that has to commit first waits about one commit's time
            // for the others to join it.
            let batch = g.epochs.fsync_from(caller);
            (g.sync_epoch_all(), batch)
        };
        self.wait_durable_batched(epoch, batch, t)
    }
    /// The disk address of each block of a file up to its size (0: a hole or not yet
    /// written back), for tests and `inspect`.
    pub fn block_map(&self, ino: Ino) -> FsResult<Vec<u64>> {
        self.live()?;
        let mut g = self.lock();
        let bs = g.bs() as u64;
        let blocks = g.inode(ino)?.d.size.div_ceil(bs);
        let mut map = vec![0; blocks as usize];
        for r in g.map_runs(ino)? {
            let (from, to) = (r.logical.min(blocks), (r.logical + r.len).min(blocks));
            for (k, slot) in map[from as usize..to as usize].iter_mut().enumerate() {
                *slot = r.physical + k as u64;
            }
        }
        Ok(map)
    }
    /// FIBMAP (FUSE_BMAP, which the kernel sends to a `fuseblk` mount): the device block, in
    /// units of `blocksize`, that holds block `block` of the file (in the same units); 0 for
    /// a hole or past the map. As ext4's bmap writes delayed allocations out and flushes a
    /// data journal first, what is not home yet gets there before the answer: everything
    /// unsaved is committed (a new block's address is chosen at its commit), blocks whose
    /// newest bytes are byte-log records are written home, and what waits for a checkpoint
    /// (journaled blocks) is checkpointed — so the device holds the file's bytes at the
    /// address answered (until the file changes again).
    pub fn bmap(&self, ino: Ino, block: u64, blocksize: u32) -> FsResult<u64> {
        self.live()?;
        if !blocksize.is_power_of_two() {
            return Err(FsError::Invalid {
                detail: format!("bmap block size {blocksize}"),
            });
        }
        {
            let mut g = self.lock();
            g.inode(ino)?;
            // blocks a commit left to the byte log (write-back logging) go home too
            g.home_at_next_commit();
        }
        self.sync()?;
        self.checkpoint()?;
        let mut g = self.lock();
        let bs = g.bs() as u64;
        let Some(off) = block.checked_mul(blocksize as u64) else {
            return Ok(0);
        };
        if off / bs >= g.max_blocks_of(ino)? {
            return Ok(0);
        }
        let phys = g.bmap(ino, off / bs)?;
        if phys == 0 {
            return Ok(0);
        }
        Ok((phys * bs + off % bs) / blocksize as u64)
    }
    /// Writes everything back and flushes the device.
    pub fn sync(&self) -> FsResult<()> {
        self.live()?;
        let epoch = {
            let mut g = self.lock();
            if self.recording {
                g.dev.note(crate::device::Note::SyncStart);
            }
            g.sync_epoch_all()
        };
        self.wait_durable(epoch)?;
        if self.recording {
            self.lock().dev.note(crate::device::Note::Sync);
        }
        Ok(())
    }
    /// Writes everything back and drops the block cache and the in-memory state of idle
    /// inodes (benchmark scenario A: the next reads come from the device). Returns the
    /// blocks dropped.
    pub fn drop_caches(&self) -> FsResult<u64> {
        self.live()?;
        // No commit in flight while the cache is dropped (its clean blocks may not be home).
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        if g.has_unsaved() {
            g.commit()?;
        }
        let n = g.drop_clean();
        g.forget_all_idle_inodes();
        Ok(n)
    }
    /// Periodic work: budgets that follow memory look at it again (`budget.rs`: the cache
    /// evicts down to a smaller one); write back when the flush interval has passed or dirty
    /// data is over its budget, or only write home the journaled blocks whose checkpoint is
    /// due (a commit that runs does that too). Returns whether it wrote.
    pub fn tick(&self) -> FsResult<bool> {
        if self.is_shut_down() {
            return Ok(false);
        }
        let now = std::time::Instant::now();
        if self.lock().budget.due(now) {
            // (the files are read with the engine lock released)
            let room = crate::memory::available();
            let mut g = self.lock();
            if let Some(room) = room {
                let held = g.book.cached() + g.spare.len() as u64;
                let holding = held * g.bs() as u64;
                g.budget.follow(room, holding, now);
                g.after_dirtying()?;
                g.spares_within_budget();
            }
        }
        let due = |g: &Inner| {
            !g.unmounted
                && !g.opts.read_only
                && (g.epochs.since_last_commit().as_millis() >= g.opts.flush_interval_ms as u128
                    || g.over_dirty_max())
        };
        // (over its budget, dirty data is work even while young: `aging.rs`)
        let work = |g: &Inner| g.over_dirty_max() || g.timer_has_work();
        {
            let mut g = self.lock();
            g.trim_inode_caches();
            if g.epochs.writing() || g.unmounted || g.opts.read_only {
                return Ok(false);
            }
            if !due(&g) || !work(&g) {
                if due(&g) {
                    g.epochs.nothing_to_write();
                }
                let ckpt = g.ckpt.due();
                drop(g);
                if ckpt {
                    self.checkpoint()?;
                }
                return Ok(ckpt);
            }
        }
        let job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        if !due(&g) || !work(&g) {
            return Ok(false);
        }
        g.aging.timer_commit();
        self.run_commit(g, job, &mut Trace::default())?;
        Ok(true)
    }
    /// Writes home every journaled block waiting for its checkpoint, then flushes
    /// (`checkpoint.rs`); the device I/O runs with the engine lock released.
    pub fn checkpoint(&self) -> FsResult<()> {
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        if g.failed || g.unmounted || g.opts.read_only || g.ckpt.waiting() == 0 {
            return Ok(());
        }
        if g.epochs.writing() {
            return Ok(()); // (cannot be: the commit job holds commit_mx)
        }
        let c = g.checkpoint_plan();
        let (dev, bs) = (g.dev.clone(), g.bs() as u64);
        // Like a commit's I/O: no commit may start meanwhile (the paths that commit under
        // the engine lock alone — ENOSPC, fallocate's throttle — see `Epochs::writing`), the
        // journal's space is not free until this is durable.
        g.epochs.set_writing(true);
        drop(g);
        let unwinding = InFlight(self);
        let r = c.run(bs).and_then(|()| dev.flush());
        std::mem::forget(unwinding);
        let mut g = self.lock();
        g.epochs.set_writing(false);
        g.ckpt.end(r.is_ok());
        let r = r.map_err(FsError::from);
        if let Err(e) = &r {
            g.fail("a checkpoint", e);
        }
        drop(g);
        self.done.notify_all();
        r
    }
    /// Clears set-user-ID of a regular file, and set-group-ID if it is group-executable or
    /// the caller (`who`: its groups when unprivileged, `None` when privileged) is not in
    /// the file's group: what a write, truncate or fallocate by `who` does. True when the
    /// mode changed.
    pub fn kill_suid(&self, ino: Ino, who: Option<&[u32]>) -> FsResult<bool> {
        self.live()?;
        let mut g = self.warm(|g| g.warm_inode(ino));
        g.note_mutated(ino);
        g.kill_suid(ino, who)
    }
    pub fn statfs(&self) -> StatFs {
        self.lock().statfs()
    }
    pub fn readdir(&self, ino: Ino, offset: u64, max_entries: usize) -> FsResult<Vec<DirEntry>> {
        self.live()?;
        self.warm(|g| g.warm_dir(ino))
            .readdir(ino, offset, max_entries, u64::MAX)
    }
    /// How reads and listings update access times from now on (the FUSE adapter follows the
    /// mount's `noatime`/`relatime`/`strictatime`/`nodiratime`).
    pub fn set_atime_policy(&self, policy: AtimePolicy) {
        self.lock().atime = policy;
    }
    /// A listing of directory `ino` begins: its access time follows the policy.
    pub fn note_listing(&self, ino: Ino) -> FsResult<()> {
        self.live()?;
        self.warm(|g| g.warm_inode(ino)).touch_atime(ino)
    }
    /// The offset that ends a listing started now: [`Fs::readdir_until`] with it returns the
    /// entries the directory holds now that stay, each once, and none made later — so a
    /// listing ends even while every entry it returns is renamed within the directory (which
    /// makes a new entry).
    pub fn readdir_end(&self, ino: Ino) -> FsResult<u64> {
        self.live()?;
        self.warm(|g| g.warm_dir(ino)).readdir_end(ino)
    }
    /// [`Fs::readdir`] that stops before the offset `end` (from [`Fs::readdir_end`]).
    pub fn readdir_until(
        &self,
        ino: Ino,
        offset: u64,
        max_entries: usize,
        end: u64,
    ) -> FsResult<Vec<DirEntry>> {
        self.live()?;
        self.warm(|g| g.warm_dir(ino))
            .readdir(ino, offset, max_entries, end)
    }
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: XattrFlags) -> FsResult<()> {
        self.live()?;
        self.mutate_warm(
            |g| g.warm_xattrs(ino),
            |g| {
                g.refuse_pinned(ino)?;
                g.note_mutated(ino);
                g.setxattr(ino, name, value, flags)
            },
        )
    }
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        self.live()?;
        self.warm(|g| g.warm_xattrs(ino)).getxattr(ino, name)
    }
    pub fn listxattr(&self, ino: Ino) -> FsResult<Vec<Vec<u8>>> {
        self.live()?;
        self.warm(|g| g.warm_xattrs(ino)).listxattr(ino)
    }
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> FsResult<()> {
        self.live()?;
        let mut g = self.warm(|g| g.warm_xattrs(ino));
        g.refuse_pinned(ino)?;
        g.note_mutated(ino);
        g.removexattr(ino, name)
    }
    /// Checks `mask` (R_OK=4, W_OK=2, X_OK=1, F_OK=0) for `who`.
    pub fn access(&self, ino: Ino, mask: u32, who: Caller) -> FsResult<()> {
        self.live()?;
        self.warm(|g| g.warm_inode(ino)).access(ino, mask, who)
    }
    /// Writes everything back, frees unlinked inodes, marks the image clean and flushes.
    /// Later calls do nothing.
    pub fn unmount(&self) -> FsResult<()> {
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        {
            let g = self.lock();
            log::info!(
                "unmount: {} blocks cached ({} dirty), {} spare buffers",
                g.book.cached(),
                g.book.dirty(),
                g.spare.len()
            );
        }
        let r = self.lock().unmount();
        self.done.notify_all();
        r
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            log::error!("unmount failed: {e}");
        }
    }
}
