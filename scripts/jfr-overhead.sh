#!/usr/bin/env bash
# What tpcomm's JFR events cost per 8-byte all-reduce, in four variants (eventsCompiledOut: -Dtpcomm.jfr=false; eventsOff: the default, no recording;
# jfrTpcommJfc: recording with tpcomm.jfc; jfrEveryOp: an event for every operation), one JVM
# fork each, alternating in rotated order for ROUNDS rounds, so that the machine's slow phases hit
# every variant alike. MODE=cpu (default) measures the CPU time of the looping thread
# (RecorderOverheadMain: time descheduled on a shared machine does not count); MODE=jmh runs
# FlightRecorderOverheadBenchmark (wall time). Prints per variant the median of the fork medians (and their range) and the
# median of the fork minimums, and the paired ratio of each variant to eventsCompiledOut.
# Usage: ROUNDS=6 BACKENDS="local1 mpi" MODE=cpu scripts/jfr-overhead.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/tpcomm-jfr-overhead}"
ROUNDS="${ROUNDS:-6}"
BACKENDS="${BACKENDS:-local1 mpi}"
mkdir -p "$OUT/lib"
# Build once and freeze the jars for the session (in $OUT/lib, reused when present): later edits
# or builds do not change what runs.
if [ ! -f "$OUT/lib/classpath" ]; then
  source scripts/env.sh
  source scripts/run-module.sh
  tpcomm_build comm-bench
  CP=""
  for j in $(echo "$TPCOMM_CP" | tr ':' ' '); do
    case "$j" in
      "$PWD"/*|comm-*) cp "$j" "$OUT/lib/"; CP="$CP:$OUT/lib/$(basename "$j")" ;;
      *) CP="$CP:$j" ;;
    esac
  done
  echo "${CP#:}" > "$OUT/lib/classpath"
fi
source scripts/env.sh
CP="$(cat "$OUT/lib/classpath")"
FLAGS="--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector"
VARIANTS=(eventsCompiledOut eventsOff jfrTpcommJfc jfrEveryOp)
variant_flags() {
  case "$1" in
    eventsCompiledOut) echo "-Dtpcomm.jfr=false" ;;
    eventsOff) echo "" ;;
    jfrTpcommJfc) echo "-XX:StartFlightRecording=settings=tpcomm.jfc,filename=$OUT/tpcomm.jfr" ;;
    jfrEveryOp) echo "-XX:StartFlightRecording=settings=comm-bench/jfr/every-op.jfc,filename=$OUT/every-op.jfr" ;;
  esac
}
MODE="${MODE:-cpu}"
for r in $(seq 1 "$ROUNDS"); do
  for b in $BACKENDS; do
    for i in 0 1 2 3; do
      v="${VARIANTS[$(( (i + r) % 4 ))]}"
      echo "round $r $b $v ($MODE)" >&2
      if [ "$MODE" = cpu ]; then
        # CPU time of the looping thread: what a call costs, without the time other jobs take the core.
        java $FLAGS $(variant_flags "$v") -cp "$CP" dev.tpcomm.bench.jmh.RecorderOverheadMain "$b" 20 200000 10 \
          > "$OUT/cpu-r$r-$b-$v.txt" 2> "$OUT/cpu-r$r-$b-$v.err" || echo "  failed: see $OUT/cpu-r$r-$b-$v.err" >&2
      else
        java $FLAGS -Djmh.ignoreLock=true -cp "$CP" org.openjdk.jmh.Main "FlightRecorderOverheadBenchmark\.$v\$" -p backend="$b" \
          -f 1 -wi 5 -i 15 -w 200ms -r 200ms -jvmArgsAppend "$FLAGS" -rf json -rff "$OUT/r$r-$b-$v.json" > "$OUT/r$r-$b-$v.log" 2>&1 \
          || echo "  failed: see $OUT/r$r-$b-$v.log" >&2
      fi
    done
  done
done
python3 scripts/jfr_overhead_report.py "$OUT"
