//! `moafs umount` (`umount.fuse.moafs`): unmounts and waits for the daemon to let go.

use super::*;

#[derive(Args, Debug)]
pub(crate) struct UmountArgs {
    /// Lazy: detach now, clean up when no longer busy (returns without waiting for the daemon).
    #[arg(short = 'l')]
    pub(crate) lazy: bool,
    /// Force (MNT_FORCE).
    #[arg(short = 'f')]
    pub(crate) force: bool,
    /// umount(8) helper flags (no mtab, remount read-only on failure, verbose): accepted.
    #[arg(short = 'n', hide = true)]
    pub(crate) no_mtab: bool,
    #[arg(short = 'r', hide = true)]
    pub(crate) read_only_on_fail: bool,
    #[arg(short = 'v', hide = true)]
    pub(crate) verbose: bool,
    /// umount(8) passes the type (fuse.moafs) and a namespace; accepted.
    #[arg(short = 't', hide = true)]
    pub(crate) fstype: Option<String>,
    #[arg(short = 'N', hide = true)]
    pub(crate) namespace: Option<String>,
    /// The mount point (or the image).
    pub(crate) target: PathBuf,
}

pub(crate) fn cmd_umount(a: &UmountArgs) -> u8 {
    match crate::mounts::umount(&a.target, a.lazy, a.force) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("umount: {e}");
            32
        }
    }
}
