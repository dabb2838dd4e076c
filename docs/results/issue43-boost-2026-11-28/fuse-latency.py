# usage: perf script -i FILE | python3 fuse-latency.py  (latency by opcode, µs)
import sys, re, collections
send = {}
lat = collections.defaultdict(list)
names = {}
for line in sys.stdin:
    m = re.search(r'\s(\d+\.\d+):\s+fuse:fuse_request_(send|end):\s+connection (\d+) req (\d+)(?: opcode (\d+) \((\w+)\))?', line)
    if not m: continue
    t = float(m.group(1)); kind = m.group(2); key = (m.group(3), m.group(4))
    if kind == 'send':
        send[key] = (t, m.group(6))
    else:
        s = send.pop(key, None)
        if s: lat[s[1]].append((t - s[0]) * 1e6)
tot = 0
for op, v in sorted(lat.items(), key=lambda kv: -sum(kv[1])):
    v.sort(); n = len(v)
    print(f"{op:16} n {n:7}  mean {sum(v)/n:8.1f}  p50 {v[n//2]:8.1f}  p90 {v[int(n*.9)]:8.1f}  p99 {v[int(n*.99)]:8.1f} sum {sum(v)/1e6:6.2f}s")
