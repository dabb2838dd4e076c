//! `moafs mount` (`mount.moafs`, `mount.fuse.moafs`): mount options and the FUSE daemon.

use super::*;

#[derive(Args, Debug)]
#[command(after_long_help = crate::manual::mount_options_text())]
pub(crate) struct MountArgs {
    /// Stay in the foreground (log to stderr).
    #[arg(short = 'f')]
    pub(crate) foreground: bool,
    /// Comma-separated mount options (listed below by --help, and in mount.moafs(8)).
    #[arg(short = 'o', action = clap::ArgAction::Append)]
    pub(crate) options: Vec<String>,
    /// mount(8) helper flags (no mtab, sloppy, verbose): accepted and ignored.
    #[arg(short = 'n', hide = true)]
    pub(crate) no_mtab: bool,
    #[arg(short = 's', hide = true)]
    pub(crate) sloppy: bool,
    #[arg(short = 'v', hide = true)]
    pub(crate) verbose: bool,
    /// Run as mount(8)'s helper (mount.moafs, mount.fuse.moafs): set from argv[0].
    #[arg(long, hide = true)]
    pub(crate) mount_helper: bool,
    pub(crate) image: PathBuf,
    pub(crate) mountpoint: PathBuf,
}

#[derive(Debug, Clone)]
pub(crate) struct MountPlan {
    pub(crate) engine: MountOptions,
    pub(crate) fuse: MountConfig,
    /// O_DIRECT on the image: `direct` / `nodirect`; by default on wherever the image's file
    /// system supports it (the device sees the engine's requests, not the page cache's pages,
    /// and the image's data is not cached twice), but for a file in tmpfs (whose page cache
    /// is the storage itself).
    pub(crate) direct: Option<bool>,
    /// `nvm=PATH`: the NVM tier of the byte log, and how its persists are charged.
    pub(crate) nvm: Option<PathBuf>,
    pub(crate) nvm_model: moafs_core::device::NvmModel,
    pub(crate) log: Option<PathBuf>,
    /// `record=PATH`: the write log for `moafs crashcheck` (`device/record.rs`).
    pub(crate) record: Option<PathBuf>,
    /// `faults=PATH`: device faults switched by a control file (`device/switch.rs`).
    pub(crate) faults: Option<PathBuf>,
    pub(crate) pidfile: Option<PathBuf>,
    pub(crate) stats: Option<PathBuf>,
    /// `-o remount` (mount(8) asks the helper to change the flags of a live mount).
    pub(crate) remount: bool,
    /// `fuseblk=on|off`: as root, an image file is mounted through a loop device as
    /// `fuseblk.moafs` (so that sync(2) and syncfs(2) reach it; `loopdev.rs`). Default on.
    pub(crate) fuseblk: bool,
}

/// Options of mount(8) that mean nothing to the mount itself (fstab bookkeeping).
pub(crate) const IGNORED_OPTIONS: &[&str] = &[
    "auto", "noauto", "user", "nouser", "_netdev", "nofail", "defaults",
];

/// The opposite of a VFS option of mount(8) (the later of the two wins).
pub(crate) fn vfs_opposite(opt: &str) -> Option<String> {
    const PAIRS: &[(&str, &str)] = &[
        ("dev", "nodev"),
        ("suid", "nosuid"),
        ("exec", "noexec"),
        ("sync", "async"),
        ("atime", "noatime"),
        ("diratime", "nodiratime"),
        ("relatime", "norelatime"),
        ("strictatime", "nostrictatime"),
        ("lazytime", "nolazytime"),
    ];
    PAIRS.iter().find_map(|&(a, b)| {
        (opt == a)
            .then(|| b.to_string())
            .or_else(|| (opt == b).then(|| a.to_string()))
    })
}

