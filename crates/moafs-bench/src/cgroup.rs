//! A memory limit for the benchmark's own process (paper 002 ran on a 4 GB machine; on a big
//! one the page cache never fills and scenario C cannot show).
//!
//! [`MemoryCgroup::create`] makes a child of the cgroup this process is in, in the hierarchy
//! that has the memory controller — cgroup v2 when the controller is available there, else
//! the v1 `memory` hierarchy (machines booted with the hybrid layout keep it there) — and
//! sets its hard limit (`memory.max`, v1 `memory.limit_in_bytes`; `memory.high` is left
//! alone: it throttles allocations by sleeping, which would measure the throttle rather than
//! the cache). [`MemoryCgroup::enter`] moves the whole process (every thread) into it;
//! dropping the guard moves the process back and removes the cgroup, also when a run fails;
//! [`cleanup_active`] does the same from a Ctrl-C handler that is about to exit.
//!
//! The kernel charges a page-cache page to the cgroup of the task that first touches it, so
//! while the process is inside, the page cache of everything the workload reads or writes —
//! through a kernel file system or through FUSE — counts against the limit. Processes the
//! harness started before entering (a FUSE daemon: moafs, fuse2fs) stay where they were:
//! their own memory (moafs's block cache) and the image's pages they touch are the file
//! system's, bounded by its own options.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Which cgroup interface holds the memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    V1,
    V2,
}

/// The memory controller's hierarchy and this process's cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub version: Version,
    /// Where the hierarchy is mounted.
    pub mount: PathBuf,
    /// This process's cgroup, relative to the mount (`/` for the root).
    pub path: String,
}

impl Place {
    /// The process's cgroup directory.
    pub fn dir(&self) -> PathBuf {
        self.mount.join(self.path.trim_start_matches('/'))
    }
}

/// Where the memory controller is, from `/proc/self/mountinfo` and `/proc/self/cgroup`
/// text; `controllers` answers what a v2 mount's `cgroup.controllers` lists.
pub fn locate(
    mountinfo: &str,
    proc_cgroup: &str,
    controllers: impl Fn(&Path) -> Option<String>,
) -> Result<Place, String> {
    let mut v2 = None;
    let mut v1 = None;
    for line in mountinfo.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount = left.split(' ').nth(4).map(|m| m.replace("\\040", " "));
        let mut r = right.split(' ');
        let (fstype, _, superopts) = (r.next(), r.next(), r.next().unwrap_or(""));
        match (fstype, mount) {
            (Some("cgroup2"), Some(m)) if v2.is_none() => v2 = Some(PathBuf::from(m)),
            (Some("cgroup"), Some(m)) if superopts.split(',').any(|o| o == "memory") => {
                v1 = Some(PathBuf::from(m))
            }
            _ => {}
        }
    }
    let path_of = |want: &dyn Fn(&str, &str) -> bool| {
        proc_cgroup.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (id, ctl, path) = (f.next()?, f.next()?, f.next()?);
            want(id, ctl).then(|| path.to_string())
        })
    };
    if let Some(m) = &v2 {
        let has_memory =
            controllers(m).is_some_and(|c| c.split_whitespace().any(|x| x == "memory"));
        if has_memory {
            let path = path_of(&|id, ctl| id == "0" && ctl.is_empty())
                .ok_or("cgroup v2: no 0:: line in /proc/self/cgroup")?;
            return Ok(Place {
                version: Version::V2,
                mount: m.clone(),
                path,
            });
        }
    }
    if let Some(m) = v1 {
        let path = path_of(&|_, ctl| ctl.split(',').any(|c| c == "memory"))
            .ok_or("cgroup v1: no memory line in /proc/self/cgroup")?;
        return Ok(Place {
            version: Version::V1,
            mount: m,
            path,
        });
    }
    Err(match v2 {
        Some(m) => format!(
            "the memory controller is not available: cgroup v2 at {} does not offer it \
             (cgroup.controllers) and no cgroup v1 memory hierarchy is mounted",
            m.display()
        ),
        None => "no cgroup v2 nor cgroup v1 memory hierarchy is mounted".to_string(),
    })
}

