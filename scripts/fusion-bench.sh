#!/usr/bin/env bash
# Four small gradients per step (issue 21 item 3): four separate all-reduces, allReduceCoalesced,
# and a persistent GradientBucket, from runBlocking with default settings, 2 ranks, on each
# installed MPI implementation (dev.tpcomm.bench.mpi.FusionBench). Prints each job's rounds and a
# Markdown summary.  Knobs: WORLD (2), BENCH_ROUNDS (9), BENCH_TARGET_S (0.1), BENCH_SHAPES.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
WORLD="${WORLD:-2}"
export BENCH_ROUNDS="${BENCH_ROUNDS:-9}" BENCH_TARGET_S="${BENCH_TARGET_S:-0.1}" BENCH_SHAPES="${BENCH_SHAPES:-256,1024,64,4096}"
tpcomm_build comm-bench
JAVA=(java --enable-native-access=ALL-UNNAMED -XX:+UseParallelGC -cp "$TPCOMM_CP" dev.tpcomm.bench.mpi.FusionBench)
if command -v mpirun.openmpi >/dev/null; then
  echo "## Open MPI, $WORLD ranks"
  mpirun.openmpi --allow-run-as-root --oversubscribe -np "$WORLD" -x BENCH_ROUNDS -x BENCH_TARGET_S -x BENCH_SHAPES "${JAVA[@]}"
fi
if command -v mpirun.mpich >/dev/null; then
  echo "## MPICH, $WORLD ranks"
  mpirun.mpich -np "$WORLD" "${JAVA[@]}"
fi
