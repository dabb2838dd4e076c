//! File device: an image file or a raw block device, reached with positioned system calls.
//!
//! Design notes:
//!
//! * Every request is one positioned system call (`pread`/`pwrite`/`pwritev`), never a
//!   `seek` + `read` pair, so the device can be shared between threads without a lock and the
//!   kernel sees exactly the requests the engine issued. `writev_at` in particular is a single
//!   `pwritev`: co-writing relies on a scatter-gather write reaching the kernel as one request.
//!   We only loop on short writes (and split at `IOV_MAX` buffers, which the kernel would
//!   otherwise reject), which is what the kernel itself does for a large request.
//! * `flush` is `fdatasync`: the engine's durability barrier needs the data and the metadata
//!   required to read it back, not timestamps.
//! * An image may be mounted by one moafs process at a time. An exclusive, non-blocking
//!   `flock` is taken at open and held for the life of the device; a second mount fails with
//!   [`DeviceError::Locked`] instead of two engines silently corrupting each other. `flock`
//!   locks belong to the open file description, so even a second open in the same process is
//!   refused.
//! * Without `direct`, the image is marked `POSIX_FADV_RANDOM`: the page cache then reads
//!   what a request asks in as few device requests as it can, and never ahead of it (the
//!   engine owns readahead), and a read of more than a page first asks the kernel for the
//!   whole range (`POSIX_FADV_WILLNEED`): without that, a device with its readahead off was
//!   read one page per request.
//! * With `direct: true` the file is opened `O_DIRECT` to bypass the page cache (measurements
//!   of the engine's own cache are then honest). O_DIRECT wants buffers, offsets and lengths
//!   aligned to the logical block size: a block device's own (from sysfs; 512 on a loop
//!   device, so that a 512-byte byte-log batch is one 512-byte request), else [`DIRECT_ALIGN`]
//!   (4096, safe for every common device); we copy through an aligned bounce buffer, so
//!   callers never have to care. The
//!   bounce buffer is an over-allocated `Vec<u8>` sliced at an aligned address: no `unsafe`.
//!   Requests that are not aligned are widened (read-modify-write for writes, which is not
//!   atomic against a concurrent overlapping write); the engine only issues block-aligned
//!   I/O, so that path exists for correctness, not speed. In direct mode the usable size is
//!   rounded down to a multiple of [`DIRECT_ALIGN`], so widened requests never run past the end
//!   of the file.

use super::{
    check_range, iov_len, BlockDevice, DevResult, DeviceCounters, DeviceError, DeviceStats,
};
use nix::errno::Errno;
use nix::fcntl::{fallocate, FallocateFlags, Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Alignment of buffers, offsets and lengths for `O_DIRECT` I/O, in bytes.
pub const DIRECT_ALIGN: usize = 4096;

/// Most buffers one `pwritev` call accepts (Linux `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// How to open a [`FileDevice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDeviceOptions {
    /// Open read-only; writes and discards fail.
    pub read_only: bool,
    /// Open with `O_DIRECT` (bypass the page cache).
    pub direct: bool,
    /// Take an exclusive `flock` for the life of the device.
    pub lock: bool,
}

impl Default for FileDeviceOptions {
    fn default() -> Self {
        FileDeviceOptions {
            read_only: false,
            direct: false,
            lock: true,
        }
    }
}

/// The open file, locked or not. Both dereference to the same `File`.
enum Handle {
    Plain(File),
    Locked(Flock<File>),
}

/// A device backed by an image file or a block device.
pub struct FileDevice {
    handle: Handle,
    size_bytes: u64,
    opts: FileDeviceOptions,
    /// Alignment of `O_DIRECT` requests: a block device's logical block size, else 4096.
    align: usize,
    is_block_device: bool,
    stats: DeviceStats,
}

/// A block device's logical block size, from sysfs (`/sys/dev/block/MAJ:MIN`).
fn logical_block_size(meta: &std::fs::Metadata) -> Option<usize> {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let path = format!("/sys/dev/block/{major}:{minor}/queue/logical_block_size");
    let n: usize = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    (n.is_power_of_two() && (512..=DIRECT_ALIGN).contains(&n)).then_some(n)
}

