#!/usr/bin/env bash
# mpi-vs-c.sh -- the MPI backend's float32 all-reduce against ../shared/bench/peers/c_mpi.c on each
# installed implementation, in alternating runs: C (MPI_Init, out of place), C calling MPI_Allreduce
# in place (as tpcomm's allReduce does), the same at MPI_THREAD_MULTIPLE (tpcomm's default level),
# then tpcomm (dev.tpcomm.bench.mpi.MpiAllReduceBench) on each call path, REPS times over:
#   natural   called from the runBlocking main coroutine with default settings (what a user's loop does)
#   handoff   the same with TPCOMM_MPI_CALLER_RUNS_LIMIT=0: every call handed to the communicator's thread
#   fast      the loop on the communicator's thread (withContext(comm.nativeDispatcher))
#   natural@N the natural path with the caller-runs limit set to N bytes (natural@65536, say)
#   spin@U    every call handed off (as handoff) to a thread that stays awake U µs after its last
#             task, its caller spinning up to U µs for the result (TPCOMM_MPI_HANDOFF_SPIN_US=U)
# This VM moves between a fast and a slow state for minutes at a time (2x apart at every size, C
# and JVM alike), so single runs cannot be compared; alternating runs see the same states, and the
# report gives each program's min and median over its runs and the per-round ratios to C.
#
#   scripts/mpi-vs-c.sh                      2 ranks, 8 B .. 16 MiB, Open MPI and MPICH, 7 rounds
# Knobs (environment): REPS (7), WORLD (2), MPIS ("openmpi mpich": those installed), PATHS
#   ("natural handoff fast"), BENCH_TARGET_S (0.1 s per timed repeat), MPI_FLAGS (extra mpirun
#   flags for every program), BENCH_BYTES (one size only, e.g. 8; default every size), PEERS_DIR (../shared/bench/peers), OUT (raw results folder).
# Prints a Markdown report per implementation on stdout; the raw CSV lines are in $OUT/runs-<mpi>.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
source scripts/c-peers.sh
REPS="${REPS:-7}"
WORLD="${WORLD:-2}"
MPIS="${MPIS:-openmpi mpich}"
PATHS="${PATHS:-natural handoff fast}"
export BENCH_TARGET_S="${BENCH_TARGET_S:-0.1}"
export BENCH_COLL=allreduce
PEERS_DIR="${PEERS_DIR:-../shared/bench/peers}"
OUT="${OUT:-target/mpi-vs-c-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
[ -f "$PEERS_DIR/c_mpi.c" ] || { echo "$PEERS_DIR/c_mpi.c not found: set PEERS_DIR" >&2; exit 2; }
tpcomm_build comm-bench # its jar holds MpiAllReduceBench, its classpath comm-mpi

for mpi in $MPIS; do
  command -v "mpirun.$mpi" >/dev/null || { echo "mpirun.$mpi not found: skipping $mpi" >&2; continue; }
  c_mpi_peers "$OUT" "$PEERS_DIR" "$mpi" # C with MPI_Init, in place, and in place at MPI_THREAD_MULTIPLE
  if [ "$mpi" = openmpi ]; then
    # shellcheck disable=SC2206 # MPI_FLAGS is a list of flags
    MPIRUN=(mpirun.openmpi --allow-run-as-root --oversubscribe ${MPI_FLAGS:-} -x BENCH_TARGET_S -x BENCH_COLL ${BENCH_BYTES:+-x BENCH_BYTES} -x BENCH_PATH -x TPCOMM_MPI_CALLER_RUNS_LIMIT -x TPCOMM_MPI_HANDOFF_SPIN_US)
  else
    # shellcheck disable=SC2206
    MPIRUN=(mpirun.mpich ${MPI_FLAGS:-} -genvlist BENCH_TARGET_S,BENCH_COLL,${BENCH_BYTES:+BENCH_BYTES,}BENCH_PATH,TPCOMM_MPI_CALLER_RUNS_LIMIT,TPCOMM_MPI_HANDOFF_SPIN_US)
  fi
  runs="$OUT/runs-$mpi.csv"
  : > "$runs"
  for r in $(seq "$REPS"); do
    echo "$mpi: round $r of $REPS" >&2
    export BENCH_PATH=natural TPCOMM_MPI_CALLER_RUNS_LIMIT= TPCOMM_MPI_HANDOFF_SPIN_US=
    "${MPIRUN[@]}" -np "$WORLD" "$OUT/c_mpi-$mpi" 2>/dev/null | grep '^c_mpi,allreduce,' | sed 's/^c_mpi,/C,/' >> "$runs"
    "${MPIRUN[@]}" -np "$WORLD" "$OUT/c_mpi_inplace-$mpi" 2>/dev/null | grep '^c_mpi,allreduce,' | sed 's/^c_mpi,/C in place,/' >> "$runs"
    "${MPIRUN[@]}" -np "$WORLD" "$OUT/c_mpi_multiple-$mpi" 2>/dev/null | grep '^c_mpi,allreduce,' | sed 's/^c_mpi,/C in place multiple,/' >> "$runs"
    for path in $PATHS; do
      export TPCOMM_MPI_HANDOFF_SPIN_US=
      case "$path" in
        natural) export BENCH_PATH=natural TPCOMM_MPI_CALLER_RUNS_LIMIT= ;; # empty: the default
        handoff) export BENCH_PATH=natural TPCOMM_MPI_CALLER_RUNS_LIMIT=0 ;;
        fast) export BENCH_PATH=fast TPCOMM_MPI_CALLER_RUNS_LIMIT= ;;
        natural@*) export BENCH_PATH=natural TPCOMM_MPI_CALLER_RUNS_LIMIT="${path#natural@}" ;;
        spin@*) export BENCH_PATH=natural TPCOMM_MPI_CALLER_RUNS_LIMIT=0 TPCOMM_MPI_HANDOFF_SPIN_US="${path#spin@}" ;;
        *) echo "unknown path $path (natural, natural@LIMIT, handoff, fast, spin@US)" >&2; exit 2 ;;
      esac
      "${MPIRUN[@]}" -np "$WORLD" java --enable-native-access=ALL-UNNAMED -cp "$TPCOMM_CP" dev.tpcomm.bench.mpi.MpiAllReduceBench 2>/dev/null \
        | grep '^tpcomm_mpi_[a-z]*,allreduce,' | sed "s/^tpcomm_mpi_[a-z]*,/tpcomm $path,/" >> "$runs"
    done
  done
  /usr/bin/python3 scripts/mpi_vs_c_report.py "$runs" "$PATHS" "$mpi" "${MPI_FLAGS:-}"
  echo
done
