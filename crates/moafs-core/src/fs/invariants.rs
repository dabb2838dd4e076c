//! The engine's own consistency check (`Fs::check_invariants`, run by the tests after every
//! step): each counter the engine keeps against a recount of the state it summarises.

use super::Inner;

impl Inner {
    /// The engine's bookkeeping agrees with the state it summarises (see
    /// [`super::Fs::check_invariants`]): the first disagreement found, described.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let (mut cached, mut dirty, mut reserved, mut meta) = (0u64, 0u64, 0u64, 0u64);
        let (mut logged, mut homeless) = (0u64, 0u64);
        for (ino, n) in &self.inodes {
            let [c, d, r, l, h] = n.cache.recount(&self.book, *ino)?;
            cached += c;
            dirty += d;
            reserved += r;
            logged += l;
            homeless += h;
            meta += n.meta_reserved as u64 + n.deep_reserved.len() as u64;
            meta += n.ext.as_ref().map_or(0, |e| e.tree_promised());
            if n.ext.is_some() != n.d.extents.is_some() && n.ext.is_some() {
                return Err(format!("inode {ino}: an extent map for a pointer map"));
            }
            if let Some(d) = &n.dir {
                if d.blocks.iter().any(|b| b.dirty) && !d.any_dirty {
                    return Err(format!("directory {ino}: a dirty block but not any_dirty"));
                }
                d.check().map_err(|e| format!("directory {ino}: {e}"))?;
            }
            if n.unsaved() && !self.touched.contains(ino) {
                return Err(format!(
                    "inode {ino}: unsaved changes the next commit would miss"
                ));
            }
        }
        let kept = (self.book.cached(), self.book.dirty());
        if (cached, dirty) != kept {
            return Err(format!(
                "cache (cached, dirty) counted ({cached}, {dirty}), kept {kept:?}"
            ));
        }
        self.space.check(reserved, meta)?;
        if self.book.clean_listed() != cached - dirty - homeless {
            return Err(format!(
                "{} clean blocks in the age order, {} clean blocks cached",
                self.book.clean_listed(),
                cached - dirty - homeless
            ));
        }
        if (logged, homeless) != (self.book.logged(), self.book.homeless_count()) {
            return Err(format!(
                "logged / homeless blocks counted {logged} / {homeless}, kept {} / {}",
                self.book.logged(),
                self.book.homeless_count()
            ));
        }
        for (blk, b) in &self.ind {
            if b.dirty && !self.ind_dirty.contains(blk) {
                return Err(format!("indirect block {blk} dirty but not listed"));
            }
        }
        if !self.epochs.writing() && !self.building.is_empty() {
            return Err("commit buffers left over".into());
        }
        self.epochs.check(self.failed)?;
        self.alloc.check_counts()
    }
}
