//! Recording device: the write log of a real mount (`-o record=PATH`), after dm-log-writes.
//!
//! Every crash test of the engine used to run in-process, on a [`FaultDevice`](super::FaultDevice)
//! fed by the test itself. The kernel path (FUSE requests, the page cache's write-back, the
//! adapter's threads) issues other request sequences than any test writes by hand. This device
//! sits under a real mount and appends, in issue order, every write (offset and bytes) and every
//! flush to a log file; `moafs crashcheck` then rebuilds, offline, every image a power cut could
//! have left: each flush point, and seeded subsets of the writes between two flushes with one
//! of them torn at a 512-byte sector, exactly as `FaultDevice::crash_image` with
//! `CutMode::Random` does.
//!
//! Why the log is self-contained: it opens with the image as it was at mount time (its non-zero
//! 4 KiB blocks), so the checker needs neither the image nor the mount's options.
//!
//! Why the order is exact: a write is appended under the log's lock *together with* the write
//! to the wrapped device, and a flush is appended after the wrapped device's flush returned,
//! under the same lock. A write that returned before a flush was issued is therefore before it
//! in the log; a write concurrent with a flush may land on either side, which a real disk may
//! also do (its cache may write it before the barrier).
//!
//! Fsync promises. The log also carries what each successful `fsync` of a regular file promised
//! (docs/FORMAT.md, "Write log"): the engine calls [`BlockDevice::note`] with
//! [`Note::FsyncStart`] under its lock before the fsync, reads the file after the fsync
//! returned and notes [`Note::Fsynced`] (size and crc32c of the contents); every change of an
//! inode but its times — contents, size, names, links, mode, owner, extended attributes, a
//! directory's entries — notes [`Note::Mutated`] under the engine lock in the same critical
//! section as the change (sync promises cover all of these). The device logs an `Fsynced` only
//! when no `Mutated` of that inode came between the start and the end: then the contents read
//! are the contents at the fsync's start, which is what it made durable. A promise is in force
//! from its record until the inode's next `Mutated` record; the checker demands it of every
//! crash state whose possible crash moments fall in that span. Concurrent fsyncs of one inode
//! are told apart by their thread (an fsync starts and ends on one).
//!
//! Sync promises. A sync (or directory fsync) notes [`Note::SyncStart`] under the engine lock
//! before it starts and [`Note::Sync`] when it returned; a `Mutated` is logged at the first
//! change of each inode after every such marker (and after each promise of it), so the log
//! tells which files did not change between a sync's start and its end. Those files hold what
//! they held at the sync's start in the image of the last flush before its `Sync` record,
//! which the checker reads for them.
//!
//! Discards are passed on and logged, but a crash state does not apply them: as on the fault
//! device, a crash image does not depend on hints (the log names them so that the image after
//! the mount can be compared with the log's replay).
//!
//! The NVM tier (`-o record=LOG,nvm=PATH`). The byte log's small batches go to the tier, whose
//! *persist* is its barrier as a flush is the device's; an fsync served by the tier returns
//! after the persist, without a device flush. So the tier is recorded into the same log
//! ([`RecordDevice::record_tier`] wraps it in a [`RecordNvm`]), after the device's base and
//! before the mount's first request: its size (a `Tier` record) and its non-zero 4 KiB
//! blocks (`TierBase`), then every store (`TierStore`, offset and bytes) and persist
//! (`TierPersist`) under the same lock as the device's requests, so the log holds one order
//! of both. The checker then cuts the two apart as a power cut may: a tier persisted while
//! the device's writes since its last flush are lost, a device flushed while the tier's
//! stores since its last persist are lost or torn at 8-byte words (`nvm.rs`'s failure model).
//! Version 2 of the log added these records; a version-1 log (no tier) still reads.

use super::{BlockDevice, DevResult, DeviceCounters, DeviceError, Nvm, NvmCounters};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

/// First bytes of a write log.
pub const LOG_MAGIC: [u8; 8] = *b"MOAFSWLG";
/// The write log's format version (docs/FORMAT.md, "Write log"): 2 added the tier's records.
pub const LOG_VERSION: u32 = 2;
/// The oldest version this moafs reads (1: no tier records).
pub const LOG_VERSION_MIN: u32 = 1;
/// Bytes of the log header.
pub const LOG_HEADER_BYTES: usize = 32;
/// Granule of the base image: only non-zero blocks of this size are logged.
pub const BASE_BLOCK_BYTES: u32 = 4096;
/// Bytes of a record before its payload (kind, length, index).
const RECORD_HEAD_BYTES: usize = 16;
/// Largest payload a reader accepts beyond the device size (the offset of a write).
const PAYLOAD_SLACK_BYTES: u64 = 8;

