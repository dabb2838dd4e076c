//! The images the fuzz targets start from (built once per process).
use moafs_core::device::{BlockDevice, CutMode, FaultConfig, FaultDevice, MemDevice};
use moafs_core::fs::{Caller, MountOptions, XattrFlags, ROOT_INO};
use moafs_core::mkfs::{mkfs, MkfsOptions};
use moafs_core::Fs;
use std::sync::{Arc, OnceLock};

static CLEAN: OnceLock<Vec<u8>> = OnceLock::new();
static NEEDS_REPLAY: OnceLock<Vec<u8>> = OnceLock::new();
/// (first byte, length) of the journal region.
pub static JOURNAL_BYTES: OnceLock<(usize, usize)> = OnceLock::new();

/// A 1 MiB image with a directory (whose xattrs span several blocks), small files, a file with an indirect block, an xattr and a
/// symlink; cleanly unmounted, or (`needs_replay`) cut right after a transaction.
pub fn populated(needs_replay: bool) -> &'static [u8] {
    let cell = if needs_replay { &NEEDS_REPLAY } else { &CLEAN };
    cell.get_or_init(|| build(needs_replay))
}

fn build(needs_replay: bool) -> Vec<u8> {
    let me = Caller::ROOT;
    let mem = Arc::new(MemDevice::new(1 << 20));
    let sb = mkfs(mem.as_ref(), &MkfsOptions::default()).expect("mkfs");
    let bs = sb.block_size as usize;
    let _ = JOURNAL_BYTES.set((
        sb.journal_start as usize * bs,
        sb.journal_blocks as usize * bs,
    ));
    let fault = Arc::new(FaultDevice::new(
        mem.clone() as Arc<dyn BlockDevice>,
        FaultConfig::default(),
    ));
    let fs = Fs::mount(fault.clone() as Arc<dyn BlockDevice>, MountOptions::default())
        .expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, me).expect("mkdir");
    for i in 0..8u8 {
        let f = fs.create(d.ino, &[b'f', b'0' + i], 0o644, me).expect("create");
        fs.write(f.ino, 0, &vec![i; 700 * i as usize + 1]).expect("write");
    }
    let big = fs.create(ROOT_INO, b"big", 0o644, me).expect("create");
    fs.write(big.ino, 0, &vec![3u8; 16 * bs]).expect("write");
    fs.setxattr(big.ino, b"user.a", b"b", XattrFlags::default())
        .expect("xattr");
    // a set over several blocks (head and continuations)
    fs.setxattr(d.ino, b"user.long", &[7u8; 9000], XattrFlags::default())
        .expect("xattr");
    fs.symlink(ROOT_INO, b"l", b"big", me).expect("symlink");
    if needs_replay {
        fs.sync().expect("sync");
        let img = fault.crash_image(CutMode::DropAll).expect("image");
        drop(fs);
        return img;
    }
    fs.unmount().expect("unmount");
    fault.crash_image(CutMode::DropAll).expect("image")
}
