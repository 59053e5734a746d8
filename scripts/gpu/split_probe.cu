// What a non-blocking ncclCommSplit does, seen from the caller, on a real NCCL: the facts tpcomm's
// engine relies on (docs/gpu.md, "Non-blocking communicators"; comm-gpu NcclCommunicator.split) and
// its simulator copies (comm-gpu SimulatedNccl), printed so a GPU run can confirm or refute them.
//
// NVIDIA/nccl v2.30.7, src/init.cc: ncclCommSplit -> ncclCommInitChildComm sets *newcomm =
// NCCL_COMM_NULL ("should be NCCL_COMM_NULL until comm split fully complete") and queues the child's
// init job (ncclAsyncLaunch inside the split's own group); src/group.cc ncclGroupEndInternal starts a
// thread for a non-blocking group, marks the parent ncclInProgress and returns ncclInProgress, which
// ncclCommSplit's trailing NCCLCHECK(ncclGroupEndInternal()) lets pass: the split returns its own res
// (src/include/checks.h NCCLCHECK; docs/nccl-semantics.md N4). The job (ncclCommInitRankFunc) stores
// the child into *newcomm at its end, and groupLaunch then sets the parent's async error to the
// group's result. Expected: ncclSuccess returned (while the child is still being built), *newcomm
// NULL right after, the parent's ncclCommGetAsyncError ncclInProgress right after, *newcomm non-NULL
// shortly before the parent leaves ncclInProgress; with NCCL_SPLIT_NOCOLOR *newcomm stays NULL.
//
// Cases, each on a fresh non-blocking parent of the whole world:
//   split    every rank color 0, key = rank
//   nocolor  rank 0 NCCL_SPLIT_NOCOLOR, the others color 0 (at a world of 1: nobody gets a child)
// For each it prints what ncclCommSplit returned, *newcomm right after the return, the parent's
// ncclCommGetAsyncError right after, then polls (yielding between polls) and prints when, in
// microseconds after the call returned, *newcomm became non-NULL and the parent left ncclInProgress,
// then the child's own state, a one-element all-reduce on the child, and the teardown.
//
//   nvcc -O2 -o split_probe split_probe.cu -I$NCCL/include -L$NCCL/lib -lnccl
//   ./split_probe [--world N --rank R --id-file PATH] [--device D] [--timeout S]
// (a world of N: one process per rank, the same fresh --id-file; two ranks on one GPU need NCCL 2.30+
// and NCCL_MULTI_RANK_GPU_ENABLE=1). Prints "no GPU found: ..." and exits 2 without a CUDA device;
// exits 1 when a call fails or a wait passes the timeout (default 60 s).
#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uniqueid_file.h"

static struct world_args w = {1, 0, 0, NULL};
// Stored into newcomm before the call, to show whether ncclCommSplit writes it (NULL) before returning.
#define SENTINEL ((ncclComm_t)0x1)
#define IS_CHILD(c) ((c) != NULL && (c) != SENTINEL)
static double timeout_s = 60;

static const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "other";
  }
}

