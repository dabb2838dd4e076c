#!/bin/bash
# Cold reads through each target, counted at the device (issue 18, paper 001).
#
# Each target is an image on its own loop device over a file in $BACKING (default /dev/shm;
# a directory on a disk for real storage), with the loop device's
# readahead set to RA_KB (default 0: the file system alone decides what is read). A file of
# FILE_MB (default 256) MiB is written once; before every measured read the file system is
# unmounted, the page cache dropped and the file system mounted again (cold caches). Workloads:
#   rand256  fio randread, 256 KiB requests, 300 of them (psync, one job, fixed seed)
#   seq64    fio read, 64 KiB requests, the whole file
#   inter    two sequential streams read alternately through one descriptor, 4 KiB each
#            (the paper's 1000, 3001, 1001, 3002 ... pattern; stream 2 starts mid-file)
#   randSIZE fio randread of SIZE (16k ... 1m), 300 requests
#   mmaprand fio randread through mmap, 4 KiB, 300 requests (page faults)
#   mmapseq  fio read through mmap, 64 KiB, the whole file
# Target `raw` reads the loop device itself (seq64 only, O_DIRECT, 1 MiB requests): the
# device's read bandwidth.
# Targets run interleaved (every rep runs every target once per workload); prints, per
# target and workload: seconds, device read requests, KiB read, average request KiB, the
# ratio of device bytes to the bytes the workload asked for, and for moafs the READ requests
# the daemon got, their average KiB, the KiB its readahead fetched and left unused, and the
# daemon's peak resident memory (VmHWM, MiB).
#
#   scripts/bench-reads.sh [REPS] [WORKLOADS...]        (root)
#   TARGETS="ext4 xfs moafs moafs:readahead=linux" scripts/bench-reads.sh 3 rand256 seq64 inter
# (`moafs-pointers`: moafs on an image made with `mkfs --map pointers`, disk version 2)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
MOAFS=${MOAFS:-$(cd "$(dirname "$0")/.." && pwd)/target/release/moafs}
REPS=${1:-3}; shift || true
WORKLOADS=${*:-rand256 seq64 inter}
TARGETS=${TARGETS:-ext4 moafs}
FILE_MB=${FILE_MB:-256}
RA_KB=${RA_KB:-0}
OUT=${OUT:-/dev/stdout}

work=$(mktemp -d "${BACKING:-/dev/shm}/bench-reads.XXXXXX")
declare -A LOOP MNT PID
cleanup() {
  for t in "${!MNT[@]}"; do
    m=${MNT[$t]}
    if is_mounted "$m"; then
      if [ -n "${PID[$t]:-}" ]; then unmount_wait "$m" "${PID[$t]}" || true; else umount "$m" || true; fi
    fi
  done
  for t in "${!LOOP[@]}"; do losetup -d "${LOOP[$t]}" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

kind() { echo "${1%%:*}"; }
opts() { [[ $1 == *:* ]] && echo "${1#*:}" || true; }

do_mount() {
  local t=$1 k; k=$(kind "$t")
  case $k in
    moafs|moafs-pointers)
      local o; o=$(opts "$t")
      rm -f "$work/stats.json"
      "$MOAFS" mount -o "pidfile=$work/$k.$$.pid,stats=$work/stats.json${o:+,$o}" "${LOOP[$t]}" "${MNT[$t]}"
      PID[$t]=$(cat "$work/$k.$$.pid") ;;
    ext4|xfs) mount "${LOOP[$t]}" "${MNT[$t]}" ;;
    raw) ;;
  esac
}
do_umount() {
  local t=$1
  [ "$(kind "$t")" = raw ] && return 0
  if [ -n "${PID[$t]:-}" ]; then unmount_wait "${MNT[$t]}" "${PID[$t]}"; PID[$t]=""; else umount "${MNT[$t]}"; fi
}

i=0
for t in $TARGETS; do
  i=$((i + 1)); k=$(kind "$t")
  truncate -s 1G "$work/img$i"
  LOOP[$t]=$(losetup -f --show "$work/img$i")
  blockdev --setra $((RA_KB * 2)) "${LOOP[$t]}"
  MNT[$t]=$work/mnt$i; mkdir -p "${MNT[$t]}"
  case $k in
    moafs) "$MOAFS" mkfs "${LOOP[$t]}" >/dev/null ;;
    moafs-pointers) "$MOAFS" mkfs --map pointers "${LOOP[$t]}" >/dev/null ;;
    ext4) mkfs.ext4 -q -F "${LOOP[$t]}" ;;
    xfs) mkfs.xfs -q -f "${LOOP[$t]}" ;;
    raw) dd if=/dev/urandom of="${LOOP[$t]}" bs=1M count="$FILE_MB" status=none oflag=direct
         continue ;;
    *) echo "unknown target $t" >&2; exit 2 ;;
  esac
  do_mount "$t"
  dd if=/dev/urandom of="${MNT[$t]}/f" bs=1M count="$FILE_MB" status=none conv=fsync
  do_umount "$t"
