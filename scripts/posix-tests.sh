#!/usr/bin/env bash
# pjdfstest (0 failed required) and fsx (50,000 operations) on a real moafs FUSE mount,
# each followed by unmount and a clean `moafs fsck`. Cleans up mounts even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
MOAFS=${MOAFS:-$PWD/target/release/moafs}
FSX_OPS=${FSX_OPS:-50000}
. scripts/lib.sh
mount_work_init moafs-posix
chmod 0755 "$work"  # pjdfstest switches to unprivileged users who must reach the mount
[ -n "${KEEP_LOGS:-}" ] && trap 'cp "$work"/*.log "$KEEP_LOGS"/ 2>/dev/null; cleanup' EXIT

mount_it() { "$MOAFS" mount -o "allow_other,default_permissions,pidfile=$work/pid" "$img" "$mnt"; cp "$work/pid" "$work/pid.keep"; }
check_fsck() {
  echo "-- moafs fsck after $1"
  "$MOAFS" fsck -n "$img"
}

"$MOAFS" mkfs --size 1G "$img" >/dev/null

echo "-- pjdfstest"
mount_it
chmod 0777 "$mnt"
set +e
(cd "$mnt" && pjdfstest -c "$OLDPWD/tests/pjdfstest.toml" -p "$mnt") > "$work/pjdfstest.log" 2>&1
pjd_rc=$?
set -e
grep "^Summary:" "$work/pjdfstest.log" || tail -n 20 "$work/pjdfstest.log"
unmount
check_fsck pjdfstest
if [ $pjd_rc -ne 0 ] || ! grep -q '^Summary: 0 failed' "$work/pjdfstest.log"; then
  echo "pjdfstest failures:"; grep -E 'FAILED|failed' "$work/pjdfstest.log" | head -50
  exit 1
fi

echo "-- fsx: $FSX_OPS operations"
mount_it
fsx -f tests/fsx.toml -N "$FSX_OPS" -S 42 -P "$work" "$mnt/fsx.data" > "$work/fsx.log" 2>&1 || { tail -n 40 "$work/fsx.log"; exit 1; }
tail -n 2 "$work/fsx.log"
unmount
check_fsck fsx
echo "posix tests: 2 passed, 0 failed"
