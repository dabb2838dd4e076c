//! Memory budgets that follow the machine (issue 44): data deleted young never reaches the
//! device, and a daemon in a memory cgroup smaller than what it is given to write keeps
//! within it — alive, nothing lost.

mod common;
use common::*;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The engine's stats file of a finished mount, parsed.
fn stats(path: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(path).expect("stats file")).expect("stats JSON")
}

/// Writes `n` files of `mib` MiB each into `dir`, their bytes a function of the file's
/// number and offset.
fn write_files(dir: &Path, n: usize, mib: usize) {
    for f in 0..n {
        let mut out = fs::File::create(dir.join(format!("f{f}"))).unwrap();
        for m in 0..mib {
            out.write_all(&chunk(f, m)).unwrap();
        }
    }
}

fn chunk(f: usize, m: usize) -> Vec<u8> {
    pattern(1 << 20, ((f as u64) << 32) | m as u64)
}

fn check_files(dir: &Path, n: usize, mib: usize) {
    for f in 0..n {
        let mut inp = fs::File::open(dir.join(format!("f{f}"))).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        for m in 0..mib {
            inp.read_exact(&mut buf).unwrap();
            assert!(buf == chunk(f, m), "file f{f}, MiB {m} differs");
        }
    }
}

#[test]
fn files_deleted_young_cost_no_device_write_unless_the_budget_is_pinned_small() {
    if !can_mount() {
        return;
    }
    // 80 MiB: more than the 64 MiB the dirty budget was fixed at
    let run = |opts: &str| -> serde_json::Value {
        let (tmp, img, mnt) = fresh_image("512M");
        let st = tmp.path().join("stats.json");
        let m = Mounted::new(&img, &mnt, &format!("stats={}{opts}", p(&st)));
        write_files(&mnt, 10, 8);
        for f in 0..10 {
            fs::remove_file(mnt.join(format!("f{f}"))).unwrap();
        }
        m.unmount();
        assert_fsck_clean(&img);
        stats(&st)
    };
    let auto = run("");
    // (write-behind takes young files once dirty data passes half the budget: the budget
    // must be over twice what is written, 20 % of at least 800 MiB available)
    let budget = auto["budget"]["dirty_bytes"].as_u64().unwrap();
    assert!(
        budget > 160 << 20,
        "this test needs 800 MiB of memory available: a dirty budget of {budget} bytes"
    );
    let written = auto["engine"]["data_blocks_written"].as_u64().unwrap();
    assert_eq!(written, 0, "data deleted young was written: {auto}");
    assert!(
        auto["device"]["write_bytes"].as_u64().unwrap() < 4 << 20,
        "{auto}"
    );
    // the same with the budget pinned at 16 MiB: most of it reaches the device
    let pinned = run(",dirty_max=16M");
    let written = pinned["engine"]["data_blocks_written"].as_u64().unwrap();
    assert!(written * 4096 > 40 << 20, "{pinned}");
    assert_eq!(pinned["budget"]["dirty_bytes"].as_u64(), Some(16 << 20));
}

#[test]
fn truncated_and_overwritten_young_data_reaches_the_device_once_at_most() {
    if !can_mount() {
        return;
    }
    let (tmp, img, mnt) = fresh_image("512M");
    let st = tmp.path().join("stats.json");
    let m = Mounted::new(&img, &mnt, &format!("stats={}", p(&st)));
    // 40 MiB truncated away before any commit took it; 24 MiB written, then overwritten
    write_files(&mnt, 1, 40);
    fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("f0"))
        .unwrap()
        .set_len(0)
        .unwrap();
    fs::rename(mnt.join("f0"), mnt.join("empty")).unwrap();
    write_files(&mnt, 1, 24); // f0 again: 24 MiB
    let again: Vec<u8> = (0..24).flat_map(|m| chunk(7, m)).collect();
    fs::write(mnt.join("f0"), &again).unwrap();
    m.unmount();
    let s = stats(&st);
    let written = s["engine"]["data_blocks_written"].as_u64().unwrap();
    // the unmount writes the 24 MiB that remain, once; nothing of the rest
    assert!(
        (6144..6144 + 16).contains(&written),
        "{written} data blocks written for 24 MiB kept: {s}"
    );
    assert_fsck_clean(&img);
    let m = Mounted::new(&img, &mnt, "");
    assert!(fs::read(mnt.join("f0")).unwrap() == again);
    assert_eq!(fs::metadata(mnt.join("empty")).unwrap().len(), 0);
    m.unmount();
}