/// What the engine tells a recording device (a no-op for every other device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// An fsync of `ino` starts (not logged: opens the window [`Note::Fsynced`] closes).
    FsyncStart { ino: u64 },
    /// The fsync of `ino` returned; the file then held `size` bytes whose crc32c is `crc`.
    Fsynced { ino: u64, size: u64, crc: u32 },
    /// The contents or size of `ino` change, or a name of it goes (unlink, rename over it).
    Mutated { ino: u64 },
    /// A sync (or directory fsync) starts (under the engine lock, before it looks at anything).
    SyncStart,
    /// A sync (or directory fsync) returned.
    Sync,
}

/// One record of a write log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    /// A block of the image at mount time (only non-zero ones are logged).
    Base { offset: u64, data: Vec<u8> },
    /// A write request (a vectored write is one), in issue order.
    Write { offset: u64, data: Vec<u8> },
    /// The device's flush returned: every write before it is durable.
    Flush,
    /// An fsync of a regular file returned and promised these contents.
    Fsynced { ino: u64, size: u64, crc: u32 },
    /// The file's contents, size or names changed: its last promise is void. Logged at the
    /// first change of the inode after each sync start, sync and promise of it.
    Mutated { ino: u64 },
    /// A sync (or directory fsync) returned: every file not changed since its start holds
    /// what it held then.
    Sync,
    /// A sync (or directory fsync) started.
    SyncStart,
    /// The device was closed (the mount ended); nothing follows.
    End,
    /// A discard of `len` bytes at `offset` (the image may read zeros there since; a crash
    /// state never depends on it, so the checker does not apply it).
    Discard { offset: u64, len: u64 },
    /// The mount has an NVM tier of `size` bytes (once, before the tier's base and the
    /// mount's first request; version 2).
    Tier { size: u64 },
    /// A block of the tier at mount time (only non-zero 4 KiB blocks are logged).
    TierBase { offset: u64, data: Vec<u8> },
    /// A store to the tier, in issue order among the device's requests.
    TierStore { offset: u64, data: Vec<u8> },
    /// The tier's persist returned: every store before it is persistent.
    TierPersist,
}

impl LogRecord {
    fn kind(&self) -> u32 {
        match self {
            LogRecord::Base { .. } => 1,
            LogRecord::Write { .. } => 2,
            LogRecord::Flush => 3,
            LogRecord::Fsynced { .. } => 4,
            LogRecord::Mutated { .. } => 5,
            LogRecord::Sync => 6,
            LogRecord::End => 7,
            LogRecord::SyncStart => 8,
            LogRecord::Discard { .. } => 9,
            LogRecord::Tier { .. } => 10,
            LogRecord::TierBase { .. } => 11,
            LogRecord::TierStore { .. } => 12,
            LogRecord::TierPersist => 13,
        }
    }

    fn payload(&self) -> Vec<u8> {
        match self {
            LogRecord::Base { offset, data }
            | LogRecord::Write { offset, data }
            | LogRecord::TierBase { offset, data }
            | LogRecord::TierStore { offset, data } => {
                let mut p = Vec::with_capacity(8 + data.len());
                p.extend_from_slice(&offset.to_le_bytes());
                p.extend_from_slice(data);
                p
            }
            LogRecord::Fsynced { ino, size, crc } => {
                let mut p = Vec::with_capacity(20);
                p.extend_from_slice(&ino.to_le_bytes());
                p.extend_from_slice(&size.to_le_bytes());
                p.extend_from_slice(&crc.to_le_bytes());
                p
            }
            LogRecord::Mutated { ino } => ino.to_le_bytes().to_vec(),
            LogRecord::Tier { size } => size.to_le_bytes().to_vec(),
            LogRecord::Discard { offset, len } => {
                let mut p = offset.to_le_bytes().to_vec();
                p.extend_from_slice(&len.to_le_bytes());
                p
            }
            LogRecord::Flush
            | LogRecord::Sync
            | LogRecord::End
            | LogRecord::SyncStart
            | LogRecord::TierPersist => Vec::new(),
        }
    }

    /// The record as stored: kind, payload length, index, payload, crc32c of all before it.
    /// `index` (the record's number in the log) is inside the crc, so a record dropped,
    /// repeated or moved is caught.
    pub fn encode(&self, index: u64) -> Vec<u8> {
        let payload = self.payload();
        let mut out = Vec::with_capacity(RECORD_HEAD_BYTES + payload.len() + 4);
        out.extend_from_slice(&self.kind().to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&index.to_le_bytes());
        out.extend_from_slice(&payload);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// Why a write log cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("write log {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("write log: corrupt {what} at byte {offset} (record {record}): {reason}")]
    Corrupt {
        what: &'static str,
        offset: u64,
        record: u64,
        reason: String,
    },
    #[error(
        "write log: format version {found}, this moafs reads versions {LOG_VERSION_MIN} to {LOG_VERSION}"
    )]
    Version { found: u32 },
}

