# c-peers.sh -- sourced by the benchmark scripts that compare with C: builds the C programs a C user
# writes, from ../shared/bench/peers, into a results folder.
#
#   c_mpi_peers OUT PEERS_DIR MPI   OUT/c_mpi-MPI (c_mpi.c as it is: MPI_Init, out of place),
#                                   OUT/c_mpi_inplace-MPI (MPI_Allreduce in place, as tpcomm's
#                                   allReduce(tensor) does; its result check, which assumes out of
#                                   place, skipped for all-reduce) and OUT/c_mpi_multiple-MPI (the
#                                   same at MPI_THREAD_MULTIPLE, tpcomm's default level), built with
#                                   mpicc.MPI -O2; fails when c_mpi.c changed so that the variants
#                                   cannot be derived.
#   c_roofline OUT PEERS_DIR        OUT/roofline (roofline.c: memcpy, sum3 and the 2-thread
#                                   allreduce4 kernel), built with gcc -O3 -march=native.

c_mpi_peers() {
  local out="$1" peers="$2" mpi="$3"
  [ -f "$peers/c_mpi.c" ] || { echo "$peers/c_mpi.c not found: set PEERS_DIR" >&2; return 2; }
  sed -e 's/MPI_Allreduce(sbuf, rbuf, (int)count/MPI_Allreduce(MPI_IN_PLACE, rbuf, (int)count/' \
      -e 's/^static void check(int coll, size_t count) {/& if (coll == ALLREDUCE) return;/' \
      "$peers/c_mpi.c" > "$out/c_mpi_inplace.c"
  sed -e 's/MPI_Init(&argc, &argv);/{ int provided; MPI_Init_thread(\&argc, \&argv, MPI_THREAD_MULTIPLE, \&provided); }/' \
      "$out/c_mpi_inplace.c" > "$out/c_mpi_multiple.c"
  grep -q 'MPI_IN_PLACE, rbuf' "$out/c_mpi_inplace.c" && grep -q 'if (coll == ALLREDUCE) return;' "$out/c_mpi_inplace.c" \
    && grep -q 'MPI_THREAD_MULTIPLE' "$out/c_mpi_multiple.c" \
    || { echo "c_mpi.c changed: could not derive its in-place and MPI_THREAD_MULTIPLE variants" >&2; return 2; }
  local prog src
  for prog in c_mpi c_mpi_inplace c_mpi_multiple; do
    src="$out/$prog.c"; [ "$prog" = c_mpi ] && src="$peers/c_mpi.c"
    "mpicc.$mpi" -O2 -o "$out/$prog-$mpi" "$src" || return 2
  done
}

c_roofline() {
  local out="$1" peers="$2"
  [ -f "$peers/roofline.c" ] || { echo "$peers/roofline.c not found: set PEERS_DIR" >&2; return 2; }
  gcc -O3 -march=native -pthread -o "$out/roofline" "$peers/roofline.c" -lm
}
