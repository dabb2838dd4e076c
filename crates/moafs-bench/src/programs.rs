//! The programs the harness runs (the Debian tools, mkfs, mount, fuse2fs …): whether one is
//! installed, and the error that names the package bringing a missing one. The lowest module
//! of the harness: the tools' drivers (`tools.rs`) and the managed targets (`managed.rs`) use
//! it.

use std::io;
use std::process::{Command, Stdio};

/// Whether `program` is on the PATH.
pub fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The Debian package that brings `program`, for the tools the harness runs.
pub fn package_of(program: &str) -> &str {
    let name = program.rsplit('/').next().unwrap_or(program);
    match name {
        "mkfs.ext4" | "e2fsck" | "tune2fs" | "debugfs" => "e2fsprogs",
        "mkfs.xfs" | "xfs_repair" | "xfs_io" => "xfsprogs",
        "mkfs.btrfs" | "btrfs" => "btrfs-progs",
        "fusermount3" => "fuse3",
        "losetup" | "mount" | "umount" => "mount",
        "blockdev" => "util-linux",
        "perf" => "linux-perf",
        "kill" => "procps",
        "sleep" | "sync" => "coreutils",
        "sh" => "dash",
        other => other, // postmark, sysbench, fio, bonnie++, dbench, filebench, fuse2fs
    }
}

/// The error for a tool that is not on the PATH: which, and the package that brings it.
pub fn not_installed(program: &str) -> String {
    format!(
        "{program} is not installed (Debian: apt-get install {})",
        package_of(program)
    )
}

/// The error of a program that could not be started: a missing one named with its package.
pub fn spawn_error(program: &str, e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(e.kind(), not_installed(program)),
        k => io::Error::new(k, format!("{program}: {e}")),
    }
}
