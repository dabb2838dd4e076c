//! Crash states of a recorded mount (`moafs crashcheck`, the log of `-o record=`).
//!
//! The write log (`device/record.rs`) holds the image at mount time and every write and flush
//! the mount issued, in order. A power cut at any moment leaves the writes before the last
//! completed flush, plus any subset of the writes issued since, one of them possibly torn at a
//! 512-byte sector (a disk's cache may lose, reorder or tear what was not flushed). So the
//! states to check are, for each flush interval `i` (the writes between flush `i` and flush
//! `i + 1`; flush 0 is the mount):
//!
//! * the **flush point**: the durable image `D_i`, none of the interval's writes;
//! * seeded **random cuts**: `D_i` plus each write of the interval kept with probability ½,
//!   one kept write torn at a sector — the draw of `FaultDevice::crash_image` with
//!   `CutMode::Random`, repeated here because that device keeps a live run's writes, not a
//!   log's. Kept writes are applied in issue order. Duplicate draws are checked once.
//!
//! `D_i` is built once and advanced interval by interval; every state is a copy-on-write view
//! of it ([`CowDevice`]), so a state costs the pages its checks write, not an image.
//!
//! Each state must pass: `fsck -n` clean; `Fs::mount` (which replays the journal and the byte
//! log); every promise in force holds — an fsync's (the inode is a regular file with links, of
//! the promised size and crc32c) and a sync's (the inode's mode, owner, links, extended
//! attributes, contents, symlink target or directory entries, as the durable image after the
//! sync holds them); unmount; `fsck -n` clean again. One exception, counted apart:
//! through the kernel a file may be unlinked while a handle still holds it (FUSE sends RELEASE
//! after close(2) returned), and a commit then writes an inode without links — an orphan,
//! which the next mount frees (docs/DESIGN.md). `fsck -n` of the crash image reports it as an
//! error (an unreachable inode, and its blocks as leaked); when those are its only errors
//! and fsck after the mount is clean, the state passes and is counted as an orphan state.
//!
//! Which promises are in force. A promise lives in the log from its `Fsynced` record to the
//! inode's next `Mutated` record. A state of interval `i` whose last kept write is record `L`
//! could be the disk at any moment from `L` to the end of the interval `E` (a later flush
//! would have made the dropped writes durable); whatever the moment, the promises alive then
//! hold. So the state must satisfy every promise whose life overlaps `[L, E]`. A promise
//! logged inside the interval is covered by a flush at or before the interval's start (its
//! fsync flushed before returning, and no flush is inside an interval), so demanding it of
//! the interval's earlier states is sound too.

use crate::device::{
    check_range, iov_len, BlockDevice, DevResult, DeviceCounters, LogRecord, WriteLog,
};
use crate::fs::{FileKind, MountOptions};
use crate::Fs;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Page of a copy-on-write state.
const PAGE_BYTES: u64 = 4096;
/// Findings after which the run stops (the first ones say what is wrong).
const FINDINGS_MAX: usize = 20;

/// What to check.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// States to check at least (flush points plus random cuts), as far as the log has
    /// distinct ones.
    pub states: u64,
    /// Seed of the random cuts.
    pub seed: u64,
    /// Threads checking states.
    pub jobs: usize,
    /// Check only this flush interval (its flush point and cuts), to replay a finding.
    pub only_interval: Option<usize>,
}

/// One state that failed a check.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The state: flush index and cut.
    pub state: String,
    pub what: String,
}

/// What a run checked and found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub records: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Fsync promises in the log.
    pub promises: u64,
    /// Promises of syncs: inodes a sync found unchanged during it.
    pub sync_promises: u64,
    pub syncs: u64,
    /// Discards in the log (never applied to a crash state).
    pub discards: u64,
    /// Whether the log ends with its `End` record (the mount ended cleanly).
    pub complete: bool,
    /// States checked: flush points and distinct random cuts.
    pub states: u64,
    pub flush_points: u64,
    pub random_cuts: u64,
    /// Promise checks made (a promise checked in each state it applies to).
    pub promise_checks: u64,
    /// States whose `fsck -n` before the mount flagged only orphans (inodes unlinked while
    /// open, and their blocks), which the mount freed (fsck after it clean): not findings.
    pub orphan_states: u64,
    pub findings: Vec<Finding>,
}

/// A flush interval: the writes between two flushes.
struct Interval {
    /// Record index where the interval starts (its flush, or the first record after the base).
    start: usize,
    /// Record index where it ends (the next flush, or the end of the log).
    end: usize,
    /// Record indices of its writes, in order.
    writes: Vec<usize>,
}

/// A promise and its life in the log: records `[start, end)`.
#[derive(Debug, Clone)]
struct Promise {
    ino: u64,
    what: Promised,
    start: usize,
    end: usize,
}

/// What a promise holds.
#[derive(Debug, Clone)]
enum Promised {
    /// An fsync of a regular file: its size and contents.
    Contents { size: u64, crc: u32 },
    /// A sync the inode was not changed during: everything of it but its times.
    Inode(Arc<InodeState>),
}

