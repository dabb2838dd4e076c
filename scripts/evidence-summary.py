#!/usr/bin/env python3
"""The tables of an evidence run (scripts/evidence.sh), as Markdown on stdout: what README and
docs/PAPERS.md quote. Reads the result files in DIR; a step that did not run is left out.

Ratios are paired by repetition: within a repetition every target ran on the same seed, so
the ratio of two targets is taken per repetition and summarised by its geometric mean with
the 95 % t-interval of the mean log ratio (the harness's own method, BENCHMARKS.md). A ratio
of two targets that are not the baseline is computed from their per-repetition ratios to it.

    scripts/evidence-summary.py DIR
"""
import json
import math
import os
import sys

# Student t, 97.5 % quantile, as the harness's `stats::t95`: the table to 30 degrees of
# freedom, beyond it the Cornish-Fisher expansion
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
Z975 = 1.959963984540054


def t975(df):
    if df < 1:
        return float("nan")
    if df <= 30:
        return T975[df - 1]
    z, n = Z975, float(df)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    return z + g1 / n + g2 / n ** 2 + g3 / n ** 3


def paired(ratios):
    """Geometric mean and 95 % interval of per-repetition ratios."""
    logs = [math.log(r) for r in ratios if r and r > 0]
    n = len(logs)
    if n == 0:
        return None
    m = sum(logs) / n
    if n < 2:
        return (math.exp(m), None, None)
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    h = t975(n - 1) * sd / math.sqrt(n)
    return (math.exp(m), math.exp(m - h), math.exp(m + h))


def fmt(p):
    if p is None:
        return "-"
    g, lo, hi = p
    if lo is None:
        return f"{g:.2f}×"
    mark = "**" if lo > 1 or hi < 1 else ""
    return f"{mark}{g:.2f}×{mark} ({lo:.2f}–{hi:.2f})"


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    with open(p) as fh:
        return json.load(fh)


def per_rep(result):
    """target -> {rep: ratio to the baseline}"""
    out = {}
    for c in result["comparison"]:
        reps = {r["rep"]: r["ratio"] for r in c.get("ratios", [])}
        if not reps and c.get("ratio_to_baseline") == 1.0:
            reps = None  # the baseline itself: 1 in every repetition
        out[c["target"]] = reps
    return out


def ratio(result, a, b):
    """a's rate over b's, paired by repetition."""
    reps = per_rep(result)
    ra, rb = reps.get(a, {}), reps.get(b, {})
    if a not in reps or b not in reps:
        return None
    keys = sorted(set(ra or {}) | set(rb or {}))
    vals = []
    for k in keys:
        x = 1.0 if ra is None else ra.get(k)
        y = 1.0 if rb is None else rb.get(k)
        if x and y:
            vals.append(x / y)
    return paired(vals)


def stopped_early(result):
    """Targets with a run that stopped early (Filebench's "could not obtain a file"): its rate
    is of a shorter run than the others'."""
    out = set()
    for rep in result.get("reports", []):
        for run in rep.get("runs", []):
            detail = (run.get("outcome") or {}).get("detail") or {}
            if isinstance(detail, dict) and detail.get("stopped_early"):
                out.add(rep["target"])
    return sorted(out)


def env_line(doc):
    e = doc.get("environment", {})
    k = e.get("kernel", {})
    cpus = e.get("cpus", {})
    mem = e.get("memory_bytes")
    mem = f"{mem / (1 << 30):.1f} GiB" if isinstance(mem, (int, float)) else "?"
    return (f"run id `{e.get('run_id')}`, commit {e.get('commit')}, kernel {k.get('release')}, "
            f"{e.get('cpu_model')} × {cpus.get('online')}, memory {mem}")


