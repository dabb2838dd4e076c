//! Types of the engine's public API (no FUSE types here: the adapter converts).

use std::time::{SystemTime, UNIX_EPOCH};

pub type Ino = u64;
pub const ROOT_INO: Ino = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    /// The time the kernel would stamp now: Linux sets a file's times from its coarse clock
    /// (`current_time()`, updated every tick), so with the writeback cache the kernel's mtime
    /// of a written file is read from it. The engine uses the same clock, so that a file
    /// created and written at once does not get an atime (engine) after its mtime (kernel) —
    /// which `relatime` reads as "already accessed" — nor times after those of a later change.
    pub fn now() -> Timespec {
        use nix::time::{clock_gettime, ClockId};
        if let Ok(t) = clock_gettime(ClockId::CLOCK_REALTIME_COARSE) {
            if t.tv_sec() >= 0 {
                return Timespec {
                    sec: t.tv_sec(),
                    nsec: t.tv_nsec() as u32,
                };
            }
        }
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
    pub(crate) fn pair(self) -> (i64, u32) {
        (self.sec, self.nsec)
    }
    pub(crate) fn from_pair(p: (i64, u32)) -> Timespec {
        Timespec {
            sec: p.0,
            nsec: p.1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::Regular,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => return None,
        })
    }
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
    }
    /// The type byte stored in directory entries (same values as Linux `DT_*`).
    pub fn dirent_type(self) -> u8 {
        match self {
            FileKind::Regular => libc::DT_REG,
            FileKind::Directory => libc::DT_DIR,
            FileKind::Symlink => libc::DT_LNK,
            FileKind::Fifo => libc::DT_FIFO,
            FileKind::Socket => libc::DT_SOCK,
            FileKind::CharDevice => libc::DT_CHR,
            FileKind::BlockDevice => libc::DT_BLK,
        }
    }
    pub fn from_dirent_type(t: u8) -> Option<FileKind> {
        FileKind::from_mode(match t {
            libc::DT_REG => libc::S_IFREG,
            libc::DT_DIR => libc::S_IFDIR,
            libc::DT_LNK => libc::S_IFLNK,
            libc::DT_FIFO => libc::S_IFIFO,
            libc::DT_SOCK => libc::S_IFSOCK,
            libc::DT_CHR => libc::S_IFCHR,
            libc::DT_BLK => libc::S_IFBLK,
            _ => 0,
        })
    }
}

/// Attributes of an inode, as `stat` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Attr {
    pub ino: Ino,
    pub size: u64,
    /// 512-byte units, as `st_blocks`.
    pub blocks_512: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub kind: FileKind,
    /// Permission bits including setuid/setgid/sticky (`mode & 0o7777`).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub generation: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    Now,
    At(Timespec),
}

/// A setattr request: every field that is `Some` changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub ctime: Option<Timespec>,
    /// Clear set-user-ID, and set-group-ID if group-executable or if an unprivileged caller
    /// is not in the file's group, on a regular file (what chown and an unprivileged truncate
    /// do; the FUSE adapter sets it under HANDLE_KILLPRIV_V2).
    pub kill_suid: bool,
    /// The caller's groups (primary first) when it is unprivileged, `None` for a privileged
    /// caller (root: CAP_FSETID). An unprivileged chmod that sets set-group-ID on a file of a
    /// group the caller is not in drops it, as the kernel does for its own file systems.
    pub unprivileged: Option<Vec<u32>>,
}

/// Who asks: new inodes take their owner from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Bits a new inode's mode loses unless its directory has a default ACL (which replaces
    /// the umask). 0 where the caller's mode is already masked.
    pub umask: u32,
}

impl Caller {
    pub const ROOT: Caller = Caller {
        uid: 0,
        gid: 0,
        umask: 0,
    };
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    pub kind: FileKind,
    pub name: Vec<u8>,
    /// Cookie to pass to `readdir` to continue after this entry.
    pub offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StatFs {
    pub block_size: u32,
    pub total_blocks: u64,
    pub free_blocks: u64,
    pub avail_blocks: u64,
    pub total_inodes: u64,
    pub free_inodes: u64,
    pub name_max: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XattrFlags {
    pub create: bool,
    pub replace: bool,
}

/// When an access updates an inode's access time (mount(8)'s atime options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeMode {
    /// `noatime` (and the engine's default for in-process users).
    #[default]
    Never,
    /// `relatime`: when the access time is not after the last change, or a day old.
    Relative,
    /// `strictatime`: every access.
    Always,
}

/// The access-time policy: for files, and whether directories follow it (`nodiratime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtimePolicy {
    pub mode: AtimeMode,
    pub dirs: bool,
}

