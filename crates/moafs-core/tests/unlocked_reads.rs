//! No device read under the engine lock (issue 28 item 5, `fs/fetch.rs`): while one
//! operation waits for a cache miss (an inode-table block, a directory, an indirect block,
//! the old contents of a block a write changes in part, the home copy the byte log compares
//! with), other operations on cached files go on. And what is read with the lock released
//! is never stale: lookups, stats and reads racing renames, unlinks, truncates, commits and
//! cache drops see only what some version of the file system held.
mod common;
use common::*;
use moafs_core::device::{BlockDevice, DevResult, DeviceCounters, MemDevice};
use moafs_core::fs::{FileKind, MountOptions, SetAttr, ROOT_INO};
use moafs_core::Fs;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

const BS: usize = 4096;

/// Holds the first read after `arm` until released (or a long timeout, so that a failing
/// test ends); the others pass.
struct ReadGate {
    dev: Arc<MemDevice>,
    armed: AtomicBool,
    /// (a read is held, released, the offset of the held read)
    state: Mutex<(bool, bool, u64)>,
    cv: Condvar,
}

impl ReadGate {
    fn arm(&self) {
        *self.state.lock().unwrap() = (false, false, 0);
        self.armed.store(true, Ordering::SeqCst);
    }
    /// Waits until a read is held; its offset (None: no read came within the timeout).
    fn held(&self, timeout: Duration) -> Option<u64> {
        let s = self.state.lock().unwrap();
        let (s, _) = self.cv.wait_timeout_while(s, timeout, |s| !s.0).unwrap();
        s.0.then_some(s.2)
    }
    fn release(&self) {
        self.armed.store(false, Ordering::SeqCst);
        let mut s = self.state.lock().unwrap();
        s.1 = true;
        self.cv.notify_all();
    }
}

impl BlockDevice for ReadGate {
    fn size(&self) -> u64 {
        self.dev.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            let mut s = self.state.lock().unwrap();
            (s.0, s.2) = (true, offset);
            self.cv.notify_all();
            let _unused = self
                .cv
                .wait_timeout_while(s, Duration::from_secs(20), |s| !s.1)
                .unwrap();
        }
        self.dev.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.dev.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.dev.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        self.dev.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.dev.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.dev.counters()
    }
}

/// An image with: `hot` (a small file the bystander uses), `d` holding `d/f` (a directory
/// of 300 entries: several blocks), `big` (3 MiB: indirect blocks) and `small` (4 blocks).
fn image() -> Arc<MemDevice> {
    image_with(new_dev(128 << 20))
}

/// [`image`] on an image with pointer maps (disk version 2).
fn image_pointers() -> Arc<MemDevice> {
    image_with(new_dev_pointers(128 << 20))
}

/// Fills `mem`: "big" (3 MiB) is written in twelve pieces, each committed after a block of
/// "filler", so that its map has twelve extents (an extent-tree block) or indirect blocks.
fn image_with(mem: Arc<MemDevice>) -> Arc<MemDevice> {
    let fs = mount(&mem);
    fs.create(ROOT_INO, b"hot", 0o644, ME).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    for i in 0..300 {
        let name = format!("entry-with-a-longish-name-{i:04}");
        fs.create(d, name.as_bytes(), 0o644, ME).unwrap();
    }
    let big = fs.create(ROOT_INO, b"big", 0o644, ME).unwrap().ino;
    let filler = fs.create(ROOT_INO, b"filler", 0o644, ME).unwrap().ino;
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    for (k, piece) in data.chunks(256 << 10).enumerate() {
        fs.write(big, (k * (256 << 10)) as u64, piece).unwrap();
        fs.sync().unwrap();
        fs.write(filler, (k * BS) as u64, &[1u8; BS]).unwrap();
        fs.sync().unwrap();
    }
    let small = fs.create(ROOT_INO, b"small", 0o644, ME).unwrap().ino;
    fs.write(small, 0, &[7u8; 4 * BS]).unwrap();
    fs.unmount().unwrap();
    mem
}

