//! inspect (`moafs inspect`): what an image says about itself — superblock, group headers,
//! journal and byte log — decoded as far as it can be. It never writes and checks nothing
//! against anything else (that is fsck's work).

use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::{Geometry, GroupHeader, STATE_CLEAN};
use crate::recovery::read_superblock;

/// What `moafs inspect` prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InspectReport {
    pub format_version: u32,
    pub block_size: u32,
    pub total_blocks: u64,
    pub size_bytes: u64,
    pub group_count: u32,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub meta_blocks_per_group: u32,
    pub state: &'static str,
    pub mount_count: u32,
    pub uuid: String,
    pub label: String,
    pub free_blocks: u64,
    pub free_inodes: u64,
    pub total_inodes: u64,
    pub data_blocks: u64,
    /// Transactions a mount would replay (not clean, with a journal): the report shows the
    /// image as that replay leaves it (lazy checkpoints keep the newest metadata in the
    /// journal); `journal_error` when the journal cannot be read or replayed (the report then
    /// shows the blocks at home).
    pub journal_replay: Option<usize>,
    pub journal_error: Option<String>,
    /// The byte log, if the image has one.
    pub bytelog: Option<ByteLogInfo>,
    pub groups: Vec<GroupInfo>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ByteLogInfo {
    pub start_block: u64,
    pub blocks: u32,
    /// Records up to this sequence number are home but for homeless blocks' (whose records
    /// are read from `first` on); live records begin at this sector.
    pub floor: u64,
    pub first: u64,
    pub tail_sector: u32,
    /// Records that count found in the log (a mount would apply them after the journal;
    /// only an image not cleanly unmounted has any), and records found that do not (void,
    /// or of a commit that is not durable).
    pub live_records: Option<usize>,
    pub void_records: Option<usize>,
    pub error: Option<String>,
    /// The NVM tier the byte log uses (its path when last mounted, uuid, size, tail).
    pub nvm_path: Option<String>,
    pub nvm_uuid: Option<String>,
    pub nvm_size: Option<u64>,
    pub nvm_tail: Option<u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupInfo {
    pub group: u32,
    pub start_block: u64,
    pub blocks: u32,
    pub free_blocks: Option<u32>,
    pub free_inodes: Option<u32>,
    pub dirs: Option<u32>,
    pub error: Option<String>,
}

/// Decodes as much as it can; never writes.
pub fn inspect(dev: &dyn BlockDevice) -> FsResult<InspectReport> {
    inspect_with(dev, None)
}

/// [`inspect`] with the image's NVM tier (its live records are counted too).
pub fn inspect_with(
    dev: &dyn BlockDevice,
    tier: Option<&dyn crate::device::Nvm>,
) -> FsResult<InspectReport> {
    let home = read_superblock(dev)?;
    let (mut journal_replay, mut journal_error) = (None, None);
    let mut blocks = std::collections::BTreeMap::new();
    if home.state != STATE_CLEAN && home.has_journal() {
        match crate::recovery::plan_journal_replay(dev, &home) {
            Ok(r) => {
                journal_replay = Some(r.transactions);
                blocks = r.blocks;
            }
            Err(e) => journal_error = Some(e.to_string()),
        }
    }
    let view = crate::device::OverlayDevice::new(dev, home.block_size, blocks);
    let dev: &dyn BlockDevice = &view;
    let sb = read_superblock(dev)?;
    let geo = Geometry::from_superblock(&sb);
    let bs = geo.block_size as u64;
    let mut groups = Vec::new();
    for g in 0..geo.group_count {
        let hblk = geo.header_block(g);
        let mut buf = vec![0u8; bs as usize];
        let hdr = dev
            .read_at(hblk * bs, &mut buf)
            .map_err(FsError::from)
            .and_then(|_| GroupHeader::decode(&buf, hblk, g));
        let (fb, fi, dirs, error) = match hdr {
            Ok(h) => (Some(h.free_blocks), Some(h.free_inodes), Some(h.dirs), None),
            Err(e) => (None, None, None, Some(e.to_string())),
        };
        groups.push(GroupInfo {
            group: g,
            start_block: geo.group_start(g),
            blocks: geo.group_len(g),
            free_blocks: fb,
            free_inodes: fi,
            dirs,
            error,
        });
    }
    let hex = crate::format::hex(&sb.uuid);
    let label_end = sb.label.iter().position(|b| *b == 0).unwrap_or(32);
    Ok(InspectReport {
        format_version: sb.format_version,
        block_size: sb.block_size,
        total_blocks: sb.total_blocks,
        size_bytes: sb.total_blocks * bs,
        group_count: geo.group_count,
        blocks_per_group: geo.blocks_per_group,
        inodes_per_group: geo.inodes_per_group,
        meta_blocks_per_group: geo.meta_blocks(),
        state: if sb.state == STATE_CLEAN {
            "clean"
        } else {
            "not clean (mounted or crashed)"
        },
        mount_count: sb.mount_count,
        uuid: hex,
        label: String::from_utf8_lossy(&sb.label[..label_end]).into_owned(),
        free_blocks: groups
            .iter()
            .filter_map(|g| g.free_blocks)
            .map(|x| x as u64)
            .sum(),
        free_inodes: groups
            .iter()
            .filter_map(|g| g.free_inodes)
            .map(|x| x as u64)
            .sum(),
        total_inodes: geo.total_inodes(),
        data_blocks: geo.data_blocks(),
        journal_replay,
        journal_error,
        bytelog: sb.has_bytelog().then(|| {
            // a clean image has every record home (its floor covers them)
            let live = if sb.state == STATE_CLEAN {
                Ok(Default::default())
            } else {
                crate::recovery::read_live_records(dev, &sb, tier)
            };
            ByteLogInfo {
                start_block: sb.bytelog_start,
                blocks: sb.bytelog_blocks,
                floor: sb.bytelog_floor,
                first: sb.bytelog_first,
                tail_sector: sb.bytelog_tail,
                live_records: live.as_ref().ok().map(|l| l.records.len()),
                void_records: live.as_ref().ok().map(|l| l.voided + l.uncommitted),
                error: live.err().map(|e| e.to_string()),
                nvm_path: sb.has_nvm().then(|| sb.nvm_path.clone()),
                nvm_uuid: sb.has_nvm().then(|| crate::format::hex(&sb.nvm_uuid)),
                nvm_size: sb.has_nvm().then_some(sb.nvm_size),
                nvm_tail: sb.has_nvm().then_some(sb.nvm_tail),
            }
        }),
        groups,
    })
}