/// Mount-time options of the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Upper bound of the block cache (clean + dirty data) in bytes.
    pub cache_bytes: u64,
    /// Dirty data above this is written back at once.
    pub dirty_bytes_max: u64,
    /// `cache_bytes` is where the cache's budget starts: it follows the memory the machine
    /// (or the process's memory cgroup) has, grows and shrinks with it (`budget.rs`).
    pub cache_follows_memory: bool,
    /// Likewise `dirty_bytes_max`.
    pub dirty_follows_memory: bool,
    /// Period of the write-back timer (the adapter calls `Fs::tick`).
    pub flush_interval_ms: u64,
    /// File data dirtied less than this long ago stays in memory at the write-back timer's
    /// commits (`aging.rs`; the kernel's `vm.dirty_expire_centisecs`; 0: every commit writes
    /// all dirty data).
    pub dirty_expire_ms: u64,
    /// Cache misses of operations are read with the engine lock released (`fetch.rs`);
    /// off: under it, as before (for comparisons).
    pub unlocked_reads: bool,
    /// A commit with at most this many dirty data blocks carries its new data blocks in the
    /// transaction with `journal=ordered` (`commit.rs`; 0: never).
    pub small_commit_blocks: u64,
    /// Journaled blocks wait at most this long for their checkpoint (home write), unless the
    /// journal runs short first (`checkpoint.rs`; the kernel's `dirty_expire_centisecs`).
    pub checkpoint_interval_ms: u64,
    pub read_only: bool,
    /// With `read_only`: mount the image as it lies, without replaying the journal or the
    /// byte log (ext4's and XFS's `norecovery`): what was committed but not yet checkpointed
    /// home is not shown.
    pub no_recovery: bool,
    /// Count references handed out by lookup-like calls (create, mkdir, link, lookup...) and
    /// keep an unlinked inode until `forget` drops them: what the kernel's FUSE protocol needs.
    /// In-process users leave this off and only `open`/`release` keep unlinked inodes alive.
    pub kernel_lookups: bool,
    /// The kernel keeps mtime/ctime of written files and sends them with setattr (FUSE
    /// writeback cache): `write` then leaves the times alone, so that a write request served
    /// after the kernel's setattr cannot move them.
    pub kernel_times: bool,
    /// What the journal protects (images made without a journal ignore it).
    pub journal: JournalMode,
    /// Co-writing (paper 000): at write-back, the dirty small files of a directory are written
    /// together, one vectored request per free run of the directory's group. Off: each file
    /// is written back on its own (the FFS baseline). Not used with `journal=data`.
    pub cowrite: bool,
    /// Largest co-write in bytes (N = this / block size, 2..=256 blocks).
    pub cowrite_max: u64,
    /// Per-file write-back issues its requests sorted by address (one elevator sweep per
    /// commit; the default) or in the order files became dirty (`wb_order=dirty`: FFS's
    /// syncer as paper 000 describes it, the baseline of its experiments).
    pub wb_sorted: bool,
    /// Write-behind: once this much data is dirty, a background thread that calls
    /// [`Fs::write_behind_worker`](super::Fs::write_behind_worker) writes the new blocks of
    /// large files to the device outside the engine lock (0: off). Only a thread started by
    /// the user of `Fs` (the FUSE adapter starts one) does this; in-process users without it
    /// see no difference.
    pub write_behind_bytes: u64,
    /// Two-level logging (paper 003): an fsync of a file whose only changes are small
    /// overwrites of blocks already on disk (and its times) logs the bytes that changed to
    /// the byte log instead of committing the file system (`docs/SEMANTICS.md`). Off: every
    /// fsync commits (the baseline). Needs an image with a byte log and `journal=ordered`
    /// or `data`.
    pub bytelog: bool,
    /// Convert an image with pointer maps (disk version 1 or 2) to version 3 at this
    /// writable mount: files and directories made from then on map their blocks by extents
    /// (FORMAT.md section 6a); the files it has keep their pointer maps. An image that is
    /// version 3 already is unchanged.
    pub convert_to_extents: bool,
    /// A block goes to the byte log only while fewer than this many of its bytes (counted in
    /// 128-byte units) changed since it was last logged or written home (the paper's 2048).
    pub bytelog_threshold: u32,
    /// Byte logging at write-back (`homeless.rs`): commits log small overwrites of blocks
    /// being rewritten instead of writing them home. Off (the default: measured, it costs
    /// SQLite WAL 14 % of its transactions through FUSE and does not cut what a flash card
    /// programs for random writes, `docs/results/HISTORY-benchmarks.md`): a commit only keeps out of home the
    /// blocks whose every change an fsync already put in the device log (no new records).
    pub bytelog_writeback: bool,
    /// An fsync of a file whose extent map only grew is served by allocation, whole-block
    /// and slot records instead of a commit (`grown.rs`, issue 43). Off (the default:
    /// measured, it saves no device request where a small commit is already one write and
    /// one flush, and on Filebench varmail, whose creates still commit, its batches
    /// serialise with those commits and the whole blocks fill the log: 0.9x the rate,
    /// `docs/results/HISTORY-benchmarks.md`).
    pub bytelog_grow: bool,
    /// With an NVM tier (`Fs::mount_with_tier`): a batch smaller than this many bytes goes
    /// to the tier instead of the device log (the paper's TH_SCM, 2048).
    pub nvm_threshold: u32,
    /// How reads fetch blocks beyond what they ask for (paper 001, `readahead.rs`).
    pub readahead: super::ReadaheadPolicy,
    /// Largest readahead window in KiB (the paper's 64 pages of 4 KiB).
    pub readahead_max_kb: u32,
}

