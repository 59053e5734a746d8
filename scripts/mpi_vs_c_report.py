#!/usr/bin/env python3
"""Summarises the runs of scripts/mpi-vs-c.sh as Markdown.

usage: mpi_vs_c_report.py RUNS_CSV ["LEVEL ..."] [MPIRUN_FLAGS]

RUNS_CSV holds, round after round, the CSV lines of C (impl "C"), optionally of C calling
MPI_Allreduce in place (impl "C in place"), and of tpcomm at each level (impl "tpcomm <Level>").
Two tables: each program's min / median over its runs, and the ratio of each tpcomm run to the C
runs of the same round (median, with the quartiles), which compares runs that met the same
machine state.
"""
import csv
import statistics
import sys

path = sys.argv[1]
levels = (sys.argv[2] if len(sys.argv) > 2 else "Single Multiple").split()
flags = sys.argv[3].strip() if len(sys.argv) > 3 else ""
runs = {}
world = None
for impl, coll, w, size, t, *_ in csv.reader(open(path)):
    runs.setdefault((impl, int(size)), []).append(float(t))
    world = w
sizes = sorted({s for (_, s) in runs if s <= 16777216})
rounds = len(runs.get(("C", sizes[0]), []))


def fmt(x):
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


bases = ["C"] + (["C in place"] if any(i == "C in place" for (i, _) in runs) else [])
impls = bases + [f"tpcomm {l}" for l in levels]
print(f"Float32 all-reduce, {world} ranks, Open MPI{', mpirun ' + flags if flags else ''}, {rounds} alternating rounds.\n")
print("µs, min / median of each program's runs; ratios to C's min / median:\n")
print("| bytes | " + " | ".join(impls) + " | " + " | ".join(f"{l} / C" for l in levels) + " |")
print("|" + "---|" * (1 + len(impls) + len(levels)))
for s in sizes:
    c = runs.get(("C", s))
    cells = []
    for i in impls:
        v = runs.get((i, s))
        cells.append(f"{fmt(min(v))} / {fmt(statistics.median(v))}" if v else "-")
    ratios = []
    for l in levels:
        v = runs.get((f"tpcomm {l}", s))
        ratios.append(f"{min(v) / min(c):.2f} / {statistics.median(v) / statistics.median(c):.2f}" if v and c else "-")
    print(f"| {s} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")

print("\nEach tpcomm run over the C run of its round: median [first..third quartile]:\n")
pairs = [(l, b) for l in levels for b in bases]
print("| bytes | " + " | ".join(f"{l} / {b}" for l, b in pairs) + " |")
print("|" + "---|" * (1 + len(pairs)))
for s in sizes:
    cells = []
    for l, b in pairs:
        r = sorted(x / y for x, y in zip(runs.get((f"tpcomm {l}", s), []), runs.get((b, s), [])))
        cells.append(f"{statistics.median(r):.2f} [{r[len(r) // 4]:.2f}..{r[(3 * len(r)) // 4]:.2f}]" if r else "-")
    print(f"| {s} | " + " | ".join(cells) + " |")
