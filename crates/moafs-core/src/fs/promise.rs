//! Fsync promises for a recording device (`-o record=`, `device/record.rs`).
//!
//! When the device records, every successful fsync of a regular file leaves in the write log
//! what it promised: the file's size and the crc32c of its contents. Soundness rests on two
//! orders, both kept under the engine lock: [`Note::FsyncStart`] is noted before the fsync
//! looks at anything, and [`Note::Mutated`] is noted in the same critical section as every
//! change of a file's contents or size and every removal of one of its names. The device drops
//! the promise when a `Mutated` of the inode comes between the start and [`Note::Fsynced`]; so
//! a promise it keeps holds the contents as they were when the fsync started, which the fsync
//! made durable. On every other device `records()` is false and each hook is one virtual call.

use super::{Fs, Inner};
use crate::device::Note;
use crate::error::FsResult;

/// Bytes read per step when checksumming a file (the engine lock is released between steps).
const CHUNK_BYTES: u32 = 1 << 20;

impl Inner {
    /// Notes that `ino` changes (contents, size, names, links, mode, owner, extended
    /// attributes, or for a directory its entries; call under the engine lock, with the
    /// change). Times are not promised and need no note.
    pub(crate) fn note_mutated(&self, ino: u64) {
        if self.dev.records() {
            self.dev.note(Note::Mutated { ino });
        }
    }

    /// Notes that the entry `name` of `parent`, if any, loses this name (unlink, rmdir,
    /// rename over or away).
    pub(crate) fn note_victim(&mut self, parent: u64, name: &[u8]) {
        if self.dev.records() {
            if let Ok(ino) = self.lookup_name(parent, name) {
                self.note_mutated(ino);
            }
        }
    }

    /// Notes what a rename changes: both directories, the inode moved (its name, and its
    /// `..` if a directory) and the one it replaces or exchanges with.
    pub(crate) fn note_rename(&mut self, parent: u64, name: &[u8], newparent: u64, newname: &[u8]) {
        if self.dev.records() {
            self.note_mutated(parent);
            self.note_mutated(newparent);
            self.note_victim(parent, name);
            self.note_victim(newparent, newname);
        }
    }
}

impl Fs {
    /// Before an fsync: opens its promise when the device records. Returns whether it does.
    pub(crate) fn promise_start(&self, ino: u64) -> bool {
        if self.recording {
            self.lock().dev.note(Note::FsyncStart { ino });
        }
        self.recording
    }

    /// After a successful fsync: reads the file and notes what the fsync promised. A failure
    /// to read it only loses the promise: the fsync succeeded.
    pub(crate) fn promise_end(&self, ino: u64) {
        if let Err(e) = self.promise_read(ino) {
            log::warn!("record: no promise for the fsync of inode {ino}: {e}");
        }
    }

    fn promise_read(&self, ino: u64) -> FsResult<()> {
        let a = self.getattr(ino)?;
        // a file without links promises nothing: after a crash the mount frees it (orphan)
        if a.kind != super::FileKind::Regular || a.nlink == 0 {
            return Ok(());
        }
        let mut crc = 0u32;
        let mut offset = 0u64;
        while offset < a.size {
            let n = CHUNK_BYTES.min((a.size - offset).min(u32::MAX as u64) as u32);
            let data = self.read(ino, offset, n)?;
            if data.is_empty() {
                // shorter than its size: changed meanwhile (and noted); no promise
                return Ok(());
            }
            crc = crc32c::crc32c_append(crc, &data);
            offset += data.len() as u64;
        }
        self.lock().dev.note(Note::Fsynced {
            ino,
            size: a.size,
            crc,
        });
        Ok(())
    }
}
