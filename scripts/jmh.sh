#!/usr/bin/env bash
# JMH micro-benchmarks of tpcomm's hot paths (comm-bench/src/main/java/dev/tpcomm/bench/jmh):
#   LocalLatencyBenchmark     8-byte all-reduce and barrier on the local backend, 2 and 4 ranks (ns per op)
#   ReductionKernelBenchmark  4-rank 1 MiB all-reduce per dtype: the local backend's reduction kernels (us per op)
#   TensorBenchmark           Tensor.chunk (views along dim 0, copies along dim 1) and Tensor.concat, 4 MiB (us)
#   FfmDowncallBenchmark      one java.lang.foreign downcall: getpid(), strlen(ptr), strlen critical (ns)
# Usage: scripts/jmh.sh [JMH options]     e.g. scripts/jmh.sh LocalLatency -p world=4
#        scripts/jmh.sh -l                 list the benchmarks;  scripts/jmh.sh -h   JMH's options
# Default run settings: 1 fork, 3 warm-up and 5 measurement iterations of 1 s (about 2 minutes for all).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
tpcomm_build comm-bench
CP="$TPCOMM_CP"
FLAGS="--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector"
# Defaults for the options the caller did not give.
DEFAULTS=()
for kv in "-f 1" "-wi 3" "-i 5" "-w 1s" "-r 1s"; do
  opt=${kv%% *}
  given=0
  for a in "$@"; do [ "$a" = "$opt" ] && given=1; done
  [ "$given" = 0 ] && DEFAULTS+=($kv)
done
exec java $FLAGS -cp "$CP" org.openjdk.jmh.Main "${DEFAULTS[@]}" -jvmArgsAppend "$FLAGS" "$@"
