//! A small populated image with fuzzer-chosen bytes changed: fsck -n, mount and walk,
//! fsck -y: no panic, no hang, and a repair that reports success leaves a clean image.
#![no_main]
use libfuzzer_sys::fuzz_target;
use moafs_fuzz_base::populated;

#[path = "base.rs"]
mod moafs_fuzz_base;

fuzz_target!(|data: &[u8]| {
    let img = moafs_check::fuzzing::patch(populated(false), data);
    moafs_check::fuzzing::exercise(img);
});
