#!/usr/bin/env bash
# Checks what comm-testkit puts on a user's test classpath, the way a user meets it:
#   1. installs the reactor's tpcomm-parent, comm-api, comm-coroutines and comm-testkit, as built in
#      their target/ folders, into a PRIVATE local repository ($TPCOMM_TESTKIT_REPO, default
#      /tmp/tpcomm-testkit-m2; ~/.m2 is only read, through maven.repo.local.tail);
#   2. builds scripts/testkit-consumer (a user's project: comm-coroutines, comm-testkit in test scope
#      and the Kotest runner the guide names) with the "Testing your own layer" example of docs/testing.md
#      as its one test, runs it (mvn test), and fails unless that test ran and passed;
#   3. fails if what the kit brings onto the user's test classpath (comm-testkit's subtree of
#      dependency:tree, resolved without the runner so that no artifact is credited to the runner
#      instead) holds an artifact of DENY below: Kotest's runner and engine and their run-time
#      dependencies come with the user's runner, and rgxgen only serves Arb.stringPattern;
#   4. fails if an artifact of RUNNER_NEEDS is missing from the test classpath the test ran with:
#      the runner's own dependencies (Kotest's POMs); an exclusion the kit puts on a Kotest artifact
#      the runner also brings would remove them for the user (Maven keeps one node per artifact);
#   5. fails if the runner version the project uses is not the parent POM's kotest.version, or
#      docs/testing.md does not name it.
# Run after the build (scripts/test.sh runs it after `verify`); about 1 minute on 2 cores.
# Options: --offline (Maven -o; the consumer's runner and plugins must then be in a local repository).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

offline=()
for a in "$@"; do
  case "$a" in
    --offline) offline=(-o) ;;
    *) echo "usage: $0 [--offline]" >&2; exit 2 ;;
  esac
done

# groupId:artifactId, or groupId:* for a whole group.
DENY=(
  io.kotest:kotest-runner-junit5-jvm
  io.kotest:kotest-runner-junit-platform-jvm
  io.kotest:kotest-framework-engine-jvm
  'org.junit.platform:*'
  io.github.classgraph:classgraph
  'io.github.pdvrieze.xmlutil:*'
  org.jetbrains.kotlinx:kotlinx-io-core-jvm
  org.jetbrains.kotlinx:kotlinx-io-bytestring-jvm
  org.jetbrains.kotlin:kotlin-reflect
  org.jetbrains.kotlinx:kotlinx-coroutines-test-jvm
  org.jetbrains.kotlinx:kotlinx-coroutines-debug
  com.github.curious-odd-man:rgxgen
  community.flock.kotlinx.rgxgen:kotlin-rgxgen-jvm
)
RUNNER_NEEDS=(
  io.kotest:kotest-framework-engine-jvm
  io.github.classgraph:classgraph
  io.github.pdvrieze.xmlutil:serialization-jvm
  org.jetbrains.kotlinx:kotlinx-io-core-jvm
  org.jetbrains.kotlin:kotlin-reflect
  org.jetbrains.kotlinx:kotlinx-coroutines-test-jvm
)

fail() { echo "testkit consumer check FAILED: $*" >&2; exit 1; }
start=$(date +%s)

for m in comm-api comm-coroutines comm-testkit; do
  [ -d "$m/target/classes/dev/tpcomm" ] || { echo "testkit-consumer-check: $m/target/classes does not exist; build first (./mvnw -B -ntp -pl comm-testkit -am package -DskipTests)" >&2; exit 2; }
done

repo="${TPCOMM_TESTKIT_REPO:-/tmp/tpcomm-testkit-m2}"
mkdir -p "$repo"
repo_flags=(-Dmaven.repo.local="$repo")
[ -d "$HOME/.m2/repository" ] && [ "$(cd "$repo" && pwd -P)" != "$(cd "$HOME/.m2/repository" && pwd -P)" ] \
  && repo_flags+=(-Dmaven.repo.local.tail="$HOME/.m2/repository")

# mvn ARGS...: the Maven wrapper, quiet, its output shown (without Maven's own JDK 25 warnings) only on failure.
mvn() {
  local log; log=$(mktemp /tmp/tpcomm-testkit-mvn.XXXXXX)
  if ./mvnw -B -q -ntp "${offline[@]}" "${repo_flags[@]}" "$@" >"$log" 2>&1; then
    rm -f "$log"
  else
    grep -v -e 'sun.misc.Unsafe' -e '^WARNING: Please consider reporting' "$log"; rm -f "$log"; return 1
  fi
}

kotlin_version=$(sed -n 's:.*<kotlin.version>\(.*\)</kotlin.version>.*:\1:p' pom.xml | head -1)
kotest_version=$(sed -n 's:.*<kotest.version>\(.*\)</kotest.version>.*:\1:p' pom.xml | head -1)
project_version=$(sed -n '0,/<version>/s:.*<version>\(.*\)</version>.*:\1:p' pom.xml)

echo "== the Kotest runner a user adds"
runner_version=$(grep -A1 '<artifactId>kotest-runner-junit5-jvm</artifactId>' scripts/testkit-consumer/pom.xml | sed -n 's:.*<version>\(.*\)</version>.*:\1:p')
[ "$runner_version" = "$kotest_version" ] \
  || fail "scripts/testkit-consumer/pom.xml uses kotest-runner-junit5-jvm $runner_version, the build Kotest $kotest_version"
