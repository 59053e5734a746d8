#!/usr/bin/env bash
# Native host memory budget (issue 34): the forgetful loops against the same loops closing their
# tensors, each in a fresh -Xmx256m JVM with -Dtpcomm.memory.budget=1g, alternating the order of the
# cases each round so the shared machine's slow phases hit all of them.
#   forget/close 1M:  runLocalWorld(2), 1 MiB tensors x 6,000 per rank, an allReduce every 1,000
#   forget/close 64K: 64 KiB tensors x 200,000 per rank, an allReduce every 1,000
#   small:  TensorChurnMain close 8 B (allocate + write + close), ns per op, 5 repeats per JVM
#   64M:    TensorChurnMain close 64 MiB, ns per op, 5 repeats per JVM
# BEFORE_CP (optional): a classpath prefix (e.g. an older comm-api jar) measured as "before" for the
# small and 64M cases, alternating with this tree.
# Usage: ROUNDS=3 scripts/memory-budget-bench.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/tpcomm-memory-budget}"
ROUNDS="${ROUNDS:-3}"
mkdir -p "$OUT"
source scripts/env.sh
source scripts/run-module.sh
tpcomm_build comm-bench
JAVA=(java -Xmx256m -XX:+UseParallelGC --enable-native-access=ALL-UNNAMED -Dtpcomm.memory.budget=1g)
CASES="forget1M close1M forget64K close64K small 64M"
[ -n "${BEFORE_CP:-}" ] && CASES="$CASES small-before 64M-before"
run_case() {
  local c="$1" r="$2" cp="$TPCOMM_CP"
  case "$c" in *-before) cp="$BEFORE_CP:$TPCOMM_CP" ;; esac
  case "$c" in
    forget1M) timeout 300 "${JAVA[@]}" -cp "$cp" dev.tpcomm.bench.MemoryBudgetMain loop 1048576 6000 1000 forget ;;
    close1M) timeout 300 "${JAVA[@]}" -cp "$cp" dev.tpcomm.bench.MemoryBudgetMain loop 1048576 6000 1000 close ;;
    forget64K) timeout 300 "${JAVA[@]}" -cp "$cp" dev.tpcomm.bench.MemoryBudgetMain loop 65536 200000 1000 forget ;;
    close64K) timeout 300 "${JAVA[@]}" -cp "$cp" dev.tpcomm.bench.MemoryBudgetMain loop 65536 200000 1000 close ;;
    small|small-before) "${JAVA[@]}" -cp "$cp" dev.tpcomm.bench.TensorChurnMain close 8 2000000 5 ;;
    64M|64M-before) "${JAVA[@]}" -cp "$cp" dev.tpcomm.bench.TensorChurnMain close $((64 << 20)) 20 5 ;;
  esac > "$OUT/$c-$r.txt" 2>&1 || echo "exit $?" >> "$OUT/$c-$r.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  order="$CASES"; [ $((r % 2)) = 0 ] && order="$(echo $CASES | tr ' ' '\n' | tac | tr '\n' ' ')"
  for c in $order; do run_case "$c" "$r"; done
  echo "round $r done" >&2
done
python3 - "$OUT" "$ROUNDS" "$CASES" <<'PY'
import re, statistics, sys
out, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def med(xs): return statistics.median(xs) if xs else float('nan')
def rng(xs): return f"{min(xs):.2f}..{max(xs):.2f}" if xs else "-"
loops = {}
for c in [c for c in cases if c[:6] in ("forget", "close1", "close6")]:
    secs, cpus, peaks = [], [], []
    for r in range(1, rounds + 1):
        t = open(f"{out}/{c}-{r}.txt").read()
        m = re.search(r"seconds ([0-9.]+) cpu_seconds ([0-9.]+) rss_start_mib ([0-9.]+) rss_peak_mib ([0-9.]+)", t)
        if m: secs.append(float(m.group(1))); cpus.append(float(m.group(2))); peaks.append(float(m.group(4)))
        else: print(f"{c} round {r}: FAILED: {t[-300:]!r}")
    loops[c] = (secs, cpus)
    print(f"{c:10s} wall s median {med(secs):6.2f} range {rng(secs):>13s}  CPU s median {med(cpus):6.2f} range {rng(cpus):>13s}  peak RSS MiB median {med(peaks):7.1f} range {rng(peaks)}  ({len(secs)} JVMs)")
for size in ["1M", "64K"]:
    f, c = loops.get("forget" + size), loops.get("close" + size)
    if f and c and f[0] and c[0]:
        for i, kind in [(0, "wall"), (1, "CPU")]:
            ratios = [a / b for a, b in zip(f[i], c[i])]
            print(f"forget/close {size:3s} {kind:4s} ratio: median of per-round ratios {med(ratios):.2f} range {rng(ratios)}")
for c in [c for c in cases if c.startswith("small") or c.startswith("64M")]:
    for kind, pat in [("wall", r" ns_per_op ([0-9.]+)"), ("cpu", r"cpu_ns_per_op ([0-9.]+)")]:
        per_jvm = []
        for r in range(1, rounds + 1):
            xs = [float(x) for x in re.findall(pat, open(f"{out}/{c}-{r}.txt").read())]
            if xs: per_jvm.append(med(xs))
        if per_jvm:
            print(f"{c:12s} {kind:4s} ns/op: median of JVM medians {med(per_jvm):12.1f}  range {min(per_jvm):.1f}..{max(per_jvm):.1f}  ({len(per_jvm)} JVMs x 5 repeats)")
PY
