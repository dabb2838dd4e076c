#!/bin/bash
# What a file's block map costs: for each target, a 64 GiB sparse file (one 4 KiB block every
# 64 MiB: 1,024 blocks) and a 4 GiB file written whole, on a loop device over a file in
# BACKING (default /dev/shm; loop readahead RA_KB, default 0). Prints per file the map's
# blocks (st_blocks less the data), then, cold (unmounted, caches dropped, mounted again),
# the device requests and KiB read to read every written block of the sparse file once
# (4 KiB each, in a shuffled order) against the 4 MiB asked.
#
#   scripts/map-size.sh [TARGETS...]      (root; default: ext4 moafs moafs-pointers)
# moafs: `mkfs` (extent maps, disk version 3); moafs-pointers: `mkfs --map pointers` (v2).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
MOAFS=${MOAFS:-$(cd "$(dirname "$0")/.." && pwd)/target/release/moafs}
TARGETS=${*:-ext4 moafs moafs-pointers}
RA_KB=${RA_KB:-0}
work=$(mktemp -d "${BACKING:-/dev/shm}/map-size.XXXXXX")
LOOP=""; MNT=$work/mnt; PIDF=$work/pid; mkdir -p "$MNT"
cleanup() {
  if is_mounted "$MNT"; then
    if [ -f "$PIDF" ]; then unmount_wait "$MNT" "$(cat "$PIDF")" || true; else umount "$MNT" || true; fi
  fi
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
do_mount() {
  case $1 in
    moafs*) rm -f "$PIDF"; "$MOAFS" mount -o "pidfile=$PIDF" "$LOOP" "$MNT" ;;
    *) mount "$LOOP" "$MNT" ;;
  esac
}
do_umount() {
  case $1 in
    moafs*) unmount_wait "$MNT" "$(cat "$PIDF")"; rm -f "$PIDF" ;;
    *) umount "$MNT" ;;
  esac
}
printf '%-16s %-12s %10s %12s %14s %10s %10s %8s\n' target file size_GiB data_blocks map_blocks_4k cold_reqs cold_KiB dev/ask
for t in $TARGETS; do
  truncate -s 6G "$work/img"
  LOOP=$(losetup -f --show "$work/img")
  blockdev --setra $((RA_KB * 2)) "$LOOP"
  case $t in
    moafs) "$MOAFS" mkfs "$LOOP" >/dev/null ;;
    moafs-pointers) "$MOAFS" mkfs --map pointers "$LOOP" >/dev/null ;;
    ext4) mkfs.ext4 -q -F "$LOOP" ;;
    xfs) mkfs.xfs -q -f "$LOOP" ;;
    *) echo "unknown target $t" >&2; exit 2 ;;
  esac
  do_mount "$t"
  python3 - "$MNT/sparse" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.ftruncate(fd, 64 << 30)
for i in range(1024):
    os.pwrite(fd, (i.to_bytes(8, 'little') * 512), i * (64 << 20))
os.fsync(fd); os.close(fd)
PY
  dd if=/dev/zero of="$MNT/whole" bs=1M count=4096 status=none conv=fsync
  sync
  for f in sparse whole; do
    read -r size blocks512 < <(stat -c '%s %b' "$MNT/$f")
    data=$([ $f = sparse ] && echo 1024 || echo $((4 << 18)))
    map=$(( blocks512 / 8 - data ))
    printf '%-16s %-12s %10.1f %12d %14d' "$t" "$f" "$(echo "$size / 1073741824" | bc -l)" "$data" "$map"
    if [ $f = sparse ]; then
      do_umount "$t"; sync; echo 3 > /proc/sys/vm/drop_caches; do_mount "$t"
      read -r r0 s0 < <(awk '{print $1, $3}' "/sys/block/$(basename "$LOOP")/stat")
      python3 - "$MNT/sparse" <<'PY'
import os, random, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
order = list(range(1024)); random.Random(7).shuffle(order)
for i in order:
    b = os.pread(fd, 4096, i * (64 << 20))
    assert b[:8] == i.to_bytes(8, 'little'), i
os.close(fd)
PY
      read -r r1 s1 < <(awk '{print $1, $3}' "/sys/block/$(basename "$LOOP")/stat")
      kib=$(( (s1 - s0) / 2 ))
      printf ' %10d %10d %8.3f\n' $((r1 - r0)) $kib "$(echo "$kib / 4096" | bc -l)"
    else
      printf ' %10s %10s %8s\n' - - -
    fi
  done
  do_umount "$t"
  losetup -d "$LOOP"; LOOP=""
  rm -f "$work/img"
done
