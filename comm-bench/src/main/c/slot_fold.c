/* slot_fold.c: what the MPI backend's consistency check costs at 8 bytes, in C (MPI alone), four
 * variants alternating in one process (docs/mpi.md, "Small collectives ride in the check"):
 * plain : MPI_Allreduce(IN_PLACE, 2 floats, SUM)                   (an unchecked all-reduce)
 * check : MPI_Allreduce(16 B int64 MAX digest) then plain          (the check before 2026-11-26)
 * fold  : MPI_Allgather(64 B slot: digest + payload), host sum      (the check carrying the call)
 * gath  : MPI_Allgather(64 B slot) alone                           (the check of a larger call)
 * argv[1]: single|multiple (the thread level). Prints per-variant min/p25/median/p75 over ROUNDS
 * rounds of K-call means, in microseconds (rank 0).
 * Build: mpicc.openmpi -O2 -o slot_fold slot_fold.c
 * Run:   mpirun.openmpi --allow-run-as-root -np 2 ./slot_fold multiple */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#define ROUNDS 41
#define K 20000
static int rank, world;
static float buf[2];
static int64_t dsend[2], drecv[2];
static unsigned char slot[64], *all;
static void plain(void) { MPI_Allreduce(MPI_IN_PLACE, buf, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }
static void check(void) {
  dsend[0] = 0x1234567; dsend[1] = ~dsend[0];
  MPI_Allreduce(dsend, drecv, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (drecv[0] != dsend[0] || drecv[1] != dsend[1]) MPI_Abort(MPI_COMM_WORLD, 3);
  plain();
}
static void fold(void) {
  int64_t h = 0x1234567;
  memcpy(slot, &h, 8); memcpy(slot + 8, buf, 8);
  MPI_Allgather(slot, 64, MPI_BYTE, all, 64, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < world; r++) { int64_t g; memcpy(&g, all + 64 * r, 8); if (g != h) MPI_Abort(MPI_COMM_WORLD, 3); }
  float a = 0, b = 0;
  for (int r = 0; r < world; r++) { float x[2]; memcpy(x, all + 64 * r + 8, 8); a += x[0]; b += x[1]; }
  buf[0] = a; buf[1] = b;
}
static void gath(void) { MPI_Allgather(slot, 64, MPI_BYTE, all, 64, MPI_BYTE, MPI_COMM_WORLD); }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
  int want = (argc > 1 && !strcmp(argv[1], "multiple")) ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, got;
  MPI_Init_thread(&argc, &argv, want, &got);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &world);
  all = malloc(64 * world);
  void (*fs[4])(void) = {plain, check, fold, gath};
  const char *names[4] = {"plain", "check", "fold", "gath"};
  double t[4][ROUNDS];
  for (int w = 0; w < 4; w++) for (int k = 0; k < K; k++) fs[w]();
  for (int r = 0; r < ROUNDS; r++)
    for (int w0 = 0; w0 < 4; w0++) {
      int w = (w0 + r) % 4;
      buf[0] = rank; buf[1] = 1;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int k = 0; k < K; k++) fs[w]();
      double dt = (MPI_Wtime() - t0) / K, m;
      MPI_Allreduce(&dt, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[w][r] = m * 1e6;
    }
  if (rank == 0) {
    printf("level=%s provided=%d world=%d\n", argc > 1 ? argv[1] : "single", got, world);
    for (int w = 0; w < 4; w++) { qsort(t[w], ROUNDS, sizeof(double), cmpd);
      printf("%-6s min %.3f  p25 %.3f  median %.3f  p75 %.3f us\n", names[w], t[w][0], t[w][ROUNDS/4], t[w][ROUNDS/2], t[w][3*ROUNDS/4]); }
  }
  MPI_Finalize();
  return 0;
}
