//! The mount table as the helpers see it: which moafs mounts show an image as their source,
//! waiting for an exiting daemon to let go of its image, `umount.fuse.moafs`, and
//! `mount -o remount`.
//!
//! A moafs mount reads in /proc/mounts as `IMAGE MOUNTPOINT fuse.moafs …`, IMAGE being the
//! image's absolute path, or — root's mounts of block devices and of image files, through a
//! loop device over the file (`loopdev.rs`) — `DEVICE MOUNTPOINT fuseblk.moafs …`. The daemon holds an exclusive `flock` on the image for as long as it
//! has it open; it lets go only after its last commit. So "the daemon is done with the image"
//! is "the image's lock can be taken", which is what [`wait_released`] waits for.

use nix::mount::{MntFlags, MsFlags};
use nix::sys::statvfs::FsFlags;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The type of a moafs mount in /proc/mounts.
pub const FSTYPE: &str = "fuse.moafs";
/// The type of a mount of a block device (as root: `fuseblk`, which gets sync(2)).
pub const FSTYPE_BLK: &str = "fuseblk.moafs";

/// Whether a mount table's type is moafs's.
pub fn is_moafs(fstype: &str) -> bool {
    fstype == FSTYPE || fstype == FSTYPE_BLK
}

/// How long `mount`, `fsck`, `mkfs` and `umount` wait for a daemon that is still writing back
/// after the kernel let go of its mount (unless `MOAFS_RELEASE_WAIT_SECS` says otherwise).
pub fn release_wait() -> Duration {
    let secs = std::env::var("MOAFS_RELEASE_WAIT_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub target: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Undoes the octal escapes of mountinfo (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text (see proc(5)): mount point is field 5; after the " - " separator come
/// the type and the source.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let target = pre.split(' ').nth(4)?;
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let source = post.next()?;
            Some(MountEntry {
                target: PathBuf::from(unescape(target)),
                fstype: unescape(fstype),
                source: unescape(source),
            })
        })
        .collect()
}

/// The mounts of this process's mount namespace, oldest first.
pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// Whether the mount under the newest mount at `mountpoint` is shared (mountinfo: the
/// entry whose id is the new one's parent id carries `shared:N`).
fn parent_is_shared(mountpoint: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let abs = mountpoint
        .canonicalize()
        .unwrap_or_else(|_| mountpoint.to_path_buf());
    let fields = |l: &str| -> Vec<String> {
        let pre = l.split(" - ").next().unwrap_or("");
        pre.split(' ').map(str::to_string).collect()
    };
    let entries: Vec<Vec<String>> = info.lines().map(fields).collect();
    let Some(mine) = entries
        .iter()
        .rfind(|f| f.len() > 4 && Path::new(&unescape(&f[4])) == abs)
    else {
        return false;
    };
    entries
        .iter()
        .find(|f| f.len() > 6 && f[0] == mine[1])
        .is_some_and(|f| f[6..].iter().any(|o| o.starts_with("shared:")))
}

/// The image a moafs mount serves: the file under the loop device its source names (an image
/// file mounted as root, `loopdev.rs`), else its source.
pub fn image_of(m: &MountEntry) -> PathBuf {
    crate::loopdev::backing_file(Path::new(&m.source)).unwrap_or_else(|| PathBuf::from(&m.source))
}

/// The moafs mounts of `image` (an absolute path): whose source is it, or a loop device
/// over it; oldest first.
pub fn mounts_of_image(image: &Path) -> Vec<MountEntry> {
    let want = image.to_string_lossy();
    mounts()
        .into_iter()
        .filter(|m| is_moafs(&m.fstype) && (m.source == want || image_of(m) == image))
        .collect()
}

/// The newest mount on `target`.
pub fn mount_at(target: &Path) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.target == target)
}

/// Whether some process (a moafs daemon, fsck or mkfs) holds the image's lock right now.
pub fn image_locked(image: &Path) -> io::Result<bool> {
    use nix::fcntl::{Flock, FlockArg};
    let file = File::open(image)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_unlocked_on_drop) => Ok(false),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(true),
        Err((_, e)) => Err(e.into()),
    }
}

