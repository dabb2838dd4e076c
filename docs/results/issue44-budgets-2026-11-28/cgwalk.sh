#!/bin/bash
# N files (half empty, half 4 KiB) in 100 directories made through a daemon in a memory cgroup
# of LIMIT (v1 or v2, made and removed here), then a remount in the same cgroup and a `find`
# that stats every file; says whether the daemon was killed, how many files `find` saw, and
# the daemon's peak RSS. usage (project root, root): cgwalk.sh N LIMIT   e.g. 1000000 1G
set -u
N=$1; LIMIT=$2; M=${MOAFS:-$PWD/target/release/moafs}; W=/var/tmp/cgwalk44
mkdir -p $W/mnt; MNT=$W/mnt
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control; CG=/sys/fs/cgroup/moafs-cgwalk
    mkdir -p $CG; echo $LIMIT > $CG/memory.max; PEAK=memory.peak
else
    CG=/sys/fs/cgroup/memory/moafs-cgwalk; mkdir -p $CG
    echo $LIMIT > $CG/memory.limit_in_bytes; PEAK=memory.max_usage_in_bytes
fi
cleanup() { mountpoint -q $MNT && umount $MNT; sleep 1; rmdir $CG; rm -f $W/img $W/pid; }
trap cleanup EXIT
truncate -s ${SIZE:-8G} $W/img; $M mkfs -i 4096 $W/img >/dev/null
mount_in_cg() {
    sh -c "echo \$\$ > $CG/cgroup.procs && exec $M mount -o pidfile=$W/pid${1:+,$1} $W/img $MNT" \
        || { echo "mount failed"; exit 1; }
    PID=$(cat $W/pid)
}
alive() { kill -0 $PID 2>/dev/null && echo "daemon alive" || echo "DAEMON GONE"; }
mount_in_cg ""
python3 - $MNT $N <<'PY'
import os, sys, time
mnt, n = sys.argv[1], int(sys.argv[2])
data = b'x' * 4096
t = time.time()
for d in range(100): os.mkdir(f"{mnt}/d{d}")
for i in range(n):
    with open(f"{mnt}/d{i % 100}/f{i}", "wb") as f:
        if i % 2: f.write(data)
print(f"created {n} files in {time.time() - t:.0f} s")
PY
echo "create: python rc $?"; alive; grep VmHWM /proc/$PID/status
umount $MNT; sleep 1
echo "cgroup peak during create: $(cat $CG/$PEAK)"
[ -f $CG/memory.oom_control ] && grep oom_kill $CG/memory.oom_control
[ -f $CG/memory.events ] && grep oom_kill $CG/memory.events
echo 3 > /proc/sys/vm/drop_caches
mount_in_cg "${STATS:+stats=$STATS}"
echo "files found: $(find $MNT -type f -printf '%s\n' | wc -l)"
alive; grep -E "VmHWM|VmRSS" /proc/$PID/status
[ -f $CG/memory.oom_control ] && grep oom_kill $CG/memory.oom_control
[ -f $CG/memory.events ] && grep oom_kill $CG/memory.events
umount $MNT
$M fsck $W/img >/dev/null && echo "fsck clean" || echo "FSCK FAILED"
