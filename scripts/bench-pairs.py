#!/usr/bin/env python3
# Paired ratio of two targets of a `moafs bench --json` report, any pair (the report compares
# with the first target only): geometric mean of the per-repetition ratios of rates with a 95 %
# t-interval on the mean log ratio, as the harness computes it.
# Usage: scripts/bench-pairs.py REPORT.json BASELINE TARGET...
import json, math, sys
T95={1:12.706,2:4.303,3:3.182,4:2.776,5:2.571,6:2.447,7:2.365,8:2.306,9:2.262}
def paired(a, b):
    """geometric mean of a/b per repetition with a 95% t interval on the mean log ratio"""
    ra={r['rep']:r['outcome']['rate'] for r in a['runs']}
    rb={r['rep']:r['outcome']['rate'] for r in b['runs']}
    l=[math.log(ra[k]/rb[k]) for k in sorted(ra) if k in rb]
    n=len(l); m=sum(l)/n
    sd=math.sqrt(sum((x-m)**2 for x in l)/(n-1)); h=T95[n-1]*sd/math.sqrt(n)
    return math.exp(m), math.exp(m-h), math.exp(m+h), n
doc=json.load(open(sys.argv[1]))
base=sys.argv[2]
for res in doc['results']:
    reps={r['target']:r for r in res['reports']}
    for t in sys.argv[3:]:
        if t in reps and base in reps:
            g,lo,hi,n=paired(reps[t],reps[base])
            print(f"{res['workload']:16} {t:12} / {base:12} {g:6.2f}x  (95% CI {lo:.2f}-{hi:.2f}, n {n})")
