//! Devices: where blocks finally live.
//!
//! Every layer above talks to storage only through [`BlockDevice`]. The trait is byte-addressed
//! (offsets and lengths in bytes) so that the same interface serves block images, memory and
//! later byte-addressable tiers; the engine itself only issues block-aligned I/O.
//!
//! * `writev_at` is *one* I/O: a scatter-gather write of several buffers to consecutive bytes.
//!   Co-writing depends on this being counted (and modelled) as a single request.
//! * `flush` is the durability barrier: everything written before it is durable after it.
//!   Writes not yet flushed may be lost, reordered or torn by a power cut (see `fault`).
//!
//! Every device counts what it is asked to do in [`DeviceStats`].

mod fault;
mod fence;
mod file;
mod flash;
mod held;
mod mem;
mod model;
mod nvm;
mod overlay;
mod record;
mod switch;

pub use fault::random_cut;
pub use fault::{CutMode, FaultConfig, FaultDevice};
pub use fence::FenceDevice;
pub use file::{write_protected, FileDevice, FileDeviceOptions};
pub use flash::{FlashCounters, FlashDevice, FlashModel};
pub use held::HeldDevice;
pub use mem::MemDevice;
pub use model::{HddModel, ModelDevice, ModelKind, SsdModel};
pub use nvm::{nvm_cut, FaultNvm, FileNvm, MemNvm, Nvm, NvmCounters, NvmCut, NvmModel};
pub(crate) use overlay::patch_blocks;
pub use overlay::OverlayDevice;
pub use record::{
    encode_header, LogError, LogRecord, Note, RecordDevice, RecordNvm, WriteLog, BASE_BLOCK_BYTES,
    LOG_MAGIC, LOG_VERSION, LOG_VERSION_MIN,
};
pub use switch::SwitchDevice;

use std::sync::atomic::{AtomicU64, Ordering};

/// Errors a device can return.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("I/O error at byte {offset} (+{len}): {source}")]
    Io {
        offset: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("access beyond the end of the device: byte {offset} (+{len}) > size {size}")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("injected I/O error at byte {offset}")]
    Injected { offset: u64 },
    #[error("cannot open device {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("device {path} is in use by another moafs process (locked)")]
    Locked { path: String },
}

pub type DevResult<T> = Result<T, DeviceError>;

/// A snapshot of a device's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceCounters {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub discards: u64,
    /// Modelled busy time in nanoseconds (model devices only).
    pub modelled_ns: u64,
    /// Sum of seek distances in bytes (model devices only).
    pub seek_distance_bytes: u64,
}

impl DeviceCounters {
    /// What was counted since `e` (an earlier reading).
    pub fn since(&self, e: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            reads: self.reads.saturating_sub(e.reads),
            read_bytes: self.read_bytes.saturating_sub(e.read_bytes),
            writes: self.writes.saturating_sub(e.writes),
            write_bytes: self.write_bytes.saturating_sub(e.write_bytes),
            flushes: self.flushes.saturating_sub(e.flushes),
            discards: self.discards.saturating_sub(e.discards),
            modelled_ns: self.modelled_ns.saturating_sub(e.modelled_ns),
            seek_distance_bytes: self
                .seek_distance_bytes
                .saturating_sub(e.seek_distance_bytes),
        }
    }
}

/// Lock-free counters shared by all device implementations.
#[derive(Debug, Default)]
pub struct DeviceStats {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    discards: AtomicU64,
    modelled_ns: AtomicU64,
    seek_distance_bytes: AtomicU64,
}

impl DeviceStats {
    pub fn count_read(&self, bytes: u64) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn count_write(&self, bytes: u64) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn count_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }
    pub fn count_discard(&self) {
        self.discards.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_model(&self, ns: u64, seek_bytes: u64) {
        self.modelled_ns.fetch_add(ns, Ordering::Relaxed);
        self.seek_distance_bytes
            .fetch_add(seek_bytes, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> DeviceCounters {
        DeviceCounters {
            reads: self.reads.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            discards: self.discards.load(Ordering::Relaxed),
            modelled_ns: self.modelled_ns.load(Ordering::Relaxed),
            seek_distance_bytes: self.seek_distance_bytes.load(Ordering::Relaxed),
        }
    }
}

/// Storage addressed in bytes. Implementations must be usable from several threads.
pub trait BlockDevice: Send + Sync {
    /// Size of the device in bytes.
    fn size(&self) -> u64;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()>;
    /// Writes all of `buf` at `offset` (one I/O).
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()>;
    /// Writes the buffers back to back starting at `offset`, as one I/O.
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()>;
    /// Durability barrier: all earlier writes are durable when this returns.
    fn flush(&self) -> DevResult<()>;
    /// The range's contents are no longer needed (may be a no-op).
    fn discard(&self, offset: u64, len: u64) -> DevResult<()>;
    /// Counters of this device.
    fn counters(&self) -> DeviceCounters;
    /// Whether this device records what the engine [`note`](BlockDevice::note)s (the
    /// recording device of `-o record=`): the engine computes what a note carries (a file's
    /// checksum) only then.
    fn records(&self) -> bool {
        false
    }
    /// A fact for the write log (fsync promises, `record.rs`); ignored by other devices.
    fn note(&self, _note: Note) {}
}

/// Checks that `[offset, offset+len)` lies inside a device of `size` bytes.
pub fn check_range(offset: u64, len: u64, size: u64) -> DevResult<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange { offset, len, size }),
    }
}

/// Total length of a vectored write.
pub fn iov_len(bufs: &[&[u8]]) -> u64 {
    bufs.iter().map(|b| b.len() as u64).sum()
}

/// A reference or an `Arc` to a device is a device.
macro_rules! forward_block_device {
    ($($ptr:ty),*) => {$(
        impl<T: BlockDevice + ?Sized> BlockDevice for $ptr {
            fn size(&self) -> u64 {
                (**self).size()
            }
            fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
                (**self).read_at(offset, buf)
            }
            fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
                (**self).write_at(offset, buf)
            }
            fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
                (**self).writev_at(offset, bufs)
            }
            fn flush(&self) -> DevResult<()> {
                (**self).flush()
            }
            fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
                (**self).discard(offset, len)
            }
            fn counters(&self) -> DeviceCounters {
                (**self).counters()
            }
            fn records(&self) -> bool {
                (**self).records()
            }
            fn note(&self, note: Note) {
                (**self).note(note)
            }
        }
    )*};
}
forward_block_device!(&T, std::sync::Arc<T>);
