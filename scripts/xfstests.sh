#!/usr/bin/env bash
# xfstests on moafs: `./run xfstests [TESTS...]` (default: the quick group), `--ci` for the
# fixed subset CI runs (scripts/test.sh).
#
# Builds xfstests once into target/xfstests (source: $XFSTESTS_SRC, a tarball or a directory,
# default ../shared/xfstests/xfstests-src.tar.gz; rebuilt when the source changes), installs
# its Debian build dependencies and the users its tests switch to, installs moafs's mount and
# umount helpers, makes a test and a scratch device (loop devices over image files, or with
# XFSTESTS_DEVICES=files the image files themselves), and runs ./check with FSTYP=fuse
# FUSE_SUBTYP=.moafs and the exclude list tests/xfstests-exclude. Results go to
# target/xfstests-results/; the summary names every failure. Exit 1 on any failure.
#
# xfstests knows FUSE subtypes only for glusterfs and ceph-fuse (common/rc maps their types
# back to FSTYP); tests/xfstests-fuse-subtype.patch does the same for FSTYP=fuse with
# FUSE_SUBTYP, so that `check` recognises a fuse.moafs mount of TEST_DEV.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/lib.sh
# the moafs binary the helpers run (a copy keeps a run steady while the tree rebuilds)
MOAFS=${XFSTESTS_MOAFS:-$ROOT/target/release/moafs}
SRC=${XFSTESTS_SRC:-$ROOT/../shared/xfstests/xfstests-src.tar.gz}
# Where ../shared is not beside the project (a new clone): the same commit of the public
# mirror, downloaded once into target/
XFSTESTS_COMMIT=63a29724a85f1999e49bf0a9bf0d22643b6116e5
URL=${XFSTESTS_URL:-https://github.com/kdave/xfstests/archive/$XFSTESTS_COMMIT.tar.gz}
BUILD=$ROOT/target/xfstests
RESULTS=$ROOT/target/xfstests-results
# The images and mount points: a fresh directory per run, so a run killed with its mounts
# (or one running beside it) never stands in the way of the next.
WORK=${XFSTESTS_WORK:-}
EXCLUDE=$ROOT/tests/xfstests-exclude
IMAGE_SIZE=${XFSTESTS_IMAGE_SIZE:-3G}
# loop: TEST_DEV and SCRATCH_DEV are loop devices over image files (tests that need a block
# device run: moafs mounts them with O_DIRECT); files: the image files themselves
DEVICES=${XFSTESTS_DEVICES:-loop}
LOOPS=()

# The CI subset: quick tests of the POSIX surface and of every fix of issue 15 (remount,
# O_DIRECT coherency, listing during renames, file handles, set-id bits, ACLs, xattr limits,
# ENOSPC, device nodes, a second mount) and of issue 30 (shutdown, sized scratch file systems,
# mount propagation, syncfs on a block device, FITRIM, norecovery, write-protected devices).
# About six minutes here.
CI_TESTS=(
  generic/001 generic/002 generic/005 generic/006 generic/007 generic/011 generic/013
  generic/014 generic/020 generic/023 generic/024 generic/028 generic/035 generic/037
  generic/053 generic/080 generic/087 generic/088 generic/099 generic/103 generic/184
  generic/221 generic/236 generic/245 generic/257 generic/294 generic/306 generic/319
  generic/355 generic/375 generic/423 generic/426 generic/434 generic/444 generic/451
  generic/452 generic/467 generic/477 generic/633 generic/683 generic/684 generic/697
  generic/732 generic/736 generic/756 generic/777
  generic/042 generic/409 generic/449 generic/468 generic/474
  generic/050 generic/260 generic/288 generic/537
  generic/004 generic/079 generic/389 generic/545 generic/553 generic/508 generic/528
  generic/026 generic/402
)

args=()
for a in "$@"; do
  case "$a" in
    --ci) args+=("${CI_TESTS[@]}") ;;
    *) args+=("$a") ;;
  esac
