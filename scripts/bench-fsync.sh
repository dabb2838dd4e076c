#!/bin/bash
# Many writers that fsync: fio, JOBS jobs (default 8), each its own file, 4 KiB random writes
# with fsync after every write (psync), time-based, on moafs through FUSE and on kernel ext4
# over a loop device; every image a file in /dev/shm. Targets take turns per repetition
# (order alternating). BASE=<moafs binary> adds an earlier moafs build as a third target.
#
#   scripts/bench-fsync.sh            # REPS=5 RUNTIME=10 JOBS=8 SIZE=16M
#
# Prints one line per run and a summary (median IOPS, min..max, ratio to ext4 per repetition).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/lib.sh"
MOAFS=${MOAFS:-$ROOT/target/release/moafs}
BASE=${BASE:-}
REPS=${REPS:-5}; RUNTIME=${RUNTIME:-10}; JOBS=${JOBS:-8}; SIZE=${SIZE:-16M}
command -v fio >/dev/null || { echo "fio is needed: apt-get install fio" >&2; exit 1; }
W=$(mktemp -d /dev/shm/bench-fsync.XXXXXX)
LOOP=""
cleanup() {
  for m in "$W"/mnt-*; do
    if is_mounted "$m"; then umount "$m" 2>/dev/null || umount -l "$m" || true; fi
  done
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
  sleep 0.5; rm -rf "$W"
}
trap cleanup EXIT

targets=(moafs ext4)
[ -n "$BASE" ] && targets+=(base)
for t in "${targets[@]}"; do mkdir -p "$W/mnt-$t"; done

"$MOAFS" mkfs --size 2G "$W/moafs.img" >/dev/null
"$MOAFS" mount "$W/moafs.img" "$W/mnt-moafs"
if [ -n "$BASE" ]; then
  "$BASE" mkfs --size 2G "$W/base.img" >/dev/null
  "$BASE" mount "$W/base.img" "$W/mnt-base"
fi
truncate -s 2G "$W/ext4.img"
mkfs.ext4 -q -F "$W/ext4.img"
LOOP=$(losetup --find --show "$W/ext4.img")
blockdev --setra 256 "$LOOP"   # the loop device's readahead: 128 KiB, stated on purpose
mount "$LOOP" "$W/mnt-ext4"

declare -A iops
run() { # target rep
  local dir="$W/mnt-$1/fio" out
  mkdir -p "$dir"
  out=$(fio --name=fsync --directory="$dir" --rw=randwrite --bs=4k --size="$SIZE" \
    --numjobs="$JOBS" --fsync=1 --ioengine=psync --time_based --runtime="$RUNTIME" \
    --group_reporting --output-format=json 2>/dev/null)
  python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["iops"]))' <<<"$out"
}
for rep in $(seq 1 "$REPS"); do
  order=("${targets[@]}")
  if [ $((rep % 2)) -eq 0 ]; then order=($(printf '%s\n' "${targets[@]}" | tac)); fi
  for t in "${order[@]}"; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    v=$(run "$t" "$rep")
    iops[$t,$rep]=$v
    echo "rep $rep $t: $v IOPS"
  done
done
python3 - "$REPS" "${targets[@]}" <<EOF
import statistics, sys
reps = int(sys.argv[1]); targets = sys.argv[2:]
iops = {$(for k in "${!iops[@]}"; do printf "'%s': %s, " "$k" "${iops[$k]}"; done)}
print(f"fio randwrite 4k fsync=1, {$JOBS} jobs x $SIZE, {$RUNTIME} s, {reps} reps (median, min..max):")
for t in targets:
    v = [iops[f"{t},{r}"] for r in range(1, reps + 1)]
    line = f"  {t:6} {statistics.median(v):>8.0f} IOPS ({min(v)}..{max(v)})"
    if t != "ext4":
        ratio = [iops[f"{t},{r}"] / iops[f"ext4,{r}"] for r in range(1, reps + 1)]
        line += f"  ratio to ext4 {statistics.median(ratio):.3f} ({min(ratio):.3f}..{max(ratio):.3f})"
    print(line)
EOF
