#!/usr/bin/env bash
# Small operations beside a streaming reader (not a test): create, read back and delete FILES
# small files on moafs while a second process streams a 512 MiB file again and again through
# the page cache (`dd iflag=nocache` drops what it has read, so every pass is readahead the
# stream helpers take), with stream helpers (default) and without (uring_stream_kb=0), taking
# turns per repetition. Shows what a helper, running on the CPU of another queue's thread,
# costs the small requests served there.
# Usage: REPS=3 FILES=2000 scripts/bench-stream-mix.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
MOAFS=${MOAFS:-$PWD/target/release/moafs}
REPS=${REPS:-3}; FILES=${FILES:-2000}
bench_init moafs-stream-mix
reader=""
stop_reader() { [ -n "$reader" ] && { kill "$reader" 2>/dev/null || true; wait "$reader" 2>/dev/null || true; }; reader=""; }
trap 'stop_reader; bench_teardown; rm -rf "$work"' EXIT

once() { # $1 = extra mount options; prints "small-ops-seconds streamed-MiB"
  moafs_target 2G "$1"
  dd if=/dev/zero of="$mnt/big" bs=1M count=512 conv=fsync status=none
  : > "$work/streamed"
  (while :; do dd if="$mnt/big" of=/dev/null bs=1M iflag=nocache status=none; echo 512 >> "$work/streamed"; done) &
  reader=$!
  sleep 0.5
  local t
  t=$(small_files_secs "$mnt" "$FILES")
  stop_reader; bench_teardown
  echo "$t $(awk '{s+=$1} END{print s+0}' "$work/streamed")"
}

: > "$work/on"; : > "$work/off"
for r in $(seq 1 "$REPS"); do
  once "" >> "$work/on"; once uring_stream_kb=0 >> "$work/off"
  echo "  rep $r: helpers $(tail -1 "$work/on"), none $(tail -1 "$work/off") (s, MiB streamed)" >&2
done
stats() { # "mean min max n | mean streamed MiB" of a file of "seconds MiB" lines
  echo "$(mean_min_max %.3f < "$1") | $(awk '{m+=$2; n++} END{printf "%.0f", m/n}' "$1")"
}
printf "\n| stream helpers | %d small files beside a stream: s (mean min max n) | MiB streamed meanwhile (mean) |\n|---|---|---|\n" "$FILES"
printf "| on | %s |\n| off (uring_stream_kb=0) | %s |\n" "$(stats "$work/on")" "$(stats "$work/off")"