/// What a sync promises of an inode: all it shows but its times and its block count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InodeState {
    kind: FileKind,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    rdev: u32,
    /// Regular files and symlinks (a directory's size depends on its layout: not promised).
    size: Option<u64>,
    /// crc32c of a regular file's contents.
    crc: Option<u32>,
    /// A symlink's target.
    target: Option<Vec<u8>>,
    /// A directory's entries (but `.` and `..`): name → inode.
    entries: Option<std::collections::BTreeMap<Vec<u8>, u64>>,
    /// Extended attributes (ACLs included): name → value.
    xattrs: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
}

impl InodeState {
    /// Reads `ino` on a mounted file system.
    fn read(fs: &Fs, ino: u64) -> Result<InodeState, String> {
        let a = fs.getattr(ino).map_err(|e| format!("inode gone: {e}"))?;
        let mut xattrs = std::collections::BTreeMap::new();
        for name in fs.listxattr(ino).map_err(|e| format!("listxattr: {e}"))? {
            let v = fs
                .getxattr(ino, &name)
                .map_err(|e| format!("getxattr {}: {e}", String::from_utf8_lossy(&name)))?;
            xattrs.insert(name, v);
        }
        let mut st = InodeState {
            kind: a.kind,
            perm: a.perm,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            rdev: a.rdev,
            size: None,
            crc: None,
            target: None,
            entries: None,
            xattrs,
        };
        match a.kind {
            FileKind::Regular => {
                st.size = Some(a.size);
                st.crc = Some(file_crc(fs, ino, a.size)?);
            }
            FileKind::Symlink => {
                st.size = Some(a.size);
                st.target = Some(fs.readlink(ino).map_err(|e| format!("readlink: {e}"))?);
            }
            FileKind::Directory => {
                let list = fs
                    .readdir(ino, 0, usize::MAX)
                    .map_err(|e| format!("readdir: {e}"))?;
                st.entries = Some(
                    list.into_iter()
                        .filter(|e| e.name != b"." && e.name != b"..")
                        .map(|e| (e.name, e.ino))
                        .collect(),
                );
            }
            _ => {}
        }
        Ok(st)
    }

    /// How `got` differs from this promise, in words (empty: it does not).
    fn differences(&self, got: &InodeState) -> Vec<String> {
        let mut d = Vec::new();
        if self.kind != got.kind {
            d.push(format!("kind {:?} (promised {:?})", got.kind, self.kind));
            return d;
        }
        if got.perm != self.perm {
            d.push(format!("mode {:#o} (promised {:#o})", got.perm, self.perm));
        }
        let mut num = |what: &str, have: u32, want: u32| {
            if have != want {
                d.push(format!("{what} {have} (promised {want})"));
            }
        };
        num("uid", got.uid, self.uid);
        num("gid", got.gid, self.gid);
        num("links", got.nlink, self.nlink);
        num("rdev", got.rdev, self.rdev);
        if got.size != self.size {
            d.push(format!("size {:?} (promised {:?})", got.size, self.size));
        } else if got.crc != self.crc {
            d.push(format!(
                "contents differ (crc32c {:#010x?}, promised {:#010x?})",
                got.crc, self.crc
            ));
        }
        if got.target != self.target {
            d.push("symlink target differs".to_string());
        }
        if let (Some(want), Some(have)) = (&self.entries, &got.entries) {
            let show = |n: &Vec<u8>| String::from_utf8_lossy(n).into_owned();
            let missing: Vec<String> = want
                .iter()
                .filter(|(n, i)| have.get(*n) != Some(i))
                .map(|(n, i)| format!("{} -> {i}", show(n)))
                .collect();
            let extra: Vec<String> = have
                .iter()
                .filter(|(n, i)| want.get(*n) != Some(i))
                .map(|(n, i)| format!("{} -> {i}", show(n)))
                .collect();
            if !missing.is_empty() || !extra.is_empty() {
                d.push(format!(
                    "entries differ (missing {missing:?}, not promised {extra:?})"
                ));
            }
        }
        if got.xattrs != self.xattrs {
            let names = |m: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>| {
                m.keys()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect::<Vec<_>>()
            };
            d.push(format!(
                "extended attributes differ ({:?}, promised {:?})",
                names(&got.xattrs),
                names(&self.xattrs)
            ));
        }
        d
    }
}

/// A state to check: (index into the interval's writes, bytes of it that land), in order.
type Cut = Vec<(usize, u64)>;

/// The log cut into intervals and promises.
struct Plan {
    base: Vec<u8>,
    intervals: Vec<Interval>,
    promises: Vec<Promise>,
    /// Inode → record indices of its `Mutated` records, in order.
    mutations: HashMap<u64, Vec<usize>>,
    /// (`SyncStart`, `Sync`) record indices of each sync.
    syncs: Vec<(usize, usize)>,
}

impl Plan {
    /// Whether `ino` has a `Mutated` record in `(from, to)`.
    fn mutated_between(&self, ino: u64, from: usize, to: usize) -> bool {
        self.mutations.get(&ino).is_some_and(|m| {
            let i = m.partition_point(|&x| x <= from);
            m.get(i).is_some_and(|&x| x < to)
        })
    }

