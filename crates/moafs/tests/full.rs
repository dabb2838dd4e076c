//! A writer that fills the file system through the kernel's write-back cache gets ENOSPC at
//! write(2), not only at close(2) (`moafs-fuse/src/late.rs`): without it `dd if=/dev/zero
//! of=F` on a full moafs never ends. Needs root and /dev/fuse (skipped otherwise).
mod common;

use common::*;
use std::fs;
use std::io::Write;

#[test]
fn a_writer_filling_the_file_system_gets_enospc_at_write() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    mkfs(&img, "32M");
    let m = Mounted::new(&img, &mnt, "");
    let mut f = fs::File::create(mnt.join("fill")).unwrap();
    let chunk = vec![0u8; 1 << 20];
    // far more than the page cache takes before write-back: the error must come before it
    let cap: u64 = 16 << 30;
    let mut written = 0u64;
    let err = loop {
        match f.write(&chunk) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
        assert!(
            written < cap,
            "{written} bytes accepted by a 32 MiB file system"
        );
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    eprintln!("write(2) refused after {} MiB", written >> 20);
    // close reports the pages that the kernel accepted and could not write back
    let closed = f.sync_all();
    assert_eq!(closed.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    drop(f);
    // the file system still works: the space comes back when the file goes
    fs::remove_file(mnt.join("fill")).unwrap();
    fs::write(mnt.join("after"), vec![7u8; 8 << 20]).unwrap();
    m.unmount();
    assert_fsck_clean(&img);
}
