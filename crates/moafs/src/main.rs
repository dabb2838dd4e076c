//! `moafs`: mkfs, mount, fsck, inspect, crashcheck and install-helpers.
//!
//! Also answers to the names `mkfs.moafs`, `fsck.moafs`, `mount.moafs` and `mount.fuse.moafs`
//! (the conventions of mkfs(8), fsck(8) and mount(8)), and to `moafs IMAGE MOUNTPOINT -o OPTS`
//! (the convention of mount.fuse3 for `mount -t fuse.moafs`).

use clap::{Args, Parser, Subcommand};
use moafs_core::device::{BlockDevice, DeviceError, FileDevice, FileDeviceOptions};
use moafs_core::format::Geometry;
use moafs_core::fs::MountOptions;
use moafs_core::mkfs::{MkfsOptions, MIN_IMAGE_BYTES};
use moafs_core::{Fs, FsError};
use moafs_fuse::{MountConfig, UringMode};
use std::cell::RefCell;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod mounts;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "moafs",
    version,
    about = "moafs: a user-space file system for small files and small updates",
    long_about = "moafs: a user-space file system (FUSE) for small files and small updates. \
        Make a file system with `moafs mkfs`, mount it with `moafs mount` or `mount -t moafs`, \
        check it with `moafs fsck`; `moafs bench` compares it with ext4, XFS, btrfs and \
        fuse2fs on the same device."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create a file system on IMAGE (created when missing; needs --size then).
    Mkfs(MkfsArgs),
    /// Mount IMAGE on MOUNTPOINT (returns once the mount is ready unless -f).
    Mount(MountArgs),
    /// Check (and with -y repair) IMAGE. Exit: 0 clean, 1 corrected, 4 uncorrected, 8 error.
    Fsck(FsckArgs),
    /// Show the layout and counters of IMAGE.
    Inspect(InspectArgs),
    /// Check every crash state of a mount recorded with `-o record=LOG`: each flush point
    /// and seeded torn/reordered cuts between flushes must pass fsck, mount, keep what fsync
    /// and sync promised, unmount and pass fsck. Exit: 0 all passed, 1 findings, 2 unreadable
    /// log.
    Crashcheck(CrashcheckArgs),
    /// Unmount a moafs mount and wait until its daemon has committed and let go of the image
    /// (also as umount.fuse.moafs and umount.fuseblk.moafs, which umount(8) runs for a
    /// fuse.moafs or fuseblk.moafs mount).
    Umount(UmountArgs),
    /// Symlink moafs (PREFIX/bin), mkfs.moafs, fsck.moafs, mount.moafs, mount.fuse.moafs,
    /// mount.fuseblk.moafs, umount.moafs, umount.fuse.moafs and umount.fuseblk.moafs to this
    /// binary, and install the man pages and the completions of bash, zsh and fish.
    InstallHelpers(InstallArgs),
    /// Run a benchmark workload on a target, repeated, with mean and 95 % confidence interval.
    Bench(BenchArgs),
    /// Age IMAGE (unmounted): a seeded create/grow/delete history until it is as full and as
    /// fragmented (layout score) as asked.
    Age(AgeArgs),
    /// Mount SOURCE (a directory) on MOUNTPOINT through FUSE with moafs's transport and no
    /// engine: the FUSE floor target of `moafs bench` (returns once the mount is ready unless -f).
    Passthrough(PassthroughArgs),
    /// Mount an empty file system kept in the daemon's memory on MOUNTPOINT, served by moafs's
    /// transport with no engine and no device: the FUSE ceiling target of `moafs bench`
    /// (returns once the mount is ready unless -f; its contents go at unmount).
    Memfs(MemfsArgs),
    /// Run paper 000's co-writing experiments in-process on the model disk (aged images,
    /// cowrite=on vs off; modelled time, device writes, bandwidth).
    Experiment(ExperimentArgs),
}

/// Whether `word` names a subcommand (or an alias, or `help`), as the CLI definition says.
fn is_subcommand(word: &str) -> bool {
    use clap::CommandFactory;
    word == "help"
        || Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == word || c.get_all_aliases().any(|a| a == word))
}

/// Rewrites argv for the helper names and the mount.fuse3 convention.
fn rewrite_args(mut args: Vec<OsString>) -> Vec<OsString> {
    if args.is_empty() {
        args.push("moafs".into());
    }
    let prog = Path::new(&args[0])
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sub = match prog.as_str() {
        "mkfs.moafs" => Some("mkfs"),
        "fsck.moafs" => Some("fsck"),
        "mount.moafs" | "mount.fuse.moafs" | "mount.fuseblk.moafs" => Some("mount"),
        "umount.moafs" | "umount.fuse.moafs" | "umount.fuseblk.moafs" => Some("umount"),
        _ => {
            let first = args.get(1).map(|a| a.to_string_lossy().into_owned());
            match first {
                Some(a) if !is_subcommand(&a) && !a.starts_with('-') && Path::new(&a).exists() => {
                    Some("mount")
                }
                _ => None,
            }
        }
    };
    if let Some(sub) = sub {
        args.insert(1, sub.into());
        if matches!(
            prog.as_str(),
            "mount.moafs" | "mount.fuse.moafs" | "mount.fuseblk.moafs"
        ) {
            args.insert(2, "--mount-helper".into());
        }
    }
    args[0] = "moafs".into();
    args
}

