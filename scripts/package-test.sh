#!/usr/bin/env bash
# The package on a fresh Debian bookworm (issue 46): builds the .deb (scripts/package.sh),
# makes a minimal bookworm root with debootstrap, installs the package there with apt (which
# brings fuse3), and as a user of that system runs mkfs -t moafs, fsck -t moafs,
# mount -t moafs, umount, an /etc/fstab line mounted by its mount point, and the man pages.
# Run by `./run test`.
#
# Everything runs in a private mount namespace: the root's /proc, /sys and /dev, and the
# moafs mounts inside it, go with it. The debootstrapped base is kept in
# /var/cache/moafs-package-test (a week; MOAFS_BASE_MAX_DAYS) and each run unpacks a fresh
# copy; without debootstrap or the Debian mirror the test is skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CACHE=${MOAFS_PACKAGE_CACHE:-/var/cache/moafs-package-test}
MAX_DAYS=${MOAFS_BASE_MAX_DAYS:-7}

skip() { echo "package test: skipped: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || skip "debootstrap is missing (apt-get install debootstrap)"
command -v unshare >/dev/null || skip "unshare is missing (util-linux)"
# a private mount namespace needs / to be a mount point: inside a chroot it is not
unshare -m --propagation private true 2>/dev/null ||
  skip "no private mount namespace here (/ is not a mount point: a chroot?)"

deb=$(scripts/package.sh)
base=$CACHE/$SUITE-minbase.tar
mkdir -p "$CACHE"
if [ -z "$(find "$base" -mtime "-$MAX_DAYS" 2>/dev/null)" ]; then
  echo "package test: debootstrap $SUITE (minbase) from $MIRROR"
  tmp=$(mktemp -d "$CACHE/root.XXXXXX")
  if ! debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" > "$CACHE/debootstrap.log" 2>&1; then
    rm -rf "$tmp"
    skip "debootstrap $SUITE from $MIRROR failed (no mirror here?): $CACHE/debootstrap.log"
  fi
  tar -C "$tmp" -cf "$base.new" . && mv "$base.new" "$base"
  rm -rf "$tmp"
fi

root=$(mktemp -d /var/tmp/moafs-package-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
tar -C "$root" -xf "$base"
cp "$deb" "$root/tmp/moafs.deb"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# a machine that reaches the mirror through a TLS-inspecting proxy trusts its CA; so does the root
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi

# What a user of the fresh system does, as root there.
cat > "$root/tmp/inside.sh" <<'EOF'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin
step() { echo "package test: $*"; }
fail() { echo "package test: FAILED: $*" >&2; exit 1; }
mounted() { grep -q ' /mnt/m ' /proc/mounts; }
step "apt-get install ./moafs.deb"
# no mirror (a cached root on a machine offline now): a skip, said by the exit status
apt-get -o APT::Sandbox::User=root update -qq || exit 77
apt-get -o APT::Sandbox::User=root install -y -qq --no-install-recommends /tmp/moafs.deb man-db >/dev/null
dpkg -s fuse3 | grep -q '^Status: install ok installed' || fail "fuse3 did not come with the package"
step "mkfs -t moafs, fsck -t moafs"
truncate -s 256M /srv/disk.img
mkfs -t moafs /srv/disk.img | grep -q 'moafs created'
fsck -t moafs /srv/disk.img
step "mount -t moafs, write, umount"
mkdir -p /mnt/m
mount -t moafs /srv/disk.img /mnt/m
grep ' /mnt/m ' /proc/mounts | grep -q moafs
echo hello > /mnt/m/hello
umount /mnt/m
if mounted; then fail "still mounted after umount"; fi
fsck -t moafs -n /srv/disk.img
step "an /etc/fstab line"
echo '/srv/disk.img /mnt/m moafs defaults,noatime 0 2' >> /etc/fstab
mount /mnt/m
[ "$(cat /mnt/m/hello)" = hello ]
grep ' /mnt/m ' /proc/mounts | grep -q noatime
umount /mnt/m
fsck -t moafs -n /srv/disk.img
step "man pages and completion"
for page in moafs mkfs.moafs fsck.moafs mount.moafs umount.moafs; do
  text=$(MANPAGER=cat MANWIDTH=200 man "$page" 2>&1) || fail "man $page: $text"
  grep -qi "$page" <<<"$text" || fail "man $page does not name itself"
done
text=$(MANPAGER=cat MANWIDTH=200 man mount.moafs)
grep -q 'journal=writeback|ordered|data' <<<"$text" || fail "man mount.moafs lacks the mount options"
[ -f /usr/share/bash-completion/completions/moafs ] || fail "no bash completion"
step "apt-get remove"
apt-get remove -y -qq moafs >/dev/null
if [ -e /usr/sbin/mount.moafs ] || [ -e /usr/bin/moafs ]; then fail "apt-get remove left files"; fi
EOF

# a private mount and pid namespace: the root's mounts go with it, and so does every process
# left inside (a daemon of a mount a failed step did not take down)
rc=0
unshare -m -p -f --kill-child --propagation private bash -c '
  set -e
  r=$1
  mount -t proc proc "$r/proc"
  mount --rbind /sys "$r/sys"
  mount --rbind /dev "$r/dev"
  chroot "$r" /bin/bash /tmp/inside.sh
' _ "$root" || rc=$?
[ $rc -eq 77 ] && skip "apt-get update fails in the root (no Debian mirror here?)"
[ $rc -eq 0 ] || exit $rc
echo "package test: $deb installs on a fresh $SUITE; mkfs/fsck/mount -t moafs, fstab, umount, man pages passed"
