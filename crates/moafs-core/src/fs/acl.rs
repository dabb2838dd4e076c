//! POSIX ACLs, kept as Linux hands them over: the extended attributes
//! `system.posix_acl_access` and `system.posix_acl_default` in the kernel's xattr format
//! (`u32` version 2, then entries of `u16` tag, `u16` permissions, `u32` id, all
//! little-endian). The kernel checks permissions against them (FUSE_POSIX_ACL); the engine
//! keeps them consistent with the mode, as the kernel's own file systems do:
//!
//! * setting an access ACL sets the mode's permission bits from it, and an ACL that says no
//!   more than the mode is not stored (`posix_acl_update_mode`);
//! * chmod rewrites the access ACL's owner, mask (or group) and other entries
//!   (`posix_acl_chmod`);
//! * a new inode in a directory with a default ACL gets that ACL as its access ACL, masked by
//!   the mode it was created with, instead of the umask; a new directory also inherits it as
//!   its own default ACL (`posix_acl_create`).

use crate::error::{FsError, FsResult};

pub const ACCESS: &[u8] = b"system.posix_acl_access";
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A decoded, valid POSIX ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Decodes and checks an ACL in the xattr format: one owner, owning-group and other
    /// entry each, a mask when there are named entries, permissions within rwx.
    pub fn decode(b: &[u8]) -> FsResult<Acl> {
        let bad = |what: &str| FsError::invalid(format!("POSIX ACL: {what}"));
        if b.len() < 4 || !(b.len() - 4).is_multiple_of(8) {
            return Err(bad("length"));
        }
        if u32::from_le_bytes(b[0..4].try_into().unwrap()) != VERSION {
            return Err(bad("version"));
        }
        let entries: Vec<Entry> = b[4..]
            .chunks_exact(8)
            .map(|c| Entry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        let count = |t: u16| entries.iter().filter(|e| e.tag == t).count();
        if entries.iter().any(|e| {
            e.perm > 7 || ![USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER].contains(&e.tag)
        }) {
            return Err(bad("entry"));
        }
        if count(USER_OBJ) != 1 || count(GROUP_OBJ) != 1 || count(OTHER) != 1 {
            return Err(bad("owner, group and other entries"));
        }
        if count(MASK) > 1 || (count(MASK) == 0 && count(USER) + count(GROUP) > 0) {
            return Err(bad("mask entry"));
        }
        Ok(Acl { entries })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = VERSION.to_le_bytes().to_vec();
        for e in &self.entries {
            b.extend_from_slice(&e.tag.to_le_bytes());
            b.extend_from_slice(&e.perm.to_le_bytes());
            b.extend_from_slice(&e.id.to_le_bytes());
        }
        b
    }

    fn perm(&self, tag: u16) -> Option<u32> {
        self.entries
            .iter()
            .find(|e| e.tag == tag)
            .map(|e| u32::from(e.perm))
    }

    fn set(&mut self, tag: u16, perm: u32) {
        for e in self.entries.iter_mut().filter(|e| e.tag == tag) {
            e.perm = (perm & 7) as u16;
        }
    }

    /// The permission bits (0o777) the ACL implies for the mode: owner, mask (or owning
    /// group when there is no mask), other.
    pub fn mode_bits(&self) -> u32 {
        let group = self.perm(MASK).or(self.perm(GROUP_OBJ)).unwrap_or(0);
        (self.perm(USER_OBJ).unwrap_or(0) << 6) | (group << 3) | self.perm(OTHER).unwrap_or(0)
    }

    /// Whether the mode says all the ACL says (only owner, group and other entries).
    pub fn is_equivalent_to_mode(&self) -> bool {
        self.entries
            .iter()
            .all(|e| [USER_OBJ, GROUP_OBJ, OTHER].contains(&e.tag))
    }

    /// chmod: owner, mask (or group) and other take the new mode's bits.
    pub fn chmod(&mut self, mode: u32) {
        self.set(USER_OBJ, mode >> 6);
        if self.perm(MASK).is_some() {
            self.set(MASK, mode >> 3);
        } else {
            self.set(GROUP_OBJ, mode >> 3);
        }
        self.set(OTHER, mode);
    }

    /// A new inode's access ACL from its directory's default ACL and the mode it was created
    /// with (the kernel's `posix_acl_create_masq`): each of owner, mask (or group) and other
    /// keeps only what both allow. Returns the new permission bits of the mode.
    pub fn create_masq(&mut self, mode: u32) -> u32 {
        let u = self.perm(USER_OBJ).unwrap_or(0) & (mode >> 6) & 7;
        let o = self.perm(OTHER).unwrap_or(0) & mode & 7;
        let gtag = if self.perm(MASK).is_some() {
            MASK
        } else {
            GROUP_OBJ
        };
        let g = self.perm(gtag).unwrap_or(0) & (mode >> 3) & 7;
        self.set(USER_OBJ, u);
        self.set(OTHER, o);
        self.set(gtag, g);
        (u << 6) | (g << 3) | o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        Acl {
            entries: entries
                .iter()
                .map(|&(tag, perm, id)| Entry { tag, perm, id })
                .collect(),
        }
        .encode()
    }

    #[test]
    fn decode_checks_and_round_trips() {
        let full = acl(&[
            (USER_OBJ, 7, u32::MAX),
            (USER, 5, 1000),
            (GROUP_OBJ, 5, u32::MAX),
            (MASK, 5, u32::MAX),
            (OTHER, 0, u32::MAX),
        ]);
        let a = Acl::decode(&full).unwrap();
        assert_eq!(a.encode(), full);
        assert_eq!(a.mode_bits(), 0o750);
        assert!(!a.is_equivalent_to_mode());
        // named entry without a mask, missing other, bad version, bad length
        assert!(Acl::decode(&acl(&[
            (USER_OBJ, 7, 0),
            (USER, 5, 1),
            (GROUP_OBJ, 5, 0),
            (OTHER, 0, 0)
        ]))
        .is_err());
        assert!(Acl::decode(&acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0)])).is_err());
        let mut v = full.clone();
        v[0] = 1;
        assert!(Acl::decode(&v).is_err());
        assert!(Acl::decode(&full[..full.len() - 1]).is_err());
        let basic =
            Acl::decode(&acl(&[(USER_OBJ, 6, 0), (GROUP_OBJ, 4, 0), (OTHER, 4, 0)])).unwrap();
        assert!(basic.is_equivalent_to_mode());
        assert_eq!(basic.mode_bits(), 0o644);
    }

    #[test]
    fn chmod_and_create_follow_the_kernel() {
        let mut a = Acl::decode(&acl(&[
            (USER_OBJ, 7, 0),
            (USER, 7, 1000),
            (GROUP_OBJ, 7, 0),
            (MASK, 7, 0),
            (OTHER, 5, 0),
        ]))
        .unwrap();
        a.chmod(0o640);
        assert_eq!(a.mode_bits(), 0o640);
        assert_eq!(
            a.perm(GROUP_OBJ),
            Some(7),
            "the group entry stays; the mask changes"
        );
        let mut d =
            Acl::decode(&acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 1, 0)])).unwrap();
        assert_eq!(d.create_masq(0o666), 0o640);
        assert_eq!(d.mode_bits(), 0o640);
    }
}
