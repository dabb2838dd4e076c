//! A directory of 1,000,000 entries stays usable: create, remount, look up, list, delete.
mod common;
use common::*;
use moafs_core::device::MemDevice;
use moafs_core::fs::ROOT_INO;
use moafs_core::mkfs::{mkfs, MkfsOptions};
use std::sync::Arc;
use std::time::Instant;

#[test]
fn million_entry_directory() {
    let default_n = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let n: u32 = std::env::var("MOAFS_MILLION_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_n);
    let dev = Arc::new(MemDevice::new(1536 << 20));
    let opts = MkfsOptions {
        bytes_per_inode: 1024,
        ..Default::default()
    };
    mkfs(dev.as_ref(), &opts).unwrap();
    let t = Instant::now();
    let d;
    {
        let fs = mount(&dev);
        d = fs.mkdir(ROOT_INO, b"big", 0o755, ME).unwrap().ino;
        for i in 0..n {
            fs.mknod(
                d,
                format!("entry-{i:07}").as_bytes(),
                libc::S_IFIFO | 0o644,
                0,
                ME,
            )
            .unwrap();
        }
        fs.unmount().unwrap();
    }
    let created = t.elapsed();
    let fs = mount(&dev);
    let t = Instant::now();
    assert!(fs
        .lookup(d, format!("entry-{:07}", n - 1).as_bytes())
        .is_ok());
    let first_lookup = t.elapsed();
    let t = Instant::now();
    for i in (0..n).step_by(997) {
        fs.lookup(d, format!("entry-{i:07}").as_bytes()).unwrap();
    }
    assert!(fs.lookup(d, b"entry-missing").is_err());
    let lookups = t.elapsed();
    let mut listed = 0usize;
    let mut off = 0;
    loop {
        let v = fs.readdir(d, off, 4096).unwrap();
        if v.is_empty() {
            break;
        }
        off = v.last().unwrap().offset;
        listed += v.len();
    }
    assert_eq!(listed, n as usize + 2);
    for i in (0..n).step_by(2) {
        fs.unlink(d, format!("entry-{i:07}").as_bytes()).unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&dev);
    eprintln!("{n} entries: created in {created:?}, first lookup after remount {first_lookup:?}, {} lookups in {lookups:?}", n / 997 + 1);
}
