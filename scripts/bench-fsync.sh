#!/bin/bash
# Many writers that fsync: fio, JOBS jobs (default 8), each its own file, 4 KiB random writes
# with fsync after every write (psync), time-based, on moafs through FUSE and on kernel ext4
# over a loop device (readahead 128 KiB, blockdev --setra 256); every image a file in
# /dev/shm, made and mounted afresh for every run (scripts/lib.sh). Targets take turns per
# repetition (order alternating). BASE=<moafs binary> adds an earlier moafs build as a third
# target.
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
bench_init bench-fsync
NEW=$MOAFS

targets=(moafs ext4)
[ -n "$BASE" ] && targets+=(base)

# target_up TARGET: a fresh image of TARGET mounted at $mnt.
target_up() {
  case $1 in
    moafs) MOAFS=$NEW moafs_target 2G ;;
    base) MOAFS=$BASE moafs_target 2G ;;
    ext4)
      truncate -s 2G "$img"; mkfs.ext4 -q -F "$img"
      loop=$(losetup --find --show "$img")
      blockdev --setra 256 "$loop"
      mount "$loop" "$mnt" ;;
  esac
}

declare -A iops
run() { # target
  local out
  target_up "$1"
  mkdir -p "$mnt/fio"
  sync; echo 3 > /proc/sys/vm/drop_caches
  out=$(fio --name=fsync --directory="$mnt/fio" --rw=randwrite --bs=4k --size="$SIZE" \
    --numjobs="$JOBS" --fsync=1 --ioengine=psync --time_based --runtime="$RUNTIME" \
    --group_reporting --output-format=json 2>/dev/null)
  bench_teardown
  python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["iops"]))' <<<"$out"
}
for rep in $(seq 1 "$REPS"); do
  order=("${targets[@]}")
  if [ $((rep % 2)) -eq 0 ]; then order=($(printf '%s\n' "${targets[@]}" | tac)); fi
  for t in "${order[@]}"; do
    v=$(run "$t")
    iops[$t,$rep]=$v
    echo "rep $rep $t: $v IOPS"
  done
done
python3 - "$REPS" "${targets[@]}" <<PY
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
PY
