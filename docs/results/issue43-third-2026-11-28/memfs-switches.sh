#!/bin/bash
M=${MOAFS:-target/release/moafs}; MNT=/dev/shm/prof43/mnt; mkdir -p $MNT
$M memfs -o size=4G,pidfile=/dev/shm/prof43/pid $MNT
PID=$(cat /dev/shm/prof43/pid)
fio --name=w --directory=$MNT --numjobs=8 --rw=randwrite --bs=4k --size=4m --fsync=1 --ioengine=psync --group_reporting --time_based --runtime=10 --output-format=terse --terse-version=3 | awk -F';' '{print "iops",$49}' &
FIO=$!
sleep 3
perf stat -e context-switches,task-clock -p $PID -- sleep 5 2>&1 | grep -E "context|task-clock"
wait $FIO
umount $MNT
