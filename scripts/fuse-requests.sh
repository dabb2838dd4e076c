#!/bin/bash
# FUSE requests per application operation: runs one `moafs bench` workload on a managed moafs
# (10 s Filebench phase) and counts the kernel's fuse:fuse_request_send events for 3 s of it,
# by opcode. Root; needs perf. Divide by (the run's ops/s x 3) for requests per operation.
#
#   scripts/fuse-requests.sh varmail
set -euo pipefail
W=${1:?workload}
MOAFS=${MOAFS:-$(cd "$(dirname "$0")/.." && pwd)/target/release/moafs}
OUT=$(mktemp -d /tmp/fuse-requests.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
"$MOAFS" bench --target moafs --workload "$W" --reps 1 --duration 10 > "$OUT/bench.log" 2>&1 &
bench=$!
sleep 5
perf record -e fuse:fuse_request_send -a -o "$OUT/perf.data" -- sleep 3 >/dev/null 2>&1
wait "$bench"
grep -E "^moafs:" "$OUT/bench.log"
perf script -i "$OUT/perf.data" 2>/dev/null | grep -o "(FUSE_[A-Z_]*)" | sort | uniq -c | sort -rn
