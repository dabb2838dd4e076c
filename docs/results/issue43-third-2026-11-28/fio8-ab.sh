#!/bin/bash
# usage: ab.sh ROUNDS OPTS_A OPTS_B  (moafs fio 8x4k fsync on /dev/shm loop)
set -u
M=${MOAFS:-target/release/moafs}; W=/dev/shm/ab43; mkdir -p $W/mnt; MNT=$W/mnt; LOOP=""
cleanup() { mountpoint -q $MNT && umount $MNT; [ -n "$LOOP" ] && losetup -d $LOOP 2>/dev/null; LOOP=""; rm -f $W/img; }
trap cleanup EXIT
N=$1; shift
for i in $(seq 1 $N); do for o in "$@"; do
  truncate -s 4G $W/img; LOOP=$(losetup -f --show $W/img); $M mkfs $LOOP >/dev/null
  $M mount -o pidfile=$W/pid -o $o $LOOP $MNT
  r=$(fio --name=w --directory=$MNT --numjobs=8 --rw=randwrite --bs=4k --size=4m --fsync=1 --ioengine=psync --group_reporting --output-format=terse --terse-version=3 | awk -F';' '{print $49}')
  echo "$i $o $r"
  sync; umount $MNT; losetup -d $LOOP; LOOP=""; rm -f $W/img
done; done
