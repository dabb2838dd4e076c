#!/bin/bash
# Small updates with fdatasync (issue 17): bytes the device sees per update. A FILE_MB file
# (default 64) is written and made durable; then fio makes N (default 2,000) random
# overwrites of BS bytes (default 256) inside the first REGION (default 1M) of it, each
# followed by fdatasync; then the file system is unmounted. Bytes written are read from the
# loop device's counters (/sys/block/loopN/stat, sectors written) from just before the first
# update to just after the unmount. Every target is an image of SIZE (default 1G) on a loop
# device over a file in /dev/shm (or in BACKING, a directory on real storage: the loop device
# then writes through to it), readahead 128 KiB (blockdev --setra 256), mounted afresh per
# repetition; targets take turns (order alternating). Targets: moafs (byte log on, the
# default), moafs-nvm (with an NVM tier: a TIER-sized file in /dev/shm, persists charged as
# Optane DC), moafs-off (bytelog=off: every fsync commits), ext4 (kernel, default options
# but inode tables and journal initialised at mkfs, so that no lazy initialisation writes
# during the measurement).
#
#   scripts/bench-smallupdates.sh                # REPS=5 N=2000 BS=256 REGION=1M JOBS=1
#   BS=1k REGION=64M scripts/bench-smallupdates.sh
#   JOBS=4 scripts/bench-smallupdates.sh         # 4 fio jobs, each its own file, N in all
#
# KEEP_STATS=PREFIX keeps each moafs run's -o stats= JSON as PREFIX.TARGET.
#
# Prints one line per run (bytes written, per update, device write requests, fsyncs the
# byte log served, updates per second as fio measured them) and a summary: mean bytes per
# update (min..max) and the ratio to ext4 per repetition, and the same for updates/s.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/lib.sh"
MOAFS=${MOAFS:-$ROOT/target/release/moafs}
REPS=${REPS:-5}; N=${N:-2000}; BS=${BS:-256}; REGION=${REGION:-1M}; FILE_MB=${FILE_MB:-64}
SIZE=${SIZE:-1G}; TIER=${TIER:-16M}; JOBS=${JOBS:-1}
TARGETS=${TARGETS:-"moafs moafs-nvm moafs-off ext4"}
command -v fio >/dev/null || { echo "fio is needed: apt-get install fio" >&2; exit 1; }
bench_init bench-smallupdates
tier=$(mktemp -u /dev/shm/bench-smallupdates-tier.XXXXXX)
trap 'bench_teardown; rm -rf "$work" "$tier"' EXIT

# written_sectors LOOP: sectors written so far (field 7 of the block device's stat).
written_sectors() { awk '{print $7}' "/sys/block/$(basename "$1")/stat"; }
write_requests() { awk '{print $5}' "/sys/block/$(basename "$1")/stat"; }

