//! Helpers of the real-mount tests: running the binary, fsck, and [`Mounted`], a guard that
//! unmounts (`fusermount3 -u`, then `umount -l`) and waits for the daemon when dropped.
#![allow(dead_code)] // each test crate uses a part

use nix::sys::signal::Signal;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_moafs");

/// Bytes `len` of a pattern that differs by `seed` (xorshift).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `sig` to a process we started.
pub fn kill(pid: i32, sig: Signal) -> nix::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
}

/// Whether real mounts can run here.
pub fn can_mount() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let ok = root && Path::new("/dev/fuse").exists();
    if !ok {
        // A skipped test must not pass silently: skipping is an explicit choice.
        assert!(
            std::env::var_os("MOAFS_SKIP_MOUNT_TESTS").is_some(),
            "the real-mount tests need root and /dev/fuse (set MOAFS_SKIP_MOUNT_TESTS=1 to skip them)"
        );
        eprintln!("skipping: needs root and /dev/fuse (MOAFS_SKIP_MOUNT_TESTS is set)");
    }
    ok
}

pub fn moafs(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run moafs")
}

/// Runs `args` as user and group nobody (65534, no supplementary groups); its exit status
/// (stderr is dropped).
pub fn as_nobody(args: &[&std::ffi::OsStr]) -> std::process::ExitStatus {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

pub fn mkfs(img: &Path, size: &str) {
    let out = moafs(&["mkfs", "--size", size, p(img)]);
    assert!(out.status.success(), "mkfs failed: {}", text(&out.stderr));
}

/// A temporary directory with a fresh image `img` of `size` and an empty mount point `mnt`
/// in it (the directory goes when the guard drops: declare mounts after it).
pub fn fresh_image(size: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::TempDir::new().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    mkfs(&img, size);
    (tmp, img, mnt)
}

pub fn fsck(img: &Path) -> (i32, String) {
    let out = moafs(&["fsck", "-n", p(img)]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    (out.status.code().unwrap_or(-1), all)
}

pub fn assert_fsck_clean(img: &Path) {
    let (code, out) = fsck(img);
    assert_eq!(code, 0, "fsck not clean:\n{out}");
}

/// Whether `dir` is a mount point now.
pub fn is_mounted(dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().any(|l| {
        let mp = l.split(' ').nth(1).unwrap_or("");
        // /proc/mounts escapes spaces etc. as octal; our temp paths have none.
        Path::new(mp) == dir
    })
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => {
            // The state follows the parenthesised command name.
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            state.starts_with('Z') || state.starts_with('X')
        }
    }
}

pub fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if process_gone(pid) {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    process_gone(pid)
}

/// Checks that `path` holds the `acked` 4 KiB records `tag`, `tag + 1`, … that a writer
/// appended with an fsync after each and saw acknowledged.
pub fn check_records(path: &Path, tag: u8, acked: u64) {
    let got = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        got.len() as u64 >= acked * 4096,
        "{}: {} bytes, {acked} records acknowledged",
        path.display(),
        got.len()
    );
    for r in 0..acked {
        let rec = &got[(r * 4096) as usize..((r + 1) * 4096) as usize];
        assert!(
            rec.iter().all(|&b| b == tag.wrapping_add(r as u8)),
            "{}: record {r} of {acked} acknowledged is not what was written",
            path.display()
        );
    }
}

/// A live mount; unmounts and waits for its daemon on drop.
pub struct Mounted {
    pub dir: PathBuf,
    pub pid: i32,
    done: bool,
}

impl Mounted {
    /// Mounts with the given extra options (comma-separated, may be empty).
    pub fn new(img: &Path, dir: &Path, opts: &str) -> Mounted {
        match Mounted::try_new(img, dir, opts) {
            Ok(m) => m,
            Err(out) => panic!(
                "mount failed ({:?}): {}{}",
                out.status,
                text(&out.stdout),
                text(&out.stderr)
            ),
        }
    }

    pub fn try_new(img: &Path, dir: &Path, opts: &str) -> Result<Mounted, Output> {
        fs::create_dir_all(dir).unwrap();
        let pidfile = dir.with_extension("pid");
        let _ = fs::remove_file(&pidfile);
        let mut o = format!("pidfile={}", p(&pidfile));
        if !opts.is_empty() {
            o = format!("{o},{opts}");
        }
        let out = moafs(&["mount", "-o", &o, p(img), p(dir)]);
        Mounted::after_mount(out, dir, &pidfile)
    }

    /// Mounts `img` on `dir` with `opts` and the daemon's log at info level in `log` (where
    /// it counts requests at the end of its session).
    pub fn logged(img: &Path, dir: &Path, opts: &str, log: &Path) -> Mounted {
        fs::create_dir_all(dir).unwrap();
        let pidfile = dir.with_extension("pid");
        let _ = fs::remove_file(&pidfile);
        let out = Command::new(BIN)
            .env("RUST_LOG", "info")
            .arg("mount")
            .arg("-o")
            .arg(format!("log={},pidfile={},{opts}", p(log), p(&pidfile)))
            .arg(img)
            .arg(dir)
            .output()
            .unwrap();
        Mounted::after_mount(out, dir, &pidfile).unwrap()
    }

    /// After the daemon was killed (or its connection aborted): waits until it is gone,
    /// detaches the dead mount, checks that `fsck -n` finds `img` clean (the journal as
    /// replayed), and mounts it again on the same directory.
    pub fn remount_after_crash(self, img: &Path) -> Mounted {
        assert!(
            wait_gone(self.pid, Duration::from_secs(20)),
            "daemon still alive"
        );
        let dir = self.dir.clone();
        drop(self); // detaches the dead mount
        let (code, out) = fsck(img);
        assert_eq!(code, 0, "fsck -n after the crash:\n{out}");
        Mounted::new(img, &dir, "")
    }

