#!/usr/bin/env bash
# fsstress (xfstests' ltp/fsstress, built by scripts/xfstests.sh) with NPROC processes of NOPS
# operations each on a real moafs mount, once over /dev/fuse and once over io_uring (where
# the kernel offers it), each with a time limit: fsstress must exit 0, the mount must still
# answer, and after unmount `moafs fsck -n` must be clean. Cleans up mounts even on failure.
#   NPROC=8 NOPS=100000 SEED=1 scripts/fsstress.sh     # the long run (docs/TESTING.md)
set -euo pipefail
cd "$(dirname "$0")/.."
MOAFS=${MOAFS:-$PWD/target/release/moafs}
FSSTRESS=${FSSTRESS:-$PWD/target/xfstests/ltp/fsstress}
NPROC=${NPROC:-8}
NOPS=${NOPS:-3000}
SEED=${SEED:-1}
LIMIT=${LIMIT:-1800}
if [ ! -x "$FSSTRESS" ]; then
  echo "fsstress not found at $FSSTRESS: build xfstests first (scripts/xfstests.sh builds it)" >&2
  exit 1
fi
. scripts/lib.sh
mount_work_init moafs-fsstress

for uring in off auto; do
  "$MOAFS" mkfs --size 2G "$img" >/dev/null
  "$MOAFS" mount -o "uring=$uring,pidfile=$work/pid" "$img" "$mnt"
  cp "$work/pid" "$work/pid.keep"
  echo "-- fsstress: $NPROC processes x $NOPS operations, seed $SEED, uring=$uring"
  start=$(date +%s)
  set +e
  timeout "$LIMIT" "$FSSTRESS" -d "$mnt/stress" -p "$NPROC" -n "$NOPS" -s "$SEED" \
    > "$work/fsstress.log" 2>&1
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    tail -n 30 "$work/fsstress.log"
    [ $rc -eq 124 ] && echo "fsstress did not finish in $LIMIT s (uring=$uring)" >&2
    echo "fsstress failed (exit $rc, uring=$uring)" >&2
    exit 1
  fi
  files=$(find "$mnt/stress" | wc -l)
  echo "   done in $(( $(date +%s) - start )) s; $files names left; the mount answers"
  unmount
  echo "-- moafs fsck -n after fsstress (uring=$uring)"
  "$MOAFS" fsck -n "$img"
  rm -f "$img"
done
echo "fsstress: 2 passed, 0 failed"
