//! Every decoder (superblock, group header, inode, directory, indirect, xattr, journal
//! descriptor and commit) on arbitrary bytes, raw and with a valid crc: no panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((kind, rest)) = data.split_first() {
        moafs_core::format::fuzzing::decode_resealed(*kind, rest);
    }
});
