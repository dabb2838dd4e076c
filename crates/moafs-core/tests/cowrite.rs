//! Co-writing (paper 000): dirty small files of a directory written together, smallest first,
//! one request per free run; overwritten files move; large or partly dirty files do not.

mod common;
use common::{fsck_clean, mount_with, new_dev, ME};
use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::fs::{MountOptions, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::Arc;

const BS: usize = 4096;

/// (`small_commit_blocks: 0`: these tests count co-writing's own data requests; a small
/// commit would carry the data in its transaction instead, `small_commits_place_by_co_writing`.)
fn opts(cowrite: bool) -> MountOptions {
    MountOptions {
        cowrite,
        flush_interval_ms: u64::MAX,
        small_commit_blocks: 0,
        ..MountOptions::default()
    }
}

/// A small commit (the default 64 blocks) carries co-written files in its transaction: the
/// placement is co-writing's (a directory's files one after another), no data request goes
/// out before the transaction, and the checkpoint takes the run home.
#[test]
fn small_commits_place_by_co_writing() {
    let dev = new_dev(64 << 20);
    let fs = mount_with(
        &dev,
        MountOptions {
            flush_interval_ms: u64::MAX,
            checkpoint_interval_ms: u64::MAX,
            ..MountOptions::default()
        },
    );
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    fs.sync().unwrap();
    let before = fs.counters();
    let dev_before = fs.device_counters();
    let files = make_files(&fs, d, "f", &[1000, 3000, 5000, 200]);
    fs.sync().unwrap();
    let c = fs.counters().since(&before);
    assert_eq!(c.cowrite_files, 4, "{c:?}");
    assert_eq!((c.data_write_ios, c.data_blocks_written), (0, 0), "{c:?}");
    assert_eq!(c.data_blocks_journaled, 5, "{c:?}");
    let dc = fs.device_counters().since(&dev_before);
    assert_eq!(
        (dc.writes, dc.flushes),
        (1, 1),
        "one request (the transaction) and one flush"
    );
    let mut addrs: Vec<u64> = files
        .iter()
        .flat_map(|i| fs.block_map(*i).unwrap())
        .collect();
    addrs.sort_unstable();
    assert!(addrs.windows(2).all(|w| w[1] == w[0] + 1), "{addrs:?}");
    fs.checkpoint().unwrap();
    fs.drop_caches().unwrap();
    for (i, len) in files.iter().zip([1000, 3000, 5000, 200]) {
        assert_eq!(fs.read(*i, 0, 8192).unwrap(), content(*i, len));
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = common::mount(&dev);
    for (i, len) in files.iter().zip([1000, 3000, 5000, 200]) {
        assert_eq!(fs.read(*i, 0, 8192).unwrap(), content(*i, len));
    }
}

fn content(ino: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 31 + ino * 7) as u8).collect()
}

/// Creates `sizes.len()` files `f0, f1…` of the given byte sizes in `dir`; returns inodes.
fn make_files(fs: &Fs, dir: u64, prefix: &str, sizes: &[usize]) -> Vec<u64> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let ino = fs
                .create(dir, format!("{prefix}{i}").as_bytes(), 0o644, ME)
                .unwrap()
                .ino;
            fs.write(ino, 0, &content(ino, len)).unwrap();
            ino
        })
        .collect()
}

/// Directories `d0 … d{n-1}` at the root (spread over groups by the directory placement).
fn make_dirs(fs: &Fs, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            fs.mkdir(ROOT_INO, format!("d{i}").as_bytes(), 0o755, ME)
                .unwrap()
                .ino
        })
        .collect()
}

fn check_files(fs: &Fs, files: &[u64], sizes: &[usize]) {
    for (&ino, &len) in files.iter().zip(sizes) {
        assert_eq!(fs.read(ino, 0, len as u32 + 10).unwrap(), content(ino, len));
    }
}

