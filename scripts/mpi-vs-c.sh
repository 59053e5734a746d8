#!/usr/bin/env bash
# mpi-vs-c.sh -- the MPI backend's float32 all-reduce against ../shared/bench/peers/c_mpi.c (Open MPI),
# in alternating runs: C, C calling MPI_Allreduce in place (as tpcomm's allReduce does), then tpcomm
# (dev.tpcomm.bench.mpi.MpiAllReduceBench) at each thread level, REPS times over. This VM moves between a fast and a slow state for minutes at a time (2x apart at every
# size, C and JVM alike), so single runs of each program cannot be compared; alternating runs see
# the same states, and the table gives each program's minimum and median over its runs and the
# ratios of both.
#
#   scripts/mpi-vs-c.sh                      2 ranks, 8 B .. 16 MiB, levels "Single Multiple", 7 rounds
# Knobs (environment): REPS (7), WORLD (2), LEVELS ("Single Multiple"), BENCH_TARGET_S (0.1 s per
#   timed repeat), MPI_FLAGS (extra mpirun flags for both programs, e.g. "--bind-to none"),
#   PEERS_DIR (../shared/bench/peers), OUT (raw results folder).
# Prints a Markdown table on stdout; the raw CSV lines are in $OUT/runs.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
REPS="${REPS:-7}"
WORLD="${WORLD:-2}"
LEVELS="${LEVELS:-Single Multiple}"
export BENCH_TARGET_S="${BENCH_TARGET_S:-0.1}"
export BENCH_COLL=allreduce
PEERS_DIR="${PEERS_DIR:-../shared/bench/peers}"
OUT="${OUT:-target/mpi-vs-c-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
command -v mpirun.openmpi >/dev/null || { echo "mpirun.openmpi not found: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 2; }
[ -f "$PEERS_DIR/c_mpi.c" ] || { echo "$PEERS_DIR/c_mpi.c not found: set PEERS_DIR" >&2; exit 2; }

tpcomm_build comm-bench # its jar holds MpiAllReduceBench, its classpath comm-mpi
mpicc.openmpi -O2 -o "$OUT/c_mpi" "$PEERS_DIR/c_mpi.c"
# The same program calling MPI_Allreduce in place, as tpcomm's allReduce(tensor) does (its result
# check assumes out of place, so it is skipped for all-reduce).
sed -e 's/MPI_Allreduce(sbuf, rbuf, (int)count/MPI_Allreduce(MPI_IN_PLACE, rbuf, (int)count/' \
    -e 's/^static void check(int coll, size_t count) {/& if (coll == ALLREDUCE) return;/' \
    "$PEERS_DIR/c_mpi.c" > "$OUT/c_mpi_inplace.c"
grep -q 'MPI_IN_PLACE, rbuf' "$OUT/c_mpi_inplace.c" && grep -q 'if (coll == ALLREDUCE) return;' "$OUT/c_mpi_inplace.c" \
  || { echo "c_mpi.c changed: could not derive its in-place variant" >&2; exit 2; }
mpicc.openmpi -O2 -o "$OUT/c_mpi_inplace" "$OUT/c_mpi_inplace.c"
# shellcheck disable=SC2206 # MPI_FLAGS is a list of flags
MPIRUN=(mpirun.openmpi --allow-run-as-root --oversubscribe ${MPI_FLAGS:-} -x BENCH_TARGET_S -x BENCH_COLL)
JAVA=(java --enable-native-access=ALL-UNNAMED -cp "$TPCOMM_CP" dev.tpcomm.bench.mpi.MpiAllReduceBench)

: > "$OUT/runs.csv"
for r in $(seq "$REPS"); do
  echo "round $r of $REPS" >&2
  "${MPIRUN[@]}" -np "$WORLD" "$OUT/c_mpi" 2>/dev/null | grep '^c_mpi,allreduce,' | sed 's/^c_mpi,/C,/' >> "$OUT/runs.csv"
  "${MPIRUN[@]}" -np "$WORLD" "$OUT/c_mpi_inplace" 2>/dev/null | grep '^c_mpi,allreduce,' | sed 's/^c_mpi,/C in place,/' >> "$OUT/runs.csv"
  for level in $LEVELS; do
    TPCOMM_MPI_THREAD_LEVEL="$level" "${MPIRUN[@]}" -x TPCOMM_MPI_THREAD_LEVEL -np "$WORLD" "${JAVA[@]}" 2>/dev/null \
      | grep '^tpcomm_mpi_openmpi,allreduce,' | sed "s/^tpcomm_mpi_openmpi,/tpcomm $level,/" >> "$OUT/runs.csv"
  done
done

/usr/bin/python3 scripts/mpi_vs_c_report.py "$OUT/runs.csv" "$LEVELS" "${MPI_FLAGS:-}"
