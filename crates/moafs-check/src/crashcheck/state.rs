//! What one crash state must pass: `fsck -n` clean (orphans aside), a mount, every promise
//! due, an unmount, and `fsck -n` clean again ([`check_state`]).

use super::cow::{CowDevice, CowNvm};
use super::plan::mount_state;
use super::promise::{check_promise, Promise, Promised};
use moafs_core::device::{BlockDevice, Nvm};
use std::sync::Arc;

/// Checks one state: its findings (none: it passed), the promises checked, and whether
/// the state held orphans (inodes unlinked while open: a file handle kept them, and FUSE's
/// RELEASE comes after close returned) that `fsck -n` accepted and the mount freed. A state
/// of a mount with an NVM tier has its tier (`tier`): fsck and the mount read it.
pub(super) fn check_state(
    dev: Arc<CowDevice>,
    tier: Option<Arc<CowNvm>>,
    promises: &[Promise],
) -> (Vec<String>, u64, bool) {
    let mut out = Vec::new();
    let mut orphans = 0;
    let nvm = tier.as_deref().map(|t| t as &dyn Nvm);
    match moafs_core::fsck::fsck_with(dev.as_ref(), false, nvm) {
        Ok(r) if r.errors.is_empty() => orphans = r.orphans,
        Ok(r) => out.push(format!("fsck -n of the crash image: {:?}", r.errors)),
        Err(e) => out.push(format!("fsck -n of the crash image cannot run: {e}")),
    }
    let fs = match mount_state(dev.clone() as Arc<dyn BlockDevice>, tier.clone()) {
        Ok(fs) => fs,
        Err(e) => {
            out.push(format!("mount after the crash: {e}"));
            return (out, 0, false);
        }
    };
    for p in promises {
        if let Err(e) = check_promise(&fs, p) {
            out.push(format!(
                "{} promise of inode {} (log record {}): {e}",
                match p.what {
                    Promised::Contents { .. } => "fsync",
                    Promised::Inode(_) => "sync",
                },
                p.ino,
                p.start
            ));
        }
    }
    if let Err(e) = fs.unmount() {
        out.push(format!("unmount: {e}"));
        return (out, promises.len() as u64, false);
    }
    match moafs_core::fsck::fsck_with(dev.as_ref(), false, nvm) {
        // the mount freed the orphans: none may be left
        Ok(r) if r.errors.is_empty() && r.orphans == 0 => {}
        Ok(r) if r.errors.is_empty() => out.push(format!(
            "fsck after remount: {} orphan(s) the mount did not free",
            r.orphans
        )),
        Ok(r) => out.push(format!("fsck after remount: {:?}", r.errors)),
        Err(e) => out.push(format!("fsck after remount cannot run: {e}")),
    }
    let freed = orphans > 0 && out.is_empty();
    (out, promises.len() as u64, freed)
}
