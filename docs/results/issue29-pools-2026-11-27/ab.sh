#!/bin/bash
# usage: ab.sh WORKLOAD DURATION REPS NAME=BIN[@opts] ...   (harness: /work/main/target/release/moafs)
set -u
wl=$1; dur=$2; reps=$3; shift 3
H=/work/main/target/release/moafs
D=/dev/shm/ab/run; mkdir -p $D/mnt
cleanup() { mountpoint -q $D/mnt && fusermount3 -u $D/mnt; [[ -n ${dev:-} ]] && losetup -d $dev; rm -f $D/img; }
trap cleanup EXIT
for r in $(seq 1 $reps); do
  for spec in "$@"; do
    name=${spec%%=*}; rest=${spec#*=}; bin=${rest%%@*}; opts=""; [[ $rest == *@* ]] && opts="-o ${rest#*@}"
    rm -f $D/img; $bin mkfs --size 4G $D/img >/dev/null || exit 1
    [[ -n $opts ]] && opts="$opts,pidfile=$D/pid" || opts="-o pidfile=$D/pid"
    src=$D/img; dev=""
    if [[ ${LOOP:-0} == 1 ]]; then dev=$(losetup -f --show $D/img); blockdev --setra 256 $dev; src=$dev; fi
    $bin mount $opts $src $D/mnt || exit 1
    pid=$(cat $D/pid); t0=$(awk '{print $14+$15}' /proc/$pid/stat)
    out=$($H bench --target $D/mnt --workload $wl --duration $dur --scale ${SCALE:-1} --reps 1 --watch-ms 0 2>&1)
    t1=$(awk '{print $14+$15}' /proc/$pid/stat)
    nops=$(echo "$out" | grep -oE '\(([0-9,]+) ops per run' | tr -d '(,' | awk '{s+=$1} END {print s}')
    ops=$(echo "$out" | grep -oE '^dir:[^ ]+: [0-9.]+ [a-z]+/s' | awk '{print $2}')
    cpu=$(echo "$out" | grep -oE 'CPU per operation[^:]*: [0-9.]+' | awk '{print $NF}')
    $bin umount $D/mnt || fusermount3 -u $D/mnt
    [[ -n $dev ]] && losetup -d $dev; dev=""
    echo "$wl rep=$r $name ops=$ops cpu=$cpu daemon_us_per_op=$(echo "($t1-$t0)*10000/$nops" | bc -l | cut -c1-6)"
  done
done
