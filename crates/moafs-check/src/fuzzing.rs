//! Shared by the fuzz targets (`fuzz/`) and the corrupt-image tests: damage an image (byte
//! patches, or structure-level edits re-sealed), run everything a user could run on it, and
//! require only that nothing panics or hangs and that fsck's repairs hold.

use moafs_core::device::{BlockDevice, MemDevice};
use moafs_core::error::FsResult;
use moafs_core::format::blockmap::{walk, MapVisitor};
use moafs_core::format::extent::ExtNode;
use moafs_core::format::fuzzing::Structure;
use moafs_core::format::{
    decode_indirect, Bounds, DiskInode, Geometry, GroupHeader, XattrBlock, XattrHead, INODE_BYTES,
};
use moafs_core::fs::{FileKind, MountOptions, RenameFlags, SetAttr, XattrFlags, ROOT_INO};
use moafs_core::Fs;
use std::sync::Arc;

/// `fsck -n`, mount and walk every file (read data, links, xattrs), unmount, `fsck -y`, and
/// after a repair `fsck -n` again. Returns whether the first `fsck -n` found something
/// (errors, or an error return). Panics only if `fsck -n` still finds something `-y` says it
/// repairs (a bug in fsck).
pub fn exercise(image: Vec<u8>) -> bool {
    let dev = Arc::new(MemDevice::from_bytes(image.clone()));
    let noticed = match moafs_core::fsck::fsck(dev.as_ref(), false) {
        Ok(r) => !r.errors.is_empty(),
        Err(_) => true,
    };
    if let Ok(fs) = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()) {
        let mut stack = vec![ROOT_INO];
        let mut seen = 0u32;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs.readdir(dir, 0, 100_000) else {
                continue;
            };
            for e in entries {
                if e.name == b"." || e.name == b".." || seen > 10_000 {
                    continue;
                }
                seen += 1;
                let Ok(a) = fs.getattr(e.ino) else { continue };
                match a.kind {
                    FileKind::Directory => stack.push(e.ino),
                    FileKind::Symlink => {
                        let _ = fs.readlink(e.ino);
                    }
                    _ => {
                        let _ = fs.read(e.ino, 0, a.size.min(1 << 22) as u32);
                        let _ = fs.listxattr(e.ino);
                    }
                }
            }
        }
        let _ = fs.unmount();
    }
    let dev = Arc::new(MemDevice::from_bytes(image));
    repair_then_check(&dev);
    noticed
}

/// `fsck -y`, and when it repaired something, `fsck -n`: only findings `-y` leaves by design
/// (`Finding::repair` is None) may remain. Panics otherwise (a bug in fsck).
fn repair_then_check(dev: &MemDevice) {
    let Ok(r) = moafs_core::fsck::fsck(dev, true) else {
        return;
    };
    if r.repaired.is_empty() {
        return;
    }
    if let Ok(again) = moafs_core::fsck::fsck(dev, false) {
        let left: Vec<_> = again
            .errors
            .iter()
            .filter(|f| f.repair().is_some())
            .collect();
        assert!(
            left.is_empty(),
            "fsck -y reported repairs ({:#?}), fsck -n still finds repairable {left:#?}",
            r.repaired
        );
    }
}

/// The image the fuzz targets start from (`fuzz/fuzz_targets/base.rs` keeps one per process):
/// 1 MiB with a directory (whose xattrs span several blocks), small files, a 16-block file
/// with an xattr, a sparse file of 12 one-block extents, and a symlink. Cleanly unmounted
/// with extent maps (disk version 3: the sparse file has an extent-tree block), or
/// (`needs_replay`) with pointer maps (version 2: the 16-block file has an indirect block)
/// and cut right after a transaction. The same every time, so fuzz inputs replay in tests.
pub fn populated_image(needs_replay: bool) -> Vec<u8> {
    use moafs_core::device::{CutMode, FaultConfig, FaultDevice};
    use moafs_core::fs::Caller;
    let me = Caller::ROOT;
    let mem = Arc::new(MemDevice::new(1 << 20));
    let opts = moafs_core::mkfs::MkfsOptions {
        pointer_maps: needs_replay,
        ..Default::default()
    };
    let sb = moafs_core::mkfs::mkfs(mem.as_ref(), &opts).expect("mkfs");
    let bs = sb.block_size as usize;
    let fault = Arc::new(FaultDevice::new(
        mem.clone() as Arc<dyn BlockDevice>,
        FaultConfig::default(),
    ));
    let fs = Fs::mount(
        fault.clone() as Arc<dyn BlockDevice>,
        MountOptions::default(),
    )
    .expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, me).expect("mkdir");
    for i in 0..8u8 {
        let f = fs
            .create(d.ino, &[b'f', b'0' + i], 0o644, me)
            .expect("create");
        fs.write(f.ino, 0, &vec![i; 700 * i as usize + 1])
            .expect("write");
    }
    let big = fs.create(ROOT_INO, b"big", 0o644, me).expect("create");
    fs.write(big.ino, 0, &vec![3u8; 16 * bs]).expect("write");
    fs.setxattr(big.ino, b"user.a", b"b", XattrFlags::default())
        .expect("xattr");
    // a set over several blocks (head and continuations)
    fs.setxattr(d.ino, b"user.long", &[7u8; 9000], XattrFlags::default())
        .expect("xattr");
    let sparse = fs.create(ROOT_INO, b"sparse", 0o644, me).expect("create");
    for i in 0..12u64 {
        fs.write(sparse.ino, 2 * i * bs as u64, &vec![i as u8 + 1; bs])
            .expect("write");
    }
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

