//! The environment a result was measured in (issue 20), recorded in every result file and
//! shown in the report's header: kernel, CPU, governor, memory and the memory limit in force,
//! the backing storage with its scheduler, the commit of moafs, the tools' versions, a run id;
//! and per run the page cache's state before the measured phase ([`MemInfo`]) and the mount
//! options of the target ([`mount_of`]).
//!
//! Nothing here fails: what cannot be read is "unknown" (or `None`, a JSON null).

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `uname -r` and `uname -v`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kernel {
    pub release: String,
    pub version: String,
}

/// Processors: what this process may use (`available_parallelism`, which honours affinity
/// and cgroup quotas) and the kernel's online list (`/sys/devices/system/cpu/online`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cpus {
    pub available: usize,
    pub online: usize,
    pub online_list: String,
}

/// The storage under the `--backing` directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backing {
    pub path: String,
    /// Its file system (from /proc/mounts: the longest mount point above it).
    pub fs_type: String,
    /// The mount's source (`/dev/vda`, `tmpfs`, …) and options.
    pub source: String,
    pub mount_options: String,
    /// The block device under it (the whole disk of a partition), by its device number;
    /// `None` for memory and network file systems.
    pub device: Option<String>,
    /// The device's I/O scheduler (`/sys/block/DEV/queue/scheduler`, the bracketed one).
    pub scheduler: Option<String>,
    /// Whether the kernel thinks the device rotates (`queue/rotational`).
    pub rotational: Option<bool>,
}

/// Where a result was measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Environment {
    /// `<UTC yyyymmddThhmmss>-<short commit>-<4 random hex digits>`.
    pub run_id: String,
    /// When the environment was captured, UTC (RFC 3339).
    pub time: String,
    pub hostname: String,
    pub kernel: Kernel,
    pub cpu_model: String,
    pub cpus: Cpus,
    /// The CPU frequency governor (`scaling_governor` of every CPU: one name, or the distinct
    /// names joined by `,`), or "none" where there is no cpufreq (VMs, containers).
    pub governor: String,
    /// MemTotal of /proc/meminfo, bytes.
    pub memory_bytes: u64,
    /// The memory limit in force on this process: the smallest `memory.max` (cgroup v2) or
    /// `memory.limit_in_bytes` (v1) of its cgroup and the cgroups above it; "max" for none,
    /// "unknown" when no cgroup file could be read. Bytes as a decimal string otherwise.
    pub memory_limit: String,
    /// The file the limit came from.
    pub memory_limit_source: Option<String>,
    pub backing: Option<Backing>,
    /// The commit of moafs the binary was built from (`-dirty` with uncommitted changes to
    /// tracked files; "unknown" outside a git checkout).
    pub commit: String,
    pub moafs_version: String,
    /// Each tool's version line (its version flag's output), `None` where it is not
    /// installed or did not answer within 5 s.
    pub tool_versions: BTreeMap<String, Option<String>>,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn or_unknown(s: Option<String>) -> String {
    s.filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

impl Environment {
    /// Captures the environment now; `commit` and `moafs_version` are the binary's (its build
    /// script knows the commit), `backing` the directory managed targets live in.
    pub fn capture(commit: &str, moafs_version: &str, backing: Option<&Path>) -> Environment {
        let now = jiff::Timestamp::now();
        let online_list = or_unknown(read("/sys/devices/system/cpu/online"));
        let commit = if commit.is_empty() {
            "unknown".to_string()
        } else {
            commit.to_string()
        };
        let (memory_limit, memory_limit_source) = memory_limit();
        Environment {
            // one id for every result file of a run made of several commands (the evidence
            // run, `scripts/evidence.sh`), else one of its own
            run_id: match std::env::var("MOAFS_RUN_ID") {
                Ok(id) if !id.trim().is_empty() => id.trim().to_string(),
                _ => run_id(&now.strftime("%Y%m%dT%H%M%S").to_string(), &commit),
            },
            time: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            hostname: or_unknown(read("/proc/sys/kernel/hostname")),
            kernel: Kernel {
                release: or_unknown(read("/proc/sys/kernel/osrelease")),
                version: or_unknown(read("/proc/sys/kernel/version")),
            },
            cpu_model: or_unknown(read("/proc/cpuinfo").and_then(|c| cpu_model(&c))),
            cpus: Cpus {
                available: std::thread::available_parallelism().map_or(0, |n| n.get()),
                online: count_cpu_list(&online_list),
                online_list,
            },
            governor: governor(),
            memory_bytes: read("/proc/meminfo")
                .and_then(|m| meminfo_kb(&m, "MemTotal"))
                .map_or(0, |kb| kb * 1024),
            memory_limit,
            memory_limit_source,
            backing: backing.map(backing_of),
            commit,
            moafs_version: moafs_version.to_string(),
            tool_versions: tool_versions(),
        }
    }

    /// The header of a text report: a few lines, each starting with two spaces.
    pub fn header(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let limit = match self.memory_limit.parse::<u64>() {
            Ok(b) => format!("{:.1} GiB", gib(b)),
            Err(_) => self.memory_limit.clone(),
        };
        let mut s = format!(
            "  run_id {}; moafs {} (commit {}); {} on {}\n  kernel {} ({}); CPU {} × {} \
             online ({} available), governor {}; memory {:.1} GiB, limit {}\n",
            self.run_id,
            self.moafs_version,
            self.commit,
            self.time,
            self.hostname,
            self.kernel.release,
            self.kernel.version,
            self.cpu_model,
            self.cpus.online,
            self.cpus.available,
            self.governor,
            gib(self.memory_bytes),
            limit,
        );
        if let Some(b) = &self.backing {
            s.push_str(&format!(
                "  backing {}: {} on {} ({}), device {}, scheduler {}, {}\n",
                b.path,
                b.fs_type,
                b.source,
                b.mount_options,
                b.device.as_deref().unwrap_or("none"),
                b.scheduler.as_deref().unwrap_or("none"),
                match b.rotational {
                    Some(true) => "rotational",
                    Some(false) => "not rotational",
                    None => "rotation unknown",
                }
            ));
        }
        let tools: Vec<String> = self
            .tool_versions
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.as_deref().unwrap_or("-")))
            .collect();
        s.push_str(&format!("  tools: {}\n", tools.join("; ")));
        s
    }
}

