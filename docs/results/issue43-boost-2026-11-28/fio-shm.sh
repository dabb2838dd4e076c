#!/bin/bash
# fio, 8 jobs x 4 KiB random writes, fsync after each (the row), on /dev/shm:
# ext4 and moafs each on a loop device over a 4 GiB file in /dev/shm, memfs (no device).
# usage: fio-shm.sh MOAFS_BINARY ROUNDS
set -u
M=$1; N=$2; W=/dev/shm/fio-i43; mkdir -p $W
LOOP=""; MNT=$W/mnt; mkdir -p $MNT
cleanup() { mountpoint -q $MNT && umount $MNT; [ -n "$LOOP" ] && losetup -d $LOOP 2>/dev/null; LOOP=""; rm -f $W/img; }
trap cleanup EXIT
job() { fio --name=fsync8 --directory=$MNT --numjobs=8 --rw=randwrite --bs=4k --size=4m --fsync=1 \
  --ioengine=psync --group_reporting --output-format=terse --terse-version=3 | awk -F';' '{print $49}'; }
for i in $(seq 1 $N); do
  for t in ext4 moafs memfs; do
    case $t in
      ext4) truncate -s 4G $W/img; LOOP=$(losetup -f --show $W/img); mkfs.ext4 -q $LOOP; mount $LOOP $MNT;;
      moafs) truncate -s 4G $W/img; LOOP=$(losetup -f --show $W/img); $M mkfs $LOOP >/dev/null; $M mount $LOOP $MNT;;
      memfs) $M memfs -o size=4G $MNT || echo "memfs mount failed";;
    esac
    mountpoint -q $MNT || { echo "$t not mounted"; continue; }
    iops=$(job)
    echo "$i $t $iops"
    sync; umount $MNT; [ -n "$LOOP" ] && losetup -d $LOOP; LOOP=""; rm -f $W/img
  done
done