impl MountOptions {
    /// Co-writing's N: the most blocks one co-write may take.
    pub fn cowrite_blocks(&self, block_size: u32) -> u64 {
        (self.cowrite_max / block_size.max(1) as u64).clamp(2, 256)
    }
}

/// `-o journal=`: what a commit's transaction carries, as ext4's `data=` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum JournalMode {
    /// Metadata only; file data is written home with no ordering against it.
    Writeback,
    /// Metadata only; file data is durable before the metadata that points at it.
    #[default]
    Ordered,
    /// Metadata and file data (data up to a quarter of the journal per commit; beyond that, ordered).
    Data,
}

impl std::str::FromStr for JournalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "writeback" => Ok(JournalMode::Writeback),
            "ordered" => Ok(JournalMode::Ordered),
            "data" | "journal" => Ok(JournalMode::Data),
            _ => Err(format!("journal={s}: expected writeback, ordered or data")),
        }
    }
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            cache_bytes: 256 << 20,
            dirty_bytes_max: 64 << 20,
            cache_follows_memory: false,
            dirty_follows_memory: false,
            flush_interval_ms: 5000,
            dirty_expire_ms: 30_000,
            unlocked_reads: true,
            checkpoint_interval_ms: 30_000,
            small_commit_blocks: 64,
            read_only: false,
            no_recovery: false,
            kernel_lookups: false,
            kernel_times: false,
            journal: JournalMode::Ordered,
            cowrite: true,
            cowrite_max: 128 << 10,
            wb_sorted: true,
            write_behind_bytes: 16 << 20,
            bytelog: true,
            convert_to_extents: false,
            bytelog_threshold: 2048,
            bytelog_writeback: false,
            bytelog_grow: false,
            nvm_threshold: 2048,
            readahead: super::ReadaheadPolicy::SizeAware,
            readahead_max_kb: 256,
        }
    }
}

