//! Crash states of a recorded mount (`moafs crashcheck`, the log of `-o record=`).
//!
//! The write log (`device/record.rs`) holds the image at mount time and every write and flush
//! the mount issued, in order. A power cut at any moment leaves the writes before the last
//! completed flush, plus any subset of the writes issued since, one of them possibly torn at a
//! 512-byte sector (a disk's cache may lose, reorder or tear what was not flushed). So the
//! states to check are, for each flush interval `i` (the writes between flush `i` and flush
//! `i + 1`; flush 0 is the mount):
//!
//! * the **flush point**: the durable image `D_i`, none of the interval's writes;
//! * seeded **random cuts**: `D_i` plus each write of the interval kept with probability ½,
//!   one kept write torn at a sector — the draw of `FaultDevice::crash_image` with
//!   `CutMode::Random` (the same function, `device::random_cut`, given the log's writes).
//!   Kept writes are applied in issue order. Duplicate draws are checked once.
//!
//! `D_i` is built once and advanced interval by interval; every state is a copy-on-write view
//! of it ([`CowDevice`]), so a state costs the pages its checks write, not an image.
//!
//! With an NVM tier (`-o record=,nvm=`: the log holds the tier at mount and its stores and
//! persists in order with the device's requests), a persist is the tier's barrier, and an
//! fsync the tier served made its promise at the persist, with no device flush. So each
//! interval is cut again at the tier's persists into *segments* (between two barriers of
//! either kind). A state of segment `s` is `D_i` plus a random cut of the interval's writes
//! issued before `s` ends, and the tier as of its last persist plus its stores since (which may
//! reach back across the interval's flush) dropped, kept, or kept by 8-byte word
//! (`device::nvm_cut`, `FaultNvm`'s model); segment 0 draws exactly as without a tier. The
//! tier may thus be ahead of the device (persisted, the commit's writes lost) or behind it.
//! Every state mounts with its tier ([`CowNvm`]).
//!
//! Each state must pass: `fsck -n` clean; `Fs::mount` (which replays the journal and the byte
//! log); every promise in force holds — an fsync's (the inode is a regular file with links, of
//! the promised size and crc32c) and a sync's (the inode's mode, owner, links, extended
//! attributes, contents, symlink target or directory entries, as the durable image after the
//! sync holds them); unmount; `fsck -n` clean again. One exception, counted apart:
//! through the kernel a file may be unlinked while a handle still holds it (FUSE sends RELEASE
//! after close(2) returned), and a commit then writes an inode without links — an orphan,
//! which the next mount frees (docs/DESIGN.md). `fsck -n` of the crash image counts it apart
//! from its errors (`FsckReport::orphans`: an allocated inode without links, its blocks its
//! own); when fsck after the mount is clean and finds no orphan left, the state passes and is
//! counted as an orphan state.
//!
//! Which promises are in force. A promise lives in the log from its `Fsynced` record (a
//! sync's: from its `Sync` record) to the inode's next `Mutated` record. A state of interval `i` whose last kept write is record `L`
//! could be the disk at any moment from `L` to the end of the interval `E` (a later flush
//! would have made the dropped writes durable); whatever the moment, the promises alive then
//! hold. So the state must satisfy every promise whose life overlaps `[L, E]`. A promise
//! logged inside the interval is covered by a flush at or before the interval's start (its
//! fsync flushed before returning, and no flush is inside an interval), so demanding it of
//! the interval's earlier states is sound too. With a tier, `L` is also at or after the
//! state's last kept tier store and `E` is its segment's end; a promise logged before `E` was
//! made durable by a flush or persist at or before the segment's start (no barrier is inside a
//! segment), which the state holds.
//!
//! The pieces: `plan` (the log cut into intervals, promises and syncs), `promise` (what a
//! promise holds and how a state is held to it), `cow` ([`CowDevice`]), `state` (what one
//! state must pass) and `run` (the states drawn per interval and checked on threads).

mod cow;
mod plan;
mod promise;
mod run;
mod state;
#[cfg(test)]
mod tests;

pub use cow::{CowDevice, CowNvm};
pub use run::crashcheck;

/// What to check.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// States to check at least (flush points plus random cuts), as far as the log has
    /// distinct ones.
    pub states: u64,
    /// Seed of the random cuts.
    pub seed: u64,
    /// Threads checking states.
    pub jobs: usize,
    /// Check only this flush interval (its flush point and cuts), to replay a finding.
    pub only_interval: Option<usize>,
}

/// One state that failed a check.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The state: flush index and cut.
    pub state: String,
    pub what: String,
}

/// What a run checked and found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub records: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Fsync promises in the log.
    pub promises: u64,
    /// Promises of syncs: inodes a sync found unchanged during it.
    pub sync_promises: u64,
    pub syncs: u64,
    /// Discards in the log (never applied to a crash state).
    pub discards: u64,
    /// Stores to the NVM tier and its persists in the log (`-o record=,nvm=`).
    pub tier_stores: u64,
    pub tier_persists: u64,
    /// Whether the log ends with its `End` record (the mount ended cleanly).
    pub complete: bool,
    /// States checked: flush points, tier persist points and distinct random cuts.
    pub states: u64,
    pub flush_points: u64,
    /// States at a tier persist inside a flush interval: the tier as persisted there, none
    /// of the device's writes since its flush.
    pub persist_points: u64,
    pub random_cuts: u64,
    /// States whose tier holds a persist the device's last flush does not cover (the tier
    /// ahead of the device: cut after a tier persist, before the next device flush).
    pub tier_ahead_states: u64,
    /// States that drop or tear some of the tier's stores since its last persist (cut
    /// between two tier persists, the tier behind what was stored).
    pub tier_lost_states: u64,
    /// Promise checks made (a promise checked in each state it applies to).
    pub promise_checks: u64,
    /// States whose `fsck -n` before the mount found orphans (inodes unlinked while open) and
    /// no error, which the mount freed (fsck after it clean, no orphan left): not findings.
    pub orphan_states: u64,
    pub findings: Vec<Finding>,
}