section=$(cat docs/testing.md)
grep -q 'kotest-runner-junit5-jvm' <<<"$section" && grep -q -F "$kotest_version" <<<"$section" \
  || fail "docs/testing.md (\"Testing your own layer\") does not name io.kotest:kotest-runner-junit5-jvm $kotest_version"
echo "kotest-runner-junit5-jvm $runner_version (the build's kotest.version, named in docs/testing.md)"

echo "== installing tpcomm-parent, comm-api, comm-coroutines, comm-testkit $project_version into $repo"
mvn -N install:install || fail "could not install tpcomm-parent"
# jar:jar packs target/classes as the build did (same manifest), so install:install has a jar to install.
mvn -pl comm-api,comm-coroutines,comm-testkit jar:jar install:install || fail "could not install the modules"

echo "== the consumer project: the forAllWorlds example of docs/testing.md, run with Kotest's runner"
work=$(mktemp -d /tmp/tpcomm-testkit-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r scripts/testkit-consumer/. "$work/"
mkdir -p "$work/src/test/kotlin"
sed -n '/<!-- README-SNIPPET testing-your-own-layer: begin -->/,/<!-- README-SNIPPET testing-your-own-layer: end -->/p' docs/testing.md \
  | sed -e '1d;$d' -e '/^```/d' >"$work/src/test/kotlin/ColumnParallelLinearTest.kt"
grep -q 'forAllWorlds(' "$work/src/test/kotlin/ColumnParallelLinearTest.kt" || fail "docs/testing.md has no testing-your-own-layer snippet with forAllWorlds"
versions=(-Dkotlin.version="$kotlin_version" -Dtpcomm.version="$project_version")
tree=org.apache.maven.plugins:maven-dependency-plugin:3.8.1:tree
mvn -f "$work/pom.xml" "${versions[@]}" test $tree -Dscope=test -DoutputFile="$work/tree.txt" \
  || fail "the consumer project did not build or its test failed"

report="$work/target/surefire-reports/TEST-ColumnParallelLinearTest.xml"
[ -f "$report" ] || fail "Surefire ran no ColumnParallelLinearTest (no $report)"
tests=$(sed -n 's:.*<testsuite [^>]* tests="\([0-9]*\)".*:\1:p' "$report" | head -1)
bad=$(sed -n 's:.*<testsuite [^>]* failures="\([0-9]*\)".*:\1:p' "$report" | head -1)
errors=$(sed -n 's:.*<testsuite [^>]* errors="\([0-9]*\)".*:\1:p' "$report" | head -1)
[ "${tests:-0}" -ge 1 ] || fail "0 tests ran in the consumer project"
[ "${bad:-0}" = 0 ] && [ "${errors:-0}" = 0 ] || fail "the consumer's test failed ($bad failures, $errors errors)"
echo "ColumnParallelLinearTest: $tests test(s) passed"

echo "== what comm-testkit brings onto the user's test classpath"
sed '/<!-- kotest-runner: begin/,/<!-- kotest-runner: end -->/d' "$work/pom.xml" >"$work/kit-only.xml"
! grep -q kotest-runner "$work/kit-only.xml" || fail "could not drop the runner from the consumer's POM"
mvn -f "$work/kit-only.xml" "${versions[@]}" $tree -Dscope=test -DoutputFile="$work/kit-tree.txt" \
  || fail "could not resolve the consumer's dependencies without the runner"
# comm-testkit's subtree: from its line at depth 1 to the next depth-1 line; "groupId:artifactId:..." per line.
kit=$(awk '/^[+\\]- dev\.tpcomm:comm-testkit:/ { on = 1; next } /^[+\\]- / { on = 0 } on' "$work/kit-tree.txt" | sed 's/^[| +\\-]*//')
[ -n "$kit" ] || { cat "$work/kit-tree.txt"; fail "comm-testkit is not in the consumer's dependency tree"; }
sed 's/^/  /' <<<"$kit"
denied=()
while IFS=: read -r g a _; do
  for d in "${DENY[@]}"; do
    if [ "$d" = "$g:$a" ] || [ "$d" = "$g:*" ]; then denied+=("$g:$a"); fi
  done
done <<<"$kit"
all=$(sed 's/^[| +\\-]*//' "$work/tree.txt" | cut -d: -f1,2)
missing=()
for n in "${RUNNER_NEEDS[@]}"; do grep -q -x -F "$n" <<<"$all" || missing+=("$n"); done

[ ${#denied[@]} -eq 0 ] || echo "comm-testkit brings what it does not need onto the user's test classpath: ${denied[*]} (the user's runner brings what Kotest's engine needs)" >&2
[ ${#missing[@]} -eq 0 ] || echo "the user's test classpath lacks what Kotest's runner $runner_version brings: ${missing[*]} (an exclusion in comm-testkit removes it)" >&2
[ ${#denied[@]} -eq 0 ] && [ ${#missing[@]} -eq 0 ] || fail "comm-testkit's dependencies (comm-testkit/pom.xml)"
echo "testkit consumer check passed in $(( $(date +%s) - start )) s"
