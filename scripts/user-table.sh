#!/usr/bin/env bash
# user-table.sh -- the opening table of docs/BENCHMARKS.md: what a user gets, measured as a user
# calls tpcomm (default configuration, fresh tensors, a runBlocking loop, fresh JVMs), next to C
# measured in the same rounds, in alternating rounds (this VM moves between fast and slow states for
# minutes at a time, so only programs run in the same minutes compare).
#
# One round runs, in this order:
#   C roofline (../shared/bench/peers/roofline.c, gcc -O3 -march=native): the 2-thread allreduce4
#     kernel on 4 buffers of 1 MiB and 64 MiB, the in-process all-reduce's floor;
#   tpcomm in-process (dev.tpcomm.bench.BenchMain, scripts/bench.sh's program): all-reduce of 8 B,
#     1 MiB and 64 MiB at 4 ranks;
#   FirstCallsBench in a fresh JVM, in-process 4 ranks: the first 20,000 8-byte calls and the
#     steady state (after 1,000,000), plain and with CommConfig.warmUp of 2 s (opt-in); and the floor
#     (FirstCallsBench none: the same loop calling a communicator that only adds 1 to the tensor);
#   per installed MPI, 2 ranks: C calling MPI_Allreduce in place (MPI_Init, and MPI_THREAD_MULTIPLE),
#     tpcomm's MpiAllReduceBench from runBlocking (8 B and 1 MiB), FirstCallsBench plain and warm 2 s.
# Prints one Markdown table (median [min-max] over the rounds; ratios per round, then their median)
# and keeps the raw lines in $OUT/runs.csv (round,row,value).
#
#   scripts/user-table.sh                    3 rounds, about 3 minutes each
# Knobs (environment): ROUNDS (3), MPIS ("openmpi mpich": those installed), PEERS_DIR
#   (../shared/bench/peers), OUT (raw results folder).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
source scripts/c-peers.sh
ROUNDS="${ROUNDS:-3}"
MPIS="${MPIS:-openmpi mpich}"
PEERS_DIR="${PEERS_DIR:-../shared/bench/peers}"
OUT="${OUT:-target/user-table-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
tpcomm_build comm-bench
# BenchMain with scripts/bench.sh's JVM flags; the fresh-JVM programs as mpi-vs-c.sh and first-calls.sh run them.
BENCH_JAVA=(java "${TPCOMM_JVM_FLAGS[@]}" -cp "$TPCOMM_CP")
JAVA=(java --enable-native-access=ALL-UNNAMED -cp "$TPCOMM_CP")
c_roofline "$OUT" "$PEERS_DIR"
mpis=()
for mpi in $MPIS; do
  command -v "mpirun.$mpi" >/dev/null || { echo "mpirun.$mpi not found: skipping $mpi" >&2; continue; }
  c_mpi_peers "$OUT" "$PEERS_DIR" "$mpi"
  mpis+=("$mpi")
done

runs="$OUT/runs.csv"
: > "$runs"
# put ROUND ROW VALUE: one measurement (refuses an empty value: a program that printed nothing).
put() {
  [ -n "$3" ] || { echo "round $1: no value for $2 (see $OUT/*.log)" >&2; exit 1; }
  echo "$1,$2,$3" >> "$runs"
}
# field CSV_LINES PREFIX N: field N of the first line starting with PREFIX.
field() { grep -m1 "^$2" <<< "$1" | cut -d, -f"$3" || true; }
# mpirun_for MPI: the launcher, passing the benchmark's environment to the ranks.
mpirun_for() {
  if [ "$1" = openmpi ]; then
    echo "mpirun.openmpi --allow-run-as-root --oversubscribe -x BENCH_TARGET_S -x BENCH_COLL -x BENCH_BYTES -x BENCH_PATH -x TPCOMM_WARM_UP_SECONDS"
  else
    echo "mpirun.mpich -genvlist BENCH_TARGET_S,BENCH_COLL,BENCH_BYTES,BENCH_PATH,TPCOMM_WARM_UP_SECONDS"
  fi
}
export BENCH_BYTES=8 BENCH_TARGET_S=0.1 BENCH_COLL=allreduce BENCH_PATH=natural TPCOMM_WARM_UP_SECONDS=0