/// Set once stdout is gone (the reader closed the pipe, as `| head` does): later output is
/// dropped, and the command still finishes its work (a repair is never cut short).
static STDOUT_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `println!` that never panics: a closed stdout is not an error of the command.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        use std::sync::atomic::Ordering;
        if !STDOUT_GONE.load(Ordering::Relaxed) {
            if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
                STDOUT_GONE.store(true, Ordering::Relaxed);
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("moafs: cannot write to standard output: {e}");
                }
            }
        }
    }};
}

mod age;
mod bench;
mod crashcheck;
mod experiment;
mod fsck;
mod inspect;
mod install;
mod loopdev;
mod manual;
mod mkfs;
mod mount;
mod passthrough;
mod umount;
use age::*;
use bench::*;
use crashcheck::*;
use experiment::*;
use fsck::*;
use inspect::*;
use install::*;
use mkfs::*;
use mount::*;
use passthrough::*;
use umount::*;

fn main() -> ExitCode {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,fuser::session=error"),
    )
    .init();
    let args = rewrite_args(std::env::args_os().collect());
    let is_fsck = args.get(1).is_some_and(|a| a == "fsck");
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            return ExitCode::from(match (usage, is_fsck) {
                (false, _) => 0,
                (true, true) => 16,
                (true, false) => 1,
            });
        }
    };
    let code = match cli.cmd {
        Cmd::Mkfs(a) => report(cmd_mkfs(&a)),
        Cmd::Mount(a) => cmd_mount(a),
        Cmd::Umount(a) => cmd_umount(&a),
        Cmd::Fsck(a) => cmd_fsck(&a),
        Cmd::Inspect(a) => report(cmd_inspect(&a)),
        Cmd::Crashcheck(a) => cmd_crashcheck(&a),
        Cmd::InstallHelpers(a) => report(cmd_install(&a)),
        Cmd::Bench(a) => report(cmd_bench(&a)),
        Cmd::Age(a) => report(cmd_age(&a)),
        Cmd::Experiment(a) => report(cmd_experiment(&a)),
        Cmd::Passthrough(a) => cmd_passthrough(&a),
        Cmd::Memfs(a) => cmd_memfs(&a),
    };
    ExitCode::from(code)
}

fn report(r: Result<(), String>) -> u8 {
    match r {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("moafs: {msg}");
            1
        }
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

fn dev_error(image: &Path, e: DeviceError) -> String {
    match e {
        DeviceError::Locked { .. } => format!(
            "{} is already in use by another moafs process (mounted or being checked)",
            image.display()
        ),
        DeviceError::Open { source, .. } => format!("cannot open {}: {source}", image.display()),
        e => format!("{}: {e}", image.display()),
    }
}

/// Opens (and locks) an image. A lock held by a daemon that the kernel has already let go of
/// (it is still writing back) is waited for, a bounded time; one held by a live mount is an
/// error naming the mount point at once.
fn open_image(image: &Path, opts: FileDeviceOptions) -> Result<FileDevice, String> {
    let abs = image.canonicalize().unwrap_or_else(|_| image.to_path_buf());
    mounts::open_when_released(
        &abs,
        || FileDevice::open(image, opts),
        |e| matches!(e, DeviceError::Locked { .. }),
    )
    .map_err(|e| match e {
        Ok(dev) => dev_error(image, dev),
        Err(msg) => msg,
    })
}

fn fs_error(image: &Path, e: FsError) -> String {
    match e {
        FsError::NotMoafs { detail } => {
            format!("{} is not a moafs image ({detail})", image.display())
        }
        FsError::Corrupt { .. } => format!(
            "{}: {e}; run `moafs fsck {}`",
            image.display(),
            image.display()
        ),
        FsError::Device(d) => dev_error(image, d),
        e => format!("{}: {e}", image.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv() {
        let v = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            rewrite_args(v(&["/sbin/mkfs.moafs", "img"])),
            v(&["moafs", "mkfs", "img"])
        );
        assert_eq!(
            rewrite_args(v(&["mount.fuse.moafs", "img", "dir", "-o", "rw"])),
            v(&["moafs", "mount", "--mount-helper", "img", "dir", "-o", "rw"])
        );
        assert_eq!(
            rewrite_args(v(&["/sbin/umount.fuse.moafs", "dir"])),
            v(&["moafs", "umount", "dir"])
        );
        assert_eq!(
            rewrite_args(v(&["moafs", "fsck", "img"])),
            v(&["moafs", "fsck", "img"])
        );
        // An existing file as first argument means mount (mount.fuse3 convention).
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        assert_eq!(
            rewrite_args(v(&["moafs", exe, "/mnt"])),
            v(&["moafs", "mount", exe, "/mnt"])
        );
        // A subcommand stays one even when a file of that name is in the working directory.
        let dir = tempfile::tempdir().unwrap();
        std::env::set_current_dir(dir.path()).unwrap();
        for sub in ["bench", "age", "experiment", "inspect"] {
            std::fs::write(sub, b"").unwrap();
            assert_eq!(
                rewrite_args(v(&["moafs", sub, "--help"])),
                v(&["moafs", sub, "--help"]),
                "{sub}"
            );
        }
    }

    #[test]
    fn cli_parses() {
        let c = Cli::try_parse_from(["moafs", "fsck", "-fy", "img"]).unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::Fsck(FsckArgs {
                yes: true,
                force: true,
                ..
            })
        ));
        assert!(Cli::try_parse_from(["moafs", "fsck", "-n", "-y", "img"]).is_err());
        let c =
            Cli::try_parse_from(["moafs", "mount", "img", "dir", "-o", "ro", "-n", "-v"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Mount(MountArgs { .. })));
    }
}
