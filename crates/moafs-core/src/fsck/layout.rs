//! The layout of an image as fsck measures it: Smith & Seltzer's layout score of the files
//! ([`Layout`]) and the free space as runs ([`FreeRuns`]). Both are filled during a check
//! ([`layout()`](super::layout()) runs one for them).

/// Smith & Seltzer's layout score: of every file's data blocks but its first (files of one
/// block left out), the share that directly follows the file's previous logical block on
/// the device. 1 = every file contiguous.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Layout {
    /// Files of two or more blocks.
    pub files: u64,
    /// Their blocks after the first.
    pub blocks: u64,
    /// Of those, the blocks right after their predecessor.
    pub contiguous: u64,
    /// `contiguous / blocks` (1 when there is nothing to score).
    pub score: f64,
}

impl Layout {
    /// Adds a file given as its mapped (logical index, block) pairs in logical order.
    pub fn add_file(&mut self, map: &[(u64, u64)]) {
        if map.len() < 2 {
            return;
        }
        self.files += 1;
        self.blocks += map.len() as u64 - 1;
        self.contiguous += map
            .windows(2)
            .filter(|w| w[1].0 == w[0].0 + 1 && w[1].1 == w[0].1 + 1)
            .count() as u64;
    }

    pub(super) fn finish(&mut self) {
        self.score = if self.blocks == 0 {
            1.0
        } else {
            self.contiguous as f64 / self.blocks as f64
        };
    }
}

/// Free space as runs of free data blocks: how many runs of each size (power-of-two
/// buckets: `1`, `2-3`, `4-7` …) and the largest.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FreeRuns {
    pub free_blocks: u64,
    pub runs: u64,
    pub largest: u64,
    /// (smallest size of the bucket, runs in it), buckets with runs only.
    pub histogram: Vec<(u64, u64)>,
}

/// Free runs of one group's bitmap (bit set = used), data area `[from, to)`.
pub fn free_runs_in(bitmap: &[u8], from: u64, to: u64, acc: &mut FreeRuns) {
    for (_, len) in crate::format::bitmap::free_extents(bitmap, from, to) {
        acc.free_blocks += len;
        acc.runs += 1;
        acc.largest = acc.largest.max(len);
        let bucket = 1u64 << (63 - len.leading_zeros());
        match acc.histogram.iter_mut().find(|(b, _)| *b == bucket) {
            Some(e) => e.1 += 1,
            None => {
                acc.histogram.push((bucket, 1));
                acc.histogram.sort_unstable();
            }
        }
    }
}