/// Applies fuzzer bytes to `base` as patches of 5 bytes: u32 LE offset (modulo the image),
/// then a byte XORed in.
pub fn patch(base: &[u8], data: &[u8]) -> Vec<u8> {
    let mut img = base.to_vec();
    for p in data.chunks_exact(5) {
        let off = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % img.len();
        img[off] ^= p[4];
    }
    img
}

// ---- structure-level damage -------------------------------------------------------------
//
// Byte flips rarely get past a crc. Structure-level damage changes *fields* of a structure
// found in the image (an inode's pointer, a directory entry's name length, an xattr head's
// count) to chosen values — zero, all ones, just past the image, a metadata block, the
// journal, another structure's block — and then stores a valid crc, so the damage reaches
// every check behind the crc: what a buggy or hostile writer could leave.

/// The structures of a (pristine) image that damage can pick from: superblock, group
/// headers, every live inode, directory block, indirect and extent-tree block and xattr
/// block.
pub fn structures(image: &[u8]) -> Vec<Structure> {
    let dev = MemDevice::from_bytes(image.to_vec());
    let Ok(sb) = moafs_core::recovery::read_superblock(&dev) else {
        return vec![Structure::Superblock];
    };
    let bounds = Bounds::from_superblock(&sb);
    let geo = bounds.geo;
    let bs = geo.block_size as usize;
    let block = |b: u64| image.get(b as usize * bs..(b as usize + 1) * bs);
    let mut out = vec![Structure::Superblock];
    for g in 0..geo.group_count {
        out.push(Structure::GroupHeader {
            g,
            block: geo.header_block(g),
        });
    }
    for g in 0..geo.group_count {
        let Some(h) = block(geo.header_block(g))
            .and_then(|b| GroupHeader::decode(b, geo.header_block(g), g).ok())
        else {
            continue;
        };
        for i in 0..h.itable_init.min(geo.inodes_per_group) as u64 {
            let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
            let (blk, off) = geo.inode_location(ino);
            let Some(d) = block(blk).and_then(|b| {
                DiskInode::decode(&b[off..off + INODE_BYTES], ino, blk, &bounds).ok()
            }) else {
                continue;
            };
            if d.is_free() {
                continue;
            }
            out.push(Structure::Inode {
                ino,
                block: blk,
                off,
            });
            inode_structures(ino, &d, &bounds, &block, &mut out);
        }
    }
    out
}

