//! Golden images (`tests/golden/README.md`): images an older moafs wrote, one per disk-format
//! version, still mount, read back what was written, pass fsck, take new files, and change
//! version only when asked (`convert_to_extents`).

mod common;
use common::ME;
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::format::{DiskInode, Geometry};
use moafs_core::fs::{MountOptions, ROOT_INO};
use moafs_core::Fs;
use std::sync::Arc;

/// The image a `.golden` file holds.
fn load(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(&raw[..8], b"MGOLDEN1", "{path}: not a golden image");
    let len = u64::from_le_bytes(raw[8..16].try_into().unwrap()) as usize;
    let bs = u32::from_le_bytes(raw[16..20].try_into().unwrap()) as usize;
    let mut img = vec![0u8; len];
    for rec in raw[20..].chunks(8 + bs) {
        let idx = u64::from_le_bytes(rec[..8].try_into().unwrap()) as usize;
        img[idx * bs..(idx + 1) * bs].copy_from_slice(&rec[8..]);
    }
    img
}

/// `scripts/golden-image.sh`'s pattern.
fn pat(n: usize, seed: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (((i * 131 + seed * 7) >> 3) & 0xff) as u8)
        .collect()
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

fn lookup_path(fs: &Fs, path: &str) -> u64 {
    path.split('/').fold(ROOT_INO, |dir, name| {
        fs.lookup(dir, name.as_bytes()).unwrap().ino
    })
}

/// Everything `golden-image.sh` wrote reads back (`frag` only where the script made it).
fn check_contents(fs: &Fs, frag: bool) {
    assert_eq!(
        read_all(fs, lookup_path(fs, "small")),
        b"hello, golden image\n"
    );
    assert_eq!(
        read_all(fs, lookup_path(fs, "three")),
        pat(3 * 4096 - 100, 1)
    );
    assert_eq!(
        read_all(fs, lookup_path(fs, "forty")),
        pat(40 * 4096 + 17, 2)
    );
    let sparse = read_all(fs, lookup_path(fs, "sparse"));
    assert_eq!(sparse.len(), 2000 * 4096 + 5000);
    assert_eq!(&sparse[..4096], &pat(4096, 3)[..]);
    assert!(sparse[4096..2000 * 4096].iter().all(|b| *b == 0));
    assert_eq!(&sparse[2000 * 4096..], &pat(5000, 4)[..]);
    for i in 0..30 {
        let f = lookup_path(fs, &format!("dir/f{i:02}"));
        assert_eq!(read_all(fs, f), pat(100 + i * 50, i), "dir/f{i:02}");
    }
    assert!(fs.lookup(lookup_path(fs, "dir"), b"sub").is_ok());
    assert_eq!(fs.readlink(lookup_path(fs, "link")).unwrap(), b"dir/f01");
    assert_eq!(
        fs.getxattr(lookup_path(fs, "small"), b"user.colour")
            .unwrap(),
        b"blue"
    );
    if frag {
        let got = read_all(fs, lookup_path(fs, "frag"));
        for i in 0..12 {
            let at = 2 * i * 4096;
            assert_eq!(
                &got[at..at + 4096],
                &pat(4096, 10 + i)[..],
                "frag block {}",
                2 * i
            );
        }
    }
}

fn disk_inode(dev: &MemDevice, ino: u64) -> DiskInode {
    let sb = moafs_core::recovery::read_superblock(dev).unwrap();
    let g = Geometry::from_superblock(&sb);
    let (blk, off) = g.inode_location(ino);
    let mut b = vec![0u8; 4096];
    dev.read_at(blk * 4096, &mut b).unwrap();
    DiskInode::decode_unchecked(&b[off..off + 256], ino, blk).unwrap()
}

fn version(dev: &MemDevice) -> (u32, bool) {
    let sb = moafs_core::recovery::read_superblock(dev).unwrap();
    (sb.format_version, sb.has_extents())
}

/// Mounts, checks the contents, makes `name` (60 blocks: beyond the direct pointers) and
/// unmounts; returns its inode number.
fn use_image(dev: &Arc<MemDevice>, opts: MountOptions, frag: bool, name: &[u8]) -> u64 {
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts).expect("mount");
    check_contents(&fs, frag);
    let f = fs.create(ROOT_INO, name, 0o644, ME).unwrap().ino;
    fs.write(f, 0, &pat(60 * 4096, 9)).unwrap();
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    check_contents(&fs, frag);
    assert_eq!(read_all(&fs, f), pat(60 * 4096, 9));
    fs.unmount().unwrap();
    common::fsck_clean(dev);
    f
}

#[test]
fn a_version_2_image_mounts_as_it_is_and_converts_only_when_asked() {
    let dev = Arc::new(MemDevice::from_bytes(load("v2.golden")));
    assert_eq!(version(&dev), (2, false));
    common::fsck_clean(&dev);
    // an ordinary mount: still version 2, and its new files map by pointers
    let f = use_image(&dev, MountOptions::default(), false, b"new-v2");
    assert_eq!(version(&dev), (2, false));
    let d = disk_inode(&dev, f);
    assert!(d.extents.is_none() && d.indirect[0] != 0, "{d:?}");
    // converted when asked: version 3, new files by extents, the old ones as they were
    let forty = disk_inode(&dev, {
        let fs = common::mount(&dev);
        let i = lookup_path(&fs, "forty");
        fs.unmount().unwrap();
        i
    });
    let opts = MountOptions {
        convert_to_extents: true,
        ..MountOptions::default()
    };
    let g = use_image(&dev, opts, false, b"new-v3");
    assert_eq!(version(&dev), (3, true));
    let d = disk_inode(&dev, g);
    assert!(
        matches!(&d.extents, Some(moafs_core::format::extent::ExtNode::Leaf(e)) if !e.is_empty()),
        "{d:?}"
    );
    let fs = common::mount(&dev);
    let i = lookup_path(&fs, "forty");
    fs.unmount().unwrap();
    assert_eq!(disk_inode(&dev, i).extents, forty.extents);
    assert_eq!(disk_inode(&dev, i).indirect, forty.indirect);
    common::fsck_clean(&dev);
}

#[test]
fn a_version_3_image_reads_back_with_its_extent_tree() {
    let dev = Arc::new(MemDevice::from_bytes(load("v3.golden")));
    assert_eq!(version(&dev), (3, true));
    common::fsck_clean(&dev);
    let fs = common::mount(&dev);
    let frag = lookup_path(&fs, "frag");
    let forty = lookup_path(&fs, "forty");
    fs.unmount().unwrap();
    use moafs_core::format::extent::ExtNode;
    assert!(
        matches!(
            disk_inode(&dev, frag).extents,
            Some(ExtNode::Index { depth: 1, .. })
        ),
        "frag: twelve extents need a tree block"
    );
    assert!(
        matches!(disk_inode(&dev, forty).extents, Some(ExtNode::Leaf(_))),
        "forty: one run in the root"
    );
    use_image(&dev, MountOptions::default(), true, b"new");
    assert_eq!(version(&dev), (3, true));
}
