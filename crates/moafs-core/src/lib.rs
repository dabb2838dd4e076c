//! moafs engine: a small-file-friendly file system, drivable in-process on any device.
//!
//! Layers, top to bottom (data flows down, never back up):
//! `fs` (POSIX operations on inode numbers: namespace, data, block cache, write-back and
//! allocation) → `format` (every on-disk structure; see docs/FORMAT.md) → `device` (image file,
//! memory, model HDD/SSD, fault injection). `mkfs`, `fsck` and `inspect` are tools over the
//! same format code. Nothing here depends on FUSE: the `moafs-fuse` crate adapts.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod crashcheck;
pub mod device;
pub mod error;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod fuzzing;
pub mod mkfs;
pub mod recovery;

pub use error::{FsError, FsResult};
pub use fs::Fs;

/// Parses a size for the command line and options: `1234`, `64K`, `10M`, `2G`, `1T` (also `KiB`/`KB`, any case).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?} (expected e.g. 4096, 64M, 2G)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("invalid size {s:?} (unknown unit {unit:?})")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("8M").unwrap(), 8 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("16KiB").unwrap(), 16 << 10);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
