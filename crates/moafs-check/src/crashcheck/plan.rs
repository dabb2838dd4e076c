//! The plan of a log: its flush intervals and their writes, cut into segments at the NVM
//! tier's persists, the promises its fsyncs logged with their lives, the `Mutated` records by
//! inode, and its syncs ([`plan`]); and the promises a sync makes, read from the durable
//! image ([`sync_promises`]).

use super::cow::{CowDevice, CowNvm};
use super::promise::{InodeState, Promise, Promised};
use super::CheckReport;
use moafs_core::device::{BlockDevice, LogRecord, Nvm, WriteLog};
use moafs_core::fs::MountOptions;
use moafs_core::Fs;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A flush interval: the writes between two flushes.
pub(super) struct Interval {
    /// Record index where the interval starts (its flush, or the first record after the base).
    pub(super) start: usize,
    /// Record index where it ends (the next flush, or the end of the log).
    pub(super) end: usize,
    /// Record indices of its writes, in order.
    pub(super) writes: Vec<usize>,
    /// The interval cut at the tier's persists (one segment without a tier), in order.
    pub(super) segments: Vec<Segment>,
}

/// A stretch of a flush interval between two barriers of either kind (the interval's start
/// or a tier persist, and the next tier persist or the interval's end): a power cut in it
/// leaves the device as of the interval's flush plus some of the interval's writes issued
/// before the segment's end, and the tier as of its last persist plus some of the stores
/// issued since (before the segment's end).
pub(super) struct Segment {
    /// Record index of the barrier it starts at (the interval's start, or a `TierPersist`).
    pub(super) start: usize,
    /// Record index of the barrier it ends at (a `TierPersist`, or the interval's end).
    pub(super) end: usize,
    /// How many of the interval's writes come before `end` (the first ones).
    pub(super) writes: usize,
    /// Record indices of the tier's stores since its last persist, up to `end`.
    pub(super) stores: Vec<usize>,
    /// It ends at a tier persist (the tier's durable image advances there).
    pub(super) persisted: bool,
}

/// The NVM tier the log recorded.
pub(super) const TIER_PATH: &str = "recorded NVM tier";

/// Mounts a state: with its tier (as recorded) when the log has one.
pub(super) fn mount_state(
    dev: Arc<dyn BlockDevice>,
    tier: Option<Arc<CowNvm>>,
) -> moafs_core::error::FsResult<Fs> {
    let tier = tier.map(|t| (t as Arc<dyn Nvm>, TIER_PATH.to_string()));
    Fs::mount_with_tier(dev, tier, MountOptions::default())
}

/// The log cut into intervals and promises.
pub(super) struct Plan {
    pub(super) base: Vec<u8>,
    /// The tier at mount (its `Tier` and `TierBase` records), if the log recorded one.
    pub(super) tier: Option<Vec<u8>>,
    pub(super) intervals: Vec<Interval>,
    pub(super) promises: Vec<Promise>,
    /// Inode → record indices of its `Mutated` records, in order.
    pub(super) mutations: HashMap<u64, Vec<usize>>,
    /// (`SyncStart`, `Sync`) record indices of each sync.
    pub(super) syncs: Vec<(usize, usize)>,
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
/// With a tier, `tier` is its durable image at that flush (a crash state itself: the flush
/// point's).
pub(super) fn sync_promises(
    plan: &Plan,
    image: &Arc<Vec<u8>>,
    tier: Option<&Arc<Vec<u8>>>,
    start: usize,
    end: usize,
) -> Vec<Promise> {
    let dev = Arc::new(CowDevice::new(image.clone()));
    let tier = tier.map(|t| Arc::new(CowNvm::new(t.clone())));
    let Ok(fs) = mount_state(dev as Arc<dyn BlockDevice>, tier) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen = HashSet::from([moafs_core::fs::ROOT_INO]);
    let mut todo = vec![moafs_core::fs::ROOT_INO];
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

/// Reads the log into its plan (and counts its records into `report`).
pub(super) fn plan(log: &WriteLog, report: &mut CheckReport) -> Result<Plan, String> {
    let mut base = image_of(log.device_bytes, "recorded device")?;
    let mut tier = match log.tier_bytes() {
        Some(n) => Some(image_of(n, "recorded NVM tier")?),
        None => None,
    };
    let mut intervals = vec![Interval {
        start: 0,
        end: 0,
        writes: Vec::new(),
        segments: Vec::new(),
    }];
    let mut promises: Vec<Promise> = Vec::new();
    let mut alive: HashMap<u64, usize> = HashMap::new();
    let mut mutations: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut sync_starts = std::collections::VecDeque::new();
    let mut syncs = Vec::new();
    let mut base_done = false;
    // the tier's stores since its last persist, and where the open segment starts
    let mut pending: Vec<usize> = Vec::new();
    let mut seg_start = 0;
    for (i, r) in log.records.iter().enumerate() {
        report.records += 1;
        let cur = intervals.len() - 1;
        match r {
            LogRecord::Base { offset, data } | LogRecord::TierBase { offset, data } => {
                if base_done {
                    return Err(format!(
                        "record {i}: a base block after the mount's first request"
                    ));
                }
                let img = match r {
                    LogRecord::Base { .. } => &mut base,
                    _ => tier.as_mut().ok_or("a tier base block without its tier")?,
                };
                let o = *offset as usize;
                img[o..o + data.len()].copy_from_slice(data);
                intervals[cur].start = i + 1;
                seg_start = i + 1;
                continue;
            }
            LogRecord::Tier { .. } => {
                if base_done {
                    return Err(format!(
                        "record {i}: the tier after the mount's first request"
                    ));
                }
                intervals[cur].start = i + 1;
                seg_start = i + 1;
                continue;
            }
            LogRecord::Write { .. } => {
                report.writes += 1;
                intervals[cur].writes.push(i);
            }
            LogRecord::TierStore { .. } => {
                report.tier_stores += 1;
                pending.push(i);
            }
            LogRecord::TierPersist => {
                report.tier_persists += 1;
                let iv = &mut intervals[cur];
                iv.segments.push(Segment {
                    start: seg_start,
                    end: i,
                    writes: iv.writes.len(),
                    stores: std::mem::take(&mut pending),
                    persisted: true,
                });
                seg_start = i;
            }
            LogRecord::Flush => {
                report.flushes += 1;
                let iv = &mut intervals[cur];
                iv.end = i;
                iv.segments.push(Segment {
                    start: seg_start,
                    end: i,
                    writes: iv.writes.len(),
                    stores: pending.clone(),
                    persisted: false,
                });
                seg_start = i;
                intervals.push(Interval {
                    start: i,
                    end: 0,
                    writes: Vec::new(),
                    segments: Vec::new(),
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
        last.segments.push(Segment {
            start: seg_start,
            end: last.end,
            writes: last.writes.len(),
            stores: pending,
            persisted: false,
        });
    }
    Ok(Plan {
        base,
        tier,
        intervals,
        promises,
        mutations,
        syncs,
    })
}

/// A zeroed image of `bytes` (held in memory: a log of one too large is refused, not a crash).
fn image_of(bytes: u64, what: &str) -> Result<Vec<u8>, String> {
    let size = usize::try_from(bytes).map_err(|_| format!("{what} of {bytes} bytes"))?;
    let mut img = Vec::new();
    img.try_reserve_exact(size).map_err(|_| {
        format!(
            "the {what} has {size} bytes: too large to hold in memory (crashcheck keeps one \
             image per flush point; record small images)"
        )
    })?;
    img.resize(size, 0);
    Ok(img)
}
