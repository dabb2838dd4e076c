//! fsck's findings as values: specific damage gives exactly these findings, `-y` repairs the
//! repairable ones (and nothing when a finding says the walk is incomplete), and the exit
//! code follows e2fsck (0 clean, 1 corrected, 4 left, 5 both).

mod common;
use common::ME;
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::format::{DirBlock, DiskInode, Geometry};
use moafs_core::fs::ROOT_INO;
use moafs_core::fsck::{fsck, Finding, FsckReport};
use std::sync::Arc;

const BS: usize = 4096;

struct Image {
    bytes: Vec<u8>,
    geo: Geometry,
    dir: u64,
    a: u64,
    b: u64,
    big: u64,
}

/// An 8 MiB image with pointer maps (disk version 2): directory `d` with one-block files `a`
/// and `b`, and `big` (20 blocks, through the indirect block), cleanly unmounted. (Extent
/// maps' damage: `corrupt.rs`.)
fn image() -> Image {
    let dev = common::new_dev_pointers(8 << 20);
    let fs = common::mount(&dev);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap();
    let a = fs.create(d.ino, b"a", 0o644, ME).unwrap();
    fs.write(a.ino, 0, &[1; 100]).unwrap();
    let b = fs.create(d.ino, b"b", 0o644, ME).unwrap();
    fs.write(b.ino, 0, &[2; 100]).unwrap();
    let big = fs.create(ROOT_INO, b"big", 0o644, ME).unwrap();
    fs.write(big.ino, 0, &vec![3; 20 * BS]).unwrap();
    fs.unmount().unwrap();
    let sb = moafs_core::recovery::read_superblock(dev.as_ref()).unwrap();
    Image {
        bytes: dev.snapshot(),
        geo: Geometry::from_superblock(&sb),
        dir: d.ino,
        a: a.ino,
        b: b.ino,
        big: big.ino,
    }
}

impl Image {
    fn inode(&self, ino: u64) -> DiskInode {
        let (blk, off) = self.geo.inode_location(ino);
        let at = blk as usize * BS + off;
        DiskInode::decode_unchecked(&self.bytes[at..at + 256], ino, blk).unwrap()
    }
    /// Changes inode `ino` and stores it with a valid crc.
    fn edit(&mut self, ino: u64, f: impl FnOnce(&mut DiskInode)) {
        let mut d = self.inode(ino);
        f(&mut d);
        let (blk, off) = self.geo.inode_location(ino);
        let at = blk as usize * BS + off;
        d.encode_into(&mut self.bytes[at..at + 256], ino);
    }
    fn dev(&self) -> Arc<MemDevice> {
        Arc::new(MemDevice::from_bytes(self.bytes.clone()))
    }
}

fn check(dev: &Arc<MemDevice>, repair: bool) -> FsckReport {
    fsck(dev.as_ref() as &dyn BlockDevice, repair).expect("fsck runs")
}

/// `-n` finds `want` exactly (exit 4); `-y` repairs them all (exit 1); `-n` is clean then.
fn repaired_exactly(img: &Image, want: Vec<Finding>) {
    let dev = img.dev();
    let r = check(&dev, false);
    assert_eq!(r.errors, want, "fsck -n");
    assert_eq!(r.exit_code(), 4);
    assert!(want.iter().all(|f| f.repair().is_some()));
    let r = check(&dev, true);
    assert_eq!(r.repaired, want, "fsck -y");
    assert!(r.errors.is_empty(), "fsck -y left {:#?}", r.errors);
    assert_eq!(r.exit_code(), 1);
    let r = check(&dev, false);
    assert!(r.is_clean(), "after -y: {:#?}", r.errors);
    assert_eq!(r.exit_code(), 0);
}

#[test]
fn a_clean_image_has_no_findings() {
    let r = check(&image().dev(), false);
    assert!(r.is_clean(), "{:#?}", r.errors);
    assert_eq!(r.exit_code(), 0);
}

#[test]
fn link_count() {
    let mut img = image();
    let a = img.a;
    img.edit(a, |d| d.nlink = 5);
    repaired_exactly(
        &img,
        vec![Finding::LinkCount {
            ino: a,
            stored: 5,
            found: 1,
        }],
    );
}

#[test]
fn block_count_and_directory_size() {
    let mut img = image();
    let (a, dir) = (img.a, img.dir);
    img.edit(a, |d| d.blocks += 3);
    let size = img.inode(dir).size;
    img.edit(dir, |d| d.size += 100);
    repaired_exactly(
        &img,
        vec![
            Finding::DirSize {
                ino: dir,
                size: size + 100,
            },
            Finding::BlockCount {
                ino: a,
                stored: 4,
                found: 1,
            },
        ],
    );
}

