#!/bin/bash
# N files (half empty, half 4 KiB) in 100 directories, remount, find; the daemon's peak RSS
# usage (project root, root): walk.sh N   (its find stats every file: each becomes a kernel inode)
# SIZE= the image (default 8G), STATS= a file for the remount's -o stats= (inode counts, peak RSS)
set -u
N=$1; M=${MOAFS:-target/release/moafs}; W=/var/tmp/walk44; mkdir -p $W/mnt; MNT=$W/mnt
cleanup() { mountpoint -q $MNT && umount $MNT; rm -f $W/img; }
trap cleanup EXIT
truncate -s ${SIZE:-8G} $W/img; $M mkfs -i 4096 $W/img >/dev/null
$M mount $W/img $MNT
python3 - $MNT $N <<'PY'
import os, sys
mnt, n = sys.argv[1], int(sys.argv[2])
data = b'x' * 4096
for d in range(100): os.mkdir(f"{mnt}/d{d}")
for i in range(n):
    with open(f"{mnt}/d{i % 100}/f{i}", "wb") as f:
        if i % 2: f.write(data)
PY
[ $? = 0 ] || { echo "creating the files failed"; exit 1; }
umount $MNT
$M mount -o pidfile=$W/pid${STATS:+,stats=$STATS} $W/img $MNT
PID=$(cat $W/pid)
grep VmRSS /proc/$PID/status
echo 3 > /proc/sys/vm/drop_caches
find $MNT -printf "%s\n" | wc -l
grep -E "VmHWM|VmRSS" /proc/$PID/status
