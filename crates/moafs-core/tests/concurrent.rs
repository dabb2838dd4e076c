//! Reads run outside the engine lock: they must never see another file's data, even while the
//! blocks they mapped are freed and reused by concurrent truncates, creates and commits.
mod common;
use common::*;
use moafs_core::device::{BlockDevice, DevResult, DeviceCounters, MemDevice};
use moafs_core::fs::{MountOptions, SetAttr, ROOT_INO};
use moafs_core::Fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn reads_never_see_reused_blocks() {
    let dev = new_dev(64 << 20);
    // reads take a while, so a read outside the engine lock overlaps the writer's commits
    let slow: Arc<dyn BlockDevice> = Arc::new(Slow {
        inner: dev.clone(),
        read: std::time::Duration::from_millis(3),
        flush: std::time::Duration::ZERO,
    });
    // a tiny cache, so that reads of b go to the device
    let opts = MountOptions {
        cache_bytes: 64 << 10,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(slow, opts).unwrap());
    let b = fs.create(ROOT_INO, b"b", 0o644, ME).unwrap().ino;
    let full_b = vec![b'B'; 256 << 10];
    fs.write(b, 0, &full_b).unwrap();
    fs.sync().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let got = fs.read(b, 0, 256 << 10).unwrap();
                    assert!(
                        got.iter().all(|x| *x == b'B' || *x == 0),
                        "read of b saw another file's bytes"
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for round in 0..300 {
        fs.setattr(
            b,
            &SetAttr {
                size: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        fs.sync().unwrap();
        let name = format!("c{round}");
        let c = fs.create(ROOT_INO, name.as_bytes(), 0o644, ME).unwrap().ino;
        fs.write(c, 0, &vec![b'C'; 256 << 10]).unwrap();
        fs.sync().unwrap();
        fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
        // c's blocks become free again, and b is rewritten into them: b and c keep trading
        // the same blocks, round after round
        fs.sync().unwrap();
        fs.write(b, 0, &full_b).unwrap();
        fs.sync().unwrap();
        // let the readers map b's blocks and start their (slow) device reads
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let total: u64 = readers
        .into_iter()
        .map(|h| h.join().expect("reader panicked"))
        .sum();
    assert!(total > 0);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

/// Holds the first vectored write after `arm` until released (later ones pass): write-behind's
/// device writes are then in flight while the test changes the file and starts a commit.
struct Gate {
    dev: Arc<MemDevice>,
    armed: AtomicBool,
    state: std::sync::Mutex<(bool, bool)>, // (a write is waiting, released)
    cv: std::sync::Condvar,
}

/// The engine mounted over a gate on `mem`.
fn gated(mem: &Arc<MemDevice>) -> (Arc<Gate>, Arc<Fs>) {
    let gate = Arc::new(Gate {
        dev: mem.clone(),
        armed: AtomicBool::new(false),
        state: std::sync::Mutex::new((false, false)),
        cv: std::sync::Condvar::new(),
    });
    let dev = gate.clone() as Arc<dyn BlockDevice>;
    // Data does not age here (`fs/aging.rs`): write-behind takes every large file's new
    // blocks, young or not (tests/aging.rs has write-behind with young data).
    let opts = MountOptions {
        dirty_expire_ms: 0,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(dev, opts).unwrap());
    (gate, fs)
}

impl Gate {
    fn wait_entered(&self) {
        let mut s = self.state.lock().unwrap();
        while !s.0 {
            s = self.cv.wait(s).unwrap();
        }
    }
    fn release(&self) {
        let mut s = self.state.lock().unwrap();
        s.1 = true;
        self.cv.notify_all();
    }
    fn arm(&self) {
        *self.state.lock().unwrap() = (false, false);
        self.armed.store(true, Ordering::SeqCst);
    }
}

impl BlockDevice for Gate {
    fn size(&self) -> u64 {
        self.dev.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.dev.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> DevResult<()> {
        self.dev.write_at(offset, buf)
    }
    fn writev_at(&self, offset: u64, bufs: &[&[u8]]) -> DevResult<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            self.cv.notify_all();
            while !s.1 {
                s = self.cv.wait(s).unwrap();
            }
        }
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

#[test]
fn write_behind_runs_outside_the_lock_and_keeps_what_changed_meanwhile() {
    const BS: usize = 4096;
    let mem = new_dev(32 << 20);
    let (gate, fs) = gated(&mem);
    let ino = fs.create(ROOT_INO, b"big", 0o644, ME).unwrap().ino;
    fs.write(ino, 0, &vec![1u8; 64 * BS]).unwrap();

    // Round 1: while its device writes wait, the engine serves a rewrite of two of the
    // blocks being written and a read; those two stay dirty, the other 62 become clean.
    gate.arm();
    let t = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.write_behind().unwrap())
    };
    gate.wait_entered();
    fs.write(ino, 0, &vec![2u8; 2 * BS]).unwrap();
    assert_eq!(fs.read(ino, 10 * BS as u64, 4).unwrap(), vec![1u8; 4]);
    gate.release();
    assert_eq!(t.join().unwrap(), 62, "blocks written behind and unchanged");
    assert_eq!(fs.counters().written_behind, 62);

    // Round 2: a commit started while write-behind writes waits for it, then finishes the
    // round itself (it holds the engine lock first) instead of writing its blocks again.
    fs.write(ino, 64 * BS as u64, &vec![3u8; 64 * BS]).unwrap();
    let before = fs.counters();
    gate.arm();
    let t = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.write_behind().unwrap())
    };
    gate.wait_entered();
    let syncer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync().unwrap())
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !syncer.is_finished(),
        "a commit ran during write-behind's writes"
    );
    gate.release();
    syncer.join().unwrap();
    t.join().unwrap();
    let c = fs.counters().since(&before);
    assert_eq!(c.written_behind, 64, "the round was not finished");
    // Only the two blocks rewritten during round 1 (overwrites of placed blocks, journaled
    // with journal=ordered) — not the 64 of this round.
    assert_eq!(
        c.data_blocks_journaled, 2,
        "the commit journaled the round again"
    );

    fs.sync().unwrap();
    drop(fs);
    fsck_clean(&mem);
    let fs = mount(&mem);
    let ino = fs.lookup(ROOT_INO, b"big").unwrap().ino;
    let got = fs.read(ino, 0, (128 * BS) as u32).unwrap();
    let mut want = vec![1u8; 64 * BS];
    want[..2 * BS].fill(2);
    want.extend(vec![3u8; 64 * BS]);
    assert!(got == want, "file contents after remount");
    drop(fs);
    fsck_clean(&mem);
}

