//! The journal at run time: writing transactions, and replay at mount.
//!
//! A commit gathers every metadata block it would write (and, in `data` mode, the file data)
//! into one transaction and writes it to the journal as one request followed by a flush. The
//! blocks reach home later, at a checkpoint (`checkpoint.rs`): many transactions' blocks
//! together, each block once, in address order, then a flush. Every transaction records the
//! highest sequence number whose blocks were home and durable when it was written, so replay
//! after a crash re-applies, in order, exactly the transactions after that one; the journal
//! never reuses their space before a checkpoint. Revoke records keep replay from writing an
//! old image over a block freed, or written in place, since.
//!
//! Freed blocks stay unallocatable until the commit after the one that freed them (see
//! `alloc.rs`): the freeing transaction, which revokes them, is durable before they are
//! reused.

use super::checkpoint::{Checkpoint, Image};
use super::Inner;
use crate::device::BlockDevice;
use crate::error::{FsError, FsResult};
use crate::format::journal::{
    compact_fits, diff_deltas, diff_deltas_within, encode_txn_with, journal_salt, txn_len, Delta,
};
use crate::format::Superblock;
use std::collections::VecDeque;
use std::sync::Arc;

/// Journal state while mounted.
pub(crate) struct Journal {
    /// First block and length of the journal region.
    pub start: u64,
    pub len: u64,
    /// Next journal position (relative to `start`).
    pub head: u64,
    /// Sequence number of the last transaction written.
    pub seq: u64,
    pub salt: u64,
    /// Every transaction up to here is durable at its home locations (as of the end of the
    /// I/O of the checkpoint that set it: `checkpoint_plan`).
    pub checkpointed: u64,
    /// Transactions after `checkpointed`: (seq, position, length); their space is not reused.
    pub live: VecDeque<(u64, u64, u64)>,
}

impl Journal {
    pub fn new(sb: &Superblock, seq: u64) -> Option<Journal> {
        sb.has_journal().then(|| Journal {
            start: sb.journal_start,
            len: sb.journal_blocks as u64,
            head: 0,
            seq,
            salt: journal_salt(&sb.uuid),
            checkpointed: seq,
            live: VecDeque::new(),
        })
    }

    /// A checkpoint of every transaction so far: their space may be reused.
    fn checkpointed_all(&mut self) {
        self.checkpointed = self.seq;
        self.live.clear();
    }

    /// Journal blocks held by transactions not yet checkpointed.
    fn used(&self) -> u64 {
        self.live.iter().map(|t| t.2).sum()
    }

    /// Where a transaction of `n` blocks goes, if that space holds no live transaction.
    fn place(&self, n: u64) -> Option<u64> {
        if n > self.len {
            return None;
        }
        let pos = if self.head + n <= self.len {
            self.head
        } else {
            0
        };
        let clash = self
            .live
            .iter()
            .any(|&(_, p, l)| pos < p + l && p < pos + n);
        (!clash).then_some(pos)
    }
}