/// Mounts `mem` through a read gate (the timer never commits: nothing but the test's
/// operations runs).
fn gated(mem: &Arc<MemDevice>) -> (Arc<ReadGate>, Arc<Fs>) {
    let gate = Arc::new(ReadGate {
        dev: mem.clone(),
        armed: AtomicBool::new(false),
        state: Mutex::new((false, false, 0)),
        cv: Condvar::new(),
    });
    let opts = MountOptions {
        flush_interval_ms: u64::MAX,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(gate.clone() as Arc<dyn BlockDevice>, opts).unwrap());
    (gate, fs)
}

fn ino_of(fs: &Fs, parent: u64, name: &[u8]) -> u64 {
    fs.lookup(parent, name).unwrap().ino
}

/// Runs `cold` (which must miss) on a fresh mount after `prepare`; while its first device
/// read is held, a bystander stats, writes and reads `hot` (all cached). Fails if the
/// bystander waited for the held read; returns what `cold` returned.
fn bystander_goes_on<T: Send + 'static>(
    what: &str,
    prepare: impl FnOnce(&Fs),
    cold: impl FnOnce(&Fs) -> T + Send + 'static,
) -> T {
    bystander_goes_on_in(image(), what, prepare, cold)
}

/// [`bystander_goes_on`] on the image `mem`.
fn bystander_goes_on_in<T: Send + 'static>(
    mem: Arc<MemDevice>,
    what: &str,
    prepare: impl FnOnce(&Fs),
    cold: impl FnOnce(&Fs) -> T + Send + 'static,
) -> T {
    let (gate, fs) = gated(&mem);
    let hot = ino_of(&fs, ROOT_INO, b"hot");
    fs.write(hot, 0, b"warm").unwrap();
    prepare(&fs);
    let c0 = fs.counters();
    gate.arm();
    let worker = {
        let fs = fs.clone();
        std::thread::spawn(move || cold(&fs))
    };
    let held = gate.held(Duration::from_secs(10));
    assert!(
        held.is_some(),
        "{what}: the operation read nothing from the device"
    );
    let (tx, rx) = mpsc::channel();
    let bystander = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            fs.getattr(hot).unwrap();
            fs.write(hot, 4, b"-still-going").unwrap();
            let got = fs.read(hot, 0, 16).unwrap();
            assert_eq!(&got, b"warm-still-going");
            fs.lookup(ROOT_INO, b"hot").unwrap();
            tx.send(()).unwrap();
        })
    };
    let went_on = rx.recv_timeout(Duration::from_secs(5)).is_ok();
    gate.release();
    let out = worker.join().expect("the cold operation panicked");
    bystander.join().expect("the bystander panicked");
    assert!(
        went_on,
        "{what}: a read at {held:?} held the engine lock: the bystander waited for it"
    );
    let c = fs.counters().since(&c0);
    assert!(c.unlocked_reads >= 1, "{what}: {c:?}");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&mem);
    out
}

#[test]
fn a_lookup_in_a_cold_directory_lets_others_go_on() {
    let ino = bystander_goes_on(
        "lookup",
        |_| {},
        |fs| {
            let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
            fs.lookup(d, b"entry-with-a-longish-name-0299").unwrap().ino
        },
    );
    assert!(ino > ROOT_INO);
}

#[test]
fn a_listing_of_a_cold_directory_lets_others_go_on() {
    let names = bystander_goes_on(
        "readdir",
        |fs| {
            // the directory's inode is in memory; its blocks are not
            fs.lookup(ROOT_INO, b"d").unwrap();
        },
        |fs| {
            let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
            fs.readdir(d, 0, usize::MAX).unwrap().len()
        },
    );
    assert_eq!(names, 302); // 300, "." and ".."
}

#[test]
fn a_cold_inode_lets_others_go_on() {
    // inodes of d's entries lie in inode-table blocks nothing has read on this mount
    let mem = image();
    let fs = mount(&mem);
    let d = ino_of(&fs, ROOT_INO, b"d");
    let far = ino_of(&fs, d, b"entry-with-a-longish-name-0250");
    fs.unmount().unwrap();
    drop(fs);
    let attr = bystander_goes_on("getattr", |_| {}, move |fs| fs.getattr(far).unwrap());
    assert_eq!(attr.ino, far);
}

#[test]
fn a_read_through_a_cold_extent_tree_lets_others_go_on() {
    cold_map_read(image());
}

#[test]
fn a_read_through_a_cold_indirect_block_lets_others_go_on() {
    cold_map_read(image_pointers());
}

