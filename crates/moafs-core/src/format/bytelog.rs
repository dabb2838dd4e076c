//! The byte log (two-level logging, paper 003): small updates of file blocks logged as the
//! bytes that changed, not as whole blocks. `docs/FORMAT.md` section 13 specifies every byte.
//!
//! The byte log is a ring of 512-byte sectors in group 0, after the journal. A sync writes
//! one *batch*: a header and its records, padded to whole sectors, starting on a sector
//! boundary, in one request; a batch's sectors are never rewritten while its records are
//! live, so an acknowledged record cannot be torn by a later sync. Records carry consecutive
//! sequence numbers across batches; a batch is valid only if its crc and every record's crc
//! hold, so a torn batch (a sync that never returned) is simply not there.

use super::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::error::{FsError, FsResult};

/// The unit the byte log is written in: the logical sector of the devices moafs runs on.
pub const LOG_SECTOR: usize = 512;
pub const BATCH_MAGIC: &[u8; 4] = b"MBLG";
pub const BATCH_HEADER: usize = 32;
pub const RECORD_HEADER: usize = 56;
/// Record kind: `length` bytes at `offset` of logical block `block` of inode `ino`, whose
/// home is block `home`.
pub const KIND_BYTES: u16 = 1;
/// Record kind: the access, modification and change times of inode `ino` (36 bytes).
pub const KIND_TIMES: u16 = 2;
pub const TIMES_LEN: usize = 36;
/// Record kind (commit batches only): block `home` was written home or freed by the commit
/// that wrote this batch; earlier records of it are void. No payload.
pub const KIND_VOID: u16 = 3;
/// Record kind: the attributes of inode `ino` — mode, owner, group, flags, size and the
/// three times (`ATTR_LEN` bytes) — whose block map is the last commit's.
pub const KIND_ATTR: u16 = 4;
pub const ATTR_LEN: usize = 60;
/// Record kind (issue 43): blocks `block .. block + home` (the header's two block fields:
/// first block, count) are in use — set in their group's block bitmap at replay. No payload.
pub const KIND_ALLOC: u16 = 5;
/// Record kind (issue 43): the whole slot of inode `ino` (`INODE_BYTES`, as the next commit
/// would write it: its block map with it, extent root in the slot).
pub const KIND_SLOT: u16 = 6;
/// Batch flag: written by a commit (its write-back), part of that commit: its records count
/// only if that commit is durable (their sequence numbers are at most the floor its
/// superblock records).
pub const BATCH_COMMIT: u32 = 1;

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub ino: u64,
    pub body: RecordBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordBody {
    Bytes {
        block: u64,
        home: u64,
        offset: u32,
        data: Vec<u8>,
    },
    /// atime, mtime, ctime as (seconds, nanoseconds).
    Times([(i64, u32); 3]),
    /// Earlier records of block `home` (logical block `block` of `ino` when written) are void.
    Void { block: u64, home: u64 },
    /// The attributes of the inode (its block map, links and the rest are the image's).
    Attr(InodeAttrs),
    /// Blocks `first .. first + count` (one group's data blocks) are in use.
    Alloc { first: u64, count: u64 },
    /// The inode's whole slot, encoded (`INODE_BYTES`).
    Slot(Vec<u8>),
}

/// The fields of an inode an attribute record carries: what an fsync of a file whose block
/// map did not change may have changed besides its data (a size within the blocks it maps or
/// in a hole, a chmod, a chown, a set-id bit a write cleared, flags, times).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeAttrs {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub flags: u32,
    pub size: u64,
    /// atime, mtime, ctime as (seconds, nanoseconds).
    pub times: [(i64, u32); 3],
}

impl InodeAttrs {
    pub fn of(d: &super::DiskInode) -> InodeAttrs {
        InodeAttrs {
            mode: d.mode,
            uid: d.uid,
            gid: d.gid,
            flags: d.flags,
            size: d.size,
            times: [d.atime, d.mtime, d.ctime],
        }
    }

    /// Sets these fields of `d`.
    pub fn apply(&self, d: &mut super::DiskInode) {
        (d.mode, d.uid, d.gid, d.flags, d.size) =
            (self.mode, self.uid, self.gid, self.flags, self.size);
        [d.atime, d.mtime, d.ctime] = self.times;
    }

