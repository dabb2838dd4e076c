#!/bin/bash
# Runs a whole `moafs bench` inside one memory cgroup of LIMIT (v1 or v2, made and removed
# here): the workload, the kernel's page cache it fills and every moafs daemon the bench
# mounts are all charged to it, as paper 002 limits a benchmark's memory; then prints the
# cgroup's peak and whether anything in it was OOM-killed.
# usage (project root, root): cgbench.sh LIMIT moafs-bench-args...
#   e.g. cgbench.sh 1536M --target ext4,moafs --workload fileserver --backing /var/tmp/qb
set -u
LIMIT=$1; shift; M=${MOAFS:-$PWD/target/release/moafs}
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control; CG=/sys/fs/cgroup/moafs-cgbench
    mkdir -p $CG; echo $LIMIT > $CG/memory.max; PEAK=memory.peak; EV=memory.events
else
    CG=/sys/fs/cgroup/memory/moafs-cgbench; mkdir -p $CG
    echo $LIMIT > $CG/memory.limit_in_bytes; PEAK=memory.max_usage_in_bytes; EV=memory.oom_control
fi
trap 'sleep 1; rmdir $CG' EXIT
sh -c "echo \$\$ > $CG/cgroup.procs && exec $M bench $*"
echo "bench rc $?; cgroup $CG limit $LIMIT peak $(cat $CG/$PEAK)"
grep oom_kill $CG/$EV
