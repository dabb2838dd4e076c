mod common;
use common::*;
use moafs_core::device::BlockDevice;
use moafs_core::fs::{FileKind, RenameFlags, SetAttr, XattrFlags, ROOT_INO};
use moafs_core::FsError;

#[test]
fn create_write_remount_read() {
    let dev = new_dev(64 << 20);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (f, d);
    {
        let fs = mount(&dev);
        d = fs.mkdir(ROOT_INO, b"dir", 0o755, ME).unwrap().ino;
        f = fs.create(d, b"file", 0o644, ME).unwrap().ino;
        assert_eq!(fs.write(f, 0, &data).unwrap() as usize, data.len());
        fs.symlink(d, b"link", b"file", ME).unwrap();
        fs.setxattr(f, b"user.k", b"v", XattrFlags::default())
            .unwrap();
        fs.unmount().unwrap();
    }
    fsck_clean(&dev);
    let fs = mount(&dev);
    let a = fs.lookup(ROOT_INO, b"dir").unwrap();
    assert_eq!(a.kind, FileKind::Directory);
    assert_eq!(a.nlink, 2);
    let fa = fs.lookup(d, b"file").unwrap();
    assert_eq!(fa.size, data.len() as u64);
    assert_eq!(fs.read(f, 0, data.len() as u32 + 10).unwrap(), data);
    assert_eq!(fs.read(f, 4090, 20).unwrap(), &data[4090..4110]);
    let l = fs.lookup(d, b"link").unwrap();
    assert_eq!(fs.readlink(l.ino).unwrap(), b"file");
    assert_eq!(fs.getxattr(f, b"user.k").unwrap(), b"v");
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
}