#define CUDA(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
  printf("rank %d: %s failed: %s\n", w.rank, #call, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NCCL(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess && r_ != ncclInProgress) { \
  printf("rank %d: %s failed: %d %s (%s)\n", w.rank, #call, (int)r_, result_name(r_), ncclGetErrorString(r_)); exit(1); } } while (0)

static ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclInternalError;
  NCCL(ncclCommGetAsyncError(comm, &state));
  return state;
}

// Polls comm until it leaves ncclInProgress; returns its state then, and the wait in *us.
static ncclResult_t wait_ready(ncclComm_t comm, const char* what, double* us) {
  double start = world_now_us();
  ncclResult_t state;
  while ((state = async_state(comm)) == ncclInProgress) {
    if (world_now_us() - start > timeout_s * 1e6) {
      printf("rank %d: %s still ncclInProgress after %.0f s\n", w.rank, what, timeout_s);
      exit(1);
    }
    sched_yield();
  }
  if (us) *us = world_now_us() - start;
  if (state != ncclSuccess) {
    printf("rank %d: %s ended in %d %s: %s\n", w.rank, what, (int)state, result_name(state), ncclGetLastError(comm));
    exit(1);
  }
  return state;
}

static ncclComm_t make_parent(const ncclUniqueId* id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  double start = world_now_us();
  ncclResult_t rc = ncclCommInitRankConfig(&comm, w.world, *id, w.rank, &config);
  double returned = world_now_us() - start;
  if (rc != ncclSuccess && rc != ncclInProgress) {
    printf("rank %d: ncclCommInitRankConfig(non-blocking) failed: %d %s (%s)\n", w.rank, (int)rc, result_name(rc), ncclGetErrorString(rc));
    exit(1);
  }
  double us = 0;
  wait_ready(comm, "parent init", &us);
  printf("rank %d: init (non-blocking, world %d): returned %s after %.1f us, ready %.1f us later\n",
         w.rank, w.world, result_name(rc), returned, us);
  return comm;
}

static void destroy(ncclComm_t comm, const char* what) {
  NCCL(ncclCommFinalize(comm));
  double us = 0;
  wait_ready(comm, what, &us);
  NCCL(ncclCommDestroy(comm));
  printf("rank %d: %s finalized in %.1f us and destroyed\n", w.rank, what, us);
}

static int probe_split(const char* name, const ncclUniqueId* id, int color) {
  ncclComm_t parent = make_parent(id);
  ncclComm_t child = SENTINEL;
  printf("rank %d: [%s] ncclCommSplit(parent, color %d, key %d, &newcomm, NULL), newcomm = %p before the call\n",
         w.rank, name, color, w.rank, (void*)child);
  double start = world_now_us();
  ncclResult_t rc = ncclCommSplit(parent, color, w.rank, &child, NULL);
  double returned = world_now_us();
  ncclComm_t after = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
  ncclResult_t parentAfter = async_state(parent);
  printf("rank %d: [%s] returned %d %s after %.1f us\n", w.rank, name, (int)rc, result_name(rc), returned - start);
  printf("rank %d: [%s] *newcomm right after the return = %p\n", w.rank, name, (void*)after);
  printf("rank %d: [%s] parent ncclCommGetAsyncError right after = %d %s\n", w.rank, name, (int)parentAfter, result_name(parentAfter));
  if (rc != ncclSuccess && rc != ncclInProgress) return 1;
  if (after == SENTINEL) printf("rank %d: [%s] (the call did not write *newcomm before returning)\n", w.rank, name);

  double childSeen = -1, parentReady = -1;
  ncclResult_t parentState = parentAfter, childStateAtSight = ncclSuccess;
  long polls = 0;
  if (parentState != ncclInProgress) parentReady = 0;
  if (IS_CHILD(after)) { childSeen = 0; childStateAtSight = async_state(after); }
  while (parentReady < 0 || (childSeen < 0 && color != NCCL_SPLIT_NOCOLOR)) {
    double now = world_now_us();
    if (now - returned > timeout_s * 1e6) {
      printf("rank %d: [%s] after %.0f s: *newcomm %s, parent %s\n", w.rank, name, timeout_s,
             childSeen < 0 ? "not set" : "set", result_name(parentState));
      return 1;
    }
    ncclComm_t c = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
    if (childSeen < 0 && IS_CHILD(c)) {
      childSeen = world_now_us() - returned;
      childStateAtSight = async_state(c);
    }
    if (parentReady < 0) {
      parentState = async_state(parent);
      if (parentState != ncclInProgress) parentReady = world_now_us() - returned;
    }
    polls++;
    sched_yield();
  }
  if (childSeen >= 0)
    printf("rank %d: [%s] *newcomm became %p %.1f us after the return (its own async error then: %s)\n",
           w.rank, name, (void*)child, childSeen, result_name(childStateAtSight));
  else
    printf("rank %d: [%s] *newcomm is %p once the parent is ready (no color): no child\n", w.rank, name,
           (void*)__atomic_load_n(&child, __ATOMIC_ACQUIRE));
  printf("rank %d: [%s] the parent left ncclInProgress %.1f us after the return, as %d %s (%ld polls)\n",
         w.rank, name, parentReady, (int)parentState, result_name(parentState), polls);
  if (childSeen >= 0)
    printf("rank %d: [%s] order: %s\n", w.rank, name,
           childSeen < parentReady ? "*newcomm set before the parent left ncclInProgress"
           : childSeen == parentReady ? "both seen at the same poll" : "the parent left ncclInProgress first");
  if (parentState != ncclSuccess) return 1;

  if (IS_CHILD(child)) {
    double us = 0;
    wait_ready(child, "child", &us);
    int n = 0, r = 0;
    NCCL(ncclCommCount(child, &n));
    NCCL(ncclCommUserRank(child, &r));
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* d;
    CUDA(cudaMalloc((void**)&d, sizeof(float)));
    float one = 1.0f, sum = 0;
    CUDA(cudaMemcpy(d, &one, sizeof one, cudaMemcpyHostToDevice));
    NCCL(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, child, s));
    wait_ready(child, "child all-reduce", NULL);
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaMemcpy(&sum, d, sizeof sum, cudaMemcpyDeviceToHost));
    printf("rank %d: [%s] child: rank %d of %d, ready %.1f us after first seen; all-reduce of 1.0 gave %.1f (expected %d)\n",
           w.rank, name, r, n, us, sum, n);
    CUDA(cudaFree(d));
    CUDA(cudaStreamDestroy(s));
    destroy(child, "child");
    if (sum != (float)n) return 1;
  }
  destroy(parent, "parent");
  return 0;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (world_arg(&w, argc, argv, &i)) continue;
    if (!strcmp(argv[i], "--timeout") && i + 1 < argc) { timeout_s = atof(argv[++i]); continue; }
    fprintf(stderr, "usage: %s [--world N --rank R --id-file PATH] [--device D] [--timeout S]\n", argv[0]);
    return 2;
  }
  if (world_check(&w)) return 2;
  if (world_no_gpu()) return 2;
  CUDA(cudaSetDevice(w.device));
  int version = 0;
  NCCL(ncclGetVersion(&version));
  cudaDeviceProp prop;
  CUDA(cudaGetDeviceProperties(&prop, w.device));
  printf("# split_probe: NCCL version code %d, %s, rank %d of %d on device %d, NCCL_MULTI_RANK_GPU_ENABLE=%s\n",
         version, prop.name, w.rank, w.world, w.device,
         getenv("NCCL_MULTI_RANK_GPU_ENABLE") ? getenv("NCCL_MULTI_RANK_GPU_ENABLE") : "(unset)");
  fflush(stdout);

  // One unique id per parent: the file rendezvous is used once per case, at PATH.1 and PATH.2.
  int failed = 0;
  const char* names[2] = {"split", "nocolor"};
  for (int c = 0; c < 2; c++) {
    struct world_args wc = w;
    char path[4096];
    if (w.id_file) { snprintf(path, sizeof path, "%s.%d", w.id_file, c + 1); wc.id_file = path; }
    ncclUniqueId id;
    if (w.rank == 0) NCCL(ncclGetUniqueId(&id));
    if (share_unique_id(&wc, &id, timeout_s)) return 1;
    int color = (c == 1 && w.rank == 0) ? NCCL_SPLIT_NOCOLOR : 0;
    int rc = probe_split(names[c], &id, color);
    printf("rank %d: [%s] %s\n", w.rank, names[c], rc == 0 ? "done" : "FAILED");
    fflush(stdout);
    failed |= rc;
  }
  return failed ? 1 : 0;
}
