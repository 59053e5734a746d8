"""Puts the GPU check's all-reduce sweeps side by side (the tables of docs/gpu.md).

Reads every line "sweep <impl> <mode> <bytes> <us> <us> ..." from the files given (the logs of
comm-gpu's AllReduceSweep, nccl_allreduce.cu and torch_allreduce.py; other lines are ignored),
pools the rounds of each (impl, mode, size) over all files (the bundle runs every program twice,
in opposite orders), and prints one Markdown table per mode: per size, each implementation's median
microseconds per call with the min-max of its rounds, and its ratio to the C program's median
(c-nccl: C calling NCCL directly, the reference). A ratio is printed only when both have rounds.

    python3 sweep_report.py LOG... > report.md
    python3 sweep_report.py --self-test
"""
import statistics
import sys

REFERENCE = "c-nccl"
ORDER = ["c-nccl", "tpcomm-javacpp", "tpcomm-ffm", "torch", "c-nccl-nonblocking"]


def parse(lines):
    rounds = {}
    for line in lines:
        f = line.split()
        if len(f) < 5 or f[0] != "sweep":
            continue
        impl, mode, size = f[1], f[2], int(f[3])
        rounds.setdefault((impl, mode, size), []).extend(float(x) for x in f[4:])
    return rounds


def human(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def report(rounds):
    impls = sorted({k[0] for k in rounds}, key=lambda i: (ORDER.index(i) if i in ORDER else len(ORDER), i))
    modes = [m for m in ("each", "pipelined") if any(k[1] == m for k in rounds)]
    out = []
    for mode in modes:
        sizes = sorted({k[2] for k in rounds if k[1] == mode})
        out.append(f"### {mode}: microseconds per all-reduce call, median of the rounds (min-max); ratio to {REFERENCE}")
        out.append("")
        head = ["size"]
        for i in impls:
            head.append(f"{i} us")
            if i != REFERENCE and REFERENCE in impls:
                head.append(f"{i} / {REFERENCE}")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for size in sizes:
            ref = rounds.get((REFERENCE, mode, size))
            ref_median = statistics.median(ref) if ref else None
            row = [human(size)]
            for i in impls:
                r = rounds.get((i, mode, size))
                row.append(f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" if r else "-")
                if i != REFERENCE and REFERENCE in impls:
                    row.append(f"{statistics.median(r) / ref_median:.2f}" if r and ref_median else "-")
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def self_test():
    lines = [
        "# c-nccl: NCCL version code 23007",
        "sweep c-nccl each 8 10.0 12.0 11.0",
        "sweep c-nccl each 8 9.0 13.0",
        "sweep tpcomm-javacpp each 8 22.0 20.0 21.0 30.0 19.0",
        "sweep torch each 8 15.0",
        "sweep tpcomm-javacpp pipelined 1048576 5.0 7.0 6.0",
        "rank 0: 10 passed",
    ]
    r = parse(lines)
    assert r[("c-nccl", "each", 8)] == [10.0, 12.0, 11.0, 9.0, 13.0], r
    text = report(r)
    assert "| 8 B | 11.00 (9.00-13.00) | 21.00 (19.00-30.00) | 1.91 | 15.00 (15.00-15.00) | 1.36 |" in text, text
    assert "| 1 MiB | - | 6.00 (5.00-7.00) | - | - | - |" in text, text
    assert text.index("### each") < text.index("### pipelined"), text
    print("sweep_report.py self-test passed")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    lines = []
    for path in argv:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines.extend(f)
    rounds = parse(lines)
    if not rounds:
        print("no sweep lines in " + ", ".join(argv), file=sys.stderr)
        return 1
    print(report(rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
