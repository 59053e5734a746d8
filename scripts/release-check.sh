#!/usr/bin/env bash
# Checks that a release can be published, without publishing anything:
#   1. `./mvnw -Prelease -Dgpg.skip -DskipTests install` into a PRIVATE local repository
#      ($TPCOMM_RELEASE_REPO, default /tmp/tpcomm-release-m2; never ~/.m2, which it only reads
#      through Maven's maven.repo.local.tail): main, sources and Dokka javadoc jars, the BOM;
#   2. scripts/release/ReleaseCheck.java: every published module has the three jars (javadoc with
#      Dokka's index.html), an Automatic-Module-Name, the license/scm/developers metadata; the BOM
#      pins exactly the published modules; the release profile signs and publishes;
#      and every public declaration has KDoc (scripts/kdoc-check.sh on the build's Dokka warnings);
#   3. a user's project (scripts/release/consumer) with exactly the README's Maven declarations
#      (between the README-MAVEN markers) and Kotlin compiler plugin with kotlinx-serialization
#      (README-MAVEN-KOTLIN markers; the project sends a @Serializable class of its own through
#      allGatherObject) builds against those installed artifacts and runs with the README's JVM
#      flags (README-JVM-FLAGS markers).
# Options: --no-build (reuse what a previous run installed), --offline (Maven -o).
# Called by scripts/test.sh. Takes about 4-6 minutes on 2 cores (Kotlin compile + Dokka).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

build=1; offline=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --offline) offline=(-o) ;;
    *) echo "usage: $0 [--no-build] [--offline]" >&2; exit 2 ;;
  esac
done

repo="${TPCOMM_RELEASE_REPO:-/tmp/tpcomm-release-m2}"
mkdir -p "$repo"
repo_flags=(-Dmaven.repo.local="$repo")
[ -d "$HOME/.m2/repository" ] && [ "$(cd "$repo" && pwd -P)" != "$(cd "$HOME/.m2/repository" && pwd -P)" ] \
  && repo_flags+=(-Dmaven.repo.local.tail="$HOME/.m2/repository")

# mvn ARGS...: the Maven wrapper, quiet, its output shown without Maven's own JDK 25 warnings.
mvn() {
  local log; log=$(mktemp /tmp/tpcomm-release-mvn.XXXXXX)
  if ./mvnw -B -q -ntp "${offline[@]}" "${repo_flags[@]}" "$@" >"$log" 2>&1; then
    grep -v -e 'sun.misc.Unsafe' -e '^WARNING: Please consider reporting' "$log" || true; rm -f "$log"
  else
    cat "$log"; rm -f "$log"; return 1
  fi
}

start=$(date +%s)
if [ "$build" = 1 ]; then
  echo "== release build: ./mvnw -Prelease -Dgpg.skip -DskipTests install (local repository $repo)"
  # Not quiet: Dokka's "Undocumented:" warnings are the KDoc check's input.
  build_log=$(mktemp /tmp/tpcomm-release-build.XXXXXX)
  if ! ./mvnw -B -ntp "${offline[@]}" "${repo_flags[@]}" -Prelease -Dgpg.skip -DskipTests install >"$build_log" 2>&1; then
    grep -E '^\[ERROR\]|FAIL' "$build_log" | head -60; rm -f "$build_log"
    echo "release build failed" >&2; exit 1
  fi
  echo "== KDoc on every public declaration (Dokka's reportUndocumented)"
  scripts/kdoc-check.sh "$build_log" || { rm -f "$build_log"; exit 1; }
  rm -f "$build_log"
fi

echo "== release artifacts"
java scripts/release/ReleaseCheck.java "$repo"

echo "== consumer project with the README's Maven declarations"
work=$(mktemp -d /tmp/tpcomm-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r scripts/release/consumer/. "$work/"
mv "$work/pom.xml.in" "$work/pom.xml"
snippet=$(sed -n '/<!-- README-MAVEN: begin -->/,/<!-- README-MAVEN: end -->/p' README.md | sed -e '1d;$d' | sed -e '/^```/d')
[ -n "$snippet" ] || { echo "README.md has no README-MAVEN block" >&2; exit 1; }
kotlin_version=$(sed -n 's:.*<kotlin.version>\(.*\)</kotlin.version>.*:\1:p' pom.xml | head -1)
project_version=$(sed -n '0,/<version>/s:.*<version>\(.*\)</version>.*:\1:p' pom.xml)
grep -q "<version>$project_version</version>" <<<"$snippet" \
  || { echo "README's Maven block does not name the project's version $project_version" >&2; exit 1; }
kotlin_snippet=$(sed -n '/<!-- README-MAVEN-KOTLIN: begin -->/,/<!-- README-MAVEN-KOTLIN: end -->/p' README.md | sed -e '1d;$d' | sed -e '/^```/d')
[ -n "$kotlin_snippet" ] || { echo "README.md has no README-MAVEN-KOTLIN block" >&2; exit 1; }
grep -q '<plugin>kotlinx-serialization</plugin>' <<<"$kotlin_snippet" && grep -q '<artifactId>kotlin-maven-serialization</artifactId>' <<<"$kotlin_snippet" \
  || { echo "README's Kotlin plugin block does not apply the kotlinx-serialization compiler plugin" >&2; exit 1; }
grep -q "<version>$kotlin_version</version>" <<<"$kotlin_snippet" \
  || { echo "README's Kotlin plugin block does not name the build's Kotlin $kotlin_version" >&2; exit 1; }
SNIPPET="$snippet" KSNIPPET="$kotlin_snippet" KOTLIN_VERSION="$kotlin_version" \
  perl -0pi -e 's/\@README_MAVEN\@/$ENV{SNIPPET}/; s/\@README_MAVEN_KOTLIN\@/$ENV{KSNIPPET}/; s/\@KOTLIN_VERSION\@/$ENV{KOTLIN_VERSION}/' "$work/pom.xml"
mvn -f "$work/pom.xml" package || { echo "the consumer project did not build with the README's declarations" >&2; exit 1; }

flags=$(sed -n '/<!-- README-JVM-FLAGS: begin -->/,/<!-- README-JVM-FLAGS: end -->/p' README.md | grep -o -- '--[a-z-]*=[^ ]*' | tr '\n' ' ')
[ -n "$flags" ] || { echo "README.md has no README-JVM-FLAGS block" >&2; exit 1; }
# shellcheck disable=SC2086
out=$(java $flags -cp "$work/target/classes:$(cat "$work/target/classpath.txt")" com.example.MainKt 2>&1) \
  || { echo "$out"; echo "the consumer project failed to run" >&2; exit 1; }
echo "$out" | grep -v 'WARNING: Using incubator modules'
grep -q '^consumer: allReduce over 4 local ranks.*allGatherObject of RankInfo' <<<"$out" || { echo "the consumer printed no result" >&2; exit 1; }
if grep -q 'restricted method' <<<"$out"; then echo "the README's flags leave a restricted-method warning" >&2; exit 1; fi
echo "release check passed in $(( $(date +%s) - start )) s"