    /// Whether these differ from `o` in anything but the times.
    pub fn differ_beyond_times(&self, o: &InodeAttrs) -> bool {
        InodeAttrs {
            times: o.times,
            ..*self
        } != *o
    }
}

impl Record {
    /// Bytes the record takes in a batch (header, payload, padding to 8).
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER + self.payload_len().next_multiple_of(8)
    }
    fn payload_len(&self) -> usize {
        match &self.body {
            RecordBody::Bytes { data, .. } => data.len(),
            RecordBody::Times(_) => TIMES_LEN,
            RecordBody::Void { .. } | RecordBody::Alloc { .. } => 0,
            RecordBody::Attr(_) => ATTR_LEN,
            RecordBody::Slot(s) => s.len(),
        }
    }
    fn encode_into(&self, b: &mut [u8]) {
        let len = self.encoded_len();
        let b = &mut b[..len];
        b.fill(0);
        put_u32(b, 0, len as u32);
        put_u64(b, 8, self.seq);
        put_u64(b, 16, self.ino);
        match &self.body {
            RecordBody::Bytes {
                block,
                home,
                offset,
                data,
            } => {
                put_u16(b, 4, KIND_BYTES);
                put_u64(b, 24, *block);
                put_u64(b, 32, *home);
                put_u32(b, 40, *offset);
                put_u32(b, 44, data.len() as u32);
                b[RECORD_HEADER..RECORD_HEADER + data.len()].copy_from_slice(data);
            }
            RecordBody::Times(t) => {
                put_u16(b, 4, KIND_TIMES);
                put_u32(b, 44, TIMES_LEN as u32);
                for (i, (s, ns)) in t.iter().enumerate() {
                    put_u64(b, RECORD_HEADER + i * 12, *s as u64);
                    put_u32(b, RECORD_HEADER + i * 12 + 8, *ns);
                }
            }
            RecordBody::Void { block, home } => {
                put_u16(b, 4, KIND_VOID);
                put_u64(b, 24, *block);
                put_u64(b, 32, *home);
            }
            RecordBody::Alloc { first, count } => {
                put_u16(b, 4, KIND_ALLOC);
                put_u64(b, 24, *first);
                put_u64(b, 32, *count);
            }
            RecordBody::Slot(s) => {
                put_u16(b, 4, KIND_SLOT);
                put_u32(b, 44, s.len() as u32);
                b[RECORD_HEADER..RECORD_HEADER + s.len()].copy_from_slice(s);
            }
            RecordBody::Attr(a) => {
                put_u16(b, 4, KIND_ATTR);
                put_u32(b, 44, ATTR_LEN as u32);
                let p = &mut b[RECORD_HEADER..RECORD_HEADER + ATTR_LEN];
                put_u32(p, 0, a.mode);
                put_u32(p, 4, a.uid);
                put_u32(p, 8, a.gid);
                put_u32(p, 12, a.flags);
                put_u64(p, 16, a.size);
                for (i, (s, ns)) in a.times.iter().enumerate() {
                    put_u64(p, 24 + i * 12, *s as u64);
                    put_u32(p, 32 + i * 12, *ns);
                }
            }
        }
        let crc = super::crc_with_hole(b, 48, self.seq);
        put_u32(b, 48, crc);
    }

    /// Decodes the record at the start of `b`; None if it is not a valid record.
    fn decode(b: &[u8], block_size: u32) -> Option<(Record, usize)> {
        if b.len() < RECORD_HEADER {
            return None;
        }
        let len = get_u32(b, 0) as usize;
        let plen = get_u32(b, 44) as usize;
        if len < RECORD_HEADER || len > b.len() || len != RECORD_HEADER + plen.next_multiple_of(8) {
            return None;
        }
        let seq = get_u64(b, 8);
        if super::crc_with_hole(&b[..len], 48, seq) != get_u32(b, 48) {
            return None;
        }
        let ino = get_u64(b, 16);
        let payload = &b[RECORD_HEADER..RECORD_HEADER + plen];
        let body = match get_u16(b, 4) {
            KIND_BYTES => {
                let offset = get_u32(b, 40);
                if plen == 0 || offset as usize + plen > block_size as usize {
                    return None;
                }
                RecordBody::Bytes {
                    block: get_u64(b, 24),
                    home: get_u64(b, 32),
                    offset,
                    data: payload.to_vec(),
                }
            }
            KIND_TIMES if plen == TIMES_LEN => {
                let t = |i: usize| {
                    (
                        get_u64(payload, i * 12) as i64,
                        get_u32(payload, i * 12 + 8),
                    )
                };
                RecordBody::Times([t(0), t(1), t(2)])
            }
            KIND_VOID if plen == 0 => RecordBody::Void {
                block: get_u64(b, 24),
                home: get_u64(b, 32),
            },
            KIND_ALLOC if plen == 0 && get_u64(b, 32) > 0 => RecordBody::Alloc {
                first: get_u64(b, 24),
                count: get_u64(b, 32),
            },
            KIND_SLOT if plen == super::INODE_BYTES => RecordBody::Slot(payload.to_vec()),
            KIND_ATTR if plen == ATTR_LEN => {
                let t = |i: usize| {
                    (
                        get_u64(payload, 24 + i * 12) as i64,
                        get_u32(payload, 32 + i * 12),
                    )
                };
                RecordBody::Attr(InodeAttrs {
                    mode: get_u32(payload, 0),
                    uid: get_u32(payload, 4),
                    gid: get_u32(payload, 8),
                    flags: get_u32(payload, 12),
                    size: get_u64(payload, 16),
                    times: [t(0), t(1), t(2)],
                })
            }
            _ => return None,
        };
        Some((Record { seq, ino, body }, len))
    }
}