/// A decoded write log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteLog {
    /// Size of the recorded device, bytes.
    pub device_bytes: u64,
    /// The records after the header, in order (the closing `End` included when present).
    pub records: Vec<LogRecord>,
}

/// The log header: magic, version, reserved, device size, base block size, crc32c.
pub fn encode_header(device_bytes: u64) -> [u8; LOG_HEADER_BYTES] {
    let mut h = [0u8; LOG_HEADER_BYTES];
    h[0..8].copy_from_slice(&LOG_MAGIC);
    h[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&device_bytes.to_le_bytes());
    h[24..28].copy_from_slice(&BASE_BLOCK_BYTES.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

impl WriteLog {
    /// Size of the recorded NVM tier, bytes (its `Tier` record), if the mount had one.
    pub fn tier_bytes(&self) -> Option<u64> {
        self.records.iter().find_map(|r| match r {
            LogRecord::Tier { size } => Some(*size),
            _ => None,
        })
    }

    /// Encodes the whole log (header and records, numbered from 0).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = encode_header(self.device_bytes).to_vec();
        for (i, r) in self.records.iter().enumerate() {
            out.extend_from_slice(&r.encode(i as u64));
        }
        out
    }

    /// Reads the log at `path`.
    pub fn read_file(path: &Path) -> Result<WriteLog, LogError> {
        let io = |source| LogError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io)?;
        WriteLog::decode(&bytes)
    }

    /// Decodes a log; any damage (a short or bad header, a truncated record, a bad crc, an
    /// unknown kind, a record after `End`) is an error naming the byte and the record.
    pub fn decode(bytes: &[u8]) -> Result<WriteLog, LogError> {
        let (device_bytes, version) = decode_header(bytes)?;
        let mut records = Vec::new();
        let mut pos = LOG_HEADER_BYTES;
        let mut tier_bytes = None;
        while pos < bytes.len() {
            let index = records.len() as u64;
            if records.last() == Some(&LogRecord::End) {
                return Err(corrupt("record", pos, index, "data after the End record"));
            }
            let bounds = Bounds {
                device_bytes,
                tier_bytes,
                version,
            };
            let (r, len) = decode_record(&bytes[pos..], pos, index, &bounds)?;
            if let LogRecord::Tier { size } = r {
                tier_bytes = Some(size);
            }
            records.push(r);
            pos += len;
        }
        Ok(WriteLog {
            device_bytes,
            records,
        })
    }
}

