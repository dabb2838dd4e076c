//! Issue 44 item 3: the engine keeps of an inode the kernel references only its lookup
//! count; the rest of its state is dropped when idle, and nothing about what the kernel
//! may still do with it (stat it, unlink it, forget it) changes.
mod common;
use common::*;
use moafs_core::fs::{MountOptions, ROOT_INO};

#[test]
fn inodes_the_kernel_holds_are_dropped_when_idle_and_stay_usable() {
    let dev = new_dev(256 << 20);
    let opts = MountOptions {
        kernel_lookups: true,
        ..Default::default()
    };
    let fs = mount_with(&dev, opts.clone());
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
    let n = 12_000u64;
    let mut inos = Vec::new();
    for i in 0..n {
        let ino = fs
            .create(dir, format!("f{i}").as_bytes(), 0o644, ME)
            .unwrap()
            .ino;
        inos.push(ino);
    }
    fs.unmount().unwrap();
    drop(fs);
    // A walk after a remount: the kernel looks up every file and keeps it.
    let fs = mount_with(&dev, opts);
    assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap().ino, dir);
    for (i, ino) in inos.iter().enumerate() {
        assert_eq!(
            fs.lookup(dir, format!("f{i}").as_bytes()).unwrap().ino,
            *ino
        );
    }
    // a second reference to the first file, as a second lookup gives
    assert_eq!(fs.lookup(dir, b"f0").unwrap().ino, inos[0]);
    let c = fs.inode_counts();
    assert_eq!(c.referenced as u64, n + 1, "{c:?}"); // the files and the directory
    assert!(
        c.peak_in_memory <= c.idle_bound + 3 && c.in_memory <= c.idle_bound,
        "idle inodes stay in memory: {c:?}"
    );
    // dropped state reads back: attributes, names, data
    for (i, ino) in inos.iter().enumerate().step_by(997) {
        let a = fs.getattr(*ino).unwrap();
        assert_eq!((a.ino, a.nlink, a.size), (*ino, 1, 0));
        assert_eq!(
            fs.lookup(dir, format!("f{i}").as_bytes()).unwrap().ino,
            *ino
        );
        fs.forget(*ino, 1); // that lookup's reference
    }
    fs.write(inos[1], 0, b"kept").unwrap();
    fs.sync().unwrap();
    fs.tick().unwrap();
    assert_eq!(fs.read(inos[1], 0, 10).unwrap(), b"kept");

    // An unlinked file the kernel still references is not freed while it does, though its
    // state was dropped before the unlink; its last FORGET frees it.
    let free0 = fs.statfs().free_inodes;
    fs.unlink(dir, b"f0").unwrap();
    fs.unlink(dir, b"f2").unwrap();
    fs.sync().unwrap();
    fs.tick().unwrap();
    assert_eq!(fs.statfs().free_inodes, free0, "freed while referenced");
    assert_eq!(fs.getattr(inos[0]).unwrap().nlink, 0);
    fs.forget(inos[0], 1);
    fs.forget(inos[2], 1);
    fs.sync().unwrap();
    assert_eq!(
        fs.statfs().free_inodes,
        free0 + 1,
        "f2 freed, f0 held once more"
    );
    assert!(fs.getattr(inos[0]).is_ok());
    fs.forget(inos[0], 1);
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_inodes, free0 + 2);
    assert_eq!(fs.inode_counts().referenced as u64, n - 1);
    fs.check_invariants().unwrap();
    fs.unmount().unwrap();
    fsck_clean(&dev);
}
