//! What fsck finds: one variant per kind of inconsistency, with the data to name it, its
//! text (`Display`, the words fsck has always printed) and what `fsck -y` does about it
//! ([`Finding::repair`]).
//!
//! Repair is decided per finding, with one guard. Most findings are *derived state* (bitmaps,
//! group counters, link counts, block counts, orphans) or *local structure* (an entry, a
//! directory block, a parent field, an inode slot), and `-y` rebuilds or rewrites them from
//! what the walk reached. That is only sound when the walk could account for everything: a
//! damaged root, group header, indirect or xattr block hides blocks and inodes that the
//! rebuilt bitmaps would then call free and hand out again. Such findings
//! ([`Finding::blocks_repair`]) stop every repair; the image is left as it is and exit code 4
//! says so. Findings with no repair but no such effect (a block used twice) are left as
//! errors while the rest is repaired.

use std::fmt;

/// One inconsistency found by fsck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The primary superblock does not decode (a backup was used).
    PrimarySuperblock {
        detail: String,
    },
    /// A backup superblock does not decode.
    BackupSuperblock {
        group: u32,
        detail: String,
    },
    /// A group header does not decode.
    GroupHeader {
        group: u32,
        detail: String,
    },
    /// A group's block (or inode) bitmap does not match the crc in its header.
    BitmapChecksum {
        group: u32,
        inodes: bool,
    },
    /// Blocks marked used that nothing references.
    BlocksLeaked {
        group: u32,
        count: u64,
    },
    /// Referenced blocks marked free.
    BlocksMarkedFree {
        group: u32,
        count: u64,
    },
    /// A group header's free-block counter disagrees with its bitmap.
    FreeBlocksCount {
        group: u32,
        stored: u32,
        found: u32,
    },
    /// A group header's free-inode counter disagrees with its inode bitmap.
    FreeInodesCount {
        group: u32,
        stored: u32,
        found: u32,
    },
    /// A group header counts more directories than the group has inodes.
    DirCount {
        group: u32,
        stored: u32,
    },
    RootDamaged,
    RootNotDirectory,
    /// An inode that does not decode (crc, or a field outside the format's bounds), or has
    /// no valid file type.
    InodeDamaged {
        ino: u64,
        detail: String,
    },
    /// A block pointer outside the data area (the decoders refuse these first).
    PointerOutside {
        ino: u64,
        block: u64,
    },
    /// A block referenced by two pointers.
    BlockUsedTwice {
        ino: u64,
        block: u64,
    },
    /// An indirect or xattr block of the inode does not decode.
    BlockDamaged {
        ino: u64,
        detail: String,
    },
    /// The inode's block count disagrees with the blocks found below it.
    BlockCount {
        ino: u64,
        stored: u64,
        found: u64,
    },
    /// A directory whose size is not whole blocks.
    DirSize {
        ino: u64,
        size: u64,
    },
    /// The inode's link count disagrees with the links found.
    LinkCount {
        ino: u64,
        stored: u32,
        found: u32,
    },
    /// A reachable inode free in the inode bitmap.
    InodeMarkedFree {
        ino: u64,
    },
    /// An allocated inode no directory reaches.
    Unreachable {
        ino: u64,
        nlink: u32,
    },
    /// An inode marked in the bitmap whose slot is free (or damaged).
    MarkedButFree {
        ino: u64,
    },
    /// A slot free in the bitmap that holds an inode.
    FreeSlotInUse {
        ino: u64,
    },
    /// A slot free in the bitmap that holds damaged bytes.
    FreeSlotDamaged {
        ino: u64,
        detail: String,
    },
    /// A directory block that does not decode.
    DirBlockUnreadable {
        dir: u64,
        index: u64,
        detail: String,
    },
    /// An entry naming an inode number outside the file system.
    EntryInvalidInode {
        dir: u64,
        name: String,
        ino: u64,
    },
    /// An entry naming a free (or damaged) inode.
    EntryFreeInode {
        dir: u64,
        name: String,
        ino: u64,
    },
    /// An entry whose type byte disagrees with its inode.
    EntryType {
        dir: u64,
        name: String,
        kind: u8,
        ino: u64,
    },
    /// A second entry naming a directory.
    SecondDirLink {
        dir: u64,
        name: String,
        ino: u64,
    },
    /// A directory whose parent field is not the directory listing it.
    WrongParent {
        ino: u64,
        name: String,
        parent: u64,
        listed_in: u64,
    },
    /// A byte-log record for an inode no directory lists.
    RecordUnlisted {
        seq: u64,
        ino: u64,
    },
    /// A byte-log record for a block the inode does not map at that place.
    RecordUnmapped {
        seq: u64,
        ino: u64,
        index: u64,
        home: u64,
    },
}

