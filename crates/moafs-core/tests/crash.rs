//! Crash harness: seeded workloads run in-process on a fault device; before every write request
//! and every flush the harness takes the images a power cut would leave (all unflushed writes
//! lost, all of them landed, and seeded random subsets with a torn write), and for each one:
//! `fsck -n` of the raw image (checked as the journal replay would leave it) is clean; mounting
//! replays the journal; the tree equals the file system as it was at one operation boundary
//! between the last completed fsync/sync and the operation in progress (atomic commits,
//! nothing fsynced lost, renames all-or-nothing); file contents obey the journal mode (`data`:
//! exact; `ordered`: every 512-byte sector is a version some operation in that window wrote,
//! never stale or garbage; `writeback`: every sector the file held throughout the window is
//! a version of it, and a name replaced by write-then-rename holds one whole version); after
//! unmount fsck is clean again.
//!
//! `MOAFS_CRASH_SEEDS=N` sets the seeds per workload and mode (default 8). A failure prints the
//! workload, mode, seed, device request number and cut, which replay it exactly.

mod common;
use moafs_core::device::{
    BlockDevice, CutMode, DevResult, DeviceCounters, FaultConfig, FaultDevice, FaultNvm, MemDevice,
    MemNvm, Nvm, NvmCounters, NvmCut, NvmModel,
};
use moafs_core::fs::{JournalMode, MountOptions, RenameFlags, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const IMAGE: u64 = 2 << 20;
const BS: usize = 4096;
const SECTOR: usize = 512;

/// Contents, shared between the many states that hold the same version.
type Bytes = Arc<Vec<u8>>;

/// path → (inode, contents)
type Tree = BTreeMap<String, (u64, Bytes)>;

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Write(String, usize, usize, u8),
    Truncate(String, usize),
    Fsync(String),
    Sync,
    Unlink(String),
    Rename(String, String),
    Link(String, String),
    /// An empty directory `e` made or removed at the root.
    Mkdir,
    Rmdir,
    /// `user.x` set on a file to 1..=255 bytes of one value, or to 4,000..20,000 (a set over
    /// several blocks).
    SetXattr(String, u8, usize),
    /// A round of write-behind (new blocks of large files written between commits).
    WriteBehind,
    /// A symbolic link at the path to a target of that many bytes of one value.
    Symlink(String, usize, u8),
    /// `user.x` removed (the file has one).
    RemoveXattr(String),
    /// `fallocate` mode 0 (the size grows to `off + len`) and a hole punched (size kept).
    Falloc(String, usize, usize),
    Punch(String, usize, usize),
    /// `fallocate` ZERO_RANGE (the range reads as zeros, the size grows to `off + len`) and
    /// KEEP_SIZE preallocation (nothing a reader sees changes).
    ZeroRange(String, usize, usize),
    Prealloc(String, usize, usize),
    /// The empty directory renamed `e` ↔ `f`.
    RenameDir,
    /// fsync of the directory `d`: a commit (everything durable).
    FsyncDir,
    /// The file opened, then unlinked while open (an orphan until `Close`).
    OpenUnlink(String),
    Close,
}

/// The expected file system: names → inode, inode → contents.
#[derive(Clone, Default)]
struct Model {
    names: BTreeMap<String, u64>,
    data: HashMap<u64, Bytes>,
    xattrs: HashMap<u64, Bytes>,
    /// Inode of the empty directory at the root when it exists, and its name (`e` or `f`).
    dir_e: Option<u64>,
    dir_f: bool,
    /// Inodes that are symbolic links (their contents are the target).
    symlinks: std::collections::HashSet<u64>,
    /// An open file unlinked while open (the harness holds it open).
    orphan: Option<u64>,
}