/// A block freed while a commit writes (with the engine lock released) is shown free by the
/// next transaction and reusable only after the one after it, as every free is: the frees a
/// commit takes are sealed at its start, those made during its I/O wait for two more commits
/// (else the next-but-one commit's data could land on a block an older transaction still
/// points at).
#[test]
fn blocks_freed_while_a_commit_writes_wait_two_more_commits() {
    let mem = new_dev(32 << 20);
    let (gate, fs) = gated(&mem);
    let x = fs.create(ROOT_INO, b"x", 0o644, ME).unwrap().ino;
    fs.write(x, 0, &[7u8; 4096]).unwrap();
    fs.sync().unwrap();
    let freed = fs.block_map(x).unwrap()[0];
    assert_ne!(freed, 0);
    // commit E has something to write; hold its first device write
    let y = fs.create(ROOT_INO, b"y", 0o644, ME).unwrap().ino;
    fs.write(y, 0, &[8u8; 4096]).unwrap();
    gate.arm();
    let t = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync().unwrap())
    };
    gate.wait_entered();
    // E writes with the engine lock released: x goes now
    fs.unlink(ROOT_INO, b"x").unwrap();
    fs.forget(x, 1);
    gate.release();
    t.join().unwrap();
    fs.sync().unwrap(); // E+1: shows x's block free
    let z = fs.create(ROOT_INO, b"z", 0o644, ME).unwrap().ino;
    fs.write(z, 0, &[9u8; 4096]).unwrap();
    fs.sync().unwrap(); // E+2 places z
    assert_ne!(
        fs.block_map(z).unwrap()[0],
        freed,
        "a block freed during commit E was reused by commit E+2"
    );
    fs.check_invariants().unwrap();
    // and two commits on it is free again
    let w = fs.create(ROOT_INO, b"w", 0o644, ME).unwrap().ino;
    fs.write(w, 0, &[6u8; 4096]).unwrap();
    fs.sync().unwrap();
    assert_eq!(
        fs.block_map(w).unwrap()[0],
        freed,
        "the freed block came back"
    );
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    fsck_clean(&mem);
}
