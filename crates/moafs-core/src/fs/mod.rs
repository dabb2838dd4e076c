//! The file system: POSIX operations on inode numbers, over a `BlockDevice`.
//!
//! One `Fs` owns the mounted state behind a single mutex (`Inner`). Operations take the lock,
//! work on in-memory inodes, directories and cached blocks, and return; data reaches the device
//! at write-back (`commit`), which chooses disk addresses only then (delayed allocation) and
//! writes each file's dirty blocks in physically contiguous, vectored runs.
//!
//! Lock order (every lock of the engine and of the FUSE side, what it guards and where it is
//! held across device I/O: the lock table of docs/DESIGN.md): the FUSE side's own locks
//! are never held into the engine; `Fs::commit_mx` (held by the one thread running a
//! committer job — a commit, a write-behind round, a byte-log batch, a checkpoint — across
//! its phases), then `Fs::inner` (the engine lock), then `Inner::io_gate` (a reader/writer
//! gate that lets device reads of `Fs::read` and of warm passes (`fetch.rs`: the cache
//! misses of other operations) run outside the engine lock while no commit can make their
//! blocks reusable), then the checkpoint view's map (`checkpoint.rs`); device
//! implementations have their own internal locks, taken last. Nobody waits for `commit_mx`
//! while holding the engine lock. A commit plans under the engine lock, does its device I/O
//! with it released and finishes under it again (`commit.rs`); fsyncs wait for the commit
//! that covers them on `Fs::done`.
//!
//! `Inner` is made of parts, each owned by one module with private fields: reservations
//! (`space.rs`), epochs and commit timing (`epoch.rs`), the transaction being built
//! (`commit::Building`), write-behind's mark (`behind::Behind`), co-writing's goals
//! (`cowrite::Goals`), spare buffers (`data::Spares`), the cache's books
//! (`cache::CacheBook`), the fetch of warm passes (`fetch::Fetch`), the checkpoints
//! (`checkpoint::Checkpoints`), aging (`aging::Aging`), the journal and the byte log; the
//! fields `Inner` still shares among the modules (inodes, directories, the allocator, the
//! superblock, options, counters) are the namespace's and the format's state.

pub mod acl;
mod aging;
mod alloc;
mod api;
mod attrs;
mod behind;
mod budget;
mod bytelog;
mod cache;
mod checkpoint;
mod commit;
mod cowrite;
mod data;
mod dir;
mod epoch;
mod extents;
mod fetch;
mod fsynctime;
mod grown;
mod homeless;
pub mod iflags;
mod invariants;
pub mod journal;
mod kept;
pub use kept::InodeCounts;
pub mod label;
mod mount;
mod node;
mod ops;
mod promise;
mod readahead;
mod remount;
mod shutdown;
mod space;
mod trim;
pub use fsynctime::{
    FsyncPhase, FsyncReport, PATH_NAMES as FSYNC_PATHS, PHASE_NAMES as FSYNC_PHASES,
};
pub use readahead::{Readahead, ReadaheadPolicy};
pub use shutdown::ShutdownFlush;

/// How near the end of a file's last read a read must start to continue it
/// ([`Fs::read_follows`]): the kernel keeps up to two readahead requests of 1 MiB in flight
/// per stream, and they may be served out of order.
pub const FOLLOWS_BYTES: u64 = 4 << 20;
mod types;

pub use types::*;

use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::{Geometry, Superblock};
use alloc::Allocator;
use fsynctime::{FsyncPath, Trace};
use node::{IndBlock, Inode};
use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