#[test]
fn entry_type() {
    let mut img = image();
    let (dir, a) = (img.dir, img.a);
    let blk = img.inode(dir).direct[0] as usize;
    let mut db = DirBlock::decode(&img.bytes[blk * BS..(blk + 1) * BS], dir, 0, blk as u64)
        .expect("directory block");
    db.entries.iter_mut().find(|e| e.name == b"a").unwrap().kind = 4; // DT_DIR
    img.bytes[blk * BS..(blk + 1) * BS].copy_from_slice(&db.encode(dir, 0, BS as u32));
    repaired_exactly(
        &img,
        vec![Finding::EntryType {
            dir,
            name: "a".into(),
            kind: 4,
            ino: a,
        }],
    );
}

#[test]
fn a_pointer_outside_the_data_area_damages_its_inode() {
    let mut img = image();
    let (dir, a) = (img.dir, img.a);
    let total = img.geo.total_blocks as u32;
    let old = img.inode(a).direct[0] as u64;
    img.edit(a, |d| d.direct[0] = total + 7);
    let dev = img.dev();
    let r = check(&dev, false);
    let detail = format!(
        "corrupt inode at block {}: inode {a}: direct block pointer {} outside the data area",
        img.geo.inode_location(a).0,
        total + 7
    );
    let damaged = Finding::InodeDamaged { ino: a, detail };
    assert_eq!(
        r.errors,
        vec![
            damaged.clone(),
            Finding::EntryFreeInode {
                dir,
                name: "a".into(),
                ino: a,
            },
            Finding::BlocksLeaked {
                group: img.geo.group_of_block(old),
                count: 1
            },
            damaged,
            Finding::MarkedButFree { ino: a },
        ]
    );
    // -y clears the inode and its entry; the rest of the tree stays
    let r = check(&dev, true);
    assert_eq!(r.exit_code(), 1, "{:#?}", r.errors);
    assert!(check(&dev, false).is_clean());
    let fs = moafs_core::Fs::mount(dev.clone(), Default::default()).unwrap();
    assert!(fs.lookup(dir, b"a").is_err());
    assert_eq!(fs.read(img.b, 0, 100).unwrap(), vec![2; 100]);
    fs.unmount().unwrap();
}

/// A damaged block may hold one name twice: removing the entry that names a free inode
/// keeps the other (found by the structure fuzz target: `-y` removed both, and the good
/// file became unreachable).
#[test]
fn removing_a_bad_entry_keeps_a_good_one_of_the_same_name() {
    let mut img = image();
    let (dir, a) = (img.dir, img.a);
    let blk = img.inode(dir).direct[0] as usize;
    let mut db = DirBlock::decode(&img.bytes[blk * BS..(blk + 1) * BS], dir, 0, blk as u64)
        .expect("directory block");
    let free = 40; // never allocated in this image
    db.entries.insert(
        0,
        moafs_core::format::DirEntryRaw {
            ino: free,
            kind: 8, // DT_REG
            name: b"a".to_vec(),
        },
    );
    img.bytes[blk * BS..(blk + 1) * BS].copy_from_slice(&db.encode(dir, 0, BS as u32));
    repaired_exactly(
        &img,
        vec![Finding::EntryFreeInode {
            dir,
            name: "a".into(),
            ino: free,
        }],
    );
    // and `a` is still there, with its data
    let dev = img.dev();
    fsck(dev.as_ref() as &dyn BlockDevice, true).unwrap();
    let fs = common::mount(&dev);
    let d = fs.lookup(ROOT_INO, b"d").unwrap();
    let got = fs.lookup(d.ino, b"a").unwrap();
    assert_eq!(got.ino, a);
    assert_eq!(fs.read(a, 0, 100).unwrap(), vec![1u8; 100]);
    fs.unmount().unwrap();
}

#[test]
fn a_second_name_of_a_directory_is_removed() {
    let mut img = image();
    let dir = img.dir;
    let blk = img.inode(ROOT_INO).direct[0] as usize;
    let mut db = DirBlock::decode(
        &img.bytes[blk * BS..(blk + 1) * BS],
        ROOT_INO,
        0,
        blk as u64,
    )
    .expect("root's block");
    db.entries.push(moafs_core::format::DirEntryRaw {
        ino: dir,
        kind: 4, // DT_DIR
        name: b"z".to_vec(),
    });
    img.bytes[blk * BS..(blk + 1) * BS].copy_from_slice(&db.encode(ROOT_INO, 0, BS as u32));
    repaired_exactly(
        &img,
        vec![Finding::SecondDirLink {
            dir: ROOT_INO,
            name: "z".into(),
            ino: dir,
        }],
    );
}

