//! Flash model: a device with a flash translation layer and garbage collection, for paper
//! 003's experiment (F2FS on a micro-SD card at 75 % utilisation): what the flash programs
//! and erases, not only what the file system sent.
//!
//! Design notes:
//!
//! * Page-mapped FTL over `pages_per_block`-page erase blocks, with `overprovision` spare
//!   physical space. Every write programs whole pages at the head of the active block (the
//!   old copies become invalid); a write smaller than a page reads the old page and programs
//!   a whole one (read-modify-write: a 512-byte write costs a page program). When fewer than
//!   `gc_free_blocks` blocks are free, greedy garbage collection copies the valid pages of the
//!   block with the fewest to the head and erases it. No TRIM (moafs does not discard).
//! * The data itself passes through to the wrapped device at its logical offset; the FTL is
//!   bookkeeping (mapping, valid counts) and time: page reads and programs, block erases and
//!   bus transfer are charged in [`DeviceCounters::modelled_ns`]; nothing is slept.
//! * A single queue, no write cache: `flush` costs nothing (every program was charged).

use super::{iov_len, BlockDevice, DevResult, DeviceCounters, DeviceStats};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A flash card's geometry and timing.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlashModel {
    pub page_bytes: u64,
    pub pages_per_block: u64,
    /// Spare physical space, as a share of the logical size.
    pub overprovision: f64,
    pub read_us: f64,
    pub program_us: f64,
    pub erase_us: f64,
    /// Bus transfer, MB/s (10^6 bytes per second).
    pub bus_mb_s: f64,
    /// Garbage collection runs while fewer blocks than this are free.
    pub gc_free_blocks: u64,
}

impl Default for FlashModel {
    /// A micro-SD-class card: 4 KiB pages, 256 KiB erase blocks, 7 % spare, 100 µs page
    /// reads, 600 µs programs, 3 ms erases, 25 MB/s bus.
    fn default() -> Self {
        FlashModel {
            page_bytes: 4096,
            pages_per_block: 64,
            overprovision: 0.07,
            read_us: 100.0,
            program_us: 600.0,
            erase_us: 3000.0,
            bus_mb_s: 25.0,
            gc_free_blocks: 4,
        }
    }
}

/// What the flash did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlashCounters {
    /// Pages programmed for the host's writes (whole pages, sub-page writes included).
    pub host_programs: u64,
    /// Old pages read to complete sub-page writes.
    pub rmw_reads: u64,
    /// Pages garbage collection copied, and blocks it erased.
    pub gc_copies: u64,
    pub erases: u64,
    pub modelled_ns: u64,
}

impl FlashCounters {
    pub fn since(&self, e: &FlashCounters) -> FlashCounters {
        FlashCounters {
            host_programs: self.host_programs - e.host_programs,
            rmw_reads: self.rmw_reads - e.rmw_reads,
            gc_copies: self.gc_copies - e.gc_copies,
            erases: self.erases - e.erases,
            modelled_ns: self.modelled_ns - e.modelled_ns,
        }
    }
}

const NONE: u32 = u32::MAX;

struct Ftl {
    /// Logical page → physical page (NONE: never written).
    l2p: Vec<u32>,
    /// Physical page → logical page (NONE: free or invalid).
    p2l: Vec<u32>,
    /// Valid pages per block.
    valid: Vec<u32>,
    free: VecDeque<u32>,
    active: u32,
    next: u64,
    c: FlashCounters,
}

/// A device charged as a flash card with an FTL (module comment).
pub struct FlashDevice {
    inner: Arc<dyn BlockDevice>,
    model: FlashModel,
    ftl: Mutex<Ftl>,
    stats: DeviceStats,
}

