//! `mount -o remount,rw` of a read-only mount: the engine becomes writable in place.
//!
//! A read-only mount writes nothing: a journal that needs replaying is replayed in memory
//! and shown through the held device ([`HeldDevice`]), and an NVM tier is read for the
//! replay but not attached. [`Fs::make_writable`] does what a read-write mount would have
//! done at mount, at the moment it is asked: the replayed blocks go home (the held device
//! opens), the tier is attached, the byte log starts, the superblock is marked mounted and
//! the orphans of a crash are freed. What the mount showed is what the device now holds, so
//! nothing the kernel caches or refers to (inodes, open files, pages) changes under it.
//!
//! A mount with `norecovery` shows the image as it lies, which a write would build on while
//! the journal says otherwise: it stays read-only (EROFS), as does a mount whose image was
//! opened read-only (write-protected).

use super::{bytelog, Fs};
use crate::device::{HeldDevice, Nvm};
use crate::error::{FsError, FsResult};
use crate::format::STATE_CLEAN;
use std::sync::{Arc, Mutex};

/// A read-only mount's held device and unattached tier.
pub(super) struct Remount {
    /// `None` for a read-write mount and for `norecovery`.
    held: Option<Arc<HeldDevice>>,
    /// The NVM tier given to a read-only mount, attached when it becomes writable.
    tier: Mutex<Option<(Arc<dyn Nvm>, String)>>,
}

impl Remount {
    pub(super) fn new(
        held: Option<Arc<HeldDevice>>,
        tier: Option<(Arc<dyn Nvm>, String)>,
    ) -> Remount {
        Remount {
            held,
            tier: Mutex::new(tier),
        }
    }
}

impl Fs {
    /// Whether the engine refuses writes (a read-only mount not made writable).
    pub fn is_read_only(&self) -> bool {
        self.lock().opts.read_only
    }

    /// Makes a read-only mount writable (module comment); nothing to do on a writable one.
    /// EROFS where it cannot be (`norecovery`, a device opened read-only: its error is
    /// logged); a failure after the device opened fails the file system (EIO from then on).
    pub fn make_writable(&self) -> FsResult<()> {
        let _commit = self.commit_mx.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        if !g.opts.read_only {
            return Ok(());
        }
        if g.failed || g.unmounted || self.is_shut_down() {
            return Err(FsError::ShutDown);
        }
        let Some(held) = &self.remount.held else {
            log::warn!(
                "remount,rw refused: mounted with norecovery, which shows the image without \
                 its journal (unmount and mount read-write to replay it)"
            );
            return Err(FsError::ReadOnly);
        };
        let tier = {
            let mut t = self.remount.tier.lock().unwrap_or_else(|e| e.into_inner());
            match t.take() {
                Some(raw) => match bytelog::attach_tier(&g.sb, raw.clone()) {
                    Ok(attached) => Some(attached),
                    Err(e) => {
                        *t = Some(raw);
                        return Err(e);
                    }
                },
                None => None,
            }
        };
        if let Err(e) = held.open_up() {
            log::warn!("remount,rw refused: the image cannot be written: {e}");
            // the tier, attached or not, is the same tier: kept for a later try
            if let Some((t, path)) = tier {
                *self.remount.tier.lock().unwrap_or_else(|e| e.into_inner()) = Some((t.nvm, path));
            }
            return Err(FsError::ReadOnly);
        }
        g.opts.read_only = false;
        g.bytelog = bytelog::ByteLog::new(&g.sb);
        let unclean = g.sb.state != STATE_CLEAN;
        if let Err(e) = g.start_writing(tier, unclean) {
            g.fail("the remount read-write", &e);
            return Err(e);
        }
        g.rearm_write_behind();
        log::info!("remounted read-write");
        Ok(())
    }
}
