//! The file system: POSIX operations on inode numbers, over a `BlockDevice`.
//!
//! One `Fs` owns the mounted state behind a single mutex (`Inner`). Operations take the lock,
//! work on in-memory inodes, directories and cached blocks, and return; data reaches the device
//! at write-back (`commit`), which chooses disk addresses only then (delayed allocation) and
//! writes each file's dirty blocks in physically contiguous, vectored runs.
//!
//! Lock order: `Fs::commit_mx` (held by the one thread running a commit or a write-behind
//! round, across its phases), then `Fs::inner` (the engine lock), then `Inner::io_gate` (a
//! reader/writer gate that lets device reads of `Fs::read` and of warm passes (`fetch.rs`:
//! the cache misses of other operations) run outside the engine lock while no commit can
//! make their blocks reusable); device implementations have their own internal
//! locks, taken last. Nobody waits for `commit_mx` while holding the engine lock. A commit
//! plans under the engine lock, does its device I/O with it released and finishes under it
//! again (`commit.rs`); fsyncs wait for the commit that covers them on `Fs::done`.

pub mod acl;
mod aging;
mod alloc;
pub(crate) use alloc::free_extents;
mod behind;
mod bytelog;
pub use bytelog::{plan_bytelog_replay, read_live_records, ByteLogReplay, RecordTarget};
mod cache;
mod checkpoint;
mod commit;
mod cowrite;
mod data;
mod dir;
mod fetch;
mod homeless;
pub mod iflags;
pub mod journal;
pub mod label;
mod node;
mod ops;
mod promise;
mod readahead;
mod shutdown;
mod trim;
pub use readahead::{Readahead, ReadaheadPolicy};
pub use shutdown::ShutdownFlush;

/// How near the end of a file's last read a read must start to continue it
/// ([`Fs::read_follows`]): the kernel keeps up to two readahead requests of 1 MiB in flight
/// per stream, and they may be served out of order.
pub const FOLLOWS_BYTES: u64 = 4 << 20;
mod types;

pub use types::*;

use crate::device::{BlockDevice, DeviceCounters};
use crate::error::{FsError, FsResult};
use crate::format::{bitmap_crc, Geometry, GroupHeader, Superblock, STATE_CLEAN, STATE_MOUNTED};
use alloc::{Allocator, Group};
use cache::Block;
use node::{IndBlock, Inode};
use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

