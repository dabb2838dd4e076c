//! The NVM tier (paper 003): byte-addressable persistent memory for the byte log's small
//! fsync-forced batches.
//!
//! Without real persistent memory, the tier is a file (on DAX storage or /dev/shm) mapped
//! into the daemon: stores are copies into the mapping, a *persist* (a cache-line flush and a
//! fence on real NVM) is where the modelled cost is charged. The cost model
//! ([`NvmModel::Optane`]) follows measured Intel Optane DC behaviour (Yang et al., FAST 2020,
//! `papers/README.md`): a persist costs about 90 ns plus 0.36 ns per byte, the media writes
//! 256-byte units (a smaller store costs 256 bytes), at most ~2.2 GB/s. Every result that uses
//! the tier says it is emulated this way.
//!
//! Failure model (what the crash harness's [`FaultNvm`] produces): stores since the last
//! persist may be lost, each aligned 8-byte word on its own (8-byte failure atomicity: a
//! larger record may tear); persisted stores stay.

use super::{DevResult, DeviceError};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A byte-addressable persistent tier.
pub trait Nvm: Send + Sync {
    fn size(&self) -> u64;
    fn read(&self, offset: u64, buf: &mut [u8]) -> DevResult<()>;
    /// Stores `data` at `offset`: visible to reads at once, persistent only after
    /// [`Nvm::persist`].
    fn store(&self, offset: u64, data: &[u8]) -> DevResult<()>;
    /// Every store so far becomes persistent.
    fn persist(&self) -> DevResult<()>;
    fn counters(&self) -> NvmCounters;
}

/// What a tier was asked to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NvmCounters {
    pub stores: u64,
    pub store_bytes: u64,
    /// Bytes the media wrote (stores rounded up to 256-byte units under the Optane model).
    pub media_bytes: u64,
    pub persists: u64,
    /// Time charged by the model, in nanoseconds.
    pub modelled_ns: u64,
}

/// How a persist is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NvmModel {
    /// Measured Optane DC behaviour (module comment).
    #[default]
    Optane,
    /// No cost (the mapping's memory speed).
    None,
}

impl std::str::FromStr for NvmModel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "optane" => Ok(NvmModel::Optane),
            "none" => Ok(NvmModel::None),
            _ => Err(format!("nvm_model={s}: expected optane or none")),
        }
    }
}

/// The model's bookkeeping: media bytes stored since the last persist, and the counters.
#[derive(Default)]
struct Charge {
    unpersisted_media: AtomicU64,
    stores: AtomicU64,
    store_bytes: AtomicU64,
    media_bytes: AtomicU64,
    persists: AtomicU64,
    modelled_ns: AtomicU64,
}

/// Optane's internal write unit.
const MEDIA_UNIT: u64 = 256;

impl Charge {
    fn store(&self, model: NvmModel, len: u64) {
        let media = match model {
            NvmModel::Optane => len.div_ceil(MEDIA_UNIT) * MEDIA_UNIT,
            NvmModel::None => len,
        };
        self.stores.fetch_add(1, Ordering::Relaxed);
        self.store_bytes.fetch_add(len, Ordering::Relaxed);
        self.media_bytes.fetch_add(media, Ordering::Relaxed);
        self.unpersisted_media.fetch_add(media, Ordering::Relaxed);
    }

    /// Charges a persist: waits the modelled time.
    fn persist(&self, model: NvmModel) {
        self.persists.fetch_add(1, Ordering::Relaxed);
        let bytes = self.unpersisted_media.swap(0, Ordering::Relaxed);
        if model == NvmModel::None {
            return;
        }
        // ~90 ns + 0.36 ns/byte, and never faster than ~2.2 GB/s
        let ns = (90 + bytes * 36 / 100).max(bytes * 10 / 22);
        self.modelled_ns.fetch_add(ns, Ordering::Relaxed);
        // Too short to sleep: spin, as a flush + fence would stall the thread.
        let until = Instant::now() + Duration::from_nanos(ns);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    fn counters(&self) -> NvmCounters {
        NvmCounters {
            stores: self.stores.load(Ordering::Relaxed),
            store_bytes: self.store_bytes.load(Ordering::Relaxed),
            media_bytes: self.media_bytes.load(Ordering::Relaxed),
            persists: self.persists.load(Ordering::Relaxed),
            modelled_ns: self.modelled_ns.load(Ordering::Relaxed),
        }
    }
}

fn check(size: u64, offset: u64, len: usize) -> DevResult<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            offset,
            len: len as u64,
            size,
        }),
    }
}

