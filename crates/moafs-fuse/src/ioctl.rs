//! The ioctls moafs answers (FUSE passes a file system's ioctls to its daemon "restricted":
//! the kernel copies in and out as many bytes as the command's number says, in the
//! directions it says).
//!
//! * `FS_IOC_SHUTDOWN` (= `XFS_IOC_GOINGDOWN`, `_IOR('X', 125, u32)`): shuts the file system
//!   down (`moafs_core::fs::ShutdownFlush`). Its number says the kernel *reads* a u32 back,
//!   so FUSE copies nothing in: the flags are read from the caller's memory at the pointer it
//!   passed (`process_vm_readv`, which a root daemon may do). Root only, as ext4 and XFS
//!   require CAP_SYS_ADMIN (FUSE passes no capabilities: uid 0 stands for it).
//!
//! * `FITRIM` (`_IOWR('X', 121, struct fstrim_range)`, what `fstrim` sends): discards the
//!   free blocks of a byte range (`Fs::trim`); the kernel copies the 24-byte range in and
//!   back out, its `len` then the bytes discarded. Root only (CAP_SYS_ADMIN in ext4).
//!
//! * `FS_IOC_GETFSLABEL` / `FS_IOC_SETFSLABEL` (`_IOR`/`_IOW(0x94, 49/50, char[256])`, what
//!   `xfs_io -c label` sends): the label (`Fs::label`), NUL-terminated in 256 bytes; setting
//!   it is root only (CAP_SYS_ADMIN), at most 32 bytes (EINVAL beyond).
//!
//! * `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` (what `lsattr`/`chattr` send; the kernel passes a
//!   u32 of `FS_*_FL` bits) and `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR` (`xfs_io -c
//!   chattr`: a 28-byte `struct fsxattr` whose `fsx_xflags` hold `FS_XFLAG_*` bits): the
//!   inode's flags (`moafs_core::fs::iflags`). The kernel checks who may change them (owner;
//!   `i` and `a` need CAP_LINUX_IMMUTABLE) before it sends the request. A flag moafs does not
//!   honour, or an extent size or project id, is EOPNOTSUPP.
//!
//! * `MOAFS_IOC_WRITABLE` (moafs's own, `_IO('m', 1)`, no argument): makes the engine of a
//!   read-only mount writable (`Fs::make_writable`). The mount helper sends it to the mount's
//!   root before it asks the kernel for `remount,rw`, so that the first write after the
//!   remount finds a writable engine. Root only.
//!
//! Any other command: ENOTTY, as a file system without it answers.

use moafs_core::fs::{iflags, ShutdownFlush};
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSliceMut;

/// `FS_IOC_SHUTDOWN` / `XFS_IOC_GOINGDOWN`.
pub(crate) const SHUTDOWN: u32 = 0x8004_587d;

/// `FITRIM`.
pub(crate) const FITRIM: u32 = 0xc018_5879;

/// `FS_IOC_GETFSLABEL`.
pub(crate) const GETFSLABEL: u32 = 0x8100_9431;
/// `FS_IOC_SETFSLABEL`.
pub(crate) const SETFSLABEL: u32 = 0x4100_9432;
/// `FSLABEL_MAX`: the bytes both label ioctls carry.
pub(crate) const FSLABEL_MAX: usize = 256;

/// `FS_IOC_GETFLAGS`.
pub(crate) const GETFLAGS: u32 = 0x8008_6601;
/// `FS_IOC_SETFLAGS`.
pub(crate) const SETFLAGS: u32 = 0x4008_6602;
/// `FS_IOC_FSGETXATTR`.
pub(crate) const FSGETXATTR: u32 = 0x801c_581f;
/// `FS_IOC_FSSETXATTR`.
pub(crate) const FSSETXATTR: u32 = 0x401c_5820;
/// `MOAFS_IOC_WRITABLE` (`_IO('m', 1)`): moafs's own (module comment).
pub const WRITABLE: u32 = 0x6d01;

/// Bytes of `struct fsxattr`.
const FSXATTR_BYTES: usize = 28;

/// `FS_XFLAG_*` bit and the `FS_*_FL` bit it stands for (the flags moafs keeps).
const XFLAGS: [(u32, u32); 4] = [
    (0x08, iflags::FL_IMMUTABLE),
    (0x10, iflags::FL_APPEND),
    (0x40, iflags::FL_NOATIME),
    (0x80, iflags::FL_NODUMP),
];

