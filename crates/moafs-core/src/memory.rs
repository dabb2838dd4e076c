//! How much memory this process could still use: what the machine has available
//! (`MemAvailable` in `/proc/meminfo`, which counts reclaimable page cache as available, as
//! the kernel's own dirty limits do) and, in a memory cgroup, what is left below the
//! tightest limit of the process's cgroup and its ancestors (their reclaimable file cache
//! counted as left): cgroup v2's `memory.max` / `memory.high`, or v1's
//! `memory.limit_in_bytes` where the memory controller is on a v1 hierarchy. The engine's
//! memory budgets follow it (`fs/budget.rs`, issue 44).

use std::path::{Path, PathBuf};

/// Bytes this process could still use: the least of what the machine and each memory
/// cgroup above the process has left. `None` when nothing can be read (no `/proc`).
pub fn available() -> Option<u64> {
    available_in(Path::new("/proc"), Path::new("/sys/fs/cgroup"))
}

/// [`available`] with the roots of procfs and the cgroup v2 hierarchy given (for tests).
pub fn available_in(proc_root: &Path, cgroup_root: &Path) -> Option<u64> {
    let machine = std::fs::read_to_string(proc_root.join("meminfo"))
        .ok()
        .and_then(|s| mem_available(&s));
    let group = std::fs::read_to_string(proc_root.join("self/cgroup"))
        .ok()
        .and_then(|s| cgroup_path(&s))
        .and_then(|(files, p)| cgroup_room(&cgroup_root.join(files.mount), &p, files));
    match (machine, group) {
        (Some(m), Some(g)) => Some(m.min(g)),
        (m, g) => m.or(g),
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The files of a memory cgroup, by version.
#[derive(Debug, PartialEq, Eq)]
struct Files {
    /// Where the hierarchy is mounted, under `/sys/fs/cgroup`.
    mount: &'static str,
    limits: &'static [&'static str],
    usage: &'static str,
    /// The `memory.stat` fields of its file cache and, within it, of shared memory (tmpfs,
    /// /dev/shm: not reclaimable without swap).
    cache: &'static str,
    shmem: &'static str,
}

const V2: Files = Files {
    mount: "",
    limits: &["memory.max", "memory.high"],
    usage: "memory.current",
    cache: "file",
    shmem: "shmem",
};

const V1: Files = Files {
    mount: "memory",
    limits: &["memory.limit_in_bytes"],
    usage: "memory.usage_in_bytes",
    cache: "total_cache",
    shmem: "total_shmem",
};

/// The memory cgroup of a `/proc/self/cgroup` text: the v1 memory controller's line if
/// there is one (then v2 has no memory files), else the v2 (`0::`) line.
fn cgroup_path(text: &str) -> Option<(&'static Files, PathBuf)> {
    let v1 = text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        ctl.split(',').any(|c| c == "memory").then_some(path)
    });
    let (files, rel) = match v1 {
        Some(p) => (&V1, p),
        None => (&V2, text.lines().find_map(|l| l.strip_prefix("0::"))?),
    };
    Some((files, PathBuf::from(rel.trim().trim_start_matches('/'))))
}

/// What is left below the tightest limit of `rel`'s cgroup and its ancestors under `root`:
/// per level with a limit, the limit less what the group uses but cannot give back (its
/// usage less its file cache, shared memory not counted as cache). `None` when no level has a limit.
fn cgroup_room(root: &Path, rel: &Path, files: &Files) -> Option<u64> {
    let mut room: Option<u64> = None;
    let mut dir = Some(rel);
    while let Some(d) = dir {
        let at = root.join(d);
        let limit = files
            .limits
            .iter()
            .filter_map(|f| read_limit(&at.join(f)))
            .min();
        if let Some(limit) = limit {
            let current = read_u64(&at.join(files.usage)).unwrap_or(0);
            let stat = std::fs::read_to_string(at.join("memory.stat")).unwrap_or_default();
            let file = stat_field(&stat, files.cache)
                .unwrap_or(0)
                .saturating_sub(stat_field(&stat, files.shmem).unwrap_or(0));
            let left = limit.saturating_sub(current.saturating_sub(file));
            room = Some(room.map_or(left, |r| r.min(left)));
        }
        // (the root cgroup has no limits: not read)
        dir = d.parent().filter(|p| !p.as_os_str().is_empty());
    }
    room
}