fn corrupt(what: &'static str, offset: usize, record: u64, reason: impl Into<String>) -> LogError {
    LogError::Corrupt {
        what,
        offset: offset as u64,
        record,
        reason: reason.into(),
    }
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// The header's device size and format version.
fn decode_header(bytes: &[u8]) -> Result<(u64, u32), LogError> {
    let bad = |reason: &str| corrupt("header", 0, 0, reason);
    if bytes.len() < LOG_HEADER_BYTES {
        return Err(bad(&format!(
            "{} bytes, a header has {LOG_HEADER_BYTES}",
            bytes.len()
        )));
    }
    if bytes[0..8] != LOG_MAGIC {
        return Err(bad("no write-log magic (not a log of -o record=)"));
    }
    if crc32c::crc32c(&bytes[..28]) != le_u32(&bytes[28..]) {
        return Err(bad("header crc mismatch"));
    }
    let version = le_u32(&bytes[8..]);
    if !(LOG_VERSION_MIN..=LOG_VERSION).contains(&version) {
        return Err(LogError::Version { found: version });
    }
    let base = le_u32(&bytes[24..]);
    if base != BASE_BLOCK_BYTES {
        return Err(bad(&format!(
            "base block size {base}, expected {BASE_BLOCK_BYTES}"
        )));
    }
    Ok((le_u64(&bytes[16..]), version))
}

/// What a record is checked against: the device's size, the tier's once its `Tier` record
/// was read, the log's version.
struct Bounds {
    device_bytes: u64,
    tier_bytes: Option<u64>,
    version: u32,
}

/// An offset and bytes (`Base`, `Write`, `TierBase`, `TierStore`) within `size` bytes.
fn decode_span(p: &[u8], kind: u32, size: u64, what: &str) -> Result<(u64, Vec<u8>), String> {
    if p.len() < 8 {
        return Err(format!("kind {kind}: payload of {} bytes", p.len()));
    }
    let (offset, data) = (le_u64(p), p[8..].to_vec());
    let end = offset.checked_add(data.len() as u64);
    if end.is_none_or(|e| e > size) {
        return Err(format!(
            "write of {} bytes at {offset} beyond the {what} ({size} bytes)",
            data.len()
        ));
    }
    Ok((offset, data))
}

/// Decodes the record at the start of `b` (at byte `pos` of the log): the record and its
/// length in bytes.
fn decode_record(
    b: &[u8],
    pos: usize,
    index: u64,
    bounds: &Bounds,
) -> Result<(LogRecord, usize), LogError> {
    let device_bytes = bounds.device_bytes;
    let bad = |reason: String| corrupt("record", pos, index, reason);
    if b.len() < RECORD_HEAD_BYTES + 4 {
        return Err(bad(format!("truncated: {} bytes left", b.len())));
    }
    let (kind, len) = (le_u32(b), le_u32(&b[4..]) as u64);
    let largest = device_bytes.max(bounds.tier_bytes.unwrap_or(0));
    if len > largest.saturating_add(PAYLOAD_SLACK_BYTES) {
        return Err(bad(format!(
            "payload of {len} bytes on a {device_bytes}-byte device"
        )));
    }
    let total = RECORD_HEAD_BYTES + len as usize + 4;
    if b.len() < total {
        return Err(bad(format!("truncated: {total} bytes, {} left", b.len())));
    }
    let crc_at = total - 4;
    if crc32c::crc32c(&b[..crc_at]) != le_u32(&b[crc_at..]) {
        return Err(bad("crc mismatch".into()));
    }
    if le_u64(&b[8..]) != index {
        return Err(bad(format!("numbered {}", le_u64(&b[8..]))));
    }
    let p = &b[RECORD_HEAD_BYTES..crc_at];
    let want = |n: usize| -> Result<(), LogError> {
        if p.len() == n {
            Ok(())
        } else {
            Err(bad(format!(
                "kind {kind}: payload of {} bytes, not {n}",
                p.len()
            )))
        }
    };
    if kind >= 10 && bounds.version < 2 {
        return Err(bad(format!(
            "kind {kind} (a tier record) in a version-{} log",
            bounds.version
        )));
    }
    let tier = || {
        bounds
            .tier_bytes
            .ok_or_else(|| bad(format!("kind {kind}: a tier record before the Tier record")))
    };
    let r = match kind {
        1 | 2 => {
            let (offset, data) = decode_span(p, kind, device_bytes, "device").map_err(bad)?;
            if kind == 1 {
                LogRecord::Base { offset, data }
            } else {
                LogRecord::Write { offset, data }
            }
        }
        3 => want(0).map(|_| LogRecord::Flush)?,
        4 => {
            want(20)?;
            LogRecord::Fsynced {
                ino: le_u64(p),
                size: le_u64(&p[8..]),
                crc: le_u32(&p[16..]),
            }
        }
        5 => want(8).map(|_| LogRecord::Mutated { ino: le_u64(p) })?,
        6 => want(0).map(|_| LogRecord::Sync)?,
        7 => want(0).map(|_| LogRecord::End)?,
        8 => want(0).map(|_| LogRecord::SyncStart)?,
        9 => {
            want(16)?;
            let (offset, len) = (le_u64(p), le_u64(&p[8..]));
            if offset.checked_add(len).is_none_or(|e| e > device_bytes) {
                return Err(bad(format!(
                    "discard of {len} bytes at {offset} beyond the device ({device_bytes} bytes)"
                )));
            }
            LogRecord::Discard { offset, len }
        }
        10 => {
            want(8)?;
            if bounds.tier_bytes.is_some() {
                return Err(bad("a second Tier record".into()));
            }
            LogRecord::Tier { size: le_u64(p) }
        }
        11 | 12 => {
            let (offset, data) = decode_span(p, kind, tier()?, "tier").map_err(bad)?;
            if kind == 11 {
                LogRecord::TierBase { offset, data }
            } else {
                LogRecord::TierStore { offset, data }
            }
        }
        13 => {
            tier()?;
            want(0).map(|_| LogRecord::TierPersist)?
        }
        _ => return Err(bad(format!("unknown kind {kind}"))),
    };
    Ok((r, total))
}

struct LogState {
    out: BufWriter<File>,
    /// Records written so far (the next record's index).
    next: u64,
    /// Fsyncs between their [`Note::FsyncStart`] and [`Note::Fsynced`] with no change of
    /// their file since: inode → the threads running them (an fsync starts and ends on one
    /// thread, so the thread tells concurrent fsyncs of one file apart).
    fsyncing: HashMap<u64, Vec<ThreadId>>,
    /// Inodes whose `Mutated` is logged since the last sync start or sync, or their last
    /// promise: a `Mutated` is logged only for others.
    noted: HashSet<u64>,
    /// A request (write, flush, discard, note, tier store or persist) is logged: no base
    /// record may follow, so a tier is recorded before.
    requested: bool,
    /// A tier is recorded (one per log).
    tier: bool,
    /// The first failure to append: every later request fails (the log is incomplete).
    failed: Option<String>,
    closed: bool,
}

impl LogState {
    fn append(&mut self, r: &LogRecord) -> std::io::Result<()> {
        self.out.write_all(&r.encode(self.next))?;
        self.next += 1;
        Ok(())
    }
}

/// The log file, shared by the device and its tier: one lock orders both.
struct Log {
    path: PathBuf,
    state: Mutex<LogState>,
}

impl Log {
    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request may go on: not after a failure to append (or after `End`).
    fn usable(&self, st: &LogState, offset: u64) -> DevResult<()> {
        match &st.failed {
            Some(f) => Err(log_failed(offset, f)),
            None => Ok(()),
        }
    }

    /// Appends `r`; a failure is kept and fails every later request.
    fn append(&self, st: &mut LogState, r: &LogRecord, offset: u64) -> DevResult<()> {
        self.usable(st, offset)?;
        if let Err(e) = st.append(r) {
            let what = format!("cannot append to {}: {e}", self.path.display());
            log::error!("{what}");
            st.failed = Some(what.clone());
            return Err(log_failed(offset, &what));
        }
        Ok(())
    }

    /// Writes what is buffered to the file (at every barrier: a killed daemon leaves a
    /// usable log).
    fn reach_file(&self, st: &mut LogState) -> DevResult<()> {
        st.out
            .flush()
            .map_err(|e| log_failed(0, &format!("flush of {}: {e}", self.path.display())))
    }

    /// Appends the non-zero `BASE_BLOCK_BYTES` blocks of something of `size` bytes that
    /// `read` reads, as records `base` makes.
    fn append_base(
        &self,
        st: &mut LogState,
        size: u64,
        read: impl Fn(u64, &mut [u8]) -> DevResult<()>,
        base: impl Fn(u64, Vec<u8>) -> LogRecord,
    ) -> DevResult<()> {
        let mut chunk = vec![0u8; 1 << 20];
        let mut offset = 0;
        while offset < size {
            let n = chunk.len().min((size - offset) as usize);
            read(offset, &mut chunk[..n])?;
            for (i, block) in chunk[..n].chunks(BASE_BLOCK_BYTES as usize).enumerate() {
                if block.iter().any(|&b| b != 0) {
                    let at = offset + (i as u64) * BASE_BLOCK_BYTES as u64;
                    self.append(st, &base(at, block.to_vec()), at)?;
                }
            }
            offset += n as u64;
        }
        Ok(())
    }
}

/// A device that logs every write and flush of the device it wraps (see the module doc).
pub struct RecordDevice {
    inner: Arc<dyn BlockDevice>,
    log: Arc<Log>,
}

fn log_failed(offset: u64, what: &str) -> DeviceError {
    DeviceError::Io {
        offset,
        len: 0,
        source: std::io::Error::other(format!("write log: {what}")),
    }
}

impl RecordDevice {
    /// Creates (or truncates) the log at `path` and writes its header and the wrapped device's
    /// current non-zero blocks.
    pub fn create(inner: Arc<dyn BlockDevice>, path: &Path) -> DevResult<RecordDevice> {
        let open_err = |source| DeviceError::Open {
            path: path.display().to_string(),
            source,
        };
        let file = File::create(path).map_err(open_err)?;
        let mut st = LogState {
            out: BufWriter::with_capacity(1 << 20, file),
            next: 0,
            fsyncing: HashMap::new(),
            noted: HashSet::new(),
            requested: false,
            tier: false,
            failed: None,
            closed: false,
        };
        let size = inner.size();
        st.out.write_all(&encode_header(size)).map_err(open_err)?;
        let log = Arc::new(Log {
            path: path.to_path_buf(),
            state: Mutex::new(st),
        });
        {
            let mut st = log.lock();
            log.append_base(
                &mut st,
                size,
                |o, b| inner.read_at(o, b),
                |offset, data| LogRecord::Base { offset, data },
            )?;
            log.reach_file(&mut st)?;
        }
        Ok(RecordDevice { inner, log })
    }

    /// Records the NVM tier `nvm` into this log (module doc): its size and non-zero blocks
    /// now, then, through the [`RecordNvm`] returned (the tier to mount with), every store and
    /// persist in order with this device's requests. Only before the mount's first request,
    /// and once.
    pub fn record_tier(&self, nvm: Arc<dyn Nvm>) -> DevResult<RecordNvm> {
        let log = &self.log;
        let mut st = log.lock();
        log.usable(&st, 0)?;
        if st.requested || st.tier {
            return Err(log_failed(
                0,
                "a tier is recorded once, before the mount's first request",
            ));
        }
        st.tier = true;
        let size = nvm.size();
        log.append(&mut st, &LogRecord::Tier { size }, 0)?;
        log.append_base(
            &mut st,
            size,
            |o, b| nvm.read(o, b),
            |offset, data| LogRecord::TierBase { offset, data },
        )?;
        log.reach_file(&mut st)?;
        Ok(RecordNvm {
            inner: nvm,
            log: log.clone(),
        })
    }

    /// Writes the closing `End` record and flushes the log (also done on drop); every later
    /// write or flush (of the device or its tier) fails.
    pub fn close(&self) -> DevResult<()> {
        let mut st = self.log.lock();
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        self.log.append(&mut st, &LogRecord::End, 0)?;
        // nothing may follow the End record: later requests fail
        st.failed = Some(format!("{} is closed", self.log.path.display()));
        self.log.reach_file(&mut st)
    }
}

impl Drop for RecordDevice {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("{e}");
        }
    }
}

