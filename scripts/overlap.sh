#!/usr/bin/env bash
# Builds comm-bench and runs the overlap benchmark: a step of N chunks, sync against async
# (chunk i's all-reduce overlapping chunk i+1's compute) on the local backend with rank 1 delayed,
# printing both step times and the overlap efficiency. Options are passed through, e.g.
#   scripts/overlap.sh --chunks 16 --compute-ms 10 --skew-ms 10 --repeats 11
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
tpcomm_build comm-bench
exec java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
  -cp "$TPCOMM_CP" \
  dev.tpcomm.bench.OverlapBenchmark "$@"