/// A command moafs answers, decoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ioctl {
    /// Shut down with these flags (`None`: unknown flags, EINVAL); `word`: the caller's flag
    /// word, copied back to it unchanged.
    Shutdown {
        flush: Option<ShutdownFlush>,
        word: [u8; 4],
    },
    /// Discard the free blocks of bytes `[start, start + len)` in free runs of at least
    /// `min_len` bytes.
    Trim { start: u64, len: u64, min_len: u64 },
    /// The label, asked.
    GetLabel,
    /// The label to set (the bytes before the first NUL).
    SetLabel(Vec<u8>),
    /// The inode's flags, asked as `FS_*_FL` bits or (`xattr`) as a `struct fsxattr`.
    GetFlags { xattr: bool },
    /// The inode's flags to set, as `FS_*_FL` bits (an `fsx_xflags` bit moafs does not keep
    /// is an error of `decode`).
    SetFlags(u32),
    /// Make a read-only mount's engine writable (before `remount,rw`).
    Writable,
    /// A command moafs does not have.
    Unknown,
}

/// Whether `cmd` is for root only (ext4 and XFS require CAP_SYS_ADMIN; FUSE passes no
/// capabilities, uid 0 stands for it).
pub(crate) fn needs_root(cmd: u32) -> bool {
    matches!(cmd, SHUTDOWN | FITRIM | SETFSLABEL | WRITABLE)
}

/// Decodes `cmd` from caller `pid` whose argument is `arg` (`in_data`: what the kernel
/// copied in). An argument that cannot be read is an error (EFAULT).
pub(crate) fn decode(cmd: u32, pid: u32, arg: u64, in_data: &[u8]) -> Result<Ioctl, i32> {
    match cmd {
        SHUTDOWN => {
            let word = read_caller(pid, arg)?;
            Ok(Ioctl::Shutdown {
                flush: ShutdownFlush::from_flags(u32::from_ne_bytes(word)),
                word,
            })
        }
        FITRIM => {
            let word = |i: usize| {
                in_data
                    .get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
                    .ok_or(libc::EFAULT)
            };
            Ok(Ioctl::Trim {
                start: word(0)?,
                len: word(1)?,
                min_len: word(2)?,
            })
        }
        GETFSLABEL => Ok(Ioctl::GetLabel),
        SETFSLABEL => {
            if in_data.len() < FSLABEL_MAX {
                return Err(libc::EFAULT);
            }
            // a label fills the buffer without its NUL: longer than any file system's
            let n = in_data[..FSLABEL_MAX]
                .iter()
                .position(|&b| b == 0)
                .ok_or(libc::EINVAL)?;
            Ok(Ioctl::SetLabel(in_data[..n].to_vec()))
        }
        GETFLAGS => Ok(Ioctl::GetFlags { xattr: false }),
        FSGETXATTR => Ok(Ioctl::GetFlags { xattr: true }),
        SETFLAGS => {
            let b: [u8; 4] = in_data
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or(libc::EFAULT)?;
            Ok(Ioctl::SetFlags(u32::from_ne_bytes(b)))
        }
        FSSETXATTR => {
            if in_data.len() < FSXATTR_BYTES {
                return Err(libc::EFAULT);
            }
            let word = |i: usize| u32::from_ne_bytes(in_data[i * 4..i * 4 + 4].try_into().unwrap());
            // fsx_extsize, fsx_projid, fsx_cowextsize: moafs has none of them
            if word(1) != 0 || word(3) != 0 || word(4) != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            let mut xflags = word(0);
            let mut flags = 0;
            for (x, f) in XFLAGS {
                if xflags & x != 0 {
                    flags |= f;
                    xflags &= !x;
                }
            }
            if xflags != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            Ok(Ioctl::SetFlags(flags))
        }
        WRITABLE => Ok(Ioctl::Writable),
        _ => Ok(Ioctl::Unknown),
    }
}

/// What GETFLAGS (four bytes) or FSGETXATTR (a `struct fsxattr`) hands back for `flags`.
pub(crate) fn flags_reply(flags: u32, xattr: bool) -> Vec<u8> {
    if !xattr {
        return flags.to_ne_bytes().to_vec();
    }
    let xflags = XFLAGS
        .iter()
        .filter(|(_, f)| flags & f != 0)
        .fold(0u32, |acc, (x, _)| acc | x);
    let mut out = vec![0u8; FSXATTR_BYTES];
    out[..4].copy_from_slice(&xflags.to_ne_bytes());
    out
}

/// Answers with `out`, cut to the `out_size` bytes the kernel copies back to the caller.
pub(crate) fn reply_out(reply: fuser::ReplyIoctl, out: &[u8], out_size: u32) {
    reply.ioctl(0, &out[..(out_size as usize).min(out.len())]);
}

/// What GETFSLABEL hands back: the label, NUL-padded to [`FSLABEL_MAX`] bytes.
pub(crate) fn label_reply(label: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; FSLABEL_MAX];
    let n = label.len().min(FSLABEL_MAX - 1);
    out[..n].copy_from_slice(&label[..n]);
    out
}

