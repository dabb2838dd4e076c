//! The superblock: block 0, with backups in the first block of group 1 and of the last group.

use super::{get_u32, get_u64, put_u32, put_u64, seal, verify};
use crate::error::{FsError, FsResult};

/// Sequence numbers in the superblock (journal, byte log) are below this (decode-time rule):
/// counting up from them can never overflow.
pub const SEQ_LIMIT: u64 = 1 << 62;
pub const SB_MAGIC: &[u8; 8] = b"MOAFS\0v1";
/// Disk-format version, independent of the crate version. Version 3 added extent maps
/// ([`FEATURE_EXTENTS`]); version 2 the byte log (`bytelog_*` fields, [`FEATURE_BYTELOG`]);
/// version 1 images are read as version 2 images without one (their bytes 176..252 are
/// zero) and stay version 1; version 1 and 2 images stay what they are unless converted.
pub const FORMAT_VERSION: u32 = 3;
/// The version of an image without extent maps.
pub const FORMAT_VERSION_POINTERS: u32 = 2;
/// Oldest disk-format version this code reads.
pub const FORMAT_VERSION_MIN: u32 = 1;
/// `state`: cleanly unmounted.
pub const STATE_CLEAN: u32 = 1;
/// `state`: mounted (or the last mount did not end cleanly).
pub const STATE_MOUNTED: u32 = 2;
/// `features_incompat`: the image has a journal (`journal_start`, `journal_blocks`).
pub const FEATURE_JOURNAL: u64 = 1;
/// `features_incompat`: some inode's extended attributes span several blocks ("MXAL" head and
/// "MXAC" continuations, FORMAT.md section 8); a reader that knows only "MXAT" must refuse.
pub const FEATURE_LARGE_XATTR: u64 = 2;
/// `features_incompat`: the image has a byte log (`bytelog_*`, FORMAT.md section 13) whose
/// records a reader must apply after the journal.
pub const FEATURE_BYTELOG: u64 = 4;
/// `features_incompat`: the byte log has an NVM tier (`nvm_*`, the tier's path after the
/// first 256 bytes): records may be in the tier, which a reader must have to apply them.
pub const FEATURE_NVM: u64 = 8;
/// `features_incompat`: the byte log may hold commit batches (write-back records, voids) and
/// records at or below the floor that still count (`bytelog_first`, FORMAT.md section 13).
/// Set while mounted with the byte log in use; a clean unmount clears it.
pub const FEATURE_BYTELOG_WB: u64 = 16;
/// `features_incompat`: the journal may hold compact transactions (FORMAT.md section 12),
/// which a reader that knows only descriptors and commit blocks would not find. Set while
/// mounted writable with a journal; a clean unmount (journal empty) clears it.
pub const FEATURE_JOURNAL_COMPACT: u64 = 32;
/// `features_incompat`: inodes may have extent maps (slot layout 2, FORMAT.md section 6a).
/// Set in every version-3 image and in no older one.
pub const FEATURE_EXTENTS: u64 = 64;
/// `features_incompat`: the byte log may hold allocation and inode-slot records (kinds 5 and
/// 6, FORMAT.md section 13: an fsync of a file whose block map grew), which an older reader
/// would refuse only once it met one. Set while mounted with the byte log in use and
/// `bytelog_grow` on; a clean unmount clears it.
pub const FEATURE_BYTELOG_MAP: u64 = 128;
/// `features_compat` bit 0: some inode has carried the immutable or append-only flag
/// (`fs/iflags.rs`), so a mount must check opens against inode flags. Compatible: a reader
/// that does not know it reads the image correctly (it just does not enforce the flags).
pub const COMPAT_INODE_FLAGS: u64 = 1;
/// The tier's path is stored at bytes 256..1280 of the superblock's block: a u16 length,
/// the path, and a crc at 1276 (salt 1) over 256..1276.
pub const NVM_PATH_AT: usize = 256;
pub const NVM_PATH_MAX: usize = 1018;
const NVM_PATH_CRC_AT: usize = 1276;
/// The superblock's encoded fields occupy the first 256 bytes of its block; the crc is at 252.
pub const SB_CRC_AT: usize = 252;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub format_version: u32,
    pub block_size: u32,
    pub total_blocks: u64,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub uuid: [u8; 16],
    pub created_sec: u64,
    pub mount_count: u32,
    pub state: u32,
    pub free_blocks: u64,
    pub free_inodes: u64,
    pub root_ino: u64,
    pub features_compat: u64,
    pub features_incompat: u64,
    pub features_ro_compat: u64,
    pub label: [u8; 32],
    pub last_write_sec: u64,
    /// First block of the journal (in group 0, after its metadata); 0 without a journal.
    pub journal_start: u64,
    pub journal_blocks: u32,
    /// Sequence number of the last journal transaction written.
    pub journal_seq: u64,
    /// First block of the byte log (in group 0, after the journal); 0 without one.
    pub bytelog_start: u64,
    pub bytelog_blocks: u32,
    /// Where the byte log's records not yet covered by a commit begin: a 512-byte sector
    /// index within the byte log.
    pub bytelog_tail: u32,
    /// Every byte-log record with this sequence number or a lower one is in the home blocks
    /// (or the journal) as of the commit this superblock belongs to.
    pub bytelog_floor: u64,
    /// With [`FEATURE_BYTELOG_WB`]: the sequence number of the batch at `bytelog_tail` when
    /// records at or below the floor still count (blocks whose newest bytes are only in the
    /// byte log); 0: reading starts at `bytelog_floor + 1`.
    pub bytelog_first: u64,
    /// The NVM tier's identity (its header's uuid), where its live records begin (a byte
    /// offset in its ring), its size, and its path when last mounted (for the error that
    /// names it when it is missing).
    pub nvm_uuid: [u8; 16],
    pub nvm_tail: u64,
    pub nvm_size: u64,
    pub nvm_path: String,
}

