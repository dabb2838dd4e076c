#!/usr/bin/env bash
# `./run package`: the Debian package target/moafs_VERSION_ARCH.deb — the binary in
# /usr/bin, the helpers mkfs(8), fsck(8), mount(8) and umount(8) look for in /usr/sbin
# (/sbin on a merged-/usr system), the man pages, the completions of bash, zsh and fish, and
# the documentation; it depends on fuse3. Built with dpkg-deb from a staging tree that
# `moafs install-helpers` fills, so the package holds what install-helpers installs.
# Prints the path of the package.
set -euo pipefail
cd "$(dirname "$0")/.."
MOAFS=${MOAFS:-$PWD/target/release/moafs}
[ -x "$MOAFS" ] || cargo build --release --quiet -p moafs
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
stage=target/deb/moafs_${version}_$arch
deb=target/moafs_${version}_$arch.deb
rm -rf "$stage"
mkdir -p "$stage/DEBIAN" "$stage/usr/bin" "$stage/usr/share/doc/moafs"
# the binary, without its debug information (the build keeps it for perf)
strip --strip-debug -o "$stage/usr/bin/moafs" "$MOAFS"
chmod 755 "$stage/usr/bin/moafs"
"$MOAFS" install-helpers --prefix "$stage/usr" --mount-helper-dir "$stage/usr/sbin" \
  --exe /usr/bin/moafs >/dev/null
# Debian keeps man pages compressed, reproducibly (no name or time in the gzip header)
gzip -9n "$stage"/usr/share/man/man8/*.8
cp README.md "$stage/usr/share/doc/moafs/"
mkdir -p "$stage/usr/share/doc/moafs/docs" && cp docs/*.md "$stage/usr/share/doc/moafs/docs/"
cat > "$stage/usr/share/doc/moafs/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: moafs

Files: *
License: MIT or Apache-2.0
EOF
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<EOF
Package: moafs
Version: $version
Architecture: $arch
Maintainer: the moafs developers <moafs@localhost>
Installed-Size: $size
Depends: fuse3, libc6
Section: admin
Priority: optional
Homepage: https://github.com/moafs/moafs
Description: file system in user space for small files and small updates
 moafs is a journaled, checksummed file system served through FUSE: co-writing
 of a directory's small files, request-size-aware readahead, a byte log (and an
 optional NVM tier) for fsyncs of small overwrites, ext4's three journaling
 modes. mkfs -t moafs, fsck -t moafs, mount -t moafs and /etc/fstab lines work
 as for any file system; moafs bench compares it with ext4, XFS, btrfs and
 fuse2fs.
EOF
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
