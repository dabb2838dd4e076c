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
    /// Scenario A: additionally `sync` and drop the kernel's page, dentry and inode caches
    /// (and moafs's own block cache) after the workload's setup (root).
    Dropped,
    /// Scenario C: the same workload runs four times first on the same target, each in a
    /// scratch directory removed afterwards, so the cache is full of unrelated pages.
    Polluted,
}

impl CacheState {
    pub fn parse(s: &str) -> Option<CacheState> {
        Some(match s {
            "fresh" | "B" => CacheState::Fresh,
            "dropped" | "A" => CacheState::Dropped,
            "polluted" | "C" => CacheState::Polluted,
            _ => return None,
        })
    }

    /// Paper 002's letter.
    pub fn letter(self) -> &'static str {
        match self {
            CacheState::Dropped => "A",
            CacheState::Fresh => "B",
            CacheState::Polluted => "C",
        }
    }
}

/// A job that writes beside the measured run (paper 002 §4.2–4.3: fio creating 100 KB files
/// during Filebench, without or with fsync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Background {
    None,
    /// 100 KB files, one write each, no fsync.
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
}

impl Default for Hygiene {
    fn default() -> Self {
        Hygiene {
            cache: CacheState::Fresh,
            watch: None,
            background: Background::None,
        }
    }
}

/// Size of a background file (paper 002: 100 KB).
pub const BACKGROUND_FILE: usize = 100 * 1000;
/// Background files kept at once (the oldest is removed): at most 25.6 MB.
const BACKGROUND_KEEP: u64 = 256;

/// A running background writer; [`BackgroundJob::stop`] ends it.
pub struct BackgroundJob {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<io::Result<u64>>>,
    dir: std::path::PathBuf,
}

impl BackgroundJob {
    /// Starts writing 100 KB files into `dir` (made now, removed by `stop`).
    pub fn start(dir: &std::path::Path, fsync: bool) -> io::Result<BackgroundJob> {
        use std::io::Write;
        use std::sync::atomic::Ordering;
        std::fs::create_dir(dir)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, at) = (stop.clone(), dir.to_path_buf());
        let handle = std::thread::Builder::new()
            .name("moafs-bench-bg".into())
            .spawn(move || -> io::Result<u64> {
                let data = vec![0x5au8; BACKGROUND_FILE];
                let mut n = 0u64;
                while !flag.load(Ordering::Relaxed) {
                    let mut f = std::fs::File::create(at.join(format!("bg{n}")))?;
                    f.write_all(&data)?;
                    if fsync {
                        f.sync_all()?;
                    }
                    if n >= BACKGROUND_KEEP {
                        std::fs::remove_file(at.join(format!("bg{}", n - BACKGROUND_KEEP)))?;
                    }
                    n += 1;
                }
                Ok(n)
            })?;
        Ok(BackgroundJob {
            stop,
            handle: Some(handle),
            dir: dir.to_path_buf(),
        })
    }

    /// Stops the writer, removes its files, and returns how many it wrote.
    pub fn stop(mut self) -> io::Result<u64> {
        self.halt()
    }

    fn halt(&mut self) -> io::Result<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let n = match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("background writer panicked"))),
            None => Ok(0),
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

/// Bytes read and written by real disks (not loop, RAM or device-mapper devices, which our
/// own targets use) according to `/proc/diskstats` text.
pub fn disk_bytes(diskstats: &str) -> u64 {
    diskstats
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.get(2)?;
            let ours = ["loop", "ram", "zram", "dm-", "nbd"]
                .iter()
                .any(|p| name.starts_with(p));
            // partitions repeat their disk's I/O: count whole disks only (no digit after a
            // letter-named disk like sda1; nvme0n1p1 has a 'p' part)
            let partition =
                (name.starts_with("sd") || name.starts_with("vd") || name.starts_with("xvd"))
                    && name.ends_with(|c: char| c.is_ascii_digit())
                    || name.contains('p') && name.starts_with("nvme");
            if ours || partition {
                return None;
            }
            let sectors_read: u64 = f.get(5)?.parse().ok()?;
            let sectors_written: u64 = f.get(9)?.parse().ok()?;
            Some((sectors_read + sectors_written) * 512)
        })
        .sum()
}

/// Bytes other processes moved to or from real disks during `window` (0 where
/// `/proc/diskstats` cannot be read).
pub fn other_disk_activity(window: Duration) -> u64 {
    let read = || std::fs::read_to_string("/proc/diskstats").map(|s| disk_bytes(&s));
    match (read(), {
        std::thread::sleep(window);
        read()
    }) {
        (Ok(a), Ok(b)) => b.saturating_sub(a),
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
}
