//! Directories in memory: a hash index over names, built when a directory is first used.
//!
//! On disk a directory is a list of packed entry blocks (see `format::dir`). In memory the
//! engine keeps a `HashMap` from name to entry (so lookup, create and unlink cost O(1) at any
//! size, a million entries included), the entries held by each block as they are encoded (so
//! that only changed blocks are written back, each without a lookup per name), and a
//! sequence number per entry that serves as the stable
//! `readdir` cookie: entries keep their cookie while others come and go, so a listing in
//! progress never skips or repeats an entry that stays.

use crate::format::{encode_entries, DirBlock, DirEntryRaw, DIR_ENTRY_FIXED};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy)]
pub(crate) struct DEnt {
    pub ino: u64,
    pub kind: u8,
    pub blk: u32,
    pub seq: u64,
}

#[derive(Debug, Default)]
pub(crate) struct DBlk {
    /// The block's entries in their on-disk order; `ino` and `kind` agree with the index.
    pub ents: Vec<DirEntryRaw>,
    pub used: usize,
    pub dirty: bool,
    /// Listed in `Dir::holes`.
    pub in_holes: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Dir {
    pub index: HashMap<Vec<u8>, DEnt>,
    pub blocks: Vec<DBlk>,
    pub order: BTreeMap<u64, Vec<u8>>,
    pub next_seq: u64,
    /// Blocks that lost entries and may have room.
    pub holes: Vec<u32>,
    pub capacity: usize,
    /// Some block is dirty (cleared when the commit takes them).
    pub any_dirty: bool,
}

impl Dir {
    pub fn new(capacity: usize) -> Dir {
        Dir {
            capacity,
            ..Default::default()
        }
    }

    /// Builds the in-memory directory from its decoded blocks.
    pub fn from_blocks(blocks: Vec<DirBlock>, capacity: usize) -> Dir {
        let mut d = Dir::new(capacity);
        for (bi, b) in blocks.into_iter().enumerate() {
            let mut blk = DBlk::default();
            for e in b.entries {
                blk.used += e.encoded_len();
                let seq = d.next_seq;
                d.next_seq += 1;
                d.order.insert(seq, e.name.clone());
                d.index.insert(
                    e.name.clone(),
                    DEnt {
                        ino: e.ino,
                        kind: e.kind,
                        blk: bi as u32,
                        seq,
                    },
                );
                blk.ents.push(e);
            }
            if blk.used < capacity / 2 {
                blk.in_holes = true;
                d.holes.push(bi as u32);
            }
            d.blocks.push(blk);
        }
        d
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn get(&self, name: &[u8]) -> Option<DEnt> {
        self.index.get(name).copied()
    }

    pub fn insert(&mut self, name: &[u8], ino: u64, kind: u8) {
        let need = DIR_ENTRY_FIXED + name.len();
        let blk = self.block_with_room(need);
        let b = &mut self.blocks[blk as usize];
        b.ents.push(DirEntryRaw {
            ino,
            kind,
            name: name.to_vec(),
        });
        b.used += need;
        b.dirty = true;
        self.any_dirty = true;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, name.to_vec());
        self.index.insert(
            name.to_vec(),
            DEnt {
                ino,
                kind,
                blk,
                seq,
            },
        );
    }