#[test]
fn small_files_of_a_directory_go_out_in_one_request_smallest_first() {
    // 10 files of 1..=3 blocks (21 blocks < N = 32 with 4 KiB blocks and 128 KiB).
    let sizes: Vec<usize> = (0..10).map(|i| [9000, 100, 5000][i % 3] + i).collect();
    for cowrite in [true, false] {
        let dev = new_dev(64 << 20);
        let fs = mount_with(&dev, opts(cowrite));
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
        fs.sync().unwrap();
        let before = fs.counters();
        let files = make_files(&fs, d, "f", &sizes);
        fs.sync().unwrap();
        let c = fs.counters();
        let ios = c.data_write_ios - before.data_write_ios;
        if cowrite {
            assert_eq!(ios, 1, "one request for the directory");
            assert_eq!(c.cowrite_batches, 1);
            assert_eq!(c.cowrite_files, 10);
            assert_eq!(c.cowrite_blocks, 21);
            assert_eq!(c.cowrite_relocated_blocks, 0);
            // Smallest first (then inode order), back to back.
            let mut by_size: Vec<(usize, u64)> = files
                .iter()
                .zip(&sizes)
                .map(|(&ino, &len)| (len.div_ceil(BS), ino))
                .collect();
            by_size.sort();
            let addrs: Vec<u64> = by_size
                .iter()
                .flat_map(|(_, ino)| fs.block_map(*ino).unwrap())
                .collect();
            assert!(
                addrs.windows(2).all(|w| w[1] == w[0] + 1),
                "not contiguous in smallest-first order: {addrs:?}"
            );
        } else {
            assert_eq!(ios, 10, "one request per file");
            assert_eq!(c.cowrite_batches, 0);
        }
        check_files(&fs, &files, &sizes);
        fs.unmount().unwrap();
        fsck_clean(&dev);
        let fs = mount_with(&dev, opts(cowrite));
        check_files(&fs, &files, &sizes);
        fs.unmount().unwrap();
    }
}

#[test]
fn batches_are_split_at_n_blocks_and_per_directory() {
    let dev = new_dev(64 << 20);
    // N = 8 blocks.
    let fs = mount_with(
        &dev,
        MountOptions {
            cowrite_max: 32 << 10,
            ..opts(true)
        },
    );
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, ME).unwrap().ino;
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, ME).unwrap().ino;
    fs.sync().unwrap();
    let before = fs.counters();
    // Interleaved creation in two directories: 20 one-block files in a, 3 in b.
    let mut fa = Vec::new();
    let mut fb = Vec::new();
    for i in 0..20 {
        fa.extend(make_files(&fs, a, &format!("x{i}-"), &[1000]));
        if i < 3 {
            fb.extend(make_files(&fs, b, &format!("y{i}-"), &[1000]));
        }
    }
    fs.sync().unwrap();
    let c = fs.counters();
    // a: 8 + 8 + 4; b: 3.
    assert_eq!(c.cowrite_batches, 4);
    assert_eq!(c.cowrite_files, 23);
    assert_eq!(c.data_write_ios - before.data_write_ios, 4);
    // Each directory's files lie together, after one another across its batches.
    for files in [&fa, &fb] {
        let addrs: Vec<u64> = files.iter().map(|i| fs.block_map(*i).unwrap()[0]).collect();
        assert!(addrs.windows(2).all(|w| w[1] == w[0] + 1), "{addrs:?}");
    }
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

#[test]
fn overwritten_small_files_move_and_their_old_blocks_wait_for_two_commits() {
    let dev = new_dev(64 << 20);
    let fs = mount_with(&dev, opts(true));
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    let fh = make_files(&fs, d, "f", &[2 * BS, BS]);
    let (f, h) = (fh[0], fh[1]);
    fs.sync().unwrap();
    let old = fs.block_map(f).unwrap();
    let old_h = fs.block_map(h).unwrap();
    // A lone rewrite is a write of its own: in place (journaled), not moved.
    fs.write(h, 0, &vec![0x11; BS]).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.block_map(h).unwrap(), old_h);
    assert_eq!(fs.counters().cowrite_relocated_blocks, 0);
    // Two files rewritten entirely: co-written together to a new place.
    fs.write(f, 0, &vec![0xab; 2 * BS]).unwrap();
    fs.write(h, 0, &vec![0xcd; BS]).unwrap();
    fs.sync().unwrap();
    let new = fs.block_map(f).unwrap();
    assert!(new.iter().all(|b| !old.contains(b)), "{old:?} → {new:?}");
    assert_eq!(fs.counters().cowrite_relocated_blocks, 3);
    assert_eq!(fs.read(f, 0, 3 * BS as u32).unwrap(), vec![0xab; 2 * BS]);
    // Freed by that commit: not reusable before the next one is durable.
    let g = make_files(&fs, d, "g", &[2 * BS, 2 * BS]);
    fs.sync().unwrap();
    for gi in g {
        let gm = fs.block_map(gi).unwrap();
        assert!(
            gm.iter().all(|b| !old.contains(b) && !old_h.contains(b)),
            "reused too early: {gm:?}"
        );
    }
    fs.unmount().unwrap();
    fsck_clean(&dev);
    let fs = mount_with(&dev, opts(true));
    assert_eq!(fs.read(f, 0, 3 * BS as u32).unwrap(), vec![0xab; 2 * BS]);
    assert_eq!(fs.read(h, 0, 3 * BS as u32).unwrap(), vec![0xcd; BS]);
    fs.unmount().unwrap();
}