/// `<time>-<first 7 characters of the commit>-<4 random hex digits>`.
pub fn run_id(time: &str, commit: &str) -> String {
    let short: String = commit.chars().take(7).collect();
    format!("{time}-{short}-{:04x}", rand::random::<u16>())
}

/// The first `model name` (x86) or `Processor`/`cpu model` line of /proc/cpuinfo.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Processor", "cpu model", "Model"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// CPUs in a kernel list such as `0-3,8,10-11`.
pub fn count_cpu_list(list: &str) -> usize {
    list.split(',')
        .filter_map(|part| {
            let part = part.trim();
            match part.split_once('-') {
                Some((a, b)) => Some(b.parse::<usize>().ok()? + 1 - a.parse::<usize>().ok()?),
                None => part.parse::<usize>().ok().map(|_| 1),
            }
        })
        .sum()
}

fn governor() -> String {
    let mut names: Vec<String> = std::fs::read_dir("/sys/devices/system/cpu")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("cpu") && n[3..].chars().all(|c| c.is_ascii_digit()) && n.len() > 3
        })
        .filter_map(|e| {
            std::fs::read_to_string(e.path().join("cpufreq/scaling_governor"))
                .ok()
                .map(|s| s.trim().to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(",")
    }
}

/// A `/proc/meminfo` field in kB.
pub fn meminfo_kb(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then(|| v.split_whitespace().next()?.parse().ok())?
    })
}

