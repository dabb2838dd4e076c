//! Managed targets: file systems the harness makes for a run and always takes down again —
//! moafs and fuse2fs over FUSE, ext4, XFS and btrfs in the kernel, and the FUSE floor (ext4
//! passed through FUSE by `moafs passthrough`) — each on a fresh image file of the same size in
//! a backing directory (/dev/shm: DRAM-class storage, or a disk directory), and every one of
//! them on a loop device over that image (readahead [`LOOP_READAHEAD_SECTORS`]), so that what
//! each sent to its device is counted the same way: the loop device's block-layer counters
//! (`/sys/block/loopN/stat`) from right after the mount to after the unmount (the FUSE daemon
//! gone). Teardown (unmount, wait for a FUSE daemon to exit, unmount a file system under it,
//! read the loop device's counters, detach the loop device, remove the image) runs on drop, so
//! also when a run fails; Ctrl-C in `moafs bench` makes the running workload fail at its next
//! operation (see [`crate::interrupt`]), which drops the target.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The kinds of managed target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Moafs,
    Ext4,
    Xfs,
    Btrfs,
    Fuse2fs,
    /// Kernel ext4 made with fast commits (`mkfs.ext4 -O fast_commit`): an fsync writes the
    /// file's own changes, not a whole jbd2 transaction (the anchor of issue 43).
    Ext4Fc,
    /// The FUSE floor: ext4 on a loop device, passed through FUSE by `moafs passthrough`
    /// with moafs's transport and no engine.
    Passthrough,
    /// The FUSE ceiling: an in-memory file system (`moafs memfs`) served by moafs's transport
    /// with no engine and no device (no image, no loop device; its capacity is the image size).
    Memfs,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "moafs" => Kind::Moafs,
            "ext4" => Kind::Ext4,
            "ext4-fc" => Kind::Ext4Fc,
            "xfs" => Kind::Xfs,
            "btrfs" => Kind::Btrfs,
            "fuse2fs" => Kind::Fuse2fs,
            "passthrough" => Kind::Passthrough,
            "memfs" => Kind::Memfs,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Moafs => "moafs",
            Kind::Ext4 => "ext4",
            Kind::Ext4Fc => "ext4-fc",
            Kind::Xfs => "xfs",
            Kind::Btrfs => "btrfs",
            Kind::Fuse2fs => "fuse2fs",
            Kind::Passthrough => "passthrough",
            Kind::Memfs => "memfs",
        }
    }

    /// The mkfs command line (program, arguments before the image).
    fn mkfs(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Kind::Ext4 | Kind::Fuse2fs | Kind::Passthrough => ("mkfs.ext4", &["-q", "-F"]),
            Kind::Ext4Fc => ("mkfs.ext4", &["-q", "-F", "-O", "fast_commit"]),
            Kind::Xfs => ("mkfs.xfs", &["-q", "-f"]),
            Kind::Btrfs => ("mkfs.btrfs", &["-q", "-f"]),
            Kind::Moafs | Kind::Memfs => ("moafs", &[]),
        }
    }
}

/// How to make a managed target.
#[derive(Debug, Clone)]
pub struct ManagedOptions {
    pub kind: Kind,
    /// Image size in bytes (the same for every target of a comparison).
    pub size: u64,
    /// Directory for the image and the mount point (e.g. /dev/shm).
    pub backing: PathBuf,
    /// The moafs binary (for `Kind::Moafs`, `Kind::Passthrough` and `Kind::Memfs`).
    pub moafs: PathBuf,
    /// Extra mount options: `moafs mount -o` (`moafs passthrough -o`, `moafs memfs -o`), or
    /// mount(8)'s `-o` for the kernel's file systems (`ext4@data=journal`).
    pub mount_options: String,
}

/// The loop device's readahead, in 512-byte sectors (`blockdev --setra`): 256, 128 KiB (the
/// kernel's default for a loop device), set explicitly on every managed target's loop device so
/// that all of them read with the same device readahead whatever the machine's default is.
pub const LOOP_READAHEAD_SECTORS: u32 = 256;

