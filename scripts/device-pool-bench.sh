#!/usr/bin/env bash
# Device outputs from the pool (issue 34): the GPU engine's all-gather loop on comm-gpu's simulated
# platform (no GPU), outputs closed against forgotten, each case in a fresh JVM, the order of the
# cases alternating each round.
#   closed/forgotten: world of 2 simulated devices of 256 MiB, 1 MiB outputs (131,072 Float32 per
#   rank), 2,000 measured all-gathers per rank after 50 warm-up ones.
#   closed-nopool/forgotten-nopool: the same with -Dtpcomm.memory.devicePool=false (a cudaMallocAsync
#   and a cudaFreeAsync per output, as before the pool).
# Prints per case the median and range of: microseconds per iteration (wall, slowest rank), process
# CPU microseconds per iteration, and cudaMallocAsync calls (both ranks).
# Usage: ROUNDS=3 scripts/device-pool-bench.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/tpcomm-device-pool}"
ROUNDS="${ROUNDS:-3}"
mkdir -p "$OUT"
source scripts/env.sh
jar=comm-bench/target/comm-bench-0.1.0-SNAPSHOT.jar
echo "building comm-bench and comm-gpu's simulator ..." >&2
./mvnw -B -q -o -ntp -pl comm-bench -am package -DskipTests -Dtpcomm.apiCheck.skip=true 2>&1 | { grep -v -e 'sun.misc.Unsafe' -e 'Please consider reporting' >&2 || true; }
CP="$jar:$(cat comm-bench/target/classpath.txt):$(cat comm-bench/target/classpath-sim.txt)"
JAVA=(java -Xmx256m -XX:+UseParallelGC --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector)
CASES="closed forgotten closed-nopool forgotten-nopool"
for r in $(seq 1 "$ROUNDS"); do
  order="$CASES"; [ $((r % 2)) = 0 ] && order="$(echo $CASES | tr ' ' '\n' | tac | tr '\n' ' ')"
  for c in $order; do
    pool=(); case "$c" in *-nopool) pool=(-Dtpcomm.memory.devicePool=false) ;; esac
    timeout 600 "${JAVA[@]}" "${pool[@]}" -cp "$CP" dev.tpcomm.bench.DevicePoolBenchMain allgather 131072 2000 "${c%-nopool}" 256 > "$OUT/$c-$r.txt" 2>&1 || echo "exit $?" >> "$OUT/$c-$r.txt"
  done
  echo "round $r done" >&2
done
python3 - "$OUT" "$ROUNDS" "$CASES" <<'PY'
import re, statistics, sys
out, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def rng(xs): return f"{min(xs):g}..{max(xs):g}" if xs else "-"
for c in cases:
    wall, cpu, mallocs = [], [], []
    for r in range(1, rounds + 1):
        t = open(f"{out}/{c}-{r}.txt").read()
        m = re.search(r"us_per_iter ([0-9.]+) cpu_us_per_iter ([0-9.]+) malloc_async ([0-9]+)", t)
        if m: wall.append(float(m.group(1))); cpu.append(float(m.group(2))); mallocs.append(int(m.group(3)))
        else: print(f"{c} round {r}: FAILED: {t[-300:]!r}")
    if wall:
        print(f"{c:10s} us/iter median {statistics.median(wall):8.1f} range {rng(wall):>15s}  CPU us/iter median {statistics.median(cpu):8.1f} "
              f"range {rng(cpu):>15s}  cudaMallocAsync median {statistics.median(mallocs):g} range {rng(mallocs)}  ({len(wall)} JVMs)")
PY
