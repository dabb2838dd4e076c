//! The engine's background threads while it is mounted: the write-back timer (`Fs::tick`
//! every second, which also follows the mount's atime flags) and the write-behind thread.

use moafs_core::fs::{AtimeMode, AtimePolicy};
use moafs_core::Fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// The access-time policy of the mount on `mountpoint`, from its flags in
/// /proc/self/mountinfo (no request to this very mount): `noatime`, `relatime` or neither
/// (`strictatime`), and `nodiratime`. The first mount on that directory is this daemon's.
pub fn mount_atime_policy(mountpoint: &Path) -> Option<AtimePolicy> {
    let opts = mount_flags(mountpoint)?;
    let has = |o: &str| opts.split(',').any(|x| x == o);
    let mode = if has("noatime") {
        AtimeMode::Never
    } else if has("relatime") {
        AtimeMode::Relative
    } else {
        AtimeMode::Always
    };
    Some(AtimePolicy {
        mode,
        dirs: !has("nodiratime"),
    })
}

/// The per-mount flags of the mount on `mountpoint` (`rw,nosuid,...`) in
/// /proc/self/mountinfo; the first mount on that directory is this daemon's.
fn mount_flags(mountpoint: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint
        .to_string_lossy()
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012");
    info.lines().find_map(|l| {
        let mut f = l.split(' ');
        (f.nth(4)? == want).then(|| f.next().map(str::to_string))?
    })
}

/// The write-back timer: calls `Fs::tick` every second, and follows the atime flags of the
/// mount ([`mount_atime_policy`]) and a `remount,rw` the mount helper did not announce (made
/// without it: `mount -i`, mount(2)), until stopped.
pub(crate) struct Ticker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Ticker {
    pub(crate) fn start(fs: Arc<Fs>, mountpoint: PathBuf) -> io::Result<Ticker> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let handle = thread::Builder::new()
            .name("moafs-tick".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                // The mount's atime flags, followed once a second (a remount changes them).
                let mut policy = None;
                let mut follow_atime = || {
                    let now = mount_atime_policy(&mountpoint);
                    if now.is_some() && now != policy {
                        policy = now;
                        fs.set_atime_policy(now.unwrap_or_default());
                    }
                };
                follow_atime();
                // A read-only engine under a mount the kernel made read-write: the helper
                // would have made it writable first (`MOAFS_IOC_WRITABLE`). Tried once.
                let mut tried_rw = false;
                let mut follow_rw = || {
                    if tried_rw || !fs.is_read_only() {
                        return;
                    }
                    let rw =
                        mount_flags(&mountpoint).is_some_and(|o| o.split(',').next() == Some("rw"));
                    if rw {
                        tried_rw = true;
                        if let Err(e) = fs.make_writable() {
                            log::error!(
                                "the mount was made read-write, but the file system cannot \
                                 be: {e} (writes fail with EROFS)"
                            );
                        }
                    }
                };
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let (g, _) = cv
                        .wait_timeout(stopped, Duration::from_secs(1))
                        .unwrap_or_else(|e| e.into_inner());
                    stopped = g;
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    follow_atime();
                    follow_rw();
                    if let Err(e) = fs.tick() {
                        log::error!("write-back: {e}");
                    }
                    stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                }
            })?;
        Ok(Ticker {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The write-behind thread (`Fs::write_behind_worker`): writes new blocks of large files
/// between commits, outside the engine lock. Stopped and joined when dropped.
pub(crate) struct WriteBehind {
    fs: Arc<Fs>,
    handle: Option<thread::JoinHandle<()>>,
}

impl WriteBehind {
    pub(crate) fn start(fs: Arc<Fs>) -> io::Result<WriteBehind> {
        let f = fs.clone();
        let handle = thread::Builder::new()
            .name("moafs-behind".into())
            .spawn(move || f.write_behind_worker())?;
        Ok(WriteBehind {
            fs,
            handle: Some(handle),
        })
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        self.fs.stop_write_behind();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