impl Inner {
    /// Plans the commit of `writes` (home block, full-block image) and `revokes` atomically:
    /// into the journal, then a flush; the blocks wait for a checkpoint (`checkpoint.rs`),
    /// which this commit runs first when the journal is short of space or the oldest waiting
    /// block is due. Without a journal, or for a transaction larger
    /// than the journal, in place between two flushes after a checkpoint (not atomic;
    /// counted in `journal_overflows`). The journal's bookkeeping is done here, as of the end
    /// of [`TxnIo::run`] (only one commit runs at a time, and if its I/O fails the file
    /// system turns read-only).
    pub(crate) fn plan_txn(
        &mut self,
        mut writes: Vec<(u64, Vec<u8>)>,
        revokes: Vec<u64>,
    ) -> (Option<Checkpoint>, TxnIo) {
        // The last image of a block wins; checkpoint in block order.
        writes.sort_by_key(|w| w.0);
        writes.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                std::mem::swap(&mut later.1, &mut earlier.1);
                true
            } else {
                false
            }
        });
        let bs = self.bs();
        // A block whose newest image waits in the journal goes as delta records when few of
        // its bytes changed (an inode slot, a bitmap bit, a directory entry, free counts):
        // replay patches them onto that image (FORMAT §12).
        let mut deltas: Vec<Delta> = Vec::new();
        let mut full: Vec<bool> = Vec::with_capacity(writes.len());
        for (b, new) in &writes {
            // (at most half a block of records, else the block goes whole)
            let d = self.ckpt.image_of(*b).and_then(|old| match *b {
                0 => Some(superblock_deltas(old.as_ref(), new))
                    .filter(|d| d.iter().map(Delta::len).sum::<usize>() <= bs / 2),
                _ => diff_deltas_within(*b, old.as_ref(), new, bs / 2),
            });
            match d {
                Some(d) => {
                    deltas.extend(d);
                    full.push(false);
                }
                None => full.push(true),
            }
        }
        let size = |full: &[bool], deltas: &[Delta]| {
            let n_full = full.iter().filter(|f| **f).count();
            txn_len(n_full, revokes.len(), deltas, bs as u32) as u64
        };
        let mut n = size(&full, &deltas);
        self.counters.meta_blocks_written += writes.len() as u64;
        let fits = |n: u64, this: &Self| this.journal.as_ref().is_some_and(|j| n <= j.len);
        // Checkpoint now: the journal is short of space (a quarter is kept free for the next
        // commit), the oldest block waiting is due, or this transaction goes in place.
        let short = self
            .journal
            .as_ref()
            .is_some_and(|j| j.place(n).is_none() || (j.used() + n) * 4 > j.len * 3);
        let ckpt = (!fits(n, self) || short || self.ckpt.due())
            .then(|| self.checkpoint_plan())
            .filter(|c| c.blocks() > 0);
        if ckpt.is_some() && full.contains(&false) {
            // The checkpoint moves the replay floor past the images the deltas are against:
            // replay would patch them onto home, which a later commit may overwrite in place
            // (data past the journal's share) before its own transaction is durable. Whole.
            deltas.clear();
            full.fill(true);
            n = size(&full, &deltas);
        }
        self.counters.delta_blocks += full.iter().filter(|f| !**f).count() as u64;
        let fits = fits(n, self);
        let images: Vec<(u64, Image)> = writes
            .into_iter()
            .map(|(b, d)| (b, Image::new(d)))
            .collect();
        if !fits {
            if let Some(j) = self.journal.as_ref() {
                log::warn!(
                    "transaction of {} blocks exceeds the journal of {}: written in place",
                    images.len(),
                    j.len
                );
                self.counters.journal_overflows += 1;
            }
            self.counters.checkpoint_blocks += images.len() as u64;
            let mut images = images;
            if let (Some(j), Some(first)) = (self.journal.as_ref(), images.first_mut()) {
                if first.0 == 0 {
                    // The checkpoint before these writes made every transaction home: a
                    // replay must not apply any of them over what is written in place.
                    self.sb.journal_seq = j.seq;
                    first.1 = Image::new(self.sb.encode(bs as u32));
                }
            }
            // shown until they are home, like a transaction's
            self.ckpt.in_place(&images);
            // file data first, flushed before the metadata that points at it
            let data: std::collections::HashSet<u64> =
                self.building.take_data_blocks().into_iter().collect();
            let (data, writes): (Vec<_>, Vec<_>) =
                images.into_iter().partition(|(b, _)| data.contains(b));
            return (
                ckpt,
                TxnIo::InPlace {
                    base: self.ckpt.base(),
                    data,
                    writes,
                },
            );
        }
        let j = self.journal.as_mut().expect("fits in the journal");
        let pos = j.place(n).expect("a checkpoint frees the journal");
        let seq = j.seq + 1;
        let at = (j.start + pos) * bs as u64;
        let checkpointed = j.checkpointed;
        self.counters.journal_blocks_written += n;
        self.counters.journal_commits += 1;
        let n_full = full.iter().filter(|f| **f).count();
        self.counters.journal_compact +=
            u64::from(compact_fits(n_full, revokes.len(), &deltas, bs as u32));
        self.counters.revokes += revokes.len() as u64;
        j.seq = seq;
        j.head = pos + n;
        j.live.push_back((seq, pos, n));
        self.ckpt.journaled(&images);
        let home: Vec<(u64, Image)> = images
            .into_iter()
            .zip(full)
            .filter_map(|(i, f)| f.then_some(i))
            .collect();
        (
            ckpt,
            TxnIo::Journal {
                at,
                seq,
                checkpointed,
                salt: j.salt,
                home,
                revokes,
                deltas,
            },
        )
    }

    /// Takes every block waiting for its checkpoint to write home; as of the flush after
    /// those writes the journal is free.
    pub(crate) fn checkpoint_plan(&mut self) -> Checkpoint {
        let newest = self.journal.as_ref().map_or(0, |j| j.seq);
        let c = self.ckpt.take(newest, self.bs() as u32);
        if c.blocks() > 0 {
            self.counters.checkpoints += 1;
            self.counters.checkpoint_blocks += c.blocks() as u64;
        }
        if let Some(j) = self.journal.as_mut() {
            j.checkpointed_all();
        }
        c
    }

    /// A checkpoint of every waiting block with the engine lock held (unmount): written home
    /// and flushed.
    pub(crate) fn checkpoint_now(&mut self) -> FsResult<()> {
        let c = self.checkpoint_plan();
        let r = c
            .run(self.bs() as u64)
            .and_then(|()| self.dev.flush())
            .map_err(FsError::from);
        self.ckpt.end(r.is_ok());
        if let Err(e) = &r {
            self.fail("a checkpoint", e);
        }
        r
    }

    /// After a crash: frees inodes that are allocated but have no links (files unlinked while
    /// still open, whose last close never came), then commits.
    pub(crate) fn reclaim_orphans(&mut self) -> FsResult<()> {
        let geo = self.alloc.geo;
        let mut orphans = Vec::new();
        for g in 0..geo.group_count {
            let init = self.alloc.groups[g as usize].hdr.itable_init as u64;
            for i in 0..init.min(geo.inodes_per_group as u64) {
                if !crate::format::bitmap::bit(&self.alloc.groups[g as usize].ibitmap, i) {
                    continue;
                }
                let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
                if ino == super::ROOT_INO {
                    continue;
                }
                let d = self.read_disk_inode(ino)?;
                if !d.is_free() && d.nlink == 0 {
                    orphans.push(ino);
                }
            }
        }
        if orphans.is_empty() {
            return Ok(());
        }
        log::info!("freeing {} orphan inode(s)", orphans.len());
        for ino in orphans {
            self.inode(ino)?;
            self.maybe_reap(ino)?;
        }
        self.commit()
    }
}

