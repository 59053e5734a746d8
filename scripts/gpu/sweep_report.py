"""Puts the GPU check's all-reduce sweeps side by side (the tables of docs/gpu.md).

Reads every line "sweep <impl> <mode> <bytes> <us> <us> ..." from the files given (the logs of
comm-gpu's AllReduceSweep, nccl_allreduce.cu and torch_allreduce.py; lines starting with "# " are
listed as the programs' own descriptions, other lines are ignored), pools the rounds of each
(impl, mode, size) over all files (the bundle runs every program twice, in opposite orders), and
prints a title saying what the times measure, then one Markdown table per mode: per size, each
implementation's median microseconds per call with the min-max of its rounds, and its ratio to the
C program's median (c-nccl: C calling NCCL directly, the reference). A ratio is printed only when
both have rounds.

What the times measure depends on the world the sweep ran at (--world, --gpus; NVIDIA/nccl v2.30.7):
  world 1: host overhead only. An in-place float32 sum on one rank launches nothing: taskAppend
           (src/enqueue.cc) hands it to ncclLaunchOneRank (src/device/onerank.cu), which returns
           before any CUDA call when the send and receive buffers are the same and the op is not a
           pre-multiplied sum. The columns say "host us/call"; times are flat over sizes.
  world N on fewer GPUs than ranks (two ranks on GPU 0, NCCL_MULTI_RANK_GPU_ENABLE=1): NCCL's
           multi-rank path on one device. The processes' kernels share the GPU (without MPS, kernels
           of two processes' CUDA contexts do not run at the same time), so the times are neither
           two GPUs' bandwidth nor a one-GPU copy rate.
  world N on N GPUs: the collective across GPUs.

    python3 sweep_report.py [--world N] [--gpus G] LOG... > report.md   (default: world 1, 1 GPU)
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


def headers(lines):
    """The programs' own description lines ("# c-nccl: NCCL version code ..."), each once, in order."""
    seen = []
    for line in lines:
        line = line.strip()
        if line.startswith("# ") and line not in seen:
            seen.append(line)
    return seen


def title(world, gpus):
    """The report's title, what its times measure, the column unit and the unit in words, for a
    sweep at `world` ranks on `gpus` GPUs."""
    if world == 1:
        return ("## All-reduce sweep at world size 1 (one rank, GPU 0): host overhead per call, no data moved",
                "At one rank NCCL's in-place float32 sum launches nothing: `taskAppend` (NVIDIA/nccl "
                "`src/enqueue.cc`) hands a single-rank collective to `ncclLaunchOneRank` "
                "(`src/device/onerank.cu`), which returns before any CUDA call when the buffers are "
                "the same and the op is not a pre-multiplied sum. Each time is an implementation's host "
                "path for one call (its own code, NCCL's argument checks and group begin/end, waiting on "
                "a stream or event with nothing in it), so the times are flat over sizes and say "
                "nothing about bandwidth.",
                "host us/call", "host microseconds")
    if gpus < world:
        return (f"## All-reduce sweep at world size {world} on {gpus} GPU{'s' if gpus > 1 else ''} "
                f"({world} processes, NCCL_MULTI_RANK_GPU_ENABLE=1): NCCL's {world}-rank path on one device, "
                "not the bandwidth between GPUs",
                f"{world} ranks of one communicator share GPU 0 (NCCL 2.30+, `src/init.cc` "
                "`initTransportsRank`). NCCL's kernels run and move data between the ranks' buffers in "
                "the same device memory, but without MPS the kernels of different processes' CUDA "
                "contexts do not run at the same time: the GPU switches between them. The times show "
                "that the multi-rank path works and what a call costs there; they are neither the "
                "bandwidth between two GPUs nor a one-GPU copy rate. Read them with the NCCL INFO logs "
                "(transport and channels chosen).",
                "us/call", "microseconds")
    return (f"## All-reduce sweep at world size {world} on {gpus} GPUs",
            "One rank per GPU: the collective across GPUs.",
            "us/call", "microseconds")


def report(rounds, world=1, gpus=1, described=()):
    impls = sorted({k[0] for k in rounds}, key=lambda i: (ORDER.index(i) if i in ORDER else len(ORDER), i))
    modes = [m for m in ("each", "pipelined") if any(k[1] == m for k in rounds)]
    heading, what, unit, per = title(world, gpus)
    out = [heading, "", what, ""]
    if described:
        out.append("Programs, as they describe themselves:")
        out.append("")
        out.extend(f"- `{d[2:]}`" for d in described)
        out.append("")
    for mode in modes:
        sizes = sorted({k[2] for k in rounds if k[1] == mode})
        out.append(f"### {mode}: {per} per all-reduce call, median of the rounds (min-max); ratio to {REFERENCE}")
        out.append("")
        head = ["size"]
        for i in impls:
            head.append(f"{i} {unit}")
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
    text = report(r, described=headers(lines))
    assert "| 8 B | 11.00 (9.00-13.00) | 21.00 (19.00-30.00) | 1.91 | 15.00 (15.00-15.00) | 1.36 |" in text, text
    assert "| 1 MiB | - | 6.00 (5.00-7.00) | - | - | - |" in text, text
    assert text.index("### each") < text.index("### pipelined"), text
    assert text.startswith("## All-reduce sweep at world size 1 (one rank, GPU 0): host overhead per call"), text
    assert "| size | c-nccl host us/call | tpcomm-javacpp host us/call | tpcomm-javacpp / c-nccl |" in text, text
    assert "- `c-nccl: NCCL version code 23007`" in text, text
    two = report(r, world=2, gpus=1)
    assert two.startswith("## All-reduce sweep at world size 2 on 1 GPU (2 processes"), two
    assert "not the bandwidth between GPUs" in two and "| size | c-nccl us/call |" in two, two
    assert "host" not in two.split("\n")[0], two
    print("sweep_report.py self-test passed")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    world, gpus, paths = 1, 1, []
    i = 0
    while i < len(argv):
        if argv[i] in ("--world", "--gpus") and i + 1 < len(argv) and argv[i + 1].isdigit() and int(argv[i + 1]) >= 1:
            if argv[i] == "--world":
                world = int(argv[i + 1])
            else:
                gpus = int(argv[i + 1])
            i += 2
        elif argv[i].startswith("--"):
            print(__doc__, file=sys.stderr)
            return 2
        else:
            paths.append(argv[i])
            i += 1
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    lines = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines.extend(f)
    rounds = parse(lines)
    if not rounds:
        print("no sweep lines in " + ", ".join(paths), file=sys.stderr)
        return 1
    print(report(rounds, world=world, gpus=min(gpus, world), described=headers(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
