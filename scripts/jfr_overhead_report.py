#!/usr/bin/env python3
"""Summarises scripts/jfr-overhead.sh's JMH JSON files (r<round>-<backend>-<variant>.json)."""
import glob, json, os, re, statistics, sys

out = sys.argv[1]
data = {}  # (backend, variant) -> {round: [iteration scores]}
for f in glob.glob(os.path.join(out, "r*-*-*.json")):
    m = re.match(r"r(\d+)-(\w+)-(\w+)\.json", os.path.basename(f))
    rnd, backend, variant = int(m.group(1)), m.group(2), m.group(3)
    try:
        runs = json.load(open(f))
    except Exception:
        continue
    for run in runs:
        raw = [x for fork in run["primaryMetric"]["rawData"] for x in fork]
        data.setdefault((backend, variant), {})[rnd] = raw

for f in glob.glob(os.path.join(out, "cpu-r*-*-*.txt")):
    m = re.match(r"cpu-r(\d+)-(\w+)-(\w+)\.txt", os.path.basename(f))
    rnd, backend, variant = int(m.group(1)), m.group(2), m.group(3)
    xs = [float(l.split()[3]) for l in open(f) if l.startswith("sample ")]
    if xs:
        data.setdefault((backend + " (cpu)", variant), {})[rnd] = xs

variants = ["eventsCompiledOut", "eventsOff", "jfrTpcommJfc", "jfrEveryOp"]
for backend in sorted({b for b, _ in data}):
    base = data.get((backend, "eventsCompiledOut"), {})
    print(f"backend {backend} (ns per 8-byte all-reduce; {len(base)} rounds)")
    print(f"  {'variant':18} {'median of fork medians':>24} {'range of fork medians':>24} {'median of fork mins':>20} {'paired ratio (median, range)':>30}")
    for v in variants:
        rounds = data.get((backend, v), {})
        if not rounds:
            continue
        meds = [statistics.median(x) for x in rounds.values()]
        mins = [min(x) for x in rounds.values()]
        ratios = [statistics.median(rounds[r]) / statistics.median(base[r]) for r in rounds if r in base]
        ratio = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else "-"
        print(f"  {v:18} {statistics.median(meds):24.1f} {min(meds):11.1f}-{max(meds):<12.1f} {statistics.median(mins):20.1f} {ratio:>30}")