#[test]
fn large_and_partly_dirty_files_are_written_back_on_their_own() {
    let dev = new_dev(64 << 20);
    let fs = mount_with(&dev, opts(true));
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    let big = make_files(&fs, d, "big", &[13 * BS])[0];
    let small = make_files(&fs, d, "small", &[3 * BS, 2 * BS])[0];
    fs.sync().unwrap();
    let c = fs.counters();
    assert_eq!(c.cowrite_files, 2, "only the small files");
    assert_eq!(c.cowrite_blocks, 5);
    let map = fs.block_map(small).unwrap();
    // One block of three rewritten, the rest not in the cache: stays in place.
    fs.drop_caches().unwrap();
    fs.write(small, BS as u64, &[7u8; BS]).unwrap();
    fs.write(big, 0, &[9u8; BS]).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.counters().cowrite_files, 2);
    assert_eq!(fs.block_map(small).unwrap(), map);
    let mut want = content(small, 3 * BS);
    want[BS..2 * BS].fill(7);
    assert_eq!(fs.read(small, 0, 4 * BS as u32).unwrap(), want);
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

/// A one-group image whose free space is exactly the runs `holes` (in blocks), made by
/// filling it with one-block files and removing some.
fn fragmented(holes: &[u64]) -> (Arc<MemDevice>, Fs, u64) {
    let dev = Arc::new(MemDevice::new(2 << 20));
    let mk = MkfsOptions {
        bytes_per_inode: 1024,
        ..MkfsOptions::default()
    };
    mkfs(dev.as_ref(), &mk).unwrap();
    let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts(true)).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    let fill = fs.mkdir(ROOT_INO, b"fill", 0o755, ME).unwrap().ino;
    fs.sync().unwrap();
    // Directory blocks for the names below, then one-block files until the space is gone.
    let mut files = Vec::new();
    loop {
        let free = fs.statfs().free_blocks;
        if free == 0 {
            break;
        }
        let name = format!("{}", files.len());
        match fs.create(fill, name.as_bytes(), 0o644, ME) {
            Ok(a) => {
                if let Err(e) = fs.write(a.ino, 0, &[1u8; 100]) {
                    eprintln!("fill stopped at {} files: write: {e}", files.len());
                    fs.unlink(fill, name.as_bytes()).unwrap();
                    break;
                }
                files.push(name);
            }
            Err(e) => {
                eprintln!("fill stopped at {} files: create: {e}", files.len());
                break;
            }
        }
        if files.len() % 16 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    // Holes between kept files: remove `h` consecutive files, keep one, and so on.
    let mut k = 0;
    for &h in holes {
        for _ in 0..h {
            fs.unlink(fill, files[k].as_bytes()).unwrap();
            k += 1;
        }
        k += 1;
    }
    fs.sync().unwrap();
    fs.sync().unwrap();
    (dev, fs, d)
}

