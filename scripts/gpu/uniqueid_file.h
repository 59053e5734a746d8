// Shared by the C programs of the GPU check (nccl_allreduce.cu, split_probe.cu): the "no GPU found"
// check, the command line of a world of several processes and the file rendezvous that brings rank 0's ncclUniqueId to the
// others, as tpcomm's FileStore does for the JVMs (docs/gpu.md). Rank 0 writes the 128 bytes to
// PATH.tmp and renames it to PATH (atomic on one filesystem), the others poll for PATH.
//
//   --world N --rank R --id-file PATH   (defaults: a world of 1, rank 0, no file)
//   --device D                          (default 0: every rank on GPU 0; from NCCL 2.30 two ranks
//                                        of one communicator may share a GPU with
//                                        NCCL_MULTI_RANK_GPU_ENABLE=1, NVIDIA/nccl src/init.cc
//                                        initTransportsRank)
#ifndef TPCOMM_UNIQUEID_FILE_H
#define TPCOMM_UNIQUEID_FILE_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// Prints "no GPU found: ..." and returns 1 when the CUDA runtime sees no device (the line the bundle's
// scripts and compile-check.sh look for; the programs then exit with 2); 0 otherwise.
static int world_no_gpu(void) {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    printf("no GPU found: cudaGetDeviceCount: %s, %d device(s)\n", cudaGetErrorString(e), devices);
    return 1;
  }
  return 0;
}

struct world_args {
  int world, rank, device;
  const char* id_file;
};

static double world_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// Consumes argv[*i] (and its value) when it is one of the world's options; returns 1 then, else 0.
static int world_arg(struct world_args* w, int argc, char** argv, int* i) {
  const char* a = argv[*i];
  if (*i + 1 >= argc) return 0;
  if (!strcmp(a, "--world")) w->world = atoi(argv[++*i]);
  else if (!strcmp(a, "--rank")) w->rank = atoi(argv[++*i]);
  else if (!strcmp(a, "--device")) w->device = atoi(argv[++*i]);
  else if (!strcmp(a, "--id-file")) w->id_file = argv[++*i];
  else return 0;
  return 1;
}

// 0 when the options make a world: 1 <= world, 0 <= rank < world, an --id-file when world > 1.
static int world_check(const struct world_args* w) {
  if (w->world < 1 || w->rank < 0 || w->rank >= w->world || w->device < 0) {
    fprintf(stderr, "bad world: --world %d --rank %d --device %d\n", w->world, w->rank, w->device);
    return 1;
  }
  if (w->world > 1 && !w->id_file) {
    fprintf(stderr, "a world of %d processes needs --id-file PATH (the same fresh path for every rank)\n", w->world);
    return 1;
  }
  return 0;
}

// Rank 0 passes the id it got from ncclGetUniqueId and publishes it; the others receive it. 0 on success.
static int share_unique_id(const struct world_args* w, ncclUniqueId* id, double timeout_s) {
  if (w->world == 1) return 0;
  if (w->rank == 0) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", w->id_file);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, w->id_file) != 0) {
      perror(w->id_file);
      return 1;
    }
    return 0;
  }
  double deadline = world_now_us() + timeout_s * 1e6;
  for (;;) {
    FILE* f = fopen(w->id_file, "rb");
    if (f) {
      size_t n = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (n == 1) return 0;
    }
    if (world_now_us() > deadline) {
      fprintf(stderr, "rank %d: no unique id in %s after %.0f s (did rank 0 start?)\n", w->rank, w->id_file, timeout_s);
      return 1;
    }
    usleep(10000);
  }
}

#endif
