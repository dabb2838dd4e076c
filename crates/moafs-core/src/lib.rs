//! moafs engine: a small-file-friendly file system, drivable in-process on any device.
//!
//! Layers, top to bottom (each uses only those below it):
//! `fs` (POSIX operations on inode numbers: namespace, data, block cache, write-back and
//! allocation) → `recovery` (superblock probing, journal and byte-log replay: what a mount
//! and fsck both need, from the device and the format alone) → `format` (every on-disk
//! structure; see docs/FORMAT.md) → `device` (image file, memory, model HDD/SSD, flash, NVM
//! tiers, fault injection). `mkfs` and `fsck` (with `inspect`) are tools over `recovery` and
//! `format`; they borrow only the engine's public types (`fs::FileKind`, `fs::Timespec`).
//! The test instruments that drive the engine (crash check, fuzzing helpers) are the
//! `moafs-check` crate's; `units` is a leaf (sizes as people write them). Nothing here depends on FUSE: the `moafs-fuse` crate
//! adapts.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod device;
pub mod error;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod memory;
pub mod mkfs;
pub mod recovery;
pub mod units;

pub use error::{FsError, FsResult};
pub use fs::Fs;
pub use units::parse_size;
