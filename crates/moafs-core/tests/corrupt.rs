//! Corrupt-image corpus: seeded bit flips and zeroed blocks in every metadata structure of a
//! populated image (superblock, group header, both bitmaps, inode table, directory, indirect
//! and xattr blocks, a journal transaction that needs replay). For each: `fsck -n` notices
//! (errors, or a clear error return); mount either refuses with a clear error or works and
//! every file can be walked without a panic; `fsck -y` never panics, and when it repaired
//! something a second `fsck -n` finds only what `-y` leaves by design.
//!
//! Hostile images (issue 19): values under a valid crc — pointers outside the data area, a
//! huge directory or symlink, counters at their limits — each with a test, and seeded
//! structure-level damage followed by mutating operations (`fuzzing::exercise_mutating`).

mod common;
use common::ME;
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::format::extent::ExtNode;
use moafs_core::fs::{MountOptions, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const BS: u64 = 4096;

/// A populated image with pointer maps (disk version 2) and where its structures are:
/// (name, block, bytes covered by a crc).
fn populated() -> (Vec<u8>, Vec<(&'static str, u64, usize)>) {
    populated_with(true)
}

/// [`populated`] with pointer maps (version 2) or extent maps (version 3: "frag", twelve
/// one-block extents, has an extent-tree block where "big" has an indirect block).
fn populated_with(pointers: bool) -> (Vec<u8>, Vec<(&'static str, u64, usize)>) {
    let mem = Arc::new(MemDevice::new(8 << 20));
    mkfs(
        mem.as_ref(),
        &MkfsOptions {
            groups: Some(2),
            pointer_maps: pointers,
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
    let frag = fs.create(ROOT_INO, b"frag", 0o644, ME).unwrap();
    for i in 0..12u64 {
        fs.write(frag.ino, 2 * i * BS, &[i as u8 + 1; BS as usize])
            .unwrap();
    }
    fs.unmount().unwrap();
    let sb = moafs_core::recovery::read_superblock(mem.as_ref()).unwrap();
    let g = moafs_core::format::Geometry::from_superblock(&sb);
    let bounds = moafs_core::format::Bounds::from_superblock(&sb);
    // Find the blocks of a directory, an indirect block and the xattr block through fsck's
    // view: read the inodes directly.
    let fs = Fs::mount(mem.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    let big_attr = fs.lookup(ROOT_INO, b"big").unwrap();
    let dir_attr = fs.lookup(ROOT_INO, b"dir").unwrap();
    let frag_attr = fs.lookup(ROOT_INO, b"frag").unwrap();
    fs.unmount().unwrap();
    let inode = |ino: u64| {
        let (blk, off) = g.inode_location(ino);
        let mut b = vec![0u8; BS as usize];
        mem.read_at(blk * BS, &mut b).unwrap();
        moafs_core::format::DiskInode::decode(&b[off..off + 256], ino, blk, &bounds).unwrap()
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
        &bounds,
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
        ("directory block", first_block(&di), BS as usize),
        match &inode(frag_attr.ino).extents {
            None => ("indirect block", bi.indirect[0] as u64, BS as usize),
            Some(ExtNode::Index { entries, .. }) => {
                ("extent-tree block", entries[0].child, BS as usize)
            }
            Some(leaf) => panic!("twelve extents in the root: {leaf:?}"),
        },
        ("xattr block", bi.xattr_block as u64, BS as usize),
        ("xattr head block", di.xattr_block as u64, BS as usize),
        ("xattr continuation", cont[cont.len() - 1], BS as usize),
    ];
    (mem.snapshot(), structures)
}

/// The block holding logical block 0 of `d` (either kind of map).
fn first_block(d: &moafs_core::format::DiskInode) -> u64 {
    match &d.extents {
        None => d.direct[0] as u64,
        Some(ExtNode::Leaf(e)) => e[0].physical,
        Some(other) => panic!("a directory of one block with a tree: {other:?}"),
    }
}

fn exercise(image: Vec<u8>, what: &str) -> bool {
    eprintln!("{what}");
    moafs_check::fuzzing::exercise(image)
}

#[test]
fn bit_flips_and_zeroed_blocks_in_every_structure() {
    flips_and_zeroed_blocks(true);
}

#[test]
fn bit_flips_and_zeroed_blocks_in_every_structure_with_extent_maps() {
    flips_and_zeroed_blocks(false);
}

fn flips_and_zeroed_blocks(pointers: bool) {
    let (base, structures) = populated_with(pointers);
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
    let sb = moafs_core::recovery::read_superblock(&MemDevice::from_bytes(image.clone())).unwrap();
    let plan =
        moafs_core::recovery::plan_replay(&MemDevice::from_bytes(image.clone()), &sb).unwrap();
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

/// Structure-level damage (`moafs_check::fuzzing::damage`: fields of an inode, directory,
/// indirect, xattr block, group header or superblock set to chosen values, crc re-sealed),
/// then the mutating exercise (create, write, truncate, unlink, rename, mkdir, setxattr,
/// fsync, unmount, fsck -n, fsck -y): seeded, so a failure replays. The fuzz target
/// `structure` does the same with fuzzer-chosen edits.
#[test]
fn structure_damage_then_mutations_never_panic() {
    // this file's image (two groups) and the fuzz targets' (one group, 1 MiB), in turn
    let images: Vec<(Vec<u8>, Vec<moafs_core::format::fuzzing::Structure>)> =
        // (and this file's image with extent maps)
        [
            populated().0,
            moafs_check::fuzzing::populated_image(false),
            populated_with(false).0,
        ]
            .into_iter()
            .map(|img| {
                let s = moafs_check::fuzzing::structures(&img);
                (img, s)
            })
            .collect();
    assert!(
        images[0].1.len() > 50 && images[1].1.len() > 20,
        "few structures found: {} and {}",
        images[0].1.len(),
        images[1].1.len()
    );
    for (base, _) in &images {
        let pristine = moafs_check::fuzzing::exercise_mutating(base.clone());
        assert!(
            !pristine.noticed && pristine.mounted,
            "pristine: {pristine:?}"
        );
    }
    let runs: u64 = std::env::var("MOAFS_DAMAGE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    // A hang fails too: a watchdog ends the process when one image takes 30 s.
    let progress = Arc::new(std::sync::Mutex::new((0u64, std::time::Instant::now())));
    let watched = progress.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let (seed, since) = *watched.lock().unwrap_or_else(|e| e.into_inner());
        if seed == u64::MAX {
            return; // done
        }
        if since.elapsed() > std::time::Duration::from_secs(30) {
            eprintln!("structure damage: seed {seed} has run for 30 s: a hang");
            std::process::exit(101);
        }
    });
    let (mut noticed, mut mounted, mut ops_ok) = (0u64, 0u64, 0u64);
    for seed in 0..runs {
        *progress.lock().unwrap_or_else(|e| e.into_inner()) = (seed, std::time::Instant::now());
        let mut rng = StdRng::seed_from_u64(seed);
        let (base, structures) = &images[(seed % images.len() as u64) as usize];
        let edits = rng.gen_range(1..=4);
        let data: Vec<u8> = (0..edits * moafs_check::fuzzing::EDIT_BYTES)
            .map(|_| rng.gen())
            .collect();
        let mut img = base.clone();
        let touched = moafs_check::fuzzing::damage(&mut img, structures, &data);
        eprintln!("seed {seed}: {touched:?}");
        let o = moafs_check::fuzzing::exercise_mutating(img);
        noticed += o.noticed as u64;
        mounted += o.mounted as u64;
        ops_ok += o.ops_ok as u64;
    }
    eprintln!(
        "structure damage: {runs} runs, fsck -n noticed {noticed}, mounted {mounted}, \
         {ops_ok} operations succeeded"
    );
    *progress.lock().unwrap_or_else(|e| e.into_inner()) = (u64::MAX, std::time::Instant::now());
    // most edits change a checked field: fsck must see them
    assert!(
        noticed * 2 > runs,
        "fsck -n noticed only {noticed} of {runs}"
    );
}

// ---- known defects of hostile images, one test each ---------------------------------------

/// Inode numbers of the populated image's files: (dir, a file in it, big, link).
fn names(base: &[u8]) -> (u64, u64, u64, u64) {
    let fs = Fs::mount(
        Arc::new(MemDevice::from_bytes(base.to_vec())) as Arc<dyn BlockDevice>,
        MountOptions::default(),
    )
    .unwrap();
    let dir = fs.lookup(ROOT_INO, b"dir").unwrap().ino;
    let file = fs.lookup(dir, b"file-3").unwrap().ino;
    let big = fs.lookup(ROOT_INO, b"big").unwrap().ino;
    let link = fs.lookup(ROOT_INO, b"link").unwrap().ino;
    fs.unmount().unwrap();
    (dir, file, big, link)
}

fn superblock_of(img: &[u8]) -> moafs_core::format::Superblock {
    moafs_core::recovery::read_superblock(&MemDevice::from_bytes(img.to_vec())).unwrap()
}

/// Changes inode `ino` of `img` with `f` and stores it with a valid crc.
fn edit_inode(img: &mut [u8], ino: u64, f: impl FnOnce(&mut moafs_core::format::DiskInode)) {
    let g = moafs_core::format::Geometry::from_superblock(&superblock_of(img));
    let (blk, off) = g.inode_location(ino);
    let at = (blk * BS) as usize + off;
    let mut d =
        moafs_core::format::DiskInode::decode_unchecked(&img[at..at + 256], ino, blk).unwrap();
    f(&mut d);
    d.encode_into(&mut img[at..at + 256], ino);
}

/// Sets u32 `at` of `structure`'s block to `value` and re-seals it.
fn edit_u32(img: &mut [u8], s: moafs_core::format::fuzzing::Structure, at: usize, value: u32) {
    let b = (s.block() * BS) as usize;
    img[b + at..b + at + 4].copy_from_slice(&value.to_le_bytes());
    s.reseal(&mut img[b..b + BS as usize]);
}

fn fsck_errors(img: &[u8]) -> Vec<String> {
    let dev = MemDevice::from_bytes(img.to_vec());
    let r = moafs_core::fsck::fsck(&dev, false).expect("fsck runs");
    r.errors.iter().map(|e| e.to_string()).collect()
}

#[test]
fn pointers_outside_the_data_area_read_as_corrupt_and_never_panic() {
    use moafs_core::format::fuzzing::Structure;
    let (base, structures) = populated();
    let (dir, file, big, _) = names(&base);
    let sb = superblock_of(&base);
    let g = moafs_core::format::Geometry::from_superblock(&sb);
    let total = g.total_blocks as u32;
    let find = |n: &str| structures.iter().find(|s| s.0 == n).expect("structure").1;
    let (ind, xhead) = (find("indirect block"), find("xattr head block"));
    type Edit = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, u64, Edit)> = vec![
        (
            "direct pointer past the image",
            file,
            Box::new(move |img| edit_inode(img, file, |d| d.direct[0] = total + 7)),
        ),
        (
            "direct pointer at the last u32",
            file,
            Box::new(move |img| edit_inode(img, file, |d| d.direct[1] = u32::MAX)),
        ),
        (
            "direct pointer into group 1's header",
            file,
            Box::new(move |img| edit_inode(img, file, |d| d.direct[0] = g.header_block(1) as u32)),
        ),
        (
            "direct pointer into the journal",
            file,
            Box::new(move |img| {
                edit_inode(img, file, |d| d.direct[0] = sb.journal_start as u32 + 3)
            }),
        ),
        (
            "indirect root past the image",
            big,
            Box::new(move |img| edit_inode(img, big, |d| d.indirect[0] = total + 100)),
        ),
        (
            "xattr pointer into an inode table",
            big,
            Box::new(move |img| edit_inode(img, big, |d| d.xattr_block = g.itable_block(0) as u32)),
        ),
        (
            "pointer in the indirect block past the image",
            big,
            Box::new(move |img| {
                let s = Structure::Indirect { block: ind };
                edit_u32(img, s, 4 * 5, total + 1)
            }),
        ),
        (
            "xattr continuation into group 1's bitmap",
            dir,
            Box::new(move |img| {
                let s = Structure::XattrHead {
                    ino: dir,
                    block: xhead,
                };
                edit_u32(img, s, 20, g.bitmap_block(1) as u32)
            }),
        ),
    ];
    for (what, victim, edit) in cases {
        let mut img = base.clone();
        edit(&mut img);
        let errors = fsck_errors(&img);
        assert!(
            errors.iter().any(|e| e.contains("outside the data area")),
            "{what}: fsck -n did not report the pointer: {errors:#?}"
        );
        let dev = Arc::new(MemDevice::from_bytes(img));
        let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default())
            .unwrap_or_else(|e| panic!("{what}: mount: {e}"));
        // the damaged inode reads as corrupt (EUCLEAN) where the pointer is needed
        let got = if victim == dir {
            fs.listxattr(victim).map(|_| ())
        } else if victim == big {
            fs.read(victim, 0, 200 * 4096)
                .map(|_| ())
                .and(fs.getxattr(victim, b"user.k").map(|_| ()))
        } else {
            fs.read(victim, 0, 4096).map(|_| ())
        };
        let e = got.expect_err(what);
        assert_eq!(e.to_errno(), libc::EUCLEAN, "{what}: {e}");
        // and everything else goes on without a panic: changes, frees, reuse, unmount
        let _ = fs.setxattr(victim, b"user.x", &[2; 5000], Default::default());
        let _ = fs.unlink(dir, b"file-3");
        go_on_after_damage(fs, &dev, victim, b"big");
    }
}

/// Extent maps (version 3): extents and tree-block entries that point outside one group's
/// data area are corrupt where read (fsck reports them, a read answers EUCLEAN), and nothing
/// panics afterwards.
#[test]
fn extents_outside_the_data_area_read_as_corrupt_and_never_panic() {
    use moafs_core::format::extent::Extent;
    use moafs_core::format::fuzzing::Structure;
    let (base, structures) = populated_with(false);
    let (_, file, _, _) = names(&base);
    let fs = Fs::mount(
        Arc::new(MemDevice::from_bytes(base.clone())) as Arc<dyn BlockDevice>,
        MountOptions::default(),
    )
    .unwrap();
    let frag = fs.lookup(ROOT_INO, b"frag").unwrap().ino;
    fs.unmount().unwrap();
    let sb = superblock_of(&base);
    let g = moafs_core::format::Geometry::from_superblock(&sb);
    let total = g.total_blocks;
    let tree = structures
        .iter()
        .find(|s| s.0 == "extent-tree block")
        .expect("frag's tree block")
        .1;
    let set_root = |phys: u64, len: u64| {
        move |d: &mut moafs_core::format::DiskInode| {
            d.extents = Some(ExtNode::Leaf(vec![Extent {
                logical: 0,
                len,
                physical: phys,
            }]))
        }
    };
    type Edit = Box<dyn Fn(&mut Vec<u8>)>;
    let meta = g.meta_blocks() as u64;
    let cases: Vec<(&str, u64, Edit)> = vec![
        (
            "extent past the image",
            file,
            Box::new(move |img| edit_inode(img, file, set_root(total + 7, 1))),
        ),
        (
            "extent at the largest 48-bit block",
            file,
            Box::new(move |img| edit_inode(img, file, set_root((1 << 48) - 1, 1))),
        ),
        (
            "extent into group 1's header",
            file,
            Box::new(move |img| edit_inode(img, file, set_root(g.header_block(1), 1))),
        ),
        (
            "extent running from group 0 into group 1",
            file,
            Box::new(move |img| edit_inode(img, file, set_root(g.group_start(1) - 1, 2))),
        ),
        (
            "extent over the journal",
            file,
            Box::new(move |img| edit_inode(img, file, set_root(meta, sb.journal_start + 2 - meta))),
        ),
        (
            "extent in the tree block past the image",
            frag,
            Box::new(move |img| {
                let s = Structure::ExtentBlock { block: tree };
                edit_u32(img, s, 8 + 8, total as u32 + 1)
            }),
        ),
    ];
    for (what, victim, edit) in cases {
        let mut img = base.clone();
        edit(&mut img);
        let errors = fsck_errors(&img);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("outside one group's data area")),
            "{what}: fsck -n did not report the extent: {errors:#?}"
        );
        let dev = Arc::new(MemDevice::from_bytes(img));
        let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default())
            .unwrap_or_else(|e| panic!("{what}: mount: {e}"));
        let e = fs.read(victim, 0, 4096).expect_err(what);
        assert_eq!(e.to_errno(), libc::EUCLEAN, "{what}: {e}");
        go_on_after_damage(fs, &dev, victim, b"frag");
    }
}

/// On a mount of a damaged image: writes to and truncates `victim`, unlinks `gone` (in the
/// root), makes and fills new files over three commits, unmounts and runs fsck; none of it
/// may panic (errors are fine).
fn go_on_after_damage(fs: Fs, dev: &Arc<MemDevice>, victim: u64, gone: &[u8]) {
    let _ = fs.write(victim, 0, &[1; 9000]);
    let _ = fs.setattr(
        victim,
        &moafs_core::fs::SetAttr {
            size: Some(0),
            ..Default::default()
        },
    );
    let _ = fs.unlink(ROOT_INO, gone);
    for round in 0..3 {
        for i in 0..20 {
            let name = format!("after-{round}-{i}");
            if let Ok(a) = fs.create(ROOT_INO, name.as_bytes(), 0o644, ME) {
                let _ = fs.write(a.ino, 0, &[3; 20_000]);
            }
        }
        let _ = fs.sync();
    }
    let _ = fs.unmount();
    let _ = moafs_core::fsck::fsck(dev.as_ref(), false);
}

#[test]
fn a_directory_with_a_huge_size_is_corrupt_not_a_hang() {
    let (base, _) = populated();
    let (dir, _, _, _) = names(&base);
    let mut img = base.clone();
    edit_inode(&mut img, dir, |d| d.size = 1 << 40);
    let errors = fsck_errors(&img);
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("inode {dir}")) && e.contains("needs more than its")),
        "fsck -n passed a directory of 1 TiB in a few blocks: {errors:#?}"
    );
    let dev = Arc::new(MemDevice::from_bytes(img));
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    let t = std::time::Instant::now();
    let e = fs
        .lookup(dir, b"file-1")
        .expect_err("lookup in a corrupt directory");
    assert_eq!(e.to_errno(), libc::EUCLEAN, "{e}");
    assert!(fs.readdir(dir, 0, 100).is_err());
    assert!(fs.create(dir, b"new", 0o644, ME).is_err());
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    fs.unmount().unwrap();
}