impl Model {
    /// Files by path; `PATH@x` holds a file's `user.x`; `PATH@l` a symbolic link's target;
    /// `e/` (or `f/`) the empty directory.
    fn tree(&self) -> Tree {
        let mut t: Tree = self
            .names
            .iter()
            .map(|(p, i)| {
                let key = if self.symlinks.contains(i) {
                    format!("{p}@l")
                } else {
                    p.clone()
                };
                (key, (*i, self.data[i].clone()))
            })
            .collect();
        for (p, i) in &self.names {
            if let Some(x) = self.xattrs.get(i) {
                t.insert(format!("{p}@x"), (*i, x.clone()));
            }
        }
        if let Some(e) = self.dir_e {
            t.insert(self.dir_name().to_string() + "/", (e, Bytes::default()));
        }
        t
    }
    fn dir_name(&self) -> &'static str {
        if self.dir_f {
            "f"
        } else {
            "e"
        }
    }
    /// Regular files by path (symbolic links left out).
    fn files(&self) -> Vec<String> {
        self.names
            .iter()
            .filter(|(_, i)| !self.symlinks.contains(i))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// Window of states the image may legally show: from the last durable point (a commit
/// everything waited for) to now; and the files whose fsync the byte log served since:
/// whatever state of the window a crash shows, such a file holds at least what its fsync
/// made durable (`docs/SEMANTICS.md`: a commit's state plus, per file, its acknowledged
/// byte-logged updates).
#[derive(Default, Clone)]
struct Window {
    states: Vec<Tree>,
    /// inode → (index of the state its last served fsync returned in, its contents then):
    /// states before that index show these contents for it.
    pins: HashMap<u64, (usize, Bytes)>,
    /// An fsync in progress: (inode, contents) — its batch may or may not have landed.
    pending: Option<(u64, Bytes)>,
}

impl Window {
    /// The trees a crash may show: each state, with the pinned files' contents where the
    /// state is older than their pin, with and without the fsync in progress.
    fn candidates(&self) -> Vec<Tree> {
        let mut out = Vec::new();
        let n = self.states.len();
        for (i, t) in self.states.iter().enumerate() {
            let mut pins: Vec<(u64, &Bytes)> = self
                .pins
                .iter()
                .filter(|(_, (at, _))| *at > i)
                .map(|(ino, (_, d))| (*ino, d))
                .collect();
            out.push(pinned(t, &pins));
            if let Some((ino, d)) = &self.pending {
                if i + 1 < n {
                    pins.retain(|p| p.0 != *ino);
                    pins.push((*ino, d));
                    out.push(pinned(t, &pins));
                }
            }
        }
        out
    }
}

/// `t` with the contents of the files `pins` names replaced.
fn pinned(t: &Tree, pins: &[(u64, &Bytes)]) -> Tree {
    let mut t = t.clone();
    for (path, (ino, data)) in t.iter_mut() {
        if path.ends_with("@x") || path.ends_with("@l") || path.ends_with('/') {
            continue;
        }
        if let Some((_, d)) = pins.iter().find(|(i, _)| i == ino) {
            data.clone_from(d);
        }
    }
    t
}

struct Ctx {
    name: &'static str,
    mode: JournalMode,
    seed: u64,
}

/// Splits a path into (parent inode, name) given the engine's directory `d`.
fn parent_of(path: &str, d: u64) -> (u64, &str) {
    match path.strip_prefix("d/") {
        Some(n) => (d, n),
        None => (ROOT_INO, path),
    }
}

fn apply(fs: &Fs, m: &mut Model, d: u64, op: &Op) {
    let who = common::ME;
    match op {
        // The engine chooses inode numbers: the model takes them from its answer.
        Op::Create(p) => {
            let (dir, n) = parent_of(p, d);
            let a = fs.create(dir, n.as_bytes(), 0o644, who).expect("create");
            m.names.insert(p.clone(), a.ino);
            m.data.insert(a.ino, Bytes::default());
            return;
        }
        Op::Mkdir => {
            let name = m.dir_name().as_bytes();
            m.dir_e = Some(fs.mkdir(ROOT_INO, name, 0o755, who).expect("mkdir").ino);
            return;
        }
        Op::Symlink(p, n, b) => {
            let (dir, name) = parent_of(p, d);
            let a = fs
                .symlink(dir, name.as_bytes(), &vec![*b; *n], who)
                .expect("symlink");
            m.names.insert(p.clone(), a.ino);
            m.data.insert(a.ino, Arc::new(vec![*b; *n]));
            m.symlinks.insert(a.ino);
            return;
        }
        Op::OpenUnlink(p) => {
            let ino = m.names[p];
            fs.open(ino).expect("open");
            let (dir, n) = parent_of(p, d);
            fs.unlink(dir, n.as_bytes()).expect("unlink");
            // (model_only forgets the name; the harness holds the inode open)
            model_only(m, op);
            m.orphan = Some(ino);
            return;
        }
        Op::Close => {
            fs.release(m.orphan.take().expect("an orphan"))
                .expect("release");
        }
        Op::RemoveXattr(p) => fs.removexattr(m.names[p], b"user.x").expect("removexattr"),
        Op::Falloc(p, off, len) => fs
            .fallocate(m.names[p], *off as u64, *len as u64, 0)
            .expect("fallocate"),
        Op::Punch(p, off, len) => fs
            .fallocate(
                m.names[p],
                *off as u64,
                *len as u64,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            )
            .expect("punch"),
        Op::ZeroRange(p, off, len) => fs
            .fallocate(
                m.names[p],
                *off as u64,
                *len as u64,
                libc::FALLOC_FL_ZERO_RANGE,
            )
            .expect("zero range"),
        Op::Prealloc(p, off, len) => fs
            .fallocate(
                m.names[p],
                *off as u64,
                *len as u64,
                libc::FALLOC_FL_KEEP_SIZE,
            )
            .expect("preallocate"),
        Op::RenameDir => {
            let (from, to) = if m.dir_f { (b"f", b"e") } else { (b"e", b"f") };
            fs.rename(ROOT_INO, from, ROOT_INO, to, RenameFlags::default())
                .expect("rename dir");
        }
        Op::FsyncDir => fs.fsync(d, false).expect("fsync dir"),
        Op::Write(p, off, len, b) => {
            fs.write(m.names[p], *off as u64, &vec![*b; *len])
                .expect("write");
        }
        Op::Truncate(p, size) => {
            let set = moafs_core::fs::SetAttr {
                size: Some(*size as u64),
                ..Default::default()
            };
            fs.setattr(m.names[p], &set).expect("truncate");
        }
        Op::Fsync(p) => fs.fsync(m.names[p], false).expect("fsync"),
        Op::Sync => fs.sync().expect("sync"),
        Op::Unlink(p) => {
            let (dir, n) = parent_of(p, d);
            fs.unlink(dir, n.as_bytes()).expect("unlink");
        }
        Op::Rename(a, b) => {
            let (da, na) = parent_of(a, d);
            let (db, nb) = parent_of(b, d);
            fs.rename(da, na.as_bytes(), db, nb.as_bytes(), RenameFlags::default())
                .expect("rename");
        }
        Op::Link(a, b) => {
            let (db, nb) = parent_of(b, d);
            fs.link(m.names[a], db, nb.as_bytes()).expect("link");
        }
        Op::Rmdir => fs.rmdir(ROOT_INO, m.dir_name().as_bytes()).expect("rmdir"),
        Op::WriteBehind => {
            fs.write_behind().expect("write-behind");
        }
        Op::SetXattr(p, v, n) => {
            fs.setxattr(m.names[p], b"user.x", &vec![*v; *n], Default::default())
                .expect("setxattr");
        }
    }
    model_only(m, op);
}

/// Generates the next operation of workload `name` (always valid for the model).
fn next_op(name: &str, m: &Model, rng: &mut StdRng, step: usize) -> Vec<Op> {
    const NAMES: [&str; 6] = ["a", "b", "c", "d/a", "d/b", "d/c"];
    let files = m.files();
    let pick = |rng: &mut StdRng| files[rng.gen_range(0..files.len())].clone();
    match name {
        // the random mix, while another thread commits all the time (run)
        "mix" | "inflight" => {
            let free: Vec<&str> = NAMES
                .iter()
                .copied()
                .filter(|n| !m.names.contains_key(*n))
                .collect();
            let r = rng.gen_range(0..100);
            if files.is_empty() || (r < 15 && !free.is_empty()) {
                if free.is_empty() {
                    return vec![Op::Sync];
                }
                return vec![Op::Create(free[rng.gen_range(0..free.len())].into())];
            }
            let f = pick(rng);
            match r {
                0..=44 => {
                    let off = rng.gen_range(0..6 * BS);
                    let len = rng.gen_range(1..3 * BS);
                    vec![Op::Write(f, off, len, rng.gen())]
                }
                45..=52 => vec![Op::Truncate(f, rng.gen_range(0..5 * BS))],
                53..=64 => vec![Op::Fsync(f)],
                65..=69 => vec![Op::Sync],
                70..=79 => vec![Op::Unlink(f)],
                80..=91 => {
                    let to = NAMES[rng.gen_range(0..NAMES.len())].to_string();
                    if to == f {
                        vec![Op::Sync]
                    } else {
                        vec![Op::Rename(f, to)]
                    }
                }
                92..=94 => match free.first() {
                    Some(n) => vec![Op::Link(f, n.to_string())],
                    None => vec![Op::Sync],
                },
                // small sets stay in one block; large values take continuation blocks
                95..=96 => {
                    let n = if rng.gen_bool(0.3) {
                        rng.gen_range(4_000..20_000)
                    } else {
                        rng.gen_range(1..256)
                    };
                    vec![Op::SetXattr(f, rng.gen(), n)]
                }
                _ => vec![if m.dir_e.is_some() {
                    Op::Rmdir
                } else {
                    Op::Mkdir
                }],
            }
        }
        // Replace a file's contents by writing a temporary and renaming it over, no fsync.
        "rename" => {
            let target = ["a", "d/b"][step % 2].to_string();
            let mut ops = vec![Op::Create("tmp".into())];
            let len = rng.gen_range(1..3 * BS);
            ops.push(Op::Write("tmp".into(), 0, len, rng.gen()));
            ops.push(Op::Rename("tmp".into(), target));
            if rng.gen_range(0..4) == 0 {
                ops.push(Op::Sync);
            }
            ops
        }
        // SQLite's rollback journal: save pages, fsync, overwrite in place, fsync, delete.
        "sqlite" => {
            let mut ops = Vec::new();
            if !m.names.contains_key("db") {
                ops.push(Op::Create("db".into()));
                ops.push(Op::Write("db".into(), 0, 8 * BS, 1));
                ops.push(Op::Fsync("db".into()));
                return ops;
            }
            ops.push(Op::Create("db-journal".into()));
            let pages: Vec<usize> = (0..rng.gen_range(1..4))
                .map(|_| rng.gen_range(0..10))
                .collect();
            for (k, _) in pages.iter().enumerate() {
                ops.push(Op::Write("db-journal".into(), k * BS, BS, rng.gen()));
            }
            ops.push(Op::Fsync("db-journal".into()));
            for p in &pages {
                ops.push(Op::Write("db".into(), p * BS, BS, rng.gen()));
            }
            ops.push(Op::Fsync("db".into()));
            ops.push(Op::Unlink("db-journal".into()));
            ops
        }
        // Postmark: small files created, read, appended to and deleted, in two directories.
        "postmark" => {
            let n = m.names.len();
            let r = rng.gen_range(0..4);
            if n < 4 || (r == 0 && n < 12) {
                let p = format!("{}p{step}", if step.is_multiple_of(2) { "d/" } else { "" });
                let len = rng.gen_range(512..3 * BS);
                return vec![Op::Create(p.clone()), Op::Write(p, 0, len, rng.gen())];
            }
            let f = pick(rng);
            match r {
                1 => {
                    let len = m.data[&m.names[&f]].len();
                    vec![Op::Write(f, len, rng.gen_range(1..BS), rng.gen())]
                }
                2 => vec![Op::Unlink(f)],
                _ => vec![Op::Fsync(f)],
            }
        }
        // Small files of one directory made durable, then rewritten whole again and again
        // (co-writing moves them: the harness requires each file to hold exactly one of its
        // versions after any crash, in every journal mode), with fsyncs and syncs between.
        "rewrite" => {
            let names = ["d/a", "d/b", "d/c", "d/e"];
            let f = names[rng.gen_range(0..names.len())].to_string();
            if !m.names.contains_key(&f) {
                let len = rng.gen_range(1..3 * BS);
                return vec![
                    Op::Create(f.clone()),
                    Op::Write(f, 0, len, rng.gen()),
                    Op::Sync,
                ];
            }
            let len = m.data[&m.names[&f]].len();
            match rng.gen_range(0..8) {
                0 => vec![Op::Fsync(f)],
                1 => vec![Op::Sync],
                _ => vec![Op::Write(f, 0, len, rng.gen())],
            }
        }
        // Large files (past the direct blocks) streamed in chunks, with write-behind rounds
        // between the writes: appends (whole and partial blocks), rewrites of written-behind
        // blocks, truncates, renames over, unlinks, and commits now and then.
        "behind" => {
            let names = ["a", "d/b"];
            let f = names[rng.gen_range(0..names.len())].to_string();
            if !m.names.contains_key(&f) {
                return vec![Op::Create(f.clone()), Op::Write(f, 0, 14 * BS, rng.gen())];
            }
            let len = m.data[&m.names[&f]].len();
            match rng.gen_range(0..20) {
                0..=7 if len < 48 * BS => {
                    let n = rng.gen_range(1..5 * BS);
                    vec![Op::Write(f, len, n, rng.gen()), Op::WriteBehind]
                }
                0..=9 => {
                    let off = rng.gen_range(0..len.max(1));
                    vec![Op::Write(f, off, rng.gen_range(1..3 * BS), rng.gen())]
                }
                10..=12 => vec![Op::WriteBehind],
                13 => vec![Op::Truncate(f, rng.gen_range(0..len.max(1)))],
                14 => vec![Op::Fsync(f)],
                15 => vec![Op::Sync],
                16 => {
                    let to = names[rng.gen_range(0..names.len())].to_string();
                    if to == f {
                        vec![Op::WriteBehind]
                    } else {
                        vec![Op::Rename(f, to)]
                    }
                }
                17 => vec![Op::Unlink(f)],
                _ => vec![Op::WriteBehind, Op::Write(f, len, BS, rng.gen())],
            }
        }
        // Small overwrites of durable files with fsyncs between them (the byte log serves
        // those), among whole-block overwrites, appends, truncates, renames and syncs (the
        // committer's), and writes to other files that only a commit makes durable.
        "smallupdates" => {
            let names = ["a", "b", "d/c"];
            let f = names[rng.gen_range(0..names.len())].to_string();
            if !m.names.contains_key(&f) {
                return vec![
                    Op::Create(f.clone()),
                    Op::Write(f, 0, 6 * BS + 100, rng.gen()),
                    Op::Sync,
                ];
            }
            let len = m.data[&m.names[&f]].len();
            match rng.gen_range(0..40) {
                0..=17 if len > 0 => {
                    let n = rng.gen_range(1..400).min(len);
                    let off = rng.gen_range(0..=len - n);
                    vec![Op::Write(f, off, n, rng.gen())]
                }
                18..=29 => vec![Op::Fsync(f)],
                30 => vec![Op::Sync],
                31 if len >= BS => {
                    let off = rng.gen_range(0..len / BS) * BS;
                    vec![Op::Write(f.clone(), off, BS, rng.gen()), Op::Fsync(f)]
                }
                // appends, small and across blocks: an fsync after one that needs new blocks
                // is served by allocation and slot records (issue 43)
                32 => vec![Op::Write(f, len, rng.gen_range(1..200), rng.gen())],
                39 => vec![
                    Op::Write(f.clone(), len, rng.gen_range(1..2 * BS + 100), rng.gen()),
                    Op::Fsync(f),
                ],
                33 => vec![Op::Truncate(f, rng.gen_range(0..=len))],
                34 => {
                    let to = names[rng.gen_range(0..names.len())].to_string();
                    if to == f {
                        vec![Op::Fsync(f)]
                    } else {
                        vec![Op::Rename(f, to)]
                    }
                }
                _ if len > 0 => {
                    // several small updates, then one fsync
                    let mut ops = Vec::new();
                    for _ in 0..rng.gen_range(1..4) {
                        let n = rng.gen_range(1..200).min(len);
                        let off = rng.gen_range(0..=len - n);
                        ops.push(Op::Write(f.clone(), off, n, rng.gen()));
                    }
                    ops.push(Op::Fsync(f));
                    ops
                }
                _ => vec![Op::Sync],
            }
        }
        // CrashMonkey's bounded workloads (ACE): one operation of a wider set — symbolic
        // links, xattr removal, fallocate and hole punching, a directory rename, hard links,
        // truncates, an open file unlinked (an orphan), then closed — followed by one
        // persistence point (fsync of the file, fsync of its directory, sync) or none.
        "ace" => {
            let free: Vec<&str> = NAMES
                .iter()
                .copied()
                .filter(|n| !m.names.contains_key(*n))
                .collect();
            let persist = |rng: &mut StdRng, f: Option<&String>| match rng.gen_range(0..4) {
                0 => None,
                1 => f.map(|f| Op::Fsync(f.clone())),
                2 => Some(Op::FsyncDir),
                _ => Some(Op::Sync),
            };
            if files.is_empty() || (rng.gen_range(0..6) == 0 && !free.is_empty()) {
                let Some(n) = free.first().map(|n| n.to_string()) else {
                    return vec![Op::Sync];
                };
                let mut ops = vec![
                    Op::Create(n.clone()),
                    Op::Write(n.clone(), 0, rng.gen_range(1..4 * BS), rng.gen()),
                ];
                ops.extend(persist(rng, Some(&n)));
                return ops;
            }
            let f = pick(rng);
            let len = m.data[&m.names[&f]].len();
            let (op, keeps) = match rng.gen_range(0..14) {
                0 => match free.first() {
                    Some(n) => (Op::Link(f.clone(), n.to_string()), true),
                    None => (Op::Sync, true),
                },
                1 => (Op::Truncate(f.clone(), rng.gen_range(0..=len + BS)), true),
                2 => match free.first() {
                    // short targets, and long ones (a block of their own)
                    Some(n) => {
                        let l = if rng.gen_bool(0.5) {
                            rng.gen_range(1..60)
                        } else {
                            rng.gen_range(200..4000)
                        };
                        (
                            Op::Symlink(n.to_string(), l, rng.gen_range(b'a'..=b'z')),
                            true,
                        )
                    }
                    None => (Op::Sync, true),
                },
                3 if m.xattrs.contains_key(&m.names[&f]) => (Op::RemoveXattr(f.clone()), true),
                3 | 4 => (
                    Op::SetXattr(f.clone(), rng.gen(), rng.gen_range(1..300)),
                    true,
                ),
                5 => {
                    let (off, n) = (rng.gen_range(0..6 * BS), rng.gen_range(1..3 * BS));
                    match rng.gen_range(0..2) {
                        0 => (Op::Falloc(f.clone(), off, n), true),
                        _ => (Op::Prealloc(f.clone(), off, n), true),
                    }
                }
                6 => {
                    let (off, n) = (rng.gen_range(0..len.max(1)), rng.gen_range(1..3 * BS));
                    match rng.gen_range(0..2) {
                        0 => (Op::Punch(f.clone(), off, n), true),
                        _ => (Op::ZeroRange(f.clone(), off, n), true),
                    }
                }
                7 => {
                    let to = NAMES[rng.gen_range(0..NAMES.len())].to_string();
                    if to == f || m.symlinks.contains(&m.names.get(&to).copied().unwrap_or(0)) {
                        (Op::Sync, true)
                    } else {
                        return [Some(Op::Rename(f, to.clone())), persist(rng, Some(&to))]
                            .into_iter()
                            .flatten()
                            .collect();
                    }
                }
                8 => match (m.dir_e.is_some(), rng.gen_range(0..3)) {
                    (false, _) => (Op::Mkdir, true),
                    (true, 0) => (Op::Rmdir, true),
                    (true, _) => (Op::RenameDir, true),
                },
                9 if m.orphan.is_none() => (Op::OpenUnlink(f.clone()), false),
                9 if m.orphan.is_some() => (Op::Close, true),
                10 => (Op::Unlink(f.clone()), false),
                _ => {
                    let off = rng.gen_range(0..6 * BS);
                    (
                        Op::Write(f.clone(), off, rng.gen_range(1..2 * BS), rng.gen()),
                        true,
                    )
                }
            };
            [Some(op), persist(rng, keeps.then_some(&f))]
                .into_iter()
                .flatten()
                .collect()
        }
        // A sparse file whose blocks sit behind the double-indirect pointer (past 12 direct
        // and 1,024 single-indirect blocks), written, truncated within and below that range
        // (freeing the indirect tree) and written again, with fsyncs, syncs and a small
        // file beside it.
        "big" => {
            const DI: usize = (12 + 1024) * BS;
            if !m.names.contains_key("big") {
                return vec![
                    Op::Create("big".into()),
                    Op::Write("big".into(), DI + rng.gen_range(0..8 * BS), BS, rng.gen()),
                    Op::Create("d/b".into()),
                ];
            }
            let len = m.data[&m.names["big"]].len();
            let f = "big".to_string();
            match rng.gen_range(0..16) {
                0..=5 => {
                    let off = DI + rng.gen_range(0..16 * BS);
                    vec![Op::Write(f, off, rng.gen_range(1..3 * BS), rng.gen())]
                }
                6 => vec![Op::Write(
                    f,
                    rng.gen_range(0..20 * BS),
                    rng.gen_range(1..BS),
                    rng.gen(),
                )],
                7 if len > DI => vec![Op::Truncate(f, rng.gen_range(DI..len))],
                7 | 8 => vec![Op::Truncate(f, rng.gen_range(0..DI))],
                9 | 10 => vec![Op::Fsync(f)],
                11 => vec![Op::Sync],
                12 => vec![Op::Write(
                    "d/b".into(),
                    0,
                    rng.gen_range(1..2 * BS),
                    rng.gen(),
                )],
                13 => vec![Op::Fsync("d/b".into())],
                14 => vec![Op::ZeroRange(
                    f,
                    DI + rng.gen_range(0..8 * BS),
                    rng.gen_range(1..4 * BS),
                )],
                _ => vec![Op::Punch(
                    f,
                    DI + rng.gen_range(0..8 * BS),
                    rng.gen_range(1..4 * BS),
                )],
            }
        }
        _ => unreachable!("unknown workload"),
    }
}

type Hook = Box<dyn FnMut(&FaultDevice, Option<&FaultNvm>) + Send>;

/// A device (and NVM tier) that calls `hook` before forwarding each write request or flush
/// (store or persist).
struct Tap {
    inner: Arc<FaultDevice>,
    tier: Option<Arc<FaultNvm>>,
    hook: Mutex<Option<Hook>>,
}

impl Tap {
    fn fire(&self) {
        if let Some(h) = self.hook.lock().unwrap().as_mut() {
            h(&self.inner, self.tier.as_deref());
        }
    }
}

/// The tier side of [`Tap`].
struct TapNvm(Arc<Tap>);

impl Nvm for TapNvm {
    fn size(&self) -> u64 {
        self.0.tier.as_ref().expect("a tier").size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.0.tier.as_ref().expect("a tier").read(offset, buf)
    }
    fn store(&self, offset: u64, data: &[u8]) -> DevResult<()> {
        self.0.fire();
        self.0.tier.as_ref().expect("a tier").store(offset, data)
    }
    fn persist(&self) -> DevResult<()> {
        self.0.fire();
        self.0.tier.as_ref().expect("a tier").persist()
    }
    fn counters(&self) -> NvmCounters {
        self.0.tier.as_ref().expect("a tier").counters()
    }
}

impl BlockDevice for Tap {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.fire();
        self.inner.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        self.fire();
        self.inner.writev_at(offset, bufs)
    }
    fn flush(&self) -> DevResult<()> {
        self.fire();
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> DevResult<()> {
        self.inner.discard(offset, len)
    }
    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }
}

