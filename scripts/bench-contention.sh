#!/usr/bin/env bash
# Small-operation latency while every CPU is busy (not a test): create, read back and delete
# FILES small files on moafs while HOGS busy loops run, FUSE over io_uring (default) against
# /dev/fuse (uring=off), taking turns per repetition. Shows what the io_uring queues' pinned
# SCHED_IDLE threads cost or buy when the CPUs are contended.
# Usage: REPS=3 HOGS=8 FILES=2000 scripts/bench-contention.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
MOAFS=${MOAFS:-$PWD/target/release/moafs}
REPS=${REPS:-3}; HOGS=${HOGS:-8}; FILES=${FILES:-2000}
bench_init moafs-contention
hogs=""
stop_hogs() { for h in $hogs; do kill "$h" 2>/dev/null || true; done; hogs=""; }
trap 'stop_hogs; bench_teardown; rm -rf "$work"' EXIT

once() { # $1 = extra mount options; prints seconds
  moafs_target 1G "$1"
  for _ in $(seq "$HOGS"); do (while :; do :; done) & hogs="$hogs $!"; done
  sleep 0.5
  local t
  t=$(small_files_secs "$mnt" "$FILES")
  stop_hogs; bench_teardown
  echo "$t"
}

: > "$work/uring"; : > "$work/devfuse"
for r in $(seq 1 "$REPS"); do
  once "" >> "$work/uring"; once uring=off >> "$work/devfuse"
  echo "  rep $r: io_uring $(tail -1 "$work/uring") s, /dev/fuse $(tail -1 "$work/devfuse") s" >&2
done
printf "\n| transport | %d files, %d busy loops: s (mean min max n) |\n|---|---|\n" "$FILES" "$HOGS"
printf "| io_uring | %s |\n| /dev/fuse | %s |\n" "$(mean_min_max %.3f < "$work/uring")" \
  "$(mean_min_max %.3f < "$work/devfuse")"
