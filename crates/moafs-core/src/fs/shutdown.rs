//! Shutting the file system down while mounted (the `FS_IOC_SHUTDOWN` ioctl of ext4 and
//! XFS, `XFS_IOC_GOINGDOWN`; what `xfs_io -c shutdown` and xfstests' godown send).
//!
//! [`Fs::shutdown`] first makes durable what its [`ShutdownFlush`] asks for, then closes the
//! device fence ([`FenceDevice`]): from then on no request reaches the device — not the rest
//! of a commit in flight, not a write-back, checkpoint or unmount — and every operation fails
//! with EIO ([`FsError::ShutDown`]). The next mount finds the image as a crash at that
//! moment would leave it and recovers what was durable (the journal's replay). A file
//! system shut down stays so until it is unmounted.

use super::{Fs, Inner};
use crate::device::FenceDevice;
use crate::error::{FsError, FsResult};
use std::sync::Arc;

/// What a shutdown makes durable before it closes the device (the flags of the ioctl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownFlush {
    /// `FS_GOING_FLAGS_DEFAULT` (0): everything the engine holds, as a sync.
    All,
    /// `FS_GOING_FLAGS_LOGFLUSH` (1): the journal's commit of every change made so far. In
    /// moafs a commit takes data with metadata (ordered), so this is the same as `All`:
    /// the difference in ext4 and XFS is the kernel's page cache, which a FUSE daemon does
    /// not see (pages still dirty in the kernel are lost under every flag).
    Log,
    /// `FS_GOING_FLAGS_NOLOGFLUSH` (2): nothing; what was not durable is lost.
    Nothing,
}

impl ShutdownFlush {
    /// The flag word of the ioctl; `None` for an unknown flag (the ioctl fails with EINVAL).
    pub fn from_flags(flags: u32) -> Option<ShutdownFlush> {
        match flags {
            0 => Some(ShutdownFlush::All),
            1 => Some(ShutdownFlush::Log),
            2 => Some(ShutdownFlush::Nothing),
            _ => None,
        }
    }
}

/// Whether the file system is shut down: the fence of its device, closed or not.
pub(super) struct Down {
    fence: Arc<FenceDevice>,
}

impl Down {
    pub(super) fn new(fence: Arc<FenceDevice>) -> Down {
        Down { fence }
    }
    fn is_down(&self) -> bool {
        self.fence.is_closed()
    }
}

impl Fs {
    /// Shuts the file system down (module comment). Shutting down twice is no error.
    pub fn shutdown(&self, flush: ShutdownFlush) -> FsResult<()> {
        if self.is_shut_down() {
            return Ok(());
        }
        // A failing flush still shuts down: the caller asked for the file system to stop.
        let flushed = match flush {
            ShutdownFlush::All | ShutdownFlush::Log => self.sync(),
            ShutdownFlush::Nothing => Ok(()),
        };
        self.down.fence.close();
        {
            let mut g = self.lock();
            g.shut_down();
        }
        // fsyncs waiting for a commit see the file system failed
        self.done.notify_all();
        self.stop_write_behind();
        log::warn!("the file system was shut down ({flush:?}); every operation fails from now on");
        flushed
    }

    /// Whether [`Fs::shutdown`] ran.
    pub fn is_shut_down(&self) -> bool {
        self.down.is_down()
    }

    /// `Err(ShutDown)` once the file system is shut down: the first step of every operation.
    pub(super) fn live(&self) -> FsResult<()> {
        if self.down.is_down() {
            return Err(FsError::ShutDown);
        }
        Ok(())
    }
}

impl Inner {
    /// Nothing more may be written (the commit, write-back and unmount paths stop at
    /// `failed`); the log says why once.
    fn shut_down(&mut self) {
        self.failed = true;
    }
}