#[test]
fn a_symlink_with_a_huge_size_is_corrupt() {
    let (base, _) = populated();
    let (_, _, _, link) = names(&base);
    for size in [4096u64, 1 << 31, u64::MAX] {
        let mut img = base.clone();
        edit_inode(&mut img, link, |d| d.size = size);
        let errors = fsck_errors(&img);
        assert!(
            errors.iter().any(|e| e.contains(&format!("inode {link}"))),
            "size {size}: fsck -n: {errors:#?}"
        );
        let fs = Fs::mount(
            Arc::new(MemDevice::from_bytes(img)) as Arc<dyn BlockDevice>,
            MountOptions::default(),
        )
        .unwrap();
        let e = fs.readlink(link).expect_err("readlink");
        assert_eq!(e.to_errno(), libc::EUCLEAN, "size {size}: {e}");
        fs.unmount().unwrap();
    }
}

#[test]
fn superblock_fields_that_would_overflow_are_refused() {
    use moafs_core::format::{seal, Superblock, SB_CRC_AT};
    let (base, _) = populated();
    // (byte offset, value): journal start, byte-log start, journal floor, byte-log floor
    for (at, value) in [
        (152usize, u64::MAX - 3),
        (176, u64::MAX - 1),
        (168, u64::MAX),
        (192, u64::MAX),
    ] {
        let mut b = base[..BS as usize].to_vec();
        b[at..at + 8].copy_from_slice(&value.to_le_bytes());
        seal(&mut b[..256], SB_CRC_AT, 0);
        assert!(
            Superblock::decode(&b, 0).is_err(),
            "field at {at} = {value:#x} accepted"
        );
    }
    assert!(Superblock::decode(&base[..BS as usize], 0).is_ok());
}

