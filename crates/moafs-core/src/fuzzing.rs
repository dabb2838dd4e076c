//! Shared by the fuzz targets (`fuzz/`) and the corrupt-image tests: run everything a user
//! could run on a damaged image and require only that nothing panics or hangs.

use crate::device::{BlockDevice, MemDevice};
use crate::fs::{FileKind, MountOptions, ROOT_INO};
use crate::Fs;
use std::sync::Arc;

/// `fsck -n`, mount and walk every file (read data, links, xattrs), unmount, `fsck -y`, and
/// `fsck -n` again after a repair that claims success. Returns whether the first `fsck -n`
/// found something (errors, or an error return). Panics only if a repair that reported
/// success leaves errors behind (a bug in fsck).
pub fn exercise(image: Vec<u8>) -> bool {
    let dev = Arc::new(MemDevice::from_bytes(image.clone()));
    let noticed = match crate::fsck::fsck(dev.as_ref(), false) {
        Ok(r) => !r.errors.is_empty(),
        Err(_) => true,
    };
    if let Ok(fs) = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()) {
        let mut stack = vec![ROOT_INO];
        let mut seen = 0u32;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs.readdir(dir, 0, 100_000) else {
                continue;
            };
            for e in entries {
                if e.name == b"." || e.name == b".." || seen > 10_000 {
                    continue;
                }
                seen += 1;
                let Ok(a) = fs.getattr(e.ino) else { continue };
                match a.kind {
                    FileKind::Directory => stack.push(e.ino),
                    FileKind::Symlink => {
                        let _ = fs.readlink(e.ino);
                    }
                    _ => {
                        let _ = fs.read(e.ino, 0, a.size.min(1 << 22) as u32);
                        let _ = fs.listxattr(e.ino);
                    }
                }
            }
        }
        let _ = fs.unmount();
    }
    let dev = Arc::new(MemDevice::from_bytes(image));
    if let Ok(r) = crate::fsck::fsck(dev.as_ref(), true) {
        if r.errors.is_empty() && !r.repaired.is_empty() {
            if let Ok(again) = crate::fsck::fsck(dev.as_ref(), false) {
                assert!(
                    again.errors.is_empty(),
                    "fsck -y reported a repair, fsck -n disagrees: {:#?}",
                    again.errors
                );
            }
        }
    }
    noticed
}

/// Applies fuzzer bytes to `base` as patches of 5 bytes: u32 LE offset (modulo the image),
/// then a byte XORed in.
pub fn patch(base: &[u8], data: &[u8]) -> Vec<u8> {
    let mut img = base.to_vec();
    for p in data.chunks_exact(5) {
        let off = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % img.len();
        img[off] ^= p[4];
    }
    img
}