    /// The first `Mutated` record of `ino` after `from` (`usize::MAX`: none).
    fn next_mutation(&self, ino: u64, from: usize) -> usize {
        self.mutations
            .get(&ino)
            .and_then(|m| m.get(m.partition_point(|&x| x <= from)).copied())
            .unwrap_or(usize::MAX)
    }
}

/// The promises of the sync `(start, end)` (also what a directory fsync promises: moafs
/// answers one with a sync): every inode reachable in `image` (the durable image of the last
/// flush before `end`, which holds every change made before `start`) that no `Mutated`
/// record shows changed between `start` and `end` holds, from `end` until its next change,
/// what it holds in `image` — a file its contents, every inode its mode, owner, link count
/// and extended attributes, a directory its entries, a symlink its target. An image that
/// does not mount gives none (its flush point is checked, and reported, as every state).
fn sync_promises(plan: &Plan, image: &Arc<Vec<u8>>, start: usize, end: usize) -> Vec<Promise> {
    let dev = Arc::new(CowDevice::new(image.clone()));
    let Ok(fs) = Fs::mount(dev as Arc<dyn BlockDevice>, MountOptions::default()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen = HashSet::from([crate::fs::ROOT_INO]);
    let mut todo = vec![crate::fs::ROOT_INO];
    while let Some(ino) = todo.pop() {
        let Ok(st) = InodeState::read(&fs, ino) else {
            continue;
        };
        if let Some(entries) = &st.entries {
            todo.extend(entries.values().filter(|&&i| seen.insert(i)));
        }
        if st.nlink > 0 && !plan.mutated_between(ino, start, end) {
            out.push(Promise {
                ino,
                what: Promised::Inode(Arc::new(st)),
                start: end,
                end: plan.next_mutation(ino, end),
            });
        }
    }
    let _ = fs.unmount();
    out
}

/// crc32c of the first `size` bytes of `ino`.
fn file_crc(fs: &Fs, ino: u64, size: u64) -> Result<u32, String> {
    let mut crc = 0u32;
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(1 << 20) as u32;
        let data = fs.read(ino, offset, n).map_err(|e| format!("read: {e}"))?;
        if data.is_empty() {
            return Err(format!("short read at {offset} of {size}"));
        }
        crc = crc32c::crc32c_append(crc, &data);
        offset += data.len() as u64;
    }
    Ok(crc)
}

fn plan(log: &WriteLog, report: &mut CheckReport) -> Result<Plan, String> {
    let size = usize::try_from(log.device_bytes)
        .map_err(|_| format!("device of {} bytes", log.device_bytes))?;
    // the image is held in memory: a log of a device too large for it is refused, not a crash
    let mut base = Vec::new();
    base.try_reserve_exact(size).map_err(|_| {
        format!(
            "the recorded device has {size} bytes: too large to hold in memory (crashcheck keeps \
             one image per flush point; record small images)"
        )
    })?;
    base.resize(size, 0);
    let mut intervals = vec![Interval {
        start: 0,
        end: 0,
        writes: Vec::new(),
    }];
    let mut promises: Vec<Promise> = Vec::new();
    let mut alive: HashMap<u64, usize> = HashMap::new();
    let mut mutations: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut sync_starts = std::collections::VecDeque::new();
    let mut syncs = Vec::new();
    let mut base_done = false;
    for (i, r) in log.records.iter().enumerate() {
        report.records += 1;
        let cur = intervals.len() - 1;
        match r {
            LogRecord::Base { offset, data } => {
                if base_done {
                    return Err(format!(
                        "record {i}: a base block after the mount's first request"
                    ));
                }
                let o = *offset as usize;
                base[o..o + data.len()].copy_from_slice(data);
                intervals[cur].start = i + 1;
                continue;
            }
            LogRecord::Write { .. } => {
                report.writes += 1;
                intervals[cur].writes.push(i);
            }
            LogRecord::Flush => {
                report.flushes += 1;
                intervals[cur].end = i;
                intervals.push(Interval {
                    start: i,
                    end: 0,
                    writes: Vec::new(),
                });
            }
            LogRecord::Fsynced { ino, size, crc } => {
                report.promises += 1;
                if let Some(p) = alive.remove(ino) {
                    promises[p].end = i;
                }
                alive.insert(*ino, promises.len());
                promises.push(Promise {
                    ino: *ino,
                    what: Promised::Contents {
                        size: *size,
                        crc: *crc,
                    },
                    start: i,
                    end: usize::MAX,
                });
            }
            LogRecord::Mutated { ino } => {
                if let Some(p) = alive.remove(ino) {
                    promises[p].end = i;
                }
                mutations.entry(*ino).or_default().push(i);
            }
            LogRecord::SyncStart => sync_starts.push_back(i),
            LogRecord::Discard { .. } => report.discards += 1,
            LogRecord::Sync => {
                report.syncs += 1;
                // concurrent syncs: the k-th to return is paired with the k-th to start, whose
                // start is at or before the latest start of the k that returned
                let start = sync_starts
                    .pop_front()
                    .ok_or_else(|| format!("record {i}: a sync end without its start"))?;
                syncs.push((start, i));
            }
            LogRecord::End => report.complete = true,
        }
        base_done = true;
    }
    if let Some(last) = intervals.last_mut() {
        last.end = log.records.len();
    }
    Ok(Plan {
        base,
        intervals,
        promises,
        mutations,
        syncs,
    })
}

