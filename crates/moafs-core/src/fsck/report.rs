//! What fsck returns ([`FsckReport`]): the findings, repaired or left, the counts of what the
//! walk reached, the layout score and free runs, and e2fsck's exit code.

use super::finding::Finding;
use super::layout::{FreeRuns, Layout};

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FsckReport {
    /// Inconsistencies found (and not repaired).
    pub errors: Vec<Finding>,
    /// Inconsistencies found and repaired.
    pub repaired: Vec<Finding>,
    pub warnings: Vec<String>,
    /// Inodes without links that nothing names: files unlinked while open when the image
    /// was left (a crash or kill). Not an error: the next mount frees them.
    pub orphans: u64,
    pub files: u64,
    pub directories: u64,
    pub used_blocks: u64,
    /// Data layout of the regular files (Smith & Seltzer's layout score).
    pub layout: Layout,
    /// Free space as runs, from the block bitmaps as found.
    pub free_runs: FreeRuns,
    pub summary: String,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.repaired.is_empty()
    }
    /// e2fsck's exit code: 0 clean, 1 errors corrected, 4 errors left uncorrected, both
    /// bits (5) when some were corrected and some left. (8, an operational error, is an
    /// `Err` from [`fsck`](super::fsck).)
    pub fn exit_code(&self) -> i32 {
        let corrected = if self.repaired.is_empty() { 0 } else { 1 };
        let left = if self.errors.is_empty() { 0 } else { 4 };
        corrected | left
    }
}
