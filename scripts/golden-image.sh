#!/bin/bash
# golden-image.sh MOAFS OUT.img: the small image of crates/moafs-core/tests/golden/ (one of
# each structure), made by the moafs binary MOAFS; then scripts/golden-dump.py OUT.img
# vN.golden keeps its non-zero blocks. crates/moafs-core/tests/golden.rs checks the
# contents below: change both together (and say in tests/golden/README.md which files an
# older golden image has).
set -euo pipefail
M=$1; IMG=$2; MNT=$(mktemp -d)
rm -f "$IMG"
"$M" mkfs --size 8M "$IMG" >/dev/null
"$M" mount "$IMG" "$MNT"
trap '"$M" umount "$MNT" 2>/dev/null || true; rmdir "$MNT"' EXIT
cd "$MNT"
printf 'hello, golden image\n' > small
python3 - <<'PY'
import os
def pat(n, seed):
    return bytes(((i * 131 + seed * 7) >> 3) & 0xff for i in range(n))
open('three', 'wb').write(pat(3*4096 - 100, 1))
open('forty', 'wb').write(pat(40*4096 + 17, 2))
with open('sparse', 'wb') as f:
    f.write(pat(4096, 3))
    f.seek(2000*4096); f.write(pat(5000, 4))
os.mkdir('dir'); os.mkdir('dir/sub')
for i in range(30):
    open(f'dir/f{i:02d}', 'wb').write(pat(100 + i * 50, i))
os.symlink('dir/f01', 'link')
with open('frag', 'wb') as f:   # twelve one-block extents: an extent-tree block (since v3)
    for i in range(12):
        f.seek(2 * i * 4096); f.write(pat(4096, 10 + i))
os.setxattr('small', 'user.colour', b'blue')
PY
cd /
sync
