//! fsck and inspect: offline readers of an image that never trust what they read.
//!
//! `fsck` walks the tree from the root, decodes every inode, indirect, directory and xattr
//! block it reaches (checking each crc and the format's decode-time rules, `format::Bounds`),
//! and compares what it found with the bitmaps, the group counters and the link counts. Each
//! inconsistency is a [`Finding`]. With `repair` it rewrites the bitmaps, counters, link and
//! block counts from what is reachable, removes entries naming damaged or free inodes and
//! clears unreachable inodes — each finding's own repair ([`Finding::repair`]), unless one
//! says the walk is incomplete ([`Finding::blocks_repair`]). Damaged indirect and xattr
//! blocks themselves are not rebuilt (reported, exit code 4).
//!
//! The pieces, in the order a check runs them: `check` (the entry points and the passes),
//! `walk` (the tree from the root, and the orphans), `compare` (what was reached against the
//! bitmaps, counters and link counts), `repair` (`-y`); what they find is `finding`, what they
//! return `report`, with the layout score and free runs of `layout`. `inspect` stands apart.

mod check;
mod compare;
mod finding;
mod inspect;
mod layout;
mod repair;
mod report;
mod walk;

pub use check::{fsck, fsck_with, layout};
pub use finding::Finding;
pub use inspect::{inspect, inspect_with, ByteLogInfo, GroupInfo, InspectReport};
pub use layout::{free_runs_in, FreeRuns, Layout};
pub use report::FsckReport;
