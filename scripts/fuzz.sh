#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) for FUZZ_SECONDS each (default 20), then replays
# the kept regression inputs (fuzz/regressions/TARGET/*). A crash fails the run and leaves
# the input in fuzz/artifacts/TARGET/ (add it to fuzz/regressions/TARGET/ with the fix).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${FUZZ_SECONDS:-20}
targets=(decode image journal structure)
for t in "${targets[@]}"; do
  echo "-- fuzz $t for ${secs} s"
  mkdir -p "corpus/$t"
  log=$(mktemp)
  extra=()
  # structure: up to 8 edits of 11 bytes; longer inputs are cut (no need to grow to them)
  [ "$t" = structure ] && extra=(-max_len=88)
  # -timeout: an input running 20 s is a hang; -malloc_limit_mb: one allocation of more
  # than 1 GiB is an unbounded allocation driven by the image
  if ! cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=4096 \
      -timeout=20 -malloc_limit_mb=1024 "${extra[@]}" >"$log" 2>&1; then
    tail -40 "$log"; rm -f "$log"
    echo "fuzz target $t failed" >&2; exit 1
  fi
  grep -E '^Done' "$log" || true; rm -f "$log"
  if compgen -G "regressions/$t/*" >/dev/null; then
    cargo +nightly fuzz run "$t" regressions/"$t"/* -- -runs=0 >/dev/null 2>&1 \
      || { echo "a regression input of $t fails again" >&2; exit 1; }
  fi
done
echo "fuzz: ${#targets[@]} targets ran ${secs} s each without a crash"
echo "fuzz: ${#targets[@]} passed, 0 failed"