/// A limit file's value: bytes, or `None` for no limit (v2's `max`, v1's page-rounded
/// `i64::MAX`) or an unreadable file.
fn read_limit(path: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    s.trim().parse().ok().filter(|&v: &u64| v < 1 << 62)
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A field of a `memory.stat` text.
fn stat_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(name))
            .then(|| it.next())
            .flatten()?
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn the_tightest_of_the_machine_and_each_cgroup_level_counts() {
        let t = tempfile::tempdir().unwrap();
        let (proc_root, cg) = (t.path().join("proc"), t.path().join("cg"));
        write(
            &proc_root.join("meminfo"),
            "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n",
        );
        // no cgroup file: the machine alone
        assert_eq!(
            available_in(&proc_root, &cg),
            Some(8_000_000 * 1024),
            "MemAvailable"
        );
        write(&proc_root.join("self/cgroup"), "0::/a/b\n");
        // no limit anywhere: still the machine
        write(&cg.join("a/b/memory.max"), "max\n");
        assert_eq!(available_in(&proc_root, &cg), Some(8_000_000 * 1024));
        // a 1 GiB limit two levels up, 600 MiB used of which 200 MiB file cache: 624 MiB left
        write(&cg.join("a/memory.max"), &format!("{}\n", 1u64 << 30));
        write(&cg.join("a/memory.current"), &format!("{}\n", 600u64 << 20));
        write(
            &cg.join("a/memory.stat"),
            &format!("anon 1\nfile {}\n", 200u64 << 20),
        );
        assert_eq!(available_in(&proc_root, &cg), Some(624 << 20));
        // a tighter memory.high below it: 300 MiB, 100 MiB used
        write(&cg.join("a/b/memory.high"), &format!("{}\n", 300u64 << 20));
        write(
            &cg.join("a/b/memory.current"),
            &format!("{}\n", 100u64 << 20),
        );
        assert_eq!(available_in(&proc_root, &cg), Some(200 << 20));
        // over its limit: nothing left, not an underflow
        write(
            &cg.join("a/b/memory.current"),
            &format!("{}\n", 400u64 << 20),
        );
        assert_eq!(available_in(&proc_root, &cg), Some(0));
    }

    #[test]
    fn nothing_readable_is_none() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(available_in(t.path(), t.path()), None);
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(cgroup_path("1:name=systemd:/x\n"), None);
        assert_eq!(cgroup_path("0::/\n"), Some((&V2, PathBuf::new())));
        assert_eq!(
            cgroup_path("4:memory:/p/q\n1:cpu:/\n0::/\n"),
            Some((&V1, PathBuf::from("p/q")))
        );
    }

    #[test]
    fn a_v1_memory_controller_is_read_too() {
        let t = tempfile::tempdir().unwrap();
        let (proc_root, cg) = (t.path().join("proc"), t.path().join("cg"));
        write(&proc_root.join("meminfo"), "MemAvailable: 8000000 kB\n");
        write(&proc_root.join("self/cgroup"), "4:memory:/api/x\n0::/\n");
        let m = cg.join("memory");
        // v1 says "no limit" with a page-rounded i64::MAX
        write(
            &m.join("api/x/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        assert_eq!(available_in(&proc_root, &cg), Some(8_000_000 * 1024));
        write(
            &m.join("api/x/memory.limit_in_bytes"),
            &format!("{}\n", 512u64 << 20),
        );
        write(
            &m.join("api/x/memory.usage_in_bytes"),
            &format!("{}\n", 400u64 << 20),
        );
        write(
            &m.join("api/x/memory.stat"),
            &format!("cache 1\ntotal_cache {}\n", 300u64 << 20),
        );
        assert_eq!(available_in(&proc_root, &cg), Some(412 << 20));
        // 100 MiB of that cache is tmpfs: not reclaimable
        let stat = format!(
            "total_cache {}\ntotal_shmem {}\n",
            300u64 << 20,
            100u64 << 20
        );
        write(&m.join("api/x/memory.stat"), &stat);
        assert_eq!(available_in(&proc_root, &cg), Some(312 << 20));
    }
}
