#!/bin/bash
# the runs of docs/results/issue28-2026-11-26 (issue 28), as root from the repository root after
# cargo build --release; M = the binary measured (target/release/moafs), B = the binary of the
# commit before issue 28's engine changes with the same counting (f0be9a4 + the loop-device
# counting, branch wt-count at 965ffd1), for the before/after rows. Nothing else runs meanwhile.
# item 5 rows: ONLY_AFTER2=1 ONLY_DELTA=1 ONLY_AGING=1 UNLOCKED=1 OUT=docs/results/issue28-2026-11-26 bash measure.sh
# item 3 and 5 rows at 3cc9d07: the same with ATTR=1 instead of UNLOCKED=1, and B= the before binary; then ATTR2=1; then FINAL=1;
# compact transactions: ONLY_AFTER2=1 ONLY_DELTA=1 ONLY_AGING=1 COMPACT=1 (then REUSE=1 instead of COMPACT=1) (the first three sections run unless their ONLY_ variable is set, the later ones only when theirs is)
set -u
M=${M:-$PWD/target/release/moafs}
B=${B:-}
OUT=${OUT:-results}
mkdir -p "$OUT" /var/tmp/moafs-i28 && cd "$OUT"
log() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a progress.txt; }
if [ -z "${ONLY_AFTER2:-}" ]; then
log disk-after
$M bench --target ext4,moafs --workload varmail,fileserver,webproxy,postmark-quick,fsync-4k-t1 --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-after.json > disk-after.txt 2>&1
if [ -n "$B" ]; then
  log disk-before
  $B bench --target ext4,moafs --workload varmail,fileserver,fsync-4k-t1 --backing /var/tmp/moafs-i28 --duration 20 --reps 2 --json disk-before.json > disk-before.txt 2>&1
