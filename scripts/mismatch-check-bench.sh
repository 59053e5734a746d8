#!/usr/bin/env bash
# What the MPI backend's default consistency check costs: dev.tpcomm.bench.mpi.MismatchCheckBench
# in one job per implementation (Open MPI, MPICH), 2 ranks by default: the checked world against an
# unchecked duplicate, alternating round by round, from runBlocking and from the communicator's
# thread, at 8 B, 64 KiB and 1 MiB. Prints each job's CSV rounds and Markdown summary.
#   scripts/mismatch-check-bench.sh          knobs: WORLD (2), BENCH_ROUNDS (7), BENCH_TARGET_S (0.1)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
WORLD="${WORLD:-2}"
export BENCH_ROUNDS="${BENCH_ROUNDS:-7}" BENCH_TARGET_S="${BENCH_TARGET_S:-0.1}"
tpcomm_build comm-bench
JAVA=(java --enable-native-access=ALL-UNNAMED -XX:+UseParallelGC -cp "$TPCOMM_CP" dev.tpcomm.bench.mpi.MismatchCheckBench)
if command -v mpirun.openmpi >/dev/null; then
  echo "## Open MPI, $WORLD ranks"
  mpirun.openmpi --allow-run-as-root --oversubscribe -np "$WORLD" -x BENCH_ROUNDS -x BENCH_TARGET_S "${JAVA[@]}"
fi
if command -v mpirun.mpich >/dev/null; then
  echo "## MPICH, $WORLD ranks"
  mpirun.mpich -np "$WORLD" "${JAVA[@]}"
fi