pub(crate) fn parse_mount_options(opts: &[String]) -> Result<MountPlan, String> {
    let mut p = MountPlan {
        engine: MountOptions {
            // the kernel holds references to inodes until it sends FORGET
            kernel_lookups: true,
            // writeback cache: the kernel owns mtime/ctime of written files
            kernel_times: true,
            // budgets from the machine's memory, unless given (issue 44)
            cache_follows_memory: true,
            dirty_follows_memory: true,
            ..MountOptions::default()
        },
        fuse: MountConfig::default(),
        direct: None,
        nvm: None,
        nvm_model: Default::default(),
        log: None,
        record: None,
        faults: None,
        pidfile: None,
        stats: None,
        remount: false,
        fuseblk: true,
    };
    let num = |k: &str, v: Option<&str>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("mount option {k} needs a value ({k}=N)"))?;
        v.parse::<u64>()
            .map_err(|_| format!("invalid value {v:?} for mount option {k}"))
    };
    let size = |k: &str, v: Option<&str>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("mount option {k} needs a value ({k}=SIZE)"))?;
        moafs_core::parse_size(v).map_err(|e| format!("mount option {k}: {e}"))
    };
    let on_off = |k: &str, v: Option<&str>| -> Result<bool, String> {
        match v {
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            _ => Err(format!("{k}= takes on or off, not {v:?}")),
        }
    };
    let path = |k: &str, v: Option<&str>| -> Result<PathBuf, String> {
        match v {
            Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
            _ => Err(format!("mount option {k} needs a value ({k}=PATH)")),
        }
    };
    for opt in opts.iter().flat_map(|o| o.split(',')) {
        let opt = opt.trim();
        if opt.is_empty() {
            continue;
        }
        let (k, v) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match k {
            "cache_size" => {
                p.engine.cache_bytes = size(k, v)?;
                p.engine.cache_follows_memory = false;
            }
            "dirty_max" => {
                p.engine.dirty_bytes_max = size(k, v)?;
                p.engine.dirty_follows_memory = false;
            }
            "write_behind" => p.engine.write_behind_bytes = size(k, v)?,
            "cowrite" => p.engine.cowrite = on_off(k, v)?,
            "fuseblk" => p.fuseblk = on_off(k, v)?,
            "bytelog" => p.engine.bytelog = on_off(k, v)?,
            "unlocked_reads" => p.engine.unlocked_reads = on_off(k, v)?,
            "bytelog_writeback" => p.engine.bytelog_writeback = on_off(k, v)?,
            "bytelog_grow" => p.engine.bytelog_grow = on_off(k, v)?,
            "readahead" => {
                p.engine.readahead = v
                    .ok_or("readahead= takes sizeaware, linux or off")?
                    .parse()?;
            }
            "readahead_max_kb" => {
                let n = num(k, v)?;
                if !(4..=16384).contains(&n) {
                    return Err(format!("readahead_max_kb={n}: must be between 4 and 16384"));
                }
                p.engine.readahead_max_kb = n as u32;
            }
            "bytelog_threshold" => {
                let n = size(k, v)?;
                if !(128..=16384).contains(&n) {
                    return Err(format!(
                        "bytelog_threshold={n}: must be between 128 and 16384 bytes"
                    ));
                }
                p.engine.bytelog_threshold = n as u32;
            }
            "nvm" => p.nvm = Some(path(k, v)?),
            "nvm_model" => {
                p.nvm_model = v.ok_or("nvm_model= needs optane or none")?.parse()?;
            }
            "nvm_threshold" => {
                let n = size(k, v)?;
                if !(64..=65536).contains(&n) {
                    return Err(format!(
                        "nvm_threshold={n}: must be between 64 and 65536 bytes"
                    ));
                }
                p.engine.nvm_threshold = n as u32;
            }
            "wb_order" => {
                p.engine.wb_sorted = match v {
                    Some("address") => true,
                    Some("dirty") => false,
                    _ => return Err(format!("wb_order= takes dirty or address, not {v:?}")),
                }
            }
            "cowrite_max" => {
                let n = size(k, v)?;
                if !(8 << 10..=4 << 20).contains(&n) {
                    return Err(format!(
                        "cowrite_max={n}: must be between 8K and 4M (2 to 256 blocks are used)"
                    ));
                }
                p.engine.cowrite_max = n;
            }
            "flush_interval_ms" => p.engine.flush_interval_ms = num(k, v)?,
            "dirty_expire_ms" => p.engine.dirty_expire_ms = num(k, v)?,
            "checkpoint_interval_ms" => p.engine.checkpoint_interval_ms = num(k, v)?,
            "small_commit_blocks" => p.engine.small_commit_blocks = num(k, v)?,
            "journal" => {
                p.engine.journal = v
                    .ok_or("journal= needs writeback, ordered or data")?
                    .parse()?
            }
            "ro" if v.is_none() => {
                p.engine.read_only = true;
                p.fuse.read_only = true;
            }
            "rw" if v.is_none() => {
                p.engine.read_only = false;
                p.fuse.read_only = false;
            }
            // ext4's and XFS's name for a read-only look at the image as it lies
            "norecovery" | "noload" if v.is_none() => p.engine.no_recovery = true,
            // enforce chattr +i/+a: answer OPEN (one request per open) to check it
            "iflags" if v.is_none() => p.fuse.inode_flags = true,
            "extents" if v.is_none() => p.engine.convert_to_extents = true,
            "remount" | "bind" if v.is_none() => p.remount = true,
            _ if v.is_none() && moafs_fuse::is_vfs_option(k) => {
                let vfs = &mut p.fuse.vfs_options;
                if let Some(opp) = vfs_opposite(k) {
                    vfs.retain(|o| *o != opp);
                }
                // the atime policies exclude each other
                if ["noatime", "relatime", "strictatime"].contains(&k) {
                    vfs.retain(|o| !["noatime", "relatime", "strictatime"].contains(&o.as_str()));
                }
                vfs.retain(|o| o != k);
                vfs.push(k.to_string());
            }
            // Shown by the kernel for every FUSE mount; mount(8) may hand them back.
            "user_id" | "group_id" | "rootmode" | "max_read" | "blksize" if v.is_some() => {}
            // umount(8)'s helper of this mount, kept by mount(8) in its utab
            "uhelper" if v.is_some() => {}
            _ if k.starts_with("x-") => {}
            "direct" if v.is_none() => p.direct = Some(true),
            "nodirect" if v.is_none() => p.direct = Some(false),
            "threads" => {
                let n = num(k, v)?;
                if !(1..=64).contains(&n) {
                    return Err(format!("threads={n}: must be between 1 and 64"));
                }
                p.fuse.threads = n as usize;
            }
            "attr_ttl_ms" => p.fuse.attr_ttl = Duration::from_millis(num(k, v)?),
            "poll_ms" => p.fuse.poll_window = Duration::from_millis(num(k, v)?.min(10_000)),
            "uring" => {
                p.fuse.uring = match v {
                    Some("auto") => UringMode::Auto,
                    Some("off") => UringMode::Off,
                    _ => return Err(format!("uring= takes auto or off, not {v:?}")),
                }
            }
            "uring_stream_kb" => {
                p.fuse.uring_stream_kb = num(k, v)?.min(1 << 20) as u32;
            }
            "sync_threads" => {
                p.fuse.sync_threads = num(k, v)?.min(64) as usize;
            }
            "queue_boost" => {
                p.fuse.queue_boost = match v {
                    Some("off") => None,
                    Some(n) => match n.parse::<i32>() {
                        Ok(n) if (-20..=19).contains(&n) => Some(n),
                        _ => {
                            return Err(format!(
                                "queue_boost= takes a nice value -20..19 or off, not {n:?}"
                            ))
                        }
                    },
                    None => return Err("queue_boost= takes a nice value -20..19 or off".into()),
                }
            }
            "forget_pause_ms" => {
                p.fuse.forget_pause = Duration::from_millis(num(k, v)?.min(1000));
            }
            "writeback_cache" => {
                let on = on_off(k, v)?;
                p.fuse.writeback_cache = on;
                // with the writeback cache the kernel owns mtime/ctime of written files;
                // without it every write reaches the engine, which stamps them
                p.engine.kernel_times = on;
            }
            "read_ahead_kb" => p.fuse.read_ahead_kb = num(k, v)?.min(u32::MAX as u64) as u32,
            "bdi_strict" => {
                p.fuse.bdi_strict_limit = match v {
                    Some("0") => false,
                    Some("1") => true,
                    _ => return Err(format!("bdi_strict= takes 0 or 1, not {v:?}")),
                }
            }
            "allow_other" if v.is_none() => p.fuse.allow_other = true,
            "default_permissions" if v.is_none() => p.fuse.default_permissions = true,
            "nodefault_permissions" if v.is_none() => p.fuse.default_permissions = false,
            "log" => p.log = Some(path(k, v)?),
            "record" => p.record = Some(path(k, v)?),
            "faults" => p.faults = Some(path(k, v)?),
            "pidfile" => p.pidfile = Some(path(k, v)?),
            "stats" => p.stats = Some(path(k, v)?),
            // Added by mount.fuse3 and friends; the source name is ours to choose.
            "fsname" | "subtype" if v.is_some() => {}
            _ if v.is_none() && IGNORED_OPTIONS.contains(&k) => {}
            _ => return Err(format!("unknown mount option {opt}")),
        }
    }
    if p.record.is_some() && p.engine.read_only {
        return Err("record= records writes: not with ro".into());
    }
    Ok(p)
}

