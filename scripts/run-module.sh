# Sourced by the launch scripts: tpcomm_run MODULE MAIN_CLASS [args...] builds MODULE (and what it
# needs) when a source or pom is newer than its jar, then runs MAIN_CLASS on its classpath with the
# JVM flags tpcomm needs. Expects scripts/env.sh to be sourced and the repository root as cwd.
tpcomm_run() {
  local mod="$1" main="$2"; shift 2
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
  exec java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -XX:+UseParallelGC -Xss4m \
    -cp "$jar:$(cat "$mod/target/classpath.txt")" "$main" "$@" 2> >(grep --line-buffered -v 'WARNING: Using incubator modules' >&2)
}
