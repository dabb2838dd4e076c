#!/usr/bin/env bash
# The evidence run (issue 46): every row of docs/PAPERS.md (papers 000-004, paper 004's
# journaling table included) and README's headline — Filebench's four personalities,
# PostMark, SQLite (WAL and DELETE), fio's 8 fsync writers and a kernel-tree untar on ext4,
# XFS, btrfs, fuse2fs, the FUSE ceiling (memfs) and moafs, images on /dev/shm and on this
# machine's disk — made by one command at one commit under one run id. Every result file
# carries that run id and its environment (MOAFS_RUN_ID); SUMMARY.md has the tables
# PAPERS.md and README quote, the charts are beside it.
#
#   scripts/evidence.sh                  # the whole run: hours; nothing else may run meanwhile
#   EVIDENCE=smoke scripts/evidence.sh   # every step at a tiny size, into target/: checks the
#                                        # pipeline in minutes, its numbers mean nothing
#   REPS=5 DURATION=10 DISK=/var/tmp/moafs-evidence STEPS="models headline-shm …"
#   RUN_ID=… OUT=docs/results/evidence-… scripts/evidence.sh   # go on with a run cut short
#
# The whole run takes about two and a half hours on this project's 2-core machines (it
# may take more than one session: it goes on where it stopped, below): start it in a worktree of the commit to
# measure (git worktree add), so that work on main goes on.
#
# Root (loop devices, mounts, memory cgroups). Needs a clean tree for the full run (the
# commit must name the code measured); EVIDENCE_DIRTY=1 overrides and the run id says so.
set -euo pipefail
self=$(readlink -f "$0")
root=${EVIDENCE_ROOT:-$(cd "$(dirname "$self")/.." && pwd)}
cd "$root"
# bash reads a script as it runs: run a copy, so that an edit of this file during the hours
# of a run cannot change what the rest of it does
if [ -z "${EVIDENCE_SCRIPT_COPY:-}" ]; then
  copy=$(mktemp /tmp/moafs-evidence.XXXXXX.sh)
  cp "$self" "$copy"
  EVIDENCE_ROOT=$root EVIDENCE_SCRIPT_COPY=$copy exec bash "$copy" "$@"