/// A memory cgroup made for a test, removed when dropped (once its processes are gone).
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// A memory cgroup limited to `bytes`, on the v2 hierarchy if it has the memory
    /// controller, else on v1's; `None` when neither can be made here.
    fn new(name: &str, bytes: u64) -> Option<Cgroup> {
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers = fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        let (dir, limit) = if controllers.split_whitespace().any(|c| c == "memory") {
            let _ = fs::write(v2.join("cgroup.subtree_control"), "+memory");
            (v2.join(name), "memory.max")
        } else if v2.join("memory/memory.limit_in_bytes").exists() {
            (v2.join("memory").join(name), "memory.limit_in_bytes")
        } else {
            return None;
        };
        fs::create_dir(&dir).ok()?;
        let cg = Cgroup { dir };
        fs::write(cg.dir.join(limit), bytes.to_string()).ok()?;
        Some(cg)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("cannot remove cgroup {}", self.dir.display());
    }
}

#[test]
fn a_daemon_in_a_memory_cgroup_smaller_than_its_dirty_data_lives_and_keeps_it() {
    if !can_mount() {
        return;
    }
    let limit: u64 = 160 << 20;
    let name = format!("moafs-test-{}", std::process::id());
    let Some(cg) = Cgroup::new(&name, limit) else {
        panic!("no memory cgroup can be made here (cgroup v1 or v2 memory controller, as root)");
    };
    // the image on the disk (not tmpfs: its pages would be charged to the cgroup for good)
    let tmp = tempfile::TempDir::new_in("/var/tmp").unwrap();
    let (img, mnt, st) = (
        tmp.path().join("img"),
        tmp.path().join("mnt"),
        tmp.path().join("stats.json"),
    );
    fs::create_dir(&mnt).unwrap();
    mkfs(&img, "1G");
    let pidfile = tmp.path().join("pid");
    // the daemon starts in the cgroup (a shell moves itself there, then becomes moafs)
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} mount -o pidfile={},stats={} {} {}",
            cg.dir.display(),
            env!("CARGO_BIN_EXE_moafs"),
            p(&pidfile),
            p(&st),
            p(&img),
            p(&mnt)
        ))
        .output()
        .unwrap();
    let m = Mounted::after_mount(out, &mnt, &pidfile).expect("mount in the cgroup");
    // 320 MiB written, twice the cgroup's limit, then read back while mounted
    write_files(&mnt, 8, 40);
    check_files(&mnt, 8, 40);
    let pid = m.pid;
    m.unmount();
    let s = stats(&st);
    let dirty = s["budget"]["dirty_bytes"].as_u64().unwrap();
    assert!(
        dirty <= limit / 4,
        "dirty budget {dirty} in a {limit}-byte cgroup: {s}"
    );
    assert!(process_gone(pid));
    assert_fsck_clean(&img);
    // and after a new mount (outside the cgroup) every byte is there
    let m = Mounted::new(&img, &mnt, "");
    check_files(&mnt, 8, 40);
    m.unmount();
    drop(cg);
}

#[test]
fn a_walk_keeps_the_daemon_s_inodes_within_their_bound() {
    if !can_mount() {
        return;
    }
    // 30,000 files in 10 directories; after a remount `find` stats every one (the kernel
    // then references each); a 64 MiB cache bounds the inodes kept in memory at 4,096
    let (tmp, img, mnt) = fresh_image("512M");
    let n = 30_000usize;
    {
        let _m = Mounted::new(&img, &mnt, "");
        for d in 0..10 {
            fs::create_dir(mnt.join(format!("d{d}"))).unwrap();
        }
        for i in 0..n {
            let mut f = fs::File::create(mnt.join(format!("d{}/f{i}", i % 10))).unwrap();
            if i % 2 == 1 {
                f.write_all(&[7u8; 100]).unwrap(); // a data block, mapped by an extent
            }
        }
    }
    let st = tmp.path().join("stats.json");
    let m = Mounted::new(&img, &mnt, &format!("cache_size=64M,stats={}", p(&st)));
    let out = Command::new("find")
        .arg(&mnt)
        .args(["-type", "f", "-printf", "%s\n"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let sizes = String::from_utf8(out.stdout).unwrap();
    assert_eq!(sizes.lines().count(), n);
    assert_eq!(sizes.lines().filter(|l| *l == "100").count(), n / 2);
    // every file still reads as it was (their state read back from the inode table)
    assert_eq!(fs::metadata(mnt.join("d7/f29997")).unwrap().len(), 100);
    m.unmount();
    assert_fsck_clean(&img);
    let s = stats(&st);
    let inodes = &s["inodes"];
    let get = |k: &str| inodes[k].as_u64().unwrap_or_else(|| panic!("{k}: {s}"));
    assert_eq!(get("idle_bound"), 4096, "{s}");
    assert!(get("peak_referenced") >= n as u64, "{s}");
    // a second of a walk loads at most a few tens of thousands: well under all of them
    assert!(get("peak_in_memory") < n as u64 * 2 / 3, "{s}");
}
