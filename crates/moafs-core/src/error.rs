//! Errors of the engine, with one mapping to errno at the edge.

use crate::device::DeviceError;

/// Everything an engine operation can fail with. `Corrupt` (bad bytes on the device) is kept
/// apart from `Device` (the device refused the I/O) and from the POSIX-level errors.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("device error: {0}")]
    Device(#[from] DeviceError),
    #[error("corrupt {what} at block {block}: {detail}")]
    Corrupt {
        what: &'static str,
        block: u64,
        detail: String,
    },
    #[error("not a moafs image: {detail}")]
    NotMoafs { detail: String },
    #[error("unsupported on-disk format version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("invalid argument: {detail}")]
    Invalid { detail: String },
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name too long")]
    NameTooLong,
    #[error("no space left on device")]
    NoSpace,
    #[error("too many links")]
    TooManyLinks,
    #[error("no such attribute")]
    NoAttr,
    #[error("value too large for the buffer")]
    Range,
    #[error("file too large")]
    FileTooBig,
    #[error("operation not permitted")]
    NotPermitted,
    #[error("permission denied")]
    Access,
    #[error("operation not supported")]
    NotSupported,
    #[error("read-only file system")]
    ReadOnly,
    /// An fsync after a device error failed a write-back: what it was to make durable may
    /// be lost (the file system turned read-only).
    #[error("I/O error: an earlier device error made the file system read-only; changes not yet durable were lost")]
    Failed,
    /// The file system was shut down (`Fs::shutdown`): every operation fails so.
    #[error("I/O error: the file system was shut down")]
    ShutDown,
    #[error("stale file handle (inode {ino})")]
    Stale { ino: u64 },
    /// Inside the engine: an operation needs a commit (to release pending frees) while
    /// another commit is writing; `Fs` lets go of the engine lock, waits and retries. Seen
    /// outside only if space stays short: reported as ENOSPC.
    #[error("no space left on device (frees wait for a commit in flight)")]
    CommitBusy,
    /// Inside the engine: space is short while files with no name and no open handle still
    /// hold blocks, because the kernel has not yet sent the FORGET that frees them (it sends
    /// it once its last reference goes, e.g. after an asynchronous RELEASE); `Fs` waits a
    /// little for it and retries. Seen outside only if space stays short: ENOSPC.
    #[error("no space left on device (unlinked files wait for the kernel to let go)")]
    SpaceHeld,
    /// Inside the engine: a warm pass (`fs/fetch.rs`) met a block it would have to read
    /// from the device; it is read with the engine lock released. Never returned by `Fs`
    /// (reported as EIO should it be).
    #[error("I/O error (a block to read outside the engine lock)")]
    WouldRead,
}

impl FsError {
    /// The errno this error is reported as to applications.
    pub fn to_errno(&self) -> i32 {
        match self {
            FsError::Device(_) => libc::EIO,
            FsError::Corrupt { .. } => libc::EUCLEAN,
            FsError::NotMoafs { .. } | FsError::UnsupportedVersion { .. } => libc::EINVAL,
            FsError::Invalid { .. } => libc::EINVAL,
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::NoSpace => libc::ENOSPC,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::NoAttr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::FileTooBig => libc::EFBIG,
            FsError::NotPermitted => libc::EPERM,
            FsError::Access => libc::EACCES,
            FsError::NotSupported => libc::EOPNOTSUPP,
            FsError::ReadOnly => libc::EROFS,
            FsError::Failed => libc::EIO,
            FsError::ShutDown => libc::EIO,
            FsError::Stale { .. } => libc::ESTALE,
            FsError::CommitBusy | FsError::SpaceHeld => libc::ENOSPC,
            FsError::WouldRead => libc::EIO,
        }
    }

    pub fn corrupt(what: &'static str, block: u64, detail: impl Into<String>) -> Self {
        FsError::Corrupt {
            what,
            block,
            detail: detail.into(),
        }
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        FsError::Invalid {
            detail: detail.into(),
        }
    }
}

pub type FsResult<T> = Result<T, FsError>;
