#!/bin/bash
set -u
M=${MOAFS:-target/release/moafs}; W=/dev/shm/prof43; mkdir -p $W/mnt; MNT=$W/mnt; LOOP=""
cleanup() { mountpoint -q $MNT && umount $MNT; [ -n "$LOOP" ] && losetup -d $LOOP 2>/dev/null; rm -f $W/img; }
trap cleanup EXIT
truncate -s 4G $W/img; LOOP=$(losetup -f --show $W/img); $M mkfs $LOOP >/dev/null; $M mount -o pidfile=$W/pid $LOOP $MNT
PID=$(cat $W/pid)
fio --name=w --directory=$MNT --numjobs=8 --rw=randwrite --bs=4k --size=4m --fsync=1 --ioengine=psync --group_reporting --time_based --runtime=12 --output-format=terse --terse-version=3 | awk -F';' '{print "iops",$49}' &
FIO=$!
sleep 3
perf record -g -p $PID -o /tmp/perf43.data -- sleep 6 2>/dev/null >/dev/null
wait $FIO
sync; umount $MNT; losetup -d $LOOP; LOOP=""
