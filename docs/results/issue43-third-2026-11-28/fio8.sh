#!/bin/bash
# fio's 8 jobs x 4 KiB randwrite, fsync after each, on moafs on a loop device over a 4 GiB file
# in /dev/shm (run from the project root, as root), with one instrument on the daemon:
#   fio8.sh profile   perf record -g of the daemon for 6 s (/tmp/perf43.data)
#   fio8.sh switches  perf stat: the daemon's context switches and CPU for 6 s
#   fio8.sh sites     perf record of sched:sched_switch with call graphs for 4 s (/tmp/sw43.data)
#   fio8.sh stats     the engine's counters at unmount (-o stats=/tmp/st43.json)
set -u
MODE=$1
M=${MOAFS:-target/release/moafs}; W=/dev/shm/prof43; mkdir -p $W/mnt; MNT=$W/mnt; LOOP=""
cleanup() { mountpoint -q $MNT && umount $MNT; [ -n "$LOOP" ] && losetup -d $LOOP 2>/dev/null; rm -f $W/img; }
trap cleanup EXIT
OPTS=pidfile=$W/pid; [ "$MODE" = stats ] && OPTS=$OPTS,stats=/tmp/st43.json
truncate -s 4G $W/img; LOOP=$(losetup -f --show $W/img); $M mkfs $LOOP >/dev/null; $M mount -o $OPTS $LOOP $MNT
PID=$(cat $W/pid)
fio --name=w --directory=$MNT --numjobs=8 --rw=randwrite --bs=4k --size=4m --fsync=1 --ioengine=psync --group_reporting --time_based --runtime=12 --output-format=terse --terse-version=3 | awk -F';' '{print "iops",$49}' &
FIO=$!
sleep 3
case $MODE in
  profile) perf record -g -p $PID -o /tmp/perf43.data -- sleep 6 >/dev/null 2>&1;;
  switches) perf stat -e context-switches,task-clock -p $PID -- sleep 6 2>&1 | grep -E "context|task-clock";;
  sites) perf record -e sched:sched_switch -g -p $PID -o /tmp/sw43.data -- sleep 4 >/dev/null 2>&1;;
  stats) ;;
esac
wait $FIO
sync; umount $MNT; losetup -d $LOOP; LOOP=""
