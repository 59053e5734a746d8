#!/usr/bin/env bash
# first-calls.sh -- what a fresh JVM's first small calls cost next to the steady state (issue 37),
# with and without a JDK 25 ahead-of-time cache (JEP 483/514/515: classes loaded and linked, and
# method profiles, from a training run), in alternating rounds.
#
# Each run is dev.tpcomm.bench.FirstCallsBench in a fresh JVM: Comm.create with the default
# configuration, an 8-byte float32 all-reduce from runBlocking, timed from the very first call
# (call1, the mean of the first 20,000, of the first 200,000, and 400,000 steady calls after
# 1,000,000). Configurations: the in-process backend at 4 ranks, and 2 ranks under each installed
# MPI; "none" is the floor, the same loop calling a communicator that only adds 1 to the tensor (the
# JIT's price for the caller's own loop). The cache of each configuration is trained once, by one
# run of the same program (-XX:AOTCacheOutput; under mpirun rank 0 trains, the others run plain),
# before the rounds.
#
#   scripts/first-calls.sh                   3 rounds, local + openmpi + mpich, plain and aot
# Knobs (environment): ROUNDS (3), CONFIGS ("local openmpi mpich"), MODES ("plain aot"; also
#   nojmx: -Dtpcomm.jmx=false, to see what the MBeans' background registration costs; c1:
#   -XX:TieredStopAtLevel=1, the client compiler only; warm1s, warm2s: CommConfig.warmUp of 1 or 2
#   seconds, through TPCOMM_WARM_UP_SECONDS, its time counted in the creation),
#   OUT (raw results folder).
# Prints one Markdown table (median and range over the rounds of each figure) and keeps the raw
# lines in $OUT/runs.csv (config,mode,round,figure,value).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
ROUNDS="${ROUNDS:-3}"
CONFIGS="${CONFIGS:-local openmpi mpich}"
MODES="${MODES:-plain aot}"
OUT="${OUT:-target/first-calls-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
tpcomm_build comm-bench
JAVA=(java --enable-native-access=ALL-UNNAMED -cp "$TPCOMM_CP")
MAIN=dev.tpcomm.bench.FirstCallsBench

# run CONFIG [java flags...]: one fresh run of CONFIG, its first_calls lines on stdout.
run() {
  local config="$1"; shift
  case "$config" in
    local) "${JAVA[@]}" "$@" "$MAIN" local 4 ;;
    none) "${JAVA[@]}" "$@" "$MAIN" none ;; # the floor: the same loop, no library call
    openmpi) mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 "${JAVA[@]}" "$@" "$MAIN" mpi ;;
    mpich) mpirun.mpich -np 2 "${JAVA[@]}" "$@" "$MAIN" mpi ;;
    *) echo "unknown configuration $config (local, none, openmpi, mpich)" >&2; return 2 ;;
  esac
}

# train CONFIG: the AOT cache of CONFIG, from one run of the same program (rank 0 writes it).
train() {
  local config="$1" cache="$OUT/$1.aot"
  case "$config" in
    local|none) "${JAVA[@]}" -XX:AOTCacheOutput="$cache" "$MAIN" "$config" $([ "$config" = local ] && echo 4) >/dev/null 2>"$OUT/train-$config.log" ;;
    *)
      cat > "$OUT/train-$config.sh" <<EOF
#!/usr/bin/env bash
if [ "\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}" = 0 ]; then exec java --enable-native-access=ALL-UNNAMED -cp "$TPCOMM_CP" -XX:AOTCacheOutput="$cache" $MAIN mpi
else exec java --enable-native-access=ALL-UNNAMED -cp "$TPCOMM_CP" $MAIN mpi; fi
EOF
      chmod +x "$OUT/train-$config.sh"
      if [ "$config" = openmpi ]; then mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 "$OUT/train-$config.sh"
      else mpirun.mpich -np 2 "$OUT/train-$config.sh"; fi >/dev/null 2>"$OUT/train-$config.log" ;;
  esac
  [ -s "$cache" ] || { echo "training $config wrote no AOT cache; see $OUT/train-$config.log" >&2; return 1; }
}

configs=()
for c in $CONFIGS; do
  if [ "$c" != local ] && [ "$c" != none ] && ! command -v "mpirun.$c" >/dev/null; then echo "mpirun.$c not found: skipping $c" >&2; continue; fi
  configs+=("$c")
  case " $MODES " in *" aot "*) echo "training the AOT cache of $c ..." >&2; train "$c" ;; esac
done
runs="$OUT/runs.csv"
: > "$runs"
for r in $(seq "$ROUNDS"); do
  for c in "${configs[@]}"; do
    for m in $MODES; do
      echo "round $r of $ROUNDS: $c $m (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      flags=(); warm=0
      case "$m" in
        plain) ;;
        aot) flags=(-XX:AOTCache="$OUT/$c.aot") ;;
        nojmx) flags=(-Dtpcomm.jmx=false) ;; # what the MBeans' background registration costs
        c1) flags=(-XX:TieredStopAtLevel=1) ;; # C1 only: quicker to compile, slower code
        warm1s|warm2s) warm="${m#warm}"; warm="${warm%s}" ;; # CommConfig.warmUp, through TPCOMM_WARM_UP_SECONDS
        *) echo "unknown mode $m (plain, aot, nojmx, c1, warm1s, warm2s)" >&2; exit 2 ;;
      esac
      TPCOMM_WARM_UP_SECONDS="$warm" run "$c" "${flags[@]}" 2>>"$OUT/stderr.log" | grep '^first_calls,' | cut -d, -f4,5 | sed "s/^/$c,$m,$r,/" >> "$runs"
    done
  done
done

python3 - "$runs" <<'EOF'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
figs = ["create_ms", "call1_us", "first20k", "first200k", "steady", "ratio_first20k"]
by = {}
for c, m, r, f, v in rows:
    by.setdefault((c, m), {}).setdefault(f, []).append(float(v))
print("| configuration | JVM | " + " | ".join(figs) + " |")
print("|---|---|" + "---|" * len(figs))
for (c, m), d in by.items():
    cells = []
    for f in figs:
        v = d.get(f, [])
        cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-")
    print(f"| {c} | {m} | " + " | ".join(cells) + " |")
print(f"\nmedian (min-max) over {len(set(r for _, _, r, _, _ in rows))} rounds; create in ms, call1 and the means in us per call; raw: {sys.argv[1]}")
EOF