/// What the engine has done, for `inspect` and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EngineCounters {
    pub commits: u64,
    /// fsyncs served by the byte log (no commit), the records and sectors they wrote, the
    /// bytes of file data those records carried, and blocks whose old contents were read
    /// to find what changed (no copy was cached).
    pub bytelog_fsyncs: u64,
    /// Of the blocks those fsyncs logged, those logged whole (their changes reached the
    /// threshold: one whole-block record).
    pub bytelog_whole_blocks: u64,
    /// fsyncs served with a slot record (their block map grew: `grown.rs`), and the blocks
    /// they gave an address.
    pub bytelog_map_fsyncs: u64,
    pub bytelog_placed_blocks: u64,
    pub bytelog_records: u64,
    pub bytelog_sectors: u64,
    pub bytelog_data_bytes: u64,
    pub bytelog_home_reads: u64,
    /// fsyncs of a mount with the byte log on that committed instead: a file or a change it
    /// cannot log (refused before queueing, or when planned), or no room left in the log.
    pub bytelog_fallbacks: u64,
    /// Batches written (one per group of fsyncs served together: fsyncs / batches is the
    /// byte log's group commit).
    pub bytelog_batches: u64,
    /// Write-back byte logging (commits): batches written by commits (counted in the
    /// records, sectors and data bytes above too), the dirty blocks they logged instead of
    /// writing home (homeless from then on), the void records they wrote, and the commits
    /// that wrote every homeless block home (cleaning) and the blocks those wrote.
    pub bytelog_wb_batches: u64,
    pub bytelog_wb_blocks: u64,
    pub bytelog_voids: u64,
    pub bytelog_cleanings: u64,
    pub bytelog_cleaned_blocks: u64,
    /// Batches (and their bytes, padded to 8) that went to the NVM tier instead of the
    /// device; small batches the tier had no room for (they went to the device log).
    pub tier_batches: u64,
    pub tier_bytes: u64,
    pub tier_spills: u64,
    pub data_blocks_written: u64,
    pub data_write_ios: u64,
    /// Of `data_blocks_written`, those written by write-behind (between commits).
    pub written_behind: u64,
    pub meta_blocks_written: u64,
    pub data_blocks_read: u64,
    /// Reads asked of the engine (FUSE READs) and the bytes they got (clipped to EOF).
    pub read_requests: u64,
    pub read_bytes: u64,
    /// Readahead (`readahead.rs`), in blocks: read from the device beyond what reads
    /// asked (counted in `data_blocks_read` too), used by a later read, left the cache
    /// unused (evicted, dropped or overwritten), and not kept because the cache changed
    /// while they were read.
    pub ra_read: u64,
    pub ra_used: u64,
    pub ra_wasted: u64,
    pub ra_dropped: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub evictions: u64,
    /// Blocks that warm passes read with the engine lock released (`fetch.rs`): kept for
    /// the operation, and read again because a commit, write-behind round or eviction
    /// ended meanwhile.
    pub unlocked_reads: u64,
    pub unlocked_reads_stale: u64,
    /// Transactions written to the journal, and the journal blocks they took.
    pub journal_commits: u64,
    pub journal_blocks_written: u64,
    /// Of those transactions, the compact ones (one header block with the revokes and
    /// delta records inline, no commit block: FORMAT §12).
    pub journal_compact: u64,
    /// File data blocks carried by transactions (`journal=data`).
    pub data_blocks_journaled: u64,
    /// Commits too large for the journal, written in place instead.
    pub journal_overflows: u64,
    /// Checkpoints (`checkpoint.rs`: journaled blocks written home together), the blocks
    /// they wrote home, and the revoke records transactions carried.
    pub checkpoints: u64,
    /// Blocks transactions carried as delta records (few bytes changed since their
    /// previous image in the journal) instead of whole.
    pub delta_blocks: u64,
    pub checkpoint_blocks: u64,
    pub revokes: u64,
    /// fsync/sync calls that ran no commit of their own (one in flight or another thread's
    /// covered them: group commit, or nothing was unsaved).
    pub commits_skipped: u64,
    /// Commits during whose device I/O operations changed the file system (they go to the
    /// next commit): the engine lock was free while the commit wrote.
    pub commits_overlapped: u64,
    /// Co-writes (one vectored request each), the small files and blocks they carried, and
    /// of those blocks the ones that had an address before (relocated overwrites).
    pub cowrite_batches: u64,
    pub cowrite_files: u64,
    pub cowrite_blocks: u64,
    pub cowrite_relocated_blocks: u64,
    /// Dirty small files co-writing left to per-file write-back: alone in their directory's
    /// batch, no free run of two blocks, or no spare space to move them.
    pub cowrite_fallback_files: u64,
    /// CPU time (of the committing thread) spent choosing runs and files, in nanoseconds.
    pub cowrite_choose_ns: u64,
}