/// The primary superblock's change from `old` (its newest journaled image) to `new` as delta
/// records: every encoded field (bytes 0..256, crc included) whatever changed, and what
/// changed after them. A checkpoint writes the superblock home with its replay floor raised,
/// so home is not the journal's image of it: replay may patch these onto either, and the
/// fields come out whole (the bytes after them are the same in both: the tier's path, written
/// in place at mount).
fn superblock_deltas(old: &[u8], new: &[u8]) -> Vec<Delta> {
    let fields = crate::format::NVM_PATH_AT;
    let mut base = old.to_vec();
    base[..fields].copy_from_slice(&new[..fields]);
    let mut d = vec![Delta {
        target: 0,
        offset: 0,
        bytes: new[..fields].to_vec(),
    }];
    d.extend(diff_deltas(0, &base, new));
    d
}

/// The device I/O of a transaction planned by `Inner::plan_txn` (phase B of a commit).
pub(crate) enum TxnIo {
    /// Written in place between two flushes (no journal, or larger than it), after a
    /// checkpoint; with the device beneath the checkpoint view.
    InPlace {
        base: Arc<dyn BlockDevice>,
        /// File data the transaction carried: written and flushed first.
        data: Vec<(u64, Image)>,
        writes: Vec<(u64, Image)>,
    },
    /// Into the journal as one request, then a flush.
    Journal {
        /// Byte offset of the transaction in the journal.
        at: u64,
        seq: u64,
        checkpointed: u64,
        salt: u64,
        home: Vec<(u64, Image)>,
        revokes: Vec<u64>,
        /// Delta records (inline in a compact transaction, else packed into payload blocks).
        deltas: Vec<Delta>,
    },
}

impl TxnIo {
    /// `flushed`: the commit has just flushed (its ordered data, or its checkpoint).
    pub fn run(&self, dev: &dyn BlockDevice, bs: u64, flushed: bool) -> FsResult<()> {
        match self {
            TxnIo::InPlace { base, data, writes } => {
                if !data.is_empty() {
                    super::checkpoint::write_runs(base.as_ref(), bs, data)?;
                    dev.flush()?;
                } else if !flushed {
                    dev.flush()?;
                }
                super::checkpoint::write_runs(base.as_ref(), bs, writes)?;
                dev.flush()?;
            }
            TxnIo::Journal {
                at,
                seq,
                checkpointed,
                salt,
                home,
                revokes,
                deltas,
            } => {
                let blocks =
                    encode_txn_with(*seq, *checkpointed, home, revokes, deltas, bs as u32, *salt);
                let bufs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
                dev.writev_at(*at, &bufs)?;
                dev.flush()?;
            }
        }
        Ok(())
    }
}
