#!/usr/bin/env bash
# Issue-3 benchmark (not a test): paper 004's experiment on DRAM-class storage. Postmark
# small / medium / large workloads with 512 / 4096 / 8192-byte read/write buffers on moafs
# journal=writeback|ordered|data (FUSE) and kernel ext4 data=writeback|ordered|journal on a
# loop device; every image in /dev/shm, same size; targets take turns within each repetition.
# Usage: REPS=5 scripts/bench-journal.sh   (prints a table; cleans up mounts and loops)
#   WORKLOADS="small medium large"  BUFFERS="512 4096 8192"  TX_SCALE=1 (divides transactions)
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

# Workloads (paper 004 names them small / medium / large without the numbers; these follow
# its description: few files with many transactions, then more files, then more of both).
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

# one run: prints "wall_seconds MB_read MB_written"
postmark_once() {
  local wl=$1 buf=$2
  cat > "$work/pm.cfg" <<PM
set location $mnt
set number $(files_of "$wl")
set subdirectories 200
set size 500 9770
set read $buf
set write $buf
set buffering false
set transactions $(( $(tx_of "$wl") / TX_SCALE ))
set seed 42
run
quit
PM
  local s e out
  s=$(date +%s.%N); out=$(postmark "$work/pm.cfg"); e=$(date +%s.%N)
  local rd wr
  rd=$(echo "$out" | awk '/megabytes read/{print $1}')
  wr=$(echo "$out" | awk '/megabytes written/{print $1}')
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

printf "\n| workload | buffer | target | wall s (mean min max n) | MB/s read | MB/s written | vs own writeback |\n|---|---|---|---|---|---|---|\n"
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
