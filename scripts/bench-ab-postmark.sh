#!/bin/bash
# A/B: Postmark FSL on two moafs builds: BASE (a binary of an earlier commit) vs this checkout, both as directory targets
# on images in /dev/shm, same default mount options, taking turns per repetition.
# WORKLOADS= other workloads of moafs bench (comma-separated; default postmark-fsl).
# BASE_OPTS=, NEW_OPTS= mount options for either (default: none). SIZE= the images' size (default 4G; rndrd needs 5G or more).
set -euo pipefail
NEW=${NEW:-$(cd "$(dirname "$0")/.." && pwd)/target/release/moafs}
BASE=${BASE:?set BASE to the moafs binary of the commit to compare with}
W=/dev/shm/ab; mkdir -p $W/base $W/new
cleanup(){ umount $W/base 2>/dev/null || fusermount3 -u $W/base 2>/dev/null || true; umount $W/new 2>/dev/null || fusermount3 -u $W/new 2>/dev/null || true; sleep 1; rm -rf $W; }
trap cleanup EXIT
$BASE mkfs --size ${SIZE:-4G} $W/base.img >/dev/null; $NEW mkfs --size ${SIZE:-4G} $W/new.img >/dev/null
$BASE mount ${BASE_OPTS:+-o $BASE_OPTS} $W/base.img $W/base; $NEW mount ${NEW_OPTS:+-o $NEW_OPTS} $W/new.img $W/new
$NEW bench --target $W/base,$W/new --workload ${WORKLOADS:-postmark-fsl} --reps ${REPS:-5} --json ${JSON:-/tmp/ab.json} "$@"
