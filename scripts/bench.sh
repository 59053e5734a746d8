#!/usr/bin/env bash
# comm-bench: nccl-tests-style collective benchmark of tpcomm (table on stdout, CSV, PNG plot).
#   scripts/bench.sh                                          float32 all-reduce, 4 local ranks, 8 B..64 MiB
#   scripts/bench.sh --op all --world 2 --sizes 8,1K,64K      every collective
#   scripts/bench.sh --backend mpi --world 4 [--mpi mpich]    processes under mpirun (launched by the tool)
#   scripts/bench.sh -b 8 -e 64M -f 4 --csv out.csv --plot out.png --compare ../shared/bench/peers/results/results.csv
#   scripts/bench.sh --help                                   every option
# Builds what is needed first (Maven wrapper, quiet; skipped when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
tpcomm_run comm-bench dev.tpcomm.bench.BenchMain "$@"