/// Reads the whole tree of a mounted file system.
fn walk(fs: &Fs) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for e in fs.readdir(dir, 0, usize::MAX).expect("readdir") {
            let name = String::from_utf8(e.name.clone()).expect("utf8");
            if name == "." || name == ".." {
                continue;
            }
            let path = format!("{prefix}{name}");
            let a = fs.getattr(e.ino).expect("getattr");
            if a.kind == moafs_core::fs::FileKind::Symlink {
                let target = fs.readlink(e.ino).expect("readlink");
                out.insert(format!("{path}@l"), (e.ino, target.into()));
                continue;
            }
            if a.kind == moafs_core::fs::FileKind::Directory {
                if path != "d" {
                    out.insert(format!("{path}/"), (e.ino, Bytes::default()));
                }
                stack.push((e.ino, format!("{path}/")));
            } else {
                let data = fs.read(e.ino, 0, a.size as u32).expect("read");
                assert_eq!(data.len() as u64, a.size, "{path}: short read");
                if let Ok(x) = fs.getxattr(e.ino, b"user.x") {
                    out.insert(format!("{path}@x"), (e.ino, x.into()));
                }
                out.insert(path, (e.ino, data.into()));
            }
        }
    }
    out
}

/// Whether `got` is the state `want`, with contents judged by `mode` against the window;
/// `whole`: every file must hold exactly one version some state of the window gave it, with
/// `journal=ordered` or `data` (a co-write moves rewritten files and a lone rewrite is
/// journaled); with `writeback`, a file durable with data at the window's start must at least
/// be made of sectors of its own versions (a lone rewrite goes in place and may tear, but a
/// moved file's data is ordered before its new pointers: never another file's old blocks).
/// `renamed`: the write-then-rename workload, where every name but the temporary one that
/// named a file when the window opened must hold exactly one of its file's versions in every
/// mode (`docs/SEMANTICS.md`: never empty
/// or zero-filled, also with `writeback`). With `writeback`, every 512-byte sector a file
/// had in every state of the window (durable at its start, never truncated away, never
/// unlinked) must be a version some state gave it: what an fsync made durable is never lost.
fn matches(
    got: &Tree,
    want: &Tree,
    window: &[Tree],
    mode: JournalMode,
    whole: bool,
    renamed: bool,
) -> bool {
    if got.len() != want.len() {
        return false;
    }
    for ((gp, (gi, gd)), (wp, (wi, wd))) in got.iter().zip(want) {
        // u64::MAX: the state after a create in progress, whose inode number the model learns
        // when it returns (a commit on another thread may take the state before that)
        if gp != wp || (gi != wi && *wi != u64::MAX) || gd.len() != wd.len() {
            return false;
        }
        if gp.ends_with("@x") || gp.ends_with("@l") || gp.ends_with('/') {
            // Metadata: exact in every mode.
            if gd != wd {
                return false;
            }
            continue;
        }
        let durable = |i: &u64| {
            window
                .first()
                .is_some_and(|t| t.values().any(|(j, d)| j == i && !d.is_empty()))
        };
        let version = |d: &Vec<u8>| {
            window.iter().any(|t| {
                t.iter()
                    .any(|(p, (i, v))| i == gi && !p.ends_with("@x") && **v == *d)
            })
        };
        if whole && mode != JournalMode::Writeback && gd != wd && !version(gd) {
            return false;
        }
        let sectors_of_versions = |gd: &Vec<u8>| {
            gd.chunks(SECTOR).enumerate().all(|(k, chunk)| {
                let at = k * SECTOR..k * SECTOR + chunk.len();
                chunk == &wd[at.clone()]
                    || window.iter().any(|t| {
                        t.iter().any(|(p, (i, d))| {
                            i == gi
                                && !p.ends_with("@x")
                                && d.len() >= at.end
                                && d[at.clone()] == *chunk
                        })
                    })
            })
        };
        if whole && mode == JournalMode::Writeback && durable(gi) && !sectors_of_versions(gd) {
            return false;
        }
        // (a name that replaced a durable file: a first rename to a new name is a new file)
        let replaced = window.first().is_some_and(|t| t.contains_key(gp));
        if renamed && gp != "tmp" && replaced && gd != wd && !version(gd) {
            return false;
        }
        if mode == JournalMode::Writeback {
            // Sectors below the file's shortest length in the window (0 if some state lacks
            // it): their blocks were durable when the window opened and stayed the file's.
            let kept = window
                .iter()
                .map(|t| {
                    t.iter()
                        .filter(|(p, (i, _))| i == gi && !p.ends_with("@x"))
                        .map(|(_, (_, d))| d.len())
                        .max()
                        .unwrap_or(0)
                })
                .min()
                .unwrap_or(0)
                .min(gd.len());
            // (a sector of zeros when the window opened may be a hole: a write fills it
            // with a new block, which `writeback` may show stale)
            let first = window
                .first()
                .and_then(|t| t.iter().find(|(p, (i, _))| i == gi && !p.ends_with("@x")))
                .map(|(_, (_, d))| d);
            let sector_ok = |k: usize| {
                let at = k * SECTOR..((k + 1) * SECTOR).min(gd.len());
                first.is_none_or(|d| d[at.clone()].iter().all(|b| *b == 0))
                    || gd[at.clone()] == wd[at.clone()]
                    || window.iter().any(|t| {
                        t.iter().any(|(p, (i, d))| {
                            i == gi
                                && !p.ends_with("@x")
                                && d.len() >= at.end
                                && d[at.clone()] == gd[at.clone()]
                        })
                    })
            };
            if let Some(k) = (0..kept / SECTOR).find(|k| !sector_ok(*k)) {
                if std::env::var("CRASH_DEBUG").is_ok() {
                    eprintln!(
                        "{gp}: sector {k} ({} bytes kept) is no version: {:?}",
                        kept,
                        &gd[k * SECTOR..k * SECTOR + 8]
                    );
                }
                return false;
            }
        }
        match mode {
            JournalMode::Data => {
                if gd != wd {
                    return false;
                }
            }
            JournalMode::Ordered => {
                // A torn in-place overwrite mixes versions sector by sector.
                if !sectors_of_versions(gd) {
                    return false;
                }
            }
            JournalMode::Writeback => {}
        }
    }
    true
}