/// A write-protected device (or an image that cannot be opened for writing) mounts read-only,
/// as a kernel file system's does — said on stderr, in mount(8)'s words. A journal that needs
/// replaying cannot be replayed there: such a mount is refused unless `norecovery` asks for
/// the image as it lies (ext4 and XFS refuse it too). `norecovery` needs a read-only mount.
fn settle_read_only(image: &Path, p: &mut MountPlan) -> Result<(), String> {
    let protected = moafs_core::device::write_protected(image);
    if protected {
        let replay = !p.engine.no_recovery && needs_replay(image);
        if replay {
            // one line: mount(8)'s "cannot mount ... read-only" (xfstests' filters know it)
            return Err(format!(
                "{0}: cannot mount {0} read-only: its journal needs replaying and the device \
                 is write-protected (-o ro,norecovery mounts the image as it lies)",
                image.display()
            ));
        }
        if !p.engine.read_only {
            eprintln!(
                "moafs mount: {}: device write-protected, mounting read-only",
                image.display()
            );
            p.engine.read_only = true;
            p.fuse.read_only = true;
        }
    }
    if p.engine.no_recovery && !p.engine.read_only {
        return Err(
            "norecovery mounts without replaying the journal: only with ro (a write would \
             build on metadata the journal replaces)"
                .into(),
        );
    }
    Ok(())
}

