//! `moafs passthrough`: the FUSE floor target — a directory passed through FUSE with moafs's
//! own transport and no engine (`moafs_fuse::passthrough`).

use super::*;

#[derive(Args, Debug)]
pub(crate) struct PassthroughArgs {
    /// Stay in the foreground (log to stderr).
    #[arg(short = 'f')]
    pub(crate) foreground: bool,
    /// Comma-separated options, the transport's of `moafs mount` (same defaults): threads=,
    /// attr_ttl_ms=, poll_ms=, uring=auto|off, uring_stream_kb=, sync_threads=, queue_boost=, writeback_cache=on|off,
    /// read_ahead_kb=, bdi_strict=,
    /// allow_other, default_permissions, nodefault_permissions, ro, rw, the VFS options of
    /// mount(8) (noatime, …), log=PATH, pidfile=PATH. The engine's options are refused.
    #[arg(short = 'o', action = clap::ArgAction::Append)]
    pub(crate) options: Vec<String>,
    /// The directory to pass through.
    pub(crate) source: PathBuf,
    pub(crate) mountpoint: PathBuf,
}

/// Options of `moafs mount` that belong to the transport (or the daemon), not the engine.
const TRANSPORT_OPTIONS: &[&str] = &[
    "threads",
    "attr_ttl_ms",
    "poll_ms",
    "uring",
    "uring_stream_kb",
    "writeback_cache",
    "forget_pause_ms",
    "sync_threads",
    "queue_boost",
    "read_ahead_kb",
    "bdi_strict",
    "allow_other",
    "default_permissions",
    "nodefault_permissions",
    "ro",
    "rw",
    "log",
    "pidfile",
];

/// The mount plan of a passthrough: `moafs mount`'s parsing, with the engine's options refused.
pub(crate) fn parse_passthrough_options(opts: &[String]) -> Result<MountPlan, String> {
    for opt in opts.iter().flat_map(|o| o.split(',')) {
        let opt = opt.trim();
        let k = opt.split_once('=').map_or(opt, |(k, _)| k);
        let transport = opt.is_empty()
            || TRANSPORT_OPTIONS.contains(&k)
            || moafs_fuse::is_vfs_option(k)
            || IGNORED_OPTIONS.contains(&k)
            || k.starts_with("x-");
        if !transport {
            return Err(format!(
                "passthrough: option {opt} is not a transport option (the passthrough has no engine)"
            ));
        }
    }
    parse_mount_options(opts)
}

pub(crate) fn cmd_passthrough(a: &PassthroughArgs) -> u8 {
    let plan = match parse_passthrough_options(&a.options) {
        Ok(p) => p,
        Err(e) => return report(Err(e)),
    };
    // Absolute paths: the daemon changes to "/".
    let source = match a.source.canonicalize() {
        Ok(p) if p.is_dir() => p,
        Ok(p) => return report(Err(format!("{} is not a directory", p.display()))),
        Err(e) => return report(Err(format!("{}: {e}", a.source.display()))),
    };
    let mountpoint = match mount_point(&a.mountpoint) {
        Ok(p) => p,
        Err(e) => return report(Err(e)),
    };
    if mountpoint.starts_with(&source) && mountpoint != source {
        // a request for the mount point would reach the daemon through its own mount
        return report(Err(format!(
            "mount point {} is inside the source {}",
            mountpoint.display(),
            source.display()
        )));
    }
    let mut cfg = plan.fuse.clone();
    cfg.fsname = source.display().to_string();
    cfg.subtype = "moafs-passthrough".to_string();
    serve_daemon(plan, a.foreground, |ready| {
        moafs_fuse::passthrough::mount_blocking(&source, &mountpoint, &cfg, ready)
            .map_err(|e| format!("passthrough on {}: {e}", mountpoint.display()))
    })
}

#[derive(Args, Debug)]
pub(crate) struct MemfsArgs {
    /// Stay in the foreground (log to stderr).
    #[arg(short = 'f')]
    pub(crate) foreground: bool,
    /// Comma-separated options: size= (the capacity, default 4G; K, M, G suffixes) and the
    /// transport's options of `moafs passthrough` (same defaults).
    #[arg(short = 'o', action = clap::ArgAction::Append)]
    pub(crate) options: Vec<String>,
    pub(crate) mountpoint: PathBuf,
}

/// Capacity of a memfs mount without `size=`.
const MEMFS_DEFAULT_SIZE: u64 = 4 << 30;

