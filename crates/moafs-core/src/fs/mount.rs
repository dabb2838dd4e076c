//! Mounting and unmounting: the superblock and its backups, the groups' headers and
//! bitmaps, journal replay before the state is built, and the superblock writes a commit,
//! the mount and the unmount make.

use super::alloc::{self, Allocator, Group};
use super::{
    aging, behind, bytelog, checkpoint, fetch, journal, remount, shutdown, AtimePolicy,
    EngineCounters, Fs, Inner, MountOptions, Timespec, ROOT_INO,
};
use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::bitmap::count_clear;
use crate::format::{bitmap_crc, Geometry, GroupHeader, Superblock, STATE_CLEAN, STATE_MOUNTED};
use crate::recovery::{self, read_superblock};
use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Condvar, Mutex, RwLock};

impl Fs {
    /// Mounts the file system on `dev`.
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> FsResult<Fs> {
        Fs::mount_with_tier(dev, None, opts)
    }

    /// Mounts the file system on `dev` with an NVM tier for the byte log (`tier`: the tier
    /// and its path, which the image records so that a mount without it can name it). An
    /// image not cleanly unmounted whose records may be in a tier is refused without that
    /// tier (or with another); a tier of another file system is refused; a new tier (no
    /// moafs header) is formatted for this one.
    pub fn mount_with_tier(
        mut dev: Arc<dyn BlockDevice>,
        tier: Option<(Arc<dyn crate::device::Nvm>, String)>,
        opts: MountOptions,
    ) -> FsResult<Fs> {
        let mut sb = read_superblock(dev.as_ref())?;
        let mut last_seq = sb.journal_seq;
        let nvm = tier.as_ref().map(|t| t.0.as_ref());
        let recover = !(opts.read_only && opts.no_recovery);
        if sb.state != STATE_CLEAN && sb.has_journal() && !recover {
            log::warn!(
                "mounted without replaying the journal (norecovery): changes committed since \
                 the last checkpoint are not shown"
            );
        }
        let mut shown = Default::default();
        let replay = sb.state != STATE_CLEAN && sb.has_journal() && recover;
        if replay {
            let r = if opts.read_only {
                // Nothing may be written: the replayed view is shown from memory.
                recovery::plan_replay_with(dev.as_ref(), &sb, nvm)?
            } else {
                recovery::replay_with(dev.as_ref(), &sb, nvm)?
            };
            last_seq = last_seq.max(r.last_seq);
            shown = r.blocks;
        }
        // A read-only mount holds its device shut (and the tier unattached) until a
        // `remount,rw` opens it (`remount.rs`); with norecovery it never opens.
        let held = (opts.read_only && recover).then(|| {
            Arc::new(crate::device::HeldDevice::new(
                dev.clone(),
                sb.block_size,
                shown,
            ))
        });
        if let Some(h) = &held {
            dev = h.clone();
        }
        if replay {
            sb = read_superblock(dev.as_ref())?;
        }
        let (tier, kept) = match tier {
            Some(t) if !opts.read_only => (Some(bytelog::attach_tier(&sb, t)?), None),
            t => (None, t),
        };
        let remount = remount::Remount::new(held, kept);
        Fs::mount_replayed(dev, opts, sb, last_seq, tier, remount)
    }

