//! Tests of [`run_once`](super::run_once): when scenario A drops, what scenario C leaves in
//! place, the memory cgroup, and the background job's bytes at the device.

use super::*;
use crate::hygiene::{BackgroundJob, BackgroundPlan, CacheState, Hygiene};
use crate::target::{DirTarget, Fh, Mode, Target};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A directory target that records sync, drop_own_cache and mkdir calls in order, and on
/// its first mkdir (the measured run's setup starting) how many bytes the pollution
/// directories hold; `fail_mkdir` makes every mkdir fail.
struct Recording {
    inner: DirTarget,
    root: PathBuf,
    log: Log,
    pollution_at_setup: Seen,
    fail_mkdir: bool,
}

type Log = Arc<Mutex<Vec<String>>>;
type Seen = Arc<Mutex<Option<u64>>>;

impl Recording {
    fn new(root: &Path) -> (Recording, Log, Seen) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(Mutex::new(None));
        (
            Recording {
                inner: DirTarget::new(root).unwrap(),
                root: root.to_path_buf(),
                log: log.clone(),
                pollution_at_setup: seen.clone(),
                fail_mkdir: false,
            },
            log,
            seen,
        )
    }

    fn note(&self, what: &str) {
        self.log.lock().unwrap().push(what.to_string());
    }
}

impl Target for Recording {
    fn name(&self) -> String {
        "recording".into()
    }
    fn mkdir(&self, path: &str) -> io::Result<()> {
        self.note("mkdir");
        if self.fail_mkdir {
            return Err(io::Error::other("mkdir refused (test)"));
        }
        let mut seen = self.pollution_at_setup.lock().unwrap();
        if seen.is_none() {
            let mut n = 0;
            for k in 0..4 {
                let d = self.root.join(format!("pollute-{k}"));
                if d.is_dir() {
                    n += tree_bytes(&d)?;
                }
            }
            *seen = Some(n);
        }
        self.inner.mkdir(path)
    }
    fn rmdir(&self, path: &str) -> io::Result<()> {
        self.inner.rmdir(path)
    }
    fn remove(&self, path: &str) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn stat(&self, path: &str) -> io::Result<u64> {
        self.inner.stat(path)
    }
    fn open(&self, path: &str, mode: Mode) -> io::Result<Fh> {
        self.inner.open(path, mode)
    }
    fn write_at(&self, fh: &Fh, off: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write_at(fh, off, data)
    }
    fn read_at(&self, fh: &Fh, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_at(fh, off, buf)
    }
    fn fsync(&self, fh: &Fh) -> io::Result<()> {
        self.inner.fsync(fh)
    }
    fn close(&self, fh: Fh) -> io::Result<()> {
        self.inner.close(fh)
    }
    fn sync(&self) -> io::Result<()> {
        self.note("sync");
        self.inner.sync()
    }
    fn drop_own_cache(&self) -> io::Result<()> {
        self.note("drop_own_cache");
        Ok(())
    }
    fn dir(&self) -> Option<&Path> {
        Some(&self.root)
    }
}

fn small_varmail() -> Spec {
    workload::named("varmail", 0.02, 7, 0.2).unwrap()
}

fn hygiene(cache: CacheState) -> Hygiene {
    Hygiene {
        cache,
        ..Hygiene::default()
    }
}

#[test]
fn scenario_a_drops_before_the_setup_and_cold_after_it() {
    if !is_root() {
        eprintln!("skipped: dropping the page cache needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (t, log, _) = Recording::new(tmp.path());
    let (_, run) = run_once(
        1,
        &small_varmail(),
        &hygiene(CacheState::Dropped),
        Box::new(t),
    )
    .unwrap();
    assert_eq!(run.cache, CacheState::Dropped);
    let log = log.lock().unwrap().clone();
    let first_mkdir = log.iter().position(|e| e == "mkdir").unwrap();
    let drop_at = log.iter().position(|e| e == "drop_own_cache").unwrap();
    assert_eq!(&log[..2], ["sync", "drop_own_cache"], "{log:?}");
    assert!(drop_at < first_mkdir, "{log:?}");
    assert_eq!(log.iter().filter(|e| *e == "drop_own_cache").count(), 1);

    // the drop after setup: the file set (its mkdirs) first
    let tmp = tempfile::tempdir().unwrap();
    let (t, log, _) = Recording::new(tmp.path());
    let h = hygiene(CacheState::DroppedAfterSetup);
    run_once(1, &small_varmail(), &h, Box::new(t)).unwrap();
    let log = log.lock().unwrap().clone();
    let drop_at = log.iter().position(|e| e == "drop_own_cache").unwrap();
    assert!(log[..drop_at].iter().any(|e| e == "mkdir"), "{log:?}");
    assert_eq!(log[drop_at - 1], "sync");

    // B: no drop at all
    let tmp = tempfile::tempdir().unwrap();
    let (t, log, _) = Recording::new(tmp.path());
    run_once(
        1,
        &small_varmail(),
        &hygiene(CacheState::Fresh),
        Box::new(t),
    )
    .unwrap();
    assert!(!log.lock().unwrap().iter().any(|e| e == "drop_own_cache"));
}

#[test]
fn pollution_files_stay_through_the_measured_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, _, seen) = Recording::new(tmp.path());
    let (_, run) = run_once(
        1,
        &small_varmail(),
        &hygiene(CacheState::Polluted),
        Box::new(t),
    )
    .unwrap();
    let left = run.pollution_bytes.unwrap();
    // 4 × varmail's file set (20 files of ~16 KiB, 80 % made up front, then churned)
    assert!(left > 4 * 100_000, "pollution left {left} bytes");
    // the measured run's setup started with all of them in place
    assert_eq!(seen.lock().unwrap().unwrap(), left);
    // and they are gone after the run; the measured run's own file set is not
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["bigfileset"]);
}