impl BlockDevice for RecordDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.writev_at(offset, &[buf])
    }

    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        let mut st = self.log.lock();
        self.log.usable(&st, offset)?;
        st.requested = true;
        self.inner.writev_at(offset, bufs)?;
        let r = LogRecord::Write {
            offset,
            data: bufs.concat(),
        };
        self.log.append(&mut st, &r, offset)
    }

    fn flush(&self) -> DevResult<()> {
        let mut st = self.log.lock();
        self.log.usable(&st, 0)?;
        st.requested = true;
        self.inner.flush()?;
        self.log.append(&mut st, &LogRecord::Flush, 0)?;
        self.log.reach_file(&mut st)
    }

    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        let mut st = self.log.lock();
        self.log.usable(&st, offset)?;
        st.requested = true;
        self.inner.discard(offset, len)?;
        self.log
            .append(&mut st, &LogRecord::Discard { offset, len }, offset)
    }

    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }

    fn records(&self) -> bool {
        true
    }

    fn note(&self, note: Note) {
        let mut st = self.log.lock();
        st.requested = true;
        let r = match note {
            Note::FsyncStart { ino } => {
                st.fsyncing
                    .entry(ino)
                    .or_default()
                    .push(std::thread::current().id());
                return;
            }
            Note::Mutated { ino } => {
                st.fsyncing.remove(&ino);
                if !st.noted.insert(ino) {
                    return;
                }
                LogRecord::Mutated { ino }
            }
            Note::Fsynced { ino, size, crc } => {
                let me = std::thread::current().id();
                let Some(threads) = st.fsyncing.get_mut(&ino) else {
                    return;
                };
                let Some(at) = threads.iter().position(|t| *t == me) else {
                    return;
                };
                threads.swap_remove(at);
                if threads.is_empty() {
                    st.fsyncing.remove(&ino);
                }
                st.noted.remove(&ino);
                LogRecord::Fsynced { ino, size, crc }
            }
            Note::SyncStart => {
                st.noted.clear();
                LogRecord::SyncStart
            }
            Note::Sync => {
                st.noted.clear();
                LogRecord::Sync
            }
        };
        // a failure is kept and fails the next request
        let _ = self.log.append(&mut st, &r, 0);
    }
}

