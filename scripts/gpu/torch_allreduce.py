"""The all-reduce sweep of the GPU check through torch.distributed with the NCCL backend.

Same protocol as comm-gpu's AllReduceSweep and nccl_allreduce.cu: float32 sum, in place, 8 B to
256 MiB doubling; per size and mode 20 warm-up calls, then 5 rounds of 100 calls (20 from 1 MiB),
each printed as microseconds per call on the host clock. "each" waits for every call
(torch.cuda.synchronize()), "pipelined" issues the round's calls and waits once. The world is
RANK/WORLD_SIZE from the environment (default: a world of 1), one process per rank, every rank on
GPU 0 (or TPCOMM_GPU_DEVICE): two ranks of one communicator on one GPU need NCCL 2.30+ and
NCCL_MULTI_RANK_GPU_ENABLE=1 (NVIDIA/nccl src/init.cc, initTransportsRank). Rendezvous over the
loopback (MASTER_ADDR, MASTER_PORT, default 29517). Rank 0 prints.

    python3 torch_allreduce.py [--max-bytes N]

Prints "no GPU found: ..." and exits 2 when torch sees no CUDA device, 3 when torch is missing.
"""
import os
import sys
import time


def main(argv):
    max_bytes = 256 << 20
    if len(argv) == 2 and argv[0] == "--max-bytes":
        max_bytes = int(argv[1])
    elif argv:
        print("usage: torch_allreduce.py [--max-bytes N]", file=sys.stderr)
        return 2
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"torch is not installed: {e}")
        return 3
    if not torch.cuda.is_available():
        print("no GPU found: torch.cuda.is_available() is False")
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = torch.device(f"cuda:{int(os.environ.get('TPCOMM_GPU_DEVICE', '0'))}")
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    version = torch.cuda.nccl.version()  # a tuple (2, 27, 3) in recent releases, an int (2708) in old ones
    nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {nccl}, {torch.cuda.get_device_name(device)}, world {world}, every rank on {device}", flush=True)

    def calls(t, n, each):
        for _ in range(n):
            dist.all_reduce(t)
            if each:
                torch.cuda.synchronize()
        if not each:
            torch.cuda.synchronize()

    size = 8
    while size <= max_bytes:
        t = torch.zeros(size // 4, dtype=torch.float32, device=device)
        iters = 100 if size < (1 << 20) else 20
        for mode in ("each", "pipelined"):
            each = mode == "each"
            calls(t, 20, each)
            rounds = []
            for _ in range(5):
                start = time.perf_counter_ns()
                calls(t, iters, each)
                rounds.append((time.perf_counter_ns() - start) / 1000.0 / iters)
            if rank == 0:
                print(f"sweep torch {mode} {size} " + " ".join(f"{r:.3f}" for r in rounds), flush=True)
        del t
        size *= 2
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
