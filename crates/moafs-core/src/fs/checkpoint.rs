//! Lazy checkpointing, as jbd2 does it.
//!
//! A commit writes its metadata blocks (and the data blocks it journals) to the journal only.
//! Their home locations are written later, all at once in address order (a checkpoint): when
//! the journal runs short of space, when the oldest image waiting has waited
//! `checkpoint_interval_ms`, before a transaction too large for the journal is written in
//! place, and at unmount. A block changed by many commits before that is written home once.
//!
//! Until its checkpoint the newest image of such a block exists only in the journal and here:
//! the engine reads the device through a [`View`] that shows these images over the device's
//! bytes, so every reader (inode table, directories, indirect and xattr blocks, file data
//! journaled by `journal=ordered|data`) sees the newest version.
//!
//! Replay re-applies every transaction after the last checkpoint, so a block that leaves the
//! journal's keeping while older transactions still hold images of it must be **revoked**: a
//! freed block (it may be reused for file data written in place) in the transaction that
//! frees it, a block written home directly by a commit (file data past the journal's share)
//! in that commit's transaction. Replay applies no image of a revoked block from a transaction
//! older than the revoke (`journal.rs`). A commit that checkpoints does so before anything
//! else it writes: a revoked block's committed image goes home first, then the commit's own
//! write of the block, so the checkpoint's superblock may name every transaction so far.
//! The view refuses (EIO, logged) a write to a block it
//! holds an image of that was not revoked: such a write would be undone by a replay, or by
//! the next checkpoint.

use crate::device::{BlockDevice, DevResult, DeviceCounters, DeviceError, Note};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// A whole-block image, shared by the journal write, the view and the checkpoint.
#[derive(Clone)]
pub(crate) struct Image(Arc<Vec<u8>>);

impl Image {
    pub fn new(bytes: Vec<u8>) -> Image {
        Image(Arc::new(bytes))
    }
    fn same(&self, other: &Image) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl AsRef<[u8]> for Image {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

struct Entry {
    image: Image,
    /// Revoked by the commit being written: home gets the cache's bytes, not this image;
    /// it is still shown until that commit ends (a read planned before the write sees it).
    revoked: bool,
}

type Map = Arc<RwLock<BTreeMap<u64, Entry>>>;

/// The device as the engine sees it: blocks waiting for their checkpoint read from memory.
pub(crate) struct View {
    base: Arc<dyn BlockDevice>,
    map: Map,
    bs: u64,
}

impl View {
    /// A write to `[offset, offset + len)` must not reach a block waiting for its
    /// checkpoint unless the commit revoked it.
    fn guard(&self, offset: u64, len: u64) -> DevResult<()> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let (first, end) = (offset / self.bs, (offset + len).div_ceil(self.bs));
        if let Some((b, _)) = map.range(first..end).find(|(_, e)| !e.revoked) {
            log::error!(
                "a write to block {b} while the journal holds a newer image of it that was not \
                 revoked (refused: a replay or the next checkpoint would undo it)"
            );
            return Err(DeviceError::Io {
                offset,
                len,
                source: std::io::Error::from_raw_os_error(libc::EIO),
            });
        }
        Ok(())
    }
}

impl BlockDevice for View {
    fn size(&self) -> u64 {
        self.base.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.bs;
        let end = offset + buf.len() as u64;
        // The images first, then the device: a checkpoint may write a block home and forget
        // its image while the device is read (reads run outside the engine lock); the image
        // taken before is what home holds after.
        let shown: Vec<(u64, Image)> = {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            map.range(offset / bs..end.div_ceil(bs))
                .map(|(b, e)| (*b, e.image.clone()))
                .collect()
        };
        self.base.read_at(offset, buf)?;
        let images = shown.iter().map(|(b, i)| (*b, i.as_ref()));
        crate::device::patch_blocks(buf, offset, bs, images);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.guard(offset, buf.len() as u64)?;
        self.base.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.guard(offset, crate::device::iov_len(bufs))?;
        self.base.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        self.base.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.guard(offset, len)?;
        self.base.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.base.counters()
    }
    fn records(&self) -> bool {
        self.base.records()
    }
    fn note(&self, note: Note) {
        self.base.note(note)
    }
}

/// The blocks whose newest image is in the journal but not yet home (engine state, owned
/// here: `Inner::ckpt`).
pub(crate) struct Checkpoints {
    map: Map,
    base: Arc<dyn BlockDevice>,
    interval: Duration,
    /// When the oldest image waiting was journaled.
    oldest: Option<Instant>,
    /// Images to forget when the commit being written ends: revoked ones, and those its
    /// checkpoint wrote home.
    ending: Vec<(u64, Image)>,
}

/// Blocks a checkpoint writes home, sorted: with the device beneath the view (they are the
/// view's own images).
pub(crate) struct Checkpoint {
    base: Arc<dyn BlockDevice>,
    images: Vec<(u64, Image)>,
    /// The primary superblock as of the newest transaction, its replay floor raised to that
    /// transaction: written once the images are durable.
    floor: Option<Vec<u8>>,
}

impl Checkpoint {
    /// Writes the images home, each contiguous run as one request, flushes, then writes the
    /// superblock whose replay floor says they are home (no flush: the caller's next flush
    /// makes it durable, before any transaction reuses the journal's space). Until that
    /// superblock is durable a replay re-applies every transaction the checkpoint covers —
    /// their space is intact until then — so a torn checkpoint is harmless; once it is, a
    /// torn transaction over their space is never read.
    pub fn run(&self, bs: u64) -> DevResult<()> {
        write_runs(self.base.as_ref(), bs, &self.images)?;
        if let Some(sb) = &self.floor {
            if !self.images.is_empty() {
                self.base.flush()?;
            }
            self.base.write_at(0, sb)?;
        }
        Ok(())
    }
    /// Blocks written home (the superblock counted).
    pub fn blocks(&self) -> usize {
        self.images.len() + usize::from(self.floor.is_some())
    }
}

/// Writes sorted (block, image) pairs, contiguous runs as one request each (256 blocks at most).
pub(crate) fn write_runs<B: AsRef<[u8]>>(
    dev: &dyn BlockDevice,
    bs: u64,
    writes: &[(u64, B)],
) -> DevResult<()> {
    let mut i = 0;
    while i < writes.len() {
        let mut k = i + 1;
        while k < writes.len() && writes[k].0 == writes[k - 1].0 + 1 && k - i < 256 {
            k += 1;
        }
        let bufs: Vec<&[u8]> = writes[i..k].iter().map(|w| w.1.as_ref()).collect();
        dev.writev_at(writes[i].0 * bs, &bufs)?;
        i = k;
    }
    Ok(())
}

impl Checkpoints {
    /// Starts with nothing waiting; returns the engine's part and the view the engine reads
    /// and writes the device through.
    pub fn new(
        base: Arc<dyn BlockDevice>,
        block_size: u32,
        interval_ms: u64,
    ) -> (Checkpoints, Arc<dyn BlockDevice>) {
        let map: Map = Default::default();
        let bs = block_size as u64;
        let view = Arc::new(View {
            base: base.clone(),
            map: map.clone(),
            bs,
        });
        let c = Checkpoints {
            map,
            base,
            interval: Duration::from_millis(interval_ms),
            oldest: None,
            ending: Vec::new(),
        };
        (c, view)
    }

