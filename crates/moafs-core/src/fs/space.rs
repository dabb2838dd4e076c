//! Space promised before it is allocated: the one place a reservation changes.
//!
//! Delayed allocation chooses disk addresses only at commit, so `write`, `mkdir`, `setxattr`
//! and their kin *promise* blocks instead: a data block for each newly dirty cached block
//! that has no address (`data`), and a metadata block for each directory block, xattr block
//! or indirect block a commit will have to allocate (`meta`). Both count against free space,
//! so ENOSPC is reported by the call that asks and never discovered at write-back.
//!
//! [`Reservations`] keeps the two counts with private fields; the `impl Inner` below is the
//! API the rest of the engine uses (reserve, release, move a promise from data to metadata,
//! forget the metadata promises a commit kept), and [`Reservations::check`] is its part of
//! `check_invariants`.

use super::Inner;
use crate::error::{FsError, FsResult};

/// Blocks promised to changes that have no disk address yet.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    /// Data blocks promised to dirty cached blocks (`CBlock::reserved`).
    data: u64,
    /// Metadata blocks promised since the last commit (directory growth, xattr blocks,
    /// indirect blocks: `Inode::meta_reserved`, `Inode::deep_reserved`).
    meta: u64,
}

impl Reservations {
    /// What of `free` blocks may still be promised: what stays free once every promise,
    /// the next one included, keeps 1/256 more for the indirect blocks it may need (a 4 KiB
    /// pointer block maps 1,023 data blocks) plus 17 blocks of slack.
    fn reservable(&self, free: u64) -> u64 {
        let usable = free.saturating_sub(self.meta + 17);
        (usable * 256 / 257).saturating_sub(self.data)
    }

    /// Checks the counts against those counted from the cache and the inodes.
    pub(crate) fn check(&self, data: u64, meta_held_by_inodes: u64) -> Result<(), String> {
        if data != self.data {
            return Err(format!(
                "{data} cached blocks hold a reservation, {} reserved",
                self.data
            ));
        }
        if meta_held_by_inodes > self.meta {
            return Err(format!(
                "{meta_held_by_inodes} inodes hold an indirect-block promise but {} metadata \
                 blocks are reserved",
                self.meta
            ));
        }
        Ok(())
    }
}

impl Inner {
    /// Blocks that may still be promised to new dirty data (see [`Reservations`]).
    /// `statfs` reports this as the space available, so a file that fills "available" space
    /// can be made.
    pub(super) fn avail_for_reservation(&self) -> u64 {
        self.space.reservable(self.alloc.free_blocks())
    }

    /// [`Self::avail_for_reservation`] counting blocks whose free waits for a commit, less
    /// the indirect block a file that takes it all reserves besides its data (pointer maps;
    /// a new file of an extent-mapped image takes its tree blocks from the slack that
    /// `reservable` holds back).
    pub(crate) fn avail_blocks(&self) -> u64 {
        self.space
            .reservable(self.alloc.free_blocks() + self.alloc.pending_block_count())
            .saturating_sub(u64::from(!self.sb.has_extents()))
    }

    /// Free blocks as `statfs` reports them: free or freed by the next commit, less the
    /// data blocks promised.
    pub(crate) fn free_unpromised(&self) -> u64 {
        (self.alloc.free_blocks() + self.alloc.pending_block_count())
            .saturating_sub(self.space.data)
    }

    /// Reserves the data blocks `blocks` (ascending) of `ino`, the file's single indirect
    /// block if the data reaches it and it does not exist yet, and the double and triple
    /// indirect blocks their paths need that neither exist nor are reserved yet (sparse
    /// writes far into a file need one for every few blocks: the commit must find them).
    /// All or none.
    pub(crate) fn reserve_for(&mut self, ino: u64, blocks: &[u64]) -> FsResult<()> {
        let n = blocks.len() as u64;
        self.reserve(n)?;
        let Some(&last) = blocks.last() else {
            return Ok(());
        };
        if self.inode(ino)?.d.extents.is_some() {
            return self.reserve_tree_blocks(ino, n);
        }
        if last < crate::format::N_DIRECT as u64 {
            return Ok(());
        }
        let node = self.inode(ino)?;
        let single = node.d.indirect[0] == 0 && !node.meta_reserved;
        let top = node.d.indirect;
        // blocks past the single indirect block's reach (most writes are not) need deeper ones
        let single_reach =
            crate::format::N_DIRECT as u64 + crate::format::ptrs_per_block(self.bs() as u32);
        let mut deep = if last < single_reach {
            Default::default()
        } else {
            self.missing_indirect(top, blocks.iter().copied())
        };
        deep.retain(|(level, _)| *level > 0);
        let node = self.inode(ino)?;
        deep.retain(|k| !node.deep_reserved.contains(k));
        if let Err(e) = self.reserve_meta_blocks(u64::from(single)) {
            self.space.data -= n;
            return Err(e);
        }
        // Out of the space `reservable` holds back for indirect blocks: physically there, or
        // the write gets ENOSPC now rather than the commit later.
        let free = self.alloc.free_blocks();
        if self.space.data + self.space.meta + deep.len() as u64 > free {
            self.space.data -= n;
            if single {
                self.space.meta -= 1;
            }
            return Err(FsError::NoSpace);
        }
        self.space.meta += deep.len() as u64;
        let node = self.inode(ino)?;
        node.meta_reserved |= single;
        node.deep_reserved.extend(deep);
        Ok(())
    }