fi
log shm-after
$M bench --target ext4,moafs --workload varmail,fileserver,webproxy,postmark-quick,fsync-4k-t1 --backing /dev/shm --duration 20 --reps 3 --json shm-after.json > shm-after.txt 2>&1
fi
if [ -z "${ONLY_DELTA:-}" ]; then
# then at fceda74 (small commits journal their data; checkpoint superblock floor), M rebuilt:
log disk-after2
$M bench --target ext4,moafs --workload varmail,fileserver,webproxy,postmark-quick,fsync-4k-t1 --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-after2.json > disk-after2.txt 2>&1
log shm-after2
$M bench --target ext4,moafs --workload varmail,fsync-4k-t1 --backing /dev/shm --duration 20 --reps 3 --json shm-after2.json > shm-after2.txt 2>&1
fi
# then at the delta-records commit (wt-delta), M rebuilt:
if [ -z "${ONLY_AGING:-}" ]; then
log disk-delta
$M bench --target ext4,moafs --workload varmail,fsync-4k-t1 --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-delta.json > disk-delta.txt 2>&1
fi
# then at 0420a5c (data that ages in memory), M rebuilt; moafs also with bigger memory bounds:
if [ -z "${UNLOCKED:-}${ATTR:-}${ATTR2:-}${FINAL:-}${COMPACT:-}${REUSE:-}" ]; then
log disk-aging
$M bench --target 'ext4,moafs,moafs@dirty_max=1G;cache_size=2G' --workload varmail,fileserver,webproxy,postmark-quick,fsync-4k-t1 --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-aging.json > disk-aging.txt 2>&1
log shm-aging
$M bench --target ext4,moafs --workload varmail,webproxy,fsync-4k-t1 --backing /dev/shm --duration 20 --reps 3 --json shm-aging.json > shm-aging.txt 2>&1
log done
fi
# then at 609bcd9 (no device reads under the engine lock, item 5), M rebuilt: cache dropped
# after the mount (paper 002's scenario A), the same binary with unlocked_reads=off as baseline
if [ -n "${UNLOCKED:-}" ]; then
log disk-unlocked
$M bench --target 'moafs@unlocked_reads=off,moafs' --workload fileserver,webserver --cache dropped --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-unlocked.json > disk-unlocked.txt 2>&1
log shm-unlocked
$M bench --target 'moafs@unlocked_reads=off,moafs' --workload postmark-quick,varmail --backing /dev/shm --duration 20 --reps 3 --json shm-unlocked.json > shm-unlocked.txt 2>&1
log done
fi
# then at 3cc9d07 (attribute records, item 3 in part; warm passes with quick checks), M rebuilt;
# B = 609bcd9 with 3cc9d07's append-128-t1 workload (crates/moafs-bench only) for the before rows
if [ -n "${ATTR:-}" ]; then
log disk-attr
$M bench --target ext4,moafs --workload append-128-t1,fsync-4k-t1,varmail --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-attr.json > disk-attr.txt 2>&1
log disk-attr-before
$B bench --target ext4,moafs --workload append-128-t1 --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-attr-before.json > disk-attr-before.txt 2>&1
log shm-attr
$M bench --target ext4,moafs --workload append-128-t1 --backing /dev/shm --reps 3 --json shm-attr.json > shm-attr.txt 2>&1
log shm-attr-before
$B bench --target ext4,moafs --workload append-128-t1 --backing /dev/shm --reps 3 --json shm-attr-before.json > shm-attr-before.txt 2>&1
log disk-cold
$M bench --target 'moafs@unlocked_reads=off,moafs' --workload fileserver,postmark-quick --cache cold --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-cold.json > disk-cold.txt 2>&1
log shm-warm
$M bench --target 'moafs@unlocked_reads=off,moafs' --workload postmark-quick,varmail --backing /dev/shm --duration 20 --reps 3 --json shm-warm.json > shm-warm.txt 2>&1
log done
fi
# then with partial writes compared unit by unit (the page the kernel writes back up to the end
# of file), M rebuilt
if [ -n "${ATTR2:-}" ]; then
log disk-attr2
$M bench --target ext4,moafs --workload append-128-t1,varmail --backing /var/tmp/moafs-i28 --duration 20 --reps 3 --json disk-attr2.json > disk-attr2.txt 2>&1
log shm-attr2
$M bench --target ext4,moafs --workload append-128-t1 --backing /dev/shm --reps 3 --json shm-attr2.json > shm-attr2.txt 2>&1
log done
fi
# the final check at 8d744e7 (the session's last engine commit), M rebuilt: every workload on disk
if [ -n "${FINAL:-}" ]; then
log disk-final
$M bench --target ext4,moafs --workload varmail,fileserver,webproxy,postmark-quick,fsync-4k-t1,append-128-t1 --backing /var/tmp/moafs-i28 --duration 15 --reps 3 --json disk-final.json > disk-final.txt 2>&1
log done
fi
# then compact transactions (one header block with the revokes and delta records inline, the
# superblock as a delta), M rebuilt: every workload on disk, and the fsync-heavy ones on DRAM
if [ -n "${COMPACT:-}" ]; then
log disk-compact
$M bench --target ext4,moafs --workload varmail,fileserver,webproxy,postmark-quick,fsync-4k-t1,append-128-t1 --backing /var/tmp/moafs-i28 --duration 15 --reps 3 --json disk-compact.json > disk-compact.txt 2>&1
log shm-compact
$M bench --target ext4,moafs --workload varmail,postmark-quick,fsync-4k-t1 --backing /dev/shm --duration 15 --reps 3 --json shm-compact.json > shm-compact.txt 2>&1
log done
fi
# then inode numbers no commit wrote reused at once, M rebuilt: PostMark on disk and DRAM
if [ -n "${REUSE:-}" ]; then
log disk-reuse
$M bench --target ext4,moafs --workload postmark-quick,varmail --backing /var/tmp/moafs-i28 --duration 15 --reps 3 --json disk-reuse.json > disk-reuse.txt 2>&1
log shm-reuse
$M bench --target ext4,moafs --workload postmark-quick --backing /dev/shm --duration 15 --reps 3 --json shm-reuse.json > shm-reuse.txt 2>&1
log done
fi
