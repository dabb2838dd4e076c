//! How to mount: [`MountConfig`] (the FUSE side of the mount options), the VFS options of
//! mount(8) it takes, and the fuser configuration built from it.

use crate::FORGET_PAUSE;
use fuser::{MountOption, SessionACL};
use std::time::Duration;

/// Whether to serve FUSE over io_uring (`-o uring=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UringMode {
    /// Never: /dev/fuse only.
    Off,
    /// When the kernel offers it; as root, turn the kernel's `fuse.enable_uring` on first.
    Auto,
}

/// How to mount (FUSE side; the engine's own options are `moafs_core::fs::MountOptions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountConfig {
    /// Stay in the foreground (used by the binary only; the library never forks).
    pub foreground: bool,
    /// Threads reading FUSE requests (each with its own cloned /dev/fuse descriptor).
    pub threads: usize,
    /// Let users other than the mounter in (`allow_other`).
    pub allow_other: bool,
    /// Let the kernel check permissions from the mode bits (`default_permissions`).
    pub default_permissions: bool,
    /// How long the kernel may cache attributes, entries and negative entries.
    pub attr_ttl: Duration,
    /// Mount read-only at the VFS level too.
    pub read_only: bool,
    /// Source shown in /proc/mounts: the image's absolute path (the type reads `fuse.moafs`).
    pub fsname: String,
    /// The mount's type after `fuse.`: `moafs`, or `moafs-passthrough` for the floor target.
    pub subtype: String,
    /// `fsname` is a block device: mount as `fuseblk.SUBTYPE` (root only). The kernel then
    /// sends SYNCFS for sync(2) and syncfs(2), which a `fuse` mount never gets.
    pub blkdev: bool,
    /// mount(8)'s VFS options of the mount, passed to mount(2) as flags: `noatime`,
    /// `nodiratime`, `relatime`, `strictatime`, `lazytime`, `dev`, `suid`, `noexec`, `sync`,
    /// `dirsync` (and their opposites). FUSE mounts are `nodev,nosuid` unless `dev`/`suid`.
    pub vfs_options: Vec<String>,
    /// Readahead of the mount in KiB (0: kernel default).
    pub read_ahead_kb: u32,
    /// Share of dirty memory the mount may hold, in percent (0: kernel default, 1 % for FUSE).
    pub bdi_max_ratio: u32,
    /// Keep the kernel's strict per-mount dirty limit, which FUSE sets (`bdi_strict=1`); off
    /// by default: the writer is then throttled like one on a kernel file system, by the
    /// global dirty limits (`max_ratio` still bounds the mount's share).
    pub bdi_strict_limit: bool,
    /// Poll the FUSE device while requests keep coming, until this long without one
    /// (`poll_ms=`; zero: always sleep in `read()`). See [`poll`](crate::poll).
    pub poll_window: Duration,
    /// FUSE over io_uring (per-CPU request queues; see [`uring`](crate::uring)).
    pub uring: UringMode,
    /// Over io_uring, READs of at least this many KiB (a stream's readahead) are served on
    /// another CPU than the reader's (`uring_stream_kb=`; 0: always on the reader's CPU).
    pub uring_stream_kb: u32,
    /// Ask for the kernel's writeback cache (`writeback_cache=on|off`): writes gather in the
    /// page cache and reach the daemon at write-back or close (with a SETATTR of the times
    /// the kernel then owns); off, every write() is a WRITE request at once (write-through).
    pub writeback_cache: bool,
    /// How long a /dev/fuse thread waits before it serves a FORGET while io_uring carries the
    /// other requests (`forget_pause_ms=`, default 0: at once). See [`FORGET_PAUSE`].
    pub forget_pause: Duration,
    /// Over io_uring, threads that serve FSYNC, FSYNCDIR and SYNCFS while the queues go on
    /// (`sync_threads=`; 0: each queue's thread serves them itself). See `uring/pool.rs`.
    pub sync_threads: usize,
    /// Over io_uring, the nice value a queue's thread takes, out of SCHED_IDLE, while callers
    /// take turns changing directories (`queue_boost=N`, -20..19, default [`QUEUE_BOOST`];
    /// `off`: always SCHED_IDLE). See `uring/boost.rs`.
    pub queue_boost: Option<i32>,
    /// Enforce the immutable and append-only inode flags (`iflags`): OPEN is answered (and
    /// checked) instead of declined, at one request per open(2). Also on when the image
    /// says one of its inodes carried such a flag (`Fs::inode_flags_in_use`).
    pub inode_flags: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            foreground: false,
            threads: 2,
            allow_other: false,
            default_permissions: true,
            // moafs is the only writer of its image: long TTLs save LOOKUP/GETATTR round trips
            attr_ttl: Duration::from_secs(60),
            read_only: false,
            fsname: "moafs".to_string(),
            subtype: "moafs".to_string(),
            blkdev: false,
            vfs_options: Vec::new(),
            read_ahead_kb: 1024,
            bdi_max_ratio: 20,
            bdi_strict_limit: false,
            poll_window: Duration::from_millis(5),
            uring: UringMode::Auto,
            uring_stream_kb: 256,
            writeback_cache: true,
            forget_pause: FORGET_PAUSE,
            sync_threads: SYNC_THREADS,
            queue_boost: Some(QUEUE_BOOST),
            inode_flags: false,
        }
    }
}

