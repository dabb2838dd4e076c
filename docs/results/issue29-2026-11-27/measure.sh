#!/usr/bin/env bash
# Issue 29 measurements (2026-11-27). Root, from the repository root, after
# cargo build --release, with nothing else running (2 cores). Images in /dev/shm.
set -euo pipefail
M=target/release/moafs
OUT=${OUT:-docs/results/issue29-2026-11-27}
B=/dev/shm/i29; mkdir -p $B
W=varmail,fileserver,webproxy,webserver,postmark-quick
# ext4 · ceiling · moafs · floor, and CPU per operation (commit 0df40ba)
$M bench --target ext4,memfs,moafs,passthrough --workload $W --duration 10 --reps 3 \
  --backing $B --json $OUT/base.json > $OUT/base.txt
# FUSE requests per operation by opcode (the kernel's tracepoint; not timed results)
$M bench --target memfs,moafs,passthrough --workload $W --duration 10 --reps 1 \
  --fuse-requests --backing $B --json $OUT/requests-base.json > $OUT/requests-base.txt
# writeback cache against write-through, moafs and the ceiling (f51f352)
T='moafs,moafs@writeback_cache=off,memfs,memfs@writeback_cache=off'
$M bench --target "$T" --workload varmail,fileserver,webproxy,postmark-quick --duration 10 \
  --reps 1 --fuse-requests --backing $B --json $OUT/requests-wt.json > $OUT/requests-wt.txt
$M bench --target "$T" --workload varmail,fileserver,webproxy,postmark-quick --duration 10 \
  --reps 3 --backing $B --json $OUT/wt.json > $OUT/wt.txt
# the final table: FORGET batches against forget_pause_ms=0 in the same run (f51f352)
$M bench --target 'ext4,memfs,moafs,moafs@forget_pause_ms=0,passthrough' --workload $W \
  --duration 10 --reps 3 --backing $B --json $OUT/final.json > $OUT/final.txt
# fileserver and the engine's memory bounds (c916261)
$M bench --target 'moafs,moafs@dirty_max=256M;cache_size=512M,memfs' \
  --workload fileserver,webproxy,varmail --duration 10 --reps 3 --backing $B \
  --json $OUT/dirty.json > $OUT/dirty.txt
# the disk: what each loop device saw (6eb657e)
mkdir -p /var/tmp/moafs-i29
$M bench --target ext4,moafs --workload varmail,fileserver,webproxy,postmark-quick,fsync-4k-t1 \
  --backing /var/tmp/moafs-i29 --duration 10 --reps 3 --json $OUT/disk.json > $OUT/disk.txt
# per-file requests of shell steps
scripts/fuse-requests-per-file.sh 100
scripts/fuse-requests-per-file.sh 100 writeback_cache=off
# rows: scripts/bench-pairs.py FILE.json BASELINE TARGET
