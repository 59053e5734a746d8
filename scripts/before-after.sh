#!/usr/bin/env bash
# before-after.sh -- the hot paths of this tree against another revision, alternating, on this machine:
#   local 8 B   LocalAllReduceBench cpu: CPU ns per 8-byte all-reduce, 2 ranks on one thread (median of 7)
#   local 1 MiB LocalAllReduceBench wall: µs per 1 MiB all-reduce, 2 ranks on Dispatchers.Default (median of 5)
#   mpi 8 B     MpiAllReduceBench under mpirun.openmpi -np 2, 8 bytes, called from runBlocking (natural)
#               and on the communicator's thread (fast)
#
#   scripts/before-after.sh REV [ROUNDS]     REV: a commit (default ROUNDS 3)
# The revision is built in a detached worktree ($BEFORE_DIR, default /tmp/tpcomm-before-<rev>); its
# comm-bench must hold dev.tpcomm.bench.local.LocalAllReduceBench (copied in from this tree when it
# does not). Prints one line per program and round; compare medians and spread, not single lines.
set -euo pipefail
cd "$(dirname "$0")/.."
REV="${1:?usage: scripts/before-after.sh REV [ROUNDS]}"
ROUNDS="${2:-3}"
HERE="$(pwd)"
source scripts/env.sh
source scripts/run-module.sh
BEFORE_DIR="${BEFORE_DIR:-/tmp/tpcomm-before-$(git rev-parse --short "$REV")}"
[ -d "$BEFORE_DIR" ] || git worktree add -q --detach "$BEFORE_DIR" "$REV"
bench_src=comm-bench/src/main/kotlin/dev/tpcomm/bench/local/LocalAllReduceBench.kt
if [ ! -f "$BEFORE_DIR/$bench_src" ]; then
  mkdir -p "$(dirname "$BEFORE_DIR/$bench_src")"
  cp "$bench_src" "$BEFORE_DIR/$bench_src"
fi
tpcomm_build comm-bench >/dev/null
after_cp="$TPCOMM_CP"
mkdir -p target
(cd "$BEFORE_DIR" && tpcomm_build comm-bench >/dev/null && echo "$TPCOMM_CP" > "$HERE/target/before-after.cp")
before_cp="$(cat target/before-after.cp)"

run() { # tree dir classpath -- command...
  local tree="$1" dir="$2" cp="$3"; shift 3
  (cd "$dir" && "$@" 2>/dev/null | grep -v '^#' | sed "s|^|$tree |")
}
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS ($(uptime | sed 's/.*load/load/'))"
  for tree in before after; do
    if [ "$tree" = before ]; then dir="$BEFORE_DIR"; cp="$before_cp"; else dir="$HERE"; cp="$after_cp"; fi
    run "$tree local" "$dir" "$cp" java --add-modules=jdk.incubator.vector -cp "$cp" dev.tpcomm.bench.local.LocalAllReduceBench cpu 2
    run "$tree local" "$dir" "$cp" java --add-modules=jdk.incubator.vector -cp "$cp" dev.tpcomm.bench.local.LocalAllReduceBench wall 2 1048576
    for path in natural fast; do
      run "$tree mpi $path" "$dir" "$cp" env BENCH_PATH=$path BENCH_BYTES=8 BENCH_TARGET_S=0.2 \
        mpirun.openmpi --allow-run-as-root -x BENCH_PATH -x BENCH_BYTES -x BENCH_TARGET_S -np 2 \
        java --enable-native-access=ALL-UNNAMED -cp "$cp" dev.tpcomm.bench.mpi.MpiAllReduceBench
    done
  done
done
