# Shared helpers of the moafs scripts (sourced).

# alive PID: true while the process exists and is not a zombie (an orphaned daemon may stay a
# zombie when the container's init does not reap it).
alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# is_mounted DIR: true while DIR is a mount point in this namespace. Read from mountinfo, not
# by stat (mountpoint(1)): a FUSE mount whose daemon died answers every stat with ENOTCONN
# and would pass for "not mounted", leaving a dead mount nobody removes.
is_mounted() {
  local want
  want=$(printf '%s' "$1" | sed 's/\\/\\134/g; s/ /\\040/g; s/\t/\\011/g')
  M=$want awk '$5 == ENVIRON["M"] { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# unmount_wait MOUNTPOINT PID: unmounts and waits (up to 60 s) for the daemon to exit, so the
# image is complete and unlocked when this returns.
unmount_wait() {
  local mnt=$1 pid=${2:-}
  if is_mounted "$mnt"; then fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" || true; fi
  if [ -n "$pid" ]; then
    for _ in $(seq 1 600); do alive "$pid" || return 0; sleep 0.1; done
    echo "moafs daemon $pid did not exit" >&2
    return 1
  fi
}

# Benchmark targets on a scratch image: bench_init creates $work (in $BACKING, default /dev/shm:
# set BACKING to a directory on real storage to put the images there), $mnt, $img and
# arms an EXIT trap that tears everything down; bench_teardown unmounts the current target
# (a moafs daemon via unmount_wait, a kernel mount and its loop device) and removes the image.
bench_init() {
  work=$(mktemp -d "${BACKING:-/dev/shm}/$1.XXXXXX")
  mnt=$work/mnt; img=$work/img; mkdir -p "$mnt"
  loop=""; pid=""
  trap 'bench_teardown; rm -rf "$work"' EXIT
}

bench_teardown() {
  if is_mounted "$mnt"; then
    if [ -n "$loop" ]; then umount "$mnt"; else unmount_wait "$mnt" "$pid" || true; fi
  fi
  [ -n "$pid" ] && { for _ in $(seq 1 600); do alive "$pid" || break; sleep 0.1; done; }
  [ -n "$loop" ] && losetup -d "$loop"
  loop=""; pid=""; rm -f "$img"
}

# warm_memory: touches and frees $WARM MiB (default 3000; 0 = skip) of memory in /dev/shm just
# before a timed phase. On a VM with free page reporting (virtio-balloon feature bit 5, as on
# the machines these numbers come from) freed guest memory is handed back to the host and the
# next first touch of such a page costs a fault in the host. Which pages a timed phase's page
# cache gets is then luck: single 1 GiB reads of one build moved between 0.4 and 2.5 s. After
# warming, the pages the phase allocates first are backed, for every target alike.
warm_memory() {
  local mib=${WARM:-3000}
  [ "$mib" -gt 0 ] || return 0
  dd if=/dev/zero of=/dev/shm/moafs-warm bs=1M count="$mib" status=none
  rm -f /dev/shm/moafs-warm
}

# small_files_secs DIR N: creates N one-line files in DIR from this shell, reads them back and
# deletes them; prints the seconds it took.
small_files_secs() {
  local dir=$1 n=$2 s e i
  s=$(date +%s.%N)
  for i in $(seq "$n"); do echo x > "$dir/f$i"; done
  cat "$dir"/f* > /dev/null; rm "$dir"/f*
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}

# moafs_target SIZE [OPTS]: a fresh moafs image of SIZE at $img, mounted at $mnt with the extra
# mount options OPTS (comma-separated, may be empty); sets $pid to the daemon's.
moafs_target() {
  truncate -s "$1" "$img"; "$MOAFS" mkfs "$img" >/dev/null
  "$MOAFS" mount -o "pidfile=$work/pid${2:+,$2}" "$img" "$mnt"; pid=$(cat "$work/pid")
}

# mean_min_max: "mean min max n" of the numbers in the first column of stdin (FMT: printf
# format of one number, default %.2f).
mean_min_max() {
  awk -v f="${1:-%.2f}" '{s+=$1; if(min==""||$1<min)min=$1; if($1>max)max=$1; n++}
    END{printf f " " f " " f " %d", s/n, min, max, n}'
}

# Scratch mounts of the test scripts: mount_work_init NAME makes $work in /dev/shm with $mnt
# and $img in it and an EXIT trap that unmounts and removes everything; a daemon mounted
# with pidfile=$work/pid (then copied to $work/pid.keep) is waited for by `unmount`.
mount_work_init() {
  work=$(mktemp -d "/dev/shm/$1.XXXXXX")
  mnt=$work/mnt
  img=$work/img
  mkdir -p "$mnt"
  trap cleanup EXIT
}
unmount() {
  unmount_wait "$mnt" "$(cat "$work/pid.keep" 2>/dev/null || true)"
  rm -f "$work/pid" "$work/pid.keep"
}
cleanup() { unmount || true; rm -rf "$work"; }
