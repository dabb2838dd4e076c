//! Readahead owned by the engine, per stream (paper 001, `docs/DESIGN.md` §Reads).
//!
//! A [`Stream`] (one per cached inode) watches the reads of a file, in blocks, and answers
//! with the windows of blocks to fetch: the request's own blocks are read anyway, and what a
//! window adds beyond them is the readahead, fetched in the same device requests and kept in
//! the block cache (clean, marked prefetched) until a read uses it or eviction wastes it.
//!
//! Two policies, both over the windows of Linux 2.6.7 (a *current* window the application is
//! reading and a *readahead* window after it, already fetched; the next window's size; the
//! running average of sequential run lengths):
//!
//! * [`ReadaheadPolicy::Linux`] is 2.6.7 as the paper describes it. Every request is taken
//!   block by block, whatever its size. The first access opens a window of half the maximum
//!   (16 of 32 blocks). A block in the current window (or just after it) is a hit: the next
//!   window grows by 2 blocks up to the maximum, and the readahead window after the current
//!   one is fetched if there is none — at once for a stream whose sequential average
//!   reached the maximum, else when the current window's last block is read (2.6.7's lazy
//!   readahead); a block in the readahead window makes it current (the next block read in
//!   it fetches the one after). Anything else is a miss: the run's length is folded into the
//!   average, the next window becomes half of the smaller of it and the average (16 → 8 →
//!   4 → 2 over consecutive random reads), and a current window of that size is fetched at
//!   the block. A large random request thus drags a readahead window (up to the maximum)
//!   past its end that nobody reads.
//! * [`ReadaheadPolicy::SizeAware`] is the paper's proposal. A request of more than one block
//!   that does not continue a stream fetches exactly its blocks, no speculative extra, and
//!   arms the next window at the sequential average: only a request that continues it
//!   fetches the readahead window (`[end, end + average)`, whole, when the request reaches
//!   the previous one), unless it is itself as large as the largest window (our addition,
//!   measured: through FUSE such requests are the kernel's own readahead, and a window
//!   fetched with each made sequential reads 1.5× slower). One-block requests follow the 2.6.7 rules with a first window of
//!   4 blocks (at the file's start; a first read inside the file fetches only its block —
//!   our addition, measured: mmap faults at random pages of many files wasted 13 % of what
//!   they read with 4-block first windows, 3 % without), and a **previous window**: a block that misses the current windows but falls
//!   in the previous stream's swaps the two streams and counts as a hit, so two interleaved
//!   sequential streams (1000, 3001, 1001, 3002 …) keep their windows instead of shrinking
//!   them to nothing. The maximum is `readahead_max_kb` (the paper's 64 pages of 4 KiB).
//!
//! Stream state is per inode: the FUSE adapter serves files without handles (NO_OPEN), and
//! the kernel sends an mmap region's faults as reads of the same inode.

use std::ops::Range;

/// `-o readahead=`: how the engine reads ahead of a file's readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum ReadaheadPolicy {
    /// Read only what is asked.
    Off,
    /// Linux 2.6.7's window algorithm, block by block (the paper's baseline).
    Linux,
    /// Request-size-aware readahead with a previous window (paper 001).
    #[default]
    SizeAware,
}

impl std::str::FromStr for ReadaheadPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(ReadaheadPolicy::Off),
            "linux" => Ok(ReadaheadPolicy::Linux),
            "sizeaware" => Ok(ReadaheadPolicy::SizeAware),
            _ => Err(format!("readahead={s}: expected sizeaware, linux or off")),
        }
    }
}

impl std::fmt::Display for ReadaheadPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadaheadPolicy::Off => "off",
            ReadaheadPolicy::Linux => "linux",
            ReadaheadPolicy::SizeAware => "sizeaware",
        })
    }
}

/// A policy with its window limits, in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readahead {
    pub policy: ReadaheadPolicy,
    /// Largest window.
    pub max: u64,
    /// The first access's window.
    pub init: u64,
}

