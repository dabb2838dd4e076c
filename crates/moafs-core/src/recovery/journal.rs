//! Journal replay: finding the valid transactions after the replay floor, in order, and the
//! final image of every block they write (FORMAT.md's journal section). Used by the mount
//! (`fs/mount.rs`) and by fsck alike; it reads the device and the format, never the
//! engine's state.

use crate::device::{BlockDevice, Nvm};
use crate::error::{FsError, FsResult};
use crate::format::journal::{
    body_crc, decode_deltas, decode_revokes, journal_salt, payload_crc, txn_blocks, Commit, Delta,
    Descriptor, Inline, JOURNAL_MAGIC, TAG_BLOCK, TAG_DELTA, TAG_ESCAPED, TAG_REVOKE,
};
use crate::format::Superblock;
use std::collections::{BTreeMap, HashMap};

/// What a replay will do: the final image of every block it writes.
#[derive(Debug, Default)]
pub struct Replay {
    /// Sequence number of the newest valid transaction (0: none found).
    pub last_seq: u64,
    /// Transactions re-applied.
    pub transactions: usize,
    /// Revoke records among them.
    pub revoked: usize,
    /// Home block → image after all replayed transactions and byte-log records.
    pub blocks: BTreeMap<u64, Vec<u8>>,
    /// The byte log's records applied after the transactions.
    pub bytelog: super::ByteLogReplay,
}

/// A valid transaction found in the journal.
struct Txn {
    checkpointed: u64,
    writes: Vec<(u64, Vec<u8>)>,
    /// Blocks whose images in older transactions must not be replayed.
    revokes: Vec<u64>,
    /// Changes to blocks relative to their image before this transaction.
    deltas: Vec<Delta>,
}

/// Reads and validates the transaction whose first descriptor is at journal position `pos`.
fn read_txn(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    salt: u64,
    pos: u64,
    first: &Descriptor,
) -> FsResult<Option<Txn>> {
    let bs = sb.block_size as u64;
    if let Some(inline) = &first.inline {
        return read_compact(dev, sb, salt, pos, first, inline);
    }
    let n = txn_blocks(first.payload as usize, sb.block_size) as u64;
    if first.index != 0
        || first.count as u64 != n - first.payload as u64 - 1
        || pos + n > sb.journal_blocks as u64
    {
        return Ok(None);
    }
    let mut raw = vec![0u8; (n * bs) as usize];
    dev.read_at((sb.journal_start + pos) * bs, &mut raw)?;
    let blocks: Vec<&[u8]> = raw.chunks(bs as usize).collect();
    let at = |i: usize| sb.journal_start + pos + i as u64;
    let Ok(Some(commit)) = Commit::decode(blocks[n as usize - 1], salt, at(n as usize - 1)) else {
        return Ok(None);
    };
    if commit.seq != first.seq
        || commit.blocks as u64 != n - 1
        || commit.body_crc != body_crc(salt, &blocks[..n as usize - 1])
    {
        return Ok(None);
    }
    let mut tags = Vec::with_capacity(first.payload as usize);
    for (i, blk) in blocks.iter().take(first.count as usize).enumerate() {
        let Ok(Some(d)) = Descriptor::decode(blk, salt, at(i)) else {
            return Ok(None);
        };
        if d.seq != first.seq || d.index as usize != i {
            return Ok(None);
        }
        tags.extend(d.tags);
    }
    if tags.len() != first.payload as usize {
        return Ok(None);
    }
    let payloads = &blocks[first.count as usize..n as usize - 1];
    let at_payload = |k: usize| at(first.count as usize + k);
    txn_from(sb, first, &tags, payloads, &at_payload, &Inline::default()).map(Some)
}

/// A compact transaction (FORMAT §12) whose header is at journal position `pos`: valid when
/// every payload block matches its tag's crc.
fn read_compact(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    salt: u64,
    pos: u64,
    first: &Descriptor,
    inline: &Inline,
) -> FsResult<Option<Txn>> {
    let bs = sb.block_size as u64;
    let n = 1 + first.payload as u64;
    if pos + n > sb.journal_blocks as u64 {
        return Ok(None);
    }
    let mut raw = vec![0u8; (first.payload as u64 * bs) as usize];
    dev.read_at((sb.journal_start + pos + 1) * bs, &mut raw)?;
    let payloads: Vec<&[u8]> = raw.chunks(bs as usize).collect();
    if first
        .tags
        .iter()
        .zip(&payloads)
        .any(|(t, p)| t.crc != payload_crc(salt, first.seq, p))
    {
        return Ok(None); // not all of it reached the device
    }
    let at = |k: usize| sb.journal_start + pos + 1 + k as u64;
    txn_from(sb, first, &first.tags, &payloads, &at, inline).map(Some)
}