#[test]
fn big_file_through_indirect_blocks() {
    let dev = new_dev(128 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"big", 0o644, ME).unwrap().ino;
    // past the single-indirect range: 12 + 1023 blocks = ~4.05 MiB
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8).collect();
    for i in 0..6u64 {
        fs.write(f, i << 20, &chunk).unwrap();
    }
    // a sparse write far away (double indirect)
    fs.write(f, 40 << 20, b"tail").unwrap();
    fs.sync().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    assert_eq!(fs.getattr(f).unwrap().size, (40 << 20) + 4);
    assert_eq!(fs.read(f, 5 << 20, 1 << 20).unwrap(), chunk);
    assert_eq!(fs.read(f, 20 << 20, 8).unwrap(), vec![0u8; 8]);
    assert_eq!(fs.read(f, 40 << 20, 100).unwrap(), b"tail");
    // truncate down frees indirect blocks, and fsck agrees
    fs.setattr(
        f,
        &SetAttr {
            size: Some(5000),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.read(f, 0, 10000).unwrap(), &chunk[..5000]);
    fs.setattr(
        f,
        &SetAttr {
            size: Some(9000),
            ..Default::default()
        },
    )
    .unwrap();
    let r = fs.read(f, 0, 10000).unwrap();
    assert_eq!(&r[..5000], &chunk[..5000]);
    assert!(
        r[5000..].iter().all(|b| *b == 0),
        "bytes past an old EOF read as zeros"
    );
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn namespace_errors() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let long = vec![b'a'; 256];
    assert!(matches!(
        fs.create(ROOT_INO, &long, 0o644, ME),
        Err(FsError::NameTooLong)
    ));
    assert!(matches!(
        fs.lookup(ROOT_INO, &long),
        Err(FsError::NameTooLong)
    ));
    fs.create(ROOT_INO, &long[..255], 0o644, ME).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    fs.create(d, b"x", 0o644, ME).unwrap();
    assert!(matches!(fs.rmdir(ROOT_INO, b"d"), Err(FsError::NotEmpty)));
    assert!(matches!(fs.unlink(ROOT_INO, b"d"), Err(FsError::IsDir)));
    assert!(matches!(fs.rmdir(d, b"x"), Err(FsError::NotDir)));
    assert!(matches!(
        fs.create(d, b"x", 0o644, ME),
        Err(FsError::Exists)
    ));
    assert!(matches!(fs.lookup(d, b"nope"), Err(FsError::NotFound)));
    // a directory cannot move below itself
    let sub = fs.mkdir(d, b"sub", 0o755, ME).unwrap().ino;
    assert!(fs
        .rename(ROOT_INO, b"d", sub, b"d2", RenameFlags::default())
        .is_err());
    // noreplace and exchange
    fs.create(ROOT_INO, b"a", 0o644, ME).unwrap();
    fs.create(ROOT_INO, b"b", 0o600, ME).unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert!(matches!(
        fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", noreplace),
        Err(FsError::Exists)
    ));
    let a = fs.lookup(ROOT_INO, b"a").unwrap().ino;
    let b = fs.lookup(ROOT_INO, b"b").unwrap().ino;
    let xchg = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", xchg).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"a").unwrap().ino, b);
    assert_eq!(fs.lookup(ROOT_INO, b"b").unwrap().ino, a);
    // exchange a directory with a file across directories fixes link counts
    fs.rename(ROOT_INO, b"a", d, b"x", xchg).unwrap();
    fs.rename(d, b"sub", ROOT_INO, b"a", xchg).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"a").unwrap().ino, sub);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn unlinked_but_open_lives_until_release() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    fs.open(f).unwrap();
    fs.forget(f, 1);
    fs.write(f, 0, b"still here").unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"still here");
    assert_eq!(fs.getattr(f).unwrap().nlink, 0);
    fs.release(f).unwrap();
    assert!(fs.getattr(f).is_err());
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn enospc_then_delete_and_reuse() {
    let dev = new_dev(4 << 20);
    let fs = mount(&dev);
    let chunk = vec![0xabu8; 64 << 10];
    let mut n = 0;
    let mut hit = false;
    'outer: for i in 0..1000 {
        let name = format!("f{i}");
        let f = match fs.create(ROOT_INO, name.as_bytes(), 0o644, ME) {
            Ok(a) => a.ino,
            Err(FsError::NoSpace) => {
                hit = true;
                break;
            }
            Err(e) => panic!("{e}"),
        };
        n += 1;
        for k in 0..4u64 {
            match fs.write(f, k * chunk.len() as u64, &chunk) {
                Ok(_) => {}
                Err(FsError::NoSpace) => {
                    hit = true;
                    break 'outer;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(hit, "a 4 MiB file system must fill up");
    fs.sync().unwrap();
    for i in 0..n {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    let f = fs.create(ROOT_INO, b"again", 0o644, ME).unwrap().ino;
    for k in 0..16u64 {
        fs.write(f, k * chunk.len() as u64, &chunk)
            .expect("space is reusable after delete");
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn a_listing_bounded_at_its_start_ends_while_entries_are_renamed() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let rename =
        |from: &[u8], to: &[u8]| fs.rename(ROOT_INO, from, ROOT_INO, to, RenameFlags::default());
    for i in 0..200 {
        fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, ME)
            .unwrap();
    }
    let end = fs.readdir_end(ROOT_INO).unwrap();
    let (mut off, mut listed, mut n) = (0, Vec::new(), 0);
    loop {
        let batch = fs.readdir_until(ROOT_INO, off, 7, end).unwrap();
        let Some(last) = batch.last() else { break };
        off = last.offset;
        for e in batch {
            listed.push(e.name.clone());
            if e.name.starts_with(b"f") {
                n += 1;
                rename(&e.name, format!("g{n}").as_bytes()).unwrap();
            }
        }
        assert!(listed.len() <= 202, "the listing does not end");
    }
    // ".", ".." and each of the 200 files once; none of the names made meanwhile
    assert_eq!(listed.len(), 202);
    assert!(listed.iter().all(|n| !n.starts_with(b"g")));
    // unbounded, the same listing would have gone on with the renamed entries
    let all = fs.readdir(ROOT_INO, 0, usize::MAX).unwrap();
    assert_eq!(all.len(), 202);
    assert!(fs.readdir_until(ROOT_INO, end, 10, end).unwrap().is_empty());
    assert!(!fs.readdir(ROOT_INO, end, 10).unwrap().is_empty());
}

#[test]
fn readdir_cookies_are_stable() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    for i in 0..300 {
        fs.create(ROOT_INO, format!("n{i:03}").as_bytes(), 0o644, ME)
            .unwrap();
    }
    let first = fs.readdir(ROOT_INO, 0, 100).unwrap();
    assert_eq!(first[0].name, b".");
    assert_eq!(first[1].name, b"..");
    // delete entries not yet listed and some already listed; continue from the cookie
    for i in (0..300).step_by(3) {
        fs.unlink(ROOT_INO, format!("n{i:03}").as_bytes()).unwrap();
    }
    let mut seen: Vec<Vec<u8>> = first.iter().map(|e| e.name.clone()).collect();
    let mut off = first.last().unwrap().offset;
    loop {
        let next = fs.readdir(ROOT_INO, off, 50).unwrap();
        if next.is_empty() {
            break;
        }
        off = next.last().unwrap().offset;
        seen.extend(next.into_iter().map(|e| e.name));
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "no entry twice");
    for i in 0..300 {
        if i % 3 != 0 {
            assert!(
                seen.contains(&format!("n{i:03}").into_bytes()),
                "kept entry n{i:03} listed"
            );
        }
    }
}

#[test]
fn xattr_semantics() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    let create = XattrFlags {
        create: true,
        replace: false,
    };
    let replace = XattrFlags {
        create: false,
        replace: true,
    };
    assert!(matches!(
        fs.setxattr(f, b"user.a", b"1", replace),
        Err(FsError::NoAttr)
    ));
    fs.setxattr(f, b"user.a", b"1", create).unwrap();
    assert!(matches!(
        fs.setxattr(f, b"user.a", b"2", create),
        Err(FsError::Exists)
    ));
    fs.setxattr(f, b"user.a", b"2", replace).unwrap();
    fs.setxattr(f, b"user.b", &[7u8; 1000], XattrFlags::default())
        .unwrap();
    // larger than 64 KiB: refused; larger than XATTR_MAX_BLOCKS blocks in all: no space
    assert!(matches!(
        fs.setxattr(f, b"user.c", &[7u8; 65537], XattrFlags::default()),
        Err(FsError::Range)
    ));
    for i in 0..3 {
        fs.setxattr(
            f,
            format!("user.big{i}").as_bytes(),
            &[i; 65536],
            XattrFlags::default(),
        )
        .unwrap();
    }
    assert!(matches!(
        fs.setxattr(f, b"user.big3", &[7u8; 65536], XattrFlags::default()),
        Err(FsError::NoSpace)
    ));
    for i in 0..3 {
        fs.removexattr(f, format!("user.big{i}").as_bytes())
            .unwrap();
    }
    assert_eq!(
        fs.listxattr(f).unwrap(),
        vec![b"user.a".to_vec(), b"user.b".to_vec()]
    );
    fs.removexattr(f, b"user.a").unwrap();
    assert!(matches!(fs.getxattr(f, b"user.a"), Err(FsError::NoAttr)));
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

/// What xfstests asks of a FUSE file system (generic/020): a thousand attributes on one
/// file and a 64 KiB value, across remounts, growing and shrinking over continuation blocks
/// whose space comes back.
#[test]
fn many_and_large_xattrs_span_blocks() {
    let dev = new_dev(32 << 20);
    let fs = mount(&dev);
    let free0 = fs.statfs().free_blocks;
    let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    let name = |i: usize| format!("user.attribute_{i}").into_bytes();
    for i in 0..1000 {
        fs.setxattr(
            f,
            &name(i),
            format!("value {i}").as_bytes(),
            XattrFlags::default(),
        )
        .unwrap();
    }
    let big: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    fs.setxattr(d, b"user.big", &big, XattrFlags::default())
        .unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    assert_eq!(fs.listxattr(f).unwrap().len(), 1000);
    assert_eq!(fs.getxattr(f, &name(777)).unwrap(), b"value 777");
    assert_eq!(fs.getxattr(d, b"user.big").unwrap(), big);
    // shrink back into one block, then drop everything
    for i in 5..1000 {
        fs.removexattr(f, &name(i)).unwrap();
    }
    fs.removexattr(d, b"user.big").unwrap();
    fs.sync().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    assert_eq!(fs.listxattr(f).unwrap().len(), 5);
    assert!(fs.listxattr(d).unwrap().is_empty());
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.sync().unwrap();
    fs.sync().unwrap();
    fs.sync().unwrap();
    // every xattr block came back (the directory keeps its one entry block)
    assert_eq!(fs.statfs().free_blocks + 1, free0);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn corrupt_images_are_refused_cleanly() {
    // not moafs at all
    let dev = std::sync::Arc::new(moafs_core::device::MemDevice::from_bytes(vec![
        0x5a;
        2 << 20
    ]));
    let e = moafs_core::Fs::mount(dev.clone(), Default::default())
        .err()
        .expect("refused");
    assert!(matches!(e, FsError::NotMoafs { .. }), "{e}");
    // a flipped bit in the root inode
    let dev = new_dev(8 << 20);
    let geo = moafs_core::recovery::read_superblock(dev.as_ref())
        .map(|sb| moafs_core::format::Geometry::from_superblock(&sb))
        .unwrap();
    let mut img = dev.snapshot();
    let (blk, off) = geo.inode_location(1);
    img[(blk * 4096) as usize + off + 20] ^= 0x10;
    let bad = std::sync::Arc::new(moafs_core::device::MemDevice::from_bytes(img));
    let e = moafs_core::Fs::mount(bad.clone(), Default::default())
        .err()
        .expect("refused");
    assert!(matches!(e, FsError::Corrupt { .. }), "{e}");
    let r = moafs_core::fsck::fsck(bad.as_ref(), false).unwrap();
    assert!(!r.errors.is_empty());
}

#[test]
fn many_entries_in_one_directory() {
    let dev = new_dev(400 << 20);
    let fs = mount(&dev);
    let d = fs.mkdir(ROOT_INO, b"big", 0o755, ME).unwrap().ino;
    for i in 0..20_000 {
        fs.mknod(
            d,
            format!("entry-{i:06}").as_bytes(),
            libc::S_IFIFO | 0o644,
            0,
            ME,
        )
        .unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    assert!(fs.lookup(d, b"entry-019999").is_ok());
    assert_eq!(fs.lookup(d, b"entry-000007").unwrap().kind, FileKind::Fifo);
    let mut n = 0;
    let mut off = 0;
    loop {
        let v = fs.readdir(d, off, 1000).unwrap();
        if v.is_empty() {
            break;
        }
        off = v.last().unwrap().offset;
        n += v.len();
    }
    assert_eq!(n, 20_002);
}

#[test]
fn sparse_file_beyond_one_tebibyte() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"huge", 0o644, ME).unwrap().ino;
    let at = (1u64 << 40) + 12345; // 1 TiB: reached through the triple-indirect block
    fs.write(f, at, b"far away").unwrap();
    fs.write(f, 0, b"near").unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    assert_eq!(fs.getattr(f).unwrap().size, at + 8);
    assert_eq!(fs.read(f, at, 100).unwrap(), b"far away");
    assert_eq!(fs.read(f, at - 4, 4).unwrap(), vec![0u8; 4]);
    assert_eq!(fs.read(f, 0, 4).unwrap(), b"near");
    // beyond the largest file the block map can address: EFBIG, not a panic
    assert!(matches!(
        fs.write(f, u64::MAX - 10, b"x"),
        Err(FsError::FileTooBig)
    ));
    assert!(matches!(
        fs.write(f, 5 << 40, b"x"),
        Err(FsError::FileTooBig)
    ));
    fs.setattr(
        f,
        &SetAttr {
            size: Some(10),
            ..Default::default()
        },
    )
    .unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn sixteen_kib_blocks() {
    use moafs_core::mkfs::{mkfs, MkfsOptions};
    let dev = std::sync::Arc::new(moafs_core::device::MemDevice::new(64 << 20));
    let opts = MkfsOptions {
        block_size: 16384,
        groups: Some(5),
        ..Default::default()
    };
    mkfs(dev.as_ref(), &opts).unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 241) as u8).collect();
    {
        let fs = mount(&dev);
        assert_eq!(fs.geometry().block_size, 16384);
        assert_eq!(fs.geometry().group_count, 5);
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
        let f = fs.create(d, b"f", 0o644, ME).unwrap().ino;
        fs.write(f, 0, &data).unwrap();
        fs.unmount().unwrap();
    }
    fsck_clean(&dev);
    let fs = mount(&dev);
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    let f = fs.lookup(d, b"f").unwrap().ino;
    assert_eq!(fs.read(f, 0, 2_000_000).unwrap(), data);
}

#[test]
fn geometry_limits() {
    use moafs_core::mkfs::{plan, MkfsOptions};
    let four = MkfsOptions::default();
    let g = plan(16 << 40, &four).expect("16 TiB with 4 KiB blocks");
    assert_eq!(g.total_blocks, 1 << 32);
    assert!(
        plan((16 << 40) + 4096, &four).is_err(),
        "more than 2^32 blocks is refused"
    );
    let sixteen = MkfsOptions {
        block_size: 16384,
        ..Default::default()
    };
    assert_eq!(plan(64 << 40, &sixteen).unwrap().total_blocks, 1 << 32);
    assert!(plan(512 << 10, &four).is_err(), "too small");
    assert!(plan(
        1 << 30,
        &MkfsOptions {
            block_size: 8192,
            ..Default::default()
        }
    )
    .is_err());
    assert!(plan(
        1 << 30,
        &MkfsOptions {
            groups: Some(0),
            ..Default::default()
        }
    )
    .is_err());
}

#[test]
fn read_into_matches_read_with_holes_cache_and_eof() {
    let dev = new_dev(64 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"sparse", 0o644, ME).unwrap().ino;
    let pat = |off: u64, n: usize| -> Vec<u8> {
        (0..n)
            .map(|i| ((off as usize + i) * 13 % 251) as u8 + 1)
            .collect()
    };
    // data, a hole of several blocks, data, a hole up to the end (size set by truncate)
    fs.write(f, 0, &pat(0, 10_000)).unwrap();
    fs.write(f, 50_000, &pat(50_000, 20_000)).unwrap();
    let size = 200_000u64;
    fs.setattr(
        f,
        &SetAttr {
            size: Some(size),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let check = |fs: &moafs_core::Fs, what: &str| {
        for (off, len) in [
            (0u64, 4096usize),
            (4000, 9000),
            (9_999, 45_000),
            (45_000, 30_000),
            (0, 300_000),
            (199_990, 64),
            (size, 10),
            (size + 5000, 10),
        ] {
            let want = fs.read(f, off, len as u32).unwrap();
            // a buffer full of garbage: holes must come back as zeros
            let mut buf = vec![0xEEu8; len];
            let n = fs.read_into(f, off, &mut buf).unwrap();
            assert_eq!(n, want.len(), "{what}: length at {off}+{len}");
            assert_eq!(&buf[..n], &want[..], "{what}: bytes at {off}+{len}");
            assert_eq!(n as u64, size.saturating_sub(off).min(len as u64));
        }
    };
    check(&fs, "cached");
    fs.unmount().unwrap();
    let fs = mount(&dev);
    check(&fs, "from the device");
    let all = fs.read(f, 0, size as u32).unwrap();
    assert_eq!(&all[..10_000], &pat(0, 10_000)[..]);
    assert!(all[10_000..50_000].iter().all(|&b| b == 0));
    assert_eq!(&all[50_000..70_000], &pat(50_000, 20_000)[..]);
    assert!(all[70_000..].iter().all(|&b| b == 0));
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

#[test]
fn drop_caches_writes_back_and_the_next_reads_come_from_the_device() {
    let dev = new_dev(64 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 253) as u8).collect();
    fs.write(f, 0, &data).unwrap();
    // dirty data is written back first, then every block leaves the cache
    let dropped = fs.drop_caches().unwrap();
    assert_eq!(dropped, 100_000u64.div_ceil(4096));
    // (home, or in the transaction of a small commit)
    let c = fs.counters();
    assert!(c.data_blocks_written + c.data_blocks_journaled >= dropped);
    let reads = fs.device_counters().reads;
    let misses = fs.counters().cache_misses;
    assert_eq!(fs.read(f, 0, 100_000).unwrap(), data);
    assert!(fs.device_counters().reads > reads, "read from the device");
    assert!(fs.counters().cache_misses > misses);
    // reads do not fill the block cache (the kernel's page cache holds read data): nothing
    // is left to drop
    assert_eq!(fs.drop_caches().unwrap(), 0);
    // an inode nobody holds leaves memory too, and comes back whole from the image
    fs.forget(f, 1);
    fs.drop_caches().unwrap();
    let again = fs.lookup(ROOT_INO, b"f").unwrap();
    assert_eq!((again.ino, again.size), (f, 100_000));
    assert_eq!(fs.read(f, 0, 100_000).unwrap(), data);
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

#[test]
fn layout_score_and_free_runs() {
    use moafs_core::fsck::{free_runs_in, layout, FreeRuns, Layout};
    // known values
    let mut l = Layout::default();
    l.add_file(&[(0, 10), (1, 11), (2, 12)]); // contiguous: 2 of 2
    l.add_file(&[(0, 10), (1, 20), (2, 21)]); // 1 of 2
    l.add_file(&[(0, 30), (2, 32)]); // a hole between: 0 of 1
    l.add_file(&[(0, 40)]); // one block: not scored
    assert_eq!((l.files, l.blocks, l.contiguous), (3, 5, 3));
    // bitmap 0b1110_0100 0b0000_0001 ... : free runs in [0, 16)
    let mut f = FreeRuns::default();
    free_runs_in(&[0b1110_0100, 0b0000_0001], 0, 16, &mut f);
    // free: 0,1 | 3,4 | 9..15 (bit 8 used)
    assert_eq!((f.runs, f.free_blocks, f.largest), (3, 11, 7));
    assert_eq!(f.histogram, vec![(2, 2), (4, 1)]);

    // on a file system: one file written at once is contiguous; two files grown in turns,
    // each step committed, interleave on the device
    let dev = new_dev(64 << 20);
    let fs = mount(&dev);
    let whole = fs.create(ROOT_INO, b"whole", 0o644, ME).unwrap().ino;
    fs.write(whole, 0, &vec![7u8; 10 * 4096]).unwrap();
    fs.sync().unwrap();
    fs.unmount().unwrap();
    let (l, free) = layout(dev.as_ref()).unwrap();
    assert_eq!((l.files, l.blocks, l.contiguous), (1, 9, 9));
    assert_eq!(l.score, 1.0);
    assert!(free.free_blocks > 0 && free.largest > 0);
    let fs = mount(&dev);
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", 0o644, ME).unwrap().ino;
    for i in 0..8u64 {
        fs.write(a, i * 4096, &[1u8; 4096]).unwrap();
        fs.sync().unwrap();
        fs.write(b, i * 4096, &[2u8; 4096]).unwrap();
        fs.sync().unwrap();
    }
    fs.unmount().unwrap();
    let (l2, free2) = layout(dev.as_ref()).unwrap();
    assert_eq!(l2.files, 3);
    assert!(l2.score < 1.0 && l2.contiguous < l2.blocks, "{l2:?}");
    // 16 data blocks (each file's eight one-block extents fit its inode)
    assert_eq!(
        free2.free_blocks + 16,
        free.free_blocks,
        "16 more blocks in use"
    );
    fsck_clean(&dev);
}

/// generic/103: a file as large as statfs calls available can be made (its indirect blocks
/// included), and commits afterwards; a second one then finds no space, at the call.
#[test]
fn fallocate_fills_what_statfs_calls_available() {
    let dev = new_dev(96 << 20);
    let fs = mount(&dev);
    for i in 0..64 {
        fs.create(ROOT_INO, format!("t{i}").as_bytes(), 0o644, ME)
            .unwrap();
    }
    let f = fs.create(ROOT_INO, b"spc", 0o644, ME).unwrap().ino;
    let avail = fs.statfs().avail_blocks;
    fs.fallocate(f, 0, avail * 4096, 0).unwrap();
    fs.sync().unwrap();
    let g = fs.create(ROOT_INO, b"more", 0o644, ME).unwrap().ino;
    let left = fs.statfs().avail_blocks;
    assert!(
        left < avail / 100,
        "{left} of {avail} blocks still available"
    );
    assert!(matches!(
        fs.fallocate(g, 0, (left + 1) * 4096, 0),
        Err(FsError::NoSpace)
    ));
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

/// A ZERO_RANGE that grows the file past more holes than `journal=data` carries in one
/// transaction commits between its batches: a crash then shows the file as it was or as it
/// ends, never its old size with the range already zeroed (the crash harness found that
/// torn state; the size is now set before the holes are filled).
#[test]
fn a_zero_range_committed_in_batches_is_never_torn_at_a_crash() {
    use std::sync::Arc;
    let dev = new_dev_journal(64 << 20, Some(256)); // a data share of 64 blocks
    let opts = moafs_core::fs::MountOptions {
        journal: moafs_core::fs::JournalMode::Data,
        ..Default::default()
    };
    let fs = mount_with(&dev, opts.clone());
    let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    fs.write(f, 0, &[0xab; 8192]).unwrap();
    fs.sync().unwrap();
    let len = 200 * 4096u64; // 200 holes past the end
    fs.fallocate(f, 4096, len, libc::FALLOC_FL_ZERO_RANGE)
        .unwrap();
    // the crash: the device as the fallocate left it, nothing committed after it
    let crashed = Arc::new(moafs_core::device::MemDevice::from_bytes(dev.snapshot()));
    let fs2 = mount_with(&crashed, opts);
    let size = fs2.getattr(f).unwrap().size;
    let got = fs2.read(f, 0, (4096 + len) as u32 + 10).unwrap();
    let mut after = vec![0xab; 4096];
    after.resize((4096 + len) as usize, 0);
    assert!(
        got == [0xab; 8192] || got == after,
        "size {size}: a torn ZERO_RANGE (first zero byte at {:?})",
        got.iter().position(|b| *b == 0)
    );
    assert_ne!(
        got,
        vec![0xab; 8192],
        "no commit in batches: the test tests nothing"
    );
    fs2.unmount().unwrap();
    drop(fs);
}

/// FALLOC_FL_ZERO_RANGE: the range reads as zeros (partial blocks at both edges included),
/// the rest keeps its bytes, the size grows past the end unless KEEP_SIZE; across a remount.
#[test]
fn fallocate_zero_range() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    let data: Vec<u8> = (0..5 * 4096u32).map(|i| (i % 251 + 1) as u8).collect();
    fs.write(f, 0, &data).unwrap();
    fs.sync().unwrap();
    let mut want = data.clone();
    want[1000..14_000].fill(0);
    fs.fallocate(f, 1000, 13_000, libc::FALLOC_FL_ZERO_RANGE)
        .unwrap();
    assert_eq!(fs.read(f, 0, 30_000).unwrap(), want);
    // past the end: KEEP_SIZE keeps the size, without it the file grows (zeros)
    fs.fallocate(
        f,
        20_000,
        10_000,
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 5 * 4096);
    want[20_000..].fill(0);
    fs.fallocate(f, 20_000, 10_000, libc::FALLOC_FL_ZERO_RANGE)
        .unwrap();
    want.resize(30_000, 0);
    assert_eq!(fs.getattr(f).unwrap().size, 30_000);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    assert_eq!(fs.read(f, 0, 40_000).unwrap(), want);
    // still refused: the modes moafs does not have
    assert!(matches!(
        fs.fallocate(f, 0, 4096, libc::FALLOC_FL_COLLAPSE_RANGE),
        Err(FsError::NotSupported)
    ));
    fs.unmount().unwrap();
}

/// RENAME_WHITEOUT (overlayfs): the file moves and a character device 0:0 takes its old name,
/// in one step; with NOREPLACE an existing target refuses it and nothing changes.
#[test]
fn rename_with_whiteout() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).unwrap().ino;
    fs.write(a, 0, b"payload").unwrap();
    fs.create(ROOT_INO, b"taken", 0o644, ME).unwrap();
    assert!(matches!(
        fs.rename_whiteout(ROOT_INO, b"a", ROOT_INO, b"taken", true, ME),
        Err(FsError::Exists)
    ));
    assert_eq!(fs.lookup(ROOT_INO, b"a").unwrap().ino, a);
    fs.rename_whiteout(ROOT_INO, b"a", ROOT_INO, b"b", true, ME)
        .unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    let b = fs.lookup(ROOT_INO, b"b").unwrap();
    assert_eq!(b.ino, a);
    assert_eq!(fs.read(a, 0, 100).unwrap(), b"payload");
    let w = fs.lookup(ROOT_INO, b"a").unwrap();
    assert_eq!(w.kind, FileKind::CharDevice);
    assert_eq!((w.rdev, w.perm & 0o7777), (0, 0));
    fs.unmount().unwrap();
}

#[test]
fn read_follows_tells_a_stream_from_a_random_read() {
    let dev = new_dev(64 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
    fs.write(f, 0, &vec![5u8; 24 << 20]).unwrap();
    assert_eq!(fs.read(f, 0, 1 << 20).unwrap().len(), 1 << 20);
    // the next request of the stream, and one a readahead window further on
    assert_eq!(fs.read_follows(f, 1 << 20), Some(true));
    assert_eq!(fs.read_follows(f, 3 << 20), Some(true));
    // a read far from where the last one ended
    assert_eq!(fs.read_follows(f, 16 << 20), Some(false));
    fs.read(f, 16 << 20, 256 << 10).unwrap();
    assert_eq!(fs.read_follows(f, (16 << 20) + (256 << 10)), Some(true));
    assert_eq!(fs.read_follows(f, 0), Some(false));
    // an inode not in memory: not known
    assert_eq!(fs.read_follows(999_999, 0), None);
    fs.unmount().unwrap();
}

/// A symbolic link's target is set when it is made: a write, truncate or fallocate of the
/// link itself is refused (EINVAL) and the target stays what it was.
#[test]
fn a_symlinks_target_is_not_written_as_data() {
    let dev = new_dev(16 << 20);
    let fs = mount(&dev);
    let l = fs.symlink(ROOT_INO, b"l", b"target", ME).expect("symlink");
    let e = fs
        .write(l.ino, 0, &[1u8; 5000])
        .expect_err("write to a link");
    assert_eq!(e.to_errno(), libc::EINVAL);
    let set = SetAttr {
        size: Some(1 << 20),
        ..Default::default()
    };
    assert_eq!(
        fs.setattr(l.ino, &set).unwrap_err().to_errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.fallocate(l.ino, 0, 1 << 20, 0).unwrap_err().to_errno(),
        libc::EINVAL
    );
    assert_eq!(fs.readlink(l.ino).unwrap(), b"target");
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

#[test]
fn a_shutdown_keeps_what_it_promised_and_nothing_more_reaches_the_device() {
    use moafs_core::fs::ShutdownFlush;
    for flush in [
        ShutdownFlush::All,
        ShutdownFlush::Log,
        ShutdownFlush::Nothing,
    ] {
        let dev = new_dev(64 << 20);
        let fs = mount(&dev);
        let synced = fs.create(ROOT_INO, b"synced", 0o644, ME).unwrap().ino;
        fs.write(synced, 0, b"durable").unwrap();
        fs.fsync(synced, false).unwrap();
        let later = fs.create(ROOT_INO, b"later", 0o644, ME).unwrap().ino;
        fs.write(later, 0, &[9u8; 20_000]).unwrap();
        fs.shutdown(flush).unwrap();
        assert!(fs.is_shut_down());
        let frozen = dev.counters();
        // every operation fails with EIO, a second shutdown is no error
        let eio = |r: Result<(), FsError>| assert_eq!(r.unwrap_err().to_errno(), libc::EIO);
        eio(fs.lookup(ROOT_INO, b"synced").map(|_| ()));
        eio(fs.getattr(synced).map(|_| ()));
        eio(fs.read(synced, 0, 10).map(|_| ()));
        eio(fs.write(synced, 0, b"x").map(|_| ()));
        eio(fs.create(ROOT_INO, b"new", 0o644, ME).map(|_| ()));
        eio(fs.readdir(ROOT_INO, 0, 10).map(|_| ()));
        eio(fs.fsync(later, false));
        eio(fs.sync());
        fs.shutdown(ShutdownFlush::All).unwrap();
        fs.forget(later, 1);
        assert!(!fs.tick().unwrap());
        fs.unmount().unwrap();
        drop(fs);
        assert_eq!(
            dev.counters(),
            frozen,
            "{flush:?}: the device saw requests after the shutdown"
        );
        fsck_clean(&dev);
        let fs = mount(&dev);
        let a = fs.lookup(ROOT_INO, b"synced").unwrap();
        assert_eq!(fs.read(a.ino, 0, 100).unwrap(), b"durable");
        match fs.lookup(ROOT_INO, b"later") {
            Ok(a) => {
                assert_ne!(flush, ShutdownFlush::Nothing, "not promised, yet durable");
                assert_eq!(fs.read(a.ino, 0, 30_000).unwrap(), vec![9u8; 20_000]);
            }
            Err(e) => {
                assert_eq!(
                    flush,
                    ShutdownFlush::Nothing,
                    "{flush:?} lost a change: {e}"
                );
            }
        }
        fs.unmount().unwrap();
        fsck_clean(&dev);
    }
}

/// xfstests generic/449: on a full file system an access ACL that cannot be stored is refused
/// and leaves the mode as it was (the mode follows an ACL only once it is kept).
#[test]
fn an_acl_refused_for_space_leaves_the_mode() {
    let dev = new_dev(4 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"f", 0o700, ME).unwrap().ino;
    let chunk = vec![1u8; 64 << 10];
    let mut off = 0;
    while fs.write(f, off, &chunk).is_ok() {
        off += chunk.len() as u64;
    }
    // fill the last blocks with xattrs until none fits
    let mut i = 0;
    while fs
        .setxattr(
            f,
            format!("user.{i}").as_bytes(),
            &[b'a'; 1024],
            XattrFlags::default(),
        )
        .is_ok()
    {
        i += 1;
    }
    // user::rwx group::--- mask::r-- other::--- (an extended ACL: it must be stored)
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm) in [(0x01u16, 7u16), (0x04, 0), (0x10, 4), (0x20, 0)] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    let before = fs.getattr(f).unwrap().perm;
    let r = fs.setxattr(f, moafs_core::fs::acl::ACCESS, &acl, XattrFlags::default());
    assert!(matches!(r, Err(FsError::NoSpace)), "{r:?}");
    assert_eq!(fs.getattr(f).unwrap().perm, before, "the mode changed");
    fs.check_invariants().unwrap();
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

/// xfstests generic/468: st_blocks does not change when the commit allocates what a write or
/// fallocate reserved — the indirect blocks that will map the data count at once.
#[test]
fn block_counts_do_not_change_at_commit() {
    let dev = new_dev(512 << 20);
    let fs = mount(&dev);
    for (len, falloc) in [
        (1024u64, 1024u64),
        (4202496, 4096),
        (4202496, 104857600),
        (0, 30 << 20),
    ] {
        let f = fs.create(ROOT_INO, b"f", 0o644, ME).unwrap().ino;
        fs.write(f, 0, &vec![5u8; len as usize]).unwrap();
        fs.fsync(f, false).unwrap();
        fs.fallocate(f, len, falloc, 0).unwrap();
        let before = fs.getattr(f).unwrap().blocks_512;
        fs.fsync(f, false).unwrap();
        let after = fs.getattr(f).unwrap().blocks_512;
        assert_eq!(before, after, "{len} + fallocate {falloc}");
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.forget(f, 1);
    }
    fs.check_invariants().unwrap();
}

/// Sparse random writes into large files until the file system is full: every write either
/// succeeds or says ENOSPC, and the commits that allocate the indirect blocks never fail
/// (the file system would turn read-only), also beside fallocates of everything and
/// truncates. xfstests generic/299's pattern.
#[test]
fn sparse_writes_near_full_never_fail_a_commit() {
    let dev = new_dev(64 << 20);
    let fs = mount(&dev);
    let files: Vec<u64> = (0..4)
        .map(|i| {
            fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, ME)
                .unwrap()
                .ino
        })
        .collect();
    let chunk = vec![3u8; 128 << 10];
    let mut x: u64 = 12345;
    let mut nospace = 0;
    for round in 0..4000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let f = files[(x >> 60) as usize % 4];
        let off = ((x >> 20) % (1 << 20)) * (128 << 10); // anywhere in 128 GiB
        match fs.write(f, off, &chunk) {
            Ok(_) => {}
            Err(FsError::NoSpace) => nospace += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        if round % 7 == 0 {
            match fs.fallocate(files[(x >> 40) as usize % 4], 0, 64 << 20, 0) {
                Ok(()) | Err(FsError::NoSpace) => {}
                Err(e) => panic!("round {round}: fallocate: {e}"),
            }
        }
        if round % 101 == 0 {
            let set = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            if let Err(e) = fs.setattr(files[(x >> 30) as usize % 4], &set) {
                panic!("round {round}: truncate: {e}");
            }
        }
        if round % 50 == 0 {
            if let Err(e) = fs.sync() {
                panic!("round {round}: sync: {e}");
            }
        }
    }
    assert!(nospace > 0, "the file system never filled up");
    fs.sync().unwrap();
    fs.check_invariants().unwrap();
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

/// A read-only mount's options, with or without `norecovery`.
fn read_only(no_recovery: bool) -> moafs_core::fs::MountOptions {
    moafs_core::fs::MountOptions {
        read_only: true,
        no_recovery,
        ..Default::default()
    }
}

/// `norecovery` (with `ro`): the image as it lies — a transaction committed but not yet
/// written home is not shown, and nothing is written; `ro` alone shows it (replayed through
/// an overlay), and a read-write mount replays it for good.
#[test]
fn norecovery_shows_the_image_as_it_lies_and_writes_nothing() {
    use moafs_core::fs::ShutdownFlush;
    let dev = new_dev(32 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"committed", 0o644, ME).unwrap();
    fs.write(f.ino, 0, b"in the journal").unwrap();
    // durable in the journal, then down as in a power cut: the checkpoint never ran
    fs.shutdown(ShutdownFlush::All).unwrap();
    drop(fs);
    let before = dev.counters().writes;
    let raw = mount_with(&dev, read_only(true));
    assert!(matches!(
        raw.lookup(ROOT_INO, b"committed"),
        Err(FsError::NotFound)
    ));
    drop(raw);
    let replayed = mount_with(&dev, read_only(false));
    let ino = replayed.lookup(ROOT_INO, b"committed").unwrap().ino;
    assert_eq!(replayed.read(ino, 0, 100).unwrap(), b"in the journal");
    drop(replayed);
    assert_eq!(dev.counters().writes, before, "a read-only mount wrote");
    let fs = mount(&dev);
    assert!(fs.lookup(ROOT_INO, b"committed").is_ok());
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

/// `remount,rw` of a read-only mount (`Fs::make_writable`): after a crash the read-only
/// mount shows the journal's and the byte log's replay and writes nothing; made writable it
/// writes that replay home, frees the crash's orphan, and takes writes on the inodes it had
/// handed out — all of it there at the next mount, fsck clean. A `norecovery` mount stays
/// read-only.
#[test]
fn a_read_only_mount_becomes_writable_in_place() {
    use moafs_core::fs::ShutdownFlush;
    let dev = new_dev(32 << 20);
    let fs = mount(&dev);
    let f = fs.create(ROOT_INO, b"committed", 0o644, ME).unwrap().ino;
    fs.write(f, 0, &[b'a'; 10_000]).unwrap();
    fs.sync().unwrap();
    // a small overwrite made durable by fsync (the byte log's record), and an orphan
    fs.write(f, 100, b"fsynced").unwrap();
    fs.fsync(f, true).unwrap();
    let o = fs.create(ROOT_INO, b"orphan", 0o644, ME).unwrap().ino;
    fs.write(o, 0, &[b'o'; 50_000]).unwrap();
    fs.open(o).unwrap();
    fs.unlink(ROOT_INO, b"orphan").unwrap();
    fs.shutdown(ShutdownFlush::All).unwrap();
    drop(fs);
    let raw = mount_with(&dev, read_only(true));
    assert_eq!(raw.make_writable().unwrap_err().to_errno(), libc::EROFS);
    assert!(raw.create(ROOT_INO, b"x", 0o644, ME).is_err());
    drop(raw);
    let before = dev.counters().writes;
    let fs = mount_with(&dev, read_only(false));
    let ino = fs.lookup(ROOT_INO, b"committed").unwrap().ino;
    assert_eq!(fs.read(ino, 100, 7).unwrap(), b"fsynced");
    let free_ro = fs.statfs().free_blocks;
    assert_eq!(
        fs.create(ROOT_INO, b"x", 0o644, ME).unwrap_err().to_errno(),
        libc::EROFS
    );
    assert_eq!(dev.counters().writes, before, "a read-only mount wrote");
    fs.make_writable().unwrap();
    fs.make_writable().unwrap(); // writable already: nothing to do
    assert!(dev.counters().writes > before, "the replay went home");
    assert!(fs.statfs().free_blocks > free_ro, "the orphan was freed");
    fs.write(ino, 0, b"after the remount").unwrap();
    let n = fs.create(ROOT_INO, b"new", 0o644, ME).unwrap().ino;
    fs.write(n, 0, b"new file").unwrap();
    fs.fsync(n, false).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = mount(&dev);
    let ino = fs.lookup(ROOT_INO, b"committed").unwrap().ino;
    let got = fs.read(ino, 0, 10_000).unwrap();
    assert_eq!(&got[..17], b"after the remount");
    assert_eq!(&got[100..107], b"fsynced");
    assert!(got[107..].iter().all(|&b| b == b'a'));
    let n = fs.lookup(ROOT_INO, b"new").unwrap().ino;
    assert_eq!(fs.read(n, 0, 100).unwrap(), b"new file");
    assert!(matches!(
        fs.lookup(ROOT_INO, b"orphan"),
        Err(FsError::NotFound)
    ));
    fs.unmount().unwrap();
}

/// The label online: set, durable at once in the primary and the backup superblocks (a
/// mount whose primary is destroyed still reads it), refused when too long, with a NUL, or
/// on a read-only mount.
#[test]
fn label_is_set_online_and_reaches_the_backups() {
    use moafs_core::fs::MountOptions;
    use moafs_core::recovery::read_superblock;
    use std::sync::Arc;
    let dev = new_dev(160 << 20); // two groups: a backup superblock in the second
    let fs = mount(&dev);
    assert_eq!(fs.label().unwrap(), b"");
    fs.set_label(b"photos 2026").unwrap();
    assert_eq!(fs.label().unwrap(), b"photos 2026");
    let einval = |r: Result<(), FsError>| assert_eq!(r.unwrap_err().to_errno(), libc::EINVAL);
    einval(fs.set_label(&[b'x'; 33]));
    einval(fs.set_label(b"a\0b"));
    fs.set_label(&[b'm'; 32]).unwrap();
    fs.set_label(b"final").unwrap();
    // durable when set: the image read as it lies (no unmount) has it
    let mut image = vec![0u8; 160 << 20];
    dev.read_at(0, &mut image).unwrap();
    let snap = Arc::new(moafs_core::device::MemDevice::new(160 << 20));
    snap.write_at(0, &image).unwrap();
    let ro = moafs_core::Fs::mount(
        snap.clone() as Arc<dyn BlockDevice>,
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    assert_eq!(ro.label().unwrap(), b"final");
    assert_eq!(ro.set_label(b"no").unwrap_err().to_errno(), libc::EROFS);
    drop(ro);
    // once written home (checkpoint), the backups carry it too: with the primary damaged (a
    // byte of its label: its checksum fails) the backup is read, and has the new label
    fs.checkpoint().unwrap();
    dev.read_at(0, &mut image).unwrap();
    image[120] ^= 0xff;
    snap.write_at(0, &image).unwrap();
    let sb = read_superblock(snap.as_ref()).unwrap();
    assert_eq!(&sb.label[..6], b"final\0");
    fs.unmount().unwrap();
}

/// open(O_TMPFILE): an unnamed file (no entry, link count 0) that `link` may name unless it
/// was made with O_EXCL; one never named is freed when the kernel forgets it, and one left
/// open when the file system goes away is an orphan the next mount frees.
#[test]
fn tmpfile_is_named_by_link_or_freed() {
    let dev = new_dev(64 << 20);
    let data = vec![5u8; 100_000];
    let d;
    {
        let fs = mount(&dev);
        d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
        let used = |fs: &moafs_core::fs::Fs| {
            let s = fs.statfs();
            s.total_inodes - s.free_inodes
        };
        let start = used(&fs);
        let names = |fs: &moafs_core::fs::Fs| {
            let all = fs.readdir(d, 0, 100).unwrap();
            all.iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .count()
        };
        let t = fs.tmpfile(d, 0o600, ME, true).unwrap();
        assert_eq!((t.nlink, t.kind), (0, FileKind::Regular));
        assert_eq!(fs.write(t.ino, 0, &data).unwrap() as usize, data.len());
        assert_eq!(names(&fs), 0);
        assert_eq!(fs.link(t.ino, d, b"named").unwrap().nlink, 1);
        let x = fs.tmpfile(d, 0o600, ME, false).unwrap();
        assert!(matches!(fs.link(x.ino, d, b"excl"), Err(FsError::NotFound)));
        assert!(matches!(
            fs.tmpfile(t.ino, 0o600, ME, true),
            Err(FsError::NotDir)
        ));
        fs.forget(x.ino, 1);
        assert_eq!(
            used(&fs),
            start + 1,
            "the O_EXCL file is freed when forgotten"
        );
        // left open (a kernel reference) at unmount: freed then
        let y = fs.tmpfile(d, 0o600, ME, true).unwrap();
        fs.write(y.ino, 0, &data).unwrap();
        fs.fsync(y.ino, false).unwrap();
        fs.unmount().unwrap();
    }
    fsck_clean(&dev);
    let fs = mount(&dev);
    let a = fs.lookup(d, b"named").unwrap();
    assert_eq!(fs.read(a.ino, 0, data.len() as u32).unwrap(), data);
    let all = fs.readdir(d, 0, 100).unwrap();
    assert_eq!(all.iter().filter(|e| e.name == b"named").count(), 1);
    assert_eq!(
        all.iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .count(),
        1
    );
}

/// Inode flags as ext4 enforces them: an immutable file takes no write, truncation, chmod,
/// xattr, link, unlink or rename, and its directory-mates stay; an append-only file opens
/// for writing only with O_APPEND and loses no name; an immutable directory takes no new
/// entry, an append-only one loses none. Flags moafs would not honour are refused. The
/// flags and the superblock's "flags in use" survive a remount.
#[test]
fn inode_flags_are_enforced_and_durable() {
    use moafs_core::fs::iflags::{OpenIntent, FL_APPEND, FL_IMMUTABLE, FL_NOATIME};
    let dev = new_dev(64 << 20);
    let (d, f, a);
    let eperm = |r: Result<(), FsError>| assert!(matches!(r, Err(FsError::NotPermitted)), "{r:?}");
    {
        let fs = mount(&dev);
        assert!(!fs.inode_flags_in_use());
        d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
        f = fs.create(d, b"f", 0o644, ME).unwrap().ino;
        a = fs.create(d, b"a", 0o644, ME).unwrap().ino;
        fs.write(f, 0, b"fixed").unwrap();
        fs.write(a, 0, b"log\n").unwrap();
        assert!(matches!(
            fs.set_inode_flags(f, 0x8),
            Err(FsError::NotSupported)
        ));
        fs.set_inode_flags(f, FL_IMMUTABLE | FL_NOATIME).unwrap();
        assert!(fs.inode_flags_in_use());
        fs.set_inode_flags(a, FL_APPEND).unwrap();
        let write = OpenIntent {
            write: true,
            ..Default::default()
        };
        let append = OpenIntent {
            write: true,
            append: true,
            truncate: false,
        };
        let trunc = OpenIntent {
            write: true,
            append: true,
            truncate: true,
        };
        eperm(fs.may_open(f, write));
        eperm(fs.may_open(f, append));
        fs.may_open(f, OpenIntent::default()).unwrap();
        eperm(fs.may_open(a, write));
        eperm(fs.may_open(a, trunc));
        fs.may_open(a, append).unwrap();
        eperm(fs.write(f, 0, b"x").map(drop));
        eperm(fs.fallocate(f, 0, 4096, 0));
        fs.fallocate(a, 0, 8192, libc::FALLOC_FL_KEEP_SIZE).unwrap();
        eperm(fs.fallocate(
            a,
            0,
            4096,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        ));
        for i in [f, a] {
            let chmod = SetAttr {
                mode: Some(0o600),
                ..Default::default()
            };
            eperm(fs.setattr(i, &chmod).map(drop));
            let trunc = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            eperm(fs.setattr(i, &trunc).map(drop));
            eperm(fs.setxattr(i, b"user.k", b"v", XattrFlags::default()));
            eperm(fs.link(i, ROOT_INO, b"other").map(drop));
        }
        let utime = SetAttr {
            atime: Some(moafs_core::fs::TimeOrNow::Now),
            mtime: Some(moafs_core::fs::TimeOrNow::Now),
            ..Default::default()
        };
        eperm(fs.setattr(f, &utime).map(drop));
        fs.setattr(a, &utime).unwrap();
        eperm(fs.unlink(d, b"f"));
        eperm(fs.unlink(d, b"a"));
        eperm(fs.rename(d, b"f", ROOT_INO, b"g", RenameFlags::default()));
        fs.create(d, b"victim", 0o644, ME).unwrap();
        eperm(fs.rename(d, b"victim", d, b"a", RenameFlags::default()));
        // an append-only directory takes entries and loses none
        fs.set_inode_flags(d, FL_APPEND).unwrap();
        fs.create(d, b"new", 0o644, ME).unwrap();
        eperm(fs.unlink(d, b"new"));
        // an immutable one takes none
        fs.set_inode_flags(d, FL_IMMUTABLE).unwrap();
        assert!(matches!(
            fs.create(d, b"newer", 0o644, ME),
            Err(FsError::NotPermitted)
        ));
        assert!(matches!(
            fs.tmpfile(d, 0o644, ME, true),
            Err(FsError::NotPermitted)
        ));
        fs.set_inode_flags(d, 0).unwrap();
        fs.unlink(d, b"new").unwrap();
        fs.unmount().unwrap();
    }
    fsck_clean(&dev);
    let fs = mount(&dev);
    assert!(fs.inode_flags_in_use());
    assert_eq!(fs.inode_flags(f).unwrap(), FL_IMMUTABLE | FL_NOATIME);
    assert_eq!(fs.inode_flags(a).unwrap(), FL_APPEND);
    eperm(fs.unlink(d, b"f"));
    fs.set_inode_flags(f, 0).unwrap();
    fs.write(f, 0, b"FIXED").unwrap();
    fs.unlink(d, b"f").unwrap();
    assert_eq!(fs.read(a, 0, 100).unwrap(), b"log\n");
}

/// The space of a file unlinked after its last close comes back for the next allocation even
/// while the kernel still holds a reference (its FORGET arrives a moment later: after an
/// asynchronous RELEASE): the allocation waits for the FORGET instead of failing with ENOSPC.
/// If no FORGET comes, it fails after the short wait.
#[test]
fn space_of_an_unlinked_file_waits_for_the_kernel_to_forget_it() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let dev = new_dev(64 << 20);
    let opts = moafs_core::fs::MountOptions {
        kernel_lookups: true,
        ..Default::default()
    };
    let fs = Arc::new(mount_with(&dev, opts));
    let chunk = vec![1u8; 1 << 20];
    let fill = |fs: &moafs_core::fs::Fs, ino: u64| {
        let mut off = 0;
        loop {
            match fs.write(ino, off, &chunk) {
                Ok(_) => off += chunk.len() as u64,
                Err(FsError::NoSpace) => return off,
                Err(e) => panic!("{e}"),
            }
        }
    };
    let big = fs.create(ROOT_INO, b"big", 0o644, ME).unwrap().ino;
    let filled = fill(&fs, big);
    assert!(filled > 32 << 20, "{filled}");
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"big").unwrap(); // the kernel still holds its reference
    let next = fs.create(ROOT_INO, b"next", 0o644, ME).unwrap().ino;
    let forgetter = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            fs.forget(big, 1);
        })
    };
    let start = Instant::now();
    fs.write(next, 0, &chunk)
        .expect("the unlinked file's space, once forgotten");
    assert!(
        start.elapsed() >= Duration::from_millis(20),
        "it waited for the FORGET"
    );
    forgetter.join().unwrap();
    // held for good (no FORGET coming): ENOSPC after the short wait, not a hang
    let other = fs.create(ROOT_INO, b"other", 0o644, ME).unwrap().ino;
    fill(&fs, other);
    fs.sync().unwrap();
    fs.unlink(ROOT_INO, b"other").unwrap();
    let start = Instant::now();
    let r = fill(&fs, next);
    assert!(r < 4 << 20, "{r}");
    assert!(start.elapsed() < Duration::from_secs(5));
}