/// The memory cgroups of this process under its own cgroup.
fn our_cgroups() -> Vec<PathBuf> {
    let Ok(place) = cgroup::here() else {
        return Vec::new();
    };
    let prefix = format!("moafs-bench-{}-", std::process::id());
    std::fs::read_dir(place.dir())
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            e.file_name()
                .to_string_lossy()
                .starts_with(&prefix)
                .then(|| e.path())
        })
        .collect()
}

#[test]
fn a_memory_limit_is_in_force_for_the_run_and_removed_after_it_also_on_error() {
    if !is_root() || cgroup::here().is_err() {
        eprintln!("skipped: needs root and a memory controller");
        return;
    }
    let _one = cgroup::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let home = cgroup::cgroup_of(std::process::id()).unwrap();
    // every test thread of this process is in the cgroup while the run lasts: a limit no
    // test comes near
    let limit = 4u64 << 30;
    let h = Hygiene {
        memory_limit: Some(limit),
        ..hygiene(CacheState::Polluted)
    };
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (t, _, _) = Recording::new(tmp.path());
    let (_, run) = run_once(1, &small_varmail(), &h, Box::new(t)).unwrap();
    assert_eq!(run.memory_limit, Some(limit));
    let m = run.memory.unwrap();
    assert_eq!(m.limit, limit);
    // the pollution runs' and the measured run's pages were charged to it
    assert!(
        m.peak.unwrap() >= run.pollution_bytes.unwrap(),
        "{m:?} vs {:?}",
        run.pollution_bytes
    );
    assert_eq!(cgroup::cgroup_of(std::process::id()).unwrap(), home);
    assert_eq!(our_cgroups(), Vec::<PathBuf>::new());
    // a run that fails inside the cgroup: back home, cgroup gone
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (mut t, _, _) = Recording::new(tmp.path());
    t.fail_mkdir = true;
    let h = Hygiene {
        memory_limit: Some(limit),
        ..hygiene(CacheState::Fresh)
    };
    let err = run_once(1, &small_varmail(), &h, Box::new(t)).unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
    assert_eq!(cgroup::cgroup_of(std::process::id()).unwrap(), home);
    assert_eq!(our_cgroups(), Vec::<PathBuf>::new());
}

#[test]
fn a_memory_limit_needs_a_mounted_target() {
    let t = target::EngineTarget::in_memory(64 << 20).unwrap();
    let h = Hygiene {
        memory_limit: Some(1 << 30),
        ..Hygiene::default()
    };
    let err = run_once(1, &small_varmail(), &h, Box::new(t)).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Unsupported);
}

/// A managed ext4 on a loop device over an image in /dev/shm.
fn managed_ext4(backing: &Path) -> Option<managed::Managed> {
    let have = |p: &str| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !is_root() || !have("mkfs.ext4") || !have("losetup") {
        eprintln!("skipped: needs root, mkfs.ext4 and losetup");
        return None;
    }
    Some(
        managed::Managed::create(&managed::ManagedOptions {
            kind: managed::Kind::Ext4,
            size: 512 << 20,
            backing: backing.to_path_buf(),
            moafs: PathBuf::new(),
            mount_options: String::new(),
        })
        .unwrap(),
    )
}

#[test]
fn the_background_jobs_bytes_reach_the_device() {
    let backing = tempfile::tempdir_in("/dev/shm").unwrap();
    let Some(m) = managed_ext4(backing.path()) else {
        return;
    };
    let mnt = m.mount_point().to_path_buf();
    let written = || hygiene::block_device_written(&mnt).unwrap();
    for (fsync, lag) in [(true, 0), (false, 2 << 20)] {
        let plan = BackgroundPlan {
            fsync,
            budget: 16 << 20,
            writeback_lag: lag,
        };
        let before = written();
        let job = BackgroundJob::start(&mnt.join(format!("bg-{fsync}")), plan).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        let done = job.stop().unwrap();
        let at_device = written() - before;
        assert!(
            done.bytes > 2 * plan.budget,
            "{done:?}: rotated beyond the budget"
        );
        if fsync {
            assert_eq!(done.bytes_written_back, done.bytes);
        } else {
            // all but the newest `lag` bytes were sent to write-back
            assert!(
                done.bytes_written_back + lag + 100_000 >= done.bytes,
                "{done:?}"
            );
        }
        // everything sent to write-back is on the device (files are deleted only after
        // their write-back finished: truncation waits for it)
        assert!(
            at_device >= done.bytes_written_back,
            "fsync {fsync}: device saw {at_device} bytes, job {done:?}"
        );
    }
    drop(m);
    assert_eq!(std::fs::read_dir(backing.path()).unwrap().count(), 0);
}

#[test]
fn a_background_plan_keeps_files_within_its_budget_and_lags_by_a_tenth_of_memory() {
    let p = BackgroundPlan::new(false, 4 << 30, Some(2 << 30));
    assert_eq!(p.budget, 1 << 30);
    let ratio: u64 = std::fs::read_to_string("/proc/sys/vm/dirty_background_ratio")
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(10);
    assert_eq!(p.writeback_lag, (2u64 << 30) / 100 * ratio);
    // without a limit: paper 002's 4 GB, never more than half the budget
    let p = BackgroundPlan::new(true, 100 << 20, None);
    assert_eq!(p.budget, 25 << 20);
    assert_eq!(p.writeback_lag, 25 << 19);
    assert!(p.fsync);
    // a nearly full target still gets a small budget
    assert_eq!(BackgroundPlan::new(false, 0, None).budget, 8 << 20);
}
