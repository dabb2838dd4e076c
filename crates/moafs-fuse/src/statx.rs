//! FUSE_STATX's reply (`struct fuse_statx_out`, 288 bytes): what the kernel asks when a
//! statx(2) caller wants the birth time (`STATX_BTIME`), which GETATTR's `fuse_attr` cannot
//! carry. moafs keeps it in the inode (`crtime`, docs/FORMAT.md §4).

use moafs_core::fs::{Attr, Timespec};
use std::time::Duration;

/// `STATX_BASIC_STATS`.
const STATX_BASIC_STATS: u32 = 0x7ff;
/// `STATX_BTIME`.
const STATX_BTIME: u32 = 0x800;
/// Bytes of `struct fuse_statx_out`.
pub(crate) const STATX_OUT_BYTES: usize = 32 + 256;

/// `STATX_ATTR_IMMUTABLE | STATX_ATTR_APPEND | STATX_ATTR_NODUMP`: the same bits as the
/// inode flags `FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL`.
const STATX_ATTRS: u64 = 0x10 | 0x20 | 0x40;

/// The reply for `a` with inode flags `flags`, valid for `ttl`: every basic field, the birth
/// time, and the immutable, append-only and no-dump attributes.
pub(crate) fn statx_reply(a: &Attr, flags: u32, ttl: Duration) -> Vec<u8> {
    let mut out = Vec::with_capacity(STATX_OUT_BYTES);
    // fuse_statx_out: attr_valid, attr_valid_nsec, flags, spare[2]
    out.extend_from_slice(&ttl.as_secs().to_ne_bytes());
    out.extend_from_slice(&ttl.subsec_nanos().to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[0u8; 16]);
    // fuse_statx
    out.extend_from_slice(&(STATX_BASIC_STATS | STATX_BTIME).to_ne_bytes());
    out.extend_from_slice(&a.blksize.to_ne_bytes());
    out.extend_from_slice(&(u64::from(flags) & STATX_ATTRS).to_ne_bytes());
    out.extend_from_slice(&a.nlink.to_ne_bytes());
    out.extend_from_slice(&a.uid.to_ne_bytes());
    out.extend_from_slice(&a.gid.to_ne_bytes());
    let mode = a.kind.mode_bits() | u32::from(a.perm);
    out.extend_from_slice(&(mode as u16).to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&a.ino.to_ne_bytes());
    out.extend_from_slice(&a.size.to_ne_bytes());
    out.extend_from_slice(&a.blocks_512.to_ne_bytes());
    out.extend_from_slice(&STATX_ATTRS.to_ne_bytes()); // attributes_mask
    for t in [a.atime, a.crtime, a.ctime, a.mtime] {
        sx_time(&mut out, t);
    }
    // the kernel's new_encode_dev in a u32: major 12 bits, minor 20 bits
    let (major, minor) = (
        (a.rdev & 0xfff00) >> 8,
        (a.rdev & 0xff) | ((a.rdev >> 12) & 0xfff00),
    );
    for v in [major, minor, 0, 0] {
        out.extend_from_slice(&v.to_ne_bytes());
    }
    out.resize(STATX_OUT_BYTES, 0); // __spare2
    out
}

/// `struct fuse_sx_time`: seconds, nanoseconds, reserved.
fn sx_time(out: &mut Vec<u8>, t: Timespec) {
    out.extend_from_slice(&t.sec.to_ne_bytes());
    out.extend_from_slice(&t.nsec.to_ne_bytes());
    out.extend_from_slice(&0i32.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use moafs_core::fs::FileKind;

    #[test]
    fn the_reply_has_the_kernels_layout() {
        let a = Attr {
            ino: 42,
            size: 5,
            blocks_512: 8,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec { sec: 3, nsec: 4 },
            ctime: Timespec { sec: 5, nsec: 6 },
            crtime: Timespec { sec: 7, nsec: 8 },
            kind: FileKind::CharDevice,
            perm: 0o640,
            nlink: 1,
            uid: 10,
            gid: 20,
            rdev: (4 << 8) | 64,
            blksize: 4096,
            generation: 1,
        };
        let b = statx_reply(&a, 0x10 | 0x80, Duration::from_secs(60));
        assert_eq!(b.len(), STATX_OUT_BYTES);
        let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().unwrap());
        assert_eq!(u64_at(0), 60);
        let s = 32; // struct fuse_statx
        assert_eq!(u32_at(s), 0xfff);
        assert_eq!(
            u64_at(s + 8),
            0x10,
            "immutable; no-atime has no statx attribute"
        );
        assert_eq!(u64_at(s + 56), 0x70);
        assert_eq!(u32_at(s + 4), 4096);
        assert_eq!(u32_at(s + 16), 1);
        assert_eq!(u32_at(s + 20), 10);
        assert_eq!(u32_at(s + 24), 20);
        assert_eq!(u32_at(s + 28) & 0xffff, libc::S_IFCHR | 0o640);
        assert_eq!(u64_at(s + 32), 42);
        assert_eq!(u64_at(s + 40), 5);
        assert_eq!(u64_at(s + 48), 8);
        // atime, btime, ctime, mtime at 64, 80, 96, 112
        assert_eq!((u64_at(s + 64), u32_at(s + 72)), (1, 2));
        assert_eq!((u64_at(s + 80), u32_at(s + 88)), (7, 8));
        assert_eq!((u64_at(s + 96), u32_at(s + 104)), (5, 6));
        assert_eq!((u64_at(s + 112), u32_at(s + 120)), (3, 4));
        assert_eq!((u32_at(s + 128), u32_at(s + 132)), (4, 64));
    }
}