pub(crate) struct Inner {
    pub dev: Arc<dyn BlockDevice>,
    pub sb: Superblock,
    pub alloc: Allocator,
    pub inodes: HashMap<u64, Inode>,
    pub itable: HashMap<u64, Vec<u8>>,
    pub ind: HashMap<u64, IndBlock>,
    /// Freed inode slots to write (zeroed, generation kept) at the next commit.
    pub dead: HashMap<u64, crate::format::DiskInode>,
    /// Data blocks promised to dirty blocks that have no disk address yet.
    pub reserved: u64,
    /// Cached and dirty block counts, clean blocks by age (`cache.rs`).
    pub book: cache::CacheBook,
    pub opts: MountOptions,
    pub counters: EngineCounters,
    pub last_commit: Instant,
    /// A write-back failed: the file system refuses further changes (read-only) until remount.
    pub failed: bool,
    pub unmounted: bool,
    /// Reads that run outside the engine lock hold this shared; making freed blocks reusable
    /// takes it exclusively. Lock order: `Fs::inner`, then `io_gate`.
    pub io_gate: Arc<RwLock<()>>,
    /// The journal (None on images made without one).
    pub journal: Option<journal::Journal>,
    /// Journaled blocks waiting to be written home (`checkpoint.rs`); `dev` is its view.
    pub ckpt: checkpoint::Checkpoints,
    /// Young file data the write-back timer's commits hold back (`aging.rs`).
    pub aging: aging::Aging,
    /// Blocks a warm pass read with the engine lock released (`fetch.rs`).
    pub fetch: fetch::Fetch,
    /// The byte log (None on images made without one, and on read-only mounts).
    pub bytelog: Option<bytelog::ByteLog>,
    /// fsyncs waiting for the byte log, and the outcomes of those a batch took.
    pub bytelog_waiting: bytelog::Waiting,
    /// Blocks of the transaction being built by a commit: (home block, image).
    pub txn: Vec<(u64, Vec<u8>)>,
    /// Which of those are file data (a transaction too large for the journal writes them
    /// in place before the metadata that points at them).
    pub txn_data: Vec<u64>,
    /// `journal=data`: data blocks the current transaction may still carry.
    pub txn_data_budget: u64,
    /// Metadata blocks promised to changes since the last commit (directory growth, xattr
    /// blocks, indirect blocks): counted against free space like `reserved`.
    pub meta_reserved: u64,
    /// Who asked for the last fsync (`Fs::fsync_for`), and the average time of a commit's
    /// I/O (phase B), ns: `Fs::fsync` batches as jbd2 does.
    pub last_sync_caller: Option<u64>,
    pub commit_ns_avg: u64,
    /// When the last commit took its changes (its phase A).
    pub last_commit_start: Instant,
    /// Feature bits and label the backup superblocks carry (`write_superblocks`).
    pub backup_carries: ([u64; 3], [u8; 32]),
    /// When reads update access times (the mount's atime flags; never for in-process users).
    pub atime: AtimePolicy,
    /// A rename replaced a file since the last commit (see `commit_plan`).
    pub replaced_by_rename: bool,
    /// Files in the order they became dirty since the last commit (an entry may be stale):
    /// co-writing's per-directory lists are made from it, and per-file write-back follows
    /// it, as FFS's syncer does.
    pub dirty_order: Vec<u64>,
    /// Where the next co-write of a directory looks for free space (after its last one).
    pub cw_goal: HashMap<u64, u64>,
    /// Co-writing moved overwritten data since the last commit: order data before metadata
    /// in this commit whatever the journal mode.
    pub order_data_once: bool,
    /// The commit being planned is small (at most `small_commit_blocks` dirty blocks,
    /// `commit.rs`): with `journal=ordered` its new data blocks go into the transaction too.
    pub small_commit: bool,
    /// Inodes looked at or changed since the last commit started (`inode()` records them):
    /// a commit visits these, never every inode in memory.
    pub touched: rustc_hash::FxHashSet<u64>,
    /// Indirect blocks made dirty since the last commit started (may repeat, may be freed).
    pub ind_dirty: Vec<u64>,
    /// File data a commit being planned writes home: (first block, buffers of a contiguous run).
    pub out_data: Vec<(u64, Vec<Block>)>,
    /// Commits numbered from 1 on each mount: the newest started, the newest durable. A
    /// commit's own phase (B) runs between the two (`commit_begin`/`commit_end`).
    pub epoch_started: u64,
    pub epoch_durable: u64,
    /// A commit or write-behind round is writing with the engine lock released: nothing may
    /// start another, evict cached blocks or drop caches until it ends.
    pub committing: bool,
    /// Write-behind wrote data since the last commit: the commit flushes before metadata.
    pub wb_unflushed: bool,
    /// Dirty blocks at which the next write-behind starts.
    pub wb_mark: u64,
    /// Buffers of blocks that left the cache, kept for new contents (`data.rs`, `recycle`),
    /// at most `spare_max` (a quarter of the cache bound).
    pub spare: Vec<Block>,
    pub spare_max: usize,
}

/// A key of the calling thread for [`Fs::fsync_for`], unlike any process id (bit 63 set).
fn this_thread_key() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static KEY: u64 = NEXT.fetch_add(1, Ordering::Relaxed) | 1 << 63;
    }
    KEY.with(|k| *k)
}

/// The longest an fsync waits for others to join its commit (jbd2's `max_batch_time`
/// defaults to 15 ms; a flush on the slowest devices moafs is for takes a few).
const MAX_BATCH: std::time::Duration = std::time::Duration::from_millis(2);

/// Commits quicker than this on average are not batched: waking a waiting thread takes
/// about as long (tens of µs), so waiting could not gather more changes than it costs.
const MIN_BATCH_COMMIT_NS: u64 = 20_000;

