# Shared helpers of the moafs scripts (sourced).

# alive PID: true while the process exists and is not a zombie (an orphaned daemon may stay a
# zombie when the container's init does not reap it).
alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# unmount_wait MOUNTPOINT PID: unmounts and waits (up to 60 s) for the daemon to exit, so the
# image is complete and unlocked when this returns.
unmount_wait() {
  local mnt=$1 pid=${2:-}
  if mountpoint -q "$mnt"; then fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" || true; fi
  if [ -n "$pid" ]; then
    for _ in $(seq 1 600); do alive "$pid" || return 0; sleep 0.1; done
    echo "moafs daemon $pid did not exit" >&2
    return 1
  fi
}