    /// Mounts once the journal has been replayed (or is replayed by `dev`, an overlay).
    fn mount_replayed(
        dev: Arc<dyn BlockDevice>,
        opts: MountOptions,
        sb: Superblock,
        last_seq: u64,
        tier: Option<(bytelog::Tier, String)>,
        remount: remount::Remount,
    ) -> FsResult<Fs> {
        let geo = Geometry::from_superblock(&sb);
        if dev.size() < geo.total_blocks * geo.block_size as u64 {
            return Err(FsError::corrupt(
                "superblock",
                0,
                format!(
                    "image is {} bytes but the file system needs {}",
                    dev.size(),
                    geo.total_blocks * geo.block_size as u64
                ),
            ));
        }
        let run_cap = opts.cowrite.then(|| opts.cowrite_blocks(geo.block_size));
        let groups = load_groups(dev.as_ref(), &geo, run_cap)?;
        // every request of the engine passes the fence a shutdown closes
        let fence = Arc::new(crate::device::FenceDevice::new(dev));
        let dev: Arc<dyn BlockDevice> = fence.clone();
        let (ckpt, dev) =
            checkpoint::Checkpoints::new(dev, geo.block_size, opts.checkpoint_interval_ms);
        let budget = super::budget::Budget::at_mount(&opts);
        let opts_cache_blocks = budget.cache_bytes() / geo.block_size as u64;
        let mut inner = Inner {
            dev,
            sb: sb.clone(),
            alloc: Allocator {
                geo,
                groups,
                pending_blocks: Vec::new(),
                pending_inodes: Vec::new(),
                pending_sealed_blocks: Vec::new(),
                pending_sealed_inodes: Vec::new(),
                pending_prev_blocks: Vec::new(),
                pending_prev_inodes: Vec::new(),
            },
            journal: journal::Journal::new(&sb, last_seq),
            ckpt,
            aging: aging::Aging::new(opts.dirty_expire_ms),
            fetch: fetch::Fetch::default(),
            bytelog_waiting: Default::default(),
            bytelog: if opts.read_only {
                None
            } else {
                bytelog::ByteLog::new(&sb)
            },
            building: Default::default(),
            dirty_order: Vec::new(),
            cw_goal: Default::default(),
            atime: AtimePolicy::default(),
            epochs: Default::default(),
            backup_carries: (
                [
                    sb.features_compat,
                    sb.features_incompat,
                    sb.features_ro_compat,
                ],
                sb.label,
            ),
            inodes: HashMap::default(),
            itable: HashMap::default(),
            ind: HashMap::default(),
            dead: HashMap::default(),
            space: Default::default(),
            book: Default::default(),
            opts,
            counters: EngineCounters::default(),
            failed: false,
            unmounted: false,
            io_gate: Arc::new(RwLock::new(())),
            touched: Default::default(),
            ind_dirty: Vec::new(),
            behind: Default::default(),
            spare: super::data::Spares::new((opts_cache_blocks / 4) as usize),
            budget,
            kept: Default::default(),
        };
        inner.rearm_write_behind();
        let unclean = inner.sb.state != STATE_CLEAN;
        if unclean && inner.journal.is_none() {
            log::warn!("file system was not cleanly unmounted; run `moafs fsck` to check it");
        }
        inner.inode(ROOT_INO)?;
        if !inner.inodes[&ROOT_INO].is_dir() {
            return Err(FsError::corrupt(
                "inode",
                ROOT_INO,
                "root is not a directory",
            ));
        }
        if !inner.opts.read_only {
            inner.start_writing(tier, unclean)?;
        }
        let recording = inner.dev.records();
        Ok(Fs {
            inner: Mutex::new(inner),
            done: Condvar::new(),
            commit_mx: Mutex::new(()),
            wb: behind::WbSignal::default(),
            recording,
            down: shutdown::Down::new(fence),
            fsync_times: Default::default(),
            remount,
        })
    }
}

impl Inner {
    /// A read-write mount's start, at mount or at `remount,rw` (the journal replayed, the
    /// device writable): the byte log on `tier` or on the image, the superblock marked
    /// mounted and written, and (`unclean`) the orphans of a crash freed.
    pub(super) fn start_writing(
        &mut self,
        tier: Option<(bytelog::Tier, String)>,
        unclean: bool,
    ) -> FsResult<()> {
        self.use_tier(tier);
        let active = self.bytelog_active();
        if let Some(l) = self.bytelog.as_mut() {
            l.in_use = active;
            l.maps = active && self.opts.bytelog_grow;
        }
        if self.journal.is_some() {
            self.sb.features_incompat |= crate::format::FEATURE_JOURNAL_COMPACT;
        }
        if self.opts.convert_to_extents && !self.sb.has_extents() {
            // written home below, with the backups, before anything refers to it
            self.sb.format_version = crate::format::FORMAT_VERSION;
            self.sb.features_incompat |= crate::format::FEATURE_EXTENTS;
        }
        self.sb.state = STATE_MOUNTED;
        self.sb.mount_count = self.sb.mount_count.wrapping_add(1); // a counter only
        self.write_superblocks_in_place()?;
        if unclean {
            // Files unlinked while open when the system went down.
            self.reclaim_orphans()?;
        }
        Ok(())
    }
}

/// Reads every group's header and bitmaps; `run_cap` is co-writing's N (the free-run index
/// is kept only with co-writing on).
fn load_groups(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    run_cap: Option<u64>,
) -> FsResult<Vec<Group>> {
    let bs = geo.block_size as u64;
    let mut groups = Vec::with_capacity(geo.group_count as usize);
    for g in 0..geo.group_count {
        let mut hb = vec![0u8; bs as usize];
        let hblk = geo.header_block(g);
        dev.read_at(hblk * bs, &mut hb)?;
        let hdr = GroupHeader::decode(&hb, hblk, g)?;
        let mut bitmap = vec![0u8; geo.bitmap_blocks as usize * bs as usize];
        dev.read_at(geo.bitmap_block(g) * bs, &mut bitmap)?;
        let mut ibitmap = vec![0u8; geo.ibitmap_blocks as usize * bs as usize];
        dev.read_at(geo.ibitmap_block(g) * bs, &mut ibitmap)?;
        if bitmap_crc(&bitmap, g) != hdr.bitmap_crc {
            return Err(FsError::corrupt(
                "block bitmap",
                geo.bitmap_block(g),
                "checksum mismatch",
            ));
        }
        if bitmap_crc(&ibitmap, g) != hdr.ibitmap_crc {
            return Err(FsError::corrupt(
                "inode bitmap",
                geo.ibitmap_block(g),
                "checksum mismatch",
            ));
        }
        // the allocator subtracts from these counts: they must be the bitmaps' exactly (and
        // adds to `dirs`, a count of some of the inodes)
        if hdr.free_blocks as u64 != count_clear(&bitmap, geo.group_len(g) as u64)
            || hdr.free_inodes as u64 != count_clear(&ibitmap, geo.inodes_per_group as u64)
            || hdr.dirs > geo.inodes_per_group
        {
            return Err(FsError::corrupt(
                "group header",
                hblk,
                "free counts disagree with the bitmaps, or more directories than inodes",
            ));
        }
        let runs = match run_cap {
            Some(cap) => alloc::FreeRunIndex::build(
                &bitmap,
                geo.meta_blocks() as u64,
                geo.group_len(g) as u64,
                cap,
            ),
            None => alloc::FreeRunIndex::disabled(),
        };
        groups.push(Group {
            hdr,
            runs,
            bitmap,
            ibitmap,
            dirty: false,
            inode_hint: 0,
            block_hint: 0,
        });
    }
    Ok(groups)
}