impl Finding {
    /// What `fsck -y` does about it; `None`: it is left (reported, exit code 4).
    pub fn repair(&self) -> Option<&'static str> {
        use Finding::*;
        Some(match self {
            PrimarySuperblock { .. } | BackupSuperblock { .. } => {
                "every superblock is written again from the one in use"
            }
            BitmapChecksum { .. } | BlocksLeaked { .. } | BlocksMarkedFree { .. } => {
                "the group's bitmaps are rebuilt from what the walk reached, with their crcs"
            }
            FreeBlocksCount { .. } | FreeInodesCount { .. } | DirCount { .. } => {
                "the group's counters are recounted from the rebuilt bitmaps"
            }
            InodeMarkedFree { .. } | MarkedButFree { .. } => {
                "the inode bitmap is rebuilt from the inodes the walk reached"
            }
            InodeDamaged { .. } => {
                "the inode slot is cleared and the entries naming it removed (its blocks \
                 become free)"
            }
            Unreachable { .. } => "the inode slot is cleared (its blocks become free)",
            FreeSlotInUse { .. } | FreeSlotDamaged { .. } => "the slot is cleared",
            BlockCount { .. } => {
                "the inode's block count is set to the blocks found (a directory's size is cut \
                 to fit them)"
            }
            DirSize { .. } => "the directory's size is rounded down to whole blocks",
            LinkCount { .. } => "the link count is set to the links found",
            DirBlockUnreadable { .. } => {
                "the block is written again empty (its entries are lost; the inodes only they \
                 named are cleared)"
            }
            EntryInvalidInode { .. } | EntryFreeInode { .. } => "the entry is removed",
            SecondDirLink { .. } => {
                "the entry is removed (a directory keeps the name the walk met first)"
            }
            EntryType { .. } => "the entry's type is set to its inode's",
            WrongParent { .. } => "the parent field is set to the directory listing it",
            RootDamaged
            | RootNotDirectory
            | GroupHeader { .. }
            | PointerOutside { .. }
            | BlockUsedTwice { .. }
            | BlockDamaged { .. }
            | RecordUnlisted { .. }
            | RecordUnmapped { .. } => return None,
        })
    }

    /// The walk could not account for everything (see the module doc): no repair runs.
    pub fn blocks_repair(&self) -> bool {
        matches!(
            self,
            Finding::RootDamaged
                | Finding::RootNotDirectory
                | Finding::GroupHeader { .. }
                | Finding::BlockDamaged { .. }
        )
    }

    /// Whether the text contains `pat` (for callers that matched the finding's words).
    pub fn contains(&self, pat: &str) -> bool {
        self.to_string().contains(pat)
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Finding::*;
        match self {
            PrimarySuperblock { detail } => write!(
                f,
                "primary superblock: {detail} (a backup superblock is intact)"
            ),
            BackupSuperblock { group, detail } => {
                write!(f, "backup superblock in group {group}: {detail}")
            }
            GroupHeader { group, detail } => write!(f, "group {group}: {detail}"),
            BitmapChecksum { group, inodes } => write!(
                f,
                "group {group}: {} bitmap checksum mismatch",
                if *inodes { "inode" } else { "block" }
            ),
            BlocksLeaked { group, count } => write!(
                f,
                "group {group}: {count} block(s) marked used in the bitmap but not referenced"
            ),
            BlocksMarkedFree { group, count } => write!(
                f,
                "group {group}: {count} referenced block(s) marked free in the bitmap"
            ),
            FreeBlocksCount {
                group,
                stored,
                found,
            } => write!(
                f,
                "group {group}: free count {stored} but the bitmap has {found} free blocks"
            ),
            FreeInodesCount {
                group,
                stored,
                found,
            } => write!(
                f,
                "group {group}: free count {stored} but the inode bitmap has {found} free inodes"
            ),
            DirCount { group, stored } => write!(
                f,
                "group {group}: directory count {stored} exceeds the group's inodes"
            ),
            RootDamaged => write!(f, "root inode is free or damaged"),
            RootNotDirectory => write!(f, "root inode is not a directory"),
            InodeDamaged { ino, detail } => write!(f, "inode {ino}: damaged ({detail})"),
            PointerOutside { ino, block } => write!(
                f,
                "inode {ino}: block pointer {block} outside the data area"
            ),
            BlockUsedTwice { ino, block } => {
                write!(f, "inode {ino}: block {block} is used twice")
            }
            BlockDamaged { ino, detail } => write!(f, "inode {ino}: {detail}"),
            BlockCount { ino, stored, found } => write!(
                f,
                "inode {ino}: block count {stored} but {found} blocks found"
            ),
            DirSize { ino, size } => write!(
                f,
                "directory {ino}: size {size} is not a multiple of the block size"
            ),
            LinkCount { ino, stored, found } => write!(
                f,
                "inode {ino}: link count {stored} but {found} links found"
            ),
            InodeMarkedFree { ino } => {
                write!(f, "inode {ino}: in use but free in the inode bitmap")
            }
            Unreachable { ino, nlink } => {
                write!(f, "inode {ino}: allocated (nlink {nlink}) but unreachable")
            }
            MarkedButFree { ino } => write!(
                f,
                "inode {ino}: marked in the inode bitmap but free (unreachable)"
            ),
            FreeSlotInUse { ino } => write!(f, "free inode slot {ino} holds an inode"),
            FreeSlotDamaged { ino, detail } => write!(f, "free inode slot {ino}: {detail}"),
            DirBlockUnreadable { dir, index, detail } => {
                write!(f, "directory {dir}: block {index} unreadable ({detail})")
            }
            EntryInvalidInode { dir, name, ino } => write!(
                f,
                "directory {dir}: entry {name:?} names invalid inode {ino}"
            ),
            EntryFreeInode { dir, name, ino } => {
                write!(f, "directory {dir}: entry {name:?} names free inode {ino}")
            }
            EntryType {
                dir,
                name,
                kind,
                ino,
            } => write!(
                f,
                "directory {dir}: entry {name:?} type {kind} disagrees with inode {ino}"
            ),
            SecondDirLink { dir, name, ino } => write!(
                f,
                "directory {dir}: entry {name:?} is a second link to directory {ino}"
            ),
            WrongParent {
                ino,
                name,
                parent,
                listed_in,
            } => write!(
                f,
                "directory {ino} ({name:?}): parent is {parent} but it is listed in {listed_in}"
            ),
            RecordUnlisted { seq, ino } => write!(
                f,
                "byte-log record {seq} names inode {ino}, which no directory lists"
            ),
            RecordUnmapped {
                seq,
                ino,
                index,
                home,
            } => write!(
                f,
                "byte-log record {seq} is for block {index} of inode {ino} at {home}, which \
                 the inode does not map there"
            ),
        }
    }
}

/// Reports serialise findings as their text (as when they were strings).
impl serde::Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
