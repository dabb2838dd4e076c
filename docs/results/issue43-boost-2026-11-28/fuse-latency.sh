#!/bin/bash
# Per-opcode FUSE request latency (kernel send to reply) of one moafs bench run, from the
# kernel's fuse:fuse_request_send/_end tracepoints (Linux 6.15+; root; perf).
# usage: fuse-latency.sh TARGET TAG [more moafs bench args]   (e.g. moafs@queue_boost=off off)
# Records 3 s of the run's measured phase (7 s in), prints rate and latency by opcode.
T=$1; TAG=$2; shift 2
MOAFS=${MOAFS:-moafs}
"$MOAFS" bench --target "$T" --workload varmail --duration 12 --reps 1 --backing /dev/shm "$@" > bench-$TAG.txt 2>&1 &
B=$!
sleep 7
perf record -q -e fuse:fuse_request_send,fuse:fuse_request_end -a -o perf-$TAG.data -- sleep 3 2>/dev/null
wait $B
perf script -i perf-$TAG.data 2>/dev/null | python3 "$(dirname "$0")/fuse-latency.py" > lat-$TAG.txt
grep -E "ops/s \(" bench-$TAG.txt; cat lat-$TAG.txt