fn check_image(ctx: &Ctx, image: Vec<u8>, tier: Option<Vec<u8>>, win: &Window, what: &str) {
    let window = &win.states[..];
    let dev = Arc::new(MemDevice::from_bytes(image));
    let tier = tier.map(|t| Arc::new(MemNvm::from_bytes(t, NvmModel::None)));
    let nvm = tier.as_ref().map(|t| t.as_ref() as &dyn Nvm);
    let r = moafs_core::fsck::fsck_with(dev.as_ref(), false, nvm).expect("fsck runs");
    assert!(
        r.errors.is_empty(),
        "{what}: fsck -n of the crash image: {:#?}",
        r.errors
    );
    let r0_orphans = r.orphans;
    let sb = moafs_core::recovery::read_superblock(dev.as_ref()).expect("superblock");
    let plan =
        moafs_core::recovery::plan_replay_with(dev.as_ref(), &sb, nvm).expect("journal scan");
    let replay = format!(
        "superblock journal_seq {}, state {}; replay: {} transaction(s) up to {}, {} byte-log \
         record(s)",
        sb.journal_seq, sb.state, plan.transactions, plan.last_seq, plan.bytelog.records
    );
    let fs = Fs::mount_with_tier(
        dev.clone() as Arc<dyn BlockDevice>,
        tier.map(|t| (t as Arc<dyn Nvm>, TIER_PATH.to_string())),
        MountOptions {
            journal: ctx.mode,
            ..MountOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{what}: mount after the crash: {e}"));
    let got = walk(&fs);
    let whole = ctx.name == "rewrite";
    let renamed = ctx.name == "rename";
    let candidates = win.candidates();
    if !candidates
        .iter()
        .any(|w| matches(&got, w, window, ctx.mode, whole, renamed))
    {
        let show = |t: &Tree| -> Vec<(String, u64, usize)> {
            t.iter()
                .map(|(p, (i, d))| (p.clone(), *i, d.len()))
                .collect()
        };
        // where the got tree first differs from each candidate of its shape
        let differs: Vec<String> = candidates
            .iter()
            .filter(|w| w.keys().eq(got.keys()))
            .filter_map(|w| {
                got.iter()
                    .zip(w)
                    .find(|(g, w)| g != w)
                    .map(|((p, (i, d)), (_, (j, e)))| {
                        let at = d.iter().zip(e.iter()).position(|(x, y)| x != y);
                        format!(
                            "{p}: ino {i} vs {j}, {} vs {} bytes, first differing byte {at:?}",
                            d.len(),
                            e.len()
                        )
                    })
            })
            .collect();
        panic!(
            "{what}: the recovered tree is no state of the window ({replay})\n got: {:?}\n differs: {differs:#?}\n window: {:#?}\n pins: {:?}",
            show(&got),
            candidates.iter().map(show).collect::<Vec<_>>(),
            win.pins.iter().map(|(i, (at, d))| (*i, *at, d.len())).collect::<Vec<_>>()
        );
    }
    fs.unmount().expect("unmount");
    let r = moafs_core::fsck::fsck(dev.as_ref(), false).expect("fsck runs");
    assert!(
        r.errors.is_empty(),
        "{what}: fsck after remount: {:#?}",
        r.errors
    );
    assert_eq!(
        r.orphans, 0,
        "{what}: orphans left after a mount and unmount"
    );
    if r0_orphans > 0 {
        ORPHAN_STATES.fetch_add(1, Ordering::Relaxed);
    }
}

/// The path an NVM tier is mounted as (only recorded in the image).
const TIER_PATH: &str = "/crash-harness/tier";

/// Runs that wrote an xattr set over several blocks (the image's feature bit says so).
static LARGE_XATTR_RUNS: AtomicU64 = AtomicU64::new(0);

/// Crash images holding orphans (files unlinked while open) that fsck -n accepted and the
/// mount freed.
static ORPHAN_STATES: AtomicU64 = AtomicU64::new(0);

/// Runs one workload; returns the number of crash states checked and the engine's counters.
fn run(ctx: Ctx, ops: usize) -> (u64, moafs_core::fs::EngineCounters) {
    // Every third seed: the smallest journal (32 blocks), so that compact transactions of
    // small fsyncs still fill it and commits run checkpoints (the default is 64 here).
    let mem = common::new_dev_journal(IMAGE, (ctx.seed % 3 == 2).then_some(32));
    let fault = Arc::new(FaultDevice::new(
        mem as Arc<dyn BlockDevice>,
        FaultConfig {
            seed: ctx.seed,
            ..Default::default()
        },
    ));
    // Odd seeds run with an NVM tier (small fsync batches go there): 8 KiB, the least, so
    // workloads fill it and spill to the device log.
    let tap = Arc::new(Tap {
        inner: fault.clone(),
        tier: (ctx.seed % 2 == 1).then(|| Arc::new(FaultNvm::new(8 << 10))),
        hook: Mutex::new(None),
    });
    let tier = tap.tier.is_some().then(|| {
        (
            Arc::new(TapNvm(tap.clone())) as Arc<dyn Nvm>,
            TIER_PATH.to_string(),
        )
    });
    let fs = Arc::new(
        Fs::mount_with_tier(
            tap.clone() as Arc<dyn BlockDevice>,
            tier,
            MountOptions {
                journal: ctx.mode,
                // Small, so that commits come often; write-behind needs more dirty data to act on.
                dirty_bytes_max: if ctx.name == "behind" {
                    1 << 20
                } else {
                    24 << 10
                },
                flush_interval_ms: u64::MAX,
                // Half the seeds with commits logging small rewrites too (off by default):
                // seeds 0, 1 of every four (with and without the tier), the others default.
                bytelog_writeback: ctx.seed % 4 < 2,
                // Half the seeds with fsyncs of grown maps by records (off by default):
                // seeds 0 and 3 of every four (with and without the tier and write-back
                // logging).
                bytelog_grow: matches!(ctx.seed % 4, 0 | 3),
                // A small cache for the small updates: few homeless blocks fit (a quarter of
                // it), so commits also write them home (cleaning) while the workload runs.
                cache_bytes: if ctx.name == "smallupdates" {
                    64 << 10
                } else {
                    MountOptions::default().cache_bytes
                },
                ..MountOptions::default()
            },
        )
        .expect("mount"),
    );
    let d = fs
        .mkdir(ROOT_INO, b"d", 0o755, common::ME)
        .expect("mkdir")
        .ino;
    fs.sync().expect("sync");
    let window = Arc::new(Mutex::new(Window::default()));
    window.lock().unwrap().states.push(Tree::new());
    let states = Arc::new(AtomicU64::new(0));
    let request = Arc::new(AtomicU64::new(0));
    let ctx = Arc::new(ctx);
    {
        let (window, states, request, ctx) =
            (window.clone(), states.clone(), request.clone(), ctx.clone());
        *tap.hook.lock().unwrap() = Some(Box::new(
            move |dev: &FaultDevice, tier: Option<&FaultNvm>| {
                let n = request.fetch_add(1, Ordering::Relaxed);
                let w = window.lock().unwrap().clone();
                let pending = dev.unflushed_writes();
                // the tier's cut goes with the device's: nothing, everything, or a seeded
                // choice of 8-byte words of what was stored since its last persist
                let mut cuts = vec![
                    (CutMode::DropAll, NvmCut::DropAll),
                    (CutMode::KeepPrefix(usize::MAX), NvmCut::KeepAll),
                ];
                if pending > 1 || tier.is_some_and(|t| t.unpersisted() > 0) {
                    cuts.push((
                        CutMode::RandomSeed(ctx.seed ^ n),
                        NvmCut::Words(ctx.seed ^ n),
                    ));
                    cuts.push((CutMode::KeepPrefix(pending / 2), NvmCut::DropAll));
                }
                for (cut, tcut) in cuts {
                    let what = format!(
                        "workload {} journal={:?} seed {} request {n} cut {cut:?} tier {tcut:?}",
                        ctx.name, ctx.mode, ctx.seed
                    );
                    let image = dev.crash_image(cut).expect("crash image");
                    let timg = tier.map(|t| t.crash_image(tcut));
                    check_image(&ctx, image, timg, &w, &what);
                    states.fetch_add(1, Ordering::Relaxed);
                }
            },
        ));
    }
    // "inflight": a second thread commits over and over, so operations run while a commit
    // writes with the engine lock released (its state is the one at the operation boundary
    // where it started, inside the window). Not reproducible step for step, unlike the rest.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committer = (ctx.name == "inflight").then(|| {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                fs.sync().expect("background commit");
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        })
    });
    let mut rng = StdRng::seed_from_u64(ctx.seed);
    let mut m = Model::default();
    let mut step = 0;
    while step < ops {
        for op in next_op(ctx.name, &m, &mut rng, step) {
            let mut after = m.clone();
            // The state after the operation is legal from the moment it starts.
            {
                let mut probe = m.clone();
                model_only(&mut probe, &op);
                window.lock().unwrap().states.push(probe.tree());
            }
            if std::env::var("CRASH_DEBUG").is_ok() {
                eprintln!("op {op:?} at request {}", request.load(Ordering::Relaxed));
            }
            if let Op::Fsync(p) = &op {
                let ino = m.names[p];
                window.lock().unwrap().pending = Some((ino, m.data[&ino].clone()));
            }
            let served = fs.counters().bytelog_fsyncs;
            apply(&fs, &mut after, d, &op);
            let served = fs.counters().bytelog_fsyncs > served;
            if committer.is_some() {
                // room for the other thread's commits to start between operations
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            m = after;
            let mut w = window.lock().unwrap();
            w.pending = None;
            match &op {
                Op::Fsync(p) if served => {
                    // The byte log made this file durable, and nothing else.
                    let ino = m.names[p];
                    let at = w.states.len() - 1;
                    w.pins.insert(ino, (at, m.data[&ino].clone()));
                }
                Op::Fsync(_) | Op::Sync | Op::FsyncDir => {
                    // Durable: nothing before this point may come back.
                    w.states = vec![m.tree()];
                    w.pins.clear();
                }
                _ => {
                    if let Some(last) = w.states.last_mut() {
                        // The real state after it (a create's inode number is known now).
                        *last = m.tree();
                    }
                }
            }
        }
        step += 1;
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = committer {
        t.join().expect("committer thread");
    }
    *tap.hook.lock().unwrap() = None;
    if fs.superblock().features_incompat & moafs_core::format::FEATURE_LARGE_XATTR != 0 {
        LARGE_XATTR_RUNS.fetch_add(1, Ordering::Relaxed);
    }
    let counters = fs.counters();
    fs.unmount().expect("unmount");
    let final_image = fault.crash_image(CutMode::DropAll).expect("image");
    let final_tier = tap.tier.as_ref().map(|t| t.crash_image(NvmCut::DropAll));
    let done = Window {
        states: vec![m.tree()],
        ..Window::default()
    };
    check_image(&ctx, final_image, final_tier, &done, "after unmount");
    (states.load(Ordering::Relaxed), counters)
}

/// The model's half of `apply` (no engine): used to know the state after an operation.
fn model_only(m: &mut Model, op: &Op) {
    match op {
        Op::Create(p) => {
            // The engine chooses the inode number; a placeholder that no tree matches until
            // the real operation has run (a crash in the middle of a create shows the
            // state before it, or after it once the model has the number).
            m.names.insert(p.clone(), u64::MAX);
            m.data.insert(u64::MAX, Bytes::default());
        }
        Op::Write(p, off, len, b) => {
            let v = Arc::make_mut(m.data.get_mut(&m.names[p]).expect("file"));
            if v.len() < off + len {
                v.resize(off + len, 0);
            }
            v[*off..off + len].fill(*b);
        }
        Op::Truncate(p, size) => {
            Arc::make_mut(m.data.get_mut(&m.names[p]).expect("file")).resize(*size, 0)
        }
        Op::Fsync(_) | Op::Sync | Op::WriteBehind => {}
        Op::Unlink(p) => {
            let ino = m.names.remove(p).expect("named");
            if !m.names.values().any(|i| *i == ino) {
                m.data.remove(&ino);
                m.xattrs.remove(&ino);
                m.symlinks.remove(&ino);
            }
        }
        Op::Rename(a, b) => {
            if m.names.get(b) == m.names.get(a) {
                return;
            }
            let ino = m.names.remove(a).expect("named");
            if let Some(old) = m.names.insert(b.clone(), ino) {
                if old != ino && !m.names.values().any(|i| *i == old) {
                    m.data.remove(&old);
                    m.xattrs.remove(&old);
                    m.symlinks.remove(&old);
                }
            }
        }
        Op::Link(a, b) => {
            let ino = m.names[a];
            m.names.insert(b.clone(), ino);
        }
        // The engine chooses the inode number: a placeholder no tree matches (as for create).
        Op::Mkdir => m.dir_e = Some(u64::MAX),
        Op::Rmdir => m.dir_e = None,
        Op::SetXattr(p, v, n) => {
            let ino = m.names[p];
            m.xattrs.insert(ino, Arc::new(vec![*v; *n]));
        }
        Op::Symlink(p, n, b) => {
            m.names.insert(p.clone(), u64::MAX);
            m.data.insert(u64::MAX, Arc::new(vec![*b; *n]));
            m.symlinks.insert(u64::MAX);
        }
        Op::RemoveXattr(p) => {
            let ino = m.names[p];
            m.xattrs.remove(&ino);
        }
        Op::Falloc(p, off, len) => {
            let v = Arc::make_mut(m.data.get_mut(&m.names[p]).expect("file"));
            if v.len() < off + len {
                v.resize(off + len, 0);
            }
        }
        Op::Punch(p, off, len) => {
            let v = Arc::make_mut(m.data.get_mut(&m.names[p]).expect("file"));
            let end = (off + len).min(v.len());
            if *off < end {
                v[*off..end].fill(0);
            }
        }
        Op::ZeroRange(p, off, len) => {
            let v = Arc::make_mut(m.data.get_mut(&m.names[p]).expect("file"));
            if v.len() < off + len {
                v.resize(off + len, 0);
            }
            v[*off..off + len].fill(0);
        }
        Op::Prealloc(..) => {}
        Op::RenameDir => m.dir_f = !m.dir_f,
        Op::FsyncDir | Op::Close => {}
        Op::OpenUnlink(p) => model_only(m, &Op::Unlink(p.clone())),
    }
}

fn seeds() -> u64 {
    std::env::var("MOAFS_CRASH_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

fn run_all(name: &'static str, ops: usize) {
    let mut total = 0;
    let (mut served, mut tiered, mut spills, mut grown) = (0, 0, 0, 0);
    // Byte logging at write-back: blocks commits logged (homeless), voids, cleanings.
    let (mut homeless, mut voids, mut cleanings) = (0, 0, 0);
    // Co-writing (on by default; not with journal=data): batches, and moved overwrites.
    let (mut batches, mut moved, mut behind, mut overlapped) = (0, 0, 0, 0);
    // Lazy checkpoints (`checkpoint.rs`): checkpoints run by commits, revoke records.
    let (mut checkpoints, mut revokes, mut deltas) = (0, 0, 0);
    for mode in [
        JournalMode::Ordered,
        JournalMode::Data,
        JournalMode::Writeback,
    ] {
        for seed in 0..seeds() {
            // MOAFS_CRASH_ONLY=Data:5: one journal mode and seed (to chase a failure)
            if let Ok(only) = std::env::var("MOAFS_CRASH_ONLY") {
                if only != format!("{mode:?}:{seed}") {
                    continue;
                }
            }
            let (states, c) = run(Ctx { name, mode, seed }, ops);
            total += states;
            batches += c.cowrite_batches;
            moved += c.cowrite_relocated_blocks;
            behind += c.written_behind;
            overlapped += c.commits_overlapped;
            served += c.bytelog_fsyncs;
            grown += c.bytelog_map_fsyncs;
            tiered += c.tier_batches;
            spills += c.tier_spills;
            homeless += c.bytelog_wb_blocks;
            voids += c.bytelog_voids;
            cleanings += c.bytelog_cleanings;
            checkpoints += c.checkpoints;
            revokes += c.revokes;
            deltas += c.delta_blocks;
        }
    }
    eprintln!(
        "crash harness: workload {name}: {total} crash states checked; \
         {batches} co-writes, {moved} blocks moved by them, {behind} blocks written behind"
    );
    assert!(total > 0);
    eprintln!(
        "crash harness: workload {name}: {served} fsyncs served by the byte log \
         ({grown} of them for a grown block map), {tiered} batches in the NVM tier, {spills} \
         spilled to the device log"
    );
    eprintln!(
        "crash harness: workload {name}: {homeless} blocks logged by commits (homeless), \
         {voids} void records, {cleanings} cleaning commits"
    );
    eprintln!(
        "crash harness: workload {name}: {checkpoints} checkpoints, {revokes} revoke records, \
         {deltas} blocks as delta records"
    );
    if std::env::var("MOAFS_CRASH_ONLY").is_ok() {
        // one mode and seed: the workload's coverage checks below are for whole runs
        return;
    }
    assert!(checkpoints > 0, "no commit ran a checkpoint");
    assert!(deltas > 0, "no transaction carried a delta record");
    if name == "smallupdates" {
        assert!(served > 0, "the byte log served no fsync");
        assert!(
            grown > 0,
            "no fsync of a grown block map was served by records"
        );
        assert!(tiered > 0, "no batch went to the NVM tier");
        assert!(homeless > 0, "no commit logged a block");
        assert!(voids > 0, "no commit wrote a void record");
        assert!(cleanings > 0, "no commit wrote homeless blocks home");
    }
    if ["postmark", "rewrite"].contains(&name) {
        assert!(batches > 0, "co-writing was not exercised");
        assert!(moved > 0, "no overwrite was moved by co-writing");
    }
    if name == "behind" {
        assert!(behind > 0, "write-behind wrote nothing");
    }
    if name == "inflight" {
        eprintln!(
            "crash harness: workload inflight: {overlapped} commits wrote while operations ran"
        );
        assert!(overlapped > 0, "no operation ran while a commit wrote");
    }
    if name == "ace" {
        let n = ORPHAN_STATES.load(Ordering::Relaxed);
        eprintln!("crash harness: workload ace: {n} crash images held orphans");
        assert!(n > 0, "no crash image held an orphan");
    }
    if name == "mix" {
        let large = LARGE_XATTR_RUNS.load(Ordering::Relaxed);
        eprintln!("crash harness: workload mix: {large} runs wrote multi-block xattr sets");
        assert!(large > 0, "no multi-block xattr set was written");
    }
}

#[test]
fn crash_random_mix() {
    run_all("mix", 60);
}

#[test]
fn crash_commit_in_flight() {
    run_all("inflight", 60);
}

#[test]
fn crash_write_then_rename() {
    run_all("rename", 12);
}

#[test]
fn crash_sqlite_rollback_journal() {
    run_all("sqlite", 6);
}

#[test]
fn crash_small_file_rewrites() {
    run_all("rewrite", 40);
}

#[test]
fn crash_postmark_like() {
    run_all("postmark", 40);
}

#[test]
fn crash_small_updates_byte_log() {
    run_all("smallupdates", 60);
}

#[test]
fn crash_crashmonkey_ops() {
    run_all("ace", 60);
}

#[test]
fn crash_double_indirect_files() {
    run_all("big", 30);
}

#[test]
fn crash_write_behind() {
    run_all("behind", 40);
}

/// A crash during recovery: images left by the random mix with transactions (and byte-log
/// records) still to replay are mounted again and again, the power cut after every write
/// request of the mount (its replay, orphan scan and first commit) in four ways; each of
/// those images must recover to exactly the tree the uninterrupted recovery shows, fsck
/// clean.
#[test]
fn crash_during_replay() {
    let mut checked = 0u64;
    for (mode, seed) in [
        (JournalMode::Ordered, 1u64),
        (JournalMode::Data, 2),
        (JournalMode::Writeback, 3),
        (JournalMode::Ordered, 4),
    ] {
        // a run of the random mix cut short: keep every write of the device but no flush
        // after the last commit's, so that the image needs replay
        let mem = Arc::new(MemDevice::new(IMAGE));
        mkfs(mem.as_ref(), &MkfsOptions::default()).expect("mkfs");
        let fault = Arc::new(FaultDevice::new(
            mem as Arc<dyn BlockDevice>,
            FaultConfig::default(),
        ));
        let fs = Fs::mount(
            fault.clone() as Arc<dyn BlockDevice>,
            MountOptions {
                journal: mode,
                flush_interval_ms: u64::MAX,
                ..MountOptions::default()
            },
        )
        .expect("mount");
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, common::ME).unwrap().ino;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut m = Model::default();
        for step in 0..40 {
            for op in next_op("mix", &m, &mut rng, step) {
                apply(&fs, &mut m, d, &op);
            }
        }
        let x = fs.create(ROOT_INO, b"last", 0o644, common::ME).unwrap();
        fs.write(x.ino, 0, &[5u8; 9000]).unwrap();
        fs.fsync(x.ino, false).unwrap();
        let image = fault.crash_image(CutMode::DropAll).expect("image");
        drop(fs);
        let sb =
            moafs_core::recovery::read_superblock(&MemDevice::from_bytes(image.clone())).unwrap();
        let plan = moafs_core::recovery::plan_replay_with(
            &MemDevice::from_bytes(image.clone()),
            &sb,
            None,
        )
        .unwrap();
        assert!(
            plan.transactions > 0 || plan.bytelog.records > 0,
            "journal={mode:?}: nothing to replay"
        );
        let opts = MountOptions {
            journal: mode,
            ..MountOptions::default()
        };
        let reference = {
            let dev = Arc::new(MemDevice::from_bytes(image.clone()));
            let fs = Fs::mount(dev as Arc<dyn BlockDevice>, opts.clone()).expect("recovery");
            let t = walk(&fs);
            fs.unmount().unwrap();
            t
        };
        for k in 0.. {
            let dev = Arc::new(FaultDevice::new(
                Arc::new(MemDevice::from_bytes(image.clone())) as Arc<dyn BlockDevice>,
                FaultConfig {
                    fail_after_writes: Some(k),
                    ..FaultConfig::default()
                },
            ));
            let done = match Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone()) {
                Ok(fs) => {
                    // recovered without reaching the cut: once it has, the cuts are done
                    let r = fs.unmount();
                    r.is_ok() && !dev.powered_off()
                }
                Err(e) => {
                    assert!(matches!(e.to_errno(), libc::EIO), "mount cut at {k}: {e}");
                    false
                }
            };
            let cuts = [
                CutMode::DropAll,
                CutMode::KeepPrefix(usize::MAX),
                CutMode::KeepPrefix(dev.unflushed_writes() / 2),
                CutMode::RandomSeed(seed ^ k),
            ];
            for cut in cuts {
                let what = format!("journal={mode:?} replay cut after {k} writes, {cut:?}");
                let img = dev.crash_image(cut).expect("crash image");
                let dev = Arc::new(MemDevice::from_bytes(img));
                let r = moafs_core::fsck::fsck(dev.as_ref(), false).expect("fsck runs");
                assert!(r.errors.is_empty(), "{what}: fsck -n: {:#?}", r.errors);
                let fs = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, opts.clone())
                    .unwrap_or_else(|e| panic!("{what}: mount: {e}"));
                let got = walk(&fs);
                assert!(
                    got == reference,
                    "{what}: the tree differs from the uninterrupted recovery's"
                );
                fs.unmount().unwrap();
                let r = moafs_core::fsck::fsck(dev.as_ref(), false).expect("fsck runs");
                assert!(r.errors.is_empty(), "{what}: fsck after: {:#?}", r.errors);
                checked += 1;
            }
            if done {
                break;
            }
            assert!(k < 10_000, "the mount never finished");
        }
    }
    eprintln!("crash during replay: {checked} images checked");
    assert!(checked > 40, "only {checked} images");
}