impl Superblock {
    /// Encodes into a full block.
    pub fn encode(&self, block_size: u32) -> Vec<u8> {
        let mut b = vec![0u8; block_size as usize];
        b[0..8].copy_from_slice(SB_MAGIC);
        put_u32(&mut b, 8, self.format_version);
        put_u32(&mut b, 12, self.block_size);
        put_u64(&mut b, 16, self.total_blocks);
        put_u32(&mut b, 24, self.blocks_per_group);
        put_u32(&mut b, 28, self.inodes_per_group);
        b[32..48].copy_from_slice(&self.uuid);
        put_u64(&mut b, 48, self.created_sec);
        put_u32(&mut b, 56, self.mount_count);
        put_u32(&mut b, 60, self.state);
        put_u64(&mut b, 64, self.free_blocks);
        put_u64(&mut b, 72, self.free_inodes);
        put_u64(&mut b, 80, self.root_ino);
        put_u64(&mut b, 88, self.features_compat);
        put_u64(&mut b, 96, self.features_incompat);
        put_u64(&mut b, 104, self.features_ro_compat);
        b[112..144].copy_from_slice(&self.label);
        put_u64(&mut b, 144, self.last_write_sec);
        put_u64(&mut b, 152, self.journal_start);
        put_u32(&mut b, 160, self.journal_blocks);
        put_u64(&mut b, 168, self.journal_seq);
        put_u64(&mut b, 176, self.bytelog_start);
        put_u32(&mut b, 184, self.bytelog_blocks);
        put_u32(&mut b, 188, self.bytelog_tail);
        put_u64(&mut b, 192, self.bytelog_floor);
        b[200..216].copy_from_slice(&self.nvm_uuid);
        put_u64(&mut b, 216, self.nvm_tail);
        put_u64(&mut b, 224, self.nvm_size);
        put_u64(&mut b, 232, self.bytelog_first);
        seal(&mut b[..256], SB_CRC_AT, 0);
        if self.has_nvm() {
            let p = self.nvm_path.as_bytes();
            let n = p.len().min(NVM_PATH_MAX);
            super::put_u16(&mut b, NVM_PATH_AT, n as u16);
            b[NVM_PATH_AT + 2..NVM_PATH_AT + 2 + n].copy_from_slice(&p[..n]);
            seal(
                &mut b[NVM_PATH_AT..NVM_PATH_CRC_AT + 4],
                NVM_PATH_CRC_AT - NVM_PATH_AT,
                1,
            );
        }
        b
    }