// BLKDISCARD (`_IO(0x12, 119)` in linux/fs.h): discard bytes `[range[0], range[0] + range[1])`.
nix::ioctl_write_ptr_bad!(blk_discard, nix::request_code_none!(0x12, 119), [u64; 2]);
// BLKROGET (`_IO(0x12, 94)`): whether the block device is read-only (`blockdev --getro`).
nix::ioctl_read_bad!(blk_ro_get, nix::request_code_none!(0x12, 94), libc::c_int);

/// Whether `path` cannot be written: a block device set read-only (`blockdev --setro`, a
/// write-protected disk), or a file that cannot be opened for writing (a read-only file
/// system, no permission).
pub fn write_protected(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false; // not there: the open that follows says so
    };
    if file
        .metadata()
        .is_ok_and(|m| m.file_type().is_block_device())
    {
        let mut ro: libc::c_int = 0;
        // SAFETY: the descriptor is open for the call; BLKROGET writes one int into `ro`.
        return unsafe { blk_ro_get(file.as_raw_fd(), &mut ro) }.is_ok() && ro != 0;
    }
    matches!(
        OpenOptions::new().write(true).open(path),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM))
    )
}

fn io_err(offset: u64, len: u64, source: io::Error) -> DeviceError {
    DeviceError::Io {
        offset,
        len,
        source,
    }
}

fn open_err(path: &Path, source: io::Error) -> DeviceError {
    DeviceError::Open {
        path: path.display().to_string(),
        source,
    }
}

/// A zeroed buffer of `len` bytes whose start is aligned to `align` bytes.
struct Bounce {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Bounce {
    fn new(len: usize, align: usize) -> Self {
        let storage = vec![0u8; len + align];
        let addr = storage.as_ptr() as usize;
        let start = (align - addr % align) % align;
        Bounce {
            storage,
            start,
            len,
        }
    }
    fn buf(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

impl FileDevice {
    /// Opens `path` (a regular file or a block device).
    pub fn open(path: &Path, opts: FileDeviceOptions) -> DevResult<FileDevice> {
        let mut oo = OpenOptions::new();
        oo.read(true).write(!opts.read_only);
        if opts.direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let file = oo.open(path).map_err(|e| {
            if opts.direct && e.raw_os_error() == Some(libc::EINVAL) {
                let msg = "O_DIRECT is not supported by the file system holding this file \
                           (e.g. tmpfs); open it without direct I/O";
                open_err(path, io::Error::new(io::ErrorKind::InvalidInput, msg))
            } else {
                open_err(path, e)
            }
        })?;
        let meta = file.metadata().map_err(|e| open_err(path, e))?;
        let is_block_device = meta.file_type().is_block_device();
        let mut size_bytes = if is_block_device {
            (&file)
                .seek(SeekFrom::End(0))
                .map_err(|e| open_err(path, e))?
        } else {
            meta.len()
        };
        let align = if is_block_device {
            logical_block_size(&meta).unwrap_or(DIRECT_ALIGN)
        } else {
            DIRECT_ALIGN
        };
        if opts.direct {
            size_bytes -= size_bytes % DIRECT_ALIGN as u64;
        } else {
            // The engine reads ahead itself (`fs/readahead.rs`): without this, a buffered
            // read of a device whose readahead is off goes to it one page at a time.
            use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
            if let Err(e) = posix_fadvise(
                file.as_raw_fd(),
                0,
                0,
                PosixFadviseAdvice::POSIX_FADV_RANDOM,
            ) {
                log::info!("posix_fadvise(RANDOM) on {}: {e}", path.display());
            }
        }
        let handle = if opts.lock {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => Handle::Locked(locked),
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(DeviceError::Locked {
                        path: path.display().to_string(),
                    })
                }
                Err((_, errno)) => return Err(open_err(path, errno.into())),
            }
        } else {
            Handle::Plain(file)
        };
        Ok(FileDevice {
            handle,
            size_bytes,
            opts,
            align,
            is_block_device,
            stats: DeviceStats::default(),
        })
    }