/// The cgroup paths of this process from `/proc/self/cgroup` text: the v2 path (`0::PATH`)
/// and the v1 memory controller's path (`N:memory:PATH`, or a list holding `memory`).
pub fn cgroup_paths(text: &str) -> (Option<String>, Option<String>) {
    let mut v2 = None;
    let mut v1 = None;
    for l in text.lines() {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = match (f.next(), f.next(), f.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        if ctrl.is_empty() {
            v2 = Some(path.to_string());
        } else if ctrl.split(',').any(|c| c == "memory") {
            v1 = Some(path.to_string());
        }
    }
    (v2, v1)
}

/// v1 reports "no limit" as a page-rounded i64::MAX.
const V1_UNLIMITED: u64 = 1 << 62;

/// (limit, the file it came from): the smallest limit of the cgroup and its ancestors.
fn memory_limit() -> (String, Option<String>) {
    let (v2, v1) = cgroup_paths(&read("/proc/self/cgroup").unwrap_or_default());
    let mut candidates = Vec::new();
    if let Some(p) = &v2 {
        for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            candidates.extend(ancestors(root, p, "memory.max"));
        }
    }
    if let Some(p) = &v1 {
        candidates.extend(ancestors(
            "/sys/fs/cgroup/memory",
            p,
            "memory.limit_in_bytes",
        ));
    }
    let mut best: Option<(u64, String)> = None;
    let mut seen_any = None;
    for file in candidates {
        let Some(v) = read(&file) else { continue };
        seen_any.get_or_insert_with(|| file.clone());
        let Ok(bytes) = v.parse::<u64>() else {
            continue; // "max"
        };
        if bytes < V1_UNLIMITED && best.as_ref().is_none_or(|b| bytes < b.0) {
            best = Some((bytes, file));
        }
    }
    // cgroup v2 with the process in the root cgroup, which has no memory.max: no limit
    let v2_root = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .find(|r| v2.as_deref() == Some("/") && Path::new(r).join("cgroup.controllers").exists());
    match (best, seen_any, v2_root) {
        (Some((b, f)), _, _) => (b.to_string(), Some(f)),
        (None, Some(f), _) => ("max".to_string(), Some(f)),
        (None, None, Some(root)) => ("max".to_string(), Some(format!("{root} (root cgroup)"))),
        (None, None, None) => ("unknown".to_string(), None),
    }
}

/// `root/path/file` and the same file in every directory above it up to `root`.
fn ancestors(root: &str, path: &str, file: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = path.trim_end_matches('/').to_string();
    loop {
        out.push(format!("{root}{p}/{file}"));
        match p.rfind('/') {
            Some(i) if !p.is_empty() => p.truncate(i),
            _ => break,
        }
    }
    out
}

/// A line of /proc/mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MountEntry {
    pub source: String,
    pub mount_point: String,
    pub fs_type: String,
    pub options: String,
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The mount holding `path` (already canonical) in `/proc/mounts` text: the last mount at the
/// longest mount point that is `path` or above it (a later mount over the same point hides
/// the earlier one).
pub fn mount_in(mounts: &str, path: &Path) -> Option<MountEntry> {
    let mut best: Option<MountEntry> = None;
    for l in mounts.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() < 4 {
            continue;
        }
        let mp = unescape(f[1]);
        if !path.starts_with(&mp) {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|b| mp.len() >= b.mount_point.len())
        {
            best = Some(MountEntry {
                source: unescape(f[0]),
                mount_point: mp,
                fs_type: f[2].to_string(),
                options: f[3].to_string(),
            });
        }
    }
    best
}

/// The mount holding `path`, from this process's /proc/mounts.
pub fn mount_of(path: &Path) -> Option<MountEntry> {
    let canon = path.canonicalize().ok()?;
    mount_in(&std::fs::read_to_string("/proc/self/mounts").ok()?, &canon)
}

/// The bracketed entry of a `queue/scheduler` file (`none [mq-deadline] kyber` →
/// `mq-deadline`), or the only one.
pub fn active_scheduler(text: &str) -> Option<String> {
    let t = text.trim();
    if let (Some(a), Some(b)) = (t.find('['), t.find(']')) {
        return (a < b).then(|| t[a + 1..b].to_string());
    }
    (!t.is_empty() && !t.contains(' ')).then(|| t.to_string())
}

fn backing_of(path: &Path) -> Backing {
    let m = mount_of(path);
    // the block device by the directory's device number (a partition: its disk's queue)
    let disk = std::fs::metadata(path).ok().and_then(|md| {
        use std::os::unix::fs::MetadataExt;
        let dev = md.dev();
        let (maj, min) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
        let sys = std::fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).ok()?;
        let whole = if sys.join("partition").exists() {
            sys.parent()?.to_path_buf()
        } else {
            sys
        };
        Some(whole.file_name()?.to_string_lossy().into_owned())
    });
    let queue = |f: &str| {
        disk.as_ref()
            .and_then(|d| read(&format!("/sys/block/{d}/queue/{f}")))
    };
    Backing {
        path: path.display().to_string(),
        // no mount holds it in this process's view (a chroot whose root is no mount point):
        // the type statfs(2) tells
        fs_type: or_unknown(
            m.as_ref()
                .map(|m| m.fs_type.clone())
                .or_else(|| fs_type_by_magic(path)),
        ),
        source: or_unknown(m.as_ref().map(|m| m.source.clone())),
        mount_options: or_unknown(m.as_ref().map(|m| m.options.clone())),
        scheduler: queue("scheduler").and_then(|s| active_scheduler(&s)),
        rotational: queue("rotational").map(|r| r == "1"),
        device: disk,
    }
}