/// `FaultDevice`'s random cut (each write kept with probability ½, one kept write torn at a
/// random sector); a write torn to nothing is a write dropped: the same state.
fn random_cut(writes: &[(u64, u64)], seed: u64) -> Cut {
    let mut kept = crate::device::random_cut(writes, seed);
    kept.retain(|&(_, n)| n > 0);
    kept
}

/// splitmix64: one seed per (run seed, interval, draw).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A writable copy-on-write view of an image: what one crash state's checks write (journal
/// replay, superblock) goes to private pages.
pub struct CowDevice {
    base: Arc<Vec<u8>>,
    pages: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl CowDevice {
    pub fn new(base: Arc<Vec<u8>>) -> CowDevice {
        CowDevice {
            base,
            pages: RwLock::new(HashMap::new()),
        }
    }

    fn write_bytes(&self, mut offset: u64, mut data: &[u8]) {
        let mut pages = self.pages.write().unwrap_or_else(|e| e.into_inner());
        while !data.is_empty() {
            let page = offset / PAGE_BYTES;
            let at = (offset % PAGE_BYTES) as usize;
            let n = data.len().min(PAGE_BYTES as usize - at);
            let p = pages.entry(page).or_insert_with(|| {
                let s = (page * PAGE_BYTES) as usize;
                let e = (s + PAGE_BYTES as usize).min(self.base.len());
                let mut b = vec![0u8; PAGE_BYTES as usize];
                b[..e - s].copy_from_slice(&self.base[s..e]);
                b.into_boxed_slice()
            });
            p[at..at + n].copy_from_slice(&data[..n]);
            offset += n as u64;
            data = &data[n..];
        }
    }
}

impl BlockDevice for CowDevice {
    fn size(&self) -> u64 {
        self.base.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        check_range(offset, buf.len() as u64, self.size())?;
        let pages = self.pages.read().unwrap_or_else(|e| e.into_inner());
        let mut pos = 0usize;
        while pos < buf.len() {
            let o = offset + pos as u64;
            let (page, at) = (o / PAGE_BYTES, (o % PAGE_BYTES) as usize);
            let n = (buf.len() - pos).min(PAGE_BYTES as usize - at);
            match pages.get(&page) {
                Some(p) => buf[pos..pos + n].copy_from_slice(&p[at..at + n]),
                None => buf[pos..pos + n].copy_from_slice(&self.base[o as usize..o as usize + n]),
            }
            pos += n;
        }
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.writev_at(offset, &[buf])
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        check_range(offset, iov_len(bufs), self.size())?;
        let mut o = offset;
        for b in bufs {
            self.write_bytes(o, b);
            o += b.len() as u64;
        }
        Ok(())
    }
    fn flush(&self) -> DevResult<()> {
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        check_range(offset, len, self.size())
    }
    fn counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
}

/// Checks one state: its findings (none: it passed), the promises checked, and whether
/// the state held orphans (inodes unlinked while open: a file handle kept them, and FUSE's
/// RELEASE comes after close returned) that `fsck -n` accepted and the mount freed.
fn check_state(dev: Arc<CowDevice>, promises: &[Promise]) -> (Vec<String>, u64, bool) {
    let mut out = Vec::new();
    let mut orphans = 0;
    match crate::fsck::fsck_with(dev.as_ref(), false, None) {
        Ok(r) if r.errors.is_empty() => orphans = r.orphans,
        Ok(r) => out.push(format!("fsck -n of the crash image: {:?}", r.errors)),
        Err(e) => out.push(format!("fsck -n of the crash image cannot run: {e}")),
    }
    let fs = match Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()) {
        Ok(fs) => fs,
        Err(e) => {
            out.push(format!("mount after the crash: {e}"));
            return (out, 0, false);
        }
    };
    for p in promises {
        if let Err(e) = check_promise(&fs, p) {
            out.push(format!(
                "{} promise of inode {} (log record {}): {e}",
                match p.what {
                    Promised::Contents { .. } => "fsync",
                    Promised::Inode(_) => "sync",
                },
                p.ino,
                p.start
            ));
        }
    }
    if let Err(e) = fs.unmount() {
        out.push(format!("unmount: {e}"));
        return (out, promises.len() as u64, false);
    }
    match crate::fsck::fsck(dev.as_ref(), false) {
        // the mount freed the orphans: none may be left
        Ok(r) if r.errors.is_empty() && r.orphans == 0 => {}
        Ok(r) if r.errors.is_empty() => out.push(format!(
            "fsck after remount: {} orphan(s) the mount did not free",
            r.orphans
        )),
        Ok(r) => out.push(format!("fsck after remount: {:?}", r.errors)),
        Err(e) => out.push(format!("fsck after remount cannot run: {e}")),
    }
    let freed = orphans > 0 && out.is_empty();
    (out, promises.len() as u64, freed)
}

