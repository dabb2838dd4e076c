//! Mounting and serving a session: [`serve`] (the transport's threads, io_uring or /dev/fuse
//! with polling, bdi tuning, I/O-flusher marking, signals, aborting the connection) and
//! [`mount_blocking`], which serves moafs with its background threads.

use crate::background::{Ticker, WriteBehind};
use crate::config::fuser_config;
use crate::poll::Poller;
use crate::transport::MAX_WRITE;
use crate::{uring, Adapter, MoafsFuse, MountConfig, UringMode};
use fuser::Session;
use moafs_core::Fs;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::thread::JoinHandleExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Waits for SIGINT/SIGTERM/SIGHUP (blocked in every thread) and unmounts on the first one.
struct SignalWatcher {
    done: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

fn watched_signals() -> SigSet {
    let mut s = SigSet::empty();
    s.add(Signal::SIGINT);
    s.add(Signal::SIGTERM);
    s.add(Signal::SIGHUP);
    s
}

impl SignalWatcher {
    fn start(mut unmounter: fuser::SessionUnmounter, mountpoint: PathBuf) -> io::Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let handle = thread::Builder::new()
            .name("moafs-signals".into())
            .spawn(move || {
                let set = watched_signals();
                loop {
                    let sig = match set.wait() {
                        Ok(s) => s,
                        Err(e) => {
                            log::error!("sigwait: {e}");
                            return;
                        }
                    };
                    if d.load(Ordering::SeqCst) {
                        return;
                    }
                    log::info!("{sig:?}: unmounting {}", mountpoint.display());
                    if let Err(e) = unmounter.unmount() {
                        log::warn!("unmount failed ({e}); detaching lazily");
                        if let Err(e) =
                            nix::mount::umount2(&mountpoint, nix::mount::MntFlags::MNT_DETACH)
                        {
                            log::error!("lazy unmount of {} failed: {e}", mountpoint.display());
                        }
                    }
                }
            })?;
        Ok(SignalWatcher {
            done,
            handle: Some(handle),
        })
    }
}

impl Drop for SignalWatcher {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            // Wake the thread out of sigwait; it sees `done` and returns.
            if nix::sys::pthread::pthread_kill(h.as_pthread_t(), Signal::SIGHUP).is_ok() {
                let _ = h.join();
            }
        }
    }
}

/// Restores the calling thread's signal mask on drop.
struct MaskGuard(SigSet);

impl Drop for MaskGuard {
    fn drop(&mut self) {
        let _ = self.0.thread_set_mask();
    }
}

/// Raises the FUSE connection's readahead and dirty-memory share (root only; best effort).
/// The kernel's defaults for a FUSE bdi are 128 KiB readahead and 1 % of dirty memory, which
/// split large sequential reads into small requests and throttle buffered writers early.
fn tune_bdi(mountpoint: &Path, cfg: &MountConfig) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    // a fuseblk mount's bdi is "MAJ:MIN-fuseblk", MAJ:MIN being its block device's, whose own
    // bdi ("MAJ:MIN") is not ours to change
    let bdi = if cfg.blkdev {
        format!("/sys/class/bdi/{major}:{minor}-fuseblk")
    } else {
        format!("/sys/class/bdi/{major}:{minor}")
    };
    // strict_limit first: a test that sees max_ratio set knows strict_limit is too.
    let strict = u8::from(cfg.bdi_strict_limit);
    if let Err(e) = std::fs::write(format!("{bdi}/strict_limit"), strict.to_string()) {
        log::info!("cannot set {bdi}/strict_limit to {strict}: {e}");
    }
    for (file, value) in [
        ("read_ahead_kb", cfg.read_ahead_kb),
        ("max_ratio", cfg.bdi_max_ratio),
    ] {
        if value == 0 {
            continue;
        }
        if let Err(e) = std::fs::write(format!("{bdi}/{file}"), value.to_string()) {
            log::info!("cannot set {bdi}/{file} to {value}: {e}");
        }
    }
}