    /// The tree blocks an extent-mapped `ino` may need for `n` more data blocks (already
    /// promised by the caller, taken back if this fails): out of the space `reservable`
    /// holds back, as the deeper indirect blocks are.
    fn reserve_tree_blocks(&mut self, ino: u64, n: u64) -> FsResult<()> {
        let more = match self.extent_blocks_to_promise(ino, n) {
            Ok(m) => m,
            Err(e) => {
                self.space.data -= n; // (the map did not load: nothing counted)
                return Err(e);
            }
        };
        if more > 0 && self.space.data + self.space.meta + more > self.alloc.free_blocks() {
            self.forget_extent_promise(ino, n);
            self.space.data -= n;
            return Err(FsError::NoSpace);
        }
        self.space.meta += more;
        self.note_extent_promise(ino, more)
    }

    /// A directory that had `before` blocks may have grown: its new blocks get addresses at
    /// commit (the caller checked with [`Self::check_space`] that a block is available).
    /// An extent-mapped directory also promises the tree blocks its new blocks may need
    /// (each an extent of its own at worst: a directory grows a block per commit, wherever
    /// the allocator finds one).
    pub(crate) fn note_dir_growth(&mut self, dir: u64, before: usize) -> FsResult<()> {
        let grown = self.dir(dir)?.blocks.len().saturating_sub(before) as u64;
        self.space.meta += grown;
        if grown > 0 && self.has_extents(dir) {
            let more = self.extent_blocks_to_promise(dir, grown)?;
            self.space.meta += more;
            self.note_extent_promise(dir, more)?;
        }
        Ok(())
    }

    /// A commit kept the metadata promises, but `n` tree blocks stay promised to files whose
    /// reserved data it held back (`extents.rs`: `carry_extent_promises`).
    pub(crate) fn keep_meta_promised(&mut self, n: u64) {
        self.space.meta += n;
    }

    /// Reserves `n` metadata blocks (directory, xattr or indirect blocks) allocated at
    /// commit, all or none.
    pub(crate) fn reserve_meta_blocks(&mut self, n: u64) -> FsResult<()> {
        self.reserve(n)?;
        self.space.data -= n;
        self.space.meta += n;
        Ok(())
    }

    /// Whether `n` blocks could be promised now (committing to release pending frees if
    /// needed), without promising them: a new directory entry may need a block, which
    /// [`Self::note_dir_growth`] then takes.
    pub(crate) fn check_space(&mut self, n: u64) -> FsResult<()> {
        self.reserve(n)?;
        self.space.data -= n;
        Ok(())
    }

    /// Reserves `n` data blocks, committing to release pending frees if needed.
    pub(crate) fn reserve(&mut self, n: u64) -> FsResult<()> {
        if n == 0 {
            return Ok(());
        }
        if self.avail_for_reservation() < n && self.alloc.pending_block_count() > 0 {
            self.commit_to_free()?; // CommitBusy while a commit is in flight
        }
        if self.avail_for_reservation() < n {
            if self.space_held_by_unlinked() {
                return Err(FsError::SpaceHeld);
            }
            return Err(FsError::NoSpace);
        }
        self.space.data += n;
        Ok(())
    }

    /// Returns `n` data-block promises: their blocks were placed (a placed block used its
    /// promise), or dropped from the cache before they were.
    pub(crate) fn release_reserved(&mut self, n: u64) {
        debug_assert!(
            n <= self.space.data,
            "{n} released, {} reserved",
            self.space.data
        );
        self.space.data -= n;
    }

    /// Returns `n` metadata-block promises kept before the commit (write-behind placed a
    /// file's single indirect block).
    pub(crate) fn release_meta_reserved(&mut self, n: u64) {
        self.space.meta = self.space.meta.saturating_sub(n);
    }

    /// A commit gave every promised metadata block its address: the promises are kept.
    pub(crate) fn metadata_promises_kept(&mut self) {
        self.space.meta = 0;
    }

    /// Whether a file with no name and no open handle still holds blocks: only the kernel's
    /// references keep it, and its FORGET will free them (`FsError::SpaceHeld`).
    fn space_held_by_unlinked(&self) -> bool {
        self.inodes.iter().any(|(ino, n)| {
            n.d.nlink == 0 && n.opens == 0 && self.kept.lookups(*ino) > 0 && n.d.blocks > 0
        })
    }
}