fn check_promise(fs: &Fs, p: &Promise) -> Result<(), String> {
    let (size, crc) = match &p.what {
        Promised::Contents { size, crc } => (*size, *crc),
        Promised::Inode(want) => {
            let d = want.differences(&InodeState::read(fs, p.ino)?);
            return if d.is_empty() {
                Ok(())
            } else {
                Err(d.join(", "))
            };
        }
    };
    let a = fs.getattr(p.ino).map_err(|e| format!("inode gone: {e}"))?;
    if a.kind != FileKind::Regular || a.nlink == 0 {
        return Err(format!(
            "no longer a linked regular file ({:?}, {} links)",
            a.kind, a.nlink
        ));
    }
    if a.size != size {
        return Err(format!("size {} (promised {size})", a.size));
    }
    let got = file_crc(fs, p.ino, a.size)?;
    if got != crc {
        return Err(format!(
            "contents differ (crc32c {got:#010x}, promised {crc:#010x}; size {size})"
        ));
    }
    Ok(())
}

/// One state of an interval to check.
struct Job {
    name: String,
    cut: Cut,
    /// Record index from which the state may be the disk (its last kept write, or the
    /// interval's start).
    from: usize,
}

/// Checks the crash states of `log`; `progress` is called after each interval with the
/// states checked so far.
pub fn crashcheck(
    log: &WriteLog,
    opts: &CheckOptions,
    mut progress: impl FnMut(&CheckReport),
) -> Result<CheckReport, String> {
    let mut report = CheckReport::default();
    let mut plan = plan(log, &mut report)?;
    let n_int = plan.intervals.len() as u64;
    let random_total = opts.states.saturating_sub(n_int);
    let writes_total: u64 = plan.intervals.iter().map(|i| i.writes.len() as u64).sum();
    let mut image = Arc::new(std::mem::take(&mut plan.base));
    let mut promises = std::mem::take(&mut plan.promises);
    for (k, iv) in plan.intervals.iter().enumerate() {
        let writes: Vec<(u64, u64)> = iv
            .writes
            .iter()
            .map(|&r| match &log.records[r] {
                LogRecord::Write { offset, data } => (*offset, data.len() as u64),
                _ => (0, 0),
            })
            .collect();
        let mut jobs = vec![Job {
            name: format!("flush point {k} (log record {}; no write since)", iv.start),
            cut: Vec::new(),
            from: iv.start,
        }];
        if !writes.is_empty() && writes_total > 0 {
            let want = (random_total * writes.len() as u64).div_ceil(writes_total);
            let mut seen: HashSet<Cut> = HashSet::new();
            seen.insert(Vec::new());
            for draw in 0..want.saturating_mul(4) {
                if jobs.len() as u64 > want {
                    break;
                }
                let seed = mix(opts.seed ^ mix(k as u64) ^ mix(draw.wrapping_add(1) << 32));
                let cut = random_cut(&writes, seed);
                if !seen.insert(cut.clone()) {
                    continue;
                }
                let from = cut.last().map_or(iv.start, |&(w, _)| iv.writes[w]);
                jobs.push(Job {
                    name: describe(k, iv, &writes, &cut, seed),
                    cut,
                    from,
                });
            }
        }
        for &(start, end) in plan
            .syncs
            .iter()
            .filter(|s| (iv.start..iv.end).contains(&s.1))
        {
            let made = sync_promises(&plan, &image, start, end);
            report.sync_promises += made.len() as u64;
            promises.extend(made);
        }
        if opts.only_interval.is_none_or(|only| only == k) {
            run_interval(log, &promises, iv, &image, &jobs, opts, &mut report);
            progress(&report);
        }
        if opts.only_interval.is_some_and(|only| only <= k) {
            break;
        }
        if report.findings.len() >= FINDINGS_MAX {
            break;
        }
        // the next flush point: every write of this interval landed
        let img = Arc::make_mut(&mut image);
        for &r in &iv.writes {
            if let LogRecord::Write { offset, data } = &log.records[r] {
                let o = *offset as usize;
                img[o..o + data.len()].copy_from_slice(data);
            }
        }
    }
    Ok(report)
}

fn describe(k: usize, iv: &Interval, writes: &[(u64, u64)], cut: &Cut, seed: u64) -> String {
    let torn: Vec<String> = cut
        .iter()
        .filter(|&&(w, n)| n < writes[w].1)
        .map(|&(w, n)| {
            format!(
                "write {w} (log record {}, {} bytes at {}) torn to {n} bytes",
                iv.writes[w], writes[w].1, writes[w].0
            )
        })
        .collect();
    format!(
        "flush interval {k} (after log record {}): {} of its {} writes kept [{}]{}; cut seed {seed:#x}",
        iv.start,
        cut.len(),
        writes.len(),
        cut.iter().map(|(w, _)| w.to_string()).collect::<Vec<_>>().join(","),
        if torn.is_empty() {
            String::new()
        } else {
            format!(", {}", torn.join(", "))
        }
    )
}