/// prctl(2) `PR_SET_IO_FLUSHER` (Linux 5.6; not in the libc crate for Linux yet).
const PR_SET_IO_FLUSHER: libc::c_int = 57;

/// Marks this thread, and every thread it starts afterwards (the flags are inherited), as an
/// I/O flusher, as prctl(2) asks of a FUSE daemon: its memory allocations do no I/O for
/// reclaim (which could wait for this mount's own dirty pages, i.e. for the daemon), and its
/// writes to the image are throttled by the image's device alone, not by the global dirty
/// memory, which includes this mount's pages that only the daemon can clean. Needs
/// CAP_SYS_RESOURCE (root); without it the daemon runs as before.
fn mark_io_flusher() {
    // SAFETY: prctl with integer arguments only (no pointers); it changes flags of the calling
    // thread and cannot affect memory safety.
    let r = unsafe { libc::prctl(PR_SET_IO_FLUSHER, 1 as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        log::info!(
            "cannot mark the daemon as an I/O flusher: {}",
            io::Error::last_os_error()
        );
    }
}

/// Aborts the FUSE connection of this daemon's mount, device `dev` (`major:minor`), through
/// the fusectl file system (mounting it at /sys/fs/fuse/connections when it is not; root).
fn abort_connection(dev: &str) -> io::Result<()> {
    let minor = dev
        .split(':')
        .nth(1)
        .ok_or_else(|| io::Error::other(format!("odd device {dev:?}")))?;
    let conns = Path::new("/sys/fs/fuse/connections");
    if !conns.join(minor).exists() {
        nix::mount::mount(
            Some("fusectl"),
            conns,
            Some("fusectl"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(io::Error::from)?;
    }
    std::fs::write(conns.join(minor).join("abort"), "1")
}

/// Detaches the aborted mount at `mountpoint` (every access to it says ENOTCONN until it is
/// unmounted), unless a newer mount than ours (`dev`) is there now. Unprivileged,
/// `fusermount3 -u -z` does it.
fn detach_aborted(mountpoint: &Path, dev: &str) {
    if !newest_mount_dev(mountpoint).is_ok_and(|d| d == dev) {
        log::info!(
            "{}: not detached, another mount is there now",
            mountpoint.display()
        );
        return;
    }
    match nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => {}
        Err(nix::errno::Errno::EPERM) => {
            let r = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(mountpoint)
                .status();
            if !r.as_ref().is_ok_and(|s| s.success()) {
                log::error!(
                    "cannot detach {} after the abort: {r:?}",
                    mountpoint.display()
                );
            }
        }
        Err(e) => log::error!(
            "cannot detach {} after the abort: {e}",
            mountpoint.display()
        ),
    }
}

/// The device (`major:minor`) of the newest mount on `mountpoint` (/proc/self/mountinfo).
fn newest_mount_dev(mountpoint: &Path) -> io::Result<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = mountpoint.to_string_lossy();
    info.lines()
        .rev() // the newest mount on that point
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let mp = f.get(4)?.replace("\\040", " ");
            (mp == want).then(|| f.get(2).map(|d| d.to_string()))?
        })
        .next()
        .ok_or_else(|| io::Error::other("mount point not in /proc/self/mountinfo"))
}

