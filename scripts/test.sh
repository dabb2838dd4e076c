#!/usr/bin/env bash
# Every test: formatting, lints, unit + property + crash + real-FUSE-mount tests, pjdfstest, fsx,
# and the fuzz targets for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check"; cargo fmt --all -- --check
echo "== cargo clippy"; cargo clippy --workspace --all-targets --release --quiet -- -D warnings
echo "== source shape (README, no import circles among sibling files, files under 900 lines before tests)"
python3 scripts/shape.py
echo "== mount helpers (mount(8) and umount(8) run /sbin/mount.fuse{,blk}.moafs, umount.fuse{,blk}.moafs)"
target/release/moafs install-helpers
echo "== cargo test (unit, property, real FUSE mounts)"
cargo test --workspace --release 2>&1 | tee /tmp/moafs-cargo-test.log
echo "== without root: mkfs, mount through fusermount3, write, allow_other, umount, fsck as a user"
scripts/nonroot.sh
echo "== the Debian package: built, installed on a fresh bookworm root, mkfs/mount/fsck -t moafs, fstab, man"
scripts/package-test.sh
echo "== pjdfstest and fsx on a real mount"
scripts/posix-tests.sh
echo "== xfstests: the CI subset on real mounts (./run xfstests runs the quick group)"
scripts/xfstests.sh --ci > /tmp/moafs-xfstests.log 2>&1 || { tail -n 60 /tmp/moafs-xfstests.log; exit 1; }
grep -E '^(xfstests|failed)' /tmp/moafs-xfstests.log
echo "== fsstress: 8 processes on real mounts, /dev/fuse and io_uring (NOPS=100000 for the long run)"
scripts/fsstress.sh
echo "== fuzz targets (bounded time)"
scripts/fuzz.sh
