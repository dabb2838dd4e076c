#!/bin/bash
M=/var/tmp/moafs-wp.bin
cd /tmp/wp
$M bench --workload postmark-quick,varmail,fsync-4k-t1 --target ext4,moafs --backing /var/tmp/moafs-wp --size 4G --reps 5 --duration 10 --json disk.json > disk.txt 2>&1
echo "disk rc=$?" >> status
$M bench --workload postmark-quick,varmail,fsync-4k-t1 --target memfs,moafs,ext4 --backing /dev/shm --size 4G --reps 5 --duration 10 --json shm.json > shm.txt 2>&1
echo "shm rc=$?" >> status