/// Mounts the adapter that `make` builds on `mountpoint`, calls `ready` once the mount is live,
/// serves requests until the file system is unmounted (by `umount`/`fusermount3 -u`, or by
/// SIGINT/SIGTERM/SIGHUP, which this function handles), and returns once the session has ended.
/// This is the transport shared by moafs, the passthrough floor target and the memfs ceiling:
/// threads, io_uring or /dev/fuse (with polling), bdi tuning, I/O-flusher marking, signals.
///
/// `make` gets the configuration as it will be used (`uring` off when io_uring cannot be
/// used). `probe` gives the io_uring transport a way to tell whether a large READ continues
/// a stream.
/// `background` starts the adapter's own threads once the session exists; what it returns is
/// dropped after the session ended (and after the signal watcher).
///
/// Call it before spawning other threads if signals should reach the watcher: the signals are
/// blocked in the calling thread (and so in every thread spawned from here) and restored on
/// return.
pub fn serve<A: Adapter, G>(
    make: impl FnOnce(&MountConfig) -> io::Result<A>,
    mountpoint: &Path,
    cfg: &MountConfig,
    probe: impl FnOnce(&A) -> Option<uring::StreamProbe>,
    background: impl FnOnce(&Path) -> io::Result<G>,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let old_mask = watched_signals()
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(io::Error::from)?;
    let _mask = MaskGuard(old_mask);

    mark_io_flusher();
    let mountpoint = mountpoint.canonicalize()?;
    let mut adapter_cfg = cfg.clone();
    if cfg.uring == UringMode::Auto {
        if let Err(e) = uring::probe() {
            log::info!("FUSE over io_uring not used: {e}");
            adapter_cfg.uring = UringMode::Off;
        }
    }
    let adapter = make(&adapter_cfg)?;
    let transport = adapter.transport().clone();
    let probe = probe(&adapter);
    if cfg.uring == UringMode::Auto && !uring::kernel_enabled() && nix::unistd::geteuid().is_root()
    {
        match uring::kernel_enable() {
            Ok(()) => log::info!("turned on the kernel's fuse.enable_uring"),
            Err(e) => log::info!("cannot turn on fuse.enable_uring: {e}"),
        }
    }
    let mut session = Session::new(adapter, &mountpoint, &fuser_config(cfg))?;
    let _ = transport.notifier_slot().set(session.notifier());
    // FUSE over io_uring when INIT granted it; otherwise /dev/fuse, where the thread reading
    // the session's own descriptor polls (fuser gives the other threads descriptors of their
    // own, which keep sleeping in read()).
    let uring_setup = if transport.uring_granted().load(Ordering::SeqCst) {
        Some((
            session.as_fd().try_clone_to_owned()?,
            uring::UringConfig {
                queues: uring::possible_cpus()?,
                // two entries for the requests served in turn, and one for each fsync the
                // sync pool may hold meanwhile
                depth: 2 + cfg.sync_threads,
                payload: MAX_WRITE as usize,
                stream_min: cfg.uring_stream_kb as usize * 1024,
                sync_threads: cfg.sync_threads,
                boost: cfg.queue_boost,
            },
        ))
    } else {
        None
    };
    let poll_fd = session.as_fd().try_clone_to_owned()?;
    let poller: Mutex<Option<Poller>> = Mutex::new(None);
    let activity = transport.activity().clone();
    let start_poller = || {
        if !cfg.poll_window.is_zero() {
            match Poller::start(poll_fd, activity, cfg.poll_window) {
                Ok(p) => *poller.lock().unwrap_or_else(|e| e.into_inner()) = Some(p),
                Err(e) => log::warn!("cannot start polling: {e}"),
            }
        }
    };
    // stat() of the mount point is served by this very session: do it from a thread, once
    // `session.run()` below is answering requests (doing it here would deadlock).
    // The mount is "ready" only after this is done: a umount racing the thread's stat would
    // find the mount busy.
    let bdi_done = {
        let (mp, cfg) = (mountpoint.clone(), cfg.clone());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let tuner = std::thread::Builder::new()
            .name("moafs-bdi".into())
            .spawn(move || {
                tune_bdi(&mp, &cfg);
                let _ = tx.send(());
            })?;
        (rx, tuner)
    };
    let ready = move || {
        let (done, tuner) = bdi_done;
        if done.recv_timeout(Duration::from_secs(10)).is_err() {
            log::warn!("tuning the mount's bdi did not finish in 10 s");
        } else {
            // it has sent: it is ending. Joined, so that once the mount is ready the daemon's
            // threads are its serving ones (the tests compare them).
            let _ = tuner.join();
        }
        ready()
    };
    let background = background(&mountpoint)?;
    let watcher = SignalWatcher::start(session.unmount_callable(), mountpoint.clone())?;
    log::info!("mounted on {}", mountpoint.display());
    // Ends the session from an io_uring queue that can no longer be served: abort the FUSE
    // connection (every waiting and later request fails at once, /dev/fuse reads end, and
    // the daemon exits as at unmount); unmount if that is not possible.
    let unmounter = Arc::new(Mutex::new(session.unmount_callable()));
    let abort_mp = mountpoint.clone();
    // Our own mount's device, taken now: by the time a queue fails another mount may be
    // stacked on the same point, and that one is not ours to abort.
    let own_dev = newest_mount_dev(&mountpoint);
    let fatal_once = std::sync::atomic::AtomicBool::new(false);
    let on_fatal: uring::OnFatal = Arc::new(move || {
        if fatal_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return; // another queue thread is ending the session already
        }
        let aborted = match &own_dev {
            Ok(dev) => abort_connection(dev).map(|()| dev.clone()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        };
        match aborted {
            Ok(dev) => detach_aborted(&abort_mp, &dev),
            Err(e) => {
                log::error!("cannot abort the FUSE connection: {e}; unmounting");
                let mut u = unmounter.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = u.unmount() {
                    log::error!("unmount after an io_uring failure: {e}");
                }
            }
        }
    });
    let sync_counts = Arc::new(uring::SyncCounts {
        timer: transport.sync_timer(),
        ..Default::default()
    });
    let res = session.run_with_extra(|dispatcher| {
        if let Some((fd, ucfg)) = uring_setup {
            match uring::start(
                fd,
                dispatcher,
                ucfg,
                probe,
                on_fatal.clone(),
                sync_counts.clone(),
            ) {
                Ok(workers) => {
                    log::info!("serving FUSE over io_uring ({} queues)", ucfg.queues);
                    // Ready once every request path is set up (the /dev/fuse threads run).
                    ready();
                    return workers;
                }
                Err(e) => {
                    // INIT granted the transport: the kernel holds every request until the
                    // rings are ready, so /dev/fuse cannot take over. End the mount with a
                    // clear error instead of hanging its users.
                    log::error!(
                        "cannot serve FUSE over io_uring ({e}); unmounting — mount with \
                         -o uring=off to use /dev/fuse"
                    );
                    on_fatal();
                    return fuser::ExtraWorkers::default();
                }
            }
        }
        start_poller();
        ready();
        fuser::ExtraWorkers::default()
    });
    drop(poller);
    drop(watcher);
    drop(background);
    let (forgets, forgotten) = transport.forgets();
    log::info!(
        "session on {} ended ({forgets} FORGET requests for {forgotten} inodes; over \
         io_uring {} sync requests served by the sync pools, {} in the queues' threads; \
         queue threads boosted {} times)",
        mountpoint.display(),
        sync_counts.pooled.load(Ordering::Relaxed),
        sync_counts.inline.load(Ordering::Relaxed),
        sync_counts.boosts.load(Ordering::Relaxed),
    );
    res
}

/// Mounts `fs` on `mountpoint` with [`serve`] (plus the engine's write-back timer and
/// write-behind thread), and returns after the engine has written everything back
/// (`Fs::unmount`).
pub fn mount_blocking(
    fs: Arc<Fs>,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let res = serve(
        |c| Ok(MoafsFuse::new(fs.clone(), c)),
        mountpoint,
        cfg,
        |a: &MoafsFuse| {
            let fs = a.fs().clone();
            let probe: uring::StreamProbe =
                Arc::new(move |ino, offset| fs.read_follows(ino, offset));
            Some(probe)
        },
        |mp| {
            let ticker = Ticker::start(fs.clone(), mp.to_path_buf())?;
            let behind = WriteBehind::start(fs.clone())?;
            // dropped in this order: write-behind first, then the timer
            Ok((behind, ticker))
        },
        ready,
    );
    // `destroy` has normally done this already; later calls do nothing.
    let unmounted = fs.unmount();
    log::info!("unmounted {}", mountpoint.display());
    res?;
    unmounted.map_err(|e| io::Error::other(e.to_string()))
}