/// The type of the file system holding `path` by statfs(2)'s magic number, for the common ones.
fn fs_type_by_magic(path: &Path) -> Option<String> {
    use nix::sys::statfs as sf;
    let t = sf::statfs(path).ok()?.filesystem_type();
    let name = [
        (sf::EXT4_SUPER_MAGIC, "ext4"),
        (sf::XFS_SUPER_MAGIC, "xfs"),
        (sf::BTRFS_SUPER_MAGIC, "btrfs"),
        (sf::TMPFS_MAGIC, "tmpfs"),
        (sf::OVERLAYFS_SUPER_MAGIC, "overlay"),
        (sf::FUSE_SUPER_MAGIC, "fuse"),
    ]
    .into_iter()
    .find(|(m, _)| *m == t)?
    .1;
    Some(name.to_string())
}

/// The tools whose versions are recorded: name, arguments, and a word the version line holds
/// (else the first line with a digit).
const TOOLS: &[(&str, &[&str], &str)] = &[
    ("postmark", &[], "PostMark"),
    ("sysbench", &["--version"], ""),
    ("fio", &["--version"], ""),
    ("bonnie++", &[], "Version"),
    ("mkfs.ext4", &["-V"], ""),
    ("mkfs.xfs", &["-V"], ""),
    ("mkfs.btrfs", &["--version"], ""),
    ("fuse2fs", &["--version"], "fuse2fs"),
];

fn tool_versions() -> BTreeMap<String, Option<String>> {
    TOOLS
        .iter()
        .map(|(name, args, word)| (name.to_string(), tool_version(name, args, word)))
        .collect()
}

/// The version line `prog ARGS` prints (stdout and stderr; PostMark's prompt gets `quit`),
/// or `None` when it is missing or has not exited within 5 s (then it is killed).
fn tool_version(prog: &str, args: &[&str], word: &str) -> Option<String> {
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(b"quit\n");
    }
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut text = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut text);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut text);
    }
    version_line(&text, word)
}

/// The line of `text` holding `word` (when not empty), else the first holding a digit;
/// trimmed, at most 100 characters.
pub fn version_line(text: &str, word: &str) -> Option<String> {
    let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = if word.is_empty() {
        None
    } else {
        lines().find(|l| l.contains(word))
    }
    .or_else(|| lines().find(|l| l.chars().any(|c| c.is_ascii_digit())))?;
    let line = line.trim_start_matches("pm>").trim();
    Some(line.chars().take(100).collect())
}

/// The page cache's state (`/proc/meminfo`, bytes) at the start of a run's measured phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemInfo {
    pub mem_free_bytes: u64,
    pub cached_bytes: u64,
    pub dirty_bytes: u64,
    pub writeback_bytes: u64,
}

impl MemInfo {
    pub fn parse(meminfo: &str) -> Option<MemInfo> {
        let b = |k: &str| meminfo_kb(meminfo, k).map(|kb| kb * 1024);
        Some(MemInfo {
            mem_free_bytes: b("MemFree")?,
            cached_bytes: b("Cached")?,
            dirty_bytes: b("Dirty")?,
            writeback_bytes: b("Writeback")?,
        })
    }

