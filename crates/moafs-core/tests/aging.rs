//! Data that ages in memory (`fs/aging.rs`): the write-back timer's commits hold young file
//! data back (the inode keeps its older size on disk), a file deleted while young is never
//! written, aged data and everything an fsync or sync covers is written, and a crash at any
//! moment shows every file at a size it had with bytes some write gave it (or zeros), never
//! another file's.

mod common;

use common::ME;
use moafs_core::device::{BlockDevice, CutMode, FaultConfig, FaultDevice, MemDevice};
use moafs_core::fs::{MountOptions, RenameFlags, SetAttr, ROOT_INO};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const BS: usize = 4096;

/// The timer commits at every tick (no flush interval); data stays young for `expire_ms`.
fn opts(expire_ms: u64) -> MountOptions {
    MountOptions {
        flush_interval_ms: 0,
        dirty_expire_ms: expire_ms,
        ..MountOptions::default()
    }
}

/// The device as a power cut right now leaves it, mounted (fsck clean before and after).
fn crashed(dev: &MemDevice) -> (Arc<MemDevice>, Fs) {
    let img = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    common::fsck_clean(&img);
    let fs = common::mount(&img);
    (img, fs)
}

fn contents(fs: &Fs, name: &str) -> Vec<u8> {
    let a = fs.lookup(ROOT_INO, name.as_bytes()).expect("lookup");
    fs.read(a.ino, 0, a.size as u32 + 1).expect("read")
}

/// `got == want`, or the first difference (not thousands of bytes).
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes, want {}; first difference at {at:?}",
            got.len(),
            want.len()
        );
    }
}

fn truncate(fs: &Fs, ino: u64, size: u64) {
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(ino, &set).expect("truncate");
}

#[test]
fn the_timer_holds_young_data_back_and_a_crash_shows_the_older_size() {
    let mem = common::new_dev(64 << 20);
    let fs = common::mount_with(&mem, opts(60_000));
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    fs.write(a, 0, &[1u8; 2 * BS]).expect("write");
    let e = fs.create(ROOT_INO, b"e", 0o644, ME).expect("create").ino;
    fs.write(e, 0, &[9u8; 5000]).expect("write");
    fs.fsync(a, false).expect("fsync");
    let written = fs.counters().data_blocks_written + fs.counters().data_blocks_journaled;
    // young: an append, an overwrite of a block on disk, and a new file
    fs.write(a, 2 * BS as u64, &[2u8; 2 * BS]).expect("append");
    fs.write(a, 0, &[3u8; BS]).expect("overwrite");
    let b = fs.create(ROOT_INO, b"b", 0o644, ME).expect("create").ino;
    fs.write(b, 0, &[4u8; BS]).expect("write");
    // a file that grows inside its last block (no new block: only the size says it)
    fs.write(e, 5000, &[10u8; 1100]).expect("write");
    assert!(fs.tick().expect("tick"), "the new name is due");
    let c = fs.counters();
    assert_eq!(
        c.data_blocks_written + c.data_blocks_journaled,
        written,
        "the timer's commit wrote young data: {c:?}"
    );
    assert!(
        !fs.tick().expect("tick"),
        "only young data: nothing to commit"
    );
    // what the mount shows is the newest
    assert_eq!(fs.getattr(a).expect("getattr").size, 4 * BS as u64);
    {
        let (_img, old) = crashed(&mem);
        same(
            &contents(&old, "a"),
            &[1u8; 2 * BS],
            "a: older size and bytes",
        );
        same(&contents(&old, "b"), &[], "b: the name, no data yet");
        same(&contents(&old, "e"), &[9u8; 5000], "e: older size");
        old.unmount().expect("unmount");
    }
    fs.sync().expect("sync");
    let (_img, new) = crashed(&mem);
    let mut want = vec![3u8; BS];
    want.extend([1u8; BS]);
    want.extend([2u8; 2 * BS]);
    same(&contents(&new, "a"), &want, "a");
    same(&contents(&new, "b"), &vec![4u8; BS], "b");
    let mut want = vec![9u8; 5000];
    want.extend([10u8; 1100]);
    same(
        &contents(&new, "e"),
        &want,
        "e: its size once its data is written",
    );
    new.unmount().expect("unmount");
    fs.unmount().expect("unmount");
    common::fsck_clean(&mem);
}

