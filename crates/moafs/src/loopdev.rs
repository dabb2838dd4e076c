//! A loop device over an image file, as mount(8)'s `-o loop` attaches one: the identity under
//! which root mounts an image *file* as `fuseblk.moafs`.
//!
//! The kernel sends SYNCFS (what sync(1), `sync -f` and syncfs(2) become) only to FUSE mounts
//! of a block device (`fuseblk`), never to `fuse` ones; and it waits for the daemon's answer to
//! DESTROY before `umount` returns only on `fuseblk`. So the daemon attaches a loop device over
//! its image and mounts that. The loop device carries no I/O: the daemon reads and writes the
//! image file itself (O_DIRECT where it can), and the kernel's FUSE client never reads its
//! block device. It is attached with `LO_FLAGS_AUTOCLEAR`, so the kernel detaches it when its
//! last user lets go: the daemon closes its descriptor once the mount holds the device, and
//! the unmount's release of the superblock is then the last close (as with `mount -o loop`).
//!
//! The ioctls are the kernel's loop interface (`linux/loop.h`): `LOOP_CTL_GET_FREE` on
//! /dev/loop-control, then `LOOP_CONFIGURE` (Linux 5.8) on the free device.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const LOOP_CONTROL: &str = "/dev/loop-control";
/// `LOOP_CTL_GET_FREE`: the number of a free loop device (made if none is free).
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
/// `LOOP_CONFIGURE`: attach a file and set its status in one call (Linux 5.8).
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_NAME_SIZE: usize = 64;
const LO_KEY_SIZE: usize = 32;

/// `struct loop_info64` of `linux/loop.h`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; LO_KEY_SIZE],
    lo_init: [u64; 2],
}

/// `struct loop_config` of `linux/loop.h`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// A loop device this process attached, open. Dropping it closes the descriptor; the kernel
/// detaches the device when no one else holds it open (at once if nothing mounted it).
#[derive(Debug)]
pub struct Attached {
    path: PathBuf,
    _dev: File,
}

impl Attached {
    /// The device's path (`/dev/loopN`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Attaches a free loop device over `image` (read-only when `read_only`), to be detached by
/// the kernel at its last close.
pub fn attach(image: &Path, read_only: bool) -> io::Result<Attached> {
    let backing = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(image)?;
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .open(LOOP_CONTROL)?;
    let mut flags = LO_FLAGS_AUTOCLEAR;
    if read_only {
        flags |= LO_FLAGS_READ_ONLY;
    }
    let mut name = [0u8; LO_NAME_SIZE];
    let shown = image.as_os_str().as_encoded_bytes();
    let n = shown.len().min(LO_NAME_SIZE - 1);
    name[..n].copy_from_slice(&shown[..n]);
    // Another process may take the free device between the two calls (EBUSY): ask again.
    let mut last = io::Error::from_raw_os_error(libc::EBUSY);
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number or -1;
        // `control` is an open descriptor of /dev/loop-control for the call's duration.
        let nr = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if nr < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{nr}"));
        let dev = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(&path)?;
        let config = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: flags,
                lo_file_name: name,
                lo_crypt_name: [0; LO_NAME_SIZE],
                lo_encrypt_key: [0; LO_KEY_SIZE],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads one `struct loop_config` through the pointer, which
        // `LoopConfig` lays out exactly (repr(C), the kernel's field order and sizes: 304
        // bytes, asserted in the tests); `config` lives across the call and the kernel keeps
        // no pointer to it. `dev` and the descriptor in `config.fd` are open for the call.
        let r = unsafe {
            libc::ioctl(
                dev.as_raw_fd(),
                LOOP_CONFIGURE,
                &config as *const LoopConfig,
            )
        };
        if r == 0 {
            // the device holds its own reference to the file: `backing` may close
            return Ok(Attached { path, _dev: dev });
        }
        last = io::Error::last_os_error();
        if last.raw_os_error() != Some(libc::EBUSY) {
            return Err(last);
        }
    }
    Err(last)
}

/// The file a loop device (`/dev/loopN`, or a link to it) is attached to, from sysfs; `None`
/// for anything else or a detached device.
pub fn backing_file(dev: &Path) -> Option<PathBuf> {
    let real = dev.canonicalize().ok()?;
    let name = real.file_name()?.to_str()?;
    if !name.starts_with("loop") || real.parent() != Some(Path::new("/dev")) {
        return None;
    }
    let text = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    let p = text.trim_end_matches('\n');
    (!p.is_empty()).then(|| PathBuf::from(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_laid_out_as_the_kernels() {
        // linux/loop.h: loop_info64 is 232 bytes, loop_config 8 + 232 + 64
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
        assert_eq!(std::mem::offset_of!(LoopConfig, info), 8);
        assert_eq!(std::mem::offset_of!(LoopInfo64, lo_flags), 52);
        assert_eq!(std::mem::offset_of!(LoopInfo64, lo_file_name), 56);
    }

    #[test]
    fn backing_file_is_none_for_what_is_not_a_loop_device() {
        assert_eq!(backing_file(Path::new("/dev/null")), None);
        assert_eq!(backing_file(Path::new("/nonexistent/loop0")), None);
    }
}