done

# dev_reads LOOP: "requests sectors" read so far.
dev_reads() { awk '{print $1, $3}' "/sys/block/$(basename "$1")/stat"; }

# run W FILE: runs workload W on FILE; prints the bytes it asked for.
run() {
  local w=$1 f=$2
  case $w in
    seq64)
      # (raw: the loop device itself, O_DIRECT, 1 MiB requests: its read bandwidth)
      if [ -b "$f" ]; then set -- --direct=1 --bs=1m; else set -- --bs=64k; fi
      fio --name=s --filename="$f" --rw=read --ioengine=psync --size="${FILE_MB}m" "$@" \
        --output=/dev/null >/dev/null
      echo $((FILE_MB << 20)) ;;
    inter)
      python3 - "$f" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
half, bs = size // 2, 4096
for i in range(half // bs):
    os.pread(fd, bs, i * bs)
    os.pread(fd, bs, half + i * bs)
os.close(fd)
print(size)
EOF
      ;;
    mmaprand)
      fio --name=m --filename="$f" --rw=randread --bs=4k --number_ios=300 --ioengine=mmap \
        --size="${FILE_MB}m" --randseed=18 --output=/dev/null >/dev/null
      echo $((4096 * 300)) ;;
    mmapseq)
      fio --name=m --filename="$f" --rw=read --bs=64k --ioengine=mmap --size="${FILE_MB}m" \
        --output=/dev/null >/dev/null
      echo $((FILE_MB << 20)) ;;
    rand*)
      local bs=${w#rand}; [[ $bs =~ [km]$ ]] || bs=${bs}k
      fio --name=r --filename="$f" --rw=randread --bs="$bs" --number_ios=300 --ioengine=psync \
        --size="${FILE_MB}m" --randseed=18 --output=/dev/null >/dev/null
      local b; b=$(numfmt --from=iec "${bs^^}")
      echo $((b * 300)) ;;
  esac
}

printf "%-28s %-8s %8s %9s %11s %8s %7s %8s %7s %8s %8s %7s\n" target workload secs requests KiB avgKiB dev/ask \
  READs avgKiB raKiB wasteKiB hwmMiB >"$OUT"
for rep in $(seq "$REPS"); do
  for w in $WORKLOADS; do
    for t in $TARGETS; do
      do_mount "$t"
      sync; echo 3 > /proc/sys/vm/drop_caches
      read -r r0 s0 < <(dev_reads "${LOOP[$t]}")
      a=$(date +%s.%N)
      if [ "$(kind "$t")" = raw ]; then
        [ "$w" = seq64 ] || continue
        f=${LOOP[$t]}
      else
        f=${MNT[$t]}/f
      fi
      asked=$(run "$w" "$f")
      b=$(date +%s.%N)
      read -r r1 s1 < <(dev_reads "${LOOP[$t]}")
      hwm=-
      if [ -n "${PID[$t]:-}" ]; then
        hwm=$(awk '/^VmHWM/ {printf "%d", $2 / 1024}' "/proc/${PID[$t]}/status")
      fi
      do_umount "$t"
      req=$((r1 - r0)); kib=$(((s1 - s0) / 2))
      daemon="- - - -"
      if [ -f "$work/stats.json" ] && [[ "$(kind "$t")" == moafs* ]]; then
        daemon=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["reads"]; n=r["requests"]
print(n, round(r["requested_bytes"]/1024/max(n,1),1), r["prefetched_bytes"]//1024, r["prefetched_unused_bytes"]//1024)' "$work/stats.json")
        rm -f "$work/stats.json"
      fi
      awk -v t="$t" -v w="$w" -v a="$a" -v b="$b" -v r="$req" -v k="$kib" -v x="$asked" -v d="$daemon" -v h="$hwm" \
        'BEGIN{split(d, f, " "); printf "%-28s %-8s %8.3f %9d %11d %8.1f %7.3f %8s %7s %8s %8s %7s\n", t, w, b-a, r, k, (r?k/r:0), k*1024/x, f[1], f[2], f[3], f[4], h}' >>"$OUT"
    done
  done
done
