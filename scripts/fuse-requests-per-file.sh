#!/usr/bin/env bash
# FUSE requests per file for four shell steps (create+write, append, read, delete), counted
# at the kernel's fuse_request_send tracepoint with perf stat (root; Linux 6.15+; perf).
# Usage: scripts/fuse-requests-per-file.sh [N] [MOUNT-OPTIONS]
#   makes a fresh moafs image in /dev/shm, mounts it with the options, runs the steps on N
#   files (default 100), prints requests per file by opcode, and takes everything down.
set -euo pipefail
n=${1:-100}
opts=${2:-}
moafs=${MOAFS:-$(dirname "$0")/../target/release/moafs}
work=$(mktemp -d /dev/shm/fuse-requests.XXXXXX)
mnt=$work/mnt
cleanup() {
  mountpoint -q "$mnt" && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$mnt"
truncate -s 256M "$work/img"
"$moafs" mkfs "$work/img" >/dev/null
"$moafs" mount ${opts:+-o "$opts"} "$work/img" "$mnt"
[ -d /sys/kernel/tracing/events/fuse ] || mount -t tracefs nodev /sys/kernel/tracing
conn=$(stat -c %d "$mnt")
names=(LOOKUP GETATTR SETATTR MKNOD UNLINK READ WRITE GETXATTR FSYNC)
codes=(1 3 4 8 10 15 16 22 20)
events=()
for c in "${codes[@]}"; do
  events+=(-e fuse:fuse_request_send --filter "opcode == $c && connection == $conn")
done
count() { # step name, command
  local what=$1; shift
  perf stat -a -x, "${events[@]}" -- "$@" 2>&1 >/dev/null |
    awk -F, -v n="$n" -v what="$what" -v names="${names[*]}" '
      BEGIN { split(names, name, " ") }
      /fuse_request_send/ { i++; if ($1 > 0) line = line sprintf(" %s %.2f", name[i], $1 / n) }
      END { printf "%-18s%s\n", what, line }'
}
count "create and write" sh -c "for i in \$(seq $n); do echo x > $mnt/f\$i; done"
count "append" sh -c "for i in \$(seq $n); do echo y >> $mnt/f\$i; done"
count "read" sh -c "for i in \$(seq $n); do cat $mnt/f\$i > /dev/null; done"
count "delete" sh -c "for i in \$(seq $n); do rm $mnt/f\$i; done"