/// Salt of byte-log crcs: the file system's uuid (as the journal's) and the batch's sector.
pub fn batch_salt(uuid: &[u8; 16], sector: u64) -> u64 {
    super::journal::journal_salt(uuid) ^ sector.rotate_left(32)
}

/// Salt of the NVM tier's batches: the device log's, and the tier's own uuid, so that a
/// batch left in a tier by another tier's life never validates.
pub fn tier_batch_salt(uuid: &[u8; 16], tier: &[u8; 16], at: u64) -> u64 {
    batch_salt(uuid, at) ^ super::journal::journal_salt(tier).rotate_left(17)
}

/// Encodes `records` (consecutive sequence numbers) as a batch: whole sectors for the device
/// log (`unit` 512), whole 8-byte words for the NVM tier (`unit` 8).
pub fn encode_batch_in(records: &[Record], salt: u64, unit: usize) -> Vec<u8> {
    encode_batch_flags(records, salt, unit, 0)
}

/// [`encode_batch_in`] with batch flags ([`BATCH_COMMIT`]).
pub fn encode_batch_flags(records: &[Record], salt: u64, unit: usize, flags: u32) -> Vec<u8> {
    let bytes = BATCH_HEADER + records.iter().map(Record::encoded_len).sum::<usize>();
    let sectors = bytes.div_ceil(LOG_SECTOR);
    let mut b = vec![0u8; bytes.next_multiple_of(unit)];
    b[0..4].copy_from_slice(BATCH_MAGIC);
    put_u32(&mut b, 4, records.len() as u32);
    put_u64(&mut b, 8, records.first().map_or(0, |r| r.seq));
    put_u32(&mut b, 16, bytes as u32);
    put_u32(&mut b, 20, sectors as u32);
    put_u32(&mut b, 24, flags);
    let mut at = BATCH_HEADER;
    for r in records {
        r.encode_into(&mut b[at..]);
        at += r.encoded_len();
    }
    let crc = super::crc_with_hole(&b[..bytes], 28, salt);
    put_u32(&mut b, 28, crc);
    b
}

/// [`encode_batch_in`] for the device log.
pub fn encode_batch(records: &[Record], salt: u64) -> Vec<u8> {
    encode_batch_in(records, salt, LOG_SECTOR)
}

/// Bytes a batch of `records` holds (header and records, unpadded).
pub fn batch_bytes(records: &[Record]) -> usize {
    BATCH_HEADER + records.iter().map(Record::encoded_len).sum::<usize>()
}

/// Sectors a batch of `records` takes.
pub fn batch_sectors(records: &[Record]) -> usize {
    (BATCH_HEADER + records.iter().map(Record::encoded_len).sum::<usize>()).div_ceil(LOG_SECTOR)
}

/// A batch's header, read from its first sector: (first sequence number, sectors), if it
/// looks like one (the crc is checked by [`decode_batch`] over all its sectors).
pub fn batch_header(b: &[u8]) -> Option<(u64, usize)> {
    batch_header_bytes(b).map(|(seq, _, sectors)| (seq, sectors))
}