    fn block_with_room(&mut self, need: usize) -> u32 {
        if let Some(last) = self.blocks.last() {
            if last.used + need <= self.capacity {
                return self.blocks.len() as u32 - 1;
            }
        }
        while let Some(&h) = self.holes.last() {
            if self.blocks[h as usize].used + need <= self.capacity {
                return h;
            }
            self.holes.pop();
            self.blocks[h as usize].in_holes = false;
        }
        self.blocks.push(DBlk::default());
        self.blocks.len() as u32 - 1
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<DEnt> {
        let e = self.index.remove(name)?;
        self.order.remove(&e.seq);
        let b = &mut self.blocks[e.blk as usize];
        if let Some(pos) = b.ents.iter().position(|x| x.name == name) {
            b.ents.swap_remove(pos);
        }
        b.used -= DIR_ENTRY_FIXED + name.len();
        b.dirty = true;
        self.any_dirty = true;
        if !b.in_holes {
            b.in_holes = true;
            self.holes.push(e.blk);
        }
        Some(e)
    }

    /// Points an existing name at another inode (rename over an existing entry).
    pub fn replace(&mut self, name: &[u8], ino: u64, kind: u8) -> bool {
        match self.index.get_mut(name) {
            Some(e) => {
                e.ino = ino;
                e.kind = kind;
                let b = &mut self.blocks[e.blk as usize];
                if let Some(x) = b.ents.iter_mut().find(|x| x.name == name) {
                    x.ino = ino;
                    x.kind = kind;
                }
                b.dirty = true;
                self.any_dirty = true;
                true
            }
            None => false,
        }
    }

    /// Block `bi` encoded (its `DirBlock::encode`), with no copy of its entries.
    pub fn encode_block(&self, ino: u64, bi: usize, block_size: u32) -> Vec<u8> {
        encode_entries(&self.blocks[bi].ents, ino, bi as u64, block_size)
    }

    /// Whether the blocks and the index tell the same directory: every block entry is indexed
    /// with its inode, kind and block, each block's `used` is its entries' bytes, and nothing
    /// is indexed that no block holds. The first disagreement, described.
    pub fn check(&self) -> Result<(), String> {
        let mut held = 0;
        for (bi, b) in self.blocks.iter().enumerate() {
            let used: usize = b.ents.iter().map(DirEntryRaw::encoded_len).sum();
            if used != b.used {
                return Err(format!(
                    "block {bi}: {} bytes used, entries take {used}",
                    b.used
                ));
            }
            for x in &b.ents {
                match self.index.get(&x.name) {
                    Some(e) if (e.ino, e.kind, e.blk as usize) == (x.ino, x.kind, bi) => {}
                    e => {
                        return Err(format!(
                            "block {bi} holds {:?} -> {} (kind {}), the index says {e:?}",
                            String::from_utf8_lossy(&x.name),
                            x.ino,
                            x.kind
                        ))
                    }
                }
            }
            held += b.ents.len();
        }
        if held != self.index.len() {
            return Err(format!(
                "{held} entries in blocks, {} indexed",
                self.index.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{DirBlock, DIR_HEADER_BYTES};

    const BS: u32 = 4096;

    /// Each block encoded from its own entries is what the index says it holds, in order.
    fn agrees(d: &Dir, ino: u64) {
        d.check().unwrap();
        for (bi, b) in d.blocks.iter().enumerate() {
            let bytes = d.encode_block(ino, bi, BS);
            let back = DirBlock::decode(&bytes, ino, bi as u64, 0).unwrap();
            let names: Vec<&[u8]> = back.entries.iter().map(|e| &e.name[..]).collect();
            let held: Vec<&[u8]> = b.ents.iter().map(|e| &e.name[..]).collect();
            assert_eq!(names, held);
            for e in &back.entries {
                let i = d.get(&e.name).unwrap();
                assert_eq!((i.ino, i.kind, i.blk as usize), (e.ino, e.kind, bi));
            }
        }
    }

    #[test]
    fn blocks_encode_what_the_index_holds_through_inserts_removes_and_replaces() {
        let mut d = Dir::new(DirBlock::capacity(BS));
        for i in 0..600u64 {
            d.insert(format!("file-{i:05}").as_bytes(), 100 + i, 1);
        }
        assert!(d.blocks.len() > 1);
        agrees(&d, 7);
        for i in (0..600u64).step_by(3) {
            d.remove(format!("file-{i:05}").as_bytes()).unwrap();
        }
        assert!(d.replace(b"file-00001", 9_999, 2));
        assert!(!d.replace(b"file-00000", 1, 1));
        for i in 0..150u64 {
            d.insert(format!("new-{i}").as_bytes(), 5_000 + i, 1);
        }
        agrees(&d, 7);
        assert_eq!(
            d.get(b"file-00001").map(|e| (e.ino, e.kind)),
            Some((9_999, 2))
        );
        // decoded again, the same directory
        let blocks: Vec<DirBlock> = (0..d.blocks.len())
            .map(|bi| DirBlock::decode(&d.encode_block(7, bi, BS), 7, bi as u64, 0).unwrap())
            .collect();
        let again = Dir::from_blocks(blocks, DirBlock::capacity(BS));
        agrees(&again, 7);
        assert_eq!(again.len(), d.len());
        assert!(d
            .blocks
            .iter()
            .all(|b| b.used <= BS as usize - DIR_HEADER_BYTES));
    }

    #[test]
    fn check_finds_a_block_that_disagrees_with_the_index() {
        let mut d = Dir::new(DirBlock::capacity(BS));
        d.insert(b"a", 10, 1);
        d.insert(b"b", 11, 1);
        d.check().unwrap();
        d.blocks[0].ents[1].ino = 12;
        assert!(d.check().unwrap_err().contains("the index says"));
        d.blocks[0].ents[1].ino = 11;
        d.blocks[0].ents.pop();
        assert!(d.check().is_err());
    }
}
