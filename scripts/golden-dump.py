#!/usr/bin/env python3
"""dump.py IMAGE OUT: IMAGE with its all-zero 4 KiB blocks left out (tests/golden/README.md)."""
import struct, sys
img = open(sys.argv[1], 'rb').read()
out = [b'MGOLDEN1', struct.pack('<QI', len(img), 4096)]
zero = bytes(4096)
for i in range(0, len(img), 4096):
    b = img[i:i + 4096]
    if b != zero[:len(b)]:
        out.append(struct.pack('<Q', i // 4096) + b.ljust(4096, b'\0'))
open(sys.argv[2], 'wb').write(b''.join(out))