    fn map(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<u64, Entry>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest journaled image of `block` waiting for its checkpoint, unless revoked: the
    /// base a transaction's delta record of it is relative to.
    pub fn image_of(&self, block: u64) -> Option<Image> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.get(&block)
            .filter(|e| !e.revoked)
            .map(|e| e.image.clone())
    }

    /// Blocks waiting for their checkpoint.
    pub fn waiting(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The oldest image waiting has waited the checkpoint interval.
    pub fn due(&self) -> bool {
        self.oldest.is_some_and(|t| t.elapsed() >= self.interval)
    }

    /// The blocks among `ranges` ((first, count), any order) the journal holds images of:
    /// the commit being planned revokes them (freed, or written home directly by it). Marked
    /// revoked — no delta is made against them, a write to them passes the view's guard, and
    /// a checkpoint in this commit writes their committed image before the commit's own
    /// write — and forgotten when that commit ends.
    pub fn revoke(&mut self, ranges: impl IntoIterator<Item = (u64, u64)>) -> Vec<u64> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if map.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (first, count) in ranges {
            for (b, e) in map.range_mut(first..first + count) {
                if !e.revoked {
                    e.revoked = true;
                    out.push(*b);
                    self.ending.push((*b, e.image.clone()));
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// A transaction's images are on their way to the journal: from now on they are the
    /// blocks' newest versions.
    pub fn journaled(&mut self, images: &[(u64, Image)]) {
        if images.is_empty() {
            return;
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        for (b, image) in images {
            map.insert(
                *b,
                Entry {
                    image: image.clone(),
                    revoked: false,
                },
            );
        }
        drop(map);
        self.oldest.get_or_insert_with(Instant::now);
    }

    /// A transaction's images go home in place (no journal, or too large for it): shown
    /// until the commit writing them ends.
    pub fn in_place(&mut self, images: &[(u64, Image)]) {
        self.journaled(images);
        self.ending.extend(images.iter().cloned());
    }

    /// Every waiting image, to write home — a revoked one too: it is the block's last
    /// committed contents, and the commit that revoked it writes the block (or frees it)
    /// only after the checkpoint is durable (`CommitIo::run`), so the superblock may say
    /// every transaction so far is home. Forgotten once the commit (or checkpoint) that
    /// writes them ends, unless a newer image replaced it meanwhile. The
    /// primary superblock's (block 0) is written last, with its replay floor raised to
    /// `newest`, the newest transaction so far (`Checkpoint::run`); `block_size` encodes it.
    pub fn take(&mut self, newest: u64, block_size: u32) -> Checkpoint {
        let mut images: Vec<(u64, Image)> = self
            .map()
            .iter()
            .map(|(b, e)| (*b, e.image.clone()))
            .collect();
        self.ending.extend(images.iter().cloned());
        self.oldest = None;
        let mut floor = None;
        if images.first().is_some_and(|i| i.0 == 0) {
            let (_, sb) = images.remove(0);
            floor = match crate::format::Superblock::decode(sb.as_ref(), 0) {
                Ok(mut s) => {
                    s.journal_seq = s.journal_seq.max(newest);
                    Some(s.encode(block_size))
                }
                // (our own image: cannot fail; home keeps the older floor, which is safe)
                Err(_) => Some(sb.as_ref().to_vec()),
            };
        }
        Checkpoint {
            base: self.base.clone(),
            images,
            floor,
        }
    }

    /// The commit or checkpoint in flight ended (`ok`: its writes are durable). Forgets the
    /// images it revoked or wrote home (not newer ones journaled since).
    pub fn end(&mut self, ok: bool) {
        let ending = std::mem::take(&mut self.ending);
        if !ok {
            // nothing more is written (the file system is read-only now): keep showing them
            return;
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        for (b, image) in ending {
            if map.get(&b).is_some_and(|e| e.image.same(&image)) {
                map.remove(&b);
            }
        }
        if map.is_empty() {
            self.oldest = None;
        } else if self.oldest.is_none() {
            // images journaled while the checkpoint wrote
            self.oldest = Some(Instant::now());
        }
    }

    /// The device beneath the view (writes of blocks the view holds, by their owner).
    pub fn base(&self) -> Arc<dyn BlockDevice> {
        self.base.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn the_view_shows_waiting_images_and_refuses_unrevoked_writes() {
        let base: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(8 * 4096));
        base.write_at(0, &vec![1u8; 8 * 4096]).unwrap();
        let (mut c, view) = Checkpoints::new(base.clone(), 4096, 30_000);
        let img = Image::new(vec![9u8; 4096]);
        c.journaled(&[(3, img.clone())]);
        let mut buf = vec![0u8; 3 * 4096];
        view.read_at(2 * 4096, &mut buf).unwrap();
        assert!(buf[..4096].iter().all(|&x| x == 1));
        assert!(buf[4096..8192].iter().all(|&x| x == 9));
        // a write that covers block 3 is refused; one beside it is not
        assert!(view.write_at(3 * 4096, &[5u8; 4096]).is_err());
        assert!(view
            .writev_at(2 * 4096, &[&[5u8; 4096], &[5u8; 4096]])
            .is_err());
        view.write_at(4 * 4096, &[5u8; 4096]).unwrap();
        // revoked: the write goes through, the image is still shown until the commit ends
        assert_eq!(c.revoke([(0, 8)]), vec![3]);
        view.write_at(3 * 4096, &[5u8; 4096]).unwrap();
        view.read_at(3 * 4096, &mut buf[..4096]).unwrap();
        assert!(buf[..4096].iter().all(|&x| x == 9));
        assert_eq!(
            c.take(1, 4096).images.len(),
            1,
            "a revoked image is the committed one: a checkpoint writes it"
        );
        c.end(true);
        view.read_at(3 * 4096, &mut buf[..4096]).unwrap();
        assert!(buf[..4096].iter().all(|&x| x == 5));
        assert_eq!(c.waiting(), 0);
    }

    #[test]
    fn a_checkpoint_keeps_images_journaled_while_it_wrote() {
        let base: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(8 * 4096));
        let (mut c, view) = Checkpoints::new(base.clone(), 4096, 30_000);
        c.journaled(&[
            (1, Image::new(vec![1u8; 4096])),
            (2, Image::new(vec![2u8; 4096])),
        ]);
        let ck = c.take(1, 4096);
        assert_eq!(ck.blocks(), 2);
        c.journaled(&[(2, Image::new(vec![3u8; 4096]))]);
        ck.run(4096).unwrap();
        c.end(true);
        assert_eq!(c.waiting(), 1);
        let mut buf = vec![0u8; 4096];
        view.read_at(2 * 4096, &mut buf).unwrap();
        assert!(
            buf.iter().all(|&x| x == 3),
            "the newer image is still shown"
        );
        base.read_at(4096, &mut buf).unwrap();
        assert!(
            buf.iter().all(|&x| x == 1),
            "the checkpoint wrote block 1 home"
        );
        assert!(c.oldest.is_some());
    }
}