/// This process's [`Place`].
pub fn here() -> io::Result<Place> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    locate(&mountinfo, &own, |m| {
        std::fs::read_to_string(m.join("cgroup.controllers")).ok()
    })
    .map_err(|e| io::Error::new(io::ErrorKind::Unsupported, e))
}

/// What a cgroup saw while the process was in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryUse {
    /// The hard limit in force, bytes.
    pub limit: u64,
    /// Peak usage (v2 `memory.peak`, v1 `memory.max_usage_in_bytes`), bytes; page cache
    /// included.
    pub peak: Option<u64>,
    /// Times usage hit the limit (v2 `memory.events` `max`, v1 `memory.failcnt`).
    pub limit_hits: Option<u64>,
}

/// The cgroup the process is in while a [`MemoryCgroup`] has it (for [`cleanup_active`]).
static ACTIVE: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A child cgroup with a memory limit; removed on drop (the process moved back first).
#[derive(Debug)]
pub struct MemoryCgroup {
    place: Place,
    dir: PathBuf,
    limit: u64,
    /// The process's cgroup to go back to, once entered.
    home: Option<PathBuf>,
    /// `+memory` written to the parent's `cgroup.subtree_control` by us (v2): undone on drop.
    enabled_controller: bool,
}

fn write(path: &Path, what: &str) -> io::Result<()> {
    std::fs::write(path, what).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{}: {e} (writing {what:?})", path.display()),
        )
    })
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