/// What the device under a target saw during a run: for a managed target the loop device's
/// block-layer counters (`/sys/block/loopN/stat`, from right after the mount to after the
/// unmount, the FUSE daemon gone), `reads`/`writes` being requests completed and the bytes its
/// sectors; for the in-process engine its device's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DeviceIo {
    /// Where it was counted: `loop` (a managed target's loop device), `moafs` (moafs's own
    /// device layer, its `stats=` file), `engine` (the in-process engine's device).
    pub source: &'static str,
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    /// Device flushes (the block layer's flush requests completed, where the kernel's `stat`
    /// has them; moafs's and the engine's own count).
    pub flushes: Option<u64>,
    /// Modelled busy time of a model device, seconds (`engine:hdd`, `engine:ssd` only), and
    /// the seek distance it charged (HDD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modelled_secs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seek_distance_bytes: Option<u64>,
}

/// The counters of a block device's `/sys/block/NAME/stat` that [`DeviceIo`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockStat {
    /// Field 0: read requests completed.
    pub reads: u64,
    /// Field 2: sectors (512 bytes) read.
    pub read_sectors: u64,
    /// Field 4: write requests completed.
    pub writes: u64,
    /// Field 6: sectors written.
    pub write_sectors: u64,
    /// Field 15: flush requests completed (kernels since 5.5 have the 17-field line).
    pub flushes: Option<u64>,
}

impl BlockStat {
    /// Parses the text of a `stat` file.
    pub fn parse(text: &str) -> Option<BlockStat> {
        let f: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        if f.len() < 11 {
            return None;
        }
        Some(BlockStat {
            reads: f[0],
            read_sectors: f[2],
            writes: f[4],
            write_sectors: f[6],
            flushes: f.get(15).copied(),
        })
    }