/// Whether the image's journal holds transactions to replay (it was not unmounted cleanly).
fn needs_replay(image: &Path) -> bool {
    let opts = moafs_core::device::FileDeviceOptions {
        read_only: true,
        direct: false,
        lock: false,
    };
    moafs_core::device::FileDevice::open(image, opts)
        .ok()
        .and_then(|dev| moafs_core::recovery::read_superblock(&dev).ok())
        .is_some_and(|sb| sb.state != moafs_core::format::STATE_CLEAN && sb.has_journal())
}

/// `record=PATH` is created (or truncated) by the daemon: never the image itself, and never
/// inside the mount it records (the daemon would wait on itself).
fn check_record_path(record: &Path, image: &Path, mountpoint: &Path) -> Result<(), String> {
    if record.canonicalize().is_ok_and(|r| r == image) {
        return Err(format!(
            "record={}: that is the image; give a new file for the write log",
            record.display()
        ));
    }
    let parent = record.parent().and_then(|p| p.canonicalize().ok());
    if parent.is_some_and(|p| p.starts_with(mountpoint)) {
        return Err(format!(
            "record={}: inside the mount point {}; give a path outside it",
            record.display(),
            mountpoint.display()
        ));
    }
    Ok(())
}

/// Opens the image and mounts the engine; then serves FUSE until unmounted.
pub(crate) fn serve(
    image: &Path,
    mountpoint: &Path,
    plan: &MountPlan,
    loop_dev: Option<loopdev::Attached>,
    ready: impl FnOnce(),
) -> Result<(), String> {
    // A read-only mount opens a writable image for writing all the same (the engine holds
    // it shut, `HeldDevice`): `remount,rw` then needs no second open of a locked image.
    let writable_later = plan.engine.read_only
        && !plan.engine.no_recovery
        && !moafs_core::device::write_protected(image);
    let dev = open_image(
        image,
        FileDeviceOptions {
            read_only: plan.engine.read_only && !writable_later,
            // the daemon's block cache is the only cache below the mount's page cache
            // (docs/DESIGN.md §Reads); buffered in tmpfs and where O_DIRECT is refused
            direct: plan
                .direct
                .unwrap_or_else(|| FileDevice::direct_by_default(image)),
            lock: true,
        },
    )?;
    let mut dev: Arc<dyn BlockDevice> = Arc::new(dev);
    let record = match &plan.record {
        Some(p) => {
            let rec = moafs_core::device::RecordDevice::create(dev, p)
                .map_err(|e| format!("record={}: {e}", p.display()))?;
            let rec = Arc::new(rec);
            dev = rec.clone();
            Some(rec)
        }
        None => None,
    };
    if let Some(p) = &plan.faults {
        // outermost: a request that fails never reaches the write log
        dev = Arc::new(moafs_core::device::SwitchDevice::new(dev, p.clone()));
    }
    let mut tier = match &plan.nvm {
        Some(p) => Some(open_tier(p, plan.nvm_model)?),
        None => None,
    };
    if let Some(rec) = &record {
        if let Some((nvm, path)) = tier.take() {
            // the tier's size and contents now, then its stores and persists, in one log
            // with the device's requests (`device/record.rs`)
            let nvm = rec
                .record_tier(nvm)
                .map_err(|e| format!("record= of the NVM tier {path}: {e}"))?;
            tier = Some((Arc::new(nvm), path));
        }
    }
    let fs = Fs::mount_with_tier(dev, tier, plan.engine.clone()).map_err(|e| fs_error(image, e))?;
    let mut cfg = plan.fuse.clone();
    // A block device mounts as fuseblk (root only): sync(2) and syncfs(2) then reach the
    // engine (SYNCFS), which they never do through a fuse mount, and umount waits for the
    // daemon's DESTROY. An image file does too, through the loop device attached for it
    // (the mount's source then reads /dev/loopN, as with mount(8)'s `-o loop`). Otherwise
    // the source is the image's absolute path, as a block device's would be: findmnt -S
    // IMAGE, df and xfstests find the mount by it (the type reads fuse.moafs).
    match &loop_dev {
        Some(l) => {
            cfg.fsname = l.path().display().to_string();
            cfg.blkdev = true;
        }
        None => {
            cfg.fsname = image.display().to_string();
            cfg.blkdev = is_block_device(image) && nix::unistd::geteuid().is_root();
        }
    }
    let fs = Arc::new(fs);
    let ready = move || {
        // the mount holds the loop device now: its unmount is the last close, which
        // detaches it (LO_FLAGS_AUTOCLEAR)
        drop(loop_dev);
        ready()
    };
    let served = moafs_fuse::mount_blocking(fs.clone(), mountpoint, &cfg, ready)
        .map_err(|e| format!("mount on {}: {e}", mountpoint.display()));
    if let Some(rec) = &record {
        // the engine is unmounted: the log is complete
        rec.close().map_err(|e| format!("record: {e}"))?;
    }
    served?;
    if let Some(path) = &plan.stats {
        write_stats(path, &fs);
    }
    Ok(())
}

