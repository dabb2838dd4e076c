//! `moafs fsck`'s exit codes, as e2fsck's: 0 clean, 1 errors corrected, 4 errors left
//! uncorrected (5 when some were corrected and some left), 8 an operational error. Images are
//! made and damaged with the engine (no mount needed).

mod common;
use common::{moafs, p, text};
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::format::{DiskInode, Geometry};
use moafs_core::fs::{Caller, MountOptions, ROOT_INO};
use std::path::Path;
use std::sync::Arc;

const BS: usize = 4096;

/// An image with two one-block files `a` and `b`: (bytes, geometry, a, b).
fn image() -> (Vec<u8>, Geometry, u64, u64) {
    let dev = Arc::new(MemDevice::new(8 << 20));
    moafs_core::mkfs::mkfs(dev.as_ref(), &Default::default()).unwrap();
    let fs = moafs_core::Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default())
        .unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, Caller::ROOT).unwrap();
    fs.write(a.ino, 0, b"a").unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, Caller::ROOT).unwrap();
    fs.write(b.ino, 0, b"b").unwrap();
    fs.unmount().unwrap();
    let sb = moafs_core::recovery::read_superblock(dev.as_ref()).unwrap();
    (dev.snapshot(), Geometry::from_superblock(&sb), a.ino, b.ino)
}

fn edit(img: &mut [u8], geo: &Geometry, ino: u64, f: impl FnOnce(&mut DiskInode)) {
    let (blk, off) = geo.inode_location(ino);
    let at = blk as usize * BS + off;
    let mut d = DiskInode::decode_unchecked(&img[at..at + 256], ino, blk).unwrap();
    f(&mut d);
    d.encode_into(&mut img[at..at + 256], ino);
}

/// (exit code, output) of `moafs fsck FLAG path`.
fn fsck(flag: &str, path: &Path) -> (i32, String) {
    let out = moafs(&["fsck", flag, p(path)]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    (out.status.code().unwrap_or(-1), all)
}

#[test]
fn exit_codes_are_e2fsck_s() {
    let tmp = tempfile::tempdir().unwrap();
    let (clean, geo, a, b) = image();
    let path = tmp.path().join("img");

    std::fs::write(&path, &clean).unwrap();
    assert_eq!(fsck("-n", &path).0, 0, "a clean image");
    assert_eq!(fsck("-y", &path).0, 0, "a clean image, -y");

    // a wrong link count: found (4), corrected (1), clean again (0)
    let mut img = clean.clone();
    edit(&mut img, &geo, a, |d| d.nlink = 3);
    std::fs::write(&path, &img).unwrap();
    let (code, out) = fsck("-n", &path);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains(&format!(
            "error: inode {a}: link count 3 but 1 links found (-y: "
        )),
        "{out}"
    );
    let (code, out) = fsck("-y", &path);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("repaired: inode {a}: link count 3")),
        "{out}"
    );
    assert_eq!(fsck("-n", &path).0, 0);

    // a block used twice is left, the link count corrected: 1 | 4 (b's extent map given to a)
    let mut img = clean.clone();
    let shared = DiskInode::decode_unchecked(
        &clean[geo.inode_location(b).0 as usize * BS + geo.inode_location(b).1..][..256],
        b,
        geo.inode_location(b).0,
    )
    .unwrap()
    .extents;
    assert!(shared.is_some(), "mkfs makes extent maps");
    edit(&mut img, &geo, a, |d| {
        d.extents = shared;
        d.nlink = 2;
    });
    std::fs::write(&path, &img).unwrap();
    let (code, out) = fsck("-y", &path);
    assert_eq!(code, 5, "{out}");
    assert!(out.contains("is used twice"), "{out}");
    assert_eq!(fsck("-n", &path).0, 4);

    // operational errors: no such image, not a moafs image
    assert_eq!(fsck("-n", &tmp.path().join("missing")).0, 8);
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let (code, out) = fsck("-n", &path);
    assert_eq!(code, 8, "{out}");
}