impl MemoryCgroup {
    /// Makes `moafs-bench-PID-N` under this process's cgroup with a hard limit of `limit`
    /// bytes (root). Stale cgroups of dead `moafs bench` processes there are removed first.
    pub fn create(limit: u64) -> io::Result<MemoryCgroup> {
        if !nix::unistd::geteuid().is_root() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a memory limit needs root (it makes a cgroup)",
            ));
        }
        Self::create_in(here()?, limit)
    }

    /// As [`create`](Self::create) under `place`.
    pub fn create_in(place: Place, limit: u64) -> io::Result<MemoryCgroup> {
        if limit < (16 << 20) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("memory limit {limit} bytes: at least 16 MiB"),
            ));
        }
        let parent = place.dir();
        remove_stale(&parent);
        let mut enabled_controller = false;
        if place.version == Version::V2 {
            let sub = parent.join("cgroup.subtree_control");
            let on = std::fs::read_to_string(&sub)?;
            if !on.split_whitespace().any(|c| c == "memory") {
                if place.path != "/" {
                    // a non-root cgroup with processes cannot pass controllers down ("no
                    // internal processes") and the process could not come back to it
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!(
                            "cgroup v2: this process is in {} (not the root) and the memory \
                             controller is not enabled below it; run moafs bench from the root \
                             cgroup",
                            place.path
                        ),
                    ));
                }
                write(&sub, "+memory")?;
                enabled_controller = true;
            }
        }
        let dir = parent.join(format!(
            "moafs-bench-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let cg = MemoryCgroup {
            place,
            dir,
            limit,
            home: None,
            enabled_controller,
        };
        // from here on an error drops `cg`, which removes the directory
        match cg.place.version {
            Version::V2 => {
                write(&cg.dir.join("memory.max"), &limit.to_string())?;
                let swap = cg.dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
            }
            Version::V1 => write(&cg.dir.join("memory.limit_in_bytes"), &limit.to_string())?,
        }
        Ok(cg)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn version(&self) -> Version {
        self.place.version
    }

    /// The hard limit as the kernel holds it (rounded to pages).
    pub fn limit(&self) -> io::Result<u64> {
        let f = match self.place.version {
            Version::V2 => "memory.max",
            Version::V1 => "memory.limit_in_bytes",
        };
        read_u64(&self.dir.join(f))
            .ok_or_else(|| io::Error::other(format!("cannot read {}", self.dir.join(f).display())))
    }

    /// The limit asked for.
    pub fn requested_limit(&self) -> u64 {
        self.limit
    }

    /// Current usage, bytes (page cache included).
    pub fn usage(&self) -> Option<u64> {
        read_u64(&self.dir.join(match self.place.version {
            Version::V2 => "memory.current",
            Version::V1 => "memory.usage_in_bytes",
        }))
    }

    /// Limit, peak and hits so far.
    pub fn memory_use(&self) -> MemoryUse {
        let (peak, hits) = match self.place.version {
            Version::V2 => (
                read_u64(&self.dir.join("memory.peak")),
                std::fs::read_to_string(self.dir.join("memory.events"))
                    .ok()
                    .and_then(|s| {
                        s.lines().find_map(|l| {
                            l.strip_prefix("max ").and_then(|v| v.trim().parse().ok())
                        })
                    }),
            ),
            Version::V1 => (
                read_u64(&self.dir.join("memory.max_usage_in_bytes")),
                read_u64(&self.dir.join("memory.failcnt")),
            ),
        };
        MemoryUse {
            limit: self.limit().unwrap_or(self.limit),
            peak,
            limit_hits: hits,
        }
    }

    /// Moves this process (all its threads) into the cgroup.
    pub fn enter(&mut self) -> io::Result<()> {
        if self.home.is_some() {
            return Ok(());
        }
        let home = self.place.dir();
        self.move_pid(std::process::id())?;
        *ACTIVE.lock().unwrap_or_else(|e| e.into_inner()) = Some((self.dir.clone(), home.clone()));
        self.home = Some(home);
        Ok(())
    }

    /// Moves process `pid` into the cgroup (its threads too).
    pub fn move_pid(&self, pid: u32) -> io::Result<()> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }

    /// Moves the process back where it was (no-op when not entered).
    pub fn leave(&mut self) -> io::Result<()> {
        if let Some(home) = self.home.take() {
            *ACTIVE.lock().unwrap_or_else(|e| e.into_inner()) = None;
            write(&home.join("cgroup.procs"), &std::process::id().to_string())?;
        }
        Ok(())
    }

    /// Leaves and removes the cgroup, reporting errors (drop does the same silently).
    pub fn remove(mut self) -> io::Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> io::Result<()> {
        let left = self.leave();
        let removed = remove_dir_retrying(&self.dir);
        if self.enabled_controller {
            self.enabled_controller = false;
            // fails while other children use the controller: then it stays on
            let _ = std::fs::write(self.place.dir().join("cgroup.subtree_control"), "-memory");
        }
        left.and(removed)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("moafs bench: removing cgroup {}: {e}", self.dir.display());
        }
    }
}

/// rmdir, retrying for a moment: a task that just left may still be listed.
fn remove_dir_retrying(dir: &Path) -> io::Result<()> {
    let mut last = Ok(());
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Err(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    last.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))
}

/// Removes `moafs-bench-PID-N` children of `parent` whose process is gone and that are empty.
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("moafs-bench-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let empty = std::fs::read_to_string(e.path().join("cgroup.procs"))
            .is_ok_and(|s| s.trim().is_empty());
        if pid != std::process::id() && !pid_alive(pid) && empty {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Moves the process out of the cgroup it entered and removes it: for a Ctrl-C handler that
/// exits at once (the guard's drop does not run then).
pub fn cleanup_active() {
    let active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((dir, home)) = active {
        let _ = std::fs::write(home.join("cgroup.procs"), std::process::id().to_string());
        let _ = remove_dir_retrying(&dir);
    }
}

/// The cgroup directory (in the memory hierarchy) process `pid` is in.
pub fn cgroup_of(pid: u32) -> io::Result<PathBuf> {
    let place = here()?;
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let path = own
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (id, ctl, path) = (f.next()?, f.next()?, f.next()?);
            let hit = match place.version {
                Version::V2 => id == "0" && ctl.is_empty(),
                Version::V1 => ctl.split(',').any(|c| c == "memory"),
            };
            hit.then(|| path.to_string())
        })
        .ok_or_else(|| io::Error::other(format!("no memory cgroup for {pid}")))?;
    Ok(place.mount.join(path.trim_start_matches('/')))
}