/// Default of [`MountConfig::queue_boost`]: nice -10 (varmail 1.15x against SCHED_IDLE
/// throughout; -20 no better; nice 0 did not help it in one run: docs/results/HISTORY-benchmarks.md, issue 43).
pub const QUEUE_BOOST: i32 = -10;

/// Default of [`MountConfig::sync_threads`].
pub const SYNC_THREADS: usize = 4;

/// The names mount(8) gives VFS flags of a mount, as fuser's options (`None`: not one of them).
/// Opposites of the defaults (`nodev`, `nosuid`, `exec`, `atime`, `async`, `rw`) map to
/// nothing to add but are still known.
pub fn vfs_mount_option(name: &str) -> Option<MountOption> {
    Some(match name {
        "dev" => MountOption::Dev,
        "suid" => MountOption::Suid,
        "noexec" => MountOption::NoExec,
        "noatime" => MountOption::NoAtime,
        "sync" => MountOption::Sync,
        "dirsync" => MountOption::DirSync,
        // fuser has no variants for these; its (patched) mount turns them into flags
        "nodiratime" | "relatime" | "strictatime" | "lazytime" => {
            MountOption::CUSTOM(name.to_string())
        }
        _ => return None,
    })
}

/// Whether `name` is a VFS option of mount(8) that [`MountConfig::vfs_options`] takes.
pub fn is_vfs_option(name: &str) -> bool {
    vfs_mount_option(name).is_some()
        || matches!(
            name,
            "nodev"
                | "nosuid"
                | "exec"
                | "atime"
                | "async"
                | "diratime"
                | "norelatime"
                | "nostrictatime"
                | "nolazytime"
        )
}

/// Builds fuser's configuration from ours.
pub fn fuser_config(cfg: &MountConfig) -> fuser::Config {
    let mut c = fuser::Config::default();
    c.mount_options = vec![
        MountOption::FSName(cfg.fsname.clone()),
        MountOption::Subtype(cfg.subtype.clone()),
    ];
    if cfg.blkdev {
        c.mount_options
            .push(MountOption::CUSTOM("blkdev".to_string()));
    }
    if cfg.default_permissions {
        c.mount_options.push(MountOption::DefaultPermissions);
    }
    if cfg.read_only {
        c.mount_options.push(MountOption::RO);
    }
    for name in &cfg.vfs_options {
        if let Some(o) = vfs_mount_option(name) {
            c.mount_options.push(o);
        }
    }
    c.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let threads = cfg.threads.max(1);
    c.n_threads = Some(threads);
    c.clone_fd = threads > 1;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_maps_options() {
        let cfg = MountConfig {
            threads: 4,
            allow_other: true,
            read_only: true,
            ..MountConfig::default()
        };
        let c = fuser_config(&cfg);
        assert_eq!(c.n_threads, Some(4));
        assert!(c.clone_fd);
        assert_eq!(c.acl, SessionACL::All);
        assert!(c.mount_options.contains(&MountOption::DefaultPermissions));
        assert!(c.mount_options.contains(&MountOption::RO));
        let c = fuser_config(&MountConfig {
            threads: 0,
            default_permissions: false,
            ..MountConfig::default()
        });
        assert_eq!(c.n_threads, Some(1));
        assert!(!c.mount_options.contains(&MountOption::DefaultPermissions));
    }
}