#[test]
fn fragmented_group_fills_short_runs_near_the_directory() {
    // Holes of 3, 2 and 1 blocks at the group's start, and the free tail the engine keeps as
    // slack. With N = 2, each co-write takes the nearest run of two after the previous one.
    let (dev, fs, d) = fragmented(&[3, 2, 1]);
    let (_, runs) = moafs_core::fsck::layout(dev.as_ref()).unwrap();
    assert_eq!(runs.runs, 4, "setup: free runs {runs:?}");
    assert!(runs.free_blocks >= 6 + 16, "setup: free runs {runs:?}");
    fs.unmount().unwrap();
    let fs = Fs::mount(
        dev.clone() as Arc<dyn BlockDevice>,
        MountOptions {
            cowrite_max: 8 << 10,
            ..opts(true)
        },
    )
    .unwrap();
    let d2 = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    assert_eq!(d2, d);
    // (Four files: the engine keeps 16 free blocks in reserve.)
    let files = make_files(&fs, d, "f", &[10; 4]);
    fs.sync().unwrap();
    let c = fs.counters();
    assert_eq!(c.cowrite_batches, 2);
    assert_eq!(c.cowrite_files, 4);
    let addrs: Vec<u64> = files.iter().map(|i| fs.block_map(*i).unwrap()[0]).collect();
    // Pairs: inside the 3-hole, then the 2-hole one kept file later; not the far tail.
    assert_eq!(addrs[1], addrs[0] + 1);
    assert_eq!(addrs[3], addrs[2] + 1);
    assert_eq!(
        addrs[2],
        addrs[0] + 4,
        "{addrs:?}: the 2-hole follows one kept file"
    );
    check_files(&fs, &files, &[10; 4]);
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

#[test]
fn relocation_never_takes_space_promised_to_other_data() {
    // Nearly full: rewriting every file entirely may move only as much as is spare.
    let (dev, fs, d) = fragmented(&[2; 6]);
    let fill = fs.lookup(ROOT_INO, b"fill").unwrap().ino;
    let mut all = Vec::new();
    for e in fs.readdir(fill, 0, usize::MAX).unwrap() {
        if e.name != b"." && e.name != b".." {
            all.push(e.ino);
        }
    }
    // New data takes 4 of the 12 free blocks beyond the engine's 16 in reserve; every other
    // file is rewritten entirely (a candidate for moving). Twice: after the first commit
    // the new data is placed and old blocks are pending.
    let newf = make_files(&fs, d, "n", &[10; 4]);
    let mut moved_before = 0;
    for round in 0..2 {
        for &ino in &all {
            fs.write(ino, 0, &[3u8 + round; 100]).unwrap();
        }
        let free_before = fs.statfs().free_blocks;
        fs.sync().unwrap();
        let moved = fs.counters().cowrite_relocated_blocks - moved_before;
        moved_before += moved;
        assert!(
            moved <= free_before.saturating_sub(16),
            "round {round}: moved {moved} with {free_before} free"
        );
    }
    assert!(moved_before > 0, "spare space was used");
    fs.sync().unwrap();
    fs.sync().unwrap();
    check_files(&fs, &newf, &[10; 4]);
    for &ino in &all {
        assert_eq!(fs.read(ino, 0, 200).unwrap(), vec![4u8; 100]);
    }
    fs.unmount().unwrap();
    fsck_clean(&dev);
}

#[test]
fn per_file_write_back_goes_in_address_order_or_in_dirtying_order() {
    use moafs_core::device::{HddModel, ModelDevice, ModelKind};
    // Files created alternately in directories of different groups, then one commit:
    // dirtying order seeks between the groups for every file, address order sweeps once.
    let mut seek = Vec::new();
    for sorted in [false, true] {
        let mem = Arc::new(MemDevice::new(256 << 20));
        mkfs(mem.as_ref(), &MkfsOptions::default()).unwrap();
        let dev = Arc::new(ModelDevice::new(mem, ModelKind::Hdd(HddModel::paper())));
        let fs = Fs::mount(
            dev.clone() as Arc<dyn BlockDevice>,
            MountOptions {
                cowrite: false,
                wb_sorted: sorted,
                ..opts(false)
            },
        )
        .unwrap();
        let dirs = make_dirs(&fs, 4);
        let g = fs.geometry();
        let groups: std::collections::BTreeSet<u32> =
            dirs.iter().map(|d| g.group_of_inode(*d)).collect();
        assert!(groups.len() > 1, "setup: directories in one group");
        fs.sync().unwrap();
        let before = dev.counters();
        let mut files = Vec::new();
        for k in 0..40 {
            let d = dirs[k % dirs.len()];
            files.extend(make_files(&fs, d, &format!("f{k}-"), &[5000]));
        }
        fs.sync().unwrap();
        let c = dev.counters();
        assert_eq!(fs.counters().cowrite_batches, 0);
        seek.push(c.seek_distance_bytes - before.seek_distance_bytes);
        check_files(&fs, &files, &[5000; 40]);
        fs.unmount().unwrap();
    }
    assert!(
        seek[1] * 4 < seek[0],
        "address order should seek far less: dirty {} address {}",
        seek[0],
        seek[1]
    );
}

#[test]
fn files_whose_directory_is_forgotten_are_cowritten_in_their_own_group() {
    let dev = new_dev(512 << 20);
    let fs = mount_with(&dev, opts(true));
    let g = fs.geometry();
    let dirs = make_dirs(&fs, 4);
    let mut files = Vec::new();
    for (k, d) in dirs.iter().enumerate() {
        files.extend(make_files(&fs, *d, &format!("f{k}-"), &[3000, 3000, 3000]));
    }
    // Written back, then every idle inode forgotten (the in-process engine counts no
    // lookups): the rewrites below reach inodes read back without their directory.
    fs.drop_caches().unwrap();
    let before = fs.counters();
    for &f in &files {
        fs.write(f, 0, &[5u8; 3000]).unwrap();
    }
    fs.sync().unwrap();
    let c = fs.counters();
    let groups: std::collections::BTreeSet<u32> =
        files.iter().map(|f| g.group_of_inode(*f)).collect();
    assert!(groups.len() > 1, "setup: files in one group");
    assert_eq!(c.cowrite_files - before.cowrite_files, files.len() as u64);
    assert_eq!(
        c.cowrite_batches - before.cowrite_batches,
        groups.len() as u64,
        "one co-write per group"
    );
    for &f in &files {
        let b = fs.block_map(f).unwrap()[0];
        assert_eq!(
            g.group_of_block(b),
            g.group_of_inode(f),
            "file {f} left its group"
        );
        assert_eq!(fs.read(f, 0, 4000).unwrap(), vec![5u8; 3000]);
    }
    fs.unmount().unwrap();
    fsck_clean(&dev);
}
