#!/usr/bin/env bash
# Host tensor churn (issue 21): tpcomm's pooled allocator ("pool") against one shared arena per
# tensor ("arena", -Dtpcomm.memory.pool=false, the allocator before the pool), each measurement in
# a fresh -Xmx256m JVM, the two alternating for ROUNDS rounds so the machine's slow phases hit both.
#   close 8 B and 64 MiB: allocate + write + close, ns per op (median of each JVM's repeats)
#   forget: N fresh 8-byte tensors never closed (10M by default): seconds and RSS start/end/peak
#   allgather: N all-gathers on a local world of 2 ranks, fresh input and output never closed (1M)
# Usage: ROUNDS=3 FORGET_N=10000000 ALLGATHER_N=1000000 scripts/tensor-churn.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/tpcomm-tensor-churn}"
ROUNDS="${ROUNDS:-3}"
FORGET_N="${FORGET_N:-10000000}"
ALLGATHER_N="${ALLGATHER_N:-1000000}"
mkdir -p "$OUT"
source scripts/env.sh
source scripts/run-module.sh
tpcomm_build comm-bench
JAVA=(java -Xmx256m -XX:+UseParallelGC -cp "$TPCOMM_CP")
MAIN=dev.tpcomm.bench.TensorChurnMain
flag() { [ "$1" = arena ] && echo "-Dtpcomm.memory.pool=false" || echo "-Dtpcomm.memory.pool=true"; }
for r in $(seq 1 "$ROUNDS"); do
  order="pool arena"; [ $((r % 2)) = 0 ] && order="arena pool"
  for v in $order; do
    "${JAVA[@]}" "$(flag $v)" $MAIN close 8 $([ $v = pool ] && echo 2000000 || echo 20000) 5 > "$OUT/close8-$v-$r.txt" 2>&1 || true
    "${JAVA[@]}" "$(flag $v)" $MAIN close $((64 << 20)) 20 5 > "$OUT/close64M-$v-$r.txt" 2>&1 || true
    start=$(date +%s.%N)
    timeout 300 "${JAVA[@]}" "$(flag $v)" $MAIN forget "$FORGET_N" > "$OUT/forget-$v-$r.txt" 2>&1 \
      || echo "exit $? after $(echo "$(date +%s.%N) - $start" | bc) s" >> "$OUT/forget-$v-$r.txt"
    start=$(date +%s.%N)
    timeout 300 "${JAVA[@]}" "$(flag $v)" $MAIN allgather "$ALLGATHER_N" > "$OUT/allgather-$v-$r.txt" 2>&1 \
      || echo "exit $? after $(echo "$(date +%s.%N) - $start" | bc) s" >> "$OUT/allgather-$v-$r.txt"
    echo "round $r $v done" >&2
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import re, statistics, sys, glob
out, rounds = sys.argv[1], int(sys.argv[2])
def med(xs): return statistics.median(xs) if xs else float('nan')
for case in ["close8", "close64M"]:
    for v in ["pool", "arena"]:
        for kind, pat in [("wall", r" ns_per_op ([0-9.]+)"), ("cpu", r"cpu_ns_per_op ([0-9.]+)")]:
            per_jvm = []
            for r in range(1, rounds + 1):
                xs = [float(m) for m in re.findall(pat, open(f"{out}/{case}-{v}-{r}.txt").read())]
                if xs: per_jvm.append(med(xs))
            if per_jvm:
                print(f"{case:9s} {v:5s} {kind:4s} ns/op: median of JVM medians {med(per_jvm):12.1f}  range {min(per_jvm):.1f}..{max(per_jvm):.1f}  ({len(per_jvm)} JVMs x 5 repeats)")
for case, v in [(c, v) for c in ["forget", "allgather"] for v in ["pool", "arena"]]:
    for r in range(1, rounds + 1):
        text = open(f"{out}/{case}-{v}-{r}.txt").read()
        m = re.search(r"done .*", text)
        if m: print(f"{case:9s} {v:5s} round {r}: {m.group(0)}")
        else:
            err = re.search(r"(OutOfMemoryError[^\n]*)", text); ex = re.search(r"exit .*", text)
            last = re.findall(r"rss at .*", text)
            print(f"{case:9s} {v:5s} round {r}: FAILED {err.group(1) if err else ''} {ex.group(0) if ex else ''}; last: {last[-1] if last else '-'}")
PY
