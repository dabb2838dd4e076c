#!/usr/bin/env bash
# The soak (issue 45): one moafs mount under fsstress (several processes), SQLite (rows
# committed with synchronous=FULL), a large-file writer and a small-record writer (an fsync
# after each append), all in one memory cgroup with the daemon; the daemon is SIGKILLed at a
# random moment, the dead mount taken down, `moafs fsck -n` must be clean, the image is
# mounted again and everything an fsync or a commit acknowledged before the kill must be
# there. Then the next cycle, on the same file system, until HOURS have passed. Every tenth
# cycle also unmounts cleanly and fscks. Prints one line per cycle and a summary; exit 1 on
# any finding (the cycle's evidence is kept in $work/findings).
#
#   scripts/soak.sh HOURS                # e.g. 2; fractions work (0.1 = 6 min)
#   SOAK_DIR=/var/tmp SOAK_MEM=1536M SOAK_PROCS=4 SOAK_KILL_S=5-40 SOAK_OPTS=journal=ordered
#
# Needs root (a memory cgroup, mounts), python3 (its sqlite3 module) and fsstress (built by
# scripts/xfstests.sh into target/xfstests/ltp/fsstress).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
HOURS=${1:?usage: scripts/soak.sh HOURS}
MOAFS=${MOAFS:-$PWD/target/release/moafs}
FSSTRESS=${FSSTRESS:-$PWD/target/xfstests/ltp/fsstress}
DIR=${SOAK_DIR:-/var/tmp}
MEM=${SOAK_MEM:-1536M}
PROCS=${SOAK_PROCS:-4}
KILL_S=${SOAK_KILL_S:-5-40}
OPTS=${SOAK_OPTS:-}
SEED=${SOAK_SEED:-$$}
[ "$(id -u)" -eq 0 ] || { echo "soak.sh needs root (a memory cgroup and mounts)" >&2; exit 2; }
[ -x "$FSSTRESS" ] || { echo "fsstress not found at $FSSTRESS: scripts/xfstests.sh builds it" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is missing (apt-get install python3)" >&2; exit 2; }
RANDOM=$SEED

work=$(mktemp -d "$DIR/moafs-soak.XXXXXX")
mnt=$work/mnt; img=$work/img; acks=$work/acks
mkdir -p "$mnt" "$acks" "$work/findings"
pids=()

# The memory cgroup (v2 or v1) the cycles run in: the daemon and every writer.
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control
  cg=/sys/fs/cgroup/moafs-soak.$$; mkdir "$cg"; echo "$MEM" > "$cg/memory.max"
  oom() { awk '/^oom_kill /{print $2}' "$cg/memory.events"; }
else
  cg=/sys/fs/cgroup/memory/moafs-soak.$$; mkdir "$cg"; echo "$MEM" > "$cg/memory.limit_in_bytes"
  oom() { awk '/^oom_kill /{print $2}' "$cg/memory.oom_control"; }
fi

stop_writers() {
  local p
  # each writer leads a process group of its own (fsstress forks its workers)
  for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
take_down() {
  if is_mounted "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt"; fi
}
cleanup() {
  stop_writers
  if [ -f "$work/pid" ] && alive "$(cat "$work/pid")"; then
    "$MOAFS" umount "$mnt" 2>/dev/null || { kill -9 "$(cat "$work/pid")"; take_down; }
  fi
  take_down || true
  for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 1; done
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# In the cgroup: mount (the daemon forks from here) and start the writers.
in_cg() { sh -c "echo \$\$ > $cg/cgroup.procs && exec \"\$@\"" sh "$@"; }

mount_it() {
  rm -f "$work/pid"
  in_cg "$MOAFS" mount -o "pidfile=$work/pid${OPTS:+,$OPTS}" "$img" "$mnt"
}

# The writers. Each acknowledges (in $acks, outside the mount) only what an fsync or a
# COMMIT returned for; nothing else is checked after a kill.
write_py=$work/writers.py
cat > "$write_py" <<'PY'
import os, sqlite3, sys, time
kind, mnt, acks = sys.argv[1], sys.argv[2], sys.argv[3]
def ack(name, value):
    # the acknowledgement file is replaced whole: a kill of this writer leaves the old or new
    tmp = f'{acks}/{name}.tmp'
    with open(tmp, 'w') as f:
        f.write(str(value))
    os.rename(tmp, f'{acks}/{name}')
def acked(name):
    try:
        return int(open(f'{acks}/{name}').read())
    except FileNotFoundError:
        return 0
if kind == 'sqlite':
    db = sqlite3.connect(f'{mnt}/soak.db', timeout=60, isolation_level=None)
    db.execute('PRAGMA journal_mode=WAL')
    db.execute('PRAGMA synchronous=FULL')
    db.execute('CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)')
    n = acked('sqlite')
    while True:
        n += 1
        # a row committed before a kill but not acknowledged is written again
        db.execute('BEGIN')
        db.execute('INSERT OR REPLACE INTO t VALUES (?, ?)', (n, bytes([n % 251]) * (100 + n % 3000)))
        db.execute('COMMIT')
        ack('sqlite', n)
elif kind == 'large':
    # 1 MiB chunks, an fsync after each; a new file past 512 MiB
    gen = acked('large.gen')
    n = acked('large')
    for name in os.listdir(mnt):
        # one the last kill left between the generation's acknowledgement and its unlink
        if name.startswith('large.') and name != f'large.{gen}':
            os.unlink(f'{mnt}/{name}')
    while True:
        path = f'{mnt}/large.{gen}'
        with open(path, 'ab') as f:
            f.truncate(n << 20)  # what the last kill may have added past the acknowledged
            while n < 512:
                f.write(bytes([(gen * 31 + n) % 251]) * (1 << 20))
                f.flush(); os.fsync(f.fileno())
                n += 1
                ack('large', n)
        # the next generation acknowledged before the full file goes (a kill between the
        # two leaves a file nobody checks, removed at the writer's next start)
        gen += 1; n = 0
        ack('large', 0); ack('large.gen', gen)
        os.unlink(path)
elif kind == 'records':
    # 4 KiB records appended with an fsync after each (a mail spool's pattern)
    n = acked('records')
    with open(f'{mnt}/records', 'ab') as f:
        f.truncate(n * 4096)
        while True:
            f.write(bytes([n % 251]) * 4096)
            f.flush(); os.fsync(f.fileno())
            n += 1
            ack('records', n)
elif kind == 'check':
    bad = []
    n = acked('sqlite')
    if n:
        db = sqlite3.connect(f'{mnt}/soak.db', timeout=60)
        ok = db.execute('PRAGMA integrity_check').fetchone()[0]
        if ok != 'ok':
            bad.append(f'sqlite integrity_check: {ok}')
        have = db.execute('SELECT count(*) FROM t WHERE id <= ?', (n,)).fetchone()[0]
        if have != n:
            bad.append(f'sqlite: {have} of {n} committed rows')
        for (i, v) in db.execute('SELECT id, v FROM t WHERE id <= ? AND id % 97 = 0', (n,)):
            if v != bytes([i % 251]) * (100 + i % 3000):
                bad.append(f'sqlite: row {i} differs'); break
    gen, n = acked('large.gen'), acked('large')
    if n:
        path = f'{mnt}/large.{gen}'
        try:
            size = os.path.getsize(path)
            if size < n << 20:
                bad.append(f'{path}: {size} bytes, {n} MiB acknowledged')
            with open(path, 'rb') as f:
                for k in range(n):
                    if f.read(1 << 20) != bytes([(gen * 31 + k) % 251]) * (1 << 20):
                        bad.append(f'{path}: MiB {k} of {n} acknowledged differs'); break
        except FileNotFoundError:
            bad.append(f'{path}: missing, {n} MiB acknowledged')
    n = acked('records')
    if n:
        try:
            with open(f'{mnt}/records', 'rb') as f:
                for k in range(n):
                    if f.read(4096) != bytes([k % 251]) * 4096:
                        bad.append(f'records: record {k} of {n} acknowledged differs'); break
        except FileNotFoundError:
            bad.append(f'records: missing, {n} acknowledged')
    print(f"acked sqlite={acked('sqlite')} large={acked('large.gen')}:{acked('large')} "
          f"records={acked('records')}")
    for b in bad:
        print('FINDING', b)
    sys.exit(1 if bad else 0)
PY

start_writers() {
  setsid sh -c "echo \$\$ > $cg/cgroup.procs && exec \"\$@\"" sh \
    "$FSSTRESS" -d "$mnt/stress" -p "$PROCS" -n 100000000 -s "$RANDOM" \
    > "$work/fsstress.log" 2>&1 & pids+=($!)
  local k
  for k in sqlite large records; do
    setsid sh -c "echo \$\$ > $cg/cgroup.procs && exec \"\$@\"" sh \
      python3 "$write_py" "$k" "$mnt" "$acks" > "$work/$k.log" 2>&1 & pids+=($!)
  done
}

"$MOAFS" mkfs --size 8G "$img" > /dev/null
mount_it
end=$(( $(date +%s) + $(awk -v h="$HOURS" 'BEGIN { printf "%d", h * 3600 }') ))
lo=${KILL_S%-*}; hi=${KILL_S#*-}
cycles=0; findings=0; clean=0; t0=$(date +%s)
echo "soak: $HOURS h, image $img (8 GiB, ${OPTS:-default options}), cgroup $cg ($MEM), seed $SEED"
while [ "$(date +%s)" -lt "$end" ]; do
  cycles=$((cycles + 1))
  start_writers
  sleep $(( lo + RANDOM % (hi - lo + 1) ))
  daemon=$(cat "$work/pid")
  kill -9 "$daemon"
  stop_writers
  for _ in $(seq 1 200); do alive "$daemon" || break; sleep 0.1; done
  take_down
  finding=""
  if ! "$MOAFS" fsck -n "$img" > "$work/fsck.log" 2>&1; then
    finding="fsck -n after the kill"
  fi
  if [ -z "$finding" ] && ! mount_it 2> "$work/mount.log"; then
    finding="mount after the kill"
  fi
  if [ -z "$finding" ] && ! python3 "$write_py" check "$mnt" "$acks" > "$work/check.log" 2>&1; then
    finding="acknowledged data lost"
  fi
  # fsstress is the stressor, not the subject: its tree goes, so the file system never fills
  # (a full one is a test of its own: tests/full.rs)
  [ -n "$finding" ] || rm -rf "$mnt/stress"
  [ -n "$finding" ] || df -h "$mnt" | awk 'NR == 2 { printf "%s used  ", $5 }' > "$work/df.txt"
  if [ -z "$finding" ] && [ $((cycles % 10)) -eq 0 ]; then
    "$MOAFS" umount "$mnt"
    if "$MOAFS" fsck -n "$img" > "$work/fsck.log" 2>&1; then
      clean=$((clean + 1)); mount_it
    else
      finding="fsck -n after a clean unmount"
    fi
  fi
  printf 'cycle %d  %ds  %s%s%s\n' "$cycles" $(( $(date +%s) - t0 )) \
    "$(cat "$work/df.txt" 2>/dev/null)" "$(head -n 1 "$work/check.log" 2>/dev/null)" \
    "${finding:+  FINDING: $finding}"
  if [ -n "$finding" ]; then
    findings=$((findings + 1))
    mkdir -p "$work/findings/$cycles"
    cp "$work"/*.log "$work/findings/$cycles/" 2>/dev/null || true
    cat "$work/check.log" "$work/fsck.log" 2>/dev/null | tail -n 20
    KEEP=1
    break
  fi
done
echo "soak: $cycles kill cycles in $(( ($(date +%s) - t0) / 60 )) min, $clean clean unmounts," \
  "$findings findings, out-of-memory kills in the cgroup: $(oom)"
[ "$findings" -eq 0 ]
