# Sourced by the launch scripts (expects scripts/env.sh sourced and the repository root as cwd).
#
# tpcomm_build MODULE: builds MODULE and what it needs when a source or pom is newer than its jar
# (Maven wrapper, quiet), then sets TPCOMM_CP to the module's jar and its runtime classpath.
tpcomm_build() {
  local mod="$1"
  local jar="$mod/target/$mod-0.1.0-SNAPSHOT.jar" stale=1
  if [ -f "$jar" ] && [ -f "$mod/target/classpath.txt" ]; then
    if [ -z "$(find comm-api comm-coroutines comm-mpi "$mod" pom.xml -newer "$jar" \( -name '*.kt' -o -name '*.java' -o -name pom.xml -o -name '*.properties' -o -path '*/META-INF/services/*' \) -not -path '*/target/*' 2>/dev/null | head -1)" ]; then
      stale=0
    fi
  fi
  if [ "$stale" = 1 ]; then
    echo "building $mod ..." >&2
    ./mvnw -B -q -pl "$mod" -am package -DskipTests >&2
  fi
  TPCOMM_CP="$jar:$(cat "$mod/target/classpath.txt")"
}

# The JVM flags tpcomm's programs run with (scripts/bench.sh's, through tpcomm_run): native access for
# the MPI and GPU bindings, the Vector API's reduction kernels, the parallel collector, deep stacks.
TPCOMM_JVM_FLAGS=(--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -XX:+UseParallelGC -Xss4m)

# tpcomm_run MODULE MAIN_CLASS [args...]: tpcomm_build, then runs MAIN_CLASS with TPCOMM_JVM_FLAGS,
# hiding the Vector API's incubator warning.
tpcomm_run() {
  local mod="$1" main="$2"; shift 2
  tpcomm_build "$mod"
  exec java "${TPCOMM_JVM_FLAGS[@]}" \
    -cp "$TPCOMM_CP" "$main" "$@" 2> >(grep --line-buffered -v 'WARNING: Using incubator modules' >&2)
}
