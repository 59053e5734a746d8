#!/usr/bin/env bash
# allToAllV against allToAll at equal sizes and against the padded workaround at skewed sizes, on
# the local backend (issue 22; dev.tpcomm.bench.UnevenBenchMain documents the method).
# Usage: scripts/uneven-bench.sh [WORLD [REPEATS [BYTES_PER_PAIR...]]]   (defaults: 4 7 4096 65536 1048576 4194304)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
tpcomm_run comm-bench dev.tpcomm.bench.UnevenBenchMain "$@"