/// Device bytes of 20 files of 64 KiB, each created, written, deleted with timer commits
/// between; and the data blocks the commits wrote.
fn short_lived_files(expire_ms: u64) -> (u64, u64) {
    let mem = common::new_dev(64 << 20);
    let fs = common::mount_with(&mem, opts(expire_ms));
    let before = fs.device_counters();
    for i in 0..20 {
        let name = format!("t{i}");
        let t = fs
            .create(ROOT_INO, name.as_bytes(), 0o644, ME)
            .expect("create");
        fs.write(t.ino, 0, &vec![i as u8; 64 * 1024])
            .expect("write");
        fs.tick().expect("tick");
        fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
        fs.tick().expect("tick");
    }
    fs.unmount().expect("unmount");
    common::fsck_clean(&mem);
    let c = fs.counters();
    let bytes = fs.device_counters().write_bytes - before.write_bytes;
    (bytes, c.data_blocks_written + c.data_blocks_journaled)
}

#[test]
fn a_file_deleted_while_young_is_never_written() {
    let (aging, aging_data) = short_lived_files(60_000);
    let (eager, eager_data) = short_lived_files(0);
    assert_eq!(aging_data, 0);
    assert_eq!(eager_data, 20 * 16, "without aging every file is written");
    assert!(
        aging + 20 * 64 * 1024 <= eager,
        "{aging} device bytes with aging, {eager} without"
    );
}

#[test]
fn aged_data_and_data_an_fsync_covers_is_written() {
    let mem = common::new_dev(64 << 20);
    let fs = common::mount_with(&mem, opts(200));
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    fs.write(a, 0, &[5u8; BS]).expect("write");
    fs.tick().expect("tick");
    let data = |fs: &Fs| fs.counters().data_blocks_written + fs.counters().data_blocks_journaled;
    assert_eq!(data(&fs), 0, "young");
    std::thread::sleep(Duration::from_millis(300));
    assert!(fs.tick().expect("tick"), "aged");
    assert_eq!(data(&fs), 1);
    {
        let (_img, old) = crashed(&mem);
        same(&contents(&old, "a"), &vec![5u8; BS], "a");
        old.unmount().expect("unmount");
    }
    // an fsync of another file makes everything before it durable (docs/SEMANTICS.md)
    fs.write(a, BS as u64, &[6u8; BS]).expect("write");
    fs.tick().expect("tick");
    let b = fs.create(ROOT_INO, b"b", 0o644, ME).expect("create").ino;
    fs.fsync(b, false).expect("fsync");
    let (_img, old) = crashed(&mem);
    let mut want = vec![5u8; BS];
    want.extend([6u8; BS]);
    same(&contents(&old, "a"), &want, "a");
    old.unmount().expect("unmount");
    fs.unmount().expect("unmount");
}

#[test]
fn a_rename_over_a_file_and_a_truncate_make_data_due() {
    let mem = common::new_dev(64 << 20);
    let fs = common::mount_with(&mem, opts(60_000));
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    fs.write(a, 0, &[1u8; 3 * BS]).expect("write");
    let c = fs.create(ROOT_INO, b"c", 0o644, ME).expect("create").ino;
    fs.write(c, 0, &[7u8; 3 * BS]).expect("write");
    fs.sync().expect("sync");
    // write-then-rename over a: the new contents go with the rename (auto_da_alloc)
    let t = fs.create(ROOT_INO, b"t", 0o644, ME).expect("create").ino;
    fs.write(t, 0, &[2u8; 2 * BS]).expect("write");
    fs.rename(ROOT_INO, b"t", ROOT_INO, b"a", RenameFlags::default())
        .expect("rename");
    // a truncate into a block of a file with young data: its zeroed tail goes at once, so
    // growing the file after a crash never shows the old bytes past the new end
    fs.write(c, 2 * BS as u64, &[8u8; BS]).expect("write");
    truncate(&fs, c, 5000);
    fs.tick().expect("tick");
    let (_img, old) = crashed(&mem);
    same(&contents(&old, "a"), &vec![2u8; 2 * BS], "a");
    let oc = old.lookup(ROOT_INO, b"c").expect("lookup").ino;
    assert_eq!(old.getattr(oc).expect("getattr").size, 5000);
    truncate(&old, oc, 3 * BS as u64);
    let mut want = vec![7u8; 5000];
    want.resize(3 * BS, 0);
    same(&contents(&old, "c"), &want, "c");
    old.unmount().expect("unmount");
    fs.unmount().expect("unmount");
}