/// A tier in memory (tests, in-process benchmarks).
pub struct MemNvm {
    data: Mutex<Vec<u8>>,
    model: NvmModel,
    charge: Charge,
}

impl MemNvm {
    pub fn new(size: u64, model: NvmModel) -> MemNvm {
        MemNvm::from_bytes(vec![0u8; size as usize], model)
    }
    pub fn from_bytes(data: Vec<u8>, model: NvmModel) -> MemNvm {
        MemNvm {
            data: Mutex::new(data),
            model,
            charge: Charge::default(),
        }
    }
    /// A copy of the whole tier.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Nvm for MemNvm {
    fn size(&self) -> u64 {
        self.data.lock().unwrap_or_else(|e| e.into_inner()).len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        check(d.len() as u64, offset, buf.len())?;
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn store(&self, offset: u64, data: &[u8]) -> DevResult<()> {
        let mut d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        check(d.len() as u64, offset, data.len())?;
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        self.charge.store(self.model, data.len() as u64);
        Ok(())
    }
    fn persist(&self) -> DevResult<()> {
        self.charge.persist(self.model);
        Ok(())
    }
    fn counters(&self) -> NvmCounters {
        self.charge.counters()
    }
}

/// A tier file mapped into the process (`-o nvm=PATH`), locked against a second user.
pub struct FileNvm {
    map: Mutex<memmap2::MmapMut>,
    size: u64,
    model: NvmModel,
    /// Not on tmpfs (whose pages are the storage): a persist also flushes the mapping.
    msync: bool,
    charge: Charge,
    _file: nix::fcntl::Flock<std::fs::File>,
}

impl FileNvm {
    /// Maps the existing file `path` (its size is the tier's).
    pub fn open(path: &Path, model: NvmModel) -> DevResult<FileNvm> {
        let open_err = |source: std::io::Error| DeviceError::Open {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if !meta.is_file() {
            return Err(open_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the NVM tier must be a regular file (on DAX storage or /dev/shm)",
            )));
        }
        let size = meta.len();
        let msync = nix::sys::statfs::fstatfs(&file)
            .map(|s| s.filesystem_type() != nix::sys::statfs::TMPFS_MAGIC)
            .unwrap_or(true);
        let file = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        {
            Ok(f) => f,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(DeviceError::Locked {
                    path: path.display().to_string(),
                })
            }
            Err((_, e)) => return Err(open_err(e.into())),
        };
        // SAFETY: the mapping is of a regular file this process holds an exclusive flock on
        // for as long as the mapping lives (both are fields of this struct): moafs never
        // truncates it, and another moafs cannot open it. Something outside moafs truncating
        // the file would make accesses fault (SIGBUS); that is the same contract every
        // user of mmap has, and the tier documents it.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .len(size as usize)
                .map_mut(&*file)
        }
        .map_err(open_err)?;
        Ok(FileNvm {
            map: Mutex::new(map),
            size,
            model,
            msync,
            charge: Charge::default(),
            _file: file,
        })
    }
}