    /// Now; `None` where /proc/meminfo cannot be read.
    pub fn now() -> Option<MemInfo> {
        MemInfo::parse(&std::fs::read_to_string("/proc/meminfo").ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_of_proc_and_sys_text() {
        let mi = "MemTotal:       24684084 kB\nMemFree:        1000 kB\nCached:  2000 kB\n\
                  SwapCached: 5 kB\nDirty:     3 kB\nWriteback:   0 kB\n";
        assert_eq!(meminfo_kb(mi, "MemTotal"), Some(24_684_084));
        // "Cached" is not "SwapCached"
        let m = MemInfo::parse(mi).unwrap();
        assert_eq!(
            (m.mem_free_bytes, m.cached_bytes, m.dirty_bytes),
            (1000 * 1024, 2000 * 1024, 3 * 1024)
        );
        assert_eq!(MemInfo::parse("MemFree: 1 kB\n"), None);
        assert_eq!(count_cpu_list("0-3,8,10-11"), 7);
        assert_eq!(count_cpu_list("0"), 1);
        assert_eq!(
            cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n").as_deref(),
            Some("AMD EPYC 7B13")
        );
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq\n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(active_scheduler("none").as_deref(), Some("none"));
        let cg = "4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice/x.scope\n";
        assert_eq!(
            cgroup_paths(cg),
            (Some("/user.slice/x.scope".into()), Some("/a/b".into()))
        );
        assert_eq!(
            ancestors("/sys/fs/cgroup", "/a/b", "memory.max"),
            [
                "/sys/fs/cgroup/a/b/memory.max",
                "/sys/fs/cgroup/a/memory.max",
                "/sys/fs/cgroup/memory.max"
            ]
        );
        assert_eq!(ancestors("/r", "/", "f"), ["/r/f"]);
        assert_eq!(
            version_line("mke2fs 1.47.0 (5-Feb-2023)\n\tUsing EXT2FS", "").as_deref(),
            Some("mke2fs 1.47.0 (5-Feb-2023)")
        );
        assert_eq!(
            version_line(
                "You must use -u\nusage:\n [-s size]\n\nVersion: 2.00a\n",
                "Version"
            )
            .as_deref(),
            Some("Version: 2.00a")
        );
        assert_eq!(version_line("no digits here", ""), None);
        let id = run_id("20261126T071221", "ae7f7db0123-dirty");
        assert!(
            id.starts_with("20261126T071221-ae7f7db-") && id.len() == 28,
            "{id}"
        );
    }

    #[test]
    fn the_mount_holding_a_path() {
        let mounts = "/dev/vda / ext4 rw,relatime 0 0\n\
                      tmpfs /dev/shm tmpfs rw,size=10k 0 0\n\
                      /dev/loop3 /dev/shm/w\\040x/mnt ext4 rw,noatime 0 0\n\
                      /dev/loop4 /dev/shm/w\\040x/mnt xfs rw 0 0\n";
        let m = mount_in(mounts, Path::new("/dev/shm/a")).unwrap();
        assert_eq!(
            (m.fs_type.as_str(), m.options.as_str()),
            ("tmpfs", "rw,size=10k")
        );
        // escaped spaces; the later mount over the same point wins
        let m = mount_in(mounts, Path::new("/dev/shm/w x/mnt/d")).unwrap();
        assert_eq!(
            (m.source.as_str(), m.fs_type.as_str()),
            ("/dev/loop4", "xfs")
        );
        // a path component, not a string prefix
        let m = mount_in(mounts, Path::new("/dev/shmx")).unwrap();
        assert_eq!(m.mount_point, "/");
    }

    #[test]
    fn capture_reads_this_machine() {
        let e = Environment::capture("abc1234", "9.9.9", Some(Path::new("/")));
        assert_eq!(e.commit, "abc1234");
        assert!(!e.kernel.release.is_empty() && e.kernel.release != "unknown");
        assert!(e.cpus.available >= 1 && e.cpus.online >= 1, "{:?}", e.cpus);
        assert!(e.memory_bytes > 0);
        assert!(!e.memory_limit.is_empty());
        let b = e.backing.as_ref().unwrap();
        assert_eq!(b.path, "/");
        assert_ne!(b.fs_type, "unknown");
        assert_eq!(e.tool_versions.len(), TOOLS.len());
        assert!(
            e.time.ends_with('Z') && e.run_id.contains("-abc1234-"),
            "{e:?}"
        );
        assert!(e.header().contains("kernel ") && e.header().contains("run_id "));
        let unknown = Environment::capture("", "9.9.9", None);
        assert_eq!(unknown.commit, "unknown");
        assert!(unknown.backing.is_none());
        assert!(MemInfo::now().is_some());
    }
}