/// Opens the NVM tier file `p` (`-o nvm=`, `--nvm`): the tier and its absolute path.
pub(crate) fn open_tier(
    p: &Path,
    model: moafs_core::device::NvmModel,
) -> Result<(Arc<dyn moafs_core::device::Nvm>, String), String> {
    let abs = p.canonicalize().map_err(|e| {
        format!(
            "NVM tier {}: {e} (give an existing file; its size is the tier's)",
            p.display()
        )
    })?;
    let t = moafs_core::device::FileNvm::open(&abs, model)
        .map_err(|e| format!("NVM tier {}: {e}", abs.display()))?;
    Ok((Arc::new(t), abs.display().to_string()))
}

/// This process's peak resident memory (bytes; VmHWM of /proc/self/status), if known.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Writes the engine's and the device's counters of this mount as JSON (option `stats=PATH`).
pub(crate) fn write_stats(path: &Path, fs: &Fs) {
    let e = fs.counters();
    let bs = fs.geometry().block_size as u64;
    let json = serde_json::json!({
        "engine": e,
        "device": fs.device_counters(),
        "nvm": fs.tier_counters(),
        // the cache's and its dirty data's budgets at the end (`budget.rs`)
        "budget": {
            "cache_bytes": fs.budgets().0,
            "dirty_bytes": fs.budgets().1,
            "follow_memory": [fs.options().cache_follows_memory, fs.options().dirty_follows_memory],
        },
        // inodes in memory and referenced by the kernel (`kept.rs`), and the daemon's peak
        // resident memory (VmHWM)
        "inodes": fs.inode_counts(),
        "daemon_peak_rss_bytes": peak_rss(),
        // device bytes the engine wrote, by what they were for
        "bytes_by_class": {
            "data_home": e.data_blocks_written * bs,
            "journal": e.journal_blocks_written * bs,
            "checkpoint": e.meta_blocks_written * bs,
            "byte_log": e.bytelog_sectors * 512,
            "tier": e.tier_bytes,
        },
        // reads (paper 001): bytes asked of the daemon, file data bytes it read from the
        // device, and of those the readahead's: used by a later read, or not (evicted,
        // dropped, or still cached unused at unmount)
        "reads": {
            "policy": fs.options().readahead.to_string(),
            "requests": e.read_requests,
            "requested_bytes": e.read_bytes,
            "device_bytes": e.data_blocks_read * bs,
            "prefetched_bytes": e.ra_read * bs,
            "prefetched_used_bytes": e.ra_used * bs,
            "prefetched_unused_bytes": e.ra_read.saturating_sub(e.ra_used) * bs,
            "prefetched_evicted_bytes": (e.ra_wasted + e.ra_dropped) * bs,
        },
        // where the fsyncs' time went, by phase and by the way they were served (µs)
        "fsync_phases": fs.fsync_report(),
        "records_per_fsync": if e.bytelog_fsyncs > 0 {
            e.bytelog_records as f64 / e.bytelog_fsyncs as f64
        } else {
            0.0
        },
    });
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    if let Err(e) = std::fs::write(path, text) {
        log::error!("cannot write stats file {}: {e}", path.display());
    }
}

