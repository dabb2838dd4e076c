#!/usr/bin/env bash
# A long recorded FUSE mount for `moafs crashcheck` (issue 28's "100,000 states" check):
# fsync + rename-over + small fdatasync overwrites + directory fsyncs + unlinks, N rounds.
# Usage (root): scripts/record-long.sh [ROUNDS] [STATES]   (defaults 1500, 150000)
set -euo pipefail
cd "$(dirname "$0")/.."
M=$PWD/target/release/moafs
ROUNDS=${1:-1500}
STATES=${2:-150000}
W=$(mktemp -d /dev/shm/moafs-record-long.XXXXXX)
trap 'mountpoint -q "$W/mnt" && "$M" umount "$W/mnt"; rm -rf "$W"' EXIT
mkdir "$W/mnt"
"$M" mkfs "$W/img" --size 64M > /dev/null
"$M" mount -o "record=$W/w.log,pidfile=$W/pid" "$W/img" "$W/mnt"
python3 - "$W/mnt" "$ROUNDS" <<'PY'
import os, sys
d, rounds = sys.argv[1] + '/a', int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for i in range(rounds):
    p = f'{d}/tmp'
    with open(p, 'wb') as f:
        f.write(bytes([i % 251]) * (500 + 37 * (i % 113)))
        f.flush(); os.fsync(f.fileno())
    os.rename(p, f'{d}/f{i % 17}')
    q = f'{d}/f{(i * 7) % 17}'
    if i % 5 == 0 and os.path.exists(q):
        with open(q, 'r+b') as f:
            f.seek(100); f.write(b'x' * (1 + i % 300)); os.fdatasync(f.fileno())
    if i % 50 == 0:
        fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
    q = f'{d}/f{(i * 3) % 17}'
    if i % 9 == 0 and os.path.exists(q):
        os.unlink(q)
PY
"$M" umount "$W/mnt"
"$M" crashcheck "$W/w.log" --states "$STATES" --seed 3 --jobs 2
