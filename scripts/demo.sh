#!/usr/bin/env bash
# The main job on an embedded default: make a 512 MiB image in /dev/shm, mount it, run a short
# small-file + large-file workload, verify every byte after a remount, print what the device saw,
# unmount; then compare moafs with ext4 and fuse2fs on PostMark (`moafs bench`). Cleans up even
# on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
MOAFS=${MOAFS:-$PWD/target/release/moafs}
work=$(mktemp -d /dev/shm/moafs-demo.XXXXXX)
img=$work/moafs.img
mnt=$work/mnt
mkdir -p "$mnt"
. scripts/lib.sh
unmount() {
  unmount_wait "$mnt" "$(cat "$work/pid.keep" 2>/dev/null || true)"
  rm -f "$work/pid.keep"
}
trap 'unmount; rm -rf "$work"' EXIT

echo "== mkfs"
"$MOAFS" mkfs --size 512M "$img"
echo "== mount"
"$MOAFS" mount -o "pidfile=$work/pid,stats=$work/stats.json" "$img" "$mnt"
cp "$work/pid" "$work/pid.keep"

echo "== workload: 20 directories x 200 small files (1-16 KiB), one 64 MiB file, then fsync"
start=$(date +%s.%N)
python3 - "$mnt" <<'PY'
import os, random, sys
root = sys.argv[1]
rnd = random.Random(42)
for d in range(20):
    os.mkdir(f"{root}/dir{d:02}")
    for f in range(200):
        with open(f"{root}/dir{d:02}/file{f:03}", "wb") as fh:
            fh.write(rnd.randbytes(rnd.randint(1024, 16384)))
with open(f"{root}/large.bin", "wb") as fh:
    for _ in range(64):
        fh.write(rnd.randbytes(1 << 20))
    fh.flush(); os.fsync(fh.fileno())
PY
end=$(date +%s.%N)
(cd "$mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/before.sha"
echo "   wrote $(wc -l < "$work/before.sha") files in $(echo "$end - $start" | bc) s"
unmount
echo "== device counters of that mount (moafs engine + image file)"
cat "$work/stats.json"; echo
echo "== fsck"
"$MOAFS" fsck -n "$img"
echo "== remount and verify every byte"
"$MOAFS" mount -o "pidfile=$work/pid" "$img" "$mnt"
cp "$work/pid" "$work/pid.keep"
(cd "$mnt" && sha256sum --quiet -c "$work/before.sha") && echo "   all $(wc -l < "$work/before.sha") files identical after remount"
unmount
echo "== inspect"
"$MOAFS" inspect "$img" | head -n 20
echo "== comparison: PostMark (1/20 of FSL), moafs vs ext4, the FUSE floor (ext4 passed through moafs's"
echo "   FUSE transport) and fuse2fs on fresh 1 GiB images in /dev/shm,"
echo "   3 repetitions, targets in a random order within each, each target's rate as a multiple"
echo "   of moafs's, paired by repetition (moafs bench; docs/BENCHMARKS.md)"
if [ "$(id -u)" -eq 0 ]; then
  "$MOAFS" bench --target moafs,ext4,passthrough,fuse2fs --size 1G --reps 3 | grep -v " run "
else
  echo "   (skipped: the comparison makes loop devices and mounts, which needs root)"
fi
