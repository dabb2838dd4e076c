#!/usr/bin/env bash
# Issue-2 benchmark (not a test): Postmark FSL and 1 GiB sequential write/read on moafs (FUSE)
# vs fuse2fs vs kernel ext4 on a loop device; all images in /dev/shm, same size, same run.
# Usage: REPS=3 scripts/bench-foundation.sh   (prints a table; cleans up mounts and loops)
# TARGETS= picks targets among moafs, moafs-nostream (uring_stream_kb=0), moafs-devfuse
# (uring=off), moafs-nobehind (write_behind=0,bdi_strict=1), ext4, fuse2fs. WARM=MiB of
# memory touched and freed before each timed phase (default 3000, 0 = off; see warm_memory
# in scripts/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
MOAFS=${MOAFS:-$PWD/target/release/moafs}
REPS=${REPS:-3}
SIZE=${SIZE:-4G}
TARGETS=${TARGETS:-"moafs ext4 fuse2fs"}
PM_TX=${PM_TX:-200000}
bench_init moafs-bench

setup_target() {
  truncate -s "$SIZE" "$img"
  case $1 in
    moafs) moafs_target "$SIZE" ;;
    moafs-nostream) moafs_target "$SIZE" uring_stream_kb=0 ;; # io_uring, no stream helpers
    moafs-devfuse) moafs_target "$SIZE" uring=off ;;           # /dev/fuse, not io_uring
    moafs-nobehind) moafs_target "$SIZE" write_behind=0,bdi_strict=1 ;; # no write-behind
    ext4)  mkfs.ext4 -q -F "$img"; loop=$(losetup -f --show "$img"); mount "$loop" "$mnt" ;;
    fuse2fs) mkfs.ext4 -q -F "$img"; fuse2fs -f "$img" "$mnt" -o rw >/dev/null 2>&1 & pid=$!
           for _ in $(seq 1 100); do mountpoint -q "$mnt" && break; sleep 0.1; done ;;
  esac
}

# seconds of wall time for one command
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }

postmark_once() {
  cat > "$work/pm.cfg" <<PM
set location $mnt
set number 20000
set subdirectories 200
set size 512 10240
set read 4096
set write 4096
set buffering false
set transactions $PM_TX
set seed 42
run
quit
PM
  secs postmark "$work/pm.cfg"
}
seqw() { warm_memory; secs dd if=/dev/zero of="$mnt/big" bs=1M count=1024 conv=fsync status=none; }
seqr() {
  sync; echo 3 > /proc/sys/vm/drop_caches; warm_memory
  secs dd if="$mnt/big" of=/dev/null bs=1M status=none
}


declare -A PM SW SR MEM
for t in $TARGETS; do : > "$work/$t.pm"; : > "$work/$t.sw"; : > "$work/$t.sr"; done
# Targets take turns within each repetition, so that a noisy minute hits all of them.
for r in $(seq 1 "$REPS"); do
  for t in $TARGETS; do
    setup_target "$t"; warm_memory; postmark_once >> "$work/$t.pm"
    if [ -n "$pid" ]; then awk '/VmHWM/{print $2}' "/proc/$pid/status" > "$work/$t.mem"; fi
    bench_teardown
    setup_target "$t"; seqw >> "$work/$t.sw"; seqr >> "$work/$t.sr"; bench_teardown
    echo "  $t rep $r: postmark $(tail -1 "$work/$t.pm") s, seq write $(tail -1 "$work/$t.sw") s, seq read $(tail -1 "$work/$t.sr") s" >&2
  done
done
for t in $TARGETS; do
  PM[$t]=$(mean_min_max < "$work/$t.pm"); SW[$t]=$(mean_min_max < "$work/$t.sw")
  SR[$t]=$(mean_min_max < "$work/$t.sr")
  MEM[$t]=$(cat "$work/$t.mem" 2>/dev/null || echo -)
done
printf "\n| target | Postmark FSL s (mean min max n) | 1 GiB write s | 1 GiB read s | daemon peak RSS KiB |\n|---|---|---|---|---|\n"
for t in $TARGETS; do printf "| %s | %s | %s | %s | %s |\n" "$t" "${PM[$t]}" "${SW[$t]}" "${SR[$t]}" "${MEM[$t]}"; done
