#!/usr/bin/env bash
# The main job on an embedded default: make a 512 MiB image in /dev/shm, mount it, run a short
# small-file + large-file workload, verify every byte after a remount, say what the device saw,
# unmount; then compare moafs with ext4, the FUSE ceiling (memfs), the FUSE floor and fuse2fs
# on PostMark (`moafs bench`), and end with a summary and the path of its chart (in
# target/demo/). Cleans up even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
MOAFS=${MOAFS:-$PWD/target/release/moafs}
work=$(mktemp -d /dev/shm/moafs-demo.XXXXXX)
out=$PWD/target/demo
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
echo "== what the image's device saw during that mount (-o stats=; every counter: $out/stats.json)"
mkdir -p "$out"; cp "$work/stats.json" "$out/stats.json"
python3 - "$work/stats.json" "$work/before.sha" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
files = sum(1 for _ in open(sys.argv[2]))
d = s["device"]
mib = lambda b: b / (1 << 20)
w, wb = d["writes"], d["write_bytes"]
r, rb = d["reads"], d["read_bytes"]
f = d["flushes"]
print(f"   {w:,} write requests ({mib(wb):.1f} MiB), {r:,} reads ({mib(rb):.1f} MiB), {f:,} flushes")
if w:
    print(f"   for {files:,} files: {files / w:.1f} files per write request, {wb / w / 1024:.0f} KiB per request on average")
c = s.get("bytes_by_class", {})
if c:
    print("   bytes written by purpose: " + ", ".join(f"{k.replace('_', ' ')} {mib(v):.1f} MiB" for k, v in c.items() if v))
PY
echo "== fsck"
"$MOAFS" fsck -n "$img"
echo "== remount and verify every byte"
"$MOAFS" mount -o "pidfile=$work/pid" "$img" "$mnt"
cp "$work/pid" "$work/pid.keep"
(cd "$mnt" && sha256sum --quiet -c "$work/before.sha") && echo "   all $(wc -l < "$work/before.sha") files identical after remount"
unmount
echo "== inspect"
"$MOAFS" inspect "$img" | head -n 20
echo "== comparison: PostMark (1/20 of FSL) on fresh 1 GiB images in /dev/shm: ext4, moafs, the"
echo "   FUSE ceiling (memfs: moafs's FUSE transport serving a file system in memory, no engine,"
echo "   no device), the FUSE floor (ext4 passed through that transport) and fuse2fs;"
echo "   3 repetitions, targets in a random order within each, each target's rate as a multiple"
echo "   of ext4's, paired by repetition (moafs bench; docs/BENCHMARKS.md)"
if [ "$(id -u)" -eq 0 ]; then
  mkdir -p "$out"
  "$MOAFS" bench --target ext4,moafs,memfs,passthrough,fuse2fs --size 1G --reps 3 \
    --json "$out/postmark.json" --html "$out/postmark.html" --chart "$out/postmark.svg" \
    --title "PostMark (1/20 of FSL) on /dev/shm: rate as a multiple of ext4's" \
    | grep -E '^[a-z0-9]+: [0-9.]+ [a-z]+/s|^compared with|^  [a-z0-9]+: [0-9.]+× '
  echo "   (every run, device counter and latency: $out/postmark.html)"
  echo "== summary"
  python3 - "$out/postmark.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
res = doc["results"][0]
ratio = {c["target"]: c for c in res["comparison"]}
def r(t):
    c = ratio.get(t, {})
    lo, hi = c.get("ci95_low"), c.get("ci95_high")
    span = f" (95 % interval {lo:.2f}-{hi:.2f})" if lo is not None else ""
    return c.get("ratio_to_baseline"), span
m, ms = r("moafs")
c, _ = r("memfs")
f, _ = r("fuse2fs")
print(f"   moafs ran PostMark at {m:.2f}x ext4's rate{ms}.")
if c:
    print(f"   The FUSE ceiling (memfs) ran at {c:.2f}x: moafs reached {100 * m / c:.0f} % of what FUSE allows here.")
if f:
    print(f"   fuse2fs, the other FUSE file system with a disk format, ran at {f:.2f}x: moafs is {m / f:.1f}x faster.")
PY
  echo "   chart: $out/postmark.svg   report: $out/postmark.html"
else
  echo "   (skipped: the comparison makes loop devices and mounts, which needs root)"
fi
