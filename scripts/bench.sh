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
MOD=comm-bench
JAR="$MOD/target/$MOD-0.1.0-SNAPSHOT.jar"
stale=1
if [ -f "$JAR" ] && [ -f "$MOD/target/classpath.txt" ]; then
  # Rebuild only when a source or pom is newer than the jar.
  if [ -z "$(find comm-api comm-coroutines comm-mpi "$MOD" pom.xml -newer "$JAR" \( -name '*.kt' -o -name '*.java' -o -name pom.xml -o -name '*.properties' -o -path '*/META-INF/services/*' \) -not -path '*/target/*' 2>/dev/null | head -1)" ]; then
    stale=0
  fi
fi
if [ "$stale" = 1 ]; then
  echo "building $MOD ..." >&2
  ./mvnw -B -q -pl "$MOD" -am package -DskipTests >&2
fi
CP="$JAR:$(cat "$MOD/target/classpath.txt")"
exec java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -XX:+UseParallelGC -Xss4m \
  -cp "$CP" dev.tpcomm.bench.BenchMain "$@" 2> >(grep --line-buffered -v 'WARNING: Using incubator modules' >&2)