#[test]
fn a_block_used_twice_is_left_and_the_rest_repaired() {
    let mut img = image();
    let (a, b) = (img.a, img.b);
    let shared = img.inode(b).direct[0];
    let own = img.inode(a).direct[0] as u64;
    img.edit(a, |d| {
        d.direct[0] = shared;
        d.nlink = 3;
    });
    let dev = img.dev();
    let r = check(&dev, false);
    let twice = Finding::BlockUsedTwice {
        ino: b,
        block: shared as u64,
    };
    assert!(r.errors.contains(&twice), "{:#?}", r.errors);
    assert!(twice.repair().is_none() && !twice.blocks_repair());
    let leaked = Finding::BlocksLeaked {
        group: img.geo.group_of_block(own),
        count: 1,
    };
    assert!(r.errors.contains(&leaked), "{:#?}", r.errors);
    let r = check(&dev, true);
    assert_eq!(r.errors, vec![twice.clone()], "left by -y");
    assert!(r.repaired.contains(&leaked), "{:#?}", r.repaired);
    assert!(r
        .repaired
        .iter()
        .any(|f| matches!(f, Finding::LinkCount { ino, .. } if *ino == a)));
    assert_eq!(r.exit_code(), 5, "corrected (1) and left (4)");
    let r = check(&dev, false);
    assert_eq!(r.errors, vec![twice]);
    assert_eq!(r.exit_code(), 4);
}

#[test]
fn a_damaged_indirect_block_stops_every_repair() {
    let mut img = image();
    let big = img.big;
    let ind = img.inode(big).indirect[0] as usize;
    img.bytes[ind * BS + 40] ^= 0x10; // crc no longer matches
    let a = img.a;
    img.edit(a, |d| d.nlink = 7); // repairable on its own
    let dev = img.dev();
    let before = img.bytes.clone();
    let r = check(&dev, false);
    assert!(
        matches!(&r.errors[0], Finding::BlockDamaged { ino, detail }
            if *ino == big && detail.contains("indirect block")),
        "{:#?}",
        r.errors
    );
    assert!(r.errors[0].blocks_repair());
    let r = check(&dev, true);
    assert!(r.repaired.is_empty(), "{:#?}", r.repaired);
    assert_eq!(r.exit_code(), 4);
    assert!(dev.snapshot() == before, "fsck -y wrote to the image");
}

#[test]
fn findings_keep_their_words() {
    let f = Finding::LinkCount {
        ino: 12,
        stored: 5,
        found: 1,
    };
    assert_eq!(f.to_string(), "inode 12: link count 5 but 1 links found");
    assert!(f.contains("link count"));
    let e = Finding::EntryFreeInode {
        dir: 3,
        name: "x y".into(),
        ino: 9,
    };
    assert_eq!(
        e.to_string(),
        "directory 3: entry \"x y\" names free inode 9"
    );
}

#[test]
fn a_lowered_itable_init_is_repaired_whole() {
    // group 0's header says only 2 slots are initialised: `d`'s files (inodes 3..) read as
    // free, their entries go, and the slots that -y's raised itable_init brings back in must
    // be cleared (found by the fuzz target `structure`)
    let mut img = image();
    let hb = img.geo.header_block(0) as usize;
    let mut hdr =
        moafs_core::format::GroupHeader::decode(&img.bytes[hb * BS..(hb + 1) * BS], hb as u64, 0)
            .unwrap();
    hdr.itable_init = 2;
    img.bytes[hb * BS..(hb + 1) * BS].copy_from_slice(&hdr.encode(hb as u64, BS as u32));
    let dev = img.dev();
    let r = check(&dev, false);
    assert!(
        r.errors.contains(&Finding::EntryFreeInode {
            dir: img.dir,
            name: "a".into(),
            ino: img.a,
        }),
        "{:#?}",
        r.errors
    );
    let r = check(&dev, true);
    assert!(r.errors.is_empty(), "{:#?}", r.errors);
    assert_eq!(r.exit_code(), 1);
    let r = check(&dev, false);
    assert!(r.is_clean(), "after -y: {:#?}", r.errors);
}

#[test]
fn a_directory_losing_its_block_pointer_keeps_a_decodable_size() {
    // the root's only block pointer zeroed: -y sets its block count to 0, and must cut its
    // size to fit, or the repaired root breaks the decode rule size / block_size <= blocks
    // (found by the fuzz target `structure`)
    let mut img = image();
    img.edit(ROOT_INO, |d| d.direct[0] = 0);
    let dev = img.dev();
    let r = check(&dev, false);
    assert!(
        r.errors.contains(&Finding::BlockCount {
            ino: ROOT_INO,
            stored: 1,
            found: 0
        }),
        "{:#?}",
        r.errors
    );
    let r = check(&dev, true);
    assert!(r.errors.is_empty(), "{:#?}", r.errors);
    let r = check(&dev, false);
    assert!(r.is_clean(), "after -y: {:#?}", r.errors);
    let fs = moafs_core::Fs::mount(dev.clone(), Default::default()).unwrap();
    assert_eq!(
        fs.readdir(ROOT_INO, 0, 10).unwrap().len(),
        2,
        ". and .. only"
    );
    fs.create(ROOT_INO, b"new", 0o644, ME).unwrap();
    fs.unmount().unwrap();
    assert!(check(&dev, false).is_clean());
}
