#!/usr/bin/env bash
# scripts/record-long.sh with an NVM tier (issue 45 item 3): a long recorded FUSE mount with
# -o record=LOG,nvm=TIER, then `moafs crashcheck` over the image and the tier together.
# fsync + rename-over + small fdatasync overwrites (byte-log batches under nvm_threshold: the
# tier's) + directory fsyncs + unlinks, N rounds.
# Usage (root): scripts/record-nvm.sh [ROUNDS] [STATES]   (defaults 1500, 150000)
set -euo pipefail
cd "$(dirname "$0")/.."
M=$PWD/target/release/moafs
ROUNDS=${1:-1500}
STATES=${2:-150000}
W=$(mktemp -d /dev/shm/moafs-record-nvm.XXXXXX)
trap 'mountpoint -q "$W/mnt" && "$M" umount "$W/mnt"; rm -rf "$W"' EXIT
mkdir "$W/mnt"
"$M" mkfs "$W/img" --size 64M > /dev/null
truncate -s 16M "$W/tier"
# the recorded mount is the image's first with the tier (the superblock gains its path)
"$M" mount -o "record=$W/w.log,nvm=$W/tier,pidfile=$W/pid,stats=$W/stats.json" "$W/img" "$W/mnt"
python3 - "$W/mnt" "$ROUNDS" <<'PY'
import os, sys
d, rounds = sys.argv[1] + '/a', int(sys.argv[2])
os.makedirs(d, exist_ok=True)
# a file whose blocks are durable: its small overwrites' fdatasyncs are served by the tier
db = os.open(f'{d}/db', os.O_RDWR | os.O_CREAT, 0o644)
os.write(db, bytes(range(256)) * 1024); os.fsync(db)
for i in range(rounds):
    for k in range(2):
        os.pwrite(db, bytes([(i + k) % 251]) * (1 + (i * 13 + k) % 200), (i * 7919 + k * 4099) % 262000)
        os.fdatasync(db)
    p = f'{d}/tmp'
    with open(p, 'wb') as f:
        f.write(bytes([i % 251]) * (500 + 37 * (i % 113)))
        f.flush(); os.fsync(f.fileno())
    os.rename(p, f'{d}/f{i % 17}')
    q = f'{d}/f{(i * 7) % 17}'
    if i % 2 == 0 and os.path.exists(q):
        with open(q, 'r+b') as f:
            f.seek(100 + i % 200); f.write(b'x' * (1 + i % 300)); os.fdatasync(f.fileno())
    if i % 50 == 0:
        fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
    q = f'{d}/f{(i * 3) % 17}'
    if i % 9 == 0 and os.path.exists(q):
        os.unlink(q)
PY
"$M" umount "$W/mnt"
python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['engine']; print('engine: tier_batches', e['tier_batches'], 'tier_bytes', e['tier_bytes'], 'tier_spills', e['tier_spills'])" "$W/stats.json"
"$M" crashcheck "$W/w.log" --states "$STATES" --seed 3 --jobs 2