/// Tests that move the test process into a cgroup take turns.
#[cfg(test)]
pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_SELF: &str = "9:name=systemd:/\n4:memory:/jobs/abc\n1:cpu:/\n0::/\n";
    const PURE: &str = "40 30 0:36 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

    #[test]
    fn finds_the_memory_controller_in_v2_or_v1() {
        // v2 offers memory: v2, the 0:: path
        let p = locate(PURE, "0::/user.slice/s\n", |_| {
            Some("cpu io memory pids".into())
        })
        .unwrap();
        assert_eq!(p.version, Version::V2);
        assert_eq!(p.dir(), Path::new("/sys/fs/cgroup/user.slice/s"));
        // hybrid: the unified mount lacks memory, the v1 memory hierarchy has it
        let p = locate(HYBRID, HYBRID_SELF, |_| Some("hugetlb\n".into())).unwrap();
        assert_eq!(p.version, Version::V1);
        assert_eq!(p.dir(), Path::new("/sys/fs/cgroup/memory/jobs/abc"));
        // v2 without memory and no v1 memory: a clear error
        let e = locate(PURE, "0::/\n", |_| Some("cpu io".into())).unwrap_err();
        assert!(e.contains("memory controller is not available"), "{e}");
        assert!(locate("", "", |_| None).unwrap_err().contains("no cgroup"));
    }

    /// The real thing (root, and a memory controller: here the v1 hierarchy).
    #[test]
    fn creates_limits_enters_and_removes_a_cgroup() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let place = match here() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        assert!(
            MemoryCgroup::create_in(place.clone(), 1 << 20).is_err(),
            "too small"
        );
        let cg = MemoryCgroup::create_in(place.clone(), 256 << 20).unwrap();
        let dir = cg.dir().to_path_buf();
        assert!(dir.is_dir());
        assert_eq!(cg.limit().unwrap(), 256 << 20);
        // a child process moved in is charged there; the cgroup cannot go while it is in it
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        cg.move_pid(child.id()).unwrap();
        assert_eq!(cgroup_of(child.id()).unwrap(), dir);
        assert!(
            std::fs::remove_dir(&dir).is_err(),
            "busy while a process is in it"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        cg.remove().unwrap();
        assert!(!dir.exists());
        // this process (every test thread: a limit no test comes near): in, page cache
        // charged to it, and back out
        let _one = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let home = cgroup_of(std::process::id()).unwrap();
        let mut cg = MemoryCgroup::create_in(place.clone(), 8 << 30).unwrap();
        let dir = cg.dir().to_path_buf();
        cg.enter().unwrap();
        assert_eq!(cgroup_of(std::process::id()).unwrap(), dir);
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), vec![7u8; 8 << 20]).unwrap();
        let u = cg.memory_use();
        assert_eq!(u.limit, 8 << 30);
        assert!(u.peak.unwrap() >= 4 << 20, "page cache charged: {u:?}");
        cg.leave().unwrap();
        assert_eq!(cgroup_of(std::process::id()).unwrap(), home);
        cg.remove().unwrap();
        assert!(!dir.exists());
        // dropped while inside (an error unwinding): back home and gone
        let mut cg = MemoryCgroup::create_in(place, 8 << 30).unwrap();
        let dir = cg.dir().to_path_buf();
        cg.enter().unwrap();
        drop(cg);
        assert_eq!(cgroup_of(std::process::id()).unwrap(), home);
        assert!(!dir.exists());
    }
}