/// The transaction whose tags are `tags`, payload blocks `payloads` (at journal blocks
/// `at(k)`) and inline revokes and delta records `inline`, checked: a valid transaction
/// that names a block outside the file system, or a record kind this version does not know,
/// is corrupt.
fn txn_from(
    sb: &Superblock,
    first: &Descriptor,
    tags: &[crate::format::journal::Tag],
    payloads: &[&[u8]],
    at: &dyn Fn(usize) -> u64,
    inline: &Inline,
) -> FsResult<Txn> {
    let home = |b: u64| b < sb.total_blocks && !sb.log_range().contains(&b);
    let mut writes = Vec::with_capacity(tags.len());
    let mut revokes = inline.revokes.clone();
    let mut deltas = inline.deltas.clone();
    if revokes.iter().any(|b| *b >= sb.total_blocks) || deltas.iter().any(|d| !home(d.target)) {
        return Err(FsError::corrupt(
            "journal",
            at(0).saturating_sub(1),
            format!(
                "transaction {} has a revoke or delta record outside the file system",
                first.seq
            ),
        ));
    }
    for (k, t) in tags.iter().enumerate() {
        // the payload as written (its magic restored), or why the transaction is corrupt
        let data = {
            let mut d = payloads[k].to_vec();
            if t.flags & TAG_ESCAPED != 0 {
                d[0..4].copy_from_slice(JOURNAL_MAGIC);
            }
            d
        };
        let corrupt = |what: String| FsError::corrupt("journal", at(k), what);
        match t.flags & 0xff {
            TAG_BLOCK if home(t.target) => writes.push((t.target, data)),
            TAG_BLOCK => {
                return Err(corrupt(format!(
                    "transaction {} targets block {}",
                    first.seq, t.target
                )))
            }
            TAG_REVOKE => revokes.extend(
                decode_revokes(&data, t.target)
                    .filter(|l| l.iter().all(|b| *b < sb.total_blocks))
                    .ok_or_else(|| {
                        corrupt(format!(
                            "transaction {} has a damaged revoke list",
                            first.seq
                        ))
                    })?,
            ),
            TAG_DELTA => deltas.extend(
                decode_deltas(&data, t.target)
                    .filter(|l| l.iter().all(|d| home(d.target)))
                    .ok_or_else(|| {
                        corrupt(format!(
                            "transaction {} has a damaged delta record",
                            first.seq
                        ))
                    })?,
            ),
            _ => {
                return Err(corrupt(format!(
                    "transaction {} has a record kind this version cannot replay",
                    first.seq
                )))
            }
        }
    }
    Ok(Txn {
        checkpointed: first.checkpointed,
        writes,
        revokes,
        deltas,
    })
}

/// Finds the transactions a replay must re-apply, then the byte-log records above the floor
/// of the superblock they leave (reads only).
pub fn plan_replay(dev: &dyn BlockDevice, sb: &Superblock) -> FsResult<Replay> {
    plan_replay_with(dev, sb, None)
}

/// [`plan_replay`] with the image's NVM tier (needed when the superblock names one).
pub fn plan_replay_with(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    tier: Option<&dyn Nvm>,
) -> FsResult<Replay> {
    let mut out = plan_journal_replay(dev, sb)?;
    let after = match out.blocks.get(&0) {
        Some(b) => Superblock::decode(b, 0)?,
        None => sb.clone(),
    };
    out.bytelog = super::plan_bytelog_replay(dev, &after, tier, &mut out.blocks)?;
    if out.bytelog.records > 0
        || out.bytelog.last_seq > after.bytelog_floor
        || after.bytelog_first != 0
    {
        // The superblock as replay leaves it: the journal and the records applied, and the
        // numbering past every record found (applied or not: a batch a new record number
        // could match must never be read again).
        let mut done = after;
        done.journal_seq = done.journal_seq.max(out.last_seq);
        done.bytelog_floor = done.bytelog_floor.max(out.bytelog.last_seq);
        done.bytelog_first = 0;
        done.bytelog_tail = 0;
        out.blocks.insert(0, done.encode(done.block_size));
    }
    Ok(out)
}