pub(crate) struct Inner {
    dev: Arc<dyn BlockDevice>,
    sb: Superblock,
    alloc: Allocator,
    inodes: HashMap<u64, Inode>,
    itable: HashMap<u64, Vec<u8>>,
    ind: HashMap<u64, IndBlock>,
    /// Freed inode slots to write (zeroed, generation kept) at the next commit.
    dead: HashMap<u64, crate::format::DiskInode>,
    /// Blocks promised to changes that have no disk address yet (`space.rs`).
    space: space::Reservations,
    /// Cached and dirty block counts, clean blocks by age (`cache.rs`).
    book: cache::CacheBook,
    opts: MountOptions,
    counters: EngineCounters,
    /// A write-back failed: the file system refuses further changes (read-only) until remount.
    failed: bool,
    unmounted: bool,
    /// Reads that run outside the engine lock hold this shared; making freed blocks reusable
    /// takes it exclusively. Lock order: `Fs::inner`, then `io_gate`.
    io_gate: Arc<RwLock<()>>,
    /// The journal (None on images made without one).
    journal: Option<journal::Journal>,
    /// Journaled blocks waiting to be written home (`checkpoint.rs`); `dev` is its view.
    ckpt: checkpoint::Checkpoints,
    /// Young file data the write-back timer's commits hold back (`aging.rs`).
    aging: aging::Aging,
    /// Blocks a warm pass read with the engine lock released (`fetch.rs`).
    fetch: fetch::Fetch,
    /// The byte log (None on images made without one, and on read-only mounts).
    bytelog: Option<bytelog::ByteLog>,
    /// fsyncs waiting for the byte log, and the outcomes of those a batch took.
    bytelog_waiting: bytelog::Waiting,
    /// The transaction a commit is building and the flags that order it (`commit.rs`).
    building: commit::Building,
    /// Commits started and durable, whether a committer job is writing, commit timing
    /// (`epoch.rs`).
    epochs: epoch::Epochs,
    /// Feature bits and label the backup superblocks carry (`write_superblocks`).
    backup_carries: ([u64; 3], [u8; 32]),
    /// When reads update access times (the mount's atime flags; never for in-process users).
    atime: AtimePolicy,
    /// Files in the order they became dirty since the last commit (an entry may be stale):
    /// co-writing's per-directory lists are made from it, and per-file write-back follows
    /// it, as FFS's syncer does.
    dirty_order: Vec<u64>,
    /// Where the next co-write of a directory looks for free space (after its last one).
    cw_goal: cowrite::Goals,
    /// Inodes looked at or changed since the last commit started (`inode()` records them):
    /// a commit visits these, never every inode in memory.
    touched: rustc_hash::FxHashSet<u64>,
    /// Indirect blocks made dirty since the last commit started (may repeat, may be freed).
    ind_dirty: Vec<u64>,
    /// Write-behind's mark and whether it wrote since the last commit (`behind.rs`).
    behind: behind::Behind,
    /// Buffers of blocks that left the cache, kept for new contents (`data.rs`).
    spare: data::Spares,
    /// The cache's and its dirty data's memory budgets (`budget.rs`).
    budget: budget::Budget,
    /// The kernel's references to inodes, and when idle inodes are dropped (`kept.rs`).
    kept: kept::Kept,
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

/// Held across a commit's device I/O: dropped only when that I/O panicked, it turns the file
/// system read-only (what is on disk is unknown) and wakes the waiters.
struct InFlight<'a>(&'a Fs);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut g = self.0.lock();
        g.epochs.io_ended();
        g.failed = true;
        drop(g);
        self.0.done.notify_all();
    }
}

/// A mounted moafs.
pub struct Fs {
    inner: Mutex<Inner>,
    /// Notified whenever a commit or another committer job ends (`Epochs::writing` turns
    /// false, the durable epoch may have advanced): fsyncs waiting for their commit wait here.
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
    /// Where fsyncs spend their time (`fsynctime.rs`); a lock of its own.
    fsync_times: fsynctime::FsyncTimes,
    /// What a read-only mount needs to become read-write (`remount.rs`).
    remount: remount::Remount,
}