#[test]
fn group_free_counts_must_match_the_bitmaps() {
    use moafs_core::format::fuzzing::Structure;
    let (base, _) = populated();
    let g = moafs_core::format::Geometry::from_superblock(&superblock_of(&base));
    // free blocks (8) and free inodes (12) of group 0 set to 1 (the allocator subtracted
    // whole extents from it), directories (16) to u32::MAX (it added to it: found by the
    // fuzz target `structure`, fuzz/regressions/structure/crash-71d0...)
    for (at, value) in [(8usize, 1u32), (12, 1), (16, u32::MAX)] {
        let mut img = base.clone();
        let s = Structure::GroupHeader {
            g: 0,
            block: g.header_block(0),
        };
        edit_u32(&mut img, s, at, value);
        let errors = fsck_errors(&img);
        let want = if at == 16 {
            "group 0: directory count 4294967295 exceeds"
        } else {
            "group 0: free count 1"
        };
        assert!(errors.iter().any(|e| e.contains(want)), "{errors:#?}");
        let e = Fs::mount(
            Arc::new(MemDevice::from_bytes(img)) as Arc<dyn BlockDevice>,
            MountOptions::default(),
        )
        .err()
        .expect("mount refuses counts that disagree with the bitmaps");
        assert!(e.to_string().contains("free counts"), "{e}");
    }
}

