#!/usr/bin/env python3
"""Rows of a moafs bench JSON: per target its rate, writes per op, bytes per op, and for moafs
the fsync phases' shares (µs of an average fsync) and paths. usage: summarize.py FILE..."""
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    for res in d['results']:
        for rep in res['reports']:
            for r in rep['runs']:
                o = r['outcome']
                rate = o.get('rate') or o.get('ops_per_sec')
                line = f"{path} {res['workload']} {rep['target']}: {rate:.0f}/s"
                if r.get('device_writes_per_op') is not None:
                    line += f" wr/op {r['device_writes_per_op']:.3f} B/op {r['device_bytes_written_per_op']:.0f}"
                e = r.get('engine') or {}
                f = e.get('fsync_phases') or {}
                if f.get('fsyncs'):
                    ph = ' '.join(f"{k} {v['per_fsync_us']:.0f}" for k, v in f['phases'].items())
                    pa = ' '.join(f"{k} {100*v['count']/f['fsyncs']:.0f}%" for k, v in f['paths'].items())
                    line += f" | commits/fsync {e.get('commits',0)/f['fsyncs']:.2f} | {ph} | {pa}"
                print(line)
