#!/usr/bin/env bash
# mpi-vs-c.sh -- the MPI backend's float32 all-reduce against ../shared/bench/peers/c_mpi.c (Open MPI),
# in alternating runs: C, then tpcomm (dev.tpcomm.mpi.MpiAllReduceBench) at each thread level, REPS
# times over. This VM moves between a fast and a slow state for minutes at a time (2x apart at every
# size, C and JVM alike), so single runs of each program cannot be compared; alternating runs see
# the same states, and the table gives each program's minimum and median over its runs and the
# ratios of both.
#
#   scripts/mpi-vs-c.sh                      2 ranks, 8 B .. 16 MiB, levels "Single Multiple", 7 rounds
# Knobs (environment): REPS (7), WORLD (2), LEVELS ("Single Multiple"), BENCH_TARGET_S (0.1 s per
#   timed repeat), MPI_FLAGS (extra mpirun flags for both programs, e.g. "--bind-to none"),
#   PEERS_DIR (../shared/bench/peers), OUT (raw results folder).
# Prints a Markdown table on stdout; the raw CSV lines are in $OUT/runs.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
REPS="${REPS:-7}"
WORLD="${WORLD:-2}"
LEVELS="${LEVELS:-Single Multiple}"
export BENCH_TARGET_S="${BENCH_TARGET_S:-0.1}"
export BENCH_COLL=allreduce
PEERS_DIR="${PEERS_DIR:-../shared/bench/peers}"
OUT="${OUT:-target/mpi-vs-c-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
command -v mpirun.openmpi >/dev/null || { echo "mpirun.openmpi not found: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 2; }
[ -f "$PEERS_DIR/c_mpi.c" ] || { echo "$PEERS_DIR/c_mpi.c not found: set PEERS_DIR" >&2; exit 2; }

tpcomm_build comm-bench # its classpath holds comm-mpi and MpiAllReduceBench
mpicc.openmpi -O2 -o "$OUT/c_mpi" "$PEERS_DIR/c_mpi.c"
# shellcheck disable=SC2206 # MPI_FLAGS is a list of flags
MPIRUN=(mpirun.openmpi --allow-run-as-root --oversubscribe ${MPI_FLAGS:-} -x BENCH_TARGET_S -x BENCH_COLL)
JAVA=(java --enable-native-access=ALL-UNNAMED -cp "$TPCOMM_CP" dev.tpcomm.mpi.MpiAllReduceBench)

: > "$OUT/runs.csv"
for r in $(seq "$REPS"); do
  echo "round $r of $REPS" >&2
  "${MPIRUN[@]}" -np "$WORLD" "$OUT/c_mpi" 2>/dev/null | grep '^c_mpi,allreduce,' | sed 's/^c_mpi,/C,/' >> "$OUT/runs.csv"
  for level in $LEVELS; do
    TPCOMM_MPI_THREAD_LEVEL="$level" "${MPIRUN[@]}" -x TPCOMM_MPI_THREAD_LEVEL -np "$WORLD" "${JAVA[@]}" 2>/dev/null \
      | grep '^tpcomm_mpi_openmpi,allreduce,' | sed "s/^tpcomm_mpi_openmpi,/tpcomm $level,/" >> "$OUT/runs.csv"
  done
done

/usr/bin/python3 - "$OUT/runs.csv" "$LEVELS" "$REPS" "$WORLD" "${MPI_FLAGS:-}" <<'EOF'
import csv, statistics, sys
path, levels, reps, world = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
runs = {}
for impl, coll, w, size, t, *_ in csv.reader(open(path)):
    runs.setdefault((impl, int(size)), []).append(float(t))
sizes = sorted({s for (_, s) in runs if s <= 16777216})
def fmt(x): return f"{x:.3g}" if x < 100 else f"{x:,.0f}"
impls = ["C"] + [f"tpcomm {l}" for l in levels]
flags = sys.argv[5].strip()
print(f"Float32 all-reduce, {world} ranks, Open MPI{', mpirun ' + flags if flags else ''}, {reps} alternating rounds; µs, min / median of the runs; ratios to C's min / median.\n")
head = "| bytes | " + " | ".join(impls) + " | " + " | ".join(f"{l} / C" for l in levels) + " |"
print(head)
print("|" + "---|" * (1 + len(impls) + len(levels)))
for s in sizes:
    cells, c = [], runs.get(("C", s))
    for i in impls:
        v = runs.get((i, s))
        cells.append(f"{fmt(min(v))} / {fmt(statistics.median(v))} ({len(v)})" if v else "-")
    ratios = []
    for l in levels:
        v = runs.get((f"tpcomm {l}", s))
        ratios.append(f"{min(v) / min(c):.2f} / {statistics.median(v) / statistics.median(c):.2f}" if v and c else "-")
    print(f"| {s} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
EOF
