//! Structure-level damage: fields of a populated image's inodes, directory, indirect, xattr
//! blocks, group headers or superblock set to fuzzer-chosen values with the crc re-sealed
//! (`moafs_check::fuzzing::damage`), then fsck -n, mount, create / write / truncate / unlink /
//! rename / mkdir / setxattr / fsync, unmount, fsck -n and -y
//! (`moafs_check::fuzzing::exercise_mutating`): no panic, no hang, no unbounded allocation.
#![no_main]
use libfuzzer_sys::fuzz_target;
use moafs_core::format::fuzzing::Structure;
use moafs_check::fuzzing::{damage, exercise_mutating, structures, EDIT_BYTES};
use moafs_fuzz_base::populated;
use std::sync::OnceLock;

#[path = "base.rs"]
mod moafs_fuzz_base;

static STRUCTURES: OnceLock<Vec<Structure>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let base = populated(false);
    let found = STRUCTURES.get_or_init(|| structures(base));
    let mut img = base.to_vec();
    // at most 8 edits: more only dilutes what each one reaches
    damage(&mut img, found, &data[..data.len().min(8 * EDIT_BYTES)]);
    exercise_mutating(img);
});