pub(crate) fn write_pidfile(path: &Path) {
    if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
        log::error!("cannot write pid file {}: {e}", path.display());
    }
}

pub(crate) fn remove_pidfile(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .map(|s| s.trim() == std::process::id().to_string())
        .unwrap_or(false);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

pub(crate) fn cmd_mount(mut a: MountArgs) -> u8 {
    if a.mount_helper && nix::unistd::geteuid().is_root() {
        // mount(8) passes `nodev`/`nosuid` when asked for and never `dev`/`suid`, the kernel
        // defaults: as root's helper, mount as a kernel file system would be (FUSE's own
        // default, used by `moafs mount`, is nodev,nosuid).
        a.options.insert(0, "dev,suid".into());
    }
    let mut plan = match parse_mount_options(&a.options) {
        Ok(p) => p,
        Err(e) => return report(Err(e)),
    };
    plan.fuse.foreground = a.foreground;
    if plan.remount {
        // mount(8) names the mount point second, the source first.
        let bind = a.options.iter().any(|o| o.split(',').any(|x| x == "bind"));
        let target = a.mountpoint.canonicalize().unwrap_or(a.mountpoint.clone());
        return report(mounts::remount(&target, &a.options, bind));
    }
    // Absolute paths: the daemon changes to "/".
    let image = match a.image.canonicalize() {
        Ok(p) => p,
        Err(e) => return report(Err(format!("cannot open {}: {e}", a.image.display()))),
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
    let absolutize = |p: &mut Option<PathBuf>| {
        if let Some(path) = p {
            if path.is_relative() {
                if let Ok(cwd) = std::env::current_dir() {
                    *path = cwd.join(&*path);
                }
            }
        }
    };
    absolutize(&mut plan.log);
    absolutize(&mut plan.record);
    absolutize(&mut plan.faults);
    absolutize(&mut plan.pidfile);
    if let Some(r) = &plan.record {
        if let Err(e) = check_record_path(r, &image, &mountpoint) {
            return report(Err(e));
        }
    }
    // Mounted already: a second mount shows the same file system, as a block device's would.
    // Mounted on this very directory: refused (the kernel refuses a file system on a mount
    // point where it is mounted already) — unless an unmount in progress takes it away within
    // moments (a script's `umount DIR & mount IMAGE DIR`, xfstests generic/604).
    let start = std::time::Instant::now();
    let existing = loop {
        let existing = mounts::mounts_of_image(&image);
        if !existing.iter().any(|m| m.target == mountpoint) {
            break existing;
        }
        if start.elapsed() > Duration::from_secs(3) {
            return report(Err(format!(
                "{} is already mounted on {}",
                image.display(),
                mountpoint.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(first) = existing.first() {
        if plan.fuse.foreground {
            return report(Err(format!(
                "{} is mounted on {} (a second mount is a bind mount of it; not in the foreground)",
                image.display(),
                first.target.display()
            )));
        }
        let res = mounts::mount_again(&first.target, &mountpoint, &a.options);
        if res.is_ok() {
            mounts::register_umount_helper(&image, &mountpoint);
        }
        return report(res);
    }

    if let Err(e) = settle_read_only(&image, &mut plan) {
        // mount(8)'s prefix: "mount: DEV: cannot mount DEV read-only"
        eprintln!("moafs mount: {e}");
        return 1;
    }
    let loop_dev = loop_for_sync(&image, &plan);
    // the mount's source in the mount table
    let source = loop_dev
        .as_ref()
        .map_or_else(|| image.clone(), |l| l.path().to_path_buf());
    if a.foreground {
        let pidfile = plan.pidfile.clone();
        let (img, mp) = (source, mountpoint.clone());
        let res = serve(&image, &mountpoint, &plan, loop_dev, || {
            if let Some(p) = &pidfile {
                write_pidfile(p);
            }
            // mount(8) may look at the mount point, which this process serves: not from here.
            std::thread::spawn(move || mounts::register_umount_helper(&img, &mp));
        });
        if let Some(p) = &pidfile {
            remove_pidfile(p);
        }
        return report(res);
    }
    match daemonize(plan.log.as_deref(), plan.pidfile.as_deref(), |ready| {
        serve(&image, &mountpoint, &plan, loop_dev, ready)
    }) {
        Ok(()) => {
            mounts::register_umount_helper(&source, &mountpoint);
            0
        }
        Err(e) => report(Err(e)),
    }
}

/// The loop device an image file is mounted through, so that sync(1) and syncfs(2) reach it
/// (`fuseblk=on`, root; `loopdev.rs`). `None` for a block device (it is one) and where none
/// can be had: then the user is told that sync does not reach the mount.
fn loop_for_sync(image: &Path, plan: &MountPlan) -> Option<loopdev::Attached> {
    if is_block_device(image) || !plan.fuseblk {
        return None;
    }
    let unsynced = "sync(1) and syncfs(2) do not reach it; fsync(2) of any file or directory \
                    commits everything";
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "moafs mount: note: {} is mounted as fuse.moafs (not root): {unsynced}",
            image.display()
        );
        return None;
    }
    // Read-write even for a read-only mount, as long as the image can be written: the
    // kernel refuses `remount,rw` of a file system whose block device is read-only (EACCES).
    let attached = loopdev::attach(image, false).or_else(|e| {
        if plan.engine.read_only {
            loopdev::attach(image, true)
        } else {
            Err(e)
        }
    });
    match attached {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!(
                "moafs mount: note: no loop device for {} ({e}): mounted as fuse.moafs; \
                 {unsynced}",
                image.display()
            );
            None
        }
    }
}

/// Forks. The child detaches (`log`: its stderr) and runs `serve`, which must call the
/// function it is given once the mount is ready (the pid file is written then), and exits
/// when `serve` returns. The parent returns `Ok` once the mount is ready, or the child's error.
pub(crate) fn daemonize<F>(
    log: Option<&Path>,
    pidfile: Option<&Path>,
    serve: F,
) -> Result<(), String>
where
    F: for<'a> FnOnce(Box<dyn FnOnce() + 'a>) -> Result<(), String>,
{
    let (rd, wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: `fork` is only unsafe in a multi-threaded process, where the child may inherit
    // locks held by other threads. We fork here, in `main`'s thread, before anything in this
    // process has spawned a thread (clap, env_logger and the option parsing above are
    // single-threaded; the device, the engine and the FUSE session are created in the child).
    let fork = unsafe { nix::unistd::fork() };
    match fork {
        Err(e) => Err(format!("fork: {e}")),
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(wr);
            let mut msg = String::new();
            let _ = File::from(rd).read_to_string(&mut msg);
            if msg.starts_with("OK") {
                Ok(())
            } else if let Some(err) = msg.strip_prefix("ERR ") {
                // The child exits right after reporting; reap it.
                let _ = nix::sys::wait::waitpid(child, None);
                Err(err.trim_end().to_string())
            } else {
                let _ = nix::sys::wait::waitpid(child, None);
                Err("the mount daemon exited before the mount was ready".to_string())
            }
        }
        Ok(nix::unistd::ForkResult::Child) => {
            drop(rd);
            let pipe = RefCell::new(Some(File::from(wr)));
            let send = |m: &str| {
                if let Some(mut f) = pipe.borrow_mut().take() {
                    let _ = f.write_all(m.as_bytes());
                }
            };
            if let Err(e) = detach(log) {
                send(&format!("ERR {e}\n"));
                std::process::exit(1);
            }
            let res = serve(Box::new(|| {
                if let Some(p) = pidfile {
                    write_pidfile(p);
                }
                send("OK\n");
            }));
            if let Some(p) = pidfile {
                remove_pidfile(p);
            }
            match res {
                Ok(()) => std::process::exit(0),
                Err(e) => {
                    log::error!("{e}");
                    send(&format!("ERR {e}\n"));
                    std::process::exit(1);
                }
            }
        }
    }
}

/// Becomes a daemon: new session, cwd "/", stdin/stdout to /dev/null, stderr to the log file
/// (or /dev/null).
pub(crate) fn detach(log: Option<&Path>) -> Result<(), String> {
    nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("/dev/null: {e}"))?;
    let err_target = match log {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| format!("log file {}: {e}", p.display()))?,
        None => null.try_clone().map_err(|e| format!("/dev/null: {e}"))?,
    };
    for (src, dst) in [
        (null.as_raw_fd(), libc::STDIN_FILENO),
        (null.as_raw_fd(), libc::STDOUT_FILENO),
        (err_target.as_raw_fd(), libc::STDERR_FILENO),
    ] {
        nix::unistd::dup2(src, dst).map_err(|e| format!("dup2: {e}"))?;
    }
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    Ok(())
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let p = parse_mount_options(&["rw,relatime,cache_size=64M,threads=4,ro".into()]).unwrap();
        assert!(
            p.fuse.writeback_cache && p.engine.kernel_times,
            "the default"
        );
        let nr = parse_mount_options(&["ro,norecovery".into()]).unwrap();
        assert!(nr.engine.no_recovery && nr.engine.read_only);
        let mut rw = parse_mount_options(&["norecovery".into()]).unwrap();
        let e = settle_read_only(Path::new("/nonexistent/image"), &mut rw).unwrap_err();
        assert!(e.contains("only with ro"), "{e}");
        let wt = parse_mount_options(&["writeback_cache=off".into()]).unwrap();
        assert!(!wt.fuse.writeback_cache && !wt.engine.kernel_times);
        assert!(parse_mount_options(&["writeback_cache=maybe".into()]).is_err());
        let qb = |o: &str| parse_mount_options(&[o.into()]).map(|p| p.fuse.queue_boost);
        assert_eq!(qb("rw"), Ok(Some(moafs_fuse::QUEUE_BOOST)));
        assert_eq!(qb("queue_boost=off"), Ok(None));
        assert_eq!(qb("queue_boost=-20"), Ok(Some(-20)));
        assert_eq!(qb("queue_boost=5"), Ok(Some(5)));
        assert!(qb("queue_boost=-21").is_err());
        assert!(qb("queue_boost=fast").is_err());
        assert!(qb("queue_boost").is_err());
        // budgets follow memory unless given, each on its own
        let follow = |o: &str| {
            let e = parse_mount_options(&[o.into()]).unwrap().engine;
            (e.cache_follows_memory, e.dirty_follows_memory)
        };
        assert_eq!(follow("rw"), (true, true));
        assert_eq!(follow("cache_size=64M"), (false, true));
        assert_eq!(follow("dirty_max=8M"), (true, false));
        assert_eq!(follow("cache_size=1G,dirty_max=8M"), (false, false));
        let fp = parse_mount_options(&["forget_pause_ms=3".into()]).unwrap();
        assert_eq!(fp.fuse.forget_pause, Duration::from_millis(3));
        assert!(p.fuse.forget_pause.is_zero(), "no wait by default");
        assert_eq!(p.engine.cache_bytes, 64 << 20);
        assert_eq!(p.fuse.threads, 4);
        assert!(p.engine.read_only && p.fuse.read_only);
        assert!(p.fuse.default_permissions);
        let p = parse_mount_options(&[
            "nodefault_permissions".into(),
            "attr_ttl_ms=0,poll_ms=0".into(),
        ])
        .unwrap();
        assert!(p.fuse.poll_window.is_zero());
        assert!(!p.fuse.default_permissions);
        assert!(p.fuse.attr_ttl.is_zero());
        assert!(p.engine.unlocked_reads);
        let p = parse_mount_options(&["unlocked_reads=off".into()]).unwrap();
        assert!(!p.engine.unlocked_reads);
        assert!(parse_mount_options(&["unlocked_reads=maybe".into()]).is_err());
        let e = parse_mount_options(&["bogus".into()]).unwrap_err();
        assert_eq!(e, "unknown mount option bogus");
        assert!(parse_mount_options(&["threads=x".into()]).is_err());
    }

    #[test]
    fn record_option() {
        let p = parse_mount_options(&["record=/tmp/w.log".into()]).unwrap();
        assert_eq!(p.record, Some(PathBuf::from("/tmp/w.log")));
        assert!(parse_mount_options(&["record=".into()]).is_err());
        let p = parse_mount_options(&["record=/tmp/w.log,nvm=/dev/shm/t".into()]).unwrap();
        assert_eq!(p.nvm, Some(PathBuf::from("/dev/shm/t")));
        assert!(parse_mount_options(&["ro,record=/tmp/w.log".into()]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let (img, mnt) = (dir.path().join("img"), dir.path().join("mnt"));
        std::fs::write(&img, b"").unwrap();
        std::fs::create_dir(&mnt).unwrap();
        let (img, mnt) = (img.canonicalize().unwrap(), mnt.canonicalize().unwrap());
        assert!(check_record_path(&img, &img, &mnt).is_err());
        assert!(check_record_path(&mnt.join("w.log"), &img, &mnt).is_err());
        assert!(check_record_path(&dir.path().join("w.log"), &img, &mnt).is_ok());
    }
}
