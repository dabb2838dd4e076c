#!/bin/bash
# Two moafs builds take turns, each run beside ext4 on the disk (loop devices over files in
# /var/tmp, readahead as the harness sets it): A=binary before, B=binary after; N rounds.
# usage: ab-disk.sh A B N WORKLOAD [DURATION] [BACKING]
set -euo pipefail
A=$1; B=$2; N=$3; W=$4; D=${5:-10}; BK=${6:-/var/tmp/moafs-i43}
mkdir -p "$BK"
for i in $(seq 1 "$N"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    "$bin" bench --target ext4,moafs --workload "$W" --backing "$BK" --duration "$D" --reps 1 \
      --seed $((1000 + i)) --json "ab-$W-$side-$i.json" > "ab-$W-$side-$i.txt" 2>&1
    grep -E '^  moafs: ' "ab-$W-$side-$i.txt" | sed "s/^/$side $i /"
  done
done