/// The NVM tier of a recorded mount ([`RecordDevice::record_tier`]): every store and
/// persist goes to the tier it wraps and, under the log's lock, into the device's log. A
/// store is logged together with the store (as a device write); a persist after the
/// wrapped persist returned (as a flush), and the log reaches its file there.
pub struct RecordNvm {
    inner: Arc<dyn Nvm>,
    log: Arc<Log>,
}

impl Nvm for RecordNvm {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read(offset, buf)
    }

    fn store(&self, offset: u64, data: &[u8]) -> DevResult<()> {
        let mut st = self.log.lock();
        self.log.usable(&st, offset)?;
        st.requested = true;
        self.inner.store(offset, data)?;
        let r = LogRecord::TierStore {
            offset,
            data: data.to_vec(),
        };
        self.log.append(&mut st, &r, offset)
    }

    fn persist(&self) -> DevResult<()> {
        let mut st = self.log.lock();
        self.log.usable(&st, 0)?;
        st.requested = true;
        self.inner.persist()?;
        self.log.append(&mut st, &LogRecord::TierPersist, 0)?;
        self.log.reach_file(&mut st)
    }

    fn counters(&self) -> NvmCounters {
        self.inner.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::super::MemDevice;
    use super::*;

    fn sample() -> WriteLog {
        WriteLog {
            device_bytes: 64 << 10,
            records: vec![
                LogRecord::Base {
                    offset: 4096,
                    data: vec![7; 4096],
                },
                LogRecord::Write {
                    offset: 512,
                    data: vec![1; 1000],
                },
                LogRecord::Flush,
                LogRecord::Fsynced {
                    ino: 12,
                    size: 1000,
                    crc: 0xdead_beef,
                },
                LogRecord::Mutated { ino: 12 },
                LogRecord::SyncStart,
                LogRecord::Discard {
                    offset: 4096,
                    len: 8192,
                },
                LogRecord::Sync,
                LogRecord::Tier { size: 3 * 4096 },
                LogRecord::TierBase {
                    offset: 4096,
                    data: vec![9; 4096],
                },
                LogRecord::TierStore {
                    offset: 100,
                    data: vec![4; 30],
                },
                LogRecord::TierPersist,
                LogRecord::End,
            ],
        }
    }

    #[test]
    fn record_log_round_trips() {
        let log = sample();
        assert_eq!(WriteLog::decode(&log.encode()).expect("decode"), log);
    }

    #[test]
    fn record_log_damage_is_a_clear_error_not_a_panic() {
        let bytes = sample().encode();
        // every truncation inside a record, and the header cut short
        for cut in 0..bytes.len() {
            let r = WriteLog::decode(&bytes[..cut]);
            if cut == LOG_HEADER_BYTES {
                // a log of no records is a log (a mount that wrote nothing yet)
                assert!(r.is_ok());
                continue;
            }
            let ends_at_record = r.is_ok();
            if ends_at_record {
                continue;
            }
            let msg = r.expect_err("cut").to_string();
            assert!(
                msg.contains("truncated") || msg.contains("header"),
                "cut at {cut}: {msg}"
            );
        }
        // every flipped byte is caught (crc, magic, or a bound)
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let msg = WriteLog::decode(&b).expect_err("flip").to_string();
            assert!(msg.starts_with("write log"), "byte {i}: {msg}");
        }
        let mut b = bytes.clone();
        b[8] = 9; // version, with a valid crc
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            WriteLog::decode(&b),
            Err(LogError::Version { found: 9 })
        ));
        let mut b = bytes.clone();
        b.extend_from_slice(&LogRecord::Flush.encode(7));
        let msg = WriteLog::decode(&b).expect_err("after end").to_string();
        assert!(msg.contains("after the End"), "{msg}");
    }

    #[test]
    fn record_log_rejects_a_dropped_record_and_a_huge_length() {
        let log = sample();
        let mut b = encode_header(log.device_bytes).to_vec();
        for (i, r) in log.records.iter().enumerate().filter(|(i, _)| *i != 2) {
            b.extend_from_slice(&r.encode(i as u64));
        }
        let msg = WriteLog::decode(&b).expect_err("gap").to_string();
        assert!(msg.contains("numbered 3"), "{msg}");
        let mut b = encode_header(log.device_bytes).to_vec();
        let mut rec = LogRecord::Flush.encode(0);
        rec[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&rec);
        let msg = WriteLog::decode(&b).expect_err("huge").to_string();
        assert!(msg.contains("payload of"), "{msg}");
    }

    #[test]
    fn record_log_refuses_tier_records_out_of_place() {
        let log = |records: Vec<LogRecord>| WriteLog {
            device_bytes: 64 << 10,
            records,
        };
        let store = LogRecord::TierStore {
            offset: 0,
            data: vec![1; 8],
        };
        let tier = LogRecord::Tier { size: 4096 };
        let msg = WriteLog::decode(&log(vec![store.clone()]).encode())
            .expect_err("a store before the tier")
            .to_string();
        assert!(msg.contains("before the Tier record"), "{msg}");
        let msg = WriteLog::decode(&log(vec![tier.clone(), tier.clone()]).encode())
            .expect_err("two tiers")
            .to_string();
        assert!(msg.contains("second Tier"), "{msg}");
        let beyond = LogRecord::TierStore {
            offset: 4090,
            data: vec![1; 8],
        };
        let msg = WriteLog::decode(&log(vec![tier.clone(), beyond]).encode())
            .expect_err("beyond the tier")
            .to_string();
        assert!(msg.contains("beyond the tier"), "{msg}");
        // a version-1 log has no tier records; without them it still reads
        let mut b = log(vec![tier, store]).encode();
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        let msg = WriteLog::decode(&b).expect_err("v1 tier").to_string();
        assert!(msg.contains("version-1 log"), "{msg}");
        let mut b = log(vec![LogRecord::Flush]).encode();
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            WriteLog::decode(&b).expect("v1").records,
            [LogRecord::Flush]
        );
    }

    #[test]
    fn record_device_logs_its_tier_in_order_with_the_device() {
        use super::super::{MemNvm, NvmModel};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let mem = Arc::new(MemDevice::new(64 << 10));
        let nvm = Arc::new(MemNvm::new(3 * 4096 + 100, NvmModel::None));
        nvm.store(2 * 4096 + 10, &[5; 3]).expect("tier base");
        let dev = RecordDevice::create(mem, &path).expect("create");
        let tier = dev.record_tier(nvm.clone()).expect("record the tier");
        assert!(dev.record_tier(nvm.clone()).is_err(), "a second tier");
        dev.write_at(0, &[1; 10]).expect("write");
        tier.store(8, &[2; 16]).expect("store");
        tier.persist().expect("persist");
        dev.flush().expect("flush");
        assert_eq!(nvm.snapshot()[8..24], [2; 16]);
        let mut tail = vec![0u8; 4096];
        tail[10..13].copy_from_slice(&[5; 3]);
        drop(dev);
        assert!(tier.store(0, &[1]).is_err(), "a store after the End record");
        let log = WriteLog::read_file(&path).expect("read");
        assert_eq!(log.tier_bytes(), Some(3 * 4096 + 100));
        assert_eq!(
            log.records,
            vec![
                LogRecord::Tier {
                    size: 3 * 4096 + 100
                },
                LogRecord::TierBase {
                    offset: 2 * 4096,
                    data: tail
                },
                LogRecord::Write {
                    offset: 0,
                    data: vec![1; 10]
                },
                LogRecord::TierStore {
                    offset: 8,
                    data: vec![2; 16]
                },
                LogRecord::TierPersist,
                LogRecord::Flush,
                LogRecord::End,
            ]
        );
        // too late: the mount's first request is logged
        let dev = RecordDevice::create(Arc::new(MemDevice::new(4096)), &path).expect("create");
        dev.flush().expect("flush");
        assert!(dev.record_tier(nvm).is_err());
    }

    fn data_of(log: &WriteLog) -> Vec<u8> {
        match &log.records[1] {
            LogRecord::Write { data, .. } => data.clone(),
            r => panic!("not a write: {r:?}"),
        }
    }

    #[test]
    fn record_device_logs_base_writes_flushes_and_promises() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let mem = Arc::new(MemDevice::new(64 << 10));
        mem.write_at(8192, &[3; 100]).expect("base");
        let dev = RecordDevice::create(mem.clone(), &path).expect("create");
        assert!(dev.records());
        dev.writev_at(0, &[&[1; 10], &[2; 10]]).expect("writev");
        dev.note(Note::FsyncStart { ino: 5 });
        dev.flush().expect("flush");
        dev.note(Note::Fsynced {
            ino: 5,
            size: 3,
            crc: 9,
        });
        // a change between the start and the end voids the promise
        dev.note(Note::FsyncStart { ino: 6 });
        dev.note(Note::Mutated { ino: 6 });
        dev.note(Note::Fsynced {
            ino: 6,
            size: 3,
            crc: 9,
        });
        // two fsyncs of one file on two threads, a change between their starts: the one that
        // started before the change promises nothing, even when it ends after the other began
        dev.note(Note::FsyncStart { ino: 7 });
        dev.note(Note::Mutated { ino: 7 });
        std::thread::scope(|s| {
            s.spawn(|| dev.note(Note::FsyncStart { ino: 7 }));
        });
        dev.note(Note::Fsynced {
            ino: 7,
            size: 1,
            crc: 1,
        });
        dev.note(Note::Mutated { ino: 5 });
        dev.note(Note::Mutated { ino: 5 }); // logged once per marker
        dev.note(Note::SyncStart);
        dev.note(Note::Mutated { ino: 5 });
        dev.note(Note::Sync);
        drop(dev);
        let log = WriteLog::read_file(&path).expect("read");
        let mut base = vec![0u8; 4096];
        base[..100].copy_from_slice(&[3; 100]);
        let mut data = vec![1u8; 10];
        data.extend_from_slice(&[2; 10]);
        assert_eq!(
            log.records,
            vec![
                LogRecord::Base {
                    offset: 8192,
                    data: base
                },
                LogRecord::Write { offset: 0, data },
                LogRecord::Flush,
                LogRecord::Fsynced {
                    ino: 5,
                    size: 3,
                    crc: 9
                },
                LogRecord::Mutated { ino: 6 },
                LogRecord::Mutated { ino: 7 },
                LogRecord::Mutated { ino: 5 },
                LogRecord::SyncStart,
                LogRecord::Mutated { ino: 5 },
                LogRecord::Sync,
                LogRecord::End,
            ]
        );
        assert_eq!(&mem.snapshot()[..20], &data_of(&log)[..]);
    }
}