fn inode_structures<'a>(
    ino: u64,
    d: &DiskInode,
    bounds: &Bounds,
    block: &dyn Fn(u64) -> Option<&'a [u8]>,
    out: &mut Vec<Structure>,
) {
    let is_dir = d.mode & libc::S_IFMT == libc::S_IFDIR;
    /// Every root indirect block is a structure; the walk goes below the single one only:
    /// enough to damage one and reach the rest of the map.
    struct Roots<'o, 'b, 'x> {
        out: &'o mut Vec<Structure>,
        block: &'b dyn Fn(u64) -> Option<&'x [u8]>,
        bounds: &'b Bounds,
        data: Vec<(u64, u64)>,
    }
    impl MapVisitor for Roots<'_, '_, '_> {
        fn indirect(&mut self, b: u64, level: usize) -> FsResult<Option<Vec<u32>>> {
            self.out.push(Structure::Indirect { block: b });
            Ok((level == 0)
                .then(|| (self.block)(b).and_then(|x| decode_indirect(x, b, self.bounds).ok()))
                .flatten())
        }
        fn extent_block(&mut self, b: u64, _depth: u16) -> FsResult<Option<ExtNode>> {
            self.out.push(Structure::ExtentBlock { block: b });
            Ok((self.block)(b).and_then(|x| ExtNode::decode_block(x, b, self.bounds).ok()))
        }
        fn data(&mut self, logical: u64, physical: u64) {
            self.data.push((logical, physical));
        }
    }
    let mut v = Roots {
        out,
        block,
        bounds,
        data: Vec::new(),
    };
    let _ = walk(d, bounds.geo.block_size, &mut v); // (the visitor never fails)
    let Roots { out, data, .. } = v;
    if is_dir {
        for (index, b) in data {
            out.push(Structure::Dir {
                ino,
                index,
                block: b,
            });
        }
    }
    if d.xattr_block != 0 {
        let xb = d.xattr_block as u64;
        out.push(Structure::XattrHead { ino, block: xb });
        if let Some(Ok(XattrHead::Large { cont, .. })) =
            block(xb).map(|x| XattrBlock::decode_head(x, ino, xb, bounds))
        {
            for (i, c) in cont.into_iter().enumerate() {
                out.push(Structure::XattrCont {
                    ino,
                    i: i + 1,
                    block: c,
                });
            }
        }
    }
}

/// Bytes of one edit: structure, field selector, value class, 8 value bytes.
pub const EDIT_BYTES: usize = 11;

/// Applies `data` to `image` as edits of `EDIT_BYTES` each: structure `data[0] % n` of
/// `structures`; a field of its table (or, for selectors from 0xc0, any offset in its span);
/// a value of a class chosen by `data[2]` (raw, 0, all ones, past the image, a metadata
/// block, a journal block, another structure's block, the old value plus a small delta);
/// then the structure's crc is stored again. Returns the damaged structures.
pub fn damage(image: &mut [u8], structures: &[Structure], data: &[u8]) -> Vec<Structure> {
    let mut touched = Vec::new();
    let Ok(sb) = moafs_core::recovery::read_superblock(&MemDevice::from_bytes(image.to_vec()))
    else {
        return touched;
    };
    let geo = Geometry::from_superblock(&sb);
    let bs = geo.block_size as usize;
    if structures.is_empty() {
        return touched;
    }
    for e in data.chunks_exact(EDIT_BYTES) {
        let s = structures[e[0] as usize % structures.len()];
        let (start, len) = s.span(bs);
        let fields = s.fields(bs);
        let (off, width) = if e[1] < 0xc0 && !fields.is_empty() {
            fields[e[1] as usize % fields.len()]
        } else {
            let w = [1usize, 2, 4, 8][(e[1] & 3) as usize];
            let at = u16::from_le_bytes([e[3], e[4]]) as usize % (len - w + 1);
            (at, w)
        };
        let raw = u64::from_le_bytes(e[3..11].try_into().unwrap_or([0; 8]));
        let at = s.block() as usize * bs + start + off;
        let Some(bytes) = image.get_mut(at..at + width) else {
            continue;
        };
        let mut old = [0u8; 8];
        old[..width].copy_from_slice(bytes);
        let old = u64::from_le_bytes(old);
        let small = raw % 64;
        let value = match e[2] % 9 {
            0 => raw,
            1 => 0,
            2 => u64::MAX,
            3 => geo.total_blocks + small,
            4 => geo.group_start((raw % geo.group_count as u64) as u32) + small % 8,
            5 => sb.journal_start + small,
            6 => structures[(raw % structures.len() as u64) as usize].block(),
            7 => old.wrapping_add(small).wrapping_sub(32),
            _ => old ^ (1 << (raw % (8 * width as u64))),
        };
        bytes.copy_from_slice(&value.to_le_bytes()[..width]);
        let b = s.block() as usize * bs;
        s.reseal(&mut image[b..b + bs]);
        touched.push(s);
    }
    touched
}

/// What [`exercise_mutating`] saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome {
    /// `fsck -n` of the damaged image found something (or refused it).
    pub noticed: bool,
    /// The damaged image mounted.
    pub mounted: bool,
    /// Operations tried and operations that succeeded.
    pub ops: u32,
    pub ops_ok: u32,
}