/// The `struct fstrim_range` FITRIM hands back: `len` now the bytes discarded.
pub(crate) fn trim_reply(start: u64, trimmed: u64, min_len: u64) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..8].copy_from_slice(&start.to_ne_bytes());
    out[8..16].copy_from_slice(&trimmed.to_ne_bytes());
    out[16..].copy_from_slice(&min_len.to_ne_bytes());
    out
}

/// Four bytes at `addr` in the memory of process (thread) `pid`.
fn read_caller(pid: u32, addr: u64) -> Result<[u8; 4], i32> {
    let mut word = [0u8; 4];
    let pid = i32::try_from(pid).map_err(|_| libc::EFAULT)?;
    let remote = [RemoteIoVec {
        base: usize::try_from(addr).map_err(|_| libc::EFAULT)?,
        len: word.len(),
    }];
    let n = process_vm_readv(
        Pid::from_raw(pid),
        &mut [IoSliceMut::new(&mut word)],
        &remote,
    )
    .map_err(|e| {
        log::warn!("ioctl: cannot read the argument of process {pid}: {e}");
        libc::EFAULT
    })?;
    if n != word.len() {
        return Err(libc::EFAULT);
    }
    Ok(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutdown_flags_are_read_from_the_callers_memory() {
        for (flags, want) in [
            (0u32, Some(ShutdownFlush::All)),
            (1, Some(ShutdownFlush::Log)),
            (2, Some(ShutdownFlush::Nothing)),
            (7, None),
        ] {
            let word = flags.to_ne_bytes();
            let got = decode(SHUTDOWN, std::process::id(), word.as_ptr() as u64, &[]).unwrap();
            assert_eq!(got, Ioctl::Shutdown { flush: want, word });
        }
        assert_eq!(
            decode(0x1234, std::process::id(), 0, &[]).unwrap(),
            Ioctl::Unknown
        );
        assert_eq!(
            decode(SHUTDOWN, std::process::id(), 8, &[]),
            Err(libc::EFAULT)
        );
    }

    #[test]
    fn trim_range_is_read_from_the_copied_argument() {
        let range = trim_reply(4096, u64::MAX, 65536);
        assert_eq!(
            decode(FITRIM, 0, 0, &range),
            Ok(Ioctl::Trim {
                start: 4096,
                len: u64::MAX,
                min_len: 65536
            })
        );
        assert_eq!(decode(FITRIM, 0, 0, &range[..16]), Err(libc::EFAULT));
    }

    #[test]
    fn writable_is_moafs_own_argumentless_and_root_only() {
        // _IO('m', 1): no direction, no size, so the kernel copies nothing either way
        assert_eq!(WRITABLE, (b'm' as u32) << 8 | 1);
        assert_eq!(decode(WRITABLE, 0, 0, &[]), Ok(Ioctl::Writable));
        assert!(needs_root(WRITABLE) && !needs_root(GETFSLABEL));
    }

    #[test]
    fn label_ioctls_carry_a_nul_terminated_label() {
        assert_eq!(decode(GETFSLABEL, 0, 0, &[]), Ok(Ioctl::GetLabel));
        let mut buf = label_reply(b"data");
        assert_eq!(buf.len(), FSLABEL_MAX);
        assert_eq!(
            decode(SETFSLABEL, 0, 0, &buf),
            Ok(Ioctl::SetLabel(b"data".to_vec()))
        );
        buf.fill(b'l'); // 256 bytes without a NUL
        assert_eq!(decode(SETFSLABEL, 0, 0, &buf), Err(libc::EINVAL));
        assert_eq!(decode(SETFSLABEL, 0, 0, &buf[..10]), Err(libc::EFAULT));
    }

    #[test]
    fn flags_travel_as_fs_fl_bits_or_as_fsxattr() {
        let ia = iflags::FL_IMMUTABLE | iflags::FL_APPEND;
        assert_eq!(
            decode(SETFLAGS, 0, 0, &ia.to_ne_bytes()),
            Ok(Ioctl::SetFlags(ia))
        );
        assert_eq!(decode(SETFLAGS, 0, 0, &[0; 2]), Err(libc::EFAULT));
        let x = flags_reply(ia | iflags::FL_NOATIME, true);
        assert_eq!(
            u32::from_ne_bytes(x[..4].try_into().unwrap()),
            0x08 | 0x10 | 0x40
        );
        assert_eq!(
            decode(FSSETXATTR, 0, 0, &x),
            Ok(Ioctl::SetFlags(ia | iflags::FL_NOATIME))
        );
        let mut sync = x.clone();
        sync[0] |= 0x20; // FS_XFLAG_SYNC: not honoured
        assert_eq!(decode(FSSETXATTR, 0, 0, &sync), Err(libc::EOPNOTSUPP));
        let mut projid = x;
        projid[12] = 1;
        assert_eq!(decode(FSSETXATTR, 0, 0, &projid), Err(libc::EOPNOTSUPP));
        assert_eq!(flags_reply(ia, false), ia.to_ne_bytes());
    }
}