#[test]
fn write_behind_leaves_young_files_until_dirty_data_passes_half_its_bound() {
    let mem = common::new_dev(64 << 20);
    let fs = common::mount_with(
        &mem,
        MountOptions {
            dirty_bytes_max: 4 << 20,
            ..opts(60_000)
        },
    );
    let a = fs.create(ROOT_INO, b"a", 0o644, ME).expect("create").ino;
    fs.write(a, 0, &vec![1u8; 256 * BS]).expect("write"); // 1 MiB: under half of 4 MiB
    assert_eq!(fs.write_behind().expect("write-behind"), 0, "young");
    fs.write(a, 256 * BS as u64, &vec![2u8; 256 * BS])
        .expect("write"); // 2 MiB in all: still not over half
    assert_eq!(fs.write_behind().expect("write-behind"), 0, "young");
    fs.write(a, 512 * BS as u64, &[3u8; BS]).expect("write");
    assert!(
        fs.write_behind().expect("write-behind") >= 512,
        "over half: written behind"
    );
    // its blocks have addresses past its disk size: its data is due, the timer writes it
    fs.tick().expect("tick");
    let (_img, old) = crashed(&mem);
    let got = contents(&old, "a");
    assert_eq!(got.len(), 513 * BS, "its size went with its data");
    old.unmount().expect("unmount");
    fs.unmount().expect("unmount");
}

/// What a file may hold after a crash: for each byte, the values writes gave it (each write
/// its own value), zero always allowed.
#[derive(Default, Clone)]
struct Allowed {
    bytes: Vec<Vec<u8>>,
}

impl Allowed {
    fn wrote(&mut self, off: usize, len: usize, v: u8) {
        if self.bytes.len() < off + len {
            self.bytes.resize(off + len, Vec::new());
        }
        for b in &mut self.bytes[off..off + len] {
            if !b.contains(&v) {
                b.push(v);
            }
        }
    }
    fn check(&self, got: &[u8], what: &str) {
        for (i, &g) in got.iter().enumerate() {
            let ok = g == 0 || self.bytes.get(i).is_some_and(|b| b.contains(&g));
            assert!(ok, "{what}: byte {i} is {g}, never written there");
        }
    }
}

/// Random creates, writes, truncates, renames, unlinks, fsyncs, syncs and timer commits with
/// young and aged data; after each operation, the power cut (every unflushed write lost, or
/// a seeded random part of them landed) must leave an image fsck finds clean, that mounts,
/// whose files hold only bytes written to them (or zeros), and in which every file fsynced
/// since its last change has its contents at that fsync.
#[test]
fn a_crash_at_any_moment_shows_only_written_bytes_and_keeps_fsyncs() {
    let seeds: u64 = std::env::var("MOAFS_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        run_seed(seed);
    }
}

fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mem = common::new_dev(16 << 20);
    let fault = Arc::new(FaultDevice::new(
        mem.clone() as Arc<dyn BlockDevice>,
        FaultConfig {
            seed,
            ..FaultConfig::default()
        },
    ));
    let fs = Fs::mount(fault.clone() as Arc<dyn BlockDevice>, opts(30)).expect("mount");
    let names = ["a", "b", "c", "d"];
    // name → inode; inode → allowed bytes, current contents, contents at its last fsync
    let mut ino_of: HashMap<&str, u64> = HashMap::new();
    let mut history: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut allowed: HashMap<u64, Allowed> = HashMap::new();
    let mut now: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut synced: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut value = 0u8;
    for step in 0..60 {
        let name = names[rng.gen_range(0..names.len())];
        match rng.gen_range(0..10) {
            0..=3 => {
                let ino = match ino_of.get(name) {
                    Some(&i) => i,
                    None => {
                        let i = fs
                            .create(ROOT_INO, name.as_bytes(), 0o644, ME)
                            .expect("create")
                            .ino;
                        ino_of.insert(name, i);
                        history.entry(name).or_default().push(i);
                        now.insert(i, Vec::new());
                        i
                    }
                };
                value = value % 250 + 1;
                let off = rng.gen_range(0..6 * BS);
                let len = rng.gen_range(1..3 * BS);
                fs.write(ino, off as u64, &vec![value; len]).expect("write");
                allowed.entry(ino).or_default().wrote(off, len, value);
                let c = now.get_mut(&ino).expect("known");
                if c.len() < off + len {
                    c.resize(off + len, 0);
                }
                c[off..off + len].fill(value);
                synced.remove(&ino);
            }
            4 => {
                if let Some(&ino) = ino_of.get(name) {
                    let size = rng.gen_range(0..4 * BS);
                    truncate(&fs, ino, size as u64);
                    now.get_mut(&ino).expect("known").resize(size, 0);
                    synced.remove(&ino);
                }
            }
            5 => {
                let to = names[rng.gen_range(0..names.len())];
                if let (Some(&ino), true) = (ino_of.get(name), name != to) {
                    fs.rename(
                        ROOT_INO,
                        name.as_bytes(),
                        ROOT_INO,
                        to.as_bytes(),
                        RenameFlags::default(),
                    )
                    .expect("rename");
                    ino_of.remove(name);
                    history.entry(to).or_default().push(ino);
                    // a promise is about the file under its name: a rename is a change
                    synced.remove(&ino);
                    if let Some(gone) = ino_of.insert(to, ino) {
                        synced.remove(&gone);
                    }
                }
            }
            6 => {
                if let Some(ino) = ino_of.remove(name) {
                    fs.unlink(ROOT_INO, name.as_bytes()).expect("unlink");
                    synced.remove(&ino);
                }
            }
            7 => {
                if let Some(&ino) = ino_of.get(name) {
                    fs.fsync(ino, false).expect("fsync");
                    synced.insert(ino, now[&ino].clone());
                }
            }
            8 => {
                fs.sync().expect("sync");
                for (_, &ino) in ino_of.iter() {
                    synced.insert(ino, now[&ino].clone());
                }
            }
            _ => {
                if rng.gen_bool(0.5) {
                    std::thread::sleep(Duration::from_millis(40)); // let data age
                }
                fs.tick().expect("tick");
            }
        }
        for (k, mode) in [CutMode::DropAll, CutMode::RandomSeed(seed * 1000 + step)]
            .into_iter()
            .enumerate()
        {
            let img = Arc::new(MemDevice::from_bytes(
                fault.crash_image(mode).expect("crash image"),
            ));
            let what = format!("seed {seed} step {step} cut {k}");
            let r = moafs_core::fsck::fsck(img.as_ref(), false).expect("fsck runs");
            assert!(r.errors.is_empty(), "{what}: fsck {:#?}", r.errors);
            let after = common::mount(&img);
            for e in after.readdir(ROOT_INO, 0, 100).expect("readdir") {
                if e.name == b"." || e.name == b".." || e.name == b"lost+found" {
                    continue;
                }
                let size = after.getattr(e.ino).expect("getattr").size;
                let got = after.read(e.ino, 0, size as u32 + 1).expect("read");
                assert_eq!(got.len() as u64, size, "{what}");
                // the bytes of any inode the name ever had: a crash may show an older one
                let name = String::from_utf8_lossy(&e.name).to_string();
                let mut mine = Allowed::default();
                for ino in history.get(name.as_str()).into_iter().flatten() {
                    for (i, b) in allowed
                        .get(ino)
                        .map_or(&[][..], |a| &a.bytes)
                        .iter()
                        .enumerate()
                    {
                        for &v in b {
                            mine.wrote(i, 1, v);
                        }
                    }
                }
                mine.check(&got, &format!("{what}: {name}"));
            }
            for (name, ino) in &ino_of {
                if let Some(want) = synced.get(ino) {
                    let a = after.lookup(ROOT_INO, name.as_bytes());
                    let a = a.unwrap_or_else(|e| panic!("{what}: fsynced {name} lost: {e:?}"));
                    let got = after.read(a.ino, 0, want.len() as u32 + 1).expect("read");
                    same(&got, want, &format!("{what}: {name} at its fsync"));
                }
            }
            after.unmount().expect("unmount");
            let r = moafs_core::fsck::fsck(img.as_ref(), false).expect("fsck runs");
            assert!(
                r.errors.is_empty(),
                "{what}: fsck after mount {:#?}",
                r.errors
            );
        }
    }
    fs.unmount().expect("unmount");
}
