// The all-reduce sweep of the GPU check in C, calling NCCL directly: the reference that tpcomm's
// engine (comm-gpu AllReduceSweep) and torch.distributed (torch_allreduce.py) are compared with.
// Same protocol as AllReduceSweep: float32 sum, in place, 8 B .. 256 MiB doubling; per size and mode
// 20 warm-up calls, then 5 rounds of 100 calls (20 from 1 MiB), each round printed as microseconds
// per call on the host clock; "each" waits for every call (cudaStreamSynchronize), "pipelined"
// issues the round's calls and waits once. A world of 1 on GPU 0 by default; a world of N with one
// process per rank started with --world N --rank R --id-file PATH (uniqueid_file.h), all on GPU 0
// unless --device: two ranks of one communicator on one GPU need NCCL 2.30+ and
// NCCL_MULTI_RANK_GPU_ENABLE=1 (NVIDIA/nccl src/init.cc, initTransportsRank). Rank 0 prints.
//
//   nvcc -O2 -o nccl_allreduce nccl_allreduce.cu -I$NCCL/include -L$NCCL/lib -lnccl
//   ./nccl_allreduce [--nonblocking] [--max-bytes N] [--world N --rank R --id-file PATH] [--device D]
//
// At a world of 1 an in-place sum launches nothing (src/enqueue.cc taskAppend -> ncclLaunchOneRank,
// src/device/onerank.cu): the times are the host path of a call. At 2 ranks on one GPU both ranks'
// kernels run on the same device: NCCL's two-rank path, not the bandwidth between two GPUs.
//
// --nonblocking initialises the communicator with ncclConfig_t.blocking = 0 (what tpcomm uses) and
// polls ncclCommGetAsyncError after every call until it leaves ncclInProgress (NVIDIA/nccl
// docs/userguide/source/usage/communicators.rst, non-blocking communicators).
// Prints "no GPU found: ..." and exits 2 when the CUDA runtime sees no device.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uniqueid_file.h"

#define CUDA(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NCCL(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess && r_ != ncclInProgress) { \
  fprintf(stderr, "%s failed: %s\n", #call, ncclGetErrorString(r_)); exit(1); } } while (0)

static int nonblocking = 0;

static void ready(ncclComm_t comm) {
  if (!nonblocking) return;
  ncclResult_t state;
  do { NCCL(ncclCommGetAsyncError(comm, &state)); } while (state == ncclInProgress);
  if (state != ncclSuccess) { fprintf(stderr, "async error: %s\n", ncclGetErrorString(state)); exit(1); }
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void calls(ncclComm_t comm, cudaStream_t s, float* buf, size_t count, int n, int each) {
  for (int i = 0; i < n; i++) {
    NCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, s));
    ready(comm);
    if (each) CUDA(cudaStreamSynchronize(s));
  }
  if (!each) CUDA(cudaStreamSynchronize(s));
}

int main(int argc, char** argv) {
  size_t maxBytes = (size_t)256 << 20;
  struct world_args w = {1, 0, 0, NULL};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--nonblocking")) nonblocking = 1;
    else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) maxBytes = strtoull(argv[++i], NULL, 10);
    else if (world_arg(&w, argc, argv, &i)) continue;
    else { fprintf(stderr, "usage: %s [--nonblocking] [--max-bytes N] [--world N --rank R --id-file PATH] [--device D]\n", argv[0]); return 2; }
  }
  if (world_check(&w)) return 2;
  if (world_no_gpu()) return 2;
  CUDA(cudaSetDevice(w.device));
  int version = 0;
  NCCL(ncclGetVersion(&version));
  cudaDeviceProp prop;
  CUDA(cudaGetDeviceProperties(&prop, w.device));
  if (w.rank == 0)
    printf("# %s: NCCL version code %d, %s, %s communicator, world %d, every rank on device %d\n",
           nonblocking ? "c-nccl-nonblocking" : "c-nccl", version, prop.name, nonblocking ? "non-blocking" : "blocking",
           w.world, w.device);

  ncclUniqueId id;
  if (w.rank == 0) NCCL(ncclGetUniqueId(&id));
  if (share_unique_id(&w, &id, 120)) return 1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = nonblocking ? 0 : 1;
  ncclComm_t comm;
  NCCL(ncclCommInitRankConfig(&comm, w.world, id, w.rank, &config));
  ready(comm);
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* buf;
  CUDA(cudaMalloc((void**)&buf, maxBytes));
  CUDA(cudaMemset(buf, 0, maxBytes));
  const char* impl = nonblocking ? "c-nccl-nonblocking" : "c-nccl";

  for (size_t bytes = 8; bytes <= maxBytes; bytes *= 2) {
    size_t count = bytes / 4;
    int iters = bytes < ((size_t)1 << 20) ? 100 : 20;
    for (int each = 1; each >= 0; each--) {
      calls(comm, s, buf, count, 20, each);
      double us[5];
      for (int r = 0; r < 5; r++) {
        double start = now_us();
        calls(comm, s, buf, count, iters, each);
        us[r] = (now_us() - start) / iters;
      }
      if (w.rank == 0) {
        printf("sweep %s %s %zu", impl, each ? "each" : "pipelined", bytes);
        for (int r = 0; r < 5; r++) printf(" %.3f", us[r]);
        printf("\n");
        fflush(stdout);
      }
    }
  }
  CUDA(cudaFree(buf));
  CUDA(cudaStreamDestroy(s));
  NCCL(ncclCommFinalize(comm));
  ready(comm);
  NCCL(ncclCommDestroy(comm));
  return 0;
}
