//! moafs's test instruments, outside the engine crate: they drive the engine through its
//! public API only, as a user's program would.
//!
//! - `crashcheck`: replays a recorded write log (`moafs_core::device::RecordDevice`) cut at
//!   every flush point or at random, and checks each crash state with fsck, a mount, and the
//!   promises the fsyncs and syncs made (`moafs crashcheck`).
//! - `fuzzing`: images to damage and what to do with them — a populated image, the
//!   structures in it (`moafs_core::format::fuzzing` knows each checksum), structure-level
//!   damage re-sealed, and the exercises (fsck, mount, read everything, mutate) that the
//!   corrupt-image tests and the fuzz targets run.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod crashcheck;
pub mod fuzzing;