impl Fs {
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
        // (1 s in all: 200 ms was too short on a loaded machine — xfstests generic/371 under
        // a parallel build; the FORGET comes once the kernel has answered RELEASE's reply)
        const HELD_WAITS: u32 = 50;
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
        self.wait_durable_batched(epoch, false, &mut Trace::default())
    }

    /// [`Fs::wait_durable`]; `batch`: before running a commit itself, wait for other
    /// syncing threads to join it (`Epochs::batch_wait`). `t` adds up the phases.
    fn wait_durable_batched(&self, epoch: u64, mut batch: bool, t: &mut Trace) -> FsResult<()> {
        let (mut led, mut waited) = (false, false);
        loop {
            let mut g = t.time(FsyncPhase::Lock, || self.lock());
            loop {
                if g.opts.read_only || g.epochs.is_durable(epoch) {
                    if !led {
                        g.counters.commits_skipped += 1;
                    }
                    t.served(match (led, waited) {
                        (true, _) => FsyncPath::Commit,
                        (false, true) => FsyncPath::Joined,
                        (false, false) => FsyncPath::Clean,
                    });
                    return Ok(());
                }
                if g.failed {
                    // not durable, and never will be: every fsync says so
                    return Err(FsError::Failed);
                }
                if !g.epochs.writing() {
                    break;
                }
                // another's commit (or committer job) is in flight: it covers this fsync, or
                // must end before the next can start
                waited = true;
                g = t.time(FsyncPhase::Wait, || {
                    self.done.wait(g).unwrap_or_else(|e| e.into_inner())
                });
            }
            // this thread runs the next commit or joins it
            g.epochs.want_commit(epoch);
            // as jbd2: the changes waiting for this commit have gathered since the last one
            // started; wait until that is about one commit's time
            // (not when commits are quicker than waking a thread: nobody could join)
            if let Some(wait) = g.epochs.batch_wait().filter(|_| batch) {
                batch = false;
                drop(g);
                t.time(FsyncPhase::Batch, || std::thread::sleep(wait));
                continue;
            }
            drop(g);
            let job = t.time(FsyncPhase::Job, || {
                self.commit_mx.lock().unwrap_or_else(|e| e.into_inner())
            });
            let g = t.time(FsyncPhase::Lock, || self.lock());
            if g.epochs.is_durable(epoch) || g.failed || g.opts.read_only {
                // another thread's commit took this fsync's changes while it waited
                waited = true;
                continue;
            }
            led = true;
            self.run_commit(g, job, t)?;
        }
    }

    /// One commit in three phases (`commit.rs`): (A) under the engine lock `g`, (B) with
    /// it released, (C) under it again; `_job` is the held `commit_mx`. `t` adds up the
    /// phases of the fsync that runs it.
    fn run_commit(
        &self,
        mut g: MutexGuard<'_, Inner>,
        _job: MutexGuard<'_, ()>,
        t: &mut Trace,
    ) -> FsResult<()> {
        let from = Instant::now();
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
        let from = t.since(FsyncPhase::Plan, from);
        // Should the I/O panic (a device implementation's bug, a test's assertion), the
        // commit in flight must not be left "committing" for ever with every fsync waiting.
        let unwinding = InFlight(self);
        let timed = fsynctime::TimedFlushes::new(dev.as_ref());
        let r = io.run(&timed, bs);
        let took = from.elapsed();
        std::mem::forget(unwinding);
        t.add(FsyncPhase::Write, took.saturating_sub(timed.flushes()));
        t.add(FsyncPhase::Flush, timed.flushes());
        drop(io); // the buffers: the cache's references are the last ones again
        let mut g = t.time(FsyncPhase::Lock, || self.lock());
        let from = Instant::now();
        g.epochs.note_commit_time(took.as_nanos() as u64);
        let r = g.commit_end(epoch, r);
        drop(g);
        self.done.notify_all();
        t.since(FsyncPhase::Finish, from);
        r
    }
}

impl Inner {
    pub(crate) fn bs(&self) -> usize {
        self.alloc.geo.block_size as usize
    }
}
