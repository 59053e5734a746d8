#!/usr/bin/env bash
# compare.sh -- one command: the peers (C/Open MPI, mpi4py, torch gloo, the C roofline, from
# ../shared/bench/peers) and tpcomm (local backend; MPI backend under Open MPI and MPICH) measured in
# the same session, on the same sizes (8 B .. 64 MiB per rank) and world sizes (2 and 4), float32;
# then writes docs/benchmarks/comparison.md (tables, ratios, targets, plots in docs/benchmarks/, machine, date,
# load, spread across repeats) and prints the targets and the headline table.
#
# Takes about 10-15 minutes (the peers wait for the machine to be quiet before each step).
# Knobs (environment): WORLDS ("2 4"), MPIS ("openmpi mpich"; empty skips the MPI backend),
#   MPI_THREAD_LEVELS ("Multiple Single": the MPI backend once per thread level; rows of a level
#   other than the default Multiple are labelled tpcomm_mpi_<mpi>_<level>, e.g. tpcomm_mpi_openmpi_single),
#   BENCH_TARGET_S (0.25 s per timed repeat, as the peers), QUIET_WAIT (30 s), PEERS_DIR, OUT (raw
#   results folder, default target/compare-<date>), SKIP_PEERS=1 with PEERS_OUT=dir to reuse a peers run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/env.sh
PY=/usr/bin/python3
WORLDS="${WORLDS:-2 4}"
MPIS="${MPIS-openmpi mpich}"
MPI_THREAD_LEVELS="${MPI_THREAD_LEVELS:-Multiple Single}"
SIZES=8,1K,64K,1M,16M,64M
OPS=all_reduce,all_gather,broadcast
export BENCH_TARGET_S="${BENCH_TARGET_S:-0.25}"
export QUIET_WAIT="${QUIET_WAIT:-30}"
OUT="${OUT:-$ROOT/target/compare-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"

if [ -z "${PEERS_DIR:-}" ]; then
  for c in "$ROOT/../shared/bench/peers" "$ROOT/../../shared/bench/peers" /work/shared/bench/peers; do
    if [ -f "$c/run_all.sh" ]; then PEERS_DIR="$(cd "$c" && pwd)"; break; fi
  done
fi
[ -n "${PEERS_DIR:-}" ] && [ -f "$PEERS_DIR/run_all.sh" ] || { echo "peers not found: set PEERS_DIR to the folder holding run_all.sh" >&2; exit 1; }

echo "== build" >&2
./mvnw -B -q -pl comm-bench -am package -DskipTests >&2
CP="comm-bench/target/comm-bench-0.1.0-SNAPSHOT.jar:$(cat comm-bench/target/classpath.txt)"

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
T0=$(date +%s)

echo "== peers ($PEERS_DIR) -> $OUT/peers" >&2
if [ "${SKIP_PEERS:-0}" = 1 ]; then
  cp -r "${PEERS_OUT:?SKIP_PEERS=1 needs PEERS_OUT}" "$OUT/peers"
else
  OUTDIR="$OUT/peers" WORLDS="$WORLDS" bash "$PEERS_DIR/run_all.sh"
fi