done
[ ${#args[@]} -gt 0 ] || args=(-g quick)

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo

install_deps() {
  local pkgs=(acl attr automake bc curl dbench dump e2fsprogs fio gawk gcc libacl1-dev libaio-dev
    libcap-dev libgdbm-dev libtool libtool-bin liburing-dev libuuid1 make psmisc python3 quota
    sed uuid-dev uuid-runtime xfsprogs xfslibs-dev sqlite3)
  local need=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
  if [ ${#need[@]} -gt 0 ]; then
    echo "-- apt-get install ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  for u in fsgqa fsgqa2; do
    getent group "$u" >/dev/null || $SUDO groupadd "$u"
    getent passwd "$u" >/dev/null || $SUDO useradd -m -g "$u" "$u"
  done
  getent passwd 123456-fsgqa >/dev/null || $SUDO useradd -m 123456-fsgqa
}

build() {
  local stamp
  if [ ! -e "$SRC" ] && [ -z "${XFSTESTS_SRC:-}" ]; then
    local fetched=$ROOT/target/xfstests-$XFSTESTS_COMMIT.tar.gz
    if [ ! -s "$fetched" ]; then
      echo "-- $SRC is not here: downloading xfstests $XFSTESTS_COMMIT from $URL"
      mkdir -p "$ROOT/target"
      curl -fsSL --retry 3 -o "$fetched.part" "$URL" && mv "$fetched.part" "$fetched" || {
        rm -f "$fetched.part"
        echo "xfstests source not found: $SRC, and the download from $URL failed (set" >&2
        echo "XFSTESTS_SRC to a tarball or a directory of xfstests)" >&2
        exit 1
      }
    fi
    SRC=$fetched
  fi
  if [ -d "$SRC" ]; then
    stamp="dir:$(cd "$SRC" && pwd):$(find "$SRC" -type f -newer "$BUILD/.stamp" 2>/dev/null | head -1)"
  elif [ -f "$SRC" ]; then
    stamp="tar:$(sha256sum "$SRC" | cut -d' ' -f1)"
  else
    echo "xfstests source not found: $SRC (set XFSTESTS_SRC to a tarball or a directory)" >&2
    exit 1
  fi
  stamp="$stamp:$(sha256sum tests/xfstests-fuse-subtype.patch | cut -d' ' -f1)"
  if [ -f "$BUILD/.stamp" ] && [ "$(cat "$BUILD/.stamp")" = "$stamp" ] && [ -x "$BUILD/check" ]; then
    return
  fi
  echo "-- building xfstests from $SRC into $BUILD"
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
  if [ -d "$SRC" ]; then
    cp -a "$SRC"/. "$BUILD"/
  else
    # the archive holds one top directory
    tar -xzf "$SRC" -C "$BUILD" --strip-components=1
  fi
  patch -d "$BUILD" -p1 --quiet < tests/xfstests-fuse-subtype.patch
  (cd "$BUILD" && make -j"$(nproc)" >"$BUILD/make.log" 2>&1) || {
    tail -n 30 "$BUILD/make.log"; echo "xfstests build failed" >&2; exit 1; }
  echo "$stamp" > "$BUILD/.stamp"
}

unmount_all() {
  for d in "$WORK/test" "$WORK/scratch"; do
    for _ in 1 2 3 4 5; do
      is_mounted "$d" || break
      umount "$d" 2>/dev/null || { sleep 0.5; umount -l "$d" 2>/dev/null || true; }
    done
  done
}

cleanup() {
  unmount_all
  for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
  if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; fi
}

# A FUSE mount whose daemon is gone stays in the mount table; df(1) then fails on it ("Transport
# endpoint is not connected") and every test that runs a bare df (generic/260) fails with it.
dead_mounts() {
  local fstype mp
  while read -r _ mp fstype _; do
    case "$fstype" in fuse|fuse.*|fuseblk|fuseblk.*) ;; *) continue ;; esac
    mp=$(printf '%b' "${mp//\\/\\0}")
    if ! stat -f "$mp" >/dev/null 2>&1; then echo "$mp"; fi
  done < /proc/mounts
}
dead=$(dead_mounts)
# (one being taken down right now, as after a crash test, is gone in a moment)
[ -z "$dead" ] || { sleep 3; dead=$(dead_mounts); }
if [ -n "$dead" ]; then
  echo "xfstests: these FUSE mounts have lost their daemon, and df fails on them (generic/260" >&2
  echo "fails with it); take them down first (umount DIR, or umount -l DIR):" >&2
  echo "$dead" | sed 's/^/  /' >&2
  exit 2
fi

install_deps
build
"$MOAFS" install-helpers >/dev/null
if [ -z "$WORK" ]; then WORK=$(mktemp -d /var/tmp/moafs-xfstests.XXXXXX); fi
trap cleanup EXIT
unmount_all
rm -rf "$WORK"
mkdir -p "$WORK/test" "$WORK/scratch"
case "$DEVICES" in
  loop|files) ;;
  *) echo "XFSTESTS_DEVICES must be loop or files, not $DEVICES" >&2; exit 2 ;;
