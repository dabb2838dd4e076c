//! Benchmark hygiene (paper 002): cache states before a run, and a look for other disk
//! activity that would disturb it.

use std::io;
use std::time::Duration;

/// Cache state a run starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    /// Scenario B: a fresh target per run (fresh mount, fresh engine, fresh directory) and
    /// nothing else.
    Fresh,
    /// Scenario A: right after the fresh mount, before the workload starts (before its
    /// setup), `sync` and drop the kernel's page, dentry and inode caches and moafs's own
    /// block cache (root). The workload then builds its file set and runs, as Filebench did
    /// in the paper.
    Dropped,
    /// Not one of the paper's scenarios: the same drop after the workload's setup, right
    /// before the measured phase, so that the measured phase reads what the setup wrote
    /// from the device (cold reads: `micro-dir-read`).
    DroppedAfterSetup,
    /// Scenario C: the same workload runs four times first on the same target, each in its
    /// own directory; their files stay until the measured run is over, so the page cache
    /// (under a memory limit: all of it) holds their pages, unrelated to the measured run,
    /// which has to displace them.
    Polluted,
}

impl CacheState {
    pub fn parse(s: &str) -> Option<CacheState> {
        Some(match s {
            "fresh" | "B" => CacheState::Fresh,
            "dropped" | "A" => CacheState::Dropped,
            "dropped-after-setup" | "cold" => CacheState::DroppedAfterSetup,
            "polluted" | "C" => CacheState::Polluted,
            _ => return None,
        })
    }

    /// Paper 002's letter (`cold` for the drop after setup, not a scenario of the paper).
    pub fn letter(self) -> &'static str {
        match self {
            CacheState::Dropped => "A",
            CacheState::Fresh => "B",
            CacheState::Polluted => "C",
            CacheState::DroppedAfterSetup => "cold",
        }
    }
}

/// A job that writes beside the measured run (paper 002 §4.2–4.3: fio creating 100 KB files
/// continuously during Filebench, without or with fsync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Background {
    None,
    /// 100 KB files, one write each, no fsync; write-back started by the job once a file
    /// is `writeback_lag` bytes old (see [`BackgroundPlan`]).
    Write,
    /// The same with an fsync after each file.
    WriteFsync,
}

impl Background {
    pub fn parse(s: &str) -> Option<Background> {
        Some(match s {
            "none" => Background::None,
            "write" => Background::Write,
            "fsync" => Background::WriteFsync,
            _ => return None,
        })
    }

    pub fn label(self) -> &'static str {
        match self {
            Background::None => "",
            Background::Write => "+bg",
            Background::WriteFsync => "+bg-fsync",
        }
    }
}

/// What to do before and around each run.
#[derive(Debug, Clone, Copy)]
pub struct Hygiene {
    pub cache: CacheState,
    /// Watch real disks for this long before each run and record what others moved.
    pub watch: Option<Duration>,
    pub background: Background,
    /// Run the workload (pollution runs included) in a cgroup with this hard memory limit,
    /// bytes (root; see [`crate::cgroup`]).
    pub memory_limit: Option<u64>,
    /// Count the FUSE requests of the measured phase by opcode (FUSE targets; root, perf and
    /// the kernel's FUSE tracepoints: see [`crate::fusetrace`]).
    pub fuse_requests: bool,
}

impl Default for Hygiene {
    fn default() -> Self {
        Hygiene {
            cache: CacheState::Fresh,
            watch: None,
            background: Background::None,
            memory_limit: None,
            fuse_requests: false,
        }
    }
}

/// Size of a background file (paper 002: 100 KB).
pub const BACKGROUND_FILE: usize = 100 * 1000;
/// The memory of paper 002's machine: without a memory limit, the write-back lag of the
/// background job is computed as if the machine had this much.
pub const PAPER_MEMORY: u64 = 4 << 30;

