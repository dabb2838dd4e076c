//! The file system's label online (`FS_IOC_GETFSLABEL` / `FS_IOC_SETFSLABEL`, what
//! `xfs_io -c label`, `btrfs filesystem label` and e2label's online path send).
//!
//! The label is the superblock's 32-byte field (docs/FORMAT.md §1), NUL-padded. Setting it
//! runs a commit of its own at once (the superblock goes through the journal with every
//! commit) that also rewrites the backup superblocks, which carry the label as they carry the
//! feature bits: the new label is durable when the call returns, on the primary and the
//! backups alike.

use super::Fs;
use crate::error::{FsError, FsResult};

/// Longest label, in bytes (the superblock's field).
pub const LABEL_MAX: usize = 32;

impl Fs {
    /// The label, without its NUL padding.
    pub fn label(&self) -> FsResult<Vec<u8>> {
        self.live()?;
        let l = self.lock().sb.label;
        let n = l.iter().position(|&b| b == 0).unwrap_or(l.len());
        Ok(l[..n].to_vec())
    }

    /// Sets the label (at most [`LABEL_MAX`] bytes, no NUL; empty clears it) and makes it
    /// durable.
    pub fn set_label(&self, label: &[u8]) -> FsResult<()> {
        self.live()?;
        if label.len() > LABEL_MAX || label.contains(&0) {
            return Err(FsError::invalid(format!(
                "a label has at most {LABEL_MAX} bytes and no NUL"
            )));
        }
        let mut field = [0u8; LABEL_MAX];
        field[..label.len()].copy_from_slice(label);
        self.commit_superblock_change(|sb| sb.label = field)
    }

    /// Changes a superblock field by `change` and makes it durable at once: a commit of its
    /// own (the superblock goes through the journal with every commit; the backups are
    /// rewritten when what they carry — feature bits, label — changed). A failed commit
    /// leaves the field as it was.
    pub(super) fn commit_superblock_change(
        &self,
        change: impl FnOnce(&mut crate::format::Superblock),
    ) -> FsResult<()> {
        let _job = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let r = {
            let mut g = self.lock();
            g.check_writable()?;
            let old = g.sb.clone();
            change(&mut g.sb);
            let r = g.commit();
            if r.is_err() {
                g.sb = old;
            }
            r
        };
        self.done.notify_all();
        r
    }
}
