//! Directories in memory: a hash index over names, built when a directory is first used.
//!
//! On disk a directory is a list of packed entry blocks (see `format::dir`). In memory the
//! engine keeps a `HashMap` from name to entry (so lookup, create and unlink cost O(1) at any
//! size, a million entries included), the names held by each block (so that only changed
//! blocks are written back), and a sequence number per entry that serves as the stable
//! `readdir` cookie: entries keep their cookie while others come and go, so a listing in
//! progress never skips or repeats an entry that stays.

use crate::format::{DirBlock, DirEntryRaw, DIR_ENTRY_FIXED};
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
    pub names: Vec<Vec<u8>>,
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
                blk.names.push(e.name.clone());
                let seq = d.next_seq;
                d.next_seq += 1;
                d.order.insert(seq, e.name.clone());
                d.index.insert(
                    e.name,
                    DEnt {
                        ino: e.ino,
                        kind: e.kind,
                        blk: bi as u32,
                        seq,
                    },
                );
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
        b.names.push(name.to_vec());
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
        if let Some(pos) = b.names.iter().position(|n| n == name) {
            b.names.swap_remove(pos);
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
                self.blocks[e.blk as usize].dirty = true;
                self.any_dirty = true;
                true
            }
            None => false,
        }
    }

    /// The encoded contents of block `bi`.
    pub fn block(&self, bi: usize) -> DirBlock {
        let entries = self.blocks[bi]
            .names
            .iter()
            .filter_map(|n| {
                self.index.get(n).map(|e| DirEntryRaw {
                    ino: e.ino,
                    kind: e.kind,
                    name: n.clone(),
                })
            })
            .collect();
        DirBlock { entries }
    }
}