impl Nvm for FileNvm {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        check(self.size, offset, buf.len())?;
        let m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        buf.copy_from_slice(&m[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn store(&self, offset: u64, data: &[u8]) -> DevResult<()> {
        check(self.size, offset, data.len())?;
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        m[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        self.charge.store(self.model, data.len() as u64);
        Ok(())
    }
    fn persist(&self) -> DevResult<()> {
        // On /dev/shm the mapping's pages are the storage; elsewhere (a DAX file system,
        // or any file) the stores reach the media when flushed, which msync does.
        if self.msync {
            let m = self.map.lock().unwrap_or_else(|e| e.into_inner());
            m.flush().map_err(|source| DeviceError::Io {
                offset: 0,
                len: self.size,
                source,
            })?;
        }
        self.charge.persist(self.model);
        Ok(())
    }
    fn counters(&self) -> NvmCounters {
        self.charge.counters()
    }
}

/// How much of what was stored since the last persist a crash keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmCut {
    /// Nothing since the last persist.
    DropAll,
    /// Everything.
    KeepAll,
    /// Each aligned 8-byte word written since the last persist kept or lost by a seeded coin.
    Words(u64),
}

/// A tier that remembers the stores since the last persist, for crash images (tests).
pub struct FaultNvm {
    inner: MemNvm,
    /// (offset, bytes) stored since the last persist, in order.
    pending: Mutex<Vec<(u64, Vec<u8>)>>,
    /// The tier as of the last persist.
    persisted: Mutex<Vec<u8>>,
}

impl FaultNvm {
    pub fn new(size: u64) -> FaultNvm {
        FaultNvm {
            inner: MemNvm::new(size, NvmModel::None),
            pending: Mutex::new(Vec::new()),
            persisted: Mutex::new(vec![0u8; size as usize]),
        }
    }

    /// Stores not yet persistent.
    pub fn unpersisted(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The tier a crash now would leave.
    pub fn crash_image(&self, cut: NvmCut) -> Vec<u8> {
        let mut img = self
            .persisted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let stores: Vec<(u64, usize)> = pending.iter().map(|(o, d)| (*o, d.len())).collect();
        for (s, from, len) in nvm_cut(&stores, cut) {
            let (off, data) = &pending[s];
            let at = *off as usize + from;
            img[at..at + len].copy_from_slice(&data[from..from + len]);
        }
        img
    }
}

/// What a crash keeps of `stores` — (offset, length) of each store since the last persist,
/// in order — under `cut`: runs of kept bytes as (store index, first byte within the store,
/// length). `Words(seed)` draws one coin (xorshift) per aligned 8-byte word of each store
/// (the tier's failure atomicity). The crash harness's [`FaultNvm`] and `moafs crashcheck`
/// (the tier of a recorded mount) cut with this one function.
pub fn nvm_cut(stores: &[(u64, usize)], cut: NvmCut) -> Vec<(usize, usize, usize)> {
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    let mut x = match cut {
        NvmCut::Words(seed) => seed | 1,
        _ => 1,
    };
    for (s, &(off, len)) in stores.iter().enumerate() {
        for k in 0..len {
            let keep = match cut {
                NvmCut::DropAll => false,
                NvmCut::KeepAll => true,
                NvmCut::Words(_) => {
                    if (off + k as u64).is_multiple_of(8) || k == 0 {
                        // a new word: a new coin (xorshift)
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                    }
                    x & 1 == 1
                }
            };
            if !keep {
                continue;
            }
            match runs.last_mut() {
                Some((rs, from, n)) if *rs == s && *from + *n == k => *n += 1,
                _ => runs.push((s, k, 1)),
            }
        }
    }
    runs
}

impl Nvm for FaultNvm {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read(offset, buf)
    }
    fn store(&self, offset: u64, data: &[u8]) -> DevResult<()> {
        self.inner.store(offset, data)?;
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((offset, data.to_vec()));
        Ok(())
    }
    fn persist(&self) -> DevResult<()> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        *self.persisted.lock().unwrap_or_else(|e| e.into_inner()) = self.inner.snapshot();
        p.clear();
        self.inner.persist()
    }
    fn counters(&self) -> NvmCounters {
        self.inner.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_images_keep_persisted_and_tear_the_rest_by_words() {
        let t = FaultNvm::new(64);
        t.store(0, &[1; 16]).unwrap();
        t.persist().unwrap();
        t.store(8, &[2; 32]).unwrap();
        assert_eq!(t.crash_image(NvmCut::DropAll)[8..16], [1; 8]);
        assert_eq!(t.crash_image(NvmCut::KeepAll)[8..40], [2; 32]);
        // some seed keeps some words and drops others, each word whole
        let mut mixed = false;
        for seed in 0..16 {
            let img = t.crash_image(NvmCut::Words(seed));
            for w in img[8..40].chunks(8) {
                assert!(w.iter().all(|b| *b == w[0]), "a word torn inside: {w:?}");
            }
            mixed |= img[8..40].contains(&2) && img[16..40].contains(&0);
        }
        assert!(mixed);
    }

    #[test]
    fn optane_model_charges_256_byte_units() {
        let t = MemNvm::new(4096, NvmModel::Optane);
        t.store(0, &[1; 10]).unwrap();
        t.store(100, &[1; 300]).unwrap();
        t.persist().unwrap();
        let c = t.counters();
        assert_eq!((c.stores, c.store_bytes, c.media_bytes), (2, 310, 768));
        assert_eq!(c.modelled_ns, 90 + 768 * 36 / 100);
    }
}
