//! Corrupt-image corpus: seeded bit flips and zeroed blocks in every metadata structure of a
//! populated image (superblock, group header, both bitmaps, inode table, directory, indirect
//! and xattr blocks, a journal transaction that needs replay). For each: `fsck -n` notices
//! (errors, or a clear error return); mount either refuses with a clear error or works and
//! every file can be walked without a panic; `fsck -y` never panics, and when it reports the
//! damage repaired a second `fsck -n` is clean.

mod common;
use common::ME;
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::fs::{MountOptions, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const BS: u64 = 4096;

/// A populated image and where its structures are: (name, block, bytes covered by a crc).
fn populated() -> (Vec<u8>, Vec<(&'static str, u64, usize)>) {
    let mem = Arc::new(MemDevice::new(8 << 20));
    mkfs(
        mem.as_ref(),
        &MkfsOptions {
            groups: Some(2),
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    let fs = Fs::mount(mem.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, ME).unwrap();
    for i in 0..40u32 {
        let f = fs
            .create(d.ino, format!("file-{i}").as_bytes(), 0o644, ME)
            .unwrap();
        fs.write(f.ino, 0, &vec![i as u8; 3000]).unwrap();
    }
    let big = fs.create(ROOT_INO, b"big", 0o644, ME).unwrap();
    fs.write(big.ino, 0, &vec![9u8; 200 * 4096]).unwrap();
    fs.setxattr(
        big.ino,
        b"user.k",
        b"value",
        moafs_core::fs::XattrFlags::default(),
    )
    .unwrap();
    // a set over several blocks (head + continuations) on the directory
    let long: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    fs.setxattr(
        d.ino,
        b"user.long",
        &long,
        moafs_core::fs::XattrFlags::default(),
    )
    .unwrap();
    fs.symlink(ROOT_INO, b"link", b"big", ME).unwrap();
    fs.unmount().unwrap();
    let sb = moafs_core::fs::read_superblock(mem.as_ref()).unwrap();
    let g = moafs_core::format::Geometry::from_superblock(&sb);
    // Find the blocks of a directory, an indirect block and the xattr block through fsck's
    // view: read the inodes directly.
    let fs = Fs::mount(mem.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    let big_attr = fs.lookup(ROOT_INO, b"big").unwrap();
    let dir_attr = fs.lookup(ROOT_INO, b"dir").unwrap();
    fs.unmount().unwrap();
    let inode = |ino: u64| {
        let (blk, off) = g.inode_location(ino);
        let mut b = vec![0u8; BS as usize];
        mem.read_at(blk * BS, &mut b).unwrap();
        moafs_core::format::DiskInode::decode(&b[off..off + 256], ino, blk).unwrap()
    };
    let bi = inode(big_attr.ino);
    let di = inode(dir_attr.ino);
    let (itable_blk, _) = g.inode_location(big_attr.ino);
    let mut head = vec![0u8; BS as usize];
    mem.read_at(di.xattr_block as u64 * BS, &mut head).unwrap();
    let cont = match moafs_core::format::XattrBlock::decode_head(
        &head,
        dir_attr.ino,
        di.xattr_block as u64,
        g.total_blocks,
    )
    .unwrap()
    {
        moafs_core::format::XattrHead::Large { cont, .. } => cont,
        other => panic!("expected a multi-block xattr set, got {other:?}"),
    };
    let structures = vec![
        ("superblock", 0, 256),
        ("group header", g.header_block(0), 64),
        ("group 1 header", g.header_block(1), 64),
        ("block bitmap", g.bitmap_block(0), BS as usize),
        ("inode bitmap", g.ibitmap_block(0), BS as usize),
        ("inode table", itable_blk, BS as usize),
        ("directory block", di.direct[0] as u64, BS as usize),
        ("indirect block", bi.indirect[0] as u64, BS as usize),
        ("xattr block", bi.xattr_block as u64, BS as usize),
        ("xattr head block", di.xattr_block as u64, BS as usize),
        ("xattr continuation", cont[cont.len() - 1], BS as usize),
    ];
    (mem.snapshot(), structures)
}

fn exercise(image: Vec<u8>, what: &str) -> bool {
    eprintln!("{what}");
    moafs_core::fuzzing::exercise(image)
}

#[test]
fn bit_flips_and_zeroed_blocks_in_every_structure() {
    let (base, structures) = populated();
    assert!(
        !exercise(base.clone(), "pristine"),
        "pristine image flagged"
    );
    let mut rng = StdRng::seed_from_u64(2026);
    for (name, blk, covered) in structures {
        assert!(blk > 0 || name == "superblock", "{name} not found");
        for flip in 0..24 {
            let mut img = base.clone();
            let bit = rng.gen_range(0..covered * 8);
            img[(blk * BS) as usize + bit / 8] ^= 1 << (bit % 8);
            let what = format!("{name} (block {blk}) bit {bit} (flip {flip})");
            assert!(exercise(img, &what), "{what}: fsck -n did not notice");
        }
        let mut img = base.clone();
        img[(blk * BS) as usize..((blk + 1) * BS) as usize].fill(0);
        let what = format!("{name} (block {blk}) zeroed");
        assert!(exercise(img, &what), "{what}: fsck -n did not notice");
    }
}

#[test]
fn damaged_journal_transaction_is_never_half_applied() {
    // An image that needs replay: crash right after a transaction (drop home writes).
    use moafs_core::device::{CutMode, FaultConfig, FaultDevice};
    let mem = Arc::new(MemDevice::new(8 << 20));
    mkfs(mem.as_ref(), &MkfsOptions::default()).unwrap();
    let fault = Arc::new(FaultDevice::new(
        mem.clone() as Arc<dyn BlockDevice>,
        FaultConfig::default(),
    ));
    let fs = Fs::mount(
        fault.clone() as Arc<dyn BlockDevice>,
        MountOptions::default(),
    )
    .unwrap();
    for i in 0..20u32 {
        let f = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, ME)
            .unwrap();
        fs.write(f.ino, 0, &[i as u8; 5000]).unwrap();
    }
    fs.sync().unwrap();
    let image = fault.crash_image(CutMode::DropAll).unwrap();
    drop(fs);
    let sb = moafs_core::fs::read_superblock(&MemDevice::from_bytes(image.clone())).unwrap();
    let plan =
        moafs_core::fs::journal::plan_replay(&MemDevice::from_bytes(image.clone()), &sb).unwrap();
    assert!(plan.transactions > 0, "the image needs no replay");
    assert!(!exercise(image.clone(), "intact journal"));
    let mut rng = StdRng::seed_from_u64(7);
    for k in 0..40 {
        let mut img = image.clone();
        let blk = sb.journal_start + rng.gen_range(0..sb.journal_blocks as u64);
        let byte = rng.gen_range(0..BS as usize);
        img[(blk * BS) as usize + byte] ^= 1 << rng.gen_range(0..8);
        // A damaged transaction is ignored (the file system is as before it) or, when a
        // later one depends on it, the image is refused; either way fsck -n must not see a
        // half-applied transaction.
        let dev = Arc::new(MemDevice::from_bytes(img.clone()));
        if let Ok(r) = moafs_core::fsck::fsck(dev.as_ref(), false) {
            assert!(r.errors.is_empty(), "journal flip {k}: {:#?}", r.errors);
        }
        exercise(img, &format!("journal block {blk} byte {byte}"));
    }
}

#[test]
fn fsck_y_salvages_damaged_directories_and_inodes() {
    let (base, structures) = populated();
    let find = |n: &str| structures.iter().find(|s| s.0 == n).expect("structure").1;
    let dir_blk = find("directory block");
    let itable = find("inode table");
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut img = base.clone();
    img[(dir_blk * BS) as usize..((dir_blk + 1) * BS) as usize].fill(0);
    cases.push(("zeroed directory block", img));
    let mut img = base.clone();
    // Every inode slot of the first inode-table block damaged except the root's.
    for slot in 1..(BS as usize / 256) {
        img[(itable * BS) as usize + slot * 256 + 40] ^= 0x10;
    }
    cases.push(("damaged inodes", img));
    for (what, img) in cases {
        let dev = Arc::new(MemDevice::from_bytes(img));
        let r = moafs_core::fsck::fsck(dev.as_ref(), false).unwrap();
        assert!(!r.errors.is_empty(), "{what}: not noticed");
        let r = moafs_core::fsck::fsck(dev.as_ref(), true).unwrap();
        assert!(
            r.errors.is_empty(),
            "{what}: left unrepaired: {:#?}",
            r.errors
        );
        assert!(!r.repaired.is_empty(), "{what}: nothing repaired");
        let r = moafs_core::fsck::fsck(dev.as_ref(), false).unwrap();
        assert!(r.errors.is_empty(), "{what}: after repair: {:#?}", r.errors);
        let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default())
            .unwrap_or_else(|e| panic!("{what}: mount after repair: {e}"));
        // The survivors are fully usable.
        let a = fs.create(ROOT_INO, b"after-repair", 0o644, ME).unwrap();
        fs.write(a.ino, 0, b"ok").unwrap();
        fs.unmount().unwrap();
        let r = moafs_core::fsck::fsck(dev.as_ref(), false).unwrap();
        assert!(r.errors.is_empty(), "{what}: after use: {:#?}", r.errors);
    }
}