/// The capacity and mount plan of a memfs: `size=` taken out, the rest a passthrough's.
pub(crate) fn parse_memfs_options(opts: &[String]) -> Result<(u64, MountPlan), String> {
    let mut size = MEMFS_DEFAULT_SIZE;
    let mut rest = Vec::new();
    for opt in opts.iter().flat_map(|o| o.split(',')) {
        match opt.trim().split_once('=') {
            Some(("size", v)) => {
                size = moafs_core::parse_size(v).map_err(|e| format!("memfs: size={v}: {e}"))?;
                if size < 1 << 20 {
                    return Err(format!("memfs: size={v} is below 1M"));
                }
            }
            _ => rest.push(opt.to_string()),
        }
    }
    let plan = parse_passthrough_options(&rest).map_err(|e| e.replace("passthrough", "memfs"))?;
    Ok((size, plan))
}

pub(crate) fn cmd_memfs(a: &MemfsArgs) -> u8 {
    let (size, plan) = match parse_memfs_options(&a.options) {
        Ok(p) => p,
        Err(e) => return report(Err(e)),
    };
    let mountpoint = match mount_point(&a.mountpoint) {
        Ok(p) => p,
        Err(e) => return report(Err(e)),
    };
    let mut cfg = plan.fuse.clone();
    cfg.fsname = "memfs".to_string();
    cfg.subtype = "moafs-memfs".to_string();
    serve_daemon(plan, a.foreground, |ready| {
        moafs_fuse::memfs::mount_blocking(size, &mountpoint, &cfg, ready)
            .map_err(|e| format!("memfs on {}: {e}", mountpoint.display()))
    })
}

/// The mount point as an absolute path (the daemon changes to "/"), or why it cannot be one.
fn mount_point(p: &Path) -> Result<PathBuf, String> {
    match p.canonicalize() {
        Ok(p) if p.is_dir() => Ok(p),
        Ok(p) => Err(format!("mount point {} is not a directory", p.display())),
        Err(e) => Err(format!("mount point {}: {e}", p.display())),
    }
}

/// Runs `serve` (which mounts, calls `ready` once the mount is live, and serves until the
/// unmount) in the foreground or as a daemon, with the plan's log and pid files.
fn serve_daemon(
    mut plan: MountPlan,
    foreground: bool,
    serve: impl FnOnce(Box<dyn FnOnce() + '_>) -> Result<(), String>,
) -> u8 {
    for p in [&mut plan.log, &mut plan.pidfile].into_iter().flatten() {
        if p.is_relative() {
            if let Ok(cwd) = std::env::current_dir() {
                *p = cwd.join(&*p);
            }
        }
    }
    if foreground {
        let pidfile = plan.pidfile.clone();
        let res = serve(Box::new(|| {
            if let Some(p) = &pidfile {
                write_pidfile(p);
            }
        }));
        if let Some(p) = &pidfile {
            remove_pidfile(p);
        }
        return report(res);
    }
    report(daemonize(
        plan.log.as_deref(),
        plan.pidfile.as_deref(),
        serve,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let p = parse_passthrough_options(&["threads=3,uring=off,noatime,pidfile=/tmp/p".into()])
            .unwrap();
        assert_eq!(p.fuse.threads, 3);
        assert_eq!(p.fuse.uring, UringMode::Off);
        assert_eq!(p.fuse.vfs_options, vec!["noatime".to_string()]);
        assert_eq!(p.pidfile, Some(PathBuf::from("/tmp/p")));
        // the transport's defaults are moafs's
        let p = parse_passthrough_options(&[]).unwrap();
        let m = parse_mount_options(&[]).unwrap();
        assert_eq!(p.fuse, m.fuse);
        for engine in [
            "cache_size=64M",
            "journal=data",
            "bytelog=on",
            "record=/tmp/x",
        ] {
            let e = parse_passthrough_options(&[engine.into()]).unwrap_err();
            assert!(e.contains("not a transport option"), "{engine}: {e}");
        }
        assert!(parse_passthrough_options(&["threads=0".into()]).is_err());
    }

    #[test]
    fn memfs_options() {
        let (size, p) = parse_memfs_options(&["size=64M,threads=3".into()]).unwrap();
        assert_eq!(size, 64 << 20);
        assert_eq!(p.fuse.threads, 3);
        let (size, p) = parse_memfs_options(&[]).unwrap();
        assert_eq!(size, MEMFS_DEFAULT_SIZE);
        assert_eq!(p.fuse, parse_mount_options(&[]).unwrap().fuse);
        assert!(parse_memfs_options(&["size=12".into()])
            .unwrap_err()
            .contains("below 1M"));
        assert!(parse_memfs_options(&["size=lots".into()]).is_err());
        let e = parse_memfs_options(&["journal=data".into()]).unwrap_err();
        assert!(e.contains("memfs: option journal=data"), "{e}");
    }
}
