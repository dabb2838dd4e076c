//! The compare: what the walk reached against what the image says — each group's block and
//! inode bitmaps, its free counters and directory count, and every reached inode's link
//! count.

use super::finding::Finding;
use super::report::FsckReport;
use super::walk::Checker;
use crate::error::FsResult;

pub(super) fn compare(
    ck: &mut Checker<'_>,
    bitmaps: &[(Vec<u8>, Vec<u8>)],
    report: &mut FsckReport,
) -> FsResult<()> {
    let geo = ck.geo;
    for g in 0..geo.group_count {
        let (bm, ibm) = &bitmaps[g as usize];
        let start = geo.group_start(g);
        let mut free = 0u32;
        let mut leaked = 0u64;
        let mut missing = 0u64;
        for i in 0..geo.group_len(g) as u64 {
            let on = bm[(i / 8) as usize] & (1 << (i % 8)) != 0;
            let used = ck.used[(start + i) as usize];
            if !on {
                free += 1;
            }
            if on && !used {
                leaked += 1;
            }
            if used && !on {
                missing += 1;
            }
        }
        if leaked > 0 {
            ck.err(Finding::BlocksLeaked {
                group: g,
                count: leaked,
            });
        }
        if missing > 0 {
            ck.err(Finding::BlocksMarkedFree {
                group: g,
                count: missing,
            });
        }
        let mut ifree = 0u32;
        for i in 0..geo.inodes_per_group as u64 {
            let ino = g as u64 * geo.inodes_per_group as u64 + i + 1;
            let on = ibm[(i / 8) as usize] & (1 << (i % 8)) != 0;
            let reached = ck.inodes.contains_key(&ino);
            if !on {
                ifree += 1;
            }
            if reached && !on {
                ck.err(Finding::InodeMarkedFree { ino });
            }
            if on && !reached {
                let what = match ck.read_inode(ino)? {
                    Some(d) => Finding::Unreachable {
                        ino,
                        nlink: d.nlink,
                    },
                    None => Finding::MarkedButFree { ino },
                };
                ck.err(what);
            }
        }
        if let Some(h) = ck.headers[g as usize].clone() {
            if h.free_blocks != free {
                ck.err(Finding::FreeBlocksCount {
                    group: g,
                    stored: h.free_blocks,
                    found: free,
                });
            }
            if h.dirs > geo.inodes_per_group {
                ck.err(Finding::DirCount {
                    group: g,
                    stored: h.dirs,
                });
            }
            if h.free_inodes != ifree {
                ck.err(Finding::FreeInodesCount {
                    group: g,
                    stored: h.free_inodes,
                    found: ifree,
                });
            }
        }
    }
    let mut bad_links = Vec::new();
    for (ino, d) in &ck.inodes {
        let counted = ck.links.get(ino).copied().unwrap_or(0);
        if d.nlink != counted {
            bad_links.push(Finding::LinkCount {
                ino: *ino,
                stored: d.nlink,
                found: counted,
            });
        }
    }
    bad_links.sort_by_key(|f| match f {
        Finding::LinkCount { ino, .. } => *ino,
        _ => 0,
    });
    ck.found.extend(bad_links);
    let _ = report;
    Ok(())
}
