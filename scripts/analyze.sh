#!/usr/bin/env bash
# Reads every rank's flight-recorder dump in DIR (CommConfig.flightRecorderDir, TPCOMM_FLIGHT_RECORDER_DIR)
# and prints "verdict: ..." naming the culprit rank(s) and collective sequence number, then the
# evidence per rank. Exit status: 0 healthy or straggler, 1 a failure found, 2 usage or no dumps.
# Usage: scripts/analyze.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="$1"
case "$DIR" in /*) ;; *) DIR="$OLDPWD/$DIR" ;; esac
source scripts/env.sh
source scripts/run-module.sh
tpcomm_build comm-bench >&2
exec java -cp "$TPCOMM_CP" dev.tpcomm.bench.flight.AnalyzeMain "$DIR"