    /// Whether `path` can be opened with `O_DIRECT` (a block device, or a file on a file
    /// system that supports it: not tmpfs before Linux 6.6).
    pub fn supports_direct(path: &Path) -> bool {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .is_ok()
    }

    /// Whether O_DIRECT should be the default for `path`: it can be used, and the file is not
    /// in tmpfs (whose page cache *is* the storage: no second cache to avoid, and direct I/O
    /// there is the same copy by a longer path).
    pub fn direct_by_default(path: &Path) -> bool {
        use nix::sys::statfs::{statfs, TMPFS_MAGIC};
        let tmpfs = std::fs::metadata(path).is_ok_and(|m| m.is_file())
            && statfs(path).is_ok_and(|s| s.filesystem_type() == TMPFS_MAGIC);
        !tmpfs && Self::supports_direct(path)
    }

    /// Creates the regular file `path` or extends it to at least `size_bytes` bytes. Never
    /// shrinks, never truncates, and leaves block devices alone.
    pub fn create(path: &Path, size_bytes: u64) -> DevResult<()> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| open_err(path, e))?;
        let meta = file.metadata().map_err(|e| open_err(path, e))?;
        if meta.is_file() && meta.len() < size_bytes {
            file.set_len(size_bytes).map_err(|e| open_err(path, e))?;
        }
        Ok(())
    }

    /// The options the device was opened with.
    pub fn options(&self) -> FileDeviceOptions {
        self.opts
    }

    /// Whether the device is a block device (rather than an image file).
    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }

    fn file(&self) -> &File {
        match &self.handle {
            Handle::Plain(f) => f,
            Handle::Locked(f) => f,
        }
    }

    fn check_writable(&self, offset: u64, len: u64) -> DevResult<()> {
        if self.opts.read_only {
            let e = io::Error::new(io::ErrorKind::PermissionDenied, "device opened read-only");
            return Err(io_err(offset, len, e));
        }
        Ok(())
    }

    /// Reads the aligned range covering `[offset, offset+len)` into a bounce buffer; returns
    /// the buffer and the position of `offset` inside it.
    fn direct_read_covering(&self, offset: u64, len: usize) -> io::Result<(Bounce, usize)> {
        let align = self.align as u64;
        let start = offset - offset % align;
        let end = (offset + len as u64).div_ceil(align) * align;
        let mut bounce = Bounce::new((end - start) as usize, self.align);
        self.file().read_exact_at(bounce.buf(), start)?;
        Ok((bounce, (offset - start) as usize))
    }

    /// Writes `data` at `offset` through an aligned bounce buffer (one `pwrite` when aligned).
    fn direct_write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let aligned =
            offset.is_multiple_of(self.align as u64) && data.len().is_multiple_of(self.align);
        let (mut bounce, pos) = if aligned {
            (Bounce::new(data.len(), self.align), 0)
        } else {
            self.direct_read_covering(offset, data.len())?
        };
        bounce.buf()[pos..pos + data.len()].copy_from_slice(data);
        self.file().write_all_at(bounce.buf(), offset - pos as u64)
    }

    /// One `pwritev` of `bufs` at `offset`, looping only on short writes.
    fn pwritev_all(&self, mut offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        let mut rest: &mut [IoSlice<'_>] = &mut slices;
        IoSlice::advance_slices(&mut rest, 0); // drop leading empty buffers
        while !rest.is_empty() {
            let n_iov = rest.len().min(IOV_MAX);
            let off = i64::try_from(offset)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
            match nix::sys::uio::pwritev(self.file(), &rest[..n_iov], off) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    offset += n as u64;
                    IoSlice::advance_slices(&mut rest, n);
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let len = buf.len() as u64;
        check_range(offset, len, self.size_bytes)?;
        let align = self.align as u64;
        if self.opts.direct
            && (!offset.is_multiple_of(align)
                || !len.is_multiple_of(align)
                || !(buf.as_ptr() as u64).is_multiple_of(align))
        {
            let (mut bounce, pos) = self
                .direct_read_covering(offset, buf.len())
                .map_err(|e| io_err(offset, len, e))?;
            buf.copy_from_slice(&bounce.buf()[pos..pos + buf.len()]);
        } else {
            if !self.opts.direct && len > 4096 {
                // One request for the whole range even when the device's readahead is off
                // (the page cache would read a random-advised file a page at a time).
                use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
                let (off, n) = (offset as i64, len as i64);
                let will = PosixFadviseAdvice::POSIX_FADV_WILLNEED;
                let _ = posix_fadvise(self.file().as_raw_fd(), off, n, will);
            }
            // (aligned in every way: O_DIRECT reads straight into the caller's buffer)
            self.file()
                .read_exact_at(buf, offset)
                .map_err(|e| io_err(offset, len, e))?;
        }
        self.stats.count_read(len);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        let len = buf.len() as u64;
        check_range(offset, len, self.size_bytes)?;
        self.check_writable(offset, len)?;
        let res = if self.opts.direct {
            self.direct_write(offset, buf)
        } else {
            self.file().write_all_at(buf, offset)
        };
        res.map_err(|e| io_err(offset, len, e))?;
        self.stats.count_write(len);
        Ok(())
    }

    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        let len = iov_len(bufs);
        check_range(offset, len, self.size_bytes)?;
        self.check_writable(offset, len)?;
        let res = if self.opts.direct {
            // O_DIRECT wants every iovec aligned: gather into one bounce buffer, one pwrite.
            self.direct_write(offset, &bufs.concat())
        } else {
            self.pwritev_all(offset, bufs)
        };
        res.map_err(|e| io_err(offset, len, e))?;
        self.stats.count_write(len);
        Ok(())
    }

    fn flush(&self) -> DevResult<()> {
        self.file().sync_data().map_err(|e| io_err(0, 0, e))?;
        self.stats.count_flush();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        check_range(offset, len, self.size_bytes)?;
        self.check_writable(offset, len)?;
        if self.is_block_device && len > 0 {
            let range = [offset, len];
            // SAFETY: the descriptor is this device's, open for as long as `self`; BLKDISCARD
            // reads the two u64s of `range` (offset and length in bytes) during the call only.
            match unsafe { blk_discard(self.file().as_raw_fd(), &range) } {
                // a device without discard (or one that refuses this alignment) forgets nothing
                Ok(_) | Err(Errno::EOPNOTSUPP) | Err(Errno::EINVAL) => {}
                Err(e) => return Err(io_err(offset, len, e.into())),
            }
        } else if len > 0 {
            let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
            // check_range bounds both by the file size, which fits in off_t.
            match fallocate(self.file().as_raw_fd(), flags, offset as i64, len as i64) {
                Ok(()) | Err(Errno::EOPNOTSUPP) => {}
                Err(e) => return Err(io_err(offset, len, e.into())),
            }
        }
        self.stats.count_discard();
        Ok(())
    }

    fn counters(&self) -> DeviceCounters {
        self.stats.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(size: u64) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("img");
        FileDevice::create(&path, size).expect("create");
        (dir, path)
    }

    #[test]
    fn round_trip_and_create_extends() {
        let (_dir, path) = image(64 * 1024);
        FileDevice::create(&path, 4096).expect("create never shrinks");
        let dev = FileDevice::open(&path, FileDeviceOptions::default()).expect("open");
        assert_eq!(dev.size(), 64 * 1024);
        dev.write_at(4096, b"hello moafs").expect("write");
        let mut buf = [0u8; 11];
        dev.read_at(4096, &mut buf).expect("read");
        assert_eq!(&buf, b"hello moafs");
        let c = dev.counters();
        assert_eq!(
            (c.reads, c.read_bytes, c.writes, c.write_bytes),
            (1, 11, 1, 11)
        );
    }

    #[test]
    fn writev_is_one_counted_write() {
        let (_dir, path) = image(64 * 1024);
        let dev = FileDevice::open(&path, FileDeviceOptions::default()).expect("open");
        let (a, b, c) = (vec![1u8; 4096], vec![2u8; 100], vec![3u8; 4096]);
        dev.writev_at(8192, &[&a, &[], &b, &c]).expect("writev");
        let mut buf = vec![0u8; 8292];
        dev.read_at(8192, &mut buf).expect("read");
        assert_eq!(buf, [a, b, c].concat());
        let counters = dev.counters();
        assert_eq!((counters.writes, counters.write_bytes), (1, 8292));
        // More buffers than one pwritev accepts (IOV_MAX) is still one request.
        let bytes: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let many: Vec<&[u8]> = bytes.chunks(1).collect();
        dev.writev_at(0, &many).expect("writev of 3000 buffers");
        let mut back = vec![0u8; 3000];
        dev.read_at(0, &mut back).expect("read");
        assert_eq!((back, dev.counters().writes), (bytes, 2));
    }

    #[test]
    fn out_of_range_is_an_error() {
        let (_dir, path) = image(8192);
        let dev = FileDevice::open(&path, FileDeviceOptions::default()).expect("open");
        let mut buf = [0u8; 16];
        let err = dev.read_at(8190, &mut buf).expect_err("past end");
        assert!(matches!(err, DeviceError::OutOfRange { .. }));
        let err = dev.write_at(u64::MAX, &buf).expect_err("overflow");
        assert!(matches!(err, DeviceError::OutOfRange { .. }));
        assert!(dev.discard(4096, 8192).is_err());
        assert_eq!(dev.counters(), DeviceCounters::default());
        drop(dev);
        let read_only = FileDeviceOptions {
            read_only: true,
            ..Default::default()
        };
        let dev = FileDevice::open(&path, read_only).expect("open read-only");
        assert!(matches!(dev.write_at(0, &[1]), Err(DeviceError::Io { .. })));
    }

    #[test]
    fn second_locked_open_is_refused() {
        let (_dir, path) = image(8192);
        let first = FileDevice::open(&path, FileDeviceOptions::default()).expect("open");
        let err = FileDevice::open(&path, FileDeviceOptions::default()).err();
        assert!(matches!(err, Some(DeviceError::Locked { .. })), "{err:?}");
        drop(first);
        FileDevice::open(&path, FileDeviceOptions::default()).expect("lock released on drop");
    }

    #[test]
    fn flush_and_discard_are_counted() {
        let (_dir, path) = image(64 * 1024);
        let dev = FileDevice::open(&path, FileDeviceOptions::default()).expect("open");
        dev.write_at(0, &[7u8; 8192]).expect("write");
        dev.flush().expect("flush");
        dev.discard(0, 4096).expect("discard");
        let mut buf = [1u8; 4096];
        dev.read_at(0, &mut buf).expect("read");
        assert!(buf.iter().all(|&b| b == 0), "punched hole reads as zeros");
        let c = dev.counters();
        assert_eq!((c.flushes, c.discards), (1, 1));
    }

    #[test]
    fn direct_io_round_trip_including_unaligned() {
        let (_dir, path) = image(64 * 1024);
        let opts = FileDeviceOptions {
            direct: true,
            ..Default::default()
        };
        let dev = match FileDevice::open(&path, opts) {
            Ok(dev) => dev,
            Err(DeviceError::Open { source, .. })
                if source.kind() == io::ErrorKind::InvalidInput =>
            {
                return; // file system without O_DIRECT (tmpfs): nothing to test here
            }
            Err(e) => panic!("open: {e}"),
        };
        let block = vec![9u8; 4096];
        dev.writev_at(4096, &[&block, &block])
            .expect("aligned writev");
        dev.write_at(4100, b"odd").expect("unaligned write");
        let mut buf = vec![0u8; 8192];
        dev.read_at(4096, &mut buf).expect("read");
        assert_eq!(&buf[..4], &[9u8; 4]);
        assert_eq!(&buf[4..7], b"odd");
        assert!(buf[7..].iter().all(|&b| b == 9));
        let mut small = [0u8; 3];
        dev.read_at(4100, &mut small).expect("unaligned read");
        assert_eq!(&small, b"odd");
    }
}
