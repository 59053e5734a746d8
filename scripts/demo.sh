#!/usr/bin/env bash
# The tensor-parallel training demo (comm-examples): a Megatron-style MLP block trained on 4 ranks,
# checked against the same model computed densely on one rank.
#   scripts/demo.sh                                   local backend (coroutine ranks), 4 ranks
#   scripts/demo.sh --backend mpi --world 4           4 processes under mpirun (Open MPI; --mpi mpich)
#   scripts/demo.sh --sequence-parallel               all-gather / reduce-scatter along the sequence
#   scripts/demo.sh --help                            every option
# Builds what is needed first (Maven wrapper, quiet; skipped when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
MOD=comm-examples
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
  -cp "$CP" dev.tpcomm.examples.DemoMain "$@" 2> >(grep --line-buffered -v 'WARNING: Using incubator modules' >&2)