/// A batch's header: (first sequence number, bytes, sectors), if it looks like one.
pub fn batch_header_bytes(b: &[u8]) -> Option<(u64, usize, usize)> {
    if b.len() < BATCH_HEADER || &b[0..4] != BATCH_MAGIC {
        return None;
    }
    let sectors = get_u32(b, 20) as usize;
    let bytes = get_u32(b, 16) as usize;
    if sectors == 0 || bytes < BATCH_HEADER || bytes.div_ceil(LOG_SECTOR) != sectors {
        return None;
    }
    // numbers count up from here: a batch beyond 2^62 is not one moafs wrote
    if get_u64(b, 8) >= super::superblock::SEQ_LIMIT {
        return None;
    }
    Some((get_u64(b, 8), bytes, sectors))
}

/// A valid batch: its flags ([`BATCH_COMMIT`]) and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub flags: u32,
    pub records: Vec<Record>,
}

impl Batch {
    /// Written by a commit (its records count only if that commit is durable).
    pub fn by_commit(&self) -> bool {
        self.flags & BATCH_COMMIT != 0
    }
}

/// Decodes a whole batch (`b`: its sectors). `Ok(None)`: not a valid batch (torn, stale or
/// never written). A valid batch whose records or flags this version cannot read is an error.
pub fn decode_batch(b: &[u8], salt: u64, block_size: u32) -> FsResult<Option<Batch>> {
    let Some((seq, sectors)) = batch_header(b) else {
        return Ok(None);
    };
    let bytes = get_u32(b, 16) as usize;
    let _ = sectors;
    if b.len() < bytes || super::crc_with_hole(&b[..bytes], 28, salt) != get_u32(b, 28) {
        return Ok(None);
    }
    let flags = get_u32(b, 24);
    if flags & !BATCH_COMMIT != 0 {
        return Err(FsError::corrupt(
            "byte log",
            0,
            format!("batch of records {seq}.. has flags {flags:#x} this version cannot read"),
        ));
    }
    let count = get_u32(b, 4) as usize;
    // every record has a header: more than the bytes can hold is a lie (decode-time bound,
    // before anything is allocated for them)
    if count > (bytes - BATCH_HEADER) / RECORD_HEADER {
        return Err(FsError::corrupt(
            "byte log",
            0,
            format!("batch of records {seq}.. claims {count} records in {bytes} bytes"),
        ));
    }
    let mut out = Vec::with_capacity(count);
    let mut at = BATCH_HEADER;
    for k in 0..count {
        let Some((r, len)) = Record::decode(&b[at..bytes], block_size) else {
            return Err(FsError::corrupt(
                "byte log",
                0,
                format!("batch of records {seq}.. has a record ({k}) this version cannot read"),
            ));
        };
        if r.seq != seq + k as u64 {
            return Err(FsError::corrupt(
                "byte log",
                0,
                format!("batch of records {seq}.. holds record {} at {k}", r.seq),
            ));
        }
        out.push(r);
        at += len;
    }
    if at != bytes {
        return Ok(None);
    }
    Ok(Some(Batch {
        flags,
        records: out,
    }))
}

/// The NVM tier's header (its first 4 KiB; records live in the rest, its ring).
pub const TIER_MAGIC: &[u8; 8] = b"MOAFSNVM";
pub const TIER_HEADER: u64 = 4096;
/// Smallest tier accepted.
pub const TIER_MIN: u64 = 8 << 10;

/// The NVM tier's identity, in its first 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierHeader {
    pub uuid: [u8; 16],
    /// The file system it serves (its superblock's uuid).
    pub fs_uuid: [u8; 16],
    pub size: u64,
}