/// How the background job writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BackgroundPlan {
    /// fsync after each file.
    pub fsync: bool,
    /// Bytes of files kept at once; beyond it the oldest file is deleted (rotation).
    pub budget: u64,
    /// Without fsync: a file's write-back is started (asynchronously, no device flush) once
    /// this many bytes were written after it, as the kernel's flusher does once dirty pages
    /// pass `dirty_background_ratio` of memory.
    pub writeback_lag: u64,
}

impl BackgroundPlan {
    /// The plan for a target with `free` bytes free, under `memory_limit` (if any): files
    /// kept up to a quarter of the free space (at least 8 MiB, at most 2 GiB); write-back
    /// lag `vm.dirty_background_ratio` (10 %) of the memory limit, or of paper 002's 4 GB
    /// machine without one, and never more than half the budget (so that every file but the
    /// newest reaches the device before it is rotated away).
    pub fn new(fsync: bool, free: u64, memory_limit: Option<u64>) -> BackgroundPlan {
        let budget = (free / 4).clamp(8 << 20, 2 << 30);
        let ratio = std::fs::read_to_string("/proc/sys/vm/dirty_background_ratio")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|&r| r > 0)
            .unwrap_or(10);
        let lag = (memory_limit.unwrap_or(PAPER_MEMORY) / 100 * ratio).min(budget / 2);
        BackgroundPlan {
            fsync,
            budget,
            writeback_lag: lag.max(BACKGROUND_FILE as u64),
        }
    }
}

/// What a background job did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackgroundDone {
    pub files: u64,
    pub bytes: u64,
    /// Bytes whose write-back the job started (`write`) or waited for (`fsync`).
    pub bytes_written_back: u64,
}

/// A running background writer; [`BackgroundJob::stop`] ends it.
pub struct BackgroundJob {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<io::Result<BackgroundDone>>>,
    dir: std::path::PathBuf,
}

/// Starts the write-back of a file's dirty pages without waiting and without a device flush:
/// `posix_fadvise(DONTNEED)` runs the kernel's `filemap_fdatawrite_range(WB_SYNC_NONE)` (as
/// the flusher does) and drops only pages that are already clean.
fn start_writeback(f: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    nix::fcntl::posix_fadvise(
        f.as_raw_fd(),
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .map_err(io::Error::from)
}

impl BackgroundJob {
    /// Starts writing 100 KB files into `dir` (made now, removed by `stop`).
    pub fn start(dir: &std::path::Path, plan: BackgroundPlan) -> io::Result<BackgroundJob> {
        use std::io::Write;
        use std::sync::atomic::Ordering;
        std::fs::create_dir(dir)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, at) = (stop.clone(), dir.to_path_buf());
        let file = BACKGROUND_FILE as u64;
        let keep = (plan.budget / file).max(2);
        let lag = plan.writeback_lag.div_ceil(file).max(1);
        let handle = std::thread::Builder::new()
            .name("moafs-bench-bg".into())
            .spawn(move || -> io::Result<BackgroundDone> {
                let data = vec![0x5au8; BACKGROUND_FILE];
                let mut done = BackgroundDone::default();
                // files written and not yet handed to write-back, oldest first
                let mut pending = std::collections::VecDeque::new();
                while !flag.load(Ordering::Relaxed) {
                    let n = done.files;
                    let mut f = std::fs::File::create(at.join(format!("bg{n}")))?;
                    f.write_all(&data)?;
                    done.files += 1;
                    done.bytes += file;
                    if plan.fsync {
                        f.sync_all()?;
                        done.bytes_written_back += file;
                    } else {
                        pending.push_back(f);
                        while pending.len() as u64 > lag {
                            if let Some(old) = pending.pop_front() {
                                start_writeback(&old)?;
                                done.bytes_written_back += file;
                            }
                        }
                    }
                    if n + 1 > keep {
                        std::fs::remove_file(at.join(format!("bg{}", n - keep)))?;
                    }
                }
                Ok(done)
            })?;
        Ok(BackgroundJob {
            stop,
            handle: Some(handle),
            dir: dir.to_path_buf(),
        })
    }

    /// Stops the writer, removes its files, and returns what it wrote.
    pub fn stop(mut self) -> io::Result<BackgroundDone> {
        self.halt()
    }

    fn halt(&mut self) -> io::Result<BackgroundDone> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let n = match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("background writer panicked"))),
            None => Ok(BackgroundDone::default()),
        };
        let removed = std::fs::remove_dir_all(&self.dir);
        let n = n?;
        removed.map(|()| n)
    }
}