run() { # target -> "bytes requests served iops"
  local t=$1 s0 r0 s1 r1 served=0 out
  truncate -s "$SIZE" "$img"
  # on real storage the loop device writes through (direct I/O, so its flushes reach the disk)
  local dio=off
  [ "${BACKING:-/dev/shm}" != /dev/shm ] && dio=on
  loop=$(losetup --find --show --direct-io="$dio" "$img")
  blockdev --setra 256 "$loop"
  case $t in
    ext4)
      mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
      mount "$loop" "$mnt" ;;
    moafs | moafs-off | moafs-nvm)
      "$MOAFS" mkfs "$loop" >/dev/null
      local o="pidfile=$work/pid,stats=$work/stats.json"
      [ "$t" = moafs-off ] && o="$o,bytelog=off"
      if [ "$t" = moafs-nvm ]; then
        # the tier is memory in every case (/dev/shm), as persistent memory would be
        rm -f "$tier"; truncate -s "$TIER" "$tier"; o="$o,nvm=$tier"
      fi
      "$MOAFS" mount -o "$o" "$loop" "$mnt"; pid=$(cat "$work/pid") ;;
  esac
  for j in $(seq 0 $((JOBS - 1))); do
    dd if=/dev/urandom of="$mnt/f.$j" bs=1M count="$FILE_MB" conv=fsync status=none
  done
  sync -f "$mnt/f.0"
  sleep 0.2
  s0=$(written_sectors "$loop"); r0=$(write_requests "$loop")
  # io_size: exactly N updates, going over the region again when it holds fewer blocks
  out=$(fio --name=su --directory="$mnt" --filename_format='f.$jobnum' --numjobs="$JOBS" \
    --rw=randwrite --bs="$BS" --size="$REGION" --group_reporting \
    --io_size="$(( N / JOBS * $(numfmt --from=iec "${BS^^}") ))" --fdatasync=1 \
    --ioengine=psync --randrepeat=0 --output-format=json)
  if [ "$t" = ext4 ]; then umount "$mnt"; else unmount_wait "$mnt" "$pid"; pid=""; fi
  s1=$(written_sectors "$loop"); r1=$(write_requests "$loop")
  if [ "$t" != ext4 ]; then
    served=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["engine"]["bytelog_fsyncs"])' "$work/stats.json")
  fi
  [ -n "${KEEP_STATS:-}" ] && [ -f "$work/stats.json" ] && cp "$work/stats.json" "$KEEP_STATS.$t"
  losetup -d "$loop"; loop=""; rm -f "$img" "$tier"
  echo "$(( (s1 - s0) * 512 )) $((r1 - r0)) $served $(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["iops"]))' <<<"$out")"
}

declare -A bytes iops
read -r -a targets <<<"$TARGETS"
for rep in $(seq 1 "$REPS"); do
  order=("${targets[@]}")
  if [ $((rep % 2)) -eq 0 ]; then order=($(printf '%s\n' "${targets[@]}" | tac)); fi
  for t in "${order[@]}"; do
    read -r b req served io < <(run "$t")
    bytes[$t,$rep]=$b; iops[$t,$rep]=$io
    printf 'rep %d %-9s %10d bytes  %7.0f per update  %6d write requests  %5d fsyncs by the byte log  %6d updates/s\n' \
      "$rep" "$t" "$b" "$(echo "$b / $N" | bc -l)" "$req" "$served" "$io"
  done
done
python3 - "$REPS" "$N" "${targets[@]}" <<EOF
import statistics, sys
reps, n = int(sys.argv[1]), int(sys.argv[2]); targets = sys.argv[3:]
b = {$(for k in "${!bytes[@]}"; do printf "'%s': %s, " "$k" "${bytes[$k]}"; done)}
io = {$(for k in "${!iops[@]}"; do printf "'%s': %s, " "$k" "${iops[$k]}"; done)}
print(f"{n} random $BS-byte overwrites + fdatasync in the first $REGION of a ${FILE_MB} MiB file "
      f"($JOBS job(s), each its own file), "
      f"bytes written by the device to the end of unmount, {reps} reps (mean, min..max):")
for t in targets:
    v = [b[f"{t},{r}"] / n for r in range(1, reps + 1)]
    line = f"  {t:9} {statistics.mean(v):>9.0f} B/update ({min(v):.0f}..{max(v):.0f})"
    if "ext4" in targets and t != "ext4":
        ratio = [b[f"{t},{r}"] / b[f"ext4,{r}"] for r in range(1, reps + 1)]
        line += f"  ratio to ext4 {statistics.mean(ratio):.3f} ({min(ratio):.3f}..{max(ratio):.3f})"
    print(line)
print("updates per second (fio write IOPS; mean, min..max):")
for t in targets:
    v = [io[f"{t},{r}"] for r in range(1, reps + 1)]
    line = f"  {t:9} {statistics.mean(v):>9.0f} ({min(v)}..{max(v)})"
    if "ext4" in targets and t != "ext4":
        ratio = [io[f"{t},{r}"] / io[f"ext4,{r}"] for r in range(1, reps + 1)]
        line += f"  ratio to ext4 {statistics.mean(ratio):.2f} ({min(ratio):.2f}..{max(ratio):.2f})"
    print(line)
EOF