/// Checks `jobs` (states of interval `iv` over the durable `image`) on `opts.jobs` threads.
fn run_interval(
    log: &WriteLog,
    promises: &[Promise],
    iv: &Interval,
    image: &Arc<Vec<u8>>,
    jobs: &[Job],
    opts: &CheckOptions,
    report: &mut CheckReport,
) {
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let found: Mutex<Vec<(usize, Finding)>> = Mutex::new(Vec::new());
    let checks = AtomicU64::new(0);
    let orphaned = AtomicU64::new(0);
    let worker = || loop {
        let j = next.fetch_add(1, Ordering::Relaxed) as usize;
        if j >= jobs.len() || stop.load(Ordering::Relaxed) {
            return;
        }
        let job = &jobs[j];
        let dev = Arc::new(CowDevice::new(image.clone()));
        for &(w, n) in &job.cut {
            if let LogRecord::Write { offset, data } = &log.records[iv.writes[w]] {
                dev.write_bytes(*offset, &data[..n as usize]);
            }
        }
        let due: Vec<Promise> = promises
            .iter()
            .filter(|p| p.start < iv.end && p.end > job.from)
            .cloned()
            .collect();
        let (bad, n, orphans) = check_state(dev, &due);
        checks.fetch_add(n, Ordering::Relaxed);
        orphaned.fetch_add(u64::from(orphans), Ordering::Relaxed);
        if !bad.is_empty() {
            let mut f = found.lock().unwrap_or_else(|e| e.into_inner());
            f.push((
                j,
                Finding {
                    state: job.name.clone(),
                    what: bad.join("; "),
                },
            ));
            if f.len() >= FINDINGS_MAX {
                stop.store(true, Ordering::Relaxed);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..opts.jobs.max(1) {
            s.spawn(worker);
        }
        worker();
    });
    let done = (next.load(Ordering::Relaxed) as usize).min(jobs.len()) as u64;
    report.states += done;
    report.flush_points += 1;
    report.random_cuts += done.saturating_sub(1);
    report.promise_checks += checks.load(Ordering::Relaxed);
    report.orphan_states += orphaned.load(Ordering::Relaxed);
    let mut f = found.into_inner().unwrap_or_else(|e| e.into_inner());
    f.sort_by_key(|(j, _)| *j);
    report.findings.extend(f.into_iter().map(|(_, f)| f));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{MemDevice, RecordDevice};
    use crate::fs::ROOT_INO;
    use crate::mkfs::{mkfs, MkfsOptions};

    /// A fresh 16 MiB file system mounted on a recording device whose log is `dir/log`.
    fn recording(dir: &tempfile::TempDir) -> (Arc<RecordDevice>, Fs, std::path::PathBuf) {
        let path = dir.path().join("log");
        let mem = Arc::new(MemDevice::new(16 << 20));
        mkfs(mem.as_ref(), &MkfsOptions::default()).expect("mkfs");
        let rec = Arc::new(RecordDevice::create(mem, &path).expect("record"));
        let fs =
            Fs::mount(rec.clone() as Arc<dyn BlockDevice>, MountOptions::default()).expect("mount");
        (rec, fs, path)
    }

    /// Records an in-process run: create, write, fsync, rename over, sync, small rewrites.
    fn recorded() -> WriteLog {
        let dir = tempfile::tempdir().expect("tempdir");
        let (rec, fs, path) = recording(&dir);
        let who = crate::fs::Caller::ROOT;
        let t = fs.create(ROOT_INO, b"target", 0o644, who).expect("create");
        fs.write(t.ino, 0, &[1; 5000]).expect("write");
        fs.fsync(t.ino, false).expect("fsync");
        for round in 0..6u8 {
            let tmp = fs.create(ROOT_INO, b"tmp", 0o644, who).expect("tmp");
            fs.write(tmp.ino, 0, &vec![round + 2; 3000 + 1000 * round as usize])
                .expect("write tmp");
            fs.fsync(tmp.ino, false).expect("fsync tmp");
            fs.rename(ROOT_INO, b"tmp", ROOT_INO, b"target", Default::default())
                .expect("rename");
            fs.sync().expect("sync");
            fs.write(tmp.ino, 100, &[round; 10]).expect("small rewrite");
            fs.fsync(tmp.ino, true).expect("fdatasync");
        }
        fs.unmount().expect("unmount");
        drop(fs);
        drop(rec);
        WriteLog::read_file(&path).expect("read log")
    }

    fn opts(states: u64) -> CheckOptions {
        CheckOptions {
            states,
            seed: 1,
            jobs: 2,
            only_interval: None,
        }
    }

    #[test]
    fn record_crashcheck_passes_a_recorded_run() {
        let log = recorded();
        let r = crashcheck(&log, &opts(300), |_| {}).expect("check");
        assert!(r.findings.is_empty(), "{:#?}", r.findings);
        assert!(r.complete && r.flushes > 5 && r.promises >= 12, "{r:?}");
        // (fewer than asked for: lazy checkpoints leave intervals of one or two writes)
        assert!(r.states >= 200 && r.promise_checks >= 200, "{r:?}");
        assert!(r.syncs == 6 && r.sync_promises >= 6, "{r:?}");
    }

    #[test]
    fn record_crashcheck_catches_a_false_promise() {
        let mut log = recorded();
        let at = log
            .records
            .iter()
            .rposition(|r| matches!(r, LogRecord::Fsynced { .. }))
            .expect("a promise");
        if let LogRecord::Fsynced { crc, .. } = &mut log.records[at] {
            *crc ^= 1;
        }
        let r = crashcheck(&log, &opts(50), |_| {}).expect("check");
        assert!(!r.findings.is_empty(), "{r:?}");
        let f = &r.findings[0];
        assert!(f.what.contains("contents differ"), "{f:?}");
        assert!(f.state.starts_with("flush"), "{f:?}");
        // the interval a finding names, alone, shows it again with the same seed and states
        let k: usize = f
            .state
            .split(' ')
            .nth(2)
            .and_then(|n| n.parse().ok())
            .expect("interval in the state's name");
        let only = CheckOptions {
            only_interval: Some(k),
            ..opts(50)
        };
        let again = crashcheck(&log, &only, |_| {}).expect("check");
        assert_eq!(again.findings[0].state, f.state);
        assert_eq!(again.flush_points, 1);
        // Changes after a sync left out of the log: the sync's promises say so.
        let mut log = recorded();
        log.records
            .retain(|r| !matches!(r, LogRecord::Fsynced { .. } | LogRecord::Mutated { .. }));
        let r = crashcheck(&log, &opts(50), |_| {}).expect("check");
        assert!(!r.findings.is_empty(), "{r:?}");
        let f = &r.findings[0];
        assert!(f.what.contains("sync promise of inode"), "{f:?}");
    }

    #[test]
    fn record_crashcheck_catches_dropped_flushes() {
        // Without its flushes a commit's home writes may land before its journal's: the
        // journal protocol's barrier is gone, and some state shows it.
        let mut log = recorded();
        log.records.retain(|r| *r != LogRecord::Flush);
        let r = crashcheck(&log, &opts(400), |_| {}).expect("check");
        assert!(!r.findings.is_empty(), "{r:?}");
        // the promises are broken at once: nothing the fsyncs wrote is durable
        assert!(
            r.findings[0].what.contains("fsync promise"),
            "{:?}",
            r.findings[0]
        );
        // and without promises the journal's invariants still show it
        log.records
            .retain(|r| !matches!(r, LogRecord::Fsynced { .. } | LogRecord::Mutated { .. }));
        let r = crashcheck(&log, &opts(400), |_| {}).expect("check");
        assert!(!r.findings.is_empty(), "{r:?}");
        assert!(
            r.findings[0].state.contains("flush interval 0"),
            "{:?}",
            r.findings[0]
        );
    }

    #[test]
    fn record_crashcheck_catches_one_dropped_flush_or_a_write_moved_across_one() {
        // Each flush dropped alone, and each flush swapped with the write after it (that write
        // now ordered before the barrier it followed): how many of these broken logs show?
        let log = recorded();
        let flushes: Vec<usize> = (0..log.records.len())
            .filter(|&i| log.records[i] == LogRecord::Flush)
            .collect();
        let (mut dropped, mut moved, mut swaps) = (0, 0, 0);
        for &f in &flushes {
            let mut broken = log.clone();
            broken.records.remove(f);
            let r = crashcheck(&broken, &opts(100), |_| {}).expect("check");
            dropped += usize::from(!r.findings.is_empty());
            if matches!(log.records.get(f + 1), Some(LogRecord::Write { .. })) {
                let mut broken = log.clone();
                broken.records.swap(f, f + 1);
                // Most writes may move before the flush they follow (journal writes after
                // ordered data: the checker holds no promise of a file not yet fsynced; and
                // checkpoints of durable transactions). The one that may not — a transaction
                // saying its checkpoint is durable moved before the flush that makes it so —
                // shows in few of an interval's cuts: many states.
                let r = crashcheck(&broken, &opts(1500), |_| {}).expect("check");
                moved += usize::from(!r.findings.is_empty());
                swaps += 1;
            }
        }
        eprintln!(
            "caught: {dropped} of {} logs with one flush dropped, {moved} of {swaps} with a \
             write moved before its flush",
            flushes.len()
        );
        assert!(
            dropped >= flushes.len() / 4,
            "{dropped} of {}",
            flushes.len()
        );
        assert!(moved >= 1, "{moved} of {swaps}");
    }

    /// Records an in-process run of metadata changes, each group followed by a sync (what a
    /// directory fsync does): directories, modes, owners, links, symlinks, a fifo, extended
    /// attributes, renames of files and directories, removals.
    fn recorded_metadata() -> WriteLog {
        use crate::fs::{RenameFlags, SetAttr, XattrFlags};
        let dir = tempfile::tempdir().expect("tempdir");
        let (rec, fs, path) = recording(&dir);
        let who = crate::fs::Caller::ROOT;
        let chmod = |mode| SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, who).expect("mkdir");
        let e = fs.mkdir(d.ino, b"e", 0o700, who).expect("mkdir e");
        let f = fs.create(e.ino, b"f", 0o644, who).expect("create");
        fs.write(f.ino, 0, &[3; 7000]).expect("write");
        fs.symlink(d.ino, b"s", b"e/f", who).expect("symlink");
        fs.mknod(d.ino, b"p", libc::S_IFIFO | 0o600, 0, who)
            .expect("mknod");
        fs.setxattr(f.ino, b"user.k", b"v1", XattrFlags::default())
            .expect("setxattr");
        fs.sync().expect("sync");
        for round in 0..6u32 {
            fs.setattr(f.ino, &chmod(0o600 + round)).expect("chmod");
            fs.setattr(
                e.ino,
                &SetAttr {
                    uid: Some(1000 + round),
                    gid: Some(2000 + round),
                    ..Default::default()
                },
            )
            .expect("chown");
            fs.setxattr(
                d.ino,
                b"user.round",
                &[round as u8; 40],
                XattrFlags::default(),
            )
            .expect("setxattr");
            let name = format!("l{round}");
            fs.link(f.ino, ROOT_INO, name.as_bytes()).expect("link");
            fs.sync().expect("sync");
            fs.mkdir(d.ino, b"sub", 0o755, who).expect("mkdir sub");
            fs.rename(d.ino, b"sub", e.ino, b"moved", RenameFlags::default())
                .expect("rename dir");
            fs.rmdir(e.ino, b"moved").expect("rmdir");
            fs.rename(
                ROOT_INO,
                name.as_bytes(),
                d.ino,
                b"last",
                RenameFlags::default(),
            )
            .expect("rename over");
            fs.removexattr(f.ino, b"user.k").ok();
            fs.sync().expect("sync");
        }
        fs.unmount().expect("unmount");
        drop(fs);
        drop(rec);
        WriteLog::read_file(&path).expect("read log")
    }

    #[test]
    fn record_crashcheck_holds_syncs_to_names_modes_links_and_xattrs() {
        let log = recorded_metadata();
        let r = crashcheck(&log, &opts(300), |_| {}).expect("check");
        assert!(r.findings.is_empty(), "{:#?}", r.findings);
        // every sync promises the whole tree that did not change during it
        assert!(r.sync_promises >= 13 * 5, "{r:?}");
        // Each kind of change hidden from the checker (its Mutated records dropped) breaks
        // a promise of the sync before it: the check reads what it promised.
        for (what, ino_of) in [
            ("mode", "f"),
            ("uid", "e"),
            ("extended attributes differ", "d"),
            ("links", "f"),
            ("entries differ", "d"),
        ] {
            let ino = inode_of(&log, ino_of);
            let mut broken = log.clone();
            broken
                .records
                .retain(|r| !matches!(r, LogRecord::Mutated { ino: i } if *i == ino));
            let r = crashcheck(&broken, &opts(100), |_| {}).expect("check");
            assert!(
                r.findings.iter().any(|f| f.what.contains(what)),
                "{what} of {ino_of}: {:#?}",
                r.findings
            );
        }
    }

    /// The inode of `d`, `d/e` or `d/e/f` in `log`'s final image (mounted read-only).
    fn inode_of(log: &WriteLog, name: &str) -> u64 {
        let mut img = vec![0u8; log.device_bytes as usize];
        for r in &log.records {
            if let LogRecord::Base { offset, data } | LogRecord::Write { offset, data } = r {
                img[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
            }
        }
        let dev = Arc::new(CowDevice::new(Arc::new(img)));
        let fs = Fs::mount(dev as Arc<dyn BlockDevice>, MountOptions::default()).expect("mount");
        let mut ino = ROOT_INO;
        for part in ["d", "e", "f"] {
            ino = fs.lookup(ino, part.as_bytes()).expect("lookup").ino;
            if part == name {
                break;
            }
        }
        ino
    }

    #[test]
    fn record_crashcheck_counts_orphans_the_mount_frees() {
        // A file unlinked while open, committed: every later state holds an orphan, which
        // fsck -n counts and the mount frees.
        let dir = tempfile::tempdir().expect("tempdir");
        let (rec, fs, path) = recording(&dir);
        let who = crate::fs::Caller::ROOT;
        let a = fs.create(ROOT_INO, b"held", 0o644, who).expect("create");
        fs.write(a.ino, 0, &[9; 10_000]).expect("write");
        fs.open(a.ino).expect("open");
        fs.sync().expect("sync");
        fs.unlink(ROOT_INO, b"held").expect("unlink");
        fs.sync().expect("sync");
        let b = fs.create(ROOT_INO, b"other", 0o644, who).expect("create");
        fs.write(b.ino, 0, &[1; 3000]).expect("write");
        fs.fsync(b.ino, false).expect("fsync");
        drop(fs); // a crash: the handle is never released
        rec.close().expect("close");
        let log = WriteLog::read_file(&path).expect("read log");
        let r = crashcheck(&log, &opts(100), |_| {}).expect("check");
        assert!(r.findings.is_empty(), "{:#?}", r.findings);
        assert!(r.orphan_states > 10, "{r:?}");
    }

    #[test]
    fn record_cow_device_keeps_the_base() {
        let base = Arc::new(vec![5u8; 3 * 4096]);
        let d = CowDevice::new(base.clone());
        d.writev_at(4000, &[&[1; 200], &[2; 10]]).expect("write");
        let mut buf = vec![0u8; 300];
        d.read_at(3990, &mut buf).expect("read");
        assert_eq!(&buf[..10], &[5; 10]);
        assert_eq!(&buf[10..210], &[1; 200][..]);
        assert_eq!(&buf[210..220], &[2; 10]);
        assert_eq!(&buf[220..], &[5; 80][..]);
        assert!(base.iter().all(|&b| b == 5));
        assert!(d.write_at(3 * 4096 - 1, &[0, 0]).is_err());
    }
}
