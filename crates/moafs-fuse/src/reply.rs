//! Replies the adapters share (moafs, [`crate::memfs`], [`crate::passthrough`]): a negative
//! entry, an extended attribute's value or size, and a reply that carries nothing.

use fuser::{Errno, FileAttr, FileType, INodeNo, ReplyEmpty, ReplyXattr};
use std::time::UNIX_EPOCH;

/// Attributes of a negative entry (node 0): only the timeout matters to the kernel.
pub(crate) fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// Answers GETXATTR/LISTXATTR with `data`: its size when asked for the size (`size` 0),
/// ERANGE when it does not fit in `size`.
pub(crate) fn xattr_reply(reply: ReplyXattr, data: &[u8], size: u32) {
    if size == 0 {
        match u32::try_from(data.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(Errno::E2BIG),
        }
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

/// Answers a request whose reply carries nothing: success, or the error.
pub(crate) fn empty(reply: ReplyEmpty, res: Result<(), Errno>) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}