/// Held across a commit's device I/O: dropped only when that I/O panicked, it turns the file
/// system read-only (what is on disk is unknown) and wakes the waiters.
struct InFlight<'a>(&'a Fs);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut g = self.0.lock();
        g.committing = false;
        g.failed = true;
        drop(g);
        self.0.done.notify_all();
    }
}

/// A mounted moafs.
pub struct Fs {
    inner: Mutex<Inner>,
    /// Notified whenever a commit or a write-behind round ends (`Inner::committing` turns
    /// false, `epoch_durable` may have advanced): fsyncs waiting for their commit wait here.
    done: Condvar,
    /// Held by the one thread that runs a commit or a write-behind round, across its phases.
    /// Lock order: `commit_mx`, then `inner`, then `io_gate`.
    commit_mx: Mutex<()>,
    wb: behind::WbSignal,
    /// The device logs writes and notes (`-o record=`): fsyncs and syncs note their
    /// promises (`promise.rs`). Fixed at mount, so that other mounts pay nothing for it.
    recording: bool,
    /// Shut down or not (`shutdown.rs`).
    down: shutdown::Down,
}

impl Fs {
    /// Mounts the file system on `dev`.
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> FsResult<Fs> {
        Fs::mount_with_tier(dev, None, opts)
    }

    /// Mounts the file system on `dev` with an NVM tier for the byte log (`tier`: the tier
    /// and its path, which the image records so that a mount without it can name it). An
    /// image not cleanly unmounted whose records may be in a tier is refused without that
    /// tier (or with another); a tier of another file system is refused; a new tier (no
    /// moafs header) is formatted for this one.
    pub fn mount_with_tier(
        mut dev: Arc<dyn BlockDevice>,
        tier: Option<(Arc<dyn crate::device::Nvm>, String)>,
        opts: MountOptions,
    ) -> FsResult<Fs> {
        let mut sb = read_superblock(dev.as_ref())?;
        let mut last_seq = sb.journal_seq;
        let nvm = tier.as_ref().map(|t| t.0.as_ref());
        let recover = !(opts.read_only && opts.no_recovery);
        if sb.state != STATE_CLEAN && sb.has_journal() && !recover {
            log::warn!(
                "mounted without replaying the journal (norecovery): changes committed since \
                 the last checkpoint are not shown"
            );
        }
        if sb.state != STATE_CLEAN && sb.has_journal() && recover {
            let r = if opts.read_only {
                // Nothing may be written: mount the replayed view through an overlay.
                journal::plan_replay_with(dev.as_ref(), &sb, nvm)?
            } else {
                journal::replay_with(dev.as_ref(), &sb, nvm)?
            };
            last_seq = last_seq.max(r.last_seq);
            if opts.read_only && !r.blocks.is_empty() {
                dev = Arc::new(crate::device::OverlayDevice::new(
                    dev,
                    sb.block_size,
                    r.blocks,
                ));
            }
            sb = read_superblock(dev.as_ref())?;
        }
        let tier = match tier {
            Some(t) if !opts.read_only => Some(bytelog::attach_tier(&sb, t)?),
            _ => None,
        };
        Fs::mount_replayed(dev, opts, sb, last_seq, tier)
    }

