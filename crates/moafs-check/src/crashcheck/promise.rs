//! Promises: what an fsync or a sync promised of an inode ([`Promise`], [`InodeState`]), for
//! which records of the log, and how a mounted state is held to one ([`check_promise`]).

use moafs_core::fs::FileKind;
use moafs_core::Fs;
use std::sync::Arc;

/// A promise and its life in the log: records `[start, end)`.
#[derive(Debug, Clone)]
pub(super) struct Promise {
    pub(super) ino: u64,
    pub(super) what: Promised,
    pub(super) start: usize,
    pub(super) end: usize,
}

/// What a promise holds.
#[derive(Debug, Clone)]
pub(super) enum Promised {
    /// An fsync of a regular file: its size and contents.
    Contents { size: u64, crc: u32 },
    /// A sync the inode was not changed during: everything of it but its times.
    Inode(Arc<InodeState>),
}

/// What a sync promises of an inode: all it shows but its times and its block count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InodeState {
    pub(super) kind: FileKind,
    pub(super) perm: u16,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) nlink: u32,
    pub(super) rdev: u32,
    /// Regular files and symlinks (a directory's size depends on its layout: not promised).
    pub(super) size: Option<u64>,
    /// crc32c of a regular file's contents.
    pub(super) crc: Option<u32>,
    /// A symlink's target.
    pub(super) target: Option<Vec<u8>>,
    /// A directory's entries (but `.` and `..`): name → inode.
    pub(super) entries: Option<std::collections::BTreeMap<Vec<u8>, u64>>,
    /// Extended attributes (ACLs included): name → value.
    pub(super) xattrs: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
}

impl InodeState {
    /// Reads `ino` on a mounted file system.
    pub(super) fn read(fs: &Fs, ino: u64) -> Result<InodeState, String> {
        let a = fs.getattr(ino).map_err(|e| format!("inode gone: {e}"))?;
        let mut xattrs = std::collections::BTreeMap::new();
        for name in fs.listxattr(ino).map_err(|e| format!("listxattr: {e}"))? {
            let v = fs
                .getxattr(ino, &name)
                .map_err(|e| format!("getxattr {}: {e}", String::from_utf8_lossy(&name)))?;
            xattrs.insert(name, v);
        }
        let mut st = InodeState {
            kind: a.kind,
            perm: a.perm,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            rdev: a.rdev,
            size: None,
            crc: None,
            target: None,
            entries: None,
            xattrs,
        };
        match a.kind {
            FileKind::Regular => {
                st.size = Some(a.size);
                st.crc = Some(file_crc(fs, ino, a.size)?);
            }
            FileKind::Symlink => {
                st.size = Some(a.size);
                st.target = Some(fs.readlink(ino).map_err(|e| format!("readlink: {e}"))?);
            }
            FileKind::Directory => {
                let list = fs
                    .readdir(ino, 0, usize::MAX)
                    .map_err(|e| format!("readdir: {e}"))?;
                st.entries = Some(
                    list.into_iter()
                        .filter(|e| e.name != b"." && e.name != b"..")
                        .map(|e| (e.name, e.ino))
                        .collect(),
                );
            }
            _ => {}
        }
        Ok(st)
    }

    /// How `got` differs from this promise, in words (empty: it does not).
    fn differences(&self, got: &InodeState) -> Vec<String> {
        let mut d = Vec::new();
        if self.kind != got.kind {
            d.push(format!("kind {:?} (promised {:?})", got.kind, self.kind));
            return d;
        }
        if got.perm != self.perm {
            d.push(format!("mode {:#o} (promised {:#o})", got.perm, self.perm));
        }
        let mut num = |what: &str, have: u32, want: u32| {
            if have != want {
                d.push(format!("{what} {have} (promised {want})"));
            }
        };
        num("uid", got.uid, self.uid);
        num("gid", got.gid, self.gid);
        num("links", got.nlink, self.nlink);
        num("rdev", got.rdev, self.rdev);
        if got.size != self.size {
            d.push(format!("size {:?} (promised {:?})", got.size, self.size));
        } else if got.crc != self.crc {
            d.push(format!(
                "contents differ (crc32c {:#010x?}, promised {:#010x?})",
                got.crc, self.crc
            ));
        }
        if got.target != self.target {
            d.push("symlink target differs".to_string());
        }
        if let (Some(want), Some(have)) = (&self.entries, &got.entries) {
            let show = |n: &Vec<u8>| String::from_utf8_lossy(n).into_owned();
            let missing: Vec<String> = want
                .iter()
                .filter(|(n, i)| have.get(*n) != Some(i))
                .map(|(n, i)| format!("{} -> {i}", show(n)))
                .collect();
            let extra: Vec<String> = have
                .iter()
                .filter(|(n, i)| want.get(*n) != Some(i))
                .map(|(n, i)| format!("{} -> {i}", show(n)))
                .collect();
            if !missing.is_empty() || !extra.is_empty() {
                d.push(format!(
                    "entries differ (missing {missing:?}, not promised {extra:?})"
                ));
            }
        }
        if got.xattrs != self.xattrs {
            let names = |m: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>| {
                m.keys()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect::<Vec<_>>()
            };
            d.push(format!(
                "extended attributes differ ({:?}, promised {:?})",
                names(&got.xattrs),
                names(&self.xattrs)
            ));
        }
        d
    }
}

/// crc32c of the first `size` bytes of `ino`.
fn file_crc(fs: &Fs, ino: u64, size: u64) -> Result<u32, String> {
    let mut crc = 0u32;
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(1 << 20) as u32;
        let data = fs.read(ino, offset, n).map_err(|e| format!("read: {e}"))?;
        if data.is_empty() {
            return Err(format!("short read at {offset} of {size}"));
        }
        crc = crc32c::crc32c_append(crc, &data);
        offset += data.len() as u64;
    }
    Ok(crc)
}

pub(super) fn check_promise(fs: &Fs, p: &Promise) -> Result<(), String> {
    let (size, crc) = match &p.what {
        Promised::Contents { size, crc } => (*size, *crc),
        Promised::Inode(want) => {
            let d = want.differences(&InodeState::read(fs, p.ino)?);
            return if d.is_empty() {
                Ok(())
            } else {
                Err(d.join(", "))
            };
        }
    };
    let a = fs.getattr(p.ino).map_err(|e| format!("inode gone: {e}"))?;
    if a.kind != FileKind::Regular || a.nlink == 0 {
        return Err(format!(
            "no longer a linked regular file ({:?}, {} links)",
            a.kind, a.nlink
        ));
    }
    if a.size != size {
        return Err(format!("size {} (promised {size})", a.size));
    }
    let got = file_crc(fs, p.ino, a.size)?;
    if got != crc {
        return Err(format!(
            "contents differ (crc32c {got:#010x}, promised {crc:#010x}; size {size})"
        ));
    }
    Ok(())
}
