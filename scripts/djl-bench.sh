#!/usr/bin/env bash
# The data-parallel DJL training step (issue 21 item 5), phase by phase: comm-djl's DataParallel
# (persistent buckets, gradients as bucket views) against per-gradient copies, on the in-process
# backend (WORLDS, default "1 2 4") and as 2-rank mpirun jobs under Open MPI and MPICH (those
# installed). Each configuration runs ROUNDS times (default 3), buckets and copy alternating;
# prints every run's line (median microseconds of rank 0 per phase) and, per configuration, the
# median of the runs' medians. A barrier before the averaging (wait us, not counted in step us)
# keeps the slowest rank's backward out of the averaging phase. Model and steps: see DataParallelStepBench (extra arguments
# are passed to it, e.g. --hidden 512 --steps 400).
# Usage: scripts/djl-bench.sh [--hidden H] [--steps S] ...
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ROUNDS="${ROUNDS:-3}"
WORLDS="${WORLDS:-1 2 4}"
echo "building comm-djl (test classes) ..." >&2
./mvnw -B -q -ntp -pl comm-djl -am test-compile dependency:build-classpath -Dmdep.includeScope=test \
  -Dmdep.outputFile=target/test-classpath.txt 2>&1 | { grep -v -e 'sun.misc.Unsafe' -e 'Please consider reporting' >&2 || true; }
CP="comm-djl/target/test-classes:comm-djl/target/classes:$(cat comm-djl/target/test-classpath.txt)"
export DJL_OFFLINE=true DJL_CACHE_DIR="${DJL_CACHE_DIR:-$PWD/comm-djl/target/djl-cache}"
JAVA=(java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -Xss4m -cp "$CP")
MAIN=dev.tpcomm.djl.bench.DataParallelStepBench
OUT=$(mktemp /tmp/tpcomm-djl-bench.XXXXXX)
# run TAG COMMAND...: runs COMMAND, keeps its result line (TAG appended), shows and records it.
run() { local tag="$1"; shift; "$@" 2> >(grep -v -e 'WARNING' -e 'SLF4J' >&2) | grep '^impl=' | sed "s/\$/$tag/" | tee -a "$OUT"; }
for r in $(seq 1 "$ROUNDS"); do
  modes="buckets copy"; [ $((r % 2)) = 0 ] && modes="copy buckets"
  for mode in $modes; do
    for w in $WORLDS; do run "" "${JAVA[@]}" $MAIN --backend local --world "$w" --mode "$mode" "$@"; done
    for impl in openmpi mpich; do
      command -v "mpirun.$impl" >/dev/null || continue
      flags=(); [ "$impl" = openmpi ] && flags=(--allow-run-as-root --oversubscribe --bind-to none)
      run " mpi=$impl" "mpirun.$impl" "${flags[@]}" -np 2 "${JAVA[@]}" $MAIN --backend mpi --mode "$mode" "$@"
    done
  done
done
python3 - "$OUT" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(kv.split('=', 1) for kv in line.split())
    key = (f['backend'] + ('/' + f['mpi'] if 'mpi' in f else ''), int(f['world']), f['mode'])
    rows[key].append(f)
print("\n| backend | world | mode | grad bytes | buckets | fwd+bwd us | wait us | average us | optimizer us | step us |")
print("|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(rows):
    fs = rows[key]
    m = lambda k: "%.1f" % statistics.median(float(x[k]) for x in fs)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {fs[0]['grad_bytes']} | {fs[0]['buckets']} | {m('fwd_bwd_us')} | {m('wait_us')} | {m('average_us')} | {m('optimizer_us')} | {m('step_us')} |")
PY
rm -f "$OUT"