impl Readahead {
    /// `policy` with windows of at most `max_kb` KiB (`readahead_max_kb`) for blocks of `bs`
    /// bytes. `linux` keeps 2.6.7's proportions: a maximum of half of it (128 KiB, 32 pages,
    /// by default), a first window of half its maximum; `sizeaware` the paper's: the whole
    /// maximum (64 pages), a first window of 4 blocks.
    pub fn new(policy: ReadaheadPolicy, max_kb: u32, bs: u32) -> Readahead {
        let blocks = (max_kb as u64 * 1024 / bs.max(1) as u64).max(1);
        match policy {
            ReadaheadPolicy::Off => Readahead {
                policy,
                max: 0,
                init: 0,
            },
            ReadaheadPolicy::Linux => {
                let max = (blocks / 2).max(1);
                Readahead {
                    policy,
                    max,
                    init: (max / 2).max(1),
                }
            }
            ReadaheadPolicy::SizeAware => Readahead {
                policy,
                max: blocks,
                init: 4.min(blocks),
            },
        }
    }
}

/// Blocks `[start, start + size)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Window {
    start: u64,
    size: u64,
}

impl Window {
    fn at(start: u64, size: u64) -> Window {
        Window { start, size }
    }
    fn end(&self) -> u64 {
        self.start + self.size
    }
    fn contains(&self, b: u64) -> bool {
        (self.start..self.end()).contains(&b)
    }
    fn range(&self) -> Range<u64> {
        self.start..self.end()
    }
}

/// One stream's windows: the one being read and the one fetched after it (size 0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Windows {
    cur: Window,
    ahead: Window,
}

impl Windows {
    /// Whether block `b` continues this stream: in a window, or just after the last one
    /// (the readahead window always starts where the current one ends).
    fn follows(&self, b: u64) -> bool {
        let end = if self.ahead.size > 0 {
            self.ahead.end()
        } else {
            self.cur.end()
        };
        (self.cur.start..=end).contains(&b)
    }
}

/// The readahead state of one file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stream {
    /// Some read came already.
    started: bool,
    w: Windows,
    /// The other stream of an interleaved pair (`sizeaware` only).
    prev: Windows,
    /// Size of the next window.
    next: u64,
    /// Running average of sequential run lengths, and the current run's length.
    average: u64,
    serial: u64,
    /// The last block read (several reads inside one block count once).
    last: Option<u64>,
}

