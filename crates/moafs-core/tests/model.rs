//! Property test: random operation sequences run in-process against the engine and against a
//! simple reference model; every result (errno or data) must agree, across remounts, and the
//! image must pass fsck at the end. Also concurrently: threads, each with its own directory
//! and model, while another thread commits, writes behind, drops caches and checks the
//! engine's invariants.

mod common;
use common::*;
use moafs_core::device::MemDevice;
use moafs_core::fs::{RenameFlags, SetAttr, ROOT_INO};
use moafs_core::Fs;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const PATHS: [&str; 5] = ["a", "b", "d", "d/a", "d/b"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Mkdir(usize),
    Write(usize, u32, u16, u8),
    Truncate(usize, u32),
    Read(usize),
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize),
    Link(usize, usize),
    Remount,
    Sync,
    /// A round of write-behind (the new blocks of large files written between commits).
    WriteBehind,
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PATHS.len();
    prop_oneof![
        p.clone().prop_map(Op::Create),
        p.clone().prop_map(Op::Mkdir),
        (p.clone(), 0..200_000u32, 1..20_000u16, any::<u8>())
            .prop_map(|(a, o, l, b)| Op::Write(a, o, l, b)),
        (p.clone(), 0..100_000u32).prop_map(|(a, s)| Op::Truncate(a, s)),
        p.clone().prop_map(Op::Read),
        p.clone().prop_map(Op::Unlink),
        p.clone().prop_map(Op::Rmdir),
        (p.clone(), p.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        (p.clone(), p.clone()).prop_map(|(a, b)| Op::Link(a, b)),
        Just(Op::Remount),
        Just(Op::Sync),
        Just(Op::WriteBehind),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    File(u32),
    Dir,
}

#[derive(Default)]
struct Model {
    names: BTreeMap<String, Node>,
    files: HashMap<u32, Vec<u8>>,
    next: u32,
}

fn parent(p: &str) -> Option<&str> {
    p.rsplit_once('/').map(|(d, _)| d)
}
fn leaf(p: &str) -> &str {
    p.rsplit_once('/').map(|(_, n)| n).unwrap_or(p)
}

impl Model {
    /// errno if the parent of `p` cannot hold entries.
    fn parent_ok(&self, p: &str) -> Result<(), i32> {
        match parent(p) {
            None => Ok(()),
            Some(d) => match self.names.get(d) {
                None => Err(libc::ENOENT),
                Some(Node::File(_)) => Err(libc::ENOTDIR),
                Some(Node::Dir) => Ok(()),
            },
        }
    }
    fn get(&self, p: &str) -> Result<&Node, i32> {
        self.parent_ok(p)?;
        self.names.get(p).ok_or(libc::ENOENT)
    }
    fn nonempty(&self, d: &str) -> bool {
        self.names.keys().any(|k| parent(k) == Some(d))
    }
    fn create(&mut self, p: &str, dir: bool) -> Result<(), i32> {
        self.parent_ok(p)?;
        if self.names.contains_key(p) {
            return Err(libc::EEXIST);
        }
        if dir {
            self.names.insert(p.into(), Node::Dir);
        } else {
            self.next += 1;
            self.files.insert(self.next, Vec::new());
            self.names.insert(p.into(), Node::File(self.next));
        }
        Ok(())
    }
    fn file(&mut self, p: &str) -> Result<&mut Vec<u8>, i32> {
        match self.get(p)?.clone() {
            Node::Dir => Err(libc::EISDIR),
            Node::File(id) => Ok(self.files.get_mut(&id).unwrap()),
        }
    }
    fn remove(&mut self, p: &str, dir: bool) -> Result<(), i32> {
        match (self.get(p)?, dir) {
            (Node::Dir, false) => Err(libc::EISDIR),
            (Node::File(_), true) => Err(libc::ENOTDIR),
            (Node::Dir, true) if self.nonempty(p) => Err(libc::ENOTEMPTY),
            _ => {
                self.names.remove(p);
                Ok(())
            }
        }
    }
    fn rename(&mut self, a: &str, b: &str) -> Result<(), i32> {
        let src = self.get(a)?.clone();
        self.parent_ok(b)?;
        if src == Node::Dir && b.starts_with(&format!("{a}/")) {
            return Err(libc::EINVAL);
        }
        if a == b {
            return Ok(());
        }
        if let Some(dst) = self.names.get(b).cloned() {
            if dst == src && matches!(src, Node::File(_)) {
                return Ok(());
            }
            match (&src, &dst) {
                (Node::File(_), Node::Dir) => return Err(libc::EISDIR),
                (Node::Dir, Node::File(_)) => return Err(libc::ENOTDIR),
                (Node::Dir, Node::Dir) if self.nonempty(b) => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        self.names.remove(a);
        // everything below a moved directory moves with it (renames nest directories
        // deeper than the paths the operations name)
        let below: Vec<(String, Node)> = self
            .names
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{a}/")))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in below {
            self.names.remove(&k);
            self.names.insert(format!("{b}{}", &k[a.len()..]), v);
        }
        self.names.insert(b.into(), src);
        Ok(())
    }
    fn link(&mut self, a: &str, b: &str) -> Result<(), i32> {
        let src = self.get(a)?.clone();
        self.parent_ok(b)?;
        if self.names.contains_key(b) {
            return Err(libc::EEXIST);
        }
        if src == Node::Dir {
            return Err(libc::EPERM);
        }
        self.names.insert(b.into(), src);
        Ok(())
    }
}

struct Real {
    dev: Arc<MemDevice>,
    fs: Option<Arc<Fs>>,
    /// The directory the model's paths start from.
    root: u64,
}

impl Real {
    fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }
    fn resolve(&self, p: &str) -> Result<u64, i32> {
        let mut ino = self.root;
        for part in p.split('/') {
            let a = self
                .fs()
                .lookup(ino, part.as_bytes())
                .map_err(|e| e.to_errno())?;
            if part != leaf(p) && a.kind != moafs_core::fs::FileKind::Directory {
                return Err(libc::ENOTDIR);
            }
            ino = a.ino;
        }
        Ok(ino)
    }
    fn parent_ino(&self, p: &str) -> Result<u64, i32> {
        match parent(p) {
            None => Ok(self.root),
            Some(d) => self.resolve(d),
        }
    }
}

fn run(ops: Vec<Op>) {
    let dev = new_dev(32 << 20);
    let mut real = Real {
        dev: dev.clone(),
        fs: Some(Arc::new(mount(&dev))),
        root: ROOT_INO,
    };
    let mut m = Model::default();
    for (step, op) in ops.into_iter().enumerate() {
        let ctx = format!("step {step}: {op:?}");
        if let Op::Remount = op {
            let fs = Arc::into_inner(real.fs.take().unwrap()).expect("one owner");
            fs.unmount().unwrap();
            fsck_clean(&real.dev);
            real.fs = Some(Arc::new(mount(&real.dev)));
        } else {
            apply(&real, &mut m, op, &ctx);
        }
        if let Err(e) = real.fs().check_invariants() {
            panic!("{ctx}: invariant broken: {e}");
        }
    }
    compare(&real, &m);
    Arc::into_inner(real.fs.take().unwrap())
        .expect("one owner")
        .unmount()
        .unwrap();
    fsck_clean(&dev);
}

/// The whole tree under `real.root` agrees with the model.
fn compare(real: &Real, m: &Model) {
    for (path, node) in &m.names {
        let ino = real
            .resolve(path)
            .unwrap_or_else(|e| panic!("{path} missing: {e}"));
        if let Node::File(id) = node {
            assert_eq!(
                &real.fs().read(ino, 0, 1 << 20).unwrap(),
                &m.files[id],
                "{path}"
            );
        }
    }
    let listed = real
        .fs()
        .readdir(real.root, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .count();
    let want = m.names.keys().filter(|k| parent(k).is_none()).count();
    assert_eq!(listed, want, "entries of the model's root");
}

/// One operation on the engine and the model; their results must agree.
fn apply(real: &Real, m: &mut Model, op: Op, ctx: &str) {
    match op {
        Op::Create(p) | Op::Mkdir(p) => {
            let dir = matches!(op, Op::Mkdir(_));
            let path = PATHS[p];
            let want = m.create(path, dir);
            let got = real.parent_ino(path).and_then(|pi| {
                let r = if dir {
                    real.fs().mkdir(pi, leaf(path).as_bytes(), 0o755, ME)
                } else {
                    real.fs().create(pi, leaf(path).as_bytes(), 0o644, ME)
                };
                r.map(|_| ()).map_err(|e| e.to_errno())
            });
            assert_eq!(got, want, "{ctx}");
        }
        Op::Write(p, off, len, byte) => {
            let data = vec![byte; len as usize];
            let want = m.file(PATHS[p]).map(|f| {
                let end = off as usize + len as usize;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[off as usize..end].copy_from_slice(&data);
            });
            let got = real.resolve(PATHS[p]).and_then(|i| {
                real.fs()
                    .write(i, off as u64, &data)
                    .map(|_| ())
                    .map_err(|e| e.to_errno())
            });
            assert_eq!(got, want, "{ctx}");
        }
        Op::Truncate(p, size) => {
            let want = m.file(PATHS[p]).map(|f| f.resize(size as usize, 0));
            let set = SetAttr {
                size: Some(size as u64),
                ..Default::default()
            };
            let got = real.resolve(PATHS[p]).and_then(|i| {
                real.fs()
                    .setattr(i, &set)
                    .map(|_| ())
                    .map_err(|e| e.to_errno())
            });
            assert_eq!(got, want, "{ctx}");
        }
        Op::Read(p) => {
            let want = m.file(PATHS[p]).map(|f| f.clone());
            let got = real
                .resolve(PATHS[p])
                .and_then(|i| real.fs().read(i, 0, 1 << 20).map_err(|e| e.to_errno()));
            assert_eq!(
                got.as_ref().map(|v| v.len()),
                want.as_ref().map(|v| v.len()),
                "{ctx}"
            );
            assert!(got == want, "{ctx}: contents differ");
        }
        Op::Unlink(p) | Op::Rmdir(p) => {
            let dir = matches!(op, Op::Rmdir(_));
            let path = PATHS[p];
            let want = m.remove(path, dir);
            let got = real.parent_ino(path).and_then(|pi| {
                let r = if dir {
                    real.fs().rmdir(pi, leaf(path).as_bytes())
                } else {
                    real.fs().unlink(pi, leaf(path).as_bytes())
                };
                r.map_err(|e| e.to_errno())
            });
            assert_eq!(got, want, "{ctx}");
        }
        Op::Rename(a, b) => {
            let want = m.rename(PATHS[a], PATHS[b]);
            let got = real.parent_ino(PATHS[a]).and_then(|pa| {
                real.fs()
                    .lookup(pa, leaf(PATHS[a]).as_bytes())
                    .map_err(|e| e.to_errno())?;
                let pb = real.parent_ino(PATHS[b])?;
                real.fs()
                    .rename(
                        pa,
                        leaf(PATHS[a]).as_bytes(),
                        pb,
                        leaf(PATHS[b]).as_bytes(),
                        RenameFlags::default(),
                    )
                    .map_err(|e| e.to_errno())
            });
            assert_eq!(got, want, "{ctx}");
        }
        Op::Link(a, b) => {
            let want = m.link(PATHS[a], PATHS[b]);
            let got = real.resolve(PATHS[a]).and_then(|i| {
                let pb = real.parent_ino(PATHS[b])?;
                real.fs()
                    .link(i, pb, leaf(PATHS[b]).as_bytes())
                    .map(|_| ())
                    .map_err(|e| e.to_errno())
            });
            assert_eq!(got, want, "{ctx}");
        }
        Op::Remount => unreachable!("run() remounts"),
        Op::Sync => real.fs().sync().unwrap(),
        Op::WriteBehind => {
            real.fs().write_behind().unwrap();
        }
    }
}

/// Four threads, each with its own directory and model, run random operations on one
/// engine (small dirty limit and cache: commits, throttling and evictions all the time)
/// while a fifth syncs, writes behind, drops caches and checks the engine's invariants
/// (cache, dirty and reserved counts, dirty sets, epochs) between operations, 8 rounds of 4 × 3,000 operations. Every result
/// must agree with its thread's model; at the end every tree agrees, after unmount fsck is
/// clean, and after a remount every tree agrees again.
#[test]
fn threads_match_their_models_while_the_engine_commits() {
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};
    fn random_op(rng: &mut rand::rngs::StdRng) -> Op {
        let p = |rng: &mut rand::rngs::StdRng| rng.gen_range(0..PATHS.len());
        match rng.gen_range(0..20) {
            0..=2 => Op::Create(p(rng)),
            3 => Op::Mkdir(p(rng)),
            4..=8 => Op::Write(
                p(rng),
                rng.gen_range(0..200_000),
                rng.gen_range(1..20_000),
                rng.gen(),
            ),
            9 => Op::Truncate(p(rng), rng.gen_range(0..100_000)),
            10..=12 => Op::Read(p(rng)),
            13 => Op::Unlink(p(rng)),
            14 => Op::Rmdir(p(rng)),
            15 | 16 => Op::Rename(p(rng), p(rng)),
            17 => Op::Link(p(rng), p(rng)),
            18 => Op::Sync,
            _ => Op::WriteBehind,
        }
    }
    for round in 0..8u64 {
        let dev = new_dev(64 << 20);
        let fs = Arc::new(mount_with(
            &dev,
            moafs_core::fs::MountOptions {
                dirty_bytes_max: 256 << 10,
                cache_bytes: 1 << 20,
                ..Default::default()
            },
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let background = {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match n % 4 {
                        0 => fs.sync().unwrap(),
                        1 => {
                            fs.write_behind().unwrap();
                        }
                        2 => {
                            fs.drop_caches().unwrap();
                        }
                        _ => {}
                    }
                    if let Err(e) = fs.check_invariants() {
                        panic!("round {round}: invariant broken (background check {n}): {e}");
                    }
                    n += 1;
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                n
            })
        };
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (fs, dev) = (fs.clone(), dev.clone());
                std::thread::spawn(move || {
                    let root = fs
                        .mkdir(ROOT_INO, format!("t{t}").as_bytes(), 0o755, ME)
                        .unwrap()
                        .ino;
                    let real = Real {
                        dev,
                        fs: Some(fs),
                        root,
                    };
                    let mut m = Model::default();
                    let mut rng = rand::rngs::StdRng::seed_from_u64(round * 16 + t);
                    for step in 0..3000 {
                        let op = random_op(&mut rng);
                        let ctx = format!("round {round} thread {t} step {step}: {op:?}");
                        apply(&real, &mut m, op, &ctx);
                    }
                    compare(&real, &m);
                    (root, m)
                })
            })
            .collect();
        let models: Vec<(u64, Model)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        let checks = background.join().unwrap();
        assert!(checks > 0);
        eprintln!(
            "round {round}: {checks} background rounds, {} commits",
            fs.counters().commits
        );
        fs.check_invariants().unwrap();
        Arc::into_inner(fs).expect("one owner").unmount().unwrap();
        fsck_clean(&dev);
        let fs = Arc::new(mount(&dev));
        for (root, m) in &models {
            let real = Real {
                dev: dev.clone(),
                fs: Some(fs.clone()),
                root: *root,
            };
            compare(&real, m);
        }
        Arc::into_inner(fs).expect("one owner").unmount().unwrap();
        fsck_clean(&dev);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
