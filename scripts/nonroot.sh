#!/usr/bin/env bash
# moafs without root, as with any FUSE file system (issue 46): an ordinary user makes an
# image, mounts it (through the setuid fusermount3), writes in its root directory (which mkfs
# made theirs), is refused allow_other unless /etc/fuse.conf has user_allow_other, unmounts,
# fscks and mounts again. Run by `./run test`.
#
# As root the cycle runs as the user `tests` (./run test makes it) in a private mount
# namespace, where /dev/fuse is opened to users as Debian's udev rule does (a machine may keep
# it root's only) and /etc/fuse.conf is one of the script's: the machine itself is not
# changed. Run as a user, it uses the machine as it is, and skips with the reason where
# /dev/fuse is root's only.
set -euo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/.."
MOAFS=${MOAFS:-$PWD/target/release/moafs}

skip() { echo "nonroot: skipped: $*"; exit 0; }
fail() { echo "nonroot: FAILED: $*" >&2; exit 1; }

# The cycle, as the user: WORK is a directory of theirs; CONF says whether fuse.conf has
# user_allow_other (yes/no/unknown).
cycle() {
  local work=$1 conf=$2 img=$1/img mnt=$1/m out
  mkdir -p "$mnt"
  trap 'grep -qs " $mnt " /proc/mounts && fusermount3 -u -z "$mnt"' EXIT
  out=$("$MOAFS" mkfs --size 64M "$img") || fail "mkfs as $(id -un): $out"
  grep -q "root owner:  $(id -u):$(id -g)" <<<"$out" || fail "mkfs did not give the root directory to the user: $out"
  "$MOAFS" mount "$img" "$mnt" 2>/dev/null || fail "mount as $(id -un)"
  [ "$(stat -c %u:%g "$mnt")" = "$(id -u):$(id -g)" ] || fail "the root directory is $(stat -c %u:%g "$mnt")"
  echo hi > "$mnt/x" || fail "cannot write in the root directory"
  mkdir "$mnt/d" && cp "$mnt/x" "$mnt/d/y"
  [ "$(cat "$mnt/d/y")" = hi ] || fail "read back"
  "$MOAFS" umount "$mnt" || fail "umount as $(id -un)"
  ! grep -qs " $mnt " /proc/mounts || fail "still mounted after umount"
  "$MOAFS" fsck -n "$img" >/dev/null || fail "fsck -n after umount"
  # allow_other: only where /etc/fuse.conf allows it, as fusermount3 says
  if "$MOAFS" mount -o allow_other "$img" "$mnt" 2>"$work/err"; then
    [ "$conf" != no ] || fail "allow_other mounted without user_allow_other"
    [ "$(cat "$mnt/d/y")" = hi ] || fail "read back after a new mount"
    "$MOAFS" umount "$mnt"
  else
    [ "$conf" != yes ] || fail "allow_other refused with user_allow_other: $(cat "$work/err")"
    grep -q user_allow_other "$work/err" || fail "allow_other refused without saying why: $(cat "$work/err")"
    ! grep -qs " $mnt " /proc/mounts || fail "a refused mount left a mount"
    "$MOAFS" mount "$img" "$mnt" 2>/dev/null
    [ "$(cat "$mnt/d/y")" = hi ] || fail "read back after a new mount"
    "$MOAFS" umount "$mnt"
  fi
  "$MOAFS" fsck -n "$img" >/dev/null || fail "fsck -n at the end"
  trap - EXIT
}

case "${1:-}" in
  --cycle) cycle "$2" "$3"; exit ;;
esac

[ -x "$MOAFS" ] || fail "$MOAFS not built"
command -v fusermount3 >/dev/null || skip "fusermount3 is missing (apt-get install fuse3)"
if [ "$(id -u)" -ne 0 ]; then
  [ -r /dev/fuse ] && [ -w /dev/fuse ] || skip "/dev/fuse is root's only on this machine ($(stat -c %A /dev/fuse))"
  conf=no; grep -qs '^user_allow_other' /etc/fuse.conf && conf=yes
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  ( cycle "$work" "$conf" )
  echo "nonroot: the whole cycle passed as $(id -un)"
  exit 0
fi

user=tests
getent passwd "$user" >/dev/null || skip "no user $user to run as (./run test makes it)"
command -v unshare >/dev/null || skip "unshare is missing (util-linux)"
# a private mount namespace needs / to be a mount point: inside a chroot it is not
unshare -m --propagation private true 2>/dev/null ||
  skip "no private mount namespace here (/ is not a mount point: a chroot?)"
work=$(mktemp -d /tmp/moafs-nonroot.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
# a copy of the binary the user can reach (a checkout under /root, or a CI clone in a
# private directory, is not)
cp "$MOAFS" "$work/moafs"; chmod 755 "$work/moafs"; MOAFS=$work/moafs
cp "$self" "$work/nonroot.sh"; chmod 755 "$work/nonroot.sh"
for conf in no yes; do
  mkdir -m 700 "$work/$conf"; chown "$user:" "$work/$conf"
  if [ "$conf" = yes ]; then echo user_allow_other > "$work/fuse.conf"; else : > "$work/fuse.conf"; fi
  chmod 644 "$work/fuse.conf"
  # a private mount namespace: the user's mounts, /dev/fuse opened to users and this
  # fuse.conf are seen only there, and go with it
  unshare -m --propagation private bash -c '
    set -e
    if [ "$(stat -c %a /dev/fuse)" != 666 ]; then
      # the node on a tmpfs of its own: /tmp may be mounted nodev
      mkdir -p "$1/devnode"
      mount -t tmpfs -o mode=755 moafs-nonroot "$1/devnode"
      mknod -m 666 "$1/devnode/fuse" c 10 229
      mount --bind "$1/devnode/fuse" /dev/fuse
    fi
    mount --bind "$1/fuse.conf" /etc/fuse.conf
    exec runuser -u "$2" -- env MOAFS="$3" bash "$4" --cycle "$1/$5" "$5"
  ' _ "$work" "$user" "$MOAFS" "$work/nonroot.sh" "$conf"
done
echo "nonroot: the whole cycle passed as $user (allow_other refused without user_allow_other, served with it)"
