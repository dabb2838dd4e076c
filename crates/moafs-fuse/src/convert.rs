//! Conversions between fuser's types and the engine's: errno, times, file types and
//! attributes, and the caller of a request.

use fuser::{Errno, FileAttr, FileType, INodeNo, Request};
use moafs_core::fs::{Attr, Caller, FileKind, TimeOrNow, Timespec};
use moafs_core::FsError;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.to_errno())
}

/// The caller's groups (primary first) for set-group-ID decisions, or `None` when it counts as
/// privileged. FUSE passes neither capabilities nor supplementary groups: uid 0 stands for
/// CAP_FSETID, and the groups come from /proc/PID/status.
pub(crate) fn unprivileged_groups(req: &Request) -> Option<Vec<u32>> {
    if req.uid() == 0 {
        return None;
    }
    let mut groups = vec![req.gid()];
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) {
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:")) {
            groups.extend(
                line.split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
    }
    Some(groups)
}

pub(crate) fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        umask: 0,
    }
}

/// The caller of a create, mkdir or mknod with the umask the kernel passed: with DONT_MASK
/// (granted with POSIX_ACL) the mode arrives unmasked, and the engine applies the umask unless
/// the directory has a default ACL.
pub(crate) fn creator(req: &Request, umask: u32) -> Caller {
    Caller {
        umask: umask & 0o777,
        ..caller(req)
    }
}

/// Converts an engine time to `SystemTime` without panicking on any input.
pub fn to_system_time(t: Timespec) -> SystemTime {
    let nsec = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    let base = if t.sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(t.sec as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(t.sec.unsigned_abs()))
    };
    base.and_then(|b| b.checked_add(nsec)).unwrap_or(UNIX_EPOCH)
}

/// Converts a `SystemTime` to an engine time (seconds may be negative).
pub fn from_system_time(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            // before the epoch: seconds down to i64::MIN itself (whose magnitude no i64 holds)
            let d = e.duration();
            let (mut sec, mut nsec) = (-i128::from(d.as_secs()), d.subsec_nanos());
            if nsec != 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timespec {
                sec: sec.clamp(i128::from(i64::MIN), 0) as i64,
                nsec,
            }
        }
    }
}

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// Converts engine attributes to fuser's.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks_512,
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.crtime),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

pub(crate) fn time_or_now(t: fuser::TimeOrNow) -> TimeOrNow {
    match t {
        fuser::TimeOrNow::Now => TimeOrNow::Now,
        fuser::TimeOrNow::SpecificTime(st) => TimeOrNow::At(from_system_time(st)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_including_before_1970() {
        for (sec, nsec) in [
            (0, 0),
            (1, 5),
            (1_700_000_000, 999_999_999),
            (-1, 0),
            (-1, 1),
            (-86_400, 500),
            // the ends of the signed 64-bit range (xfstests generic/402)
            (i64::MIN, 0),
            (i64::MIN + 1, 7),
            (i64::MAX, 0),
        ] {
            let t = Timespec { sec, nsec };
            assert_eq!(from_system_time(to_system_time(t)), t, "{sec}.{nsec}");
        }
        // Out-of-range inputs do not panic.
        let _ = to_system_time(Timespec {
            sec: i64::MIN,
            nsec: u32::MAX,
        });
        let _ = to_system_time(Timespec {
            sec: i64::MAX,
            nsec: u32::MAX,
        });
    }
}