    /// Guards a mount made by some other command (`pid` 0: no daemon of its own to wait for).
    pub fn adopt(dir: &Path, pid: i32) -> Mounted {
        Mounted {
            dir: dir.to_path_buf(),
            pid,
            done: false,
        }
    }

    /// Takes over a mount made by some other command, given its pid file.
    pub fn after_mount(out: Output, dir: &Path, pidfile: &Path) -> Result<Mounted, Output> {
        if !out.status.success() {
            // Never leave a mount behind, even if the command lied.
            if is_mounted(dir) {
                let _ = Command::new("umount").arg("-l").arg(dir).status();
            }
            return Err(out);
        }
        let pid: i32 = fs::read_to_string(pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let m = Mounted {
            dir: dir.to_path_buf(),
            pid,
            done: false,
        };
        assert!(pid > 0, "no pid file {}", pidfile.display());
        assert!(
            is_mounted(dir),
            "{} is not mounted after mount returned",
            dir.display()
        );
        Ok(m)
    }

    /// Unmounts and waits until the daemon has exited (and so written everything back).
    pub fn unmount(mut self) {
        self.cleanup(true);
    }

    /// Unmounts with `cmd DIR` (e.g. `umount`, `moafs umount`, `fusermount3 -u`) and returns
    /// as soon as the command does, without waiting for the daemon: what the command promises
    /// is the caller's to check.
    pub fn unmount_with(mut self, cmd: &[&str]) -> i32 {
        let out = Command::new(cmd[0])
            .args(&cmd[1..])
            .arg(&self.dir)
            .output()
            .expect("run the unmount command");
        assert!(
            out.status.success(),
            "{cmd:?} {} failed: {}",
            self.dir.display(),
            text(&out.stderr)
        );
        assert!(
            !is_mounted(&self.dir),
            "{cmd:?} left {} mounted",
            self.dir.display()
        );
        self.done = true;
        self.pid
    }

    pub fn cleanup(&mut self, strict: bool) {
        if self.done {
            return;
        }
        self.done = true;
        let mut last_err = String::new();
        // A file descriptor briefly duplicated into a child being spawned by another test
        // thread can make the mount busy for a moment: retry before giving up.
        for _ in 0..50 {
            if !is_mounted(&self.dir) {
                break;
            }
            match Command::new("fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .output()
            {
                Ok(out) if out.status.success() => {}
                Ok(out) => last_err = text(&out.stderr),
                Err(e) => last_err = e.to_string(),
            }
            if is_mounted(&self.dir) {
                sleep(Duration::from_millis(100));
            }
        }
        if is_mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            if strict {
                panic!("fusermount3 -u {} failed: {last_err}", self.dir.display());
            }
        }
        if self.pid > 0 && !wait_gone(self.pid, Duration::from_secs(60)) {
            let _ = kill(self.pid, Signal::SIGKILL);
            if strict {
                panic!("daemon {} did not exit after unmount", self.pid);
            }
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.cleanup(false);
    }
}

/// How many times the queue threads left SCHED_IDLE (`queue_boost`), from the daemon's log
/// line at the end of its session.
pub fn boosts_logged(log: &str) -> u64 {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("queue threads boosted"))
        .unwrap_or_else(|| panic!("no end-of-session line in the log:\n{log}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|x| *x == "boosted").unwrap();
    words[at + 1].parse().unwrap()
}

/// `(pooled, inline, io_uring served)` from the daemon's log line at the end of its session.
pub fn syncs_logged(log: &str) -> (u64, u64, bool) {
    let uring = log.contains("serving FUSE over io_uring");
    let Some(line) = log
        .lines()
        .rev()
        .find(|l| l.contains("sync requests served"))
    else {
        panic!("no end-of-session line in the log:\n{log}");
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |w: &str| words.iter().position(|x| *x == w).unwrap();
    let pooled = words[at("sync") - 1].parse().unwrap();
    let inline = words[at("in") - 1].parse().unwrap();
    (pooled, inline, uring)
}

/// The kernel's backing-device directory of the mount at `dir`: /sys/class/bdi/MAJ:MIN of its
/// device number, `MAJ:MIN-fuseblk` for a `fuseblk` mount (root's mounts of image files and
/// block devices, whose device number is the block device's).
pub fn bdi_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(dir).unwrap().dev();
    let (maj, min) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let blk = PathBuf::from(format!("/sys/class/bdi/{maj}:{min}-fuseblk"));
    if blk.exists() {
        blk
    } else {
        PathBuf::from(format!("/sys/class/bdi/{maj}:{min}"))
    }
}

/// The name of the mount's FUSE connection in /sys/fs/fuse/connections: the kernel's own
/// encoding of its device number (major << 20 | minor; a `fuse` mount's major is 0).
pub fn fuse_connection(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(dir).unwrap().dev();
    let (maj, min) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    ((maj << 20) | min).to_string()
}

/// Whether some process (a daemon, fsck, mkfs) holds the image's exclusive `flock` now.
pub fn image_locked(img: &Path) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let file = fs::File::open(img).unwrap();
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_unlocked_on_drop) => false,
        Err((_, e)) => {
            assert_eq!(e, nix::errno::Errno::EWOULDBLOCK, "flock {}", img.display());
            true
        }
    }
}