/// Like [`exercise`], with changes: `fsck -n`; mount; walk the tree; in each directory
/// create, write, mkdir and set xattrs, and on each file write (in and past the direct
/// blocks), truncate, set a small and a multi-block xattr, fsync; rename (to the root and
/// into other directories), unlink and remove xattrs of some; sync and unmount; `fsck -n`,
/// `fsck -y`, and after a repair `fsck -n` again (only what `-y` leaves by design may
/// remain). Every error is accepted; a panic (or a repair that leaves repairable findings)
/// is the bug.
pub fn exercise_mutating(image: Vec<u8>) -> Outcome {
    let mut out = Outcome::default();
    let dev = Arc::new(MemDevice::from_bytes(image));
    out.noticed = match moafs_core::fsck::fsck(dev.as_ref(), false) {
        Ok(r) => !r.errors.is_empty(),
        Err(_) => true,
    };
    if let Ok(fs) = Fs::mount(dev.clone() as Arc<dyn BlockDevice>, MountOptions::default()) {
        out.mounted = true;
        mutate(&fs, &mut out);
        let _ = fs.unmount();
    }
    let _ = moafs_core::fsck::fsck(dev.as_ref(), false);
    repair_then_check(&dev);
    out
}

/// The changes of [`exercise_mutating`] on a mounted file system (every error accepted).
pub fn mutate(fs: &Fs, out: &mut Outcome) {
    let me = moafs_core::fs::Caller::ROOT;
    let mut count = |r: bool| {
        out.ops += 1;
        out.ops_ok += r as u32;
    };
    // (directory, name, inode, kind) of what the walk found
    let mut found: Vec<(u64, Vec<u8>, u64, FileKind)> = Vec::new();
    let mut dirs = vec![ROOT_INO];
    let mut stack = vec![ROOT_INO];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs.readdir(dir, 0, 1000) else {
            continue;
        };
        for e in entries {
            if e.name == b"." || e.name == b".." || found.len() >= 200 {
                continue;
            }
            let Ok(a) = fs.getattr(e.ino) else { continue };
            let is_dir = a.kind == FileKind::Directory;
            if is_dir && dirs.len() < 16 && !dirs.contains(&e.ino) {
                dirs.push(e.ino);
                stack.push(e.ino);
            }
            if a.kind == FileKind::Symlink {
                count(fs.readlink(e.ino).is_ok());
            } else if !is_dir {
                count(fs.read(e.ino, 0, a.size.min(1 << 20) as u32).is_ok());
            }
            count(fs.listxattr(e.ino).is_ok());
            found.push((dir, e.name, e.ino, a.kind));
        }
    }
    let xf = XattrFlags::default();
    for (k, &dir) in dirs.iter().enumerate() {
        let name = format!("new{k}").into_bytes();
        if let Ok(a) = fs.create(dir, &name, 0o644, me) {
            count(fs.write(a.ino, 0, &[k as u8; 5000]).is_ok());
        }
        count(
            fs.mkdir(dir, format!("sub{k}").as_bytes(), 0o755, me)
                .is_ok(),
        );
        count(fs.setxattr(dir, b"user.fz", &[1; 100], xf).is_ok());
    }
    let bs = 4096u64;
    for (k, (dir, name, ino, kind)) in found.iter().enumerate().take(48) {
        let is_dir = *kind == FileKind::Directory;
        // what the kernel sends: data operations on regular files only
        if *kind == FileKind::Regular {
            count(fs.write(*ino, (k as u64 % 3) * 1000, &[7; 3000]).is_ok());
            count(fs.write(*ino, 14 * bs + k as u64, &[8; 100]).is_ok());
            let size = SetAttr {
                size: Some((k as u64 * 777) % (20 * bs)),
                ..Default::default()
            };
            count(fs.setattr(*ino, &size).is_ok());
            count(fs.setxattr(*ino, b"user.big", &[3; 6000], xf).is_ok());
            count(fs.fsync(*ino, false).is_ok());
        }
        let to = format!("moved{k}").into_bytes();
        match k % 4 {
            0 => count(
                fs.rename(*dir, name, ROOT_INO, &to, RenameFlags::default())
                    .is_ok(),
            ),
            1 if !is_dir => count(fs.unlink(*dir, name).is_ok()),
            1 => count(fs.rmdir(*dir, name).is_ok()),
            2 => count(fs.removexattr(*ino, b"user.big").is_ok()),
            // into another directory: a directory's move walks its new parent's ancestors
            _ => {
                let to_dir = dirs[k % dirs.len()];
                count(
                    fs.rename(*dir, name, to_dir, &to, RenameFlags::default())
                        .is_ok(),
                )
            }
        }
        if k % 8 == 7 {
            count(fs.sync().is_ok());
        }
    }
    count(fs.sync().is_ok());
}