    /// Of the block device `dev` (`/dev/loop3` or `loop3`).
    pub fn of(dev: &str) -> io::Result<BlockStat> {
        let name = dev.rsplit('/').next().unwrap_or(dev);
        let path = format!("/sys/block/{name}/stat");
        let s = std::fs::read_to_string(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        BlockStat::parse(&s).ok_or_else(|| io::Error::other(format!("{path}: cannot parse {s:?}")))
    }

    /// What happened between `start` and `self`, as device I/O counted at a loop device.
    pub fn since(&self, start: &BlockStat) -> DeviceIo {
        DeviceIo {
            source: "loop",
            reads: self.reads.saturating_sub(start.reads),
            read_bytes: self.read_sectors.saturating_sub(start.read_sectors) * 512,
            writes: self.writes.saturating_sub(start.writes),
            write_bytes: self.write_sectors.saturating_sub(start.write_sectors) * 512,
            flushes: self
                .flushes
                .zip(start.flushes)
                .map(|(e, s)| e.saturating_sub(s)),
            modelled_secs: None,
            seek_distance_bytes: None,
        }
    }
}

/// What a managed target reports when it is taken down.
#[derive(Debug, Clone, Default)]
pub struct Finished {
    /// The loop device's counters over the run (every kind).
    pub device: Option<DeviceIo>,
    /// moafs's engine counters (moafs only).
    pub engine: Option<serde_json::Value>,
    /// moafs's own device layer's counters (its `stats=` file; moafs only), beside the loop
    /// device's: from mount (its replay and mount-time writes included) to unmount.
    pub engine_device: Option<DeviceIo>,
}

/// A mounted, managed file system; unmounted and removed on drop.
#[derive(Debug)]
pub struct Managed {
    kind: Kind,
    /// The name in reports: the kind, and moafs's extra mount options after an `@`.
    label: String,
    /// Block counters of the loop device when the run began (right after the mount).
    start: Option<BlockStat>,
    /// moafs's `stats=` file.
    stats: Option<PathBuf>,
    work: PathBuf,
    mnt: PathBuf,
    img: PathBuf,
    /// The loop device over `img` (every kind), detached at teardown.
    loopdev: Option<String>,
    /// The kernel file system under a FUSE mount (the passthrough's ext4): unmounted after
    /// the FUSE mount and its daemon are gone.
    lower: Option<PathBuf>,
    daemon_pid: Option<i32>,
    child: Option<Child>,
}

fn run(cmd: &mut Command) -> io::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| crate::programs::spawn_error(&cmd.get_program().to_string_lossy(), e))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} {:?} failed ({}): {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Anything left under `backing` (a directory managed targets were made in): its entries, and
/// the mounts and loop devices whose lines name it. Empty once every target is taken down.
pub fn leftovers(backing: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(backing)
        .map(|d| {
            d.flatten()
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default();
    let tag = backing.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    found.extend(
        mounts
            .lines()
            .filter(|l| l.contains(&tag))
            .map(String::from),
    );
    if let Ok(loops) = Command::new("losetup").arg("-a").output() {
        let loops = String::from_utf8_lossy(&loops.stdout);
        found.extend(loops.lines().filter(|l| l.contains(&tag)).map(String::from));
    }
    found
}

/// Whether `dir` is a mount point (listed in /proc/self/mountinfo).
pub fn is_mounted(dir: &Path) -> bool {
    // canonicalize() fails with ENOTCONN on a FUSE mount whose daemon died: resolve the
    // parent instead, which is still a plain directory
    let canon = match dir.canonicalize() {
        Ok(c) => c,
        Err(_) => match (dir.parent().map(Path::canonicalize), dir.file_name()) {
            (Some(Ok(parent)), Some(name)) => parent.join(name),
            _ => return false,
        },
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = canon.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| m.replace("\\040", " ") == want)
}

fn process_alive(pid: i32) -> bool {
    // A zombie (not reaped by its parent) has state Z: it is gone for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|st| st != "Z"),
        Err(_) => false,
    }
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

impl Managed {
    pub fn create(o: &ManagedOptions) -> io::Result<Managed> {
        let work = o.backing.join(format!(
            "moafs-bench-{}-{}-{}",
            o.kind.name(),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir(&work)?;
        let mut m = Managed {
            kind: o.kind,
            label: if o.mount_options.is_empty() {
                o.kind.name().to_string()
            } else {
                format!("{}@{}", o.kind.name(), o.mount_options.replace(',', ";"))
            },
            mnt: work.join("mnt"),
            img: work.join("img"),
            work,
            loopdev: None,
            lower: None,
            daemon_pid: None,
            child: None,
            start: None,
            stats: None,
        };
        // From here on, an error drops `m`, which takes down whatever was set up.
        std::fs::create_dir(&m.mnt)?;
        if o.kind != Kind::Memfs {
            std::fs::File::create(&m.img)?.set_len(o.size)?;
        }
        match o.kind {
            Kind::Moafs => {
                // mkfs on the image file, then moafs mounts the loop device over it
                run(Command::new(&o.moafs).arg("mkfs").arg(&m.img))?;
                let dev = m.attach_loop()?;
                let pidfile = m.work.join("pid");
                let stats = m.work.join("stats.json");
                let mut opts = format!("pidfile={},stats={}", pidfile.display(), stats.display());
                m.stats = Some(stats);
                if !o.mount_options.is_empty() {
                    opts = format!("{opts},{}", o.mount_options);
                }
                run(Command::new(&o.moafs)
                    .args(["mount", "-o", &opts])
                    .arg(&dev)
                    .arg(&m.mnt))?;
                let pid = std::fs::read_to_string(&pidfile)?;
                m.daemon_pid = pid.trim().parse().ok();
                m.start = Some(BlockStat::of(&dev)?);
            }
            Kind::Fuse2fs => {
                let (prog, args) = o.kind.mkfs();
                run(Command::new(prog).args(args).arg(&m.img))?;
                let dev = m.attach_loop()?;
                // hard_remove: libfuse's high-level API otherwise renames a file that is
                // unlinked while its RELEASE is still in flight to .fuse_hidden*, and a later
                // rmdir of its directory fails with ENOTEMPTY.
                let child = Command::new("fuse2fs")
                    .arg("-f")
                    .arg(&dev)
                    .arg(&m.mnt)
                    .args(["-o", "rw,hard_remove"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| crate::programs::spawn_error("fuse2fs", e))?;
                m.daemon_pid = Some(child.id() as i32);
                m.child = Some(child);
                if !wait_until(Duration::from_secs(10), || is_mounted(&m.mnt)) {
                    return Err(io::Error::other("fuse2fs did not mount within 10 s"));
                }
                m.start = Some(BlockStat::of(&dev)?);
            }
            Kind::Ext4 | Kind::Ext4Fc | Kind::Xfs | Kind::Btrfs => {
                let dev = m.loop_mount(o.kind, &m.mnt.clone(), &o.mount_options)?;
                m.start = Some(BlockStat::of(&dev)?);
            }
            Kind::Passthrough => {
                // ext4 as for the ext4 target, then its root passed through FUSE
                let lower = m.work.join("ext4");
                std::fs::create_dir(&lower)?;
                let dev = m.loop_mount(o.kind, &lower, "")?;
                m.lower = Some(lower.clone());
                let pidfile = m.work.join("pid");
                let mut opts = format!("pidfile={}", pidfile.display());
                if !o.mount_options.is_empty() {
                    opts = format!("{opts},{}", o.mount_options);
                }
                run(Command::new(&o.moafs)
                    .args(["passthrough", "-o", &opts])
                    .arg(&lower)
                    .arg(&m.mnt))?;
                let pid = std::fs::read_to_string(&pidfile)?;
                m.daemon_pid = pid.trim().parse().ok();
                m.start = Some(BlockStat::of(&dev)?);
            }
            Kind::Memfs => {
                // no image: the capacity is the image size of the other targets
                let pidfile = m.work.join("pid");
                let mut opts = format!("pidfile={},size={}", pidfile.display(), o.size);
                if !o.mount_options.is_empty() {
                    opts = format!("{opts},{}", o.mount_options);
                }
                run(Command::new(&o.moafs)
                    .args(["memfs", "-o", &opts])
                    .arg(&m.mnt))?;
                let pid = std::fs::read_to_string(&pidfile)?;
                m.daemon_pid = pid.trim().parse().ok();
            }
        }
        if !is_mounted(&m.mnt) {
            return Err(io::Error::other(format!(
                "{} is not mounted after setting up {}",
                m.mnt.display(),
                o.kind.name()
            )));
        }
        Ok(m)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Attaches the image to a free loop device with readahead [`LOOP_READAHEAD_SECTORS`];
    /// returns the loop device (detached at teardown from then on).
    fn attach_loop(&mut self) -> io::Result<String> {
        let dev = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&self.img))?;
        if !dev.starts_with("/dev/loop") {
            return Err(io::Error::other(format!(
                "losetup --find --show {}: unexpected output {dev:?}",
                self.img.display()
            )));
        }
        self.loopdev = Some(dev.clone());
        run(Command::new("blockdev")
            .args(["--setra", &LOOP_READAHEAD_SECTORS.to_string()])
            .arg(&dev))?;
        Ok(dev)
    }

    /// Makes `kind`'s file system on the image, attaches it to a loop device and mounts that
    /// on `at`; returns the loop device.
    /// mkfs on the image, then mounts it through a loop device at `at`, with mount(8)'s
    /// `options` (none when empty).
    fn loop_mount(&mut self, kind: Kind, at: &Path, options: &str) -> io::Result<String> {
        let (prog, args) = kind.mkfs();
        run(Command::new(prog).args(args).arg(&self.img))?;
        let dev = self.attach_loop()?;
        let mut mount = Command::new("mount");
        if !options.is_empty() {
            mount.args(["-o", options]);
        }
        run(mount.arg(&dev).arg(at))?;
        Ok(dev)
    }

    /// The loop device under the target (`/dev/loopN`).
    pub fn loop_device(&self) -> Option<&str> {
        self.loopdev.as_deref()
    }

    /// The image file the loop device is over.
    pub fn image(&self) -> &Path {
        &self.img
    }

    /// The name in reports (`moafs`, `moafs@dirty_max=1G` …).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The FUSE daemon's process (moafs, fuse2fs).
    pub fn daemon_pid(&self) -> Option<i32> {
        self.daemon_pid
    }

    pub fn mount_point(&self) -> &Path {
        &self.mnt
    }

    /// Unmounts (everything is written back then) and waits for a FUSE daemon to exit, reads
    /// what the loop device saw during the run, and takes the target down (detaches the loop
    /// device, removes the files).
    pub fn finish(mut self) -> io::Result<Finished> {
        let mut errors = Vec::new();
        self.unmount(&mut errors);
        let io = self.device_io();
        let engine = self.engine_counters();
        let engine_device = self.engine_device_io();
        self.release(&mut errors);
        if !errors.is_empty() {
            return Err(io::Error::other(errors.join("; ")));
        }
        Ok(Finished {
            device: io?,
            engine,
            engine_device,
        })
    }

    /// moafs's engine counters of the mount (its `stats=` file, written at unmount).
    fn engine_counters(&self) -> Option<serde_json::Value> {
        let text = std::fs::read(self.stats.as_ref()?).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
        let mut e = Some(v["engine"].clone()).filter(|e| e.is_object())?;
        // where the fsyncs' time went (`Fs::fsync_report`), beside the counters
        e["fsync_phases"] = v["fsync_phases"].clone();
        Some(e)
    }

    /// The loop device's counters since the mount; read after the unmount, before the loop
    /// device is detached.
    fn device_io(&self) -> io::Result<Option<DeviceIo>> {
        match (&self.loopdev, self.start) {
            (Some(dev), Some(start)) => Ok(Some(BlockStat::of(dev)?.since(&start))),
            _ => Ok(None),
        }
    }

    /// moafs's own device counters (its `stats=` file, written at unmount).
    fn engine_device_io(&self) -> Option<DeviceIo> {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.stats.as_ref()?).ok()?).ok()?;
        let d = v.get("device").filter(|d| d.is_object())?;
        let n = |k: &str| d[k].as_u64().unwrap_or(0);
        Some(DeviceIo {
            source: "moafs",
            reads: n("reads"),
            read_bytes: n("read_bytes"),
            writes: n("writes"),
            write_bytes: n("write_bytes"),
            flushes: d["flushes"].as_u64(),
            modelled_secs: None,
            seek_distance_bytes: None,
        })
    }

    fn teardown(&mut self) -> io::Result<()> {
        let mut errors = Vec::new();
        self.unmount(&mut errors);
        self.release(&mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(errors.join("; ")))
        }
    }

    /// Unmounts and waits for a FUSE daemon to exit.
    fn unmount(&mut self, errors: &mut Vec<String>) {
        if is_mounted(&self.mnt) {
            // As root, umount(8) detaches a FUSE mount as `moafs umount` does (and runs
            // moafs's umount helper when installed); fusermount3 (Debian's fuse3) is only
            // needed unprivileged.
            let once = || {
                if self.daemon_pid.is_some() && !nix::unistd::geteuid().is_root() {
                    run(Command::new("fusermount3").arg("-u").arg(&self.mnt))
                } else {
                    run(Command::new("umount").arg(&self.mnt))
                }
            };
            // Busy for a moment after a workload's last process exits (its files are closed
            // asynchronously, a probe by udev or blkid holds the mount): try again a few times.
            let mut res = once();
            for _ in 0..10 {
                match &res {
                    Err(e) if e.to_string().contains("busy") => {
                        std::thread::sleep(Duration::from_millis(200));
                        res = once();
                    }
                    _ => break,
                }
            }
            if let Err(e) = res {
                // busy: detach lazily rather than leave it behind
                errors.push(e.to_string());
                let _ = run(Command::new("umount").arg("-l").arg(&self.mnt));
            }
        }
        if let Some(pid) = self.daemon_pid {
            // The daemon writes everything back before it exits; the image is complete then.
            if !wait_until(Duration::from_secs(60), || !process_alive(pid)) {
                errors.push(format!("daemon {pid} did not exit after unmount; killed"));
                let _ = nix_kill(pid);
                // gone before the loop device it holds open is read and detached
                wait_until(Duration::from_secs(10), || !process_alive(pid));
            }
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.daemon_pid = None;
        // The kernel file system under the FUSE mount, once its daemon has let go of it.
        if let Some(lower) = self.lower.take() {
            if is_mounted(&lower) {
                if let Err(e) = run(Command::new("umount").arg(&lower)) {
                    errors.push(e.to_string());
                    let _ = run(Command::new("umount").arg("-l").arg(&lower));
                }
            }
        }
    }

    /// Detaches the loop device and removes the image and mount point.
    fn release(&mut self, errors: &mut Vec<String>) {
        if let Some(dev) = self.loopdev.take() {
            if let Err(e) = run(Command::new("losetup").arg("-d").arg(&dev)) {
                errors.push(e.to_string());
            }
            // A device still open elsewhere (a probe by udev) is only marked to detach at its
            // last close: wait for that, so that nothing of ours is listed afterwards.
            let name = dev.rsplit('/').next().unwrap_or(&dev).to_string();
            let bound = move || Path::new(&format!("/sys/block/{name}/loop")).exists();
            if !wait_until(Duration::from_secs(10), || !bound()) {
                errors.push(format!("{dev} is still attached after losetup -d"));
            }
        }
        if self.work.exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.work) {
                errors.push(format!("{}: {e}", self.work.display()));
            }
        }
    }
}

fn nix_kill(pid: i32) -> io::Result<()> {
    run(Command::new("kill").args(["-KILL", &pid.to_string()])).map(|_| ())
}

impl Drop for Managed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("moafs bench: teardown of {}: {e}", self.kind.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_from_its_name_and_ext4_fc_asks_for_fast_commits() {
        use Kind::*;
        for k in [Moafs, Ext4, Ext4Fc, Xfs, Btrfs, Fuse2fs, Passthrough, Memfs] {
            assert_eq!(Kind::parse(k.name()), Some(k));
        }
        assert_eq!(Kind::parse("ext4-fast"), None);
        let (prog, args) = Ext4Fc.mkfs();
        assert_eq!(prog, "mkfs.ext4");
        assert!(
            args.windows(2).any(|w| w == ["-O", "fast_commit"]),
            "{args:?}"
        );
        assert!(!Ext4.mkfs().1.contains(&"fast_commit"));
    }

    #[test]
    fn block_stat_reads_requests_sectors_and_flushes() {
        // a loop device's line: 17 fields since Linux 5.5
        let end = "    9384        4   118152      267    79863   140651  2380307    12430        \
                   0     2580    13181        0        0        0        0    23072      483\n";
        let start =
            "    9220        4   116840      265    79848   140490  2378931    12426        \
                     0     2576    13175        0        0        0        0    23068      482\n";
        let (e, s) = (
            BlockStat::parse(end).unwrap(),
            BlockStat::parse(start).unwrap(),
        );
        assert_eq!(
            (
                e.reads,
                e.read_sectors,
                e.writes,
                e.write_sectors,
                e.flushes
            ),
            (9384, 118152, 79863, 2380307, Some(23072))
        );
        let d = e.since(&s);
        assert_eq!(d.source, "loop");
        assert_eq!((d.reads, d.read_bytes), (164, 1312 * 512));
        assert_eq!((d.writes, d.write_bytes), (15, 1376 * 512));
        assert_eq!(d.flushes, Some(4));
        // an older kernel's 11 fields: no flush count
        let old = "1 0 8 0 2 0 16 0 0 0 0";
        let o = BlockStat::parse(old).unwrap();
        assert_eq!((o.writes, o.write_sectors, o.flushes), (2, 16, None));
        assert_eq!(o.since(&o).flushes, None);
        assert!(BlockStat::parse("1 2 3").is_none());
        assert!(BlockStat::parse("x 0 8 0 2 0 16 0 0 0 0").is_none());
    }
}
