#!/bin/bash
# Paper 002 (Song et al., KIISE 2016): how the system's state moves Filebench results.
#
# For every workload, two `moafs bench` runs on every target (targets and columns taking
# turns within each repetition; a fresh image per run):
#   scenarios:   --cache dropped,fresh,polluted            A (sync + drop right after the
#                mount), B (fresh mount), C (after four unrelated runs whose files stay)
#   background:  --cache dropped --background none,write,fsync
#                A alone, A + a job creating 100 KB files (write-back started by the job at
#                a lag of 10 % of the memory limit), A + the job with fsync after each file
# all under one memory limit (a cgroup holding the harness: the page cache of the workload's
# files counts against it; FUSE daemons stay outside). The default, 1536M, is just above
# fileserver's peak in A (1.26 GB: its file set), so A runs unhindered and C has to evict
# the pollution; MEMORY_LIMIT=3G is the page cache of the paper's 4 GB machine. Then a table per target: rate of A
# (mean ± 95 % CI half-width), and B/A, C/A, A+bg/A, A+bg-fsync/A as geometric means of the
# per-repetition ratios with 95 % t intervals (the columns of one repetition ran back to
# back, so each repetition is a pair); ▼/▲ when the interval excludes 1.
#
#   scripts/bench-paper002.sh                     (root; after cargo build --release -p moafs)
#   REPS=5 TARGETS=ext4,xfs,moafs WORKLOADS="fileserver varmail webserver webproxy" \
#     MEMORY_LIMIT=1536M SIZE=16G BACKING=/var/tmp/moafs-p002 DURATION=60 OUT=results/p002 \
#     scripts/bench-paper002.sh
#   TABLE_ONLY=1 OUT=results/p002 scripts/bench-paper002.sh    (the table again, no run)
#
# Time: each repetition of a workload is 3 + 4 (C's pollution runs) + 3 runs of DURATION s
# plus set-up (fileserver's file set is 1 GB) per target: with the defaults about
# 10 × 70 s × 5 × 4 × 3 ≈ 12 h. DURATION=20 or fewer workloads for a shorter pass.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MOAFS=${MOAFS:-$ROOT/target/release/moafs}
REPS=${REPS:-5}
TARGETS=${TARGETS:-ext4,xfs,moafs}
WORKLOADS=${WORKLOADS:-fileserver varmail webserver webproxy}
MEMORY_LIMIT=${MEMORY_LIMIT:-1536M}
SIZE=${SIZE:-16G}
BACKING=${BACKING:-/var/tmp/moafs-p002}
DURATION=${DURATION:-60}
SCALE=${SCALE:-1}
OUT=${OUT:-$ROOT/docs/results/paper002-$(date -u +%Y-%m-%d)}
mkdir -p "$OUT"

if [ -z "${TABLE_ONLY:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "bench-paper002: needs root (managed targets, drop_caches, cgroup)" >&2; exit 1; }
  mkdir -p "$BACKING"
  common=(--target "$TARGETS" --size "$SIZE" --backing "$BACKING" --reps "$REPS"
          --duration "$DURATION" --scale "$SCALE" --memory-limit "$MEMORY_LIMIT")
  for w in $WORKLOADS; do
    echo "== $w: scenarios A, B, C ($(date -u +%H:%M))"
    "$MOAFS" bench --workload "$w" "${common[@]}" --cache dropped,fresh,polluted \
      --json "$OUT/$w-scenarios.json" | tee "$OUT/$w-scenarios.log"
    echo "== $w: background none, write, fsync ($(date -u +%H:%M))"
    "$MOAFS" bench --workload "$w" "${common[@]}" --cache dropped --background none,write,fsync \
      --json "$OUT/$w-background.json" | tee "$OUT/$w-background.log"
  done
  {
    echo "command: REPS=$REPS TARGETS=$TARGETS WORKLOADS=\"$WORKLOADS\" MEMORY_LIMIT=$MEMORY_LIMIT"
    echo "  SIZE=$SIZE BACKING=$BACKING DURATION=$DURATION SCALE=$SCALE scripts/bench-paper002.sh"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "kernel: $(uname -r); memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo); cpus: $(nproc)"
  } > "$OUT/README.txt"
fi

OUT=$OUT WORKLOADS=$WORKLOADS python3 - <<'EOF'
import json, math, os

# two-sided 95 % Student t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}

def t95(df):
    keys = [k for k in sorted(T95) if k <= df]
    return T95[keys[-1]] if keys else float("nan")

def runs(path):
    """{target: {column: [rate by rep]}} from one report."""
    if not os.path.exists(path):
        return {}
    doc = json.load(open(path))
    out = {}
    for rep in doc["results"][0]["reports"]:
        name = rep["target"]
        base, _, col = name.partition(" [")
        col = col.rstrip("]") or "A"
        rates = {r["rep"]: r["outcome"]["rate"] for r in rep["runs"]}
        out.setdefault(base, {})[col] = rates
        lim = [r.get("memory_limit") for r in rep["runs"]]
        hits = [((r.get("memory") or {}).get("limit_hits")) for r in rep["runs"]]
        out[base].setdefault("_limit", lim[0])
        out[base].setdefault("_hits", {})[col] = hits
    return out

def ratio(num, den):
    """Geometric mean of per-repetition ratios and its 95 % t interval."""
    logs = [math.log(num[k] / den[k]) for k in num if k in den and num[k] > 0 and den[k] > 0]
    n = len(logs)
    if n == 0:
        return "-"
    m = sum(logs) / n
    if n < 2:
        return f"{math.exp(m):.2f}"
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    h = t95(n - 1) * sd / math.sqrt(n)
    lo, hi = math.exp(m - h), math.exp(m + h)
    mark = "▼" if hi < 1 else "▲" if lo > 1 else "≈"
    return f"{math.exp(m):.2f} ({lo:.2f}–{hi:.2f}) {mark}"

def mean_ci(xs):
    xs = list(xs)
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return f"{m:,.0f}"
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return f"{m:,.0f} ± {t95(n - 1) * sd / math.sqrt(n):,.0f}"

out = os.environ["OUT"]
print()
print("| workload | target | A ops/s | B/A | C/A | A+bg/A | A+bg-fsync/A | limit hits A / C |")
print("|---|---|---|---|---|---|---|---|")
for w in os.environ["WORKLOADS"].split():
    sc = runs(f"{out}/{w}-scenarios.json")
    bg = runs(f"{out}/{w}-background.json")
    for t in sc or bg:
        s, b = sc.get(t, {}), bg.get(t, {})
        a = s.get("A", {})
        ab = b.get("A", {})
        hits = s.get("_hits", {})
        h = lambda c: "/".join(str(x) for x in hits.get(c, []) if x is not None) or "-"
        shown = a or ab  # A of the scenario run, else of the background run
        print(f"| {w} | {t} | {mean_ci(shown.values()) if shown else '-'} | "
              f"{ratio(s.get('B', {}), a)} | {ratio(s.get('C', {}), a)} | "
              f"{ratio(b.get('A+bg', {}), ab)} | {ratio(b.get('A+bg-fsync', {}), ab)} | "
              f"{h('A')} ; {h('C')} |")
EOF
