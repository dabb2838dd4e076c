#!/bin/bash
# the runs of docs/results/issue20-2026-11-26 (issue 20), as root from the repository root after cargo build --release; M=target/release/moafs
# final measurement of issue 20 at commit 25af732; nothing else runs meanwhile
set -u
M=${M:-$PWD/target/release/moafs}
mkdir -p "${OUT:-results}" && cd "${OUT:-results}"
log() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a progress.txt; }
log models
$M experiment readahead --json readahead.json > readahead.txt 2>&1
$M experiment bytelog --json bytelog.json > bytelog.txt 2>&1
$M experiment cowrite --utilisation 0,30 --tests seq-write,rand-write,dir-read,large-write,large-read --json cowrite.json > cowrite.txt 2>&1
log headline
$M bench --target ext4,passthrough,moafs,fuse2fs --workload postmark-quick,varmail,webproxy --duration 10 --reps 5 --json headline.json --html headline.html > headline.txt 2>&1
log p002-fileserver
$M bench --workload fileserver --target ext4,xfs,moafs --size 16G --backing /var/tmp/moafs-p002 --reps 5 --duration 10 --memory-limit 1536M --cache dropped,fresh,polluted --json p002-fileserver-scenarios.json > p002-fileserver-scenarios.txt 2>&1
log p002-varmail-bg
$M bench --workload varmail --target ext4,xfs,moafs --size 16G --backing /var/tmp/moafs-p002 --reps 5 --duration 10 --memory-limit 1536M --cache dropped --background none,write,fsync --json p002-varmail-background.json > p002-varmail-background.txt 2>&1
log done
