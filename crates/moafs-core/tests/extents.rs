//! Extent maps (disk version 3, FORMAT.md section 6a) through the engine: a file's map
//! against a model across commits and remounts as it grows deeper and shrinks, the largest
//! file of 16 KiB blocks, directories with tree blocks, co-writing beside blocks past the
//! end.

mod common;
use common::*;
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::error::FsError;
use moafs_core::fs::{MountOptions, SetAttr, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

const BS: u64 = 4096;

fn block_of(idx: u64, round: u64) -> Vec<u8> {
    let mut b = vec![(idx % 251) as u8; BS as usize];
    b[..16].copy_from_slice(&[idx.to_le_bytes(), round.to_le_bytes()].concat());
    b
}

/// Seeded one-block writes at scattered places (most not next to each other: one extent
/// each, up to a two-level tree), truncates, commits and remounts; the whole file is
/// compared with a model after each step, and fsck (which counts tree blocks) at the end.
#[test]
fn a_scattered_file_reads_as_its_model_through_growing_and_shrinking_trees() {
    let dev = new_dev(64 << 20);
    let mut fs = mount(&dev);
    let ino = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut size = 0u64;
    let mut rng = StdRng::seed_from_u64(31);
    let mut deepest = 0u64;
    for round in 0..40u64 {
        for _ in 0..rng.gen_range(20..200) {
            // mostly even indices (never adjacent), now and then a neighbour
            let idx = rng.gen_range(0..3000u64) * 2 + u64::from(rng.gen_ratio(1, 8));
            let b = block_of(idx, round);
            fs.write(ino, idx * BS, &b).unwrap();
            model.insert(idx, b);
            size = size.max((idx + 1) * BS);
        }
        if rng.gen_ratio(1, 5) {
            let keep = rng.gen_range(0..=size / BS);
            fs.setattr(
                ino,
                &SetAttr {
                    size: Some(keep * BS),
                    ..Default::default()
                },
            )
            .unwrap();
            model.retain(|&i, _| i < keep);
            size = keep * BS;
        }
        if rng.gen_bool(0.5) {
            fs.sync().unwrap();
        }
        fs.check_invariants().unwrap();
        if rng.gen_ratio(1, 4) {
            fs.unmount().unwrap();
            fsck_clean(&dev);
            fs = mount(&dev);
        }
        let a = fs.getattr(ino).unwrap();
        assert_eq!(a.size, size);
        let got = fs.read(ino, 0, size as u32).unwrap();
        for (k, chunk) in got.chunks(BS as usize).enumerate() {
            match model.get(&(k as u64)) {
                Some(b) => assert_eq!(chunk, &b[..], "round {round}: block {k}"),
                None => assert!(chunk.iter().all(|x| *x == 0), "round {round}: hole {k}"),
            }
        }
        // the map's blocks: what st_blocks counts beyond the data
        let tree = (a.blocks_512 / 8).saturating_sub(model.len() as u64);
        deepest = deepest.max(tree);
    }
    assert!(
        deepest >= 5,
        "the file never needed a two-level tree ({deepest} map blocks at most)"
    );
    fs.unmount().unwrap();
    fsck_clean(&dev);
    // all of it freed: the tree blocks too
    let fs = mount(&dev);
    let free = fs.statfs().free_blocks;
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.sync().unwrap();
    fs.sync().unwrap();
    let freed = fs.statfs().free_blocks - free;
    assert!(
        freed > model.len() as u64,
        "{freed} freed for {} blocks",
        model.len()
    );
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

/// With 16 KiB blocks the pointer map reaches past 2^32 blocks, an extent's 32-bit logical
/// block does not: the last block below 2^32 is written and read back after a remount,
/// past it a write or truncate is EFBIG (never stored at a wrapped address).
#[test]
fn an_extent_file_of_16_kib_blocks_ends_at_2_to_the_32_blocks() {
    let dev = Arc::new(MemDevice::new(64 << 20));
    let opts = MkfsOptions {
        block_size: 16384,
        ..MkfsOptions::default()
    };
    mkfs(dev.as_ref(), &opts).unwrap();
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    let f = fs.create(ROOT_INO, b"far", 0o644, ME).unwrap().ino;
    let last = ((1u64 << 32) - 1) * 16384;
    fs.write(f, 0, b"first").unwrap();
    fs.write(f, last, b"the last block").unwrap();
    assert!(matches!(
        fs.write(f, last + 16384, b"x"),
        Err(FsError::FileTooBig)
    ));
    let past = SetAttr {
        size: Some(last + 16384 + 1),
        ..Default::default()
    };
    assert!(matches!(fs.setattr(f, &past), Err(FsError::FileTooBig)));
    fs.unmount().unwrap();
    fsck_clean(&dev);
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()).unwrap();
    assert_eq!(fs.read(f, last, 14).unwrap(), b"the last block");
    assert_eq!(fs.read(f, 0, 5).unwrap(), b"first");
    fs.unmount().unwrap();
}

/// Directories grow a block per commit wherever the allocator finds one: interleaved with
/// files, each block is an extent of its own, and a directory of many blocks has a tree.
#[test]
fn a_fragmented_directory_keeps_every_entry() {
    let dev = new_dev(64 << 20);
    let fs = mount(&dev);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    let mut n = 0;
    for round in 0..12 {
        for _ in 0..120 {
            let name = format!("a-rather-long-name-to-fill-blocks-quickly-{n:05}");
            fs.create(d, name.as_bytes(), 0o644, ME).unwrap();
            n += 1;
        }
        let f = fs
            .create(ROOT_INO, format!("filler-{round}").as_bytes(), 0o644, ME)
            .unwrap()
            .ino;
        fs.write(f, 0, &[1u8; 3 * BS as usize]).unwrap();
        fs.sync().unwrap();
    }
    let a = fs.getattr(d).unwrap();
    assert!(a.size / BS > 8, "{} blocks", a.size / BS);
    assert!(
        a.blocks_512 / 8 > a.size / BS,
        "the directory has no tree block: {} blocks for {} of entries",
        a.blocks_512 / 8,
        a.size / BS
    );
    fs.unmount().unwrap();
    fsck_clean(&dev);
    let fs = mount(&dev);
    for k in (0..n).step_by(37) {
        let name = format!("a-rather-long-name-to-fill-blocks-quickly-{k:05}");
        fs.lookup(d, name.as_bytes()).unwrap();
    }
    fs.unmount().unwrap();
}

/// A small file with blocks past its end (fallocate KEEP_SIZE) rewritten whole: the data,
/// the bookkeeping and fsck agree. (Co-writing leaves such a file to per-file write-back:
/// moving blocks 0..n would split the extent past the end, a tree block nobody promised once
/// the root is full; this file's two extents fit the root either way, so the test checks
/// the outcome, not the choice.)
#[test]
fn cowriting_leaves_a_file_with_blocks_past_its_end() {
    let dev = new_dev(64 << 20);
    let fs = mount(&dev);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    let mut files = Vec::new();
    for i in 0..6u8 {
        let f = fs.create(d, &[b'f', b'0' + i], 0o644, ME).unwrap().ino;
        fs.write(f, 0, &[i; 2 * BS as usize]).unwrap();
        fs.fallocate(f, 0, 10 * BS, libc::FALLOC_FL_KEEP_SIZE)
            .unwrap();
        files.push(f);
    }
    fs.sync().unwrap();
    for (i, &f) in files.iter().enumerate() {
        fs.write(f, 0, &[i as u8 + 10; 2 * BS as usize]).unwrap();
    }
    fs.sync().unwrap();
    fs.check_invariants().unwrap();
    fs.unmount().unwrap();
    fsck_clean(&dev);
    let fs = mount(&dev);
    for (i, &f) in files.iter().enumerate() {
        assert_eq!(
            fs.read(f, 0, 2 * BS as u32).unwrap(),
            vec![i as u8 + 10; 2 * BS as usize]
        );
    }
    fs.unmount().unwrap();
}

/// generic/468: what `stat` counts for a file whose fallocated blocks wait for the commit
/// (reserved data and the tree blocks the commit will add) is what it counts afterwards.
/// The file has ten extents (its ten pieces committed between other files' blocks): the
/// fallocated run makes an eleventh, and a tree block, when the block after the last extent
/// is taken, and extends that extent when it is free.
#[test]
fn st_blocks_of_fallocated_blocks_do_not_change_at_the_commit() {
    let dev = new_dev(512 << 20);
    let fs = mount(&dev);
    let filler = fs.create(ROOT_INO, b"filler", 0o644, ME).unwrap().ino;
    let mut at = 0;
    for (i, len) in [1024u64, 4096, 104857600].into_iter().enumerate() {
        for keep in [0, libc::FALLOC_FL_KEEP_SIZE] {
            let name = format!("t{i}-{keep}");
            let f = fs.create(ROOT_INO, name.as_bytes(), 0o644, ME).unwrap().ino;
            for piece in 0..10u64 {
                fs.write(f, piece * 1050624, &vec![5u8; 1050624]).unwrap();
                fs.fsync(f, false).unwrap();
                fs.write(filler, at, &[1u8; BS as usize]).unwrap();
                fs.fsync(filler, false).unwrap();
                at += BS;
            }
            fs.fallocate(f, 10 * 1050624, len, keep).unwrap();
            let before = fs.getattr(f).unwrap().blocks_512;
            fs.fsync(f, false).unwrap();
            let after = fs.getattr(f).unwrap().blocks_512;
            assert_eq!(
                before, after,
                "{name}: {before} before the commit, {after} after"
            );
            fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
        }
    }
    fs.unmount().unwrap();
}