impl FlashDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, model: FlashModel) -> FlashDevice {
        let pages = inner.size() / model.page_bytes;
        let blocks = ((pages as f64 * (1.0 + model.overprovision)) as u64)
            .div_ceil(model.pages_per_block)
            .max(model.gc_free_blocks + 2);
        let mut free: VecDeque<u32> = (0..blocks as u32).collect();
        let active = free.pop_front().expect("at least two blocks");
        FlashDevice {
            inner,
            model,
            ftl: Mutex::new(Ftl {
                l2p: vec![NONE; pages as usize],
                p2l: vec![NONE; (blocks * model.pages_per_block) as usize],
                valid: vec![0; blocks as usize],
                free,
                active,
                next: 0,
                c: FlashCounters::default(),
            }),
            stats: DeviceStats::default(),
        }
    }

    /// A device over `inner` (a copy of this one's data) whose flash is in this one's state
    /// (mapping, valid pages, free blocks), with counters at zero: experiments start each run
    /// from one aged state.
    pub fn fork(&self, inner: Arc<dyn BlockDevice>) -> FlashDevice {
        let f = self.ftl.lock().unwrap_or_else(|e| e.into_inner());
        FlashDevice {
            inner,
            model: self.model,
            ftl: Mutex::new(Ftl {
                l2p: f.l2p.clone(),
                p2l: f.p2l.clone(),
                valid: f.valid.clone(),
                free: f.free.clone(),
                active: f.active,
                next: f.next,
                c: FlashCounters::default(),
            }),
            stats: DeviceStats::default(),
        }
    }

    pub fn flash_counters(&self) -> FlashCounters {
        self.ftl.lock().unwrap_or_else(|e| e.into_inner()).c
    }

    fn charge_us(f: &mut Ftl, us: f64) {
        f.c.modelled_ns += (us * 1000.0) as u64;
    }

    fn transfer_us(&self, bytes: u64) -> f64 {
        bytes as f64 / self.model.bus_mb_s
    }

    /// The next free physical page at the head (garbage collecting first when short).
    fn head(&self, f: &mut Ftl) -> u64 {
        if f.next == self.model.pages_per_block {
            while (f.free.len() as u64) < self.model.gc_free_blocks {
                if !self.collect(f) {
                    break;
                }
            }
            f.active = f.free.pop_front().expect("flash full: no free block");
            f.next = 0;
        }
        let p = f.active as u64 * self.model.pages_per_block + f.next;
        f.next += 1;
        p
    }

    /// Programs logical page `lp` at the head.
    fn program(&self, f: &mut Ftl, lp: u64) {
        let old = f.l2p[lp as usize];
        if old != NONE {
            f.p2l[old as usize] = NONE;
            f.valid[(old as u64 / self.model.pages_per_block) as usize] -= 1;
        }
        let p = self.head(f);
        f.l2p[lp as usize] = p as u32;
        f.p2l[p as usize] = lp as u32;
        f.valid[(p / self.model.pages_per_block) as usize] += 1;
        let us = self.model.program_us;
        Self::charge_us(f, us);
    }

    /// One greedy collection: the full block with the fewest valid pages is copied and
    /// erased. False when none would free anything.
    fn collect(&self, f: &mut Ftl) -> bool {
        let ppb = self.model.pages_per_block;
        let free: std::collections::HashSet<u32> = f.free.iter().copied().collect();
        let victim = (0..f.valid.len() as u32)
            .filter(|b| *b != f.active && !free.contains(b))
            .min_by_key(|b| f.valid[*b as usize]);
        let Some(v) = victim else {
            return false;
        };
        if f.valid[v as usize] as u64 >= ppb {
            return false;
        }
        for k in 0..ppb {
            let pp = v as u64 * ppb + k;
            let lp = f.p2l[pp as usize];
            if lp == NONE {
                continue;
            }
            // copy: read the page, program it at the head (which may be a new block)
            let us = self.model.read_us;
            Self::charge_us(f, us);
            f.c.gc_copies += 1;
            if f.next == ppb {
                f.active = f.free.pop_front().expect("flash full during collection");
                f.next = 0;
            }
            let np = f.active as u64 * ppb + f.next;
            f.next += 1;
            f.p2l[pp as usize] = NONE;
            f.p2l[np as usize] = lp;
            f.l2p[lp as usize] = np as u32;
            f.valid[v as usize] -= 1;
            f.valid[(np / ppb) as usize] += 1;
            let us = self.model.program_us;
            Self::charge_us(f, us);
        }
        f.c.erases += 1;
        let us = self.model.erase_us;
        Self::charge_us(f, us);
        f.free.push_back(v);
        true
    }

    /// Charges a write of `len` bytes at `offset`: whole pages programmed, partial ones
    /// read first when they hold data.
    fn charge_write(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let pb = self.model.page_bytes;
        let mut f = self.ftl.lock().unwrap_or_else(|e| e.into_inner());
        let (first, last) = (offset / pb, (offset + len - 1) / pb);
        for lp in first..=last {
            let whole = offset <= lp * pb && (lp + 1) * pb <= offset + len;
            if !whole && f.l2p[lp as usize] != NONE {
                f.c.rmw_reads += 1;
                let us = self.model.read_us;
                Self::charge_us(&mut f, us);
            }
            f.c.host_programs += 1;
            self.program(&mut f, lp);
        }
        let us = self.transfer_us(len);
        Self::charge_us(&mut f, us);
    }
}