#[test]
fn counters_at_their_limit_do_not_overflow() {
    // found by the fuzz target `structure` (fuzz/regressions/structure/crash-3bb1...): a
    // superblock's mount count at u32::MAX overflowed at mount; a link count near u32::MAX
    // would at the next link, mkdir or rename into the directory
    use moafs_core::format::{seal, SB_CRC_AT};
    let (base, _) = populated();
    let (dir, file, _, _) = names(&base);
    let mut img = base.clone();
    img[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
    seal(&mut img[..256], SB_CRC_AT, 0);
    let fs = Fs::mount(
        Arc::new(MemDevice::from_bytes(img)) as Arc<dyn BlockDevice>,
        MountOptions::default(),
    )
    .unwrap();
    assert_eq!(fs.superblock().mount_count, 0, "wraps");
    fs.unmount().unwrap();
    for ino in [dir, file] {
        let mut img = base.clone();
        edit_inode(&mut img, ino, |d| d.nlink = u32::MAX);
        let errors = fsck_errors(&img);
        assert!(
            errors
                .iter()
                .any(|e| e.contains(&format!("inode {ino}: link count 4294967295 beyond"))),
            "{errors:#?}"
        );
        let fs = Fs::mount(
            Arc::new(MemDevice::from_bytes(img)) as Arc<dyn BlockDevice>,
            MountOptions::default(),
        )
        .unwrap();
        let e = fs.getattr(ino).expect_err("a link count beyond the limit");
        assert_eq!(e.to_errno(), libc::EUCLEAN);
        let _ = fs.link(ino, ROOT_INO, b"another");
        let _ = fs.mkdir(ino, b"sub", 0o755, ME);
        fs.unmount().unwrap();
    }
}

/// The inputs the fuzz target `structure` crashed on (`fuzz/regressions/structure/`, kept
/// with their fixes) replayed without nightly: the same image, the same edits, the same
/// exercise.
#[test]
fn structure_fuzz_regressions_replay() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/structure");
    let base = moafs_check::fuzzing::populated_image(false);
    let structures = moafs_check::fuzzing::structures(&base);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions/structure") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let mut img = base.clone();
        // as fuzz_targets/structure.rs: at most 8 edits
        let touched = moafs_check::fuzzing::damage(
            &mut img,
            &structures,
            &data[..data.len().min(8 * moafs_check::fuzzing::EDIT_BYTES)],
        );
        eprintln!("{}: {touched:?}", path.display());
        moafs_check::fuzzing::exercise_mutating(img);
        n += 1;
    }
    assert!(n >= 4, "{n} inputs in {}", dir.display());
}