/// The processes holding a `flock` on `image` now, from /proc/locks (`MAJ:MIN:INODE` of the
/// file, major and minor in hex).
pub fn lock_holders(image: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(image) else {
        return Vec::new();
    };
    let dev = meta.dev();
    let want = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks
        .lines()
        .filter(|l| !l.contains("->")) // waiters, not holders
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()))
                .then(|| f.get(4)?.parse().ok())?
        })
        .collect()
}

/// Waits until none of `pids` holds a lock on `image` any more, at most `limit`.
fn wait_let_go(image: &Path, pids: &[u32], limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        let now = lock_holders(image);
        if !pids.iter().any(|p| now.contains(p)) {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until nothing holds the image's lock, at most `limit`. True when released.
pub fn wait_released(image: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        match image_locked(image) {
            Ok(false) | Err(_) => return true,
            Ok(true) if start.elapsed() >= limit => return false,
            Ok(true) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Runs `open` until it stops answering "locked" while no mount shows the image (a daemon
/// that the kernel has let go of is still writing back), for at most [`release_wait`].
/// A lock held by a live mount is answered at once with where the image is mounted.
pub fn open_when_released<T, E>(
    image: &Path,
    mut open: impl FnMut() -> Result<T, E>,
    is_locked: impl Fn(&E) -> bool,
) -> Result<T, Result<E, String>> {
    let start = Instant::now();
    let limit = release_wait();
    let mut said = false;
    loop {
        match open() {
            Ok(v) => return Ok(v),
            Err(e) if is_locked(&e) => {
                if let Some(m) = mounts_of_image(image).first() {
                    return Err(Err(format!(
                        "{} is mounted on {}",
                        image.display(),
                        m.target.display()
                    )));
                }
                if start.elapsed() >= limit {
                    return Err(Ok(e));
                }
                if !said && start.elapsed() >= Duration::from_secs(2) {
                    eprintln!(
                        "moafs: waiting for the process holding {} to let go of it",
                        image.display()
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(Ok(e)),
        }
    }
}

/// The mount flags a remount keeps unless told otherwise: the mount's own, from statvfs(2).
fn current_flags(mountpoint: &Path) -> io::Result<MsFlags> {
    let st = nix::sys::statvfs::statvfs(mountpoint)?;
    let f = st.flags();
    let mut m = MsFlags::empty();
    for (st, ms) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_SYNCHRONOUS, MsFlags::MS_SYNCHRONOUS),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(st) {
            m |= ms;
        }
    }
    if !m.intersects(MsFlags::MS_NOATIME | MsFlags::MS_RELATIME) {
        m |= MsFlags::MS_STRICTATIME;
    }
    Ok(m)
}

/// Applies one mount(8) option to `flags`; false when it is not a VFS option.
pub fn apply_vfs_option(flags: &mut MsFlags, opt: &str) -> bool {
    const ATIME: MsFlags = MsFlags::MS_NOATIME
        .union(MsFlags::MS_RELATIME)
        .union(MsFlags::MS_STRICTATIME);
    let (set, clear) = match opt {
        "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
        "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
        "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
        "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
        "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
        "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
        "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
        "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
        "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
        "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS),
        "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty()),
        "noatime" => (MsFlags::MS_NOATIME, ATIME),
        "atime" | "norelatime" | "nostrictatime" => (MsFlags::empty(), ATIME),
        "relatime" => (MsFlags::MS_RELATIME, ATIME),
        "strictatime" => (MsFlags::MS_STRICTATIME, ATIME),
        "nodiratime" => (MsFlags::MS_NODIRATIME, MsFlags::empty()),
        "diratime" => (MsFlags::empty(), MsFlags::MS_NODIRATIME),
        "lazytime" => (MsFlags::MS_LAZYTIME, MsFlags::empty()),
        "nolazytime" => (MsFlags::empty(), MsFlags::MS_LAZYTIME),
        _ => return false,
    };
    *flags = (*flags - clear) | set;
    true
}

/// Options the kernel shows for a FUSE mount (and mount(8) may hand back on a remount), and
/// mount(8)'s own: accepted by a remount and left as they are.
fn remount_ignores(opt: &str) -> bool {
    let key = opt.split('=').next().unwrap_or(opt);
    matches!(
        key,
        "remount"
            | "bind"
            | "defaults"
            | "user_id"
            | "group_id"
            | "rootmode"
            | "fd"
            | "max_read"
            | "blksize"
            | "allow_other"
            | "default_permissions"
            // fixed at mount like the two above; a mount without it refuses chattr +i/+a
            // (EOPNOTSUPP), so ignoring it here leaves nothing unenforced
            | "iflags"
            // how an image file is mounted (through a loop device or not) is fixed too
            | "fuseblk"
            // a conversion the mount made (an image already version 3 is left as it is)
            | "extents"
            | "fsname"
            | "subtype"
            | "auto"
            | "noauto"
            | "user"
            | "nouser"
            | "_netdev"
            | "nofail"
            | "uhelper"
    ) || key.starts_with("x-")
}

/// `mount -o remount,OPTS DIR`: changes the VFS flags of the mount at `mountpoint` (read-only
/// or read-write, atime and the other per-mount flags). Going read-only first writes every
/// dirty page back and commits (syncfs, then fsync of the root directory, which moafs answers
/// with a whole commit). Going read-write first makes the daemon's engine writable (moafs's
/// ioctl `MOAFS_IOC_WRITABLE`: the replay a read-only mount held in memory goes home). The
/// engine's own options cannot change on a remount.
pub fn remount(mountpoint: &Path, opts: &[String], bind: bool) -> Result<(), String> {
    let mut flags =
        current_flags(mountpoint).map_err(|e| format!("remount {}: {e}", mountpoint.display()))?;
    let was_read_only = flags.contains(MsFlags::MS_RDONLY);
    for opt in opts.iter().flat_map(|o| o.split(',')) {
        let opt = opt.trim();
        if opt.is_empty() || apply_vfs_option(&mut flags, opt) || remount_ignores(opt) {
            continue;
        }
        return Err(format!(
            "mount option {opt} cannot be changed by a remount (unmount and mount again)"
        ));
    }
    if flags.contains(MsFlags::MS_RDONLY) {
        let root = File::open(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
        nix::unistd::syncfs(std::os::fd::AsRawFd::as_raw_fd(&root))
            .map_err(|e| format!("syncfs {}: {e}", mountpoint.display()))?;
        root.sync_all()
            .map_err(|e| format!("commit before remount: {e}"))?;
    }
    if was_read_only && !flags.contains(MsFlags::MS_RDONLY) && !bind {
        make_writable(mountpoint)?;
    }
    let extra = if bind {
        MsFlags::MS_BIND
    } else {
        MsFlags::empty()
    };
    nix::mount::mount(
        None::<&str>,
        mountpoint,
        None::<&str>,
        MsFlags::MS_REMOUNT | extra | flags,
        None::<&str>,
    )
    .map_err(|e| format!("remount {}: {e}", mountpoint.display()))
}

/// Asks the daemon of the mount at `mountpoint` to make its engine writable.
fn make_writable(mountpoint: &Path) -> Result<(), String> {
    let root = File::open(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    // SAFETY: the descriptor is open for the call, and the command takes no argument (the
    // kernel copies nothing in or out: `_IO`).
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&root),
            moafs_fuse::MOAFS_IOC_WRITABLE as _,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::EROFS) => format!(
            "cannot remount {} read-write: mounted with norecovery, or the image is \
             write-protected (unmount, then mount read-write)",
            mountpoint.display()
        ),
        _ => format!("cannot remount {} read-write: {e}", mountpoint.display()),
    })
}

/// A second mount of an image that is already mounted: the new mount point shows the same
/// file system (a bind mount of the first, as a second mount of a block device shares its
/// superblock), with its own VFS flags. As with a block device, it cannot change the file
/// system's read-only state: read-write beside a read-only mount is refused (the engine
/// would refuse every write of it).
pub fn mount_again(existing: &Path, mountpoint: &Path, opts: &[String]) -> Result<(), String> {
    let mut wanted = current_flags(existing).unwrap_or(MsFlags::empty());
    if wanted.contains(MsFlags::MS_RDONLY) {
        for opt in opts.iter().flat_map(|o| o.split(',')) {
            apply_vfs_option(&mut wanted, opt.trim());
        }
        if !wanted.contains(MsFlags::MS_RDONLY) {
            return Err(format!(
                "cannot mount on {} read-write: the image is mounted read-only on {}, and a \
                 second mount cannot change that (mount it with -o ro, or first `mount -o \
                 remount,rw {}`)",
                mountpoint.display(),
                existing.display(),
                existing.display()
            ));
        }
    }
    nix::mount::mount(
        Some(existing),
        mountpoint,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| format!("mount on {}: {e}", mountpoint.display()))?;
    // A bind of a shared mount joins its peer group; a new mount of a device does not: it
    // is private, or under a shared parent shared in a group of its own. Leave the group,
    // then join a new one if the parent is shared.
    let propagate = |flag: MsFlags| {
        let r = nix::mount::mount(None::<&str>, mountpoint, None::<&str>, flag, None::<&str>);
        if let Err(e) = r {
            log::warn!("mount on {}: {flag:?}: {e}", mountpoint.display());
        }
    };
    propagate(MsFlags::MS_PRIVATE);
    if parent_is_shared(mountpoint) {
        propagate(MsFlags::MS_SHARED);
    }
    let mut flags = current_flags(mountpoint).unwrap_or(MsFlags::empty());
    let mut changed = false;
    for opt in opts.iter().flat_map(|o| o.split(',')) {
        changed |= apply_vfs_option(&mut flags, opt.trim());
    }
    if changed {
        if let Err(e) = nix::mount::mount(
            None::<&str>,
            mountpoint,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | flags,
            None::<&str>,
        ) {
            let _ = nix::mount::umount2(mountpoint, MntFlags::MNT_DETACH);
            return Err(format!("mount on {}: {e}", mountpoint.display()));
        }
    }
    Ok(())
}

/// Makes umount(8) run `umount.fuse.moafs` for the mount at `mountpoint`. util-linux's umount
/// unmounts a directory straight away when it knows nothing of it beyond statfs(2) (which says
/// only "fuse"); an entry of mount(8)'s own table (/run/mount/utab) with `uhelper=moafs` makes
/// it look the mount up and run the helper, which waits for the daemon. The entry is written
/// with `mount --fake` (nothing is mounted), as libfuse does; umount(8) removes it. Root only,
/// best effort: without it `umount` still unmounts, and `mount`/`fsck` wait for the daemon.
pub fn register_umount_helper(image: &Path, mountpoint: &Path) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let target = mountpoint.to_string_lossy().replace(' ', "\\040");
    if let Ok(utab) = std::fs::read_to_string("/run/mount/utab") {
        let needle = format!("TARGET={target} ");
        if utab
            .lines()
            .any(|l| l.contains(&needle) && l.contains("uhelper="))
        {
            return;
        }
    }
    let res = std::process::Command::new("mount")
        .args([
            "--fake",
            "--no-canonicalize",
            "-i",
            "-t",
            FSTYPE,
            "-o",
            "uhelper=moafs",
        ])
        .arg(image)
        .arg(mountpoint)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match res {
        Ok(o) if o.status.success() => {}
        Ok(o) => log::warn!(
            "cannot register the umount helper for {}: {}",
            mountpoint.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => log::warn!("cannot run mount --fake for {}: {e}", mountpoint.display()),
    }
}

/// `fusermount3 -u [-z] MOUNTPOINT`: an unprivileged user's unmount of their own FUSE mount
/// (fusermount3 has no force: `-f` is not passed on).
fn fusermount_unmount(target: &Path, lazy: bool) -> Result<(), String> {
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(target).output().map_err(|e| {
        format!(
            "{}: not root, and fusermount3 cannot be run ({e}; apt-get install fuse3)",
            target.display()
        )
    })?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "{}: fusermount3 -u: {}",
        target.display(),
        why.trim()
    ))
}

/// `umount.fuse.moafs TARGET [-l] [-f]` (what umount(8) runs for a `fuse.moafs` mount, also
/// `moafs umount`): unmounts, then — unless lazily, or another mount still shows the same
/// image — waits until the daemon has committed and let go of the image, so that a check, a
/// copy or a new mount right after `umount` returns finds the image whole and free.
pub fn umount(target: &Path, lazy: bool, force: bool) -> Result<(), String> {
    let abs = target
        .canonicalize()
        .unwrap_or_else(|_| target.to_path_buf());
    // TARGET may be the mount point or the image (the source).
    let entry = mount_at(&abs)
        .or_else(|| mounts_of_image(&abs).pop())
        .ok_or_else(|| format!("{}: not mounted", target.display()))?;
    // The daemon of this mount, by the lock it holds: after the unmount the wait is for it
    // to let go (a new mount may take the image at once, as xfstests generic/604 does).
    // (read before the unmount: it detaches the loop device an image file is mounted through)
    let image = image_of(&entry);
    let holders = if is_moafs(&entry.fstype) {
        lock_holders(&image)
    } else {
        Vec::new()
    };
    let mut flags = MntFlags::empty();
    if lazy {
        flags |= MntFlags::MNT_DETACH;
    }
    if force {
        flags |= MntFlags::MNT_FORCE;
    }
    match nix::mount::umount2(&entry.target, flags) {
        Ok(()) => {}
        // Without root, a user's FUSE mount is taken down by the setuid fusermount3, which
        // checks that the mount is the user's (its user_id=), as libfuse's fusermount3 -u.
        Err(nix::errno::Errno::EPERM) if !nix::unistd::geteuid().is_root() => {
            fusermount_unmount(&entry.target, lazy)?
        }
        Err(nix::errno::Errno::EBUSY) => {
            return Err(format!("{}: target is busy", entry.target.display()))
        }
        Err(e) => return Err(format!("{}: {e}", entry.target.display())),
    }
    if lazy || !is_moafs(&entry.fstype) {
        return Ok(());
    }
    if !image.is_absolute() || !mounts_of_image(&image).is_empty() {
        return Ok(());
    }
    let released = if holders.is_empty() {
        wait_released(&image, release_wait())
    } else {
        wait_let_go(&image, &holders, release_wait())
    };
    if released {
        Ok(())
    } else {
        Err(format!(
            "{} unmounted, but the daemon still holds {} after {} s",
            entry.target.display(),
            image.display(),
            release_wait().as_secs()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let t = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - fuse.moafs /img/x\\040y rw,user_id=0\n\
                 37 35 0:5 / /proc rw - proc proc rw\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].target, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].fstype, "fuse.moafs");
        assert_eq!(m[0].source, "/img/x y");
        assert_eq!(m[1].fstype, "proc");
    }

    #[test]
    fn vfs_options_set_and_clear() {
        let mut f = MsFlags::MS_RELATIME | MsFlags::MS_NOSUID;
        assert!(apply_vfs_option(&mut f, "ro"));
        assert!(apply_vfs_option(&mut f, "strictatime"));
        assert!(apply_vfs_option(&mut f, "suid"));
        assert_eq!(f, MsFlags::MS_RDONLY | MsFlags::MS_STRICTATIME);
        assert!(apply_vfs_option(&mut f, "rw"));
        assert!(apply_vfs_option(&mut f, "noatime"));
        assert_eq!(f, MsFlags::MS_NOATIME);
        assert!(!apply_vfs_option(&mut f, "cache_size=1M"));
        assert!(remount_ignores("user_id=0") && remount_ignores("x-systemd.automount"));
        assert!(!remount_ignores("journal=data"));
    }
}