impl BlockDevice for FlashDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        if !buf.is_empty() {
            let pb = self.model.page_bytes;
            let pages = (offset + buf.len() as u64 - 1) / pb - offset / pb + 1;
            let mut f = self.ftl.lock().unwrap_or_else(|e| e.into_inner());
            let us = pages as f64 * self.model.read_us + self.transfer_us(buf.len() as u64);
            Self::charge_us(&mut f, us);
        }
        self.stats.count_read(buf.len() as u64);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.charge_write(offset, buf.len() as u64);
        self.stats.count_write(buf.len() as u64);
        self.inner.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        let len = iov_len(bufs);
        self.charge_write(offset, len);
        self.stats.count_write(len);
        self.inner.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        self.stats.count_flush();
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.stats.count_discard();
        self.inner.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        let mut c = self.stats.snapshot();
        c.modelled_ns = self.flash_counters().modelled_ns;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    fn small() -> FlashDevice {
        let model = FlashModel {
            pages_per_block: 4,
            gc_free_blocks: 2,
            ..FlashModel::default()
        };
        FlashDevice::new(Arc::new(MemDevice::new(64 * 4096)), model)
    }

    #[test]
    fn sub_page_writes_program_whole_pages_and_read_the_old_one() {
        let d = small();
        d.write_at(0, &[1; 4096]).unwrap();
        d.write_at(100, &[2; 512]).unwrap();
        let c = d.flash_counters();
        assert_eq!((c.host_programs, c.rmw_reads), (2, 1));
        let mut b = [0u8; 4096];
        d.read_at(0, &mut b).unwrap();
        assert_eq!((b[99], b[100], b[611], b[612]), (1, 2, 2, 1));
    }

    #[test]
    fn overwrites_past_the_spare_space_collect_and_erase() {
        let d = small();
        // fill the logical space, then overwrite a quarter of it again and again
        for p in 0..64u64 {
            d.write_at(p * 4096, &[p as u8; 4096]).unwrap();
        }
        for round in 0..20u64 {
            for p in 0..16u64 {
                d.write_at(p * 4096, &[round as u8; 4096]).unwrap();
            }
        }
        let c = d.flash_counters();
        assert!(c.erases > 0, "{c:?}");
        assert_eq!(c.host_programs, 64 + 20 * 16);
        // the data is intact
        let mut b = [0u8; 4096];
        d.read_at(40 * 4096, &mut b).unwrap();
        assert_eq!(b[0], 40);
        d.read_at(3 * 4096, &mut b).unwrap();
        assert_eq!(b[0], 19);
    }
}