    /// Decodes and validates a superblock read from `block`.
    pub fn decode(b: &[u8], block: u64) -> FsResult<Superblock> {
        if b.len() < 256 || &b[0..8] != SB_MAGIC {
            return Err(FsError::NotMoafs {
                detail: format!("no moafs magic at block {block}"),
            });
        }
        verify(&b[..256], SB_CRC_AT, 0, "superblock", block)?;
        let sb = Superblock {
            format_version: get_u32(b, 8),
            block_size: get_u32(b, 12),
            total_blocks: get_u64(b, 16),
            blocks_per_group: get_u32(b, 24),
            inodes_per_group: get_u32(b, 28),
            uuid: b[32..48].try_into().unwrap_or([0; 16]),
            created_sec: get_u64(b, 48),
            mount_count: get_u32(b, 56),
            state: get_u32(b, 60),
            free_blocks: get_u64(b, 64),
            free_inodes: get_u64(b, 72),
            root_ino: get_u64(b, 80),
            features_compat: get_u64(b, 88),
            features_incompat: get_u64(b, 96),
            features_ro_compat: get_u64(b, 104),
            label: b[112..144].try_into().unwrap_or([0; 32]),
            last_write_sec: get_u64(b, 144),
            journal_start: get_u64(b, 152),
            journal_blocks: get_u32(b, 160),
            journal_seq: get_u64(b, 168),
            bytelog_start: get_u64(b, 176),
            bytelog_blocks: get_u32(b, 184),
            bytelog_tail: get_u32(b, 188),
            bytelog_floor: get_u64(b, 192),
            nvm_uuid: b[200..216].try_into().unwrap_or([0; 16]),
            nvm_tail: get_u64(b, 216),
            nvm_size: get_u64(b, 224),
            bytelog_first: get_u64(b, 232),
            nvm_path: String::new(),
        };
        if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&sb.format_version) {
            return Err(FsError::UnsupportedVersion {
                found: sb.format_version,
                supported: FORMAT_VERSION,
            });
        }
        sb.validate(block)?;
        let mut sb = sb;
        if sb.has_nvm() {
            let area = b.get(NVM_PATH_AT..NVM_PATH_CRC_AT + 4).ok_or_else(|| {
                FsError::corrupt("superblock", block, "block too short for the tier's path")
            })?;
            // The path is a hint (the tier is named at mount, its identity is `nvm_uuid` in
            // the checked first bytes): an area whose crc fails — the first mount with a tier
            // writes the feature bit (first sector) and the path (bytes 256..1280) in one
            // block write, which a power cut can tear between sectors — reads as no path
            // rather than as a corrupt superblock.
            if verify(
                area,
                NVM_PATH_CRC_AT - NVM_PATH_AT,
                1,
                "superblock (tier path)",
                block,
            )
            .is_ok()
            {
                let n = (super::get_u16(area, 0) as usize).min(NVM_PATH_MAX);
                sb.nvm_path = String::from_utf8_lossy(&area[2..2 + n]).into_owned();
            } else {
                log::warn!("superblock at block {block}: the NVM tier's path is unreadable");
                sb.nvm_path = String::new();
            }
        }
        Ok(sb)
    }

    pub fn has_journal(&self) -> bool {
        self.features_incompat & FEATURE_JOURNAL != 0
    }

    pub fn has_nvm(&self) -> bool {
        self.features_incompat & FEATURE_NVM != 0
    }

    /// Inodes may have extent maps (version 3).
    pub fn has_extents(&self) -> bool {
        self.features_incompat & FEATURE_EXTENTS != 0
    }

    pub fn has_bytelog(&self) -> bool {
        self.features_incompat & FEATURE_BYTELOG != 0
    }

    /// The byte log's blocks, `start..end` (empty without one).
    pub fn bytelog_range(&self) -> std::ops::Range<u64> {
        self.bytelog_start..self.bytelog_start + self.bytelog_blocks as u64
    }

    /// The journal and the byte log after it: blocks that never hold file data or metadata.
    pub fn log_range(&self) -> std::ops::Range<u64> {
        let end = if self.has_bytelog() {
            self.bytelog_range().end
        } else {
            self.journal_range().end
        };
        self.journal_start..end
    }

    /// The journal's blocks, `start..end` (empty without a journal).
    pub fn journal_range(&self) -> std::ops::Range<u64> {
        self.journal_start..self.journal_start + self.journal_blocks as u64
    }

    /// Checks the fields against each other, so that no later arithmetic can overflow.
    fn validate(&self, block: u64) -> FsResult<()> {
        let bad = |d: &str| Err(FsError::corrupt("superblock", block, d.to_string()));
        if self.block_size != 4096 && self.block_size != 16384 {
            return bad("block size is neither 4096 nor 16384");
        }
        if self.total_blocks < 16 || self.total_blocks > (1u64 << 32) {
            return bad("total block count out of range");
        }
        if self.blocks_per_group < 64 || self.blocks_per_group as u64 > self.total_blocks.max(64) {
            return bad("blocks per group out of range");
        }
        let ipb = self.block_size / super::INODE_BYTES as u32;
        if self.inodes_per_group == 0
            || !self.inodes_per_group.is_multiple_of(ipb)
            || self.inodes_per_group as u64 > self.blocks_per_group as u64 * ipb as u64
        {
            return bad("inodes per group out of range");
        }
        if self.features_incompat
            & !(FEATURE_JOURNAL
                | FEATURE_LARGE_XATTR
                | FEATURE_BYTELOG
                | FEATURE_NVM
                | FEATURE_BYTELOG_WB
                | FEATURE_JOURNAL_COMPACT
                | FEATURE_EXTENTS
                | FEATURE_BYTELOG_MAP)
            != 0
        {
            return bad("unknown incompatible features");
        }
        if self.has_extents() != (self.format_version >= 3) {
            return bad("the extent-map feature without version 3, or version 3 without it");
        }
        if self.root_ino != 1 {
            return bad("root inode is not 1");
        }
        let geo = super::Geometry::from_superblock(self);
        if geo.meta_blocks() as u64 + 1 > geo.group_len(geo.group_count - 1) as u64
            && geo.group_count == 1
        {
            return bad("group too small for its metadata");
        }
        if self.has_journal() {
            if self.journal_blocks < 8
                || self.journal_start < geo.meta_blocks() as u64
                || self
                    .journal_start
                    .saturating_add(self.journal_blocks as u64)
                    > geo.group_len(0) as u64
            {
                return bad("journal outside group 0's data area or too small");
            }
        } else if self.journal_start != 0 || self.journal_blocks != 0 {
            return bad("journal fields set without the journal feature");
        }
        if self.has_bytelog() {
            let sectors = self.bytelog_blocks as u64 * (self.block_size as u64 / 512);
            if self.format_version < 2
                || !self.has_journal()
                || self.bytelog_blocks < 2
                || self.bytelog_start < self.journal_start + self.journal_blocks as u64
                || self
                    .bytelog_start
                    .saturating_add(self.bytelog_blocks as u64)
                    > geo.group_len(0) as u64
                || self.bytelog_tail as u64 >= sectors
            {
                return bad(
                    "byte log outside group 0's data area, too small, or without a journal",
                );
            }
        } else if self.bytelog_start != 0
            || self.bytelog_blocks != 0
            || self.bytelog_tail != 0
            || self.bytelog_floor != 0
            || self.features_incompat & (FEATURE_BYTELOG_WB | FEATURE_BYTELOG_MAP) != 0
        {
            return bad("byte-log fields set without the byte-log feature");
        }
        // sequence numbers count up by one per transaction or record: never near u64::MAX
        if self.journal_seq >= SEQ_LIMIT || self.bytelog_floor >= SEQ_LIMIT {
            return bad("journal or byte-log sequence number beyond 2^62");
        }
        if (self.bytelog_first != 0 && self.features_incompat & FEATURE_BYTELOG_WB == 0)
            || self.bytelog_first > self.bytelog_floor + 1
        {
            return bad(
                "byte log's first live record set without write-back records, or above its floor",
            );
        }
        if self.has_nvm() {
            if !self.has_bytelog() || self.nvm_tail >= self.nvm_size {
                return bad("NVM tier without a byte log, or its tail outside it");
            }
        } else if self.nvm_uuid != [0; 16] || self.nvm_tail != 0 || self.nvm_size != 0 {
            return bad("NVM tier fields set without the tier feature");
        }
        Ok(())
    }
}
