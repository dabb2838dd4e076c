//! Errors of the kernel's write-back that the writing application must see at its next
//! write(2).
//!
//! With the kernel's write-back cache, write(2) only fills the page cache; the WRITE that
//! carries the pages to the daemon comes later, and when it fails (no space left) the kernel
//! only remembers the error for fsync(2) and close(2). A writer that does not look — `dd
//! if=/dev/zero of=F` filling the file system — would fill the page cache for ever while
//! every byte is dropped. ext4 says ENOSPC at write(2) instead (delayed allocation reserves
//! space there). Here: a write-back WRITE that fails with ENOSPC notes its inode and tells
//! the kernel to forget the inode's attributes; the kernel asks for them (GETATTR with the
//! file's handle) before the next buffered write(2) to the file, and that GETATTR answers
//! ENOSPC once, which write(2) returns. A plain stat(2) asks without a handle and is not
//! answered with the error; a read past the end of the file or an lseek(2) to its end,
//! which also ask with a handle, may be the one that sees it.

use std::collections::HashSet;
use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct LateErrors {
    no_space: Mutex<HashSet<u64>>,
}

impl LateErrors {
    /// A write-back WRITE of `ino` failed for lack of space.
    pub(crate) fn note_no_space(&self, ino: u64) {
        self.no_space
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ino);
    }

    /// Whether `ino` has an ENOSPC its writer has not seen; it is seen now.
    pub(crate) fn take_no_space(&self, ino: u64) -> bool {
        let mut s = self.no_space.lock().unwrap_or_else(|e| e.into_inner());
        !s.is_empty() && s.remove(&ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_seen_once_by_its_inode() {
        let l = LateErrors::default();
        assert!(!l.take_no_space(5));
        l.note_no_space(5);
        l.note_no_space(5);
        assert!(!l.take_no_space(6));
        assert!(l.take_no_space(5));
        assert!(!l.take_no_space(5));
    }
}