impl Inner {
    /// The superblock and its backups as of now (pending frees counted free, as on disk).
    /// `backups`: the backups too (else the primary only).
    fn superblock_images(&mut self, backups: bool) -> Vec<(u64, Vec<u8>)> {
        let geo = self.alloc.geo;
        self.sb.free_blocks = self.alloc.free_blocks() + self.alloc.pending_block_count();
        self.sb.free_inodes = self.alloc.free_inodes() + self.alloc.pending_inode_count();
        self.sb.last_write_sec = Timespec::now().sec as u64;
        if let Some(j) = &self.journal {
            // The replay floor: every transaction up to it is home and durable. (A
            // transaction's superblock goes home with a later checkpoint, together with other
            // blocks of transactions after this number: were it the newest number, a torn
            // checkpoint could leave them unreplayed.)
            self.sb.journal_seq = j.checkpointed;
        }
        if let Some(l) = self.bytelog.as_mut() {
            // A commit's superblock (or one written at mount or unmount, with everything
            // home) covers every record so far; only one commit or byte-log job runs at a
            // time, so none is written before this one is durable.
            l.covered(&mut self.sb);
        }
        let bytes = self.sb.encode(geo.block_size);
        let mut v = vec![(0, bytes.clone())];
        if backups {
            for g in geo.backup_groups() {
                v.push((geo.group_start(g), bytes.clone()));
            }
            self.backup_carries = self.backup_fields();
        }
        v
    }

    /// What the backup superblocks must carry up to date: the feature bits and the label.
    fn backup_fields(&self) -> ([u64; 3], [u8; 32]) {
        (
            [
                self.sb.features_compat,
                self.sb.features_incompat,
                self.sb.features_ro_compat,
            ],
            self.sb.label,
        )
    }

    /// Adds the superblock to the transaction being built. The backups (read only when the
    /// primary is damaged) are written at mount and unmount, which set `state`, and here
    /// only when a feature bit or the label changed: their free counts and replay floor may
    /// lag (replay takes its floor from the newest transaction, fsck recounts), their state,
    /// features and label never do. Two blocks fewer in every transaction and its checkpoint.
    pub(crate) fn write_superblocks(&mut self) -> FsResult<()> {
        let backups = self.backup_fields() != self.backup_carries;
        let v = self.superblock_images(backups);
        self.building.add(v);
        Ok(())
    }

    /// Writes the superblocks home and flushes (only when no transaction is outstanding).
    fn write_superblocks_in_place(&mut self) -> FsResult<()> {
        let bs = self.bs() as u64;
        for (b, bytes) in self.superblock_images(true) {
            self.dev.write_at(b * bs, &bytes)?;
            self.counters.meta_blocks_written += 1;
        }
        self.dev.flush()?;
        Ok(())
    }

    pub(super) fn unmount(&mut self) -> FsResult<()> {
        if self.unmounted {
            return Ok(());
        }
        if self.opts.read_only || self.failed {
            self.unmounted = true;
            return Ok(());
        }
        let orphans: Vec<u64> = self
            .inodes
            .iter()
            .filter(|(_, n)| n.d.nlink == 0)
            .map(|(i, _)| *i)
            .collect();
        for ino in orphans {
            self.kept.none(ino);
            if let Some(n) = self.inodes.get_mut(&ino) {
                n.opens = 0;
            }
            self.maybe_reap(ino)?;
        }
        if let Some(l) = self.bytelog.as_mut() {
            // every homeless block home, and the last superblocks say no commit batch is
            // in the log
            l.clean_next = true;
            l.in_use = false;
        }
        self.commit()?;
        // Every journaled block home and durable: the journal is not needed any more and
        // the superblock can say so.
        self.checkpoint_now()?;
        self.sb.state = STATE_CLEAN;
        self.sb.features_incompat &= !crate::format::FEATURE_JOURNAL_COMPACT;
        self.write_superblocks_in_place()?;
        self.unmounted = true;
        Ok(())
    }
}
