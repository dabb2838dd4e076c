#!/usr/bin/env bash
# Issue-3 benchmark (not a test): paper 004's experiment on DRAM-class storage. Postmark
# small / medium / large workloads with 512 / 4096 / 8192-byte read/write buffers on moafs
# journal=writeback|ordered|data (FUSE) and kernel ext4 data=writeback|ordered|journal on a
# loop device; every image in /dev/shm, same size; targets take turns within each repetition.
# Usage: REPS=5 scripts/bench-journal.sh   (prints a table; cleans up mounts and loops)
#   WORKLOADS="small medium large"  BUFFERS="512 4096 8192"  TX_SCALE=1 (divides transactions)
#
# Where each postmark setting comes from (postmark 1.53; its `show` prints the defaults):
#   from paper 004:  read = write = the buffer size (512, 4096, 8192); 5 runs averaged; the
#                    three journal modes; "small / medium / large" workloads (no numbers).
#   postmark's own defaults, kept where the paper says nothing (override to change):
#                    SIZE_LOW=500 SIZE_HIGH=10000 (postmark prints "500 bytes and 9.77
#                    kilobytes"), SUBDIRS=0, BUFFERING=true (C stdio), SEED=42, biases 5/5.
#   ours (the paper gives no numbers): files and transactions of small / medium / large below,
#                    following its description (small: many transactions per file; then more
#                    files; then more of both).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
MOAFS=${MOAFS:-$PWD/target/release/moafs}
REPS=${REPS:-5}
SIZE=${SIZE:-4G}
WORKLOADS=${WORKLOADS:-"small medium large"}
BUFFERS=${BUFFERS:-"512 4096 8192"}
TX_SCALE=${TX_SCALE:-1}
TARGETS=${TARGETS:-"moafs:writeback moafs:ordered moafs:data ext4:writeback ext4:ordered ext4:journal"}
bench_init moafs-jbench

SIZE_LOW=${SIZE_LOW:-500}
SIZE_HIGH=${SIZE_HIGH:-10000}
SUBDIRS=${SUBDIRS:-0}
BUFFERING=${BUFFERING:-true}
SEED=${SEED:-42}

# Workloads: OUR numbers (paper 004 names them small / medium / large without numbers; these
# follow its description: few files with many transactions, then more files, then more of
# both). Not postmark defaults (500 files, 500 transactions).
files_of() { case $1 in small) echo 1000;; medium) echo 10000;; large) echo 20000;; esac; }
tx_of() { case $1 in small) echo 20000;; medium) echo 50000;; large) echo 100000;; esac; }

setup_target() {
  truncate -s "$SIZE" "$img"
  local fs=${1%%:*} mode=${1#*:}
  case $fs in
    moafs) "$MOAFS" mkfs "$img" >/dev/null
           "$MOAFS" mount -o "pidfile=$work/pid,journal=$mode" "$img" "$mnt"
           pid=$(cat "$work/pid") ;;
    ext4)  mkfs.ext4 -q -F "$img"; loop=$(losetup -f --show "$img")
           mount -o "data=$mode" "$loop" "$mnt" ;;
  esac
}

# one run: prints "wall_seconds MB_read MB_written"; the wall time is the whole postmark
# program (file creation, transactions, deletion) by our clock, not postmark's own
# 1-second-resolution transaction time; MB are postmark's (2^20 bytes)
postmark_once() {
  local wl=$1 buf=$2
  cat > "$work/pm.cfg" <<PM
set location $mnt
set number $(files_of "$wl")
set subdirectories $SUBDIRS
set size $SIZE_LOW $SIZE_HIGH
set read $buf
set write $buf
set buffering $BUFFERING
set transactions $(( $(tx_of "$wl") / TX_SCALE ))
set seed $SEED
run
quit
PM
  local s e out
  s=$(date +%s.%N); out=$(postmark "$work/pm.cfg"); e=$(date +%s.%N)
  local rd wr
  # postmark prints "N megabytes" above 1 MB, else "N kilobytes"
  rd=$(echo "$out" | awk '/bytes read \(/{print ($2 == "kilobytes") ? $1 / 1024 : $1}')
  wr=$(echo "$out" | awk '/bytes written \(/{print ($2 == "kilobytes") ? $1 / 1024 : $1}')
  echo "$(echo "$e - $s" | bc) $rd $wr"
}

stats() { # mean min max n of column 1 on stdin
  awk '{s+=$1; if(min==""||$1<min)min=$1; if($1>max)max=$1; n++} END{printf "%.2f %.2f %.2f %d", s/n, min, max, n}'
}

for wl in $WORKLOADS; do for buf in $BUFFERS; do for t in $TARGETS; do
  : > "$work/$wl.$buf.${t/:/-}"
done; done; done
for r in $(seq 1 "$REPS"); do
  for wl in $WORKLOADS; do for buf in $BUFFERS; do for t in $TARGETS; do
    setup_target "$t"
    res=$(postmark_once "$wl" "$buf")
    bench_teardown
    echo "$res" >> "$work/$wl.$buf.${t/:/-}"
    echo "  rep $r $wl buf $buf $t: $res" >&2
  done; done; done
done

printf "\npostmark: size %s-%s, %s subdirectories, buffering %s, seed %s (files/transactions per workload: ours)\n" \
  "$SIZE_LOW" "$SIZE_HIGH" "$SUBDIRS" "$BUFFERING" "$SEED"
printf "\n| workload | buffer | target | program wall s (mean min max n) | MB/s read | MB/s written | vs own writeback |\n|---|---|---|---|---|---|---|\n"
for wl in $WORKLOADS; do for buf in $BUFFERS; do
  for t in $TARGETS; do
    f="$work/$wl.$buf.${t/:/-}"
    st=$(stats < "$f")
    mean=${st%% *}
    rd=$(awk '{r+=$2/$1; n++} END{printf "%.1f", r/n}' "$f")
    wr=$(awk '{w+=$3/$1; n++} END{printf "%.1f", w/n}' "$f")
    base="$work/$wl.$buf.${t%%:*}-writeback"
    rel=-
    if [ -s "$base" ]; then
      bmean=$(stats < "$base"); bmean=${bmean%% *}
      rel=$(printf "%.2fx" "$(echo "$mean / $bmean" | bc -l)")
    fi
    printf "| %s | %s | %s | %s | %s | %s | %s |\n" "$wl" "$buf" "$t" "$st" "$rd" "$wr" "$rel"
  done
done; done