for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  out=$("$OUT/roofline" 2>>"$OUT/roofline.log")
  put "$r" c_allreduce4_1m "$(field "$out" 'allreduce4,2,1048576,' 4)"
  put "$r" c_allreduce4_64m "$(field "$out" 'allreduce4,2,67108864,' 4)"

  "${BENCH_JAVA[@]}" dev.tpcomm.bench.BenchMain --sizes 8,1M,64M --world 4 --no-progress --csv "$OUT/bench-$r.csv" > "$OUT/bench-$r.log" 2>&1
  out=$(cat "$OUT/bench-$r.csv")
  put "$r" local_8 "$(field "$out" 'tpcomm_local,allreduce,4,8,' 5)"
  put "$r" local_1m "$(field "$out" 'tpcomm_local,allreduce,4,1048576,' 5)"
  put "$r" local_64m "$(field "$out" 'tpcomm_local,allreduce,4,67108864,' 5)"

  for warm in 0 2; do
    out=$(TPCOMM_WARM_UP_SECONDS=$warm "${JAVA[@]}" dev.tpcomm.bench.FirstCallsBench local 4 2>>"$OUT/first-calls.log")
    put "$r" "local_first20k_w$warm" "$(field "$out" 'first_calls,local,4,first20k,' 5)"
    put "$r" "local_steady_w$warm" "$(field "$out" 'first_calls,local,4,steady,' 5)"
  done

  # The floor: the same loop calling a communicator that does nothing but add 1 (no library call).
  out=$("${JAVA[@]}" dev.tpcomm.bench.FirstCallsBench none 2>>"$OUT/first-calls.log")
  put "$r" none_first20k "$(field "$out" 'first_calls,none,1,first20k,' 5)"
  put "$r" none_steady "$(field "$out" 'first_calls,none,1,steady,' 5)"

  for mpi in "${mpis[@]}"; do
    read -r -a MPIRUN <<< "$(mpirun_for "$mpi")"
    for bytes in 8 1048576; do
      export BENCH_BYTES=$bytes
      for prog in c_mpi_inplace c_mpi_multiple; do
        out=$("${MPIRUN[@]}" -np 2 "$OUT/$prog-$mpi" 2>>"$OUT/c-mpi.log")
        put "$r" "${mpi}_${prog#c_mpi_}_$bytes" "$(field "$out" "c_mpi,allreduce,2,$bytes," 5)"
      done
      out=$("${MPIRUN[@]}" -np 2 "${JAVA[@]}" dev.tpcomm.bench.mpi.MpiAllReduceBench 2>>"$OUT/mpi-bench.log")
      put "$r" "${mpi}_tpcomm_$bytes" "$(field "$out" "tpcomm_mpi_[a-z]*,allreduce,2,$bytes," 5)"
    done
    for warm in 0 2; do
      export TPCOMM_WARM_UP_SECONDS=$warm
      out=$("${MPIRUN[@]}" -np 2 "${JAVA[@]}" dev.tpcomm.bench.FirstCallsBench mpi 2>>"$OUT/first-calls.log")
      put "$r" "${mpi}_first20k_w$warm" "$(field "$out" 'first_calls,mpi,2,first20k,' 5)"
      put "$r" "${mpi}_steady_w$warm" "$(field "$out" 'first_calls,mpi,2,steady,' 5)"
    done
    export TPCOMM_WARM_UP_SECONDS=0
  done
done
/usr/bin/python3 scripts/user_table_report.py "$runs" "$(date -u +%Y-%m-%d), $(git rev-parse --short HEAD)"
