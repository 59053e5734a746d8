#!/usr/bin/env python3
"""The Markdown table of scripts/user-table.sh: what a user gets, next to C in the same rounds.

usage: user_table_report.py RUNS_CSV LABEL

RUNS_CSV holds round,row,value lines (µs; see user-table.sh for the rows). Each cell is the median
over the rounds with the range in brackets; a ratio is taken per round (tpcomm over the peer of the
same round) and reported as the median of those, with their range, so that it compares runs that
met the same machine state. The goal column is issue 37's, with how many rounds met it.
"""
import statistics
import sys

runs = {}
for line in open(sys.argv[1]):
    r, row, value = line.strip().split(",")
    runs.setdefault(row, {})[int(r)] = float(value)
label = sys.argv[2] if len(sys.argv) > 2 else ""


def fmt(x):
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def cell(row, unit=" µs"):
    v = list(runs[row].values())
    return f"{fmt(statistics.median(v))}{unit} ({fmt(min(v))}-{fmt(max(v))})"


def ratios(num, den):
    return [runs[num][r] / runs[den][r] for r in runs[num] if r in runs.get(den, {})]


def ratio_cell(num, den):
    q = ratios(num, den)
    return f"{statistics.median(q):.2f}x ({min(q):.2f}-{max(q):.2f})"


def verdict(values, goal):
    met = sum(1 for x in values if x <= goal)
    if met == len(values):
        return "met"
    if statistics.median(values) <= goal:
        return f"met by the median, in {met} of {len(values)} rounds"
    if met == 0:
        return "**missed**"
    return f"**missed** (met in {met} of {len(values)} rounds)"


def have(*rows):
    return all(r in runs for r in rows)


rows = []
if have("local_8"):
    v = list(runs["local_8"].values())
    rows.append(("in-process 8 B, 4 ranks, `scripts/bench.sh`", cell("local_8"), "-", "-", f"≤ 1 µs: {verdict(v, 1.0)}"))
if have("local_steady_w0"):
    v = list(runs["local_steady_w0"].values())
    rows.append(("in-process 8 B, 4 ranks, `runLocalWorld` from `runBlocking`, steady state (`FirstCallsBench`)",
                 cell("local_steady_w0"), "-", "-", f"≤ 1 µs: {verdict(v, 1.0)}"))
if have("local_1m", "c_allreduce4_1m"):
    rows.append(("in-process 1 MiB, 4 ranks, `scripts/bench.sh`", cell("local_1m"),
                 f"C `allreduce4`, 2 threads: {cell('c_allreduce4_1m')}", ratio_cell("local_1m", "c_allreduce4_1m"),
                 f"≤ 1.2x: {verdict(ratios('local_1m', 'c_allreduce4_1m'), 1.2)}"))
if have("local_64m", "c_allreduce4_64m"):
    rows.append(("in-process 64 MiB, 4 ranks", cell("local_64m"),
                 f"C `allreduce4`, 2 threads: {cell('c_allreduce4_64m')}", ratio_cell("local_64m", "c_allreduce4_64m"), "-"))
names = {"openmpi": "Open MPI", "mpich": "MPICH"}
for mpi in ("openmpi", "mpich"):
    for size, what, goal in ((8, "8 B", 1.5), (1048576, "1 MiB", None)):
        t, c, m = f"{mpi}_tpcomm_{size}", f"{mpi}_inplace_{size}", f"{mpi}_multiple_{size}"
        if not have(t, c, m):
            continue
        rows.append((f"{names[mpi]} {what}, 2 ranks, `allReduce` from `runBlocking` (`MpiAllReduceBench`)", cell(t),
                     f"C in place: {cell(c)}; at `MPI_THREAD_MULTIPLE`: {cell(m)}",
                     f"{ratio_cell(t, c)}; {ratio_cell(t, m)} against `MULTIPLE`",
                     f"≤ {goal}x: {verdict(ratios(t, c), goal)}" if goal else "-"))
for config, name in (("local", "in-process 4 ranks"), ("openmpi", "Open MPI 2 ranks"), ("mpich", "MPICH 2 ranks")):
    for warm in (0, 2):
        f, s = f"{config}_first20k_w{warm}", f"{config}_steady_w{warm}"
        if not have(f, s):
            continue
        how = "a fresh JVM's first 20,000 8 B calls against its steady state" if warm == 0 else \
            f"the same with `CommConfig.warmUp` of {warm} s (opt-in; creation {warm} s longer)"
        rows.append((f"{how}, {name} (`FirstCallsBench`)", cell(f), f"its steady state: {cell(s)}",
                     ratio_cell(f, s), f"≤ 2x: {verdict(ratios(f, s), 2.0)}"))
if have("none_first20k", "none_steady"):
    rows.append(("the floor: a fresh JVM's first 20,000 calls of the same loop to a communicator that only adds 1 "
                 "to the tensor, no library call (`FirstCallsBench none`)", cell("none_first20k"),
                 f"its steady state: {cell('none_steady')}", ratio_cell("none_first20k", "none_steady"),
                 "what the JIT charges the caller's own loop: the least the same loop averages with any communicator"))

n = max(len(v) for v in runs.values())
print(f"{n} alternating rounds ({label}); median (range) over the rounds, ratios per round.\n")
print("| what | tpcomm | peer in the same rounds | ratio | goal (issue 37) |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