esac
# device NAME: an image file NAME.img of IMAGE_SIZE and, for loop, a loop device over it;
# sets DEV to what the file system goes on
device() {
  truncate -s "$IMAGE_SIZE" "$WORK/$1.img"
  DEV=$WORK/$1.img
  if [ "$DEVICES" = loop ]; then
    DEV=$(losetup -f --show "$WORK/$1.img")
    LOOPS+=("$DEV")
  fi
}
device test; TEST_DEV=$DEV
device scratch; SCRATCH_DEV=$DEV
"$MOAFS" mkfs "$TEST_DEV" >/dev/null
"$MOAFS" mkfs "$SCRATCH_DEV" >/dev/null
# mount(8) runs mount.fuse.moafs: dev,suid as on any file system root mounts, unless told
cat > "$BUILD/local.config" <<EOF
export TEST_DEV=$TEST_DEV
export TEST_DIR=$WORK/test
export SCRATCH_DEV=$SCRATCH_DEV
export SCRATCH_MNT=$WORK/scratch
export FSTYP=fuse
export FUSE_SUBTYP=.moafs
export MOUNT_OPTIONS="-o allow_other,default_permissions,iflags"
export TEST_FS_MOUNT_OPTS="-o allow_other,default_permissions,iflags"
EOF

rm -rf "$BUILD/results"
set +e
(cd "$BUILD" && ./check -E "$EXCLUDE" "${args[@]}") 2>&1 | tee "$WORK/check.out"
set -e
rm -rf "$RESULTS"
cp -a "$BUILD/results" "$RESULTS" 2>/dev/null || true
cp "$WORK/check.out" "$RESULTS/check.out" 2>/dev/null || true

# check's "Ran:" lists the tests it started, "Not run:" those of them that said why not.
started=$( (grep -E '^Ran:' "$WORK/check.out" || true) | tail -1 | wc -w)
started=$(( started > 0 ? started - 1 : 0 ))
notrun=$( (grep -E '^Not run:' "$WORK/check.out" || true) | tail -1 | wc -w)
notrun=$(( notrun > 0 ? notrun - 2 : 0 ))
ran=$(( started - notrun ))
failures=$( (grep -E '^Failures:' "$WORK/check.out" || true) | tail -1 | cut -d: -f2-)
nfail=$(echo "$failures" | wc -w)
echo "xfstests summary: ran $ran, not run $notrun, failed $nfail (results: $RESULTS)"
[ "$nfail" -eq 0 ] || echo "failed:$failures"
if [ "$ran" -eq 0 ]; then
  echo "xfstests ran no test" >&2
  exit 1
fi
echo "xfstests: $((ran - nfail)) passed, $nfail failed"
[ "$nfail" -eq 0 ]