impl EngineCounters {
    /// What was counted since `e` (an earlier reading).
    pub fn since(&self, e: &EngineCounters) -> EngineCounters {
        EngineCounters {
            commits: self.commits.saturating_sub(e.commits),
            bytelog_fsyncs: self.bytelog_fsyncs.saturating_sub(e.bytelog_fsyncs),
            bytelog_whole_blocks: self
                .bytelog_whole_blocks
                .saturating_sub(e.bytelog_whole_blocks),
            bytelog_map_fsyncs: self.bytelog_map_fsyncs.saturating_sub(e.bytelog_map_fsyncs),
            bytelog_placed_blocks: self
                .bytelog_placed_blocks
                .saturating_sub(e.bytelog_placed_blocks),
            bytelog_records: self.bytelog_records.saturating_sub(e.bytelog_records),
            bytelog_sectors: self.bytelog_sectors.saturating_sub(e.bytelog_sectors),
            bytelog_data_bytes: self.bytelog_data_bytes.saturating_sub(e.bytelog_data_bytes),
            bytelog_home_reads: self.bytelog_home_reads.saturating_sub(e.bytelog_home_reads),
            bytelog_fallbacks: self.bytelog_fallbacks.saturating_sub(e.bytelog_fallbacks),
            bytelog_batches: self.bytelog_batches.saturating_sub(e.bytelog_batches),
            bytelog_wb_batches: self.bytelog_wb_batches.saturating_sub(e.bytelog_wb_batches),
            bytelog_wb_blocks: self.bytelog_wb_blocks.saturating_sub(e.bytelog_wb_blocks),
            bytelog_voids: self.bytelog_voids.saturating_sub(e.bytelog_voids),
            bytelog_cleanings: self.bytelog_cleanings.saturating_sub(e.bytelog_cleanings),
            bytelog_cleaned_blocks: self
                .bytelog_cleaned_blocks
                .saturating_sub(e.bytelog_cleaned_blocks),
            tier_batches: self.tier_batches.saturating_sub(e.tier_batches),
            tier_bytes: self.tier_bytes.saturating_sub(e.tier_bytes),
            tier_spills: self.tier_spills.saturating_sub(e.tier_spills),
            data_blocks_written: self
                .data_blocks_written
                .saturating_sub(e.data_blocks_written),
            data_write_ios: self.data_write_ios.saturating_sub(e.data_write_ios),
            written_behind: self.written_behind.saturating_sub(e.written_behind),
            meta_blocks_written: self
                .meta_blocks_written
                .saturating_sub(e.meta_blocks_written),
            data_blocks_read: self.data_blocks_read.saturating_sub(e.data_blocks_read),
            read_requests: self.read_requests.saturating_sub(e.read_requests),
            read_bytes: self.read_bytes.saturating_sub(e.read_bytes),
            ra_read: self.ra_read.saturating_sub(e.ra_read),
            ra_used: self.ra_used.saturating_sub(e.ra_used),
            ra_wasted: self.ra_wasted.saturating_sub(e.ra_wasted),
            ra_dropped: self.ra_dropped.saturating_sub(e.ra_dropped),
            cache_hits: self.cache_hits.saturating_sub(e.cache_hits),
            cache_misses: self.cache_misses.saturating_sub(e.cache_misses),
            evictions: self.evictions.saturating_sub(e.evictions),
            unlocked_reads: self.unlocked_reads.saturating_sub(e.unlocked_reads),
            unlocked_reads_stale: self
                .unlocked_reads_stale
                .saturating_sub(e.unlocked_reads_stale),
            journal_commits: self.journal_commits.saturating_sub(e.journal_commits),
            journal_compact: self.journal_compact.saturating_sub(e.journal_compact),
            journal_blocks_written: self
                .journal_blocks_written
                .saturating_sub(e.journal_blocks_written),
            data_blocks_journaled: self
                .data_blocks_journaled
                .saturating_sub(e.data_blocks_journaled),
            journal_overflows: self.journal_overflows.saturating_sub(e.journal_overflows),
            checkpoints: self.checkpoints.saturating_sub(e.checkpoints),
            delta_blocks: self.delta_blocks.saturating_sub(e.delta_blocks),
            checkpoint_blocks: self.checkpoint_blocks.saturating_sub(e.checkpoint_blocks),
            revokes: self.revokes.saturating_sub(e.revokes),
            commits_skipped: self.commits_skipped.saturating_sub(e.commits_skipped),
            commits_overlapped: self.commits_overlapped.saturating_sub(e.commits_overlapped),
            cowrite_batches: self.cowrite_batches.saturating_sub(e.cowrite_batches),
            cowrite_files: self.cowrite_files.saturating_sub(e.cowrite_files),
            cowrite_blocks: self.cowrite_blocks.saturating_sub(e.cowrite_blocks),
            cowrite_relocated_blocks: self
                .cowrite_relocated_blocks
                .saturating_sub(e.cowrite_relocated_blocks),
            cowrite_fallback_files: self
                .cowrite_fallback_files
                .saturating_sub(e.cowrite_fallback_files),
            cowrite_choose_ns: self.cowrite_choose_ns.saturating_sub(e.cowrite_choose_ns),
        }
    }
}