/// The journal's part of [`plan_replay`]: the transactions to re-apply, without the byte
/// log's records.
pub fn plan_journal_replay(dev: &dyn BlockDevice, sb: &Superblock) -> FsResult<Replay> {
    let mut out = Replay::default();
    if !sb.has_journal() {
        return Ok(out);
    }
    let salt = journal_salt(&sb.uuid);
    let bs = sb.block_size as u64;
    // Every first descriptor in the region, by sequence number.
    let mut firsts: HashMap<u64, Vec<(u64, Descriptor)>> = HashMap::new();
    let chunk = 256u64;
    let mut buf = vec![0u8; (chunk * bs) as usize];
    let mut pos = 0;
    while pos < sb.journal_blocks as u64 {
        let n = chunk.min(sb.journal_blocks as u64 - pos);
        let b = &mut buf[..(n * bs) as usize];
        dev.read_at((sb.journal_start + pos) * bs, b)?;
        for (i, blk) in b.chunks(bs as usize).enumerate() {
            if let Ok(Some(d)) = Descriptor::decode(blk, salt, sb.journal_start + pos + i as u64) {
                if d.index == 0 {
                    firsts.entry(d.seq).or_default().push((pos + i as u64, d));
                }
            }
        }
        pos += n;
    }
    // The superblock at home names a transaction whose checkpoint, and every earlier one's,
    // is durable (it is written in place at mount, and otherwise by a later checkpoint).
    let floor = sb.journal_seq;
    let mut seqs: Vec<u64> = firsts.keys().copied().filter(|s| *s > floor).collect();
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    let mut valid: HashMap<u64, Txn> = HashMap::new();
    let mut newest = None;
    for seq in seqs {
        for (p, d) in &firsts[&seq] {
            if let Some(t) = read_txn(dev, sb, salt, *p, d)? {
                if newest.is_none() {
                    newest = Some((seq, t.checkpointed));
                }
                valid.insert(seq, t);
                break;
            }
        }
        // Nothing older than the newest transaction's checkpoint is needed.
        if let Some((_, ck)) = newest {
            if seq <= ck + 1 {
                break;
            }
        }
    }
    let Some((last, ck)) = newest else {
        return Ok(out);
    };
    let ck = ck.max(floor);
    out.last_seq = last;
    if ck >= last {
        return Ok(out);
    }
    for seq in ck + 1..=last {
        let Some(t) = valid.remove(&seq) else {
            return Err(FsError::corrupt(
                "journal",
                sb.journal_start,
                format!("transaction {seq} is missing or damaged but {last} needs it"),
            ));
        };
        // A revoked block was freed or written in place after the older transactions that
        // hold it: none of their images may reach it.
        for b in &t.revokes {
            out.blocks.remove(b);
        }
        out.revoked += t.revokes.len();
        for (b, d) in t.writes {
            out.blocks.insert(b, d);
        }
        for d in t.deltas {
            let bsz = sb.block_size as usize;
            let img = match out.blocks.entry(d.target) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let mut home = vec![0u8; bsz];
                    dev.read_at(d.target * bs, &mut home)?;
                    e.insert(home)
                }
            };
            let o = d.offset as usize;
            img[o..o + d.bytes.len()].copy_from_slice(&d.bytes);
        }
        out.transactions += 1;
    }
    Ok(out)
}

/// Re-applies the journal to `dev` (writes home and flushes). Returns what it did.
pub fn replay(dev: &dyn BlockDevice, sb: &Superblock) -> FsResult<Replay> {
    replay_with(dev, sb, None)
}

/// [`replay`] with the image's NVM tier.
pub fn replay_with(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    tier: Option<&dyn Nvm>,
) -> FsResult<Replay> {
    let r = plan_replay_with(dev, sb, tier)?;
    if r.blocks.is_empty() {
        return Ok(r);
    }
    let bs = sb.block_size as u64;
    // Everything but the superblock first: once it says the journal and the records are
    // home (when records were applied), a crash must not find them half written.
    for (b, d) in r.blocks.range(1..) {
        dev.write_at(b * bs, d)?;
    }
    dev.flush()?;
    if let Some(d) = r.blocks.get(&0) {
        dev.write_at(0, d)?;
        dev.flush()?;
    }
    log::info!(
        "journal: replayed {} transaction(s) up to {} and {} byte-log record(s) ({} blocks)",
        r.transactions,
        r.last_seq,
        r.bytelog.records,
        r.blocks.len()
    );
    Ok(r)
}
