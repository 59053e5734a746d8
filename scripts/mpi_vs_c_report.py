#!/usr/bin/env python3
"""Summarises the runs of scripts/mpi-vs-c.sh for one MPI implementation as Markdown.

usage: mpi_vs_c_report.py RUNS_CSV "PATH ..." MPI [MPIRUN_FLAGS]

RUNS_CSV holds, round after round, the CSV lines of C (impl "C"), C calling MPI_Allreduce in place
("C in place"), the same at MPI_THREAD_MULTIPLE ("C in place multiple"), and tpcomm on each call
path ("tpcomm <path>"). Two tables: each program's min / median over its runs, and the ratio of each
tpcomm run to the C runs of the same round (median, with the min and max), which compares runs
that met the same machine state.
"""
import csv
import statistics
import sys

path = sys.argv[1]
paths = sys.argv[2].split()
mpi = {"openmpi": "Open MPI", "mpich": "MPICH"}.get(sys.argv[3], sys.argv[3])
flags = sys.argv[4].strip() if len(sys.argv) > 4 else ""
runs = {}
world = None
for impl, coll, w, size, t, *_ in csv.reader(open(path)):
    runs.setdefault((impl, int(size)), []).append(float(t))
    world = w
sizes = sorted({s for (_, s) in runs if s <= 16777216})
rounds = len(runs.get(("C", sizes[0]), []))


def fmt(x):
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


bases = [b for b in ["C", "C in place", "C in place multiple"] if any(i == b for (i, _) in runs)]
impls = bases + [f"tpcomm {p}" for p in paths]
print(f"Float32 all-reduce, {world} ranks, {mpi}{', mpirun ' + flags if flags else ''}, {rounds} alternating rounds.\n")
print("µs, min / median of each program's runs:\n")
print("| bytes | " + " | ".join(impls) + " |")
print("|" + "---|" * (1 + len(impls)))
for s in sizes:
    cells = []
    for i in impls:
        v = runs.get((i, s))
        cells.append(f"{fmt(min(v))} / {fmt(statistics.median(v))}" if v else "-")
    print(f"| {s} | " + " | ".join(cells) + " |")

print("\nEach tpcomm run over the C run of its round: median [min..max]:\n")
pairs = [(p, b) for p in paths for b in bases if b != "C in place multiple" or p == paths[0]]
print("| bytes | " + " | ".join(f"{p} / {b}" for p, b in pairs) + " |")
print("|" + "---|" * (1 + len(pairs)))
for s in sizes:
    cells = []
    for p, b in pairs:
        r = sorted(x / y for x, y in zip(runs.get((f"tpcomm {p}", s), []), runs.get((b, s), [])))
        cells.append(f"{statistics.median(r):.2f} [{r[0]:.2f}..{r[-1]:.2f}]" if r else "-")
    print(f"| {s} | " + " | ".join(cells) + " |")
