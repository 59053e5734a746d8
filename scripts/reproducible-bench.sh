#!/usr/bin/env bash
# What the reproducible reductions cost (issue 36): dev.tpcomm.bench.ReproducibleBench, float32 Sum
# all-reduce, default vs comm.reproducible(), alternating round by round, at 8 B, 64 KiB, 1 MiB and
# 64 MiB: in-process (WORLD ranks), then one job per MPI implementation (Open MPI, MPICH).
# Prints each run's CSV rounds and Markdown summary (medians, min-max, per-round ratios).
#   scripts/reproducible-bench.sh     knobs: WORLD (4), BENCH_OP (Avg|Sum), BENCH_ROUNDS (5), BENCH_TARGET_S (0.2), BENCH_SIZES, ONLY (local|openmpi|mpich)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
WORLD="${WORLD:-4}"
export BENCH_OP="${BENCH_OP:-Avg}" BENCH_ROUNDS="${BENCH_ROUNDS:-5}" BENCH_TARGET_S="${BENCH_TARGET_S:-0.2}" BENCH_WORLD="$WORLD"
[ -n "${BENCH_SIZES:-}" ] && export BENCH_SIZES
tpcomm_build comm-bench
JAVA=(java "${TPCOMM_JVM_FLAGS[@]}" -cp "$TPCOMM_CP" dev.tpcomm.bench.ReproducibleBench)
if [ -z "${ONLY:-}" ] || [ "$ONLY" = local ]; then
  echo "## in-process, $WORLD ranks"
  "${JAVA[@]}" 2> >(grep -v 'incubator' >&2)
fi
if { [ -z "${ONLY:-}" ] || [ "$ONLY" = openmpi ]; } && command -v mpirun.openmpi >/dev/null; then
  echo "## Open MPI, $WORLD ranks"
  mpirun.openmpi --allow-run-as-root --oversubscribe -np "$WORLD" -x BENCH_OP -x BENCH_ROUNDS -x BENCH_TARGET_S ${BENCH_SIZES:+-x BENCH_SIZES} "${JAVA[@]}" mpi 2> >(grep -v 'incubator' >&2)
fi
if { [ -z "${ONLY:-}" ] || [ "$ONLY" = mpich ]; } && command -v mpirun.mpich >/dev/null; then
  echo "## MPICH, $WORLD ranks"
  mpirun.mpich -np "$WORLD" "${JAVA[@]}" mpi 2> >(grep -v 'incubator' >&2)
fi
