#!/usr/bin/env python3
"""Page-cache folio sizes of a file (root): maps FILE, touches every page, and reads each
page's flags from /proc/kpageflags through /proc/self/pagemap. Prints how many of the file's
pages sit in single-page folios and how many in large (compound) folios.
Usage: scripts/folio-sizes.py FILE   (read the file once before, so its pages are cached)"""
import ctypes
import mmap
import os
import struct
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")
HEAD, TAIL = 1 << 15, 1 << 16  # KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL


def main(path):
    size = os.path.getsize(path)
    if size == 0:
        sys.exit(f"{path}: empty")
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)  # private, read only here
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    pages = (size + PAGE - 1) // PAGE
    for i in range(pages):
        m[i * PAGE]  # fault the page in
    single = large = 0
    with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
        pm.seek(base // PAGE * 8)
        entries = struct.unpack(f"{pages}Q", pm.read(pages * 8))
        for e in entries:
            pfn = e & ((1 << 55) - 1)
            if not e >> 63 or pfn == 0:
                sys.exit("no page frame numbers: run as root")
            kf.seek(pfn * 8)
            (flags,) = struct.unpack("Q", kf.read(8))
            if flags & (HEAD | TAIL):
                large += 1
            else:
                single += 1
    print(f"{path}: {pages} pages, {single} in single-page folios, {large} in large folios")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