impl Stream {
    /// A read of blocks `first .. first + n` (n ≥ 1) arrives: the windows to fetch (they may
    /// overlap the request, which is read anyway, and each other; the caller skips cached
    /// blocks and clips them to the file).
    pub(crate) fn on_read(&mut self, ra: &Readahead, first: u64, n: u64) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        match ra.policy {
            ReadaheadPolicy::Off => {}
            ReadaheadPolicy::SizeAware if n > 1 => self.large(ra, first, n, &mut out),
            _ => {
                for b in first..first + n.max(1) {
                    self.block(ra, b, &mut out);
                }
            }
        }
        out.retain(|r| !r.is_empty());
        out
    }

    /// The window sizes so far, for tests: (next, average).
    #[cfg(test)]
    fn sizes(&self) -> (u64, u64) {
        (self.next, self.average)
    }

    /// A sequential block: the next window grows by 2, the run by one (it is folded into
    /// the average when it ends).
    fn hit(&mut self, ra: &Readahead) {
        self.next = (self.next + 2).min(ra.max);
        self.serial += 1;
    }

    /// Block `b` misses the current stream but continues the previous one: they swap (the
    /// previous window, `sizeaware`).
    fn swap_if_previous(&mut self, b: u64) {
        if !self.w.follows(b) && self.prev != Windows::default() && self.prev.follows(b) {
            std::mem::swap(&mut self.w, &mut self.prev);
        }
    }

    /// Folds the run so far into the running average (2.6.7: when it exceeds it).
    fn fold_run(&mut self) {
        if self.serial > self.average {
            self.average = (self.serial + self.average).div_ceil(2);
        }
    }

    /// Folds the ended run into the average; the next window is half of the smaller of it
    /// and the current next window.
    fn miss(&mut self) {
        self.fold_run();
        self.next = self.next.min(self.average) / 2;
        self.serial = 1;
    }

    /// One block, 2.6.7's way (with the previous window for `sizeaware`).
    fn block(&mut self, ra: &Readahead, b: u64, out: &mut Vec<Range<u64>>) {
        if self.started && self.last == Some(b) {
            return; // sub-block reads: the same block again
        }
        self.last = Some(b);
        if !self.started {
            self.started = true;
            self.next = ra.init;
            self.average = ra.init;
            self.serial = 1;
            // `sizeaware`: a first read inside the file is taken as random (as today's Linux
            // does): only its block, the window opening if the next read follows it
            let first = if ra.policy == ReadaheadPolicy::SizeAware && b != 0 {
                1
            } else {
                ra.init.max(1)
            };
            self.w = Windows {
                cur: Window::at(b, first),
                ahead: Window::default(),
            };
            out.push(self.w.cur.range());
            return;
        }
        if ra.policy == ReadaheadPolicy::SizeAware {
            self.swap_if_previous(b);
        }
        if self.w.ahead.contains(b) {
            // into the readahead window: it becomes current (2.6.7: the next access in it
            // fetches the next one)
            self.hit(ra);
            self.w.cur = self.w.ahead;
            self.w.ahead = Window::default();
        } else if self.w.cur.contains(b) {
            self.hit(ra);
            // 2.6.7's lazy readahead: the window after the current one is fetched at once
            // only by a stream whose sequential average reached the maximum; others fetch
            // it when they read the current window's last block
            let sequential = self.average.max((self.serial + self.average) / 2) >= ra.max;
            if self.w.ahead.size == 0 && self.next > 0 && (sequential || b + 1 == self.w.cur.end())
            {
                self.w.ahead = Window::at(self.w.cur.end(), self.next);
                out.push(self.w.ahead.range());
            }
        } else if b == self.w.cur.end() || (self.w.ahead.size > 0 && b == self.w.ahead.end()) {
            // ran off the windows with nothing fetched after them
            self.hit(ra);
            self.w.cur = Window::at(b, self.next.max(1));
            out.push(self.w.cur.range());
        } else {
            self.miss();
            if ra.policy == ReadaheadPolicy::SizeAware {
                self.prev = self.w;
            }
            self.w = Windows {
                cur: Window::at(b, self.next.max(1)),
                ahead: Window::default(),
            };
            out.push(self.w.cur.range());
        }
    }

    /// A request of `n` > 1 blocks under `sizeaware`.
    fn large(&mut self, ra: &Readahead, first: u64, n: u64, out: &mut Vec<Range<u64>>) {
        let end = first + n;
        let continues = self.started && {
            self.swap_if_previous(first);
            self.w.follows(first)
        };
        self.last = Some(end - 1);
        if !self.started {
            self.started = true;
            self.average = ra.init;
        }
        if continues {
            // a sequential reader: fetch the next window, at the average, when the request
            // reaches the one fetched before (or there is none)
            self.serial += n;
            self.fold_run();
            self.next = self.average.min(ra.max);
            if n >= ra.max {
                // a request as large as the largest window is its own readahead: fetching a
                // window more with it only delays it (through FUSE these are the kernel's
                // own readahead requests, which it already issues ahead of the reader)
                self.w = Windows {
                    cur: Window::at(first, n),
                    ahead: Window::default(),
                };
            } else if self.w.ahead.size == 0 || end > self.w.ahead.start {
                let from = end.max(self.w.ahead.end());
                // the current window runs up to the new readahead window (the old one's
                // blocks past this request are fetched already)
                self.w.cur = Window::at(first, from - first);
                self.w.ahead = Window::at(from, self.next);
                out.push(self.w.ahead.range());
            }
        } else {
            // exactly the request; the next window is armed at the average, fetched only if
            // the next request continues this one
            self.fold_run();
            self.serial = n;
            self.next = self.average.min(ra.max);
            self.prev = self.w;
            self.w = Windows {
                cur: Window::at(first, n),
                ahead: Window::default(),
            };
        }
        out.push(first..end);
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // windows are lists of ranges
mod tests {
    use super::*;

    fn linux() -> Readahead {
        Readahead::new(ReadaheadPolicy::Linux, 256, 4096)
    }
    fn sizeaware() -> Readahead {
        Readahead::new(ReadaheadPolicy::SizeAware, 256, 4096)
    }

    /// Blocks the windows add beyond `req`.
    fn extra(windows: &[Range<u64>], req: Range<u64>) -> u64 {
        let mut blocks: Vec<u64> = windows.iter().flat_map(|r| r.clone()).collect();
        blocks.sort();
        blocks.dedup();
        blocks.iter().filter(|b| !req.contains(b)).count() as u64
    }

    #[test]
    fn limits_follow_the_paper() {
        assert_eq!((linux().max, linux().init), (32, 16)); // 2.6.7: 128 KiB, first 16 pages
        assert_eq!((sizeaware().max, sizeaware().init), (64, 4)); // paper: 64 pages, first 4
        let ra = Readahead::new(ReadaheadPolicy::Off, 256, 4096);
        let mut s = Stream::default();
        assert!(s.on_read(&ra, 7, 64).is_empty());
    }

    #[test]
    fn linux_random_reads_halve_the_window() {
        // The paper: "from the first access, four random accesses in a row: 16 -> 8 -> 4 -> 2".
        let ra = linux();
        let mut s = Stream::default();
        let mut sizes = Vec::new();
        for b in [1000, 5000, 9000, 13000] {
            let w = s.on_read(&ra, b, 1);
            assert_eq!(w.len(), 1);
            assert_eq!(w[0].start, b);
            sizes.push(w[0].end - w[0].start);
        }
        assert_eq!(sizes, [16, 8, 4, 2]);
    }

    #[test]
    fn linux_sequential_hits_grow_the_window_to_the_maximum() {
        let ra = linux();
        let mut s = Stream::default();
        assert_eq!(s.on_read(&ra, 0, 1), [0..16]);
        // hits grow the next window by 2 (to the maximum, 32); lazy readahead: nothing more
        // is fetched until the current window's last block is read
        for b in 1..15 {
            assert!(s.on_read(&ra, b, 1).is_empty(), "block {b}");
        }
        assert_eq!(s.on_read(&ra, 15, 1), [16..48]);
        assert_eq!(s.sizes().0, 32);
        // block 16 enters the readahead window: it becomes current; the average has not
        // reached the maximum yet, so the next is fetched at its last block
        assert!(s.on_read(&ra, 16, 1).is_empty());
        for b in 17..47 {
            assert!(s.on_read(&ra, b, 1).is_empty(), "block {b}");
        }
        assert_eq!(s.on_read(&ra, 47, 1), [48..80]);
        // the average reached the maximum: a stream restarted elsewhere reads ahead at once
        for b in 17..200 {
            s.on_read(&ra, b, 1);
        }
        s.on_read(&ra, 5000, 1);
        assert!(!s.on_read(&ra, 5001, 1).is_empty());
    }

    #[test]
    fn linux_large_random_read_drags_a_window_past_its_end() {
        // 2.6.7 ignores the request size: a random 256 KiB read fetches up to 32 pages
        // nobody asked for (the paper's "useless pages").
        let ra = linux();
        let mut s = Stream::default();
        s.on_read(&ra, 0, 1);
        for k in 1..=4 {
            let first = k * 10_000;
            let w = s.on_read(&ra, first, 64);
            let x = extra(&w, first..first + 64);
            eprintln!("request {k}: {x} extra blocks");
            // the current window's rest and a readahead window: at most two maxima
            assert!((8..=64).contains(&x), "request {k}: {x} extra blocks");
        }
    }

    #[test]
    fn sizeaware_large_random_reads_fetch_exactly_the_request() {
        let ra = sizeaware();
        let mut s = Stream::default();
        for (k, n) in [(1u64, 4u64), (2, 64), (3, 256), (4, 16), (5, 32)] {
            let first = k * 100_000 + 3;
            let w = s.on_read(&ra, first, n);
            assert_eq!(w, [first..first + n], "request {k}");
        }
    }

    #[test]
    fn sizeaware_sequential_large_reads_read_ahead_at_the_average() {
        let ra = sizeaware();
        let mut s = Stream::default();
        assert_eq!(s.on_read(&ra, 0, 16), [0..16]); // no speculation on the first request
                                                    // the second continues it: the window after it is fetched, at the average
                                                    // ((16 + 16 + 1) / 2 = 16 → serial 32 > 4 … average (32 + 4 + 1) / 2 = 18)
        let w = s.on_read(&ra, 16, 16);
        assert_eq!(w, [32..50, 16..32]);
        // the third reaches that window: the next is fetched after it, growing
        let w = s.on_read(&ra, 32, 16);
        assert_eq!(w[0].start, 50);
        assert!(w[0].end - w[0].start > 18);
        // windows never exceed the maximum
        let mut first = 48;
        for _ in 0..40 {
            let w = s.on_read(&ra, first, 16);
            for r in &w {
                assert!(r.end - r.start <= 64);
            }
            first += 16;
        }
        assert_eq!(s.sizes().0, 64);
    }

    #[test]
    fn sizeaware_requests_of_the_largest_window_are_their_own_readahead() {
        let ra = sizeaware();
        let mut s = Stream::default();
        for k in 0..8 {
            assert_eq!(
                s.on_read(&ra, k * 64, 64),
                [k * 64..k * 64 + 64],
                "request {k}"
            );
        }
        // a smaller request that continues them reads ahead again
        let w = s.on_read(&ra, 512, 16);
        assert!(w.iter().any(|r| r.start >= 528), "{w:?}");
    }

    #[test]
    fn sizeaware_first_window_is_four_blocks_and_shrinks_on_random_reads() {
        let ra = sizeaware();
        let sizes = |blocks: &[u64]| -> Vec<u64> {
            let mut s = Stream::default();
            blocks
                .iter()
                .map(|&b| {
                    let w = s.on_read(&ra, b, 1);
                    w[0].end - w[0].start
                })
                .collect()
        };
        // the paper's first window of 4 at the file's start, then halved by random reads
        assert_eq!(sizes(&[0, 5000, 9000, 13000]), [4, 2, 1, 1]);
        // a first read inside the file reads its block only
        assert_eq!(sizes(&[1000, 5000, 9000, 13000]), [1, 2, 1, 1]);
        // ... and a stream that follows it grows its window
        let mut s = Stream::default();
        s.on_read(&ra, 1000, 1);
        assert_eq!(s.on_read(&ra, 1001, 1), [1001..1007]);
    }

    /// The paper's interleaved pattern: 1000, 3001, 1001, 3002, … through one descriptor.
    /// Returns the blocks fetched and the device reads (windows) it took.
    fn interleaved(ra: &Readahead, pairs: u64) -> (u64, u64) {
        let mut s = Stream::default();
        let mut fetched = std::collections::BTreeSet::new();
        let mut reads = 0;
        for i in 0..pairs {
            for b in [1000 + i, 3001 + i] {
                for r in s.on_read(ra, b, 1) {
                    let new: Vec<u64> = r.filter(|x| !fetched.contains(x)).collect();
                    reads += !new.is_empty() as u64;
                    fetched.extend(new);
                }
                assert!(fetched.contains(&b));
            }
        }
        (fetched.len() as u64, reads)
    }

    #[test]
    fn previous_window_keeps_interleaved_streams_reading_ahead() {
        let (l_blocks, l_reads) = interleaved(&linux(), 1000);
        let (s_blocks, s_reads) = interleaved(&sizeaware(), 1000);
        // 2.6.7 shrinks the window on every alternation: about one device read per block.
        assert!(l_reads > 1500, "linux: {l_reads} reads");
        // The previous window keeps both streams' windows: reads of up to 64 blocks.
        assert!(s_reads < 100, "sizeaware: {s_reads} reads");
        eprintln!("linux {l_blocks} blocks {l_reads} reads; sizeaware {s_blocks} / {s_reads}");
        // Neither fetches more beyond the 2,000 blocks read than two windows per stream.
        assert!(l_blocks <= 2000 + 2 * 32 && s_blocks <= 2000 + 4 * 64);
    }
}