    /// Mounts once the journal has been replayed (or is replayed by `dev`, an overlay).
    fn mount_replayed(
        dev: Arc<dyn BlockDevice>,
        opts: MountOptions,
        sb: Superblock,
        last_seq: u64,
        tier: Option<(bytelog::Tier, String)>,
    ) -> FsResult<Fs> {
        let geo = Geometry::from_superblock(&sb);
        if dev.size() < geo.total_blocks * geo.block_size as u64 {
            return Err(FsError::corrupt(
                "superblock",
                0,
                format!(
                    "image is {} bytes but the file system needs {}",
                    dev.size(),
                    geo.total_blocks * geo.block_size as u64
                ),
            ));
        }
        let run_cap = opts.cowrite.then(|| opts.cowrite_blocks(geo.block_size));
        let groups = load_groups(dev.as_ref(), &geo, run_cap)?;
        // every request of the engine passes the fence a shutdown closes
        let fence = Arc::new(crate::device::FenceDevice::new(dev));
        let dev: Arc<dyn BlockDevice> = fence.clone();
        let (ckpt, dev) =
            checkpoint::Checkpoints::new(dev, geo.block_size, opts.checkpoint_interval_ms);
        let opts_cache_blocks = opts.cache_bytes / geo.block_size as u64;
        let mut inner = Inner {
            dev,
            sb: sb.clone(),
            alloc: Allocator {
                geo,
                groups,
                pending_blocks: Vec::new(),
                pending_inodes: Vec::new(),
                pending_sealed_blocks: Vec::new(),
                pending_sealed_inodes: Vec::new(),
                pending_prev_blocks: Vec::new(),
                pending_prev_inodes: Vec::new(),
            },
            journal: journal::Journal::new(&sb, last_seq),
            ckpt,
            aging: aging::Aging::new(opts.dirty_expire_ms),
            fetch: fetch::Fetch::default(),
            bytelog_waiting: Default::default(),
            bytelog: if opts.read_only {
                None
            } else {
                bytelog::ByteLog::new(&sb)
            },
            txn: Vec::new(),
            txn_data: Vec::new(),
            txn_data_budget: 0,
            replaced_by_rename: false,
            dirty_order: Vec::new(),
            cw_goal: HashMap::default(),
            order_data_once: false,
            small_commit: false,
            meta_reserved: 0,
            atime: AtimePolicy::default(),
            last_sync_caller: None,
            commit_ns_avg: 0,
            last_commit_start: Instant::now(),
            backup_carries: (
                [
                    sb.features_compat,
                    sb.features_incompat,
                    sb.features_ro_compat,
                ],
                sb.label,
            ),
            inodes: HashMap::default(),
            itable: HashMap::default(),
            ind: HashMap::default(),
            dead: HashMap::default(),
            reserved: 0,
            book: Default::default(),
            opts,
            counters: EngineCounters::default(),
            last_commit: Instant::now(),
            failed: false,
            unmounted: false,
            io_gate: Arc::new(RwLock::new(())),
            touched: Default::default(),
            ind_dirty: Vec::new(),
            out_data: Vec::new(),
            epoch_started: 0,
            epoch_durable: 0,
            committing: false,
            wb_unflushed: false,
            wb_mark: 0,
            spare: Vec::new(),
            spare_max: (opts_cache_blocks / 4) as usize,
        };
        inner.rearm_write_behind();
        let unclean = inner.sb.state != STATE_CLEAN;
        if unclean && inner.journal.is_none() {
            log::warn!("file system was not cleanly unmounted; run `moafs fsck` to check it");
        }
        inner.inode(ROOT_INO)?;
        if !inner.inodes[&ROOT_INO].is_dir() {
            return Err(FsError::corrupt(
                "inode",
                ROOT_INO,
                "root is not a directory",
            ));
        }
        if !inner.opts.read_only {
            inner.use_tier(tier);
            let active = inner.bytelog_active();
            if let Some(l) = inner.bytelog.as_mut() {
                l.in_use = active;
            }
            if inner.journal.is_some() {
                inner.sb.features_incompat |= crate::format::FEATURE_JOURNAL_COMPACT;
            }
            inner.sb.state = STATE_MOUNTED;
            inner.sb.mount_count = inner.sb.mount_count.wrapping_add(1); // a counter only
            inner.write_superblocks_in_place()?;
            if unclean {
                // Files unlinked while open when the system went down.
                inner.reclaim_orphans()?;
            }
        }
        let recording = inner.dev.records();
        Ok(Fs {
            inner: Mutex::new(inner),
            done: Condvar::new(),
            commit_mx: Mutex::new(()),
            wb: behind::WbSignal::default(),
            recording,
            down: shutdown::Down::new(fence),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| {
            // a panic under the lock may have left a warm pass armed (`fetch.rs`)
            let mut g = e.into_inner();
            g.fetch.reset();
            g
        })
    }

    /// Runs a changing operation; when it needs a commit to release frees while another
    /// commit is writing (`CommitBusy`), lets go of the engine lock, commits until the frees
    /// are released and runs it again. An operation returns `CommitBusy` before it changes
    /// anything, or after changes that running it again repeats harmlessly (the blocks of a
    /// fallocate already dirty, the bytes of a write).
    ///
    /// Each run starts with the warm pass `need` (`fetch.rs`): what the operation reads
    /// from the device is read with the engine lock released.
    ///
    /// Space held by unlinked files the kernel is about to forget (`SpaceHeld`): waits for
    /// a FORGET (at most `HELD_WAITS` times `HELD_WAIT`), commits to release what it freed,
    /// and runs it again — so that, as on ext4, the space of a file deleted after its last
    /// close is there for the next allocation.
    fn mutate_warm<T>(
        &self,
        mut need: impl FnMut(&mut Inner),
        mut op: impl FnMut(&mut Inner) -> FsResult<T>,
    ) -> FsResult<T> {
        const HELD_WAITS: u32 = 10;
        const HELD_WAIT: Duration = Duration::from_millis(20);
        let (mut busy, mut held) = (0, 0);
        loop {
            let r = op(&mut self.warm_from(self.lock(), &mut need));
            match r {
                Err(FsError::CommitBusy) if busy < 3 => {
                    busy += 1;
                    self.commit_to_free()?;
                }
                Err(FsError::SpaceHeld) if held < HELD_WAITS => {
                    held += 1;
                    let g = self.lock();
                    drop(self.done.wait_timeout(g, HELD_WAIT));
                    self.commit_to_free()?;
                }
                Err(FsError::CommitBusy | FsError::SpaceHeld) => return Err(FsError::NoSpace),
                r => return r,
            }
        }
    }

    /// Two commits of its own, after any in flight: every pending free is released.
    fn commit_to_free(&self) -> FsResult<()> {
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let r = self.lock().commit_to_free();
        self.done.notify_all();
        r
    }

    /// Returns once commit `epoch` is durable: at once if it is, after waiting if it is in
    /// flight, or by running the next commit (taking every change made so far: fsyncs that
    /// arrive meanwhile wait and share it — group commit).
    fn wait_durable(&self, epoch: u64) -> FsResult<()> {
        self.wait_durable_batched(epoch, false)
    }

    /// [`Fs::wait_durable`]; `batch`: before running a commit itself, wait for other
    /// syncing threads to join it (about the average commit time, at most `MAX_BATCH`).
    fn wait_durable_batched(&self, epoch: u64, mut batch: bool) -> FsResult<()> {
        let mut led = false;
        loop {
            let mut g = self.lock();
            loop {
                if g.opts.read_only || g.epoch_durable >= epoch {
                    if !led {
                        g.counters.commits_skipped += 1;
                    }
                    return Ok(());
                }
                if g.failed {
                    // not durable, and never will be: every fsync says so
                    return Err(FsError::Failed);
                }
                if !g.committing {
                    break;
                }
                g = self.done.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            // as jbd2: the changes waiting for this commit have gathered since the last one
            // started; wait until that is about one commit's time
            // (not when commits are quicker than waking a thread: nobody could join)
            let gathered = g.last_commit_start.elapsed().as_nanos() as u64;
            if batch && g.commit_ns_avg >= MIN_BATCH_COMMIT_NS && g.commit_ns_avg > gathered {
                batch = false;
                let wait = std::time::Duration::from_nanos(g.commit_ns_avg - gathered);
                drop(g);
                std::thread::sleep(wait.min(MAX_BATCH));
                continue;
            }
            drop(g);
            let job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
            let g = self.lock();
            if g.epoch_durable >= epoch || g.failed || g.opts.read_only {
                continue;
            }
            led = true;
            self.run_commit(g, job)?;
        }
    }

    /// One commit in three phases (`commit.rs`): (A) under the engine lock `g`, (B) with
    /// it released, (C) under it again; `_job` is the held `commit_mx`.
    fn run_commit(&self, mut g: MutexGuard<'_, Inner>, _job: MutexGuard<'_, ()>) -> FsResult<()> {
        let io = match g.commit_begin() {
            Ok(io) => io,
            Err(e) => {
                drop(g);
                self.done.notify_all();
                return Err(e);
            }
        };
        let (dev, bs, epoch) = (g.dev.clone(), g.bs() as u64, io.epoch);
        drop(g);
        // Should the I/O panic (a device implementation's bug, a test's assertion), the
        // commit in flight must not be left "committing" for ever with every fsync waiting.
        let unwinding = InFlight(self);
        let started = Instant::now();
        let r = io.run(dev.as_ref(), bs);
        let took = started.elapsed().as_nanos() as u64;
        std::mem::forget(unwinding);
        drop(io); // the buffers: the cache's references are the last ones again
        let mut g = self.lock();
        // as jbd2's average commit time: three parts old, one part new
        g.commit_ns_avg = (g.commit_ns_avg * 3 + took) / 4;
        let r = g.commit_end(epoch, r);
        drop(g);
        self.done.notify_all();
        r
    }

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
        g.attr(ino)
    }
    /// The kernel drops `n` references taken by lookup-like replies.
    pub fn forget(&self, ino: Ino, n: u64) {
        if self.is_shut_down() {
            return; // nothing is freed any more
        }
        let mut g = self.warm(|g| g.warm_reap(ino, n, 0));
        if let Some(node) = g.inodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
        }
        if let Err(e) = g.maybe_reap(ino) {
            log::error!("freeing inode {ino}: {e}");
        }
        let freed = !g.inodes.contains_key(&ino);
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
        if let Some(node) = g.inodes.get_mut(&w.ino) {
            node.lookups = 0;
        }
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
            g.epoch_started + 1
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
        if self.promise_start(ino) {
            self.fsync_now(ino, caller)?;
            self.promise_end(ino);
            return Ok(());
        }
        self.fsync_now(ino, caller)
    }
    fn fsync_now(&self, ino: Ino, caller: u64) -> FsResult<()> {
        if self.fsync_bytelog(ino)? {
            return Ok(());
        }
        let (epoch, batch) = {
            let mut g = self.warm(|g| g.warm_inode(ino));
            g.inode(ino)?;
            // jbd2's batching rule: when the last fsync came from another thread, several
            // are syncing, and one that has to commit first waits about one commit's time
            // for the others to join it.
            let batch = g.last_sync_caller.is_some_and(|t| t != caller);
            g.last_sync_caller = Some(caller);
            (g.sync_epoch_all(), batch)
        };
        self.wait_durable_batched(epoch, batch)
    }
    /// The disk address of each block of a file up to its size (0: a hole or not yet
    /// written back), for tests and `inspect`.
    pub fn block_map(&self, ino: Ino) -> FsResult<Vec<u64>> {
        self.live()?;
        let mut g = self.lock();
        let bs = g.bs() as u64;
        let size = g.inode(ino)?.d.size;
        (0..size.div_ceil(bs)).map(|i| g.bmap(ino, i)).collect()
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
    /// Periodic work: write back when the flush interval has passed, or only write home the
    /// journaled blocks whose checkpoint is due (a commit that runs does that too). Returns
    /// whether it did either.
    pub fn tick(&self) -> FsResult<bool> {
        if self.is_shut_down() {
            return Ok(false);
        }
        let due = |g: &Inner| {
            !g.unmounted
                && !g.opts.read_only
                && g.last_commit.elapsed().as_millis() >= g.opts.flush_interval_ms as u128
        };
        {
            let mut g = self.lock();
            if g.committing || g.unmounted || g.opts.read_only {
                return Ok(false);
            }
            if !due(&g) || !g.timer_has_work() {
                if due(&g) {
                    g.last_commit = Instant::now();
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
        if !due(&g) || !g.timer_has_work() {
            return Ok(false);
        }
        g.aging.timer_commit();
        self.run_commit(g, job)?;
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
        if g.committing {
            return Ok(()); // (cannot be: the commit job holds commit_mx)
        }
        let c = g.checkpoint_plan();
        let (dev, bs) = (g.dev.clone(), g.bs() as u64);
        // Like a commit's I/O: no commit may start meanwhile (the paths that commit under
        // the engine lock alone — ENOSPC, fallocate's throttle — see `committing`), the
        // journal's space is not free until this is durable.
        g.committing = true;
        drop(g);
        let unwinding = InFlight(self);
        let r = c.run(bs).and_then(|()| dev.flush());
        std::mem::forget(unwinding);
        let mut g = self.lock();
        g.committing = false;
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

/// Reads the primary superblock, falling back to the backups.
pub fn read_superblock(dev: &dyn BlockDevice) -> FsResult<Superblock> {
    let mut buf = vec![0u8; 4096];
    if dev.size() < 4096 {
        return Err(FsError::NotMoafs {
            detail: format!("device is only {} bytes", dev.size()),
        });
    }
    dev.read_at(0, &mut buf)?;
    match Superblock::decode(&buf, 0) {
        Ok(sb) => Ok(sb),
        Err(FsError::NotMoafs { detail }) => Err(FsError::NotMoafs { detail }),
        Err(primary_err) => {
            // The primary is damaged: the first backup is at group 1's first block, which we
            // can only find from a backup itself, so probe the possible group sizes.
            for bs in [4096u64, 16384] {
                for bpg_log in 6..=20 {
                    let off = (1u64 << bpg_log) * bs;
                    if off + 4096 > dev.size() {
                        break;
                    }
                    dev.read_at(off, &mut buf)?;
                    if let Ok(sb) = Superblock::decode(&buf, off / bs) {
                        if sb.blocks_per_group as u64 * sb.block_size as u64 == off {
                            log::warn!("primary superblock damaged ({primary_err}); using the backup at byte {off}");
                            return Ok(sb);
                        }
                    }
                }
            }
            Err(primary_err)
        }
    }
}

/// Reads every group's header and bitmaps; `run_cap` is co-writing's N (the free-run index
/// is kept only with co-writing on).
fn load_groups(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    run_cap: Option<u64>,
) -> FsResult<Vec<Group>> {
    let bs = geo.block_size as u64;
    let mut groups = Vec::with_capacity(geo.group_count as usize);
    for g in 0..geo.group_count {
        let mut hb = vec![0u8; bs as usize];
        let hblk = geo.header_block(g);
        dev.read_at(hblk * bs, &mut hb)?;
        let hdr = GroupHeader::decode(&hb, hblk, g)?;
        let mut bitmap = vec![0u8; geo.bitmap_blocks as usize * bs as usize];
        dev.read_at(geo.bitmap_block(g) * bs, &mut bitmap)?;
        let mut ibitmap = vec![0u8; geo.ibitmap_blocks as usize * bs as usize];
        dev.read_at(geo.ibitmap_block(g) * bs, &mut ibitmap)?;
        if bitmap_crc(&bitmap, g) != hdr.bitmap_crc {
            return Err(FsError::corrupt(
                "block bitmap",
                geo.bitmap_block(g),
                "checksum mismatch",
            ));
        }
        if bitmap_crc(&ibitmap, g) != hdr.ibitmap_crc {
            return Err(FsError::corrupt(
                "inode bitmap",
                geo.ibitmap_block(g),
                "checksum mismatch",
            ));
        }
        // the allocator subtracts from these counts: they must be the bitmaps' exactly (and
        // adds to `dirs`, a count of some of the inodes)
        if hdr.free_blocks as u64 != alloc::count_clear(&bitmap, geo.group_len(g) as u64)
            || hdr.free_inodes as u64 != alloc::count_clear(&ibitmap, geo.inodes_per_group as u64)
            || hdr.dirs > geo.inodes_per_group
        {
            return Err(FsError::corrupt(
                "group header",
                hblk,
                "free counts disagree with the bitmaps, or more directories than inodes",
            ));
        }
        let runs = match run_cap {
            Some(cap) => alloc::FreeRuns::build(
                &bitmap,
                geo.meta_blocks() as u64,
                geo.group_len(g) as u64,
                cap,
            ),
            None => alloc::FreeRuns::disabled(),
        };
        groups.push(Group {
            hdr,
            runs,
            bitmap,
            ibitmap,
            dirty: false,
            inode_hint: 0,
            block_hint: 0,
        });
    }
    Ok(groups)
}

impl Inner {
    pub(crate) fn bs(&self) -> usize {
        self.alloc.geo.block_size as usize
    }

    /// The superblock and its backups as of now (pending frees counted free, as on disk).
    /// `backups`: the backups too (else the primary only).
    fn superblock_images(&mut self, backups: bool) -> Vec<(u64, Vec<u8>)> {
        let geo = self.alloc.geo;
        self.sb.free_blocks = self.alloc.free_blocks() + self.alloc.pending_block_count();
        self.sb.free_inodes = self.alloc.free_inodes() + self.alloc.pending_inode_count();
        self.sb.last_write_sec = Timespec::now().sec as u64;
        if let Some(j) = &self.journal {
            // The replay floor: every transaction up to it is home and durable. (A
            // transaction's superblock goes home with a later checkpoint, together with other
            // blocks of transactions after this number: were it the newest number, a torn
            // checkpoint could leave them unreplayed.)
            self.sb.journal_seq = j.checkpointed;
        }
        if let Some(l) = self.bytelog.as_mut() {
            // A commit's superblock (or one written at mount or unmount, with everything
            // home) covers every record so far; only one commit or byte-log job runs at a
            // time, so none is written before this one is durable.
            l.covered(&mut self.sb);
        }
        let bytes = self.sb.encode(geo.block_size);
        let mut v = vec![(0, bytes.clone())];
        if backups {
            for g in geo.backup_groups() {
                v.push((geo.group_start(g), bytes.clone()));
            }
            self.backup_carries = self.backup_fields();
        }
        v
    }

    /// What the backup superblocks must carry up to date: the feature bits and the label.
    fn backup_fields(&self) -> ([u64; 3], [u8; 32]) {
        (
            [
                self.sb.features_compat,
                self.sb.features_incompat,
                self.sb.features_ro_compat,
            ],
            self.sb.label,
        )
    }

    /// Adds the superblock to the transaction being built. The backups (read only when the
    /// primary is damaged) are written at mount and unmount, which set `state`, and here
    /// only when a feature bit or the label changed: their free counts and replay floor may
    /// lag (replay takes its floor from the newest transaction, fsck recounts), their state,
    /// features and label never do. Two blocks fewer in every transaction and its checkpoint.
    pub(crate) fn write_superblocks(&mut self) -> FsResult<()> {
        let backups = self.backup_fields() != self.backup_carries;
        let v = self.superblock_images(backups);
        self.txn.extend(v);
        Ok(())
    }

    /// Writes the superblocks home and flushes (only when no transaction is outstanding).
    fn write_superblocks_in_place(&mut self) -> FsResult<()> {
        let bs = self.bs() as u64;
        for (b, bytes) in self.superblock_images(true) {
            self.dev.write_at(b * bs, &bytes)?;
            self.counters.meta_blocks_written += 1;
        }
        self.dev.flush()?;
        Ok(())
    }

    fn unmount(&mut self) -> FsResult<()> {
        if self.unmounted {
            return Ok(());
        }
        if self.opts.read_only || self.failed {
            self.unmounted = true;
            return Ok(());
        }
        let orphans: Vec<u64> = self
            .inodes
            .iter()
            .filter(|(_, n)| n.d.nlink == 0)
            .map(|(i, _)| *i)
            .collect();
        for ino in orphans {
            if let Some(n) = self.inodes.get_mut(&ino) {
                n.lookups = 0;
                n.opens = 0;
            }
            self.maybe_reap(ino)?;
        }
        if let Some(l) = self.bytelog.as_mut() {
            // every homeless block home, and the last superblocks say no commit batch is
            // in the log
            l.clean_next = true;
            l.in_use = false;
        }
        self.commit()?;
        // Every journaled block home and durable: the journal is not needed any more and
        // the superblock can say so.
        self.checkpoint_now()?;
        self.sb.state = STATE_CLEAN;
        self.sb.features_incompat &= !crate::format::FEATURE_JOURNAL_COMPACT;
        self.write_superblocks_in_place()?;
        self.unmounted = true;
        Ok(())
    }
}