impl Drop for BackgroundJob {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// Free bytes of the file system holding `dir` (`statvfs`).
pub fn free_bytes(dir: &std::path::Path) -> io::Result<u64> {
    let s = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
    Ok(s.blocks_available() as u64 * s.fragment_size() as u64)
}

/// The block device (`NAME` of `/dev/NAME`) the file system holding `dir` is mounted from,
/// through `/proc/self/mountinfo` (a FUSE mount too when its source names one, as moafs's and
/// fuse2fs's on a loop device do); `None` for mounts without one.
pub fn mount_device(dir: &std::path::Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // the longest mount point containing `dir`
    let (_, source) = info
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mnt = left.split(' ').nth(4)?.replace("\\040", " ");
            let source = right.split(' ').nth(1)?;
            dir.starts_with(&mnt)
                .then(|| (mnt.len(), source.to_string()))
        })
        .max_by_key(|(len, _)| *len)?;
    let name = source.strip_prefix("/dev/")?.to_string();
    std::path::Path::new(&format!("/sys/class/block/{name}"))
        .exists()
        .then_some(name)
}

/// Bytes written to the block device the file system at `dir` is mounted from
/// (`/sys/class/block/DEV/stat`); `None` for mounts without a block device.
pub fn block_device_written(dir: &std::path::Path) -> Option<u64> {
    let name = mount_device(dir)?;
    let stat = std::fs::read_to_string(format!("/sys/class/block/{name}/stat")).ok()?;
    let sectors: u64 = stat.split_whitespace().nth(6)?.parse().ok()?;
    Some(sectors * 512)
}

