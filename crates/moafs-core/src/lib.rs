//! moafs engine: a small-file-friendly file system, drivable in-process on any device.
//!
//! Layers, top to bottom (data flows down, never back up):
//! `fs` (POSIX operations on inode numbers: namespace, data, block cache, write-back and
//! allocation) → `format` (every on-disk structure; see docs/FORMAT.md) → `device` (image file,
//! memory, model HDD/SSD, fault injection). `mkfs`, `fsck` and `inspect` are tools over the
//! same format code. Nothing here depends on FUSE: the `moafs-fuse` crate adapts.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod device;
pub mod error;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod fuzzing;
pub mod mkfs;

pub use error::{FsError, FsResult};
pub use fs::Fs;