fi
trap 'rm -f "$EVIDENCE_SCRIPT_COPY"' EXIT
MOAFS=${MOAFS:-$PWD/target/release/moafs}
MODE=${EVIDENCE:-full}
DISK=${DISK:-/var/tmp/moafs-evidence}
[ "$(id -u)" -eq 0 ] || { echo "evidence.sh needs root (loop devices, mounts, cgroups)" >&2; exit 2; }
# the binary of this commit (a build left from another would be measured under its name)
cargo build --release --quiet
commit=$(git rev-parse --short=7 HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  if [ "$MODE" = full ] && [ "${EVIDENCE_DIRTY:-0}" != 1 ]; then
    echo "evidence.sh: the tree has uncommitted changes; commit them (the run names its commit) or set EVIDENCE_DIRTY=1" >&2
    exit 2
  fi
  commit=$commit-dirty
fi

if [ "$MODE" = smoke ]; then
  REPS=${REPS:-2}; DURATION=${DURATION:-2}; SCALE=${SCALE:-0.02}; SIZE=${SIZE:-2G}
  P002_SIZE=${P002_SIZE:-2G}; P002_MEM=${P002_MEM:-512M}
  MODEL_ARGS=(--scale 0.05); COWRITE_ARGS=(--size 512M --utilisation 0 --scale 0.05)
  RUN_ID=${RUN_ID:-$(date -u +%Y%m%dT%H%M%S)-$commit-smoke}
  OUT=${OUT:-target/evidence-smoke/$RUN_ID}
else
  REPS=${REPS:-5}; DURATION=${DURATION:-10}; SCALE=${SCALE:-1}; SIZE=${SIZE:-4G}
  P002_SIZE=${P002_SIZE:-16G}; P002_MEM=${P002_MEM:-1536M}
  MODEL_ARGS=(); COWRITE_ARGS=(--utilisation 0,30)
  RUN_ID=${RUN_ID:-$(date -u +%Y%m%dT%H%M%S)-$commit-evidence}
  OUT=${OUT:-docs/results/evidence-$RUN_ID}
fi
STEPS=${STEPS:-"models headline-shm headline-disk paper002 paper004"}
# the untar workload's tree (Debian's linux-source), for the headline steps
if [[ " $STEPS " == *" headline-"* ]] && ! compgen -G "/usr/src/linux-source-*.tar.xz" >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-source >/dev/null
fi
# going on with a run: only at the commit it began at
if [ -e "$OUT/RUN.txt" ] && [[ "$RUN_ID" != *"-$commit-"* ]]; then
  echo "evidence.sh: $OUT is run $RUN_ID, not of commit $commit: check out its commit to go on with it" >&2
  exit 2
fi
export MOAFS_RUN_ID=$RUN_ID
mkdir -p "$OUT" "$DISK"
# a copy of the binary: a build during the run must not change what is measured
cp "$MOAFS" "$DISK/moafs.bin"; MOAFS=$DISK/moafs.bin
trap 'rm -f "$DISK/moafs.bin" "$EVIDENCE_SCRIPT_COPY"; rmdir "$DISK" 2>/dev/null || true' EXIT
log() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$OUT/progress.txt"; }
[ -e "$OUT/RUN.txt" ] && echo "--- resumed $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$OUT/RUN.txt"
{
  echo "run id:  $RUN_ID"
  echo "mode:    $MODE (reps $REPS, Filebench $DURATION s, scale $SCALE, images $SIZE)"
  echo "steps:   $STEPS"
  echo "command: EVIDENCE=$MODE REPS=$REPS DURATION=$DURATION SCALE=$SCALE SIZE=$SIZE DISK=$DISK scripts/evidence.sh"
} >> "$OUT/RUN.txt"
cp "$EVIDENCE_SCRIPT_COPY" "$OUT/evidence.sh"

# blockdev readahead of the loop devices: the harness sets 128 KiB on every managed target
bench() { "$MOAFS" bench --watch-ms 300 "$@"; }
targets=ext4,xfs,btrfs,fuse2fs,memfs,moafs
# what each step leaves; a step whose files are there is not run again, so a run cut short
# goes on where it stopped (the same RUN_ID and OUT, at the same commit)
made_by() {
  case $1 in
    models) echo "p001-readahead.json p003-bytelog.json p000-cowrite.json" ;;
    paper002) echo "p002-fileserver-scenarios.json p002-varmail-background.json" ;;
    paper004) echo "p004-journal.json" ;;
    *) echo "$1.json $1.svg" ;;
  esac
}
for step in $STEPS; do
  done_already=1
  for f in $(made_by "$step"); do [ -s "$OUT/$f" ] || done_already=0; done
  if [ $done_already = 1 ]; then log "$step: already made, kept"; continue; fi
  case $step in
    models)
      log "paper 001: readahead on the model disk and SSD"
      "$MOAFS" experiment readahead "${MODEL_ARGS[@]}" --json "$OUT/p001-readahead.json" > "$OUT/p001-readahead.txt" 2>&1
      log "paper 003: two-level logging on the model flash card"
      "$MOAFS" experiment bytelog "${MODEL_ARGS[@]}" --json "$OUT/p003-bytelog.json" > "$OUT/p003-bytelog.txt" 2>&1
      log "paper 000: co-writing on the model disk"
      "$MOAFS" experiment cowrite "${COWRITE_ARGS[@]}" --tests seq-write,rand-write,dir-read,large-write,large-read,postmark-rfsl \
        --json "$OUT/p000-cowrite.json" > "$OUT/p000-cowrite.txt" 2>&1
      ;;
    headline-shm|headline-disk)
      if [ "$step" = headline-shm ]; then backing=/dev/shm; where=DRAM; else backing=$DISK; where=disk; fi
      log "headline on $where ($backing): $targets"
      bench --preset headline --target "$targets" --backing "$backing" --size "$SIZE" \
        --reps "$REPS" --duration "$DURATION" --scale "$SCALE" \
        --json "$OUT/$step.json" --html "$OUT/$step.html" > "$OUT/$step.txt" 2>&1
      "$MOAFS" bench --from "$OUT/$step.json" --chart "$OUT/$step.svg" \
        --title "On $where: each file system's rate as a multiple of ext4's (run $RUN_ID)" >/dev/null
      ;;
    paper002)
      log "paper 002: fileserver under cache scenarios A/B/C on the disk"
      bench --workload fileserver --target ext4,xfs,moafs --size "$P002_SIZE" --backing "$DISK" \
        --reps "$REPS" --duration "$DURATION" --scale "$SCALE" --memory-limit "$P002_MEM" \
        --cache dropped,fresh,polluted --json "$OUT/p002-fileserver-scenarios.json" \
        > "$OUT/p002-fileserver-scenarios.txt" 2>&1
      log "paper 002: varmail with background writes on the disk"
      bench --workload varmail --target ext4,xfs,moafs --size "$P002_SIZE" --backing "$DISK" \
        --reps "$REPS" --duration "$DURATION" --scale "$SCALE" --memory-limit "$P002_MEM" \
        --cache dropped --background none,write,fsync --json "$OUT/p002-varmail-background.json" \
        > "$OUT/p002-varmail-background.txt" 2>&1
      ;;
    paper004)
      log "paper 004: PostMark, journal modes of moafs and ext4, on DRAM"
      bench --preset paper004 --backing /dev/shm --size "$SIZE" --reps "$REPS" --scale "$SCALE" \
        --target "moafs@journal=writeback,moafs@journal=ordered,moafs@journal=data,ext4@data=writeback,ext4@data=ordered,ext4@data=journal" \
        --json "$OUT/p004-journal.json" --html "$OUT/p004-journal.html" > "$OUT/p004-journal.txt" 2>&1
      ;;
    *) echo "evidence.sh: unknown step $step" >&2; exit 2 ;;
  esac
done
log "summary"
python3 scripts/evidence-summary.py "$OUT" > "$OUT/SUMMARY.md"
log "done: $OUT"
echo "$OUT"
