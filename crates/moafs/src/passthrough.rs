//! `moafs passthrough`: the FUSE floor target — a directory passed through FUSE with moafs's
//! own transport and no engine (`moafs_fuse::passthrough`).

use super::*;

#[derive(Args, Debug)]
pub(crate) struct PassthroughArgs {
    /// Stay in the foreground (log to stderr).
    #[arg(short = 'f')]
    pub(crate) foreground: bool,
    /// Comma-separated options, the transport's of `moafs mount` (same defaults): threads=,
    /// attr_ttl_ms=, poll_ms=, uring=auto|off, uring_stream_kb=, read_ahead_kb=, bdi_strict=,
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
    let mut plan = match parse_passthrough_options(&a.options) {
        Ok(p) => p,
        Err(e) => return report(Err(e)),
    };
    // Absolute paths: the daemon changes to "/".
    let source = match a.source.canonicalize() {
        Ok(p) if p.is_dir() => p,
        Ok(p) => return report(Err(format!("{} is not a directory", p.display()))),
        Err(e) => return report(Err(format!("{}: {e}", a.source.display()))),
    };
    let mountpoint = match a.mountpoint.canonicalize() {
        Ok(p) if p.is_dir() => p,
        Ok(p) => {
            return report(Err(format!(
                "mount point {} is not a directory",
                p.display()
            )))
        }
        Err(e) => return report(Err(format!("mount point {}: {e}", a.mountpoint.display()))),
    };
    if mountpoint.starts_with(&source) && mountpoint != source {
        // a request for the mount point would reach the daemon through its own mount
        return report(Err(format!(
            "mount point {} is inside the source {}",
            mountpoint.display(),
            source.display()
        )));
    }
    for p in [&mut plan.log, &mut plan.pidfile].into_iter().flatten() {
        if p.is_relative() {
            if let Ok(cwd) = std::env::current_dir() {
                *p = cwd.join(&*p);
            }
        }
    }
    let mut cfg = plan.fuse.clone();
    cfg.fsname = source.display().to_string();
    cfg.subtype = "moafs-passthrough".to_string();
    let serve = |ready: Box<dyn FnOnce() + '_>| {
        moafs_fuse::passthrough::mount_blocking(&source, &mountpoint, &cfg, ready)
            .map_err(|e| format!("passthrough on {}: {e}", mountpoint.display()))
    };
    if a.foreground {
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
}