impl TierHeader {
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(TIER_MAGIC);
        put_u32(&mut b, 8, 1);
        b[16..32].copy_from_slice(&self.uuid);
        b[32..48].copy_from_slice(&self.fs_uuid);
        put_u64(&mut b, 48, self.size);
        super::seal(&mut b, 60, 0);
        b
    }
    /// None: not a moafs tier (a new file: all zero, or anything else).
    pub fn decode(b: &[u8]) -> Option<TierHeader> {
        if b.len() < 64 || &b[0..8] != TIER_MAGIC || get_u32(b, 8) != 1 {
            return None;
        }
        if super::crc_with_hole(&b[..64], 60, 0) != get_u32(b, 60) {
            return None;
        }
        Some(TierHeader {
            uuid: b[16..32].try_into().ok()?,
            fs_uuid: b[32..48].try_into().ok()?,
            size: get_u64(b, 48),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record {
                seq: 7,
                ino: 12,
                body: RecordBody::Bytes {
                    block: 3,
                    home: 900,
                    offset: 128,
                    data: vec![0xab; 130],
                },
            },
            Record {
                seq: 8,
                ino: 12,
                body: RecordBody::Times([(1, 2), (3, 4), (-5, 6)]),
            },
            Record {
                seq: 9,
                ino: 13,
                body: RecordBody::Attr(InodeAttrs {
                    mode: 0o104755,
                    uid: 1000,
                    gid: u32::MAX,
                    flags: 3,
                    size: (1 << 40) + 5,
                    times: [(-1, 999_999_999), (1 << 33, 1), (7, 0)],
                }),
            },
        ]
    }

    #[test]
    fn batch_round_trip() {
        let recs = sample();
        let b = encode_batch(&recs, 99);
        assert_eq!(b.len() % LOG_SECTOR, 0);
        assert_eq!(b.len() / LOG_SECTOR, batch_sectors(&recs));
        assert_eq!(batch_header(&b), Some((7, 1)));
        assert_eq!(
            decode_batch(&b, 99, 4096).unwrap(),
            Some(Batch {
                flags: 0,
                records: recs.clone()
            })
        );
        let c = encode_batch_flags(&recs, 99, LOG_SECTOR, BATCH_COMMIT);
        assert!(decode_batch(&c, 99, 4096).unwrap().unwrap().by_commit());
        let d = encode_batch_flags(&recs, 99, LOG_SECTOR, 2);
        assert!(
            decode_batch(&d, 99, 4096).is_err(),
            "unknown flags are refused"
        );
        // another place (salt) or any flipped byte: not a batch
        assert_eq!(decode_batch(&b, 98, 4096).unwrap(), None);
        for i in [0usize, 9, 40, 100, 250] {
            let mut c = b.clone();
            c[i] ^= 1;
            assert!(
                !matches!(decode_batch(&c, 99, 4096), Ok(Some(_))),
                "byte {i}"
            );
        }
    }

    #[test]
    fn allocation_and_slot_records_round_trip_and_bad_ones_are_refused() {
        let slot: Vec<u8> = (0..super::super::INODE_BYTES).map(|i| i as u8).collect();
        let recs = vec![
            Record {
                seq: 20,
                ino: 5,
                body: RecordBody::Alloc {
                    first: 4100,
                    count: 3,
                },
            },
            Record {
                seq: 21,
                ino: 5,
                body: RecordBody::Slot(slot.clone()),
            },
        ];
        let b = encode_batch(&recs, 7);
        let got = decode_batch(&b, 7, 4096).unwrap().unwrap();
        assert_eq!(got.records, recs);
        // an allocation of no block, or a slot of another length, in a valid batch: the
        // batch is refused (an error, not the log's end)
        for bad in [
            RecordBody::Alloc {
                first: 4100,
                count: 0,
            },
            RecordBody::Slot(slot[..128].to_vec()),
        ] {
            let r = Record {
                seq: 20,
                ino: 5,
                body: bad,
            };
            assert!(decode_batch(&encode_batch(&[r], 7), 7, 4096).is_err());
        }
    }

    #[test]
    fn a_record_count_beyond_the_bytes_is_refused_before_allocating() {
        let b = encode_batch(&sample(), 99);
        let bytes = get_u32(&b, 16) as usize;
        for count in [u32::MAX, 1 << 24, sample().len() as u32 + 1] {
            let mut c = b.clone();
            c[4..8].copy_from_slice(&count.to_le_bytes());
            let crc = crate::format::crc_with_hole(&c[..bytes], 28, 99);
            c[28..32].copy_from_slice(&crc.to_le_bytes());
            assert!(decode_batch(&c, 99, 4096).is_err(), "count {count}");
        }
    }

    #[test]
    fn records_that_overrun_the_block_are_refused() {
        let r = Record {
            seq: 1,
            ino: 2,
            body: RecordBody::Bytes {
                block: 0,
                home: 50,
                offset: 4000,
                data: vec![1; 200],
            },
        };
        let b = encode_batch(&[r], 5);
        assert!(decode_batch(&b, 5, 4096).is_err());
        assert!(decode_batch(&b, 5, 16384).unwrap().is_some());
    }
}