# tpcomm, with the peers' contention accounting (cpuwatch.py waits for quiet, then reports the
# CPU other processes used during the step).
LOADS="$OUT/tpcomm_load.csv"
echo "step,rc,wall_s,waited_s,own_cpu_s,foreign_cpu_s,foreign_cores,steal_s" > "$LOADS"
: > "$OUT/tpcomm_failures.txt"
run_step() {  # run_step LABEL ARGS...
  local label="$1"; shift
  echo "== $label" >&2
  local rc=0
  $PY "$PEERS_DIR/cpuwatch.py" "$label" 900 scripts/bench.sh "$@" --op "$OPS" --sizes "$SIZES" --time "$BENCH_TARGET_S" \
     --csv "$OUT/tpcomm.csv" --append --repeats-csv "$OUT/tpcomm_repeats.csv" --no-progress > "$OUT/$label.txt" || rc=$?
  grep '^#load,' "$OUT/$label.txt" | cut -d, -f2- >> "$LOADS" || true
  grep -v '^#load,' "$OUT/$label.txt" >&2 || true
  if [ "$rc" != 0 ]; then echo "$label failed (exit $rc); see $OUT/$label.txt" | tee -a "$OUT/tpcomm_failures.txt" >&2; fi
}
# The local backend twice: rank coroutines on one thread (the bench's default, label tpcomm_local)
# and on Dispatchers.Default (tpcomm_local_pool).
for n in $WORLDS; do run_step "tpcomm_local.np$n" --backend local --world "$n"; done
for n in $WORLDS; do run_step "tpcomm_local_pool.np$n" --backend local --dispatcher pool --impl tpcomm_local_pool --world "$n"; done
for mpi in $MPIS; do
  if ! command -v "mpirun.$mpi" >/dev/null; then echo "mpirun.$mpi not installed: skipped" | tee -a "$OUT/tpcomm_failures.txt" >&2; continue; fi
  for level in $MPI_THREAD_LEVELS; do
    if [ "$level" = Multiple ]; then impl="tpcomm_mpi_$mpi"; else impl="tpcomm_mpi_${mpi}_$(echo "$level" | tr 'A-Z' 'a-z')"; fi
    for n in $WORLDS; do
      TPCOMM_MPI_THREAD_LEVEL="$level" run_step "$impl.np$n" --backend mpi --mpi "$mpi" --world "$n" --impl "$impl"
    done
  done
done

# Session description for the report.
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ), total $(( $(date +%s) - T0 )) s for peers and tpcomm"
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r)"
  echo "JDK: $("$JAVA_HOME/bin/java" -version 2>&1 | head -1); tpcomm commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "peers: $(grep -E '^(openmpi|deb python3-torch|deb python3-mpi4py):' "$OUT/peers/env.txt" | paste -sd ';' | sed 's/;/; /g')"
  command -v mpirun.mpich >/dev/null && echo "mpich: $(mpirun.mpich --version 2>/dev/null | grep -m1 -i version | tr -s ' ')"
  echo "load average (1/5/15 min) before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "contention (CPU cores used by other processes during each step; 0 = quiet machine, 2 cores in all): peers $(tail -n +2 "$OUT/peers/load.csv" 2>/dev/null | awk -F, '{printf "%s %s; ", $1, $7}')tpcomm $(tail -n +2 "$LOADS" | awk -F, '{printf "%s %s; ", $1, $7}')"
  [ -s "$OUT/tpcomm_failures.txt" ] && echo "failed steps: $(tr '\n' ';' < "$OUT/tpcomm_failures.txt")"
  echo "raw results: $OUT (peers/results.csv, tpcomm.csv, repeats); repeat this with scripts/compare.sh"
} > "$OUT/env.txt"

NOTES=docs/benchmarks/NOTES.md
java -cp "$CP" dev.tpcomm.bench.report.CompareMain --out docs/benchmarks/comparison.md --plots docs/benchmarks \
  --results "$OUT/peers/results.csv,$OUT/tpcomm.csv" --repeats "$OUT/peers/repeats.csv,$OUT/tpcomm_repeats.csv" \
  --roofline "$OUT/peers/raw.txt" --env "$OUT/env.txt" --reasons "$NOTES"
mkdir -p docs/benchmarks
cp "$OUT/tpcomm.csv" docs/benchmarks/tpcomm.csv
cp "$OUT/peers/results.csv" docs/benchmarks/peers.csv
cp "$OUT/tpcomm_repeats.csv" docs/benchmarks/tpcomm_repeats.csv
cp "$OUT/peers/repeats.csv" docs/benchmarks/peers_repeats.csv
grep '^allreduce4,' "$OUT/peers/raw.txt" > docs/benchmarks/roofline_allreduce4.csv || true