/// Switches the loop device under `dir` to direct I/O on its backing file (`losetup
/// --direct-io=on`). Under a memory limit this matters: the loop device otherwise reads and
/// writes its image through the page cache of the image file, charged to no limited cgroup
/// (the loop worker's), which would serve every page the limit evicted from memory — a
/// second, unlimited cache. Returns whether direct I/O is on now (`false` where the backing
/// file system refuses it, e.g. tmpfs, whose pages are the storage itself), `None` when `dir`
/// is not on a loop device (the engine, a directory, the passthrough's FUSE mount).
pub fn loop_direct_io(dir: &std::path::Path) -> Option<bool> {
    let name = mount_device(dir).filter(|n| n.starts_with("loop"))?;
    let _ = std::process::Command::new("losetup")
        .args(["--direct-io=on", &format!("/dev/{name}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    let dio = std::fs::read_to_string(format!("/sys/block/{name}/loop/dio")).ok()?;
    Some(dio.trim() == "1")
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`.
pub fn drop_caches() -> io::Result<()> {
    std::process::Command::new("sync").status()?;
    std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot drop the page cache (needs root): {e}"),
        )
    })
}

/// Each device of `/proc/diskstats` text with the bytes it read and wrote.
fn diskstats_bytes(diskstats: &str) -> impl Iterator<Item = (&str, u64)> {
    diskstats.lines().filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let sectors_read: u64 = f.get(5)?.parse().ok()?;
        let sectors_written: u64 = f.get(9)?.parse().ok()?;
        Some((*f.get(2)?, (sectors_read + sectors_written) * 512))
    })
}

/// Bytes read and written by real disks (not loop, RAM or device-mapper devices, which our
/// own targets use) according to `/proc/diskstats` text.
pub fn disk_bytes(diskstats: &str) -> u64 {
    diskstats_bytes(diskstats)
        .filter(|(name, _)| {
            let ours = ["loop", "ram", "zram", "dm-", "nbd"]
                .iter()
                .any(|p| name.starts_with(p));
            // partitions repeat their disk's I/O: count whole disks only (no digit after a
            // letter-named disk like sda1; nvme0n1p1 has a 'p' part)
            let partition =
                (name.starts_with("sd") || name.starts_with("vd") || name.starts_with("xvd"))
                    && name.ends_with(|c: char| c.is_ascii_digit())
                    || name.contains('p') && name.starts_with("nvme");
            !ours && !partition
        })
        .map(|(_, bytes)| bytes)
        .sum()
}

/// Bytes block device `name` read and wrote according to `/proc/diskstats` text (0 when it
/// is not listed).
fn device_bytes(diskstats: &str, name: &str) -> u64 {
    diskstats_bytes(diskstats)
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, bytes)| bytes)
}

/// Bytes other processes moved on real disks between two `/proc/diskstats` snapshots: the
/// real disks' traffic less what `own` moved meanwhile — the target's loop device when it
/// passes its I/O straight to its backing file (direct I/O), so that the target's own
/// write-back (scenario C's pollution, a background job's files) reaching the disk under it
/// is not counted as another process's.
pub fn others_between(before: &str, after: &str, own: Option<&str>) -> u64 {
    let disks = disk_bytes(after).saturating_sub(disk_bytes(before));
    let ours = own.map_or(0, |n| {
        device_bytes(after, n).saturating_sub(device_bytes(before, n))
    });
    disks.saturating_sub(ours)
}

/// Bytes other processes moved to or from real disks during `window` (0 where
/// `/proc/diskstats` cannot be read); `own` as in [`others_between`].
pub fn other_disk_activity(window: Duration, own: Option<&str>) -> u64 {
    let read = || std::fs::read_to_string("/proc/diskstats");
    match (read(), {
        std::thread::sleep(window);
        read()
    }) {
        (Ok(a), Ok(b)) => others_between(&a, &b, own),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
 254       0 vda 1000 0 2000 0 500 0 4000 0 0 0 0 0 0 0 0 0 0
 254       1 vda1 900 0 1800 0 400 0 3000 0 0 0 0 0 0 0 0 0 0
   7       0 loop0 50 0 100000 0 60 0 200000 0 0 0 0 0 0 0 0 0 0
 259       0 nvme0n1 10 0 20 0 30 0 40 0 0 0 0 0 0 0 0 0 0
 259       1 nvme0n1p1 10 0 20 0 30 0 40 0 0 0 0 0 0 0 0 0 0
   1       0 ram0 1 0 99999 0 1 0 99999 0 0 0 0 0 0 0 0 0 0
";

    #[test]
    fn counts_whole_real_disks_only() {
        // vda: (2000 + 4000) sectors; nvme0n1: (20 + 40); partitions, loop and ram not
        assert_eq!(disk_bytes(SAMPLE), (6000 + 60) * 512);
        assert_eq!(disk_bytes(""), 0);
        assert_eq!(disk_bytes("garbage line\n 1 2 sda x y z\n"), 0);
    }

    #[test]
    fn the_targets_own_loop_traffic_is_not_another_processs() {
        // vda moved 1,000 sectors more; loop0 (the target's, direct I/O) 800 of them
        let after = SAMPLE
            .replace(
                " vda 1000 0 2000 0 500 0 4000 ",
                " vda 1000 0 2500 0 500 0 4500 ",
            )
            .replace(
                " loop0 50 0 100000 0 60 0 200000 ",
                " loop0 50 0 100300 0 60 0 200500 ",
            );
        assert_eq!(others_between(SAMPLE, &after, None), 1000 * 512);
        assert_eq!(others_between(SAMPLE, &after, Some("loop0")), 200 * 512);
        // a loop device that moved more than the disks (its backing in memory) hides nothing
        // below zero; an unknown device subtracts nothing
        let busy_loop = SAMPLE.replace(
            " loop0 50 0 100000 0 60 0 200000 ",
            " loop0 50 0 900000 0 60 0 200000 ",
        );
        assert_eq!(others_between(SAMPLE, &busy_loop, Some("loop0")), 0);
        assert_eq!(others_between(SAMPLE, &after, Some("loop9")), 1000 * 512);
    }
}
