//! Recovery: what a mount and fsck both need to find the state a crash left, from the
//! device and the format alone — the superblock (probing the backups when the primary is
//! damaged), journal replay (`journal.rs`) and byte-log replay (`bytelog.rs`). Nothing here
//! touches the engine's in-memory state; the engine (`fs/mount.rs`) and fsck call it.

pub mod bytelog;
pub mod journal;

pub use bytelog::{
    plan_bytelog_replay, read_live_records, ByteLogReplay, LiveRecords, RecordTarget,
};
pub use journal::{
    plan_journal_replay, plan_replay, plan_replay_with, replay, replay_with, Replay,
};

use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::Superblock;

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