/// A read whose block map is not in memory (extent-tree or indirect blocks).
fn cold_map_read(mem: Arc<MemDevice>) {
    let got = bystander_goes_on_in(
        mem,
        "read",
        |fs| {
            // the inode is in memory, its indirect blocks are not
            fs.lookup(ROOT_INO, b"big").unwrap();
        },
        |fs| {
            let big = fs.lookup(ROOT_INO, b"big").unwrap().ino;
            fs.read(big, 2 << 20, 8).unwrap()
        },
    );
    let want: Vec<u8> = ((2u32 << 20)..(2 << 20) + 8)
        .map(|i| (i % 251) as u8)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_partial_write_of_a_cold_block_lets_others_go_on() {
    let got = bystander_goes_on(
        "partial write",
        |fs| {
            fs.lookup(ROOT_INO, b"small").unwrap();
        },
        |fs| {
            let small = fs.lookup(ROOT_INO, b"small").unwrap().ino;
            fs.write(small, BS as u64 + 100, b"xyz").unwrap();
            fs.read(small, BS as u64 + 98, 7).unwrap()
        },
    );
    assert_eq!(got, [7, 7, b'x', b'y', b'z', 7, 7]);
}

#[test]
fn freeing_a_cold_file_lets_others_go_on() {
    cold_free(image());
}

#[test]
fn freeing_a_cold_file_of_pointers_lets_others_go_on() {
    cold_free(image_pointers());
}

/// Unlinking a file whose block map is not in memory.
fn cold_free(mem: Arc<MemDevice>) {
    let left = bystander_goes_on_in(
        mem,
        "unlink",
        |fs| {
            // the directory and the inode are in memory; the indirect blocks are not
            let big = fs.lookup(ROOT_INO, b"big").unwrap().ino;
            fs.forget(big, 1);
        },
        |fs| {
            let free = fs.statfs().free_blocks;
            fs.unlink(ROOT_INO, b"big").unwrap();
            fs.sync().unwrap();
            fs.statfs().free_blocks - free
        },
    );
    // 3 MiB of data and its indirect blocks came back
    assert!(left as usize > (3 << 20) / BS, "{left}");
}

#[test]
fn a_byte_log_fsync_reads_the_home_copy_with_the_lock_released() {
    // a whole page written without a cached copy: the fsync compares it with home
    let (logged, home_reads) = bystander_goes_on(
        "fsync",
        |fs| {
            let small = fs.lookup(ROOT_INO, b"small").unwrap().ino;
            let mut page = vec![7u8; BS];
            page[10..13].copy_from_slice(b"abc");
            fs.write(small, 2 * BS as u64, &page).unwrap();
        },
        |fs| {
            let c0 = fs.counters();
            let small = fs.lookup(ROOT_INO, b"small").unwrap().ino;
            fs.fsync(small, true).unwrap();
            let c = fs.counters().since(&c0);
            (c.bytelog_fsyncs, c.bytelog_home_reads)
        },
    );
    assert_eq!((logged, home_reads), (1, 1));
}

/// Lookups, stats and reads of cold metadata race renames, unlinks, creates, truncates,
/// commits and cache drops: every answer is one some version of the file system gave —
/// a file found by name is a regular file whose contents are its own tag and whose size
/// is the tag's — and fsck is clean at the end.
#[test]
fn reads_with_the_lock_released_never_see_stale_blocks() {
    let mem = new_dev(64 << 20);
    let slow: Arc<dyn BlockDevice> = Arc::new(Slow {
        inner: mem.clone(),
        read: Duration::from_micros(300),
        flush: Duration::ZERO,
    });
    let opts = MountOptions {
        cache_bytes: 256 << 10,
        flush_interval_ms: u64::MAX,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(slow, opts).unwrap());
    let dirs: Vec<u64> = (0..4)
        .map(|i| {
            fs.mkdir(ROOT_INO, format!("d{i}").as_bytes(), 0o755, ME)
                .unwrap()
                .ino
        })
        .collect();
    // the contents of file n: its tag repeated (every file a different length)
    let contents = |n: u64| {
        format!("file-{n:06}|")
            .repeat(1 + (n % 700) as usize)
            .into_bytes()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (fs, stop, dirs, checks) = (fs.clone(), stop.clone(), dirs.clone(), checks.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(r);
                while !stop.load(Ordering::Relaxed) {
                    let d = dirs[rng.gen_range(0..dirs.len())];
                    let name = format!("f{}", rng.gen_range(0..200));
                    let Ok(a) = fs.lookup(d, name.as_bytes()) else {
                        continue;
                    };
                    // the file may be unlinked (and its inode reused) from here on
                    let Ok(data) = fs.read(a.ino, 0, 1 << 20) else {
                        continue;
                    };
                    let Ok(b) = fs.getattr(a.ino) else {
                        continue;
                    };
                    assert_eq!(a.kind, FileKind::Regular, "{a:?}");
                    if data.len() >= 12 && b.size == data.len() as u64 {
                        let n: u64 = std::str::from_utf8(&data[5..11]).unwrap().parse().unwrap();
                        assert!(
                            data == contents(n) || data.iter().all(|x| *x == 0),
                            "{name}: not the contents of any one file"
                        );
                        checks.fetch_add(1, Ordering::Relaxed);
                    }
                    fs.forget(a.ino, 1);
                }
            })
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(99);
    let mut next = 0u64;
    for step in 0..10_000 {
        let d = dirs[rng.gen_range(0..dirs.len())];
        let name = format!("f{}", rng.gen_range(0..200));
        match rng.gen_range(0..10) {
            0..=3 => {
                if let Ok(a) = fs.create(d, name.as_bytes(), 0o644, ME) {
                    next += 1;
                    fs.write(a.ino, 0, &contents(next)).unwrap();
                    fs.forget(a.ino, 1);
                }
            }
            4..=5 => {
                let _ = fs.unlink(d, name.as_bytes());
            }
            6..=7 => {
                let to = dirs[rng.gen_range(0..dirs.len())];
                let new = format!("f{}", rng.gen_range(0..200));
                let _ = fs.rename(d, name.as_bytes(), to, new.as_bytes(), Default::default());
            }
            8 => {
                // a truncate to zero and a rewrite with a new tag
                if let Ok(a) = fs.lookup(d, name.as_bytes()) {
                    let zero = SetAttr {
                        size: Some(0),
                        ..Default::default()
                    };
                    fs.setattr(a.ino, &zero).unwrap();
                    next += 1;
                    fs.write(a.ino, 0, &contents(next)).unwrap();
                    fs.forget(a.ino, 1);
                }
            }
            _ => {
                if step % 3 == 0 {
                    fs.drop_caches().unwrap();
                } else {
                    fs.sync().unwrap();
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader saw a stale block");
    }
    assert!(checks.load(Ordering::Relaxed) > 0);
    let c = fs.counters();
    assert!(c.unlocked_reads > 0, "{c:?}");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&mem);
}

/// The warm pass of a size change looks up the mapping of what a truncate frees, a bounded
/// number of indirect blocks: a truncate to 2^63 - 1 (xfstests generic/525) once walked the
/// whole range and never returned, and so did shrinking a huge sparse file.
#[test]
fn size_changes_of_huge_sparse_files_return() {
    let fs = Arc::new(mount(&new_dev(64 << 20)));
    let ino = fs.create(ROOT_INO, b"f", 0o644, ME).expect("create").ino;
    let (tx, rx) = mpsc::channel();
    let f = fs.clone();
    std::thread::spawn(move || {
        let size = |s: u64| {
            f.setattr(
                ino,
                &SetAttr {
                    size: Some(s),
                    ..Default::default()
                },
            )
        };
        let huge = size((1 << 63) - 1).map(|a| a.size);
        let largest = size(1 << 41).map(|a| a.size);
        f.write(ino, (1 << 41) - 4096, b"end")
            .expect("write at the end");
        let back = size(5000).map(|a| a.size);
        tx.send((huge, largest, back)).unwrap();
    });
    let (huge, largest, back) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the size changes return");
    assert!(
        huge.is_err(),
        "2^63 - 1 bytes is past the largest file: {huge:?}"
    );
    assert_eq!(largest.expect("a 2 TiB sparse file"), 1 << 41);
    assert_eq!(back.expect("shrunk"), 5000);
    assert_eq!(fs.read(ino, 0, 10_000).expect("read").len(), 5000);
}