def headline(d, step, where):
    doc = load(d, f"{step}.json")
    if not doc:
        return
    print(f"## Headline on {where}\n")
    print(env_line(doc) + f"; backing `{doc['environment'].get('backing', {}).get('path')}`; "
          f"{doc.get('reps')} repetitions.\n")
    targets = [r["target"] for r in doc["results"][0]["reports"]]
    base = targets[0]
    others = targets[1:]
    print(f"Each file system's rate as a multiple of {base}'s (geometric mean of the paired "
          "ratios, 95 % interval; bold where the interval excludes 1); the last column is "
          "moafs over the FUSE ceiling (memfs).\n")
    print("| workload | unit | " + " | ".join(others) + " | moafs / memfs |")
    print("|---|---|" + "---|" * (len(others) + 1))
    early = {}
    for res in doc["results"]:
        unit = res["reports"][0].get("unit", "ops")
        cells = [fmt(ratio(res, t, base)) for t in others]
        ceil = fmt(ratio(res, "moafs", "memfs")) if "memfs" in targets and "moafs" in targets else "-"
        stopped = stopped_early(res)
        mark = " †" if stopped else ""
        if stopped:
            early[res["workload"]] = stopped
        print(f"| {res['workload']}{mark} | {unit}/s | " + " | ".join(cells) + f" | {ceil} |")
    for w, t in early.items():
        print(f"\n† {w}: runs of {', '.join(t)} stopped early (Filebench's \"could not obtain a "
              "file\": the file set is too small for the threads); not a valid comparison.")
    print(f"\nChart: `{step}.svg`; every run, latency and device counter: `{step}.html`, "
          f"`{step}.txt`.\n")


def paper002(d):
    fs = load(d, "p002-fileserver-scenarios.json")
    vm = load(d, "p002-varmail-background.json")
    if not fs and not vm:
        return
    print("## Paper 002: the system's state (images on the disk, memory cgroup)\n")
    print(env_line(fs or vm) + ".\n")
    print("| figure | ext4 | XFS | moafs |")
    print("|---|---|---|---|")
    rows = []
    if fs:
        r = fs["results"][0]
        rows.append(("fileserver, C over A", [ratio(r, f"{x} [C]", f"{x} [A]") for x in ("ext4", "xfs", "moafs")]))
        rows.append(("fileserver, B over A", [ratio(r, f"{x} [B]", f"{x} [A]") for x in ("ext4", "xfs", "moafs")]))
    if vm:
        r = vm["results"][0]
        rows.append(("varmail, background writes over A", [ratio(r, f"{x} [A+bg]", f"{x} [A]") for x in ("ext4", "xfs", "moafs")]))
        rows.append(("varmail, background writes + fsync over A", [ratio(r, f"{x} [A+bg-fsync]", f"{x} [A]") for x in ("ext4", "xfs", "moafs")]))
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(fmt(c) for c in cells) + " |")
    print()


def paper004(d):
    doc = load(d, "p004-journal.json")
    if not doc:
        return
    print("## Paper 004: journaling modes on DRAM (PostMark)\n")
    print(env_line(doc) + ".\n")
    print("Data journaling and ordered mode over writeback, each file system against itself, "
          "and moafs's ordered mode over ext4's.\n")
    print("| workload:buffer | moafs data / writeback | moafs ordered / writeback | "
          "ext4 data / writeback | ext4 ordered / writeback | moafs ordered / ext4 ordered |")
    print("|---|---|---|---|---|---|")
    for res in doc["results"]:
        m = lambda mode: f"moafs@journal={mode}"
        e = lambda mode: f"ext4@data={mode}"
        cells = [ratio(res, m("data"), m("writeback")), ratio(res, m("ordered"), m("writeback")),
                 ratio(res, e("journal"), e("writeback")), ratio(res, e("ordered"), e("writeback")),
                 ratio(res, m("ordered"), e("ordered"))]
        print(f"| {res['workload']} | " + " | ".join(fmt(c) for c in cells) + " |")
    print()


def models(d):
    for name, title in [("p000-cowrite", "Paper 000: co-writing on the model disk"),
                        ("p001-readahead", "Paper 001: readahead on the model disk and SSD"),
                        ("p003-bytelog", "Paper 003: two-level logging on the model flash card")]:
        doc = load(d, f"{name}.json")
        if not doc:
            continue
        print(f"## {title}\n")
        print(env_line(doc) + ". Modelled device time: the same on any machine to within the engine's few wall-clock policies (PAPERS.md).\n")
        txt = os.path.join(d, f"{name}.txt")
        if os.path.exists(txt):
            with open(txt) as fh:
                print("```\n" + fh.read().rstrip() + "\n```\n")


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "RUN.txt")) as fh:
        run = fh.read()
    print("# Evidence run\n")
    print("```\n" + run.rstrip() + "\n```\n")
    headline(d, "headline-shm", "DRAM (/dev/shm)")
    headline(d, "headline-disk", "the disk")
    paper002(d)
    paper004(d)
    models(d)


if __name__ == "__main__":
    main()
