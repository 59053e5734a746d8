#!/usr/bin/env bash
# Checks the public API of every published module against its dump, <module>/api/<module>.api
# (checked in), as kotlinx.coroutines' .api files do: a change to a public class, constructor,
# method or field fails this check until the dump is updated on purpose.
#
#   scripts/api-check.sh            compare every published module (each must be built)
#   scripts/api-check.sh MODULE...  compare only those modules
#   scripts/api-check.sh --update   rewrite the dumps from the current build; review and commit them
#
# `./mvnw verify` runs it for each module that has an api/ folder (the parent POM's api-check
# profile, at the verify phase, after the module's jar is built; -Dtpcomm.apiCheck.skip=true skips
# it), so scripts/test.sh, which runs verify, needs no separate call. In that run Maven resolves the
# dump's tools itself and passes them in API_CHECK_CP.
#
# The dump is what code outside the module can call, read from the compiled classes: public and
# protected JVM declarations, minus Kotlin `internal`/`private` ones (from @kotlin.Metadata) and
# synthetic members (scripts/api/ApiDump.java), minus classes and functions marked @InternalTpcommApi:
# the dump is what users may call (kotlinx.coroutines' dumps leave kotlinx.coroutines.internal out);
# tpcomm's own modules, which opt in, are built together and need no dump between them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

ALL_MODULES=(comm-api comm-store comm-coroutines comm-gpu comm-mpi comm-nccl comm-rccl comm-java-interop comm-testkit comm-djl)
if [ -n "${API_CHECK_CP:-}" ]; then
  CP="$API_CHECK_CP"
else
  REPO="${MAVEN_REPO:-$HOME/.m2/repository}"
  ASM="$REPO/org/ow2/asm/asm/9.9/asm-9.9.jar"
  META="$REPO/org/jetbrains/kotlin/kotlin-metadata-jvm/2.4.10/kotlin-metadata-jvm-2.4.10.jar"
  STDLIB="$REPO/org/jetbrains/kotlin/kotlin-stdlib/2.4.10/kotlin-stdlib-2.4.10.jar"
  for a in "org.ow2.asm:asm:9.9:$ASM" "org.jetbrains.kotlin:kotlin-metadata-jvm:2.4.10:$META" "org.jetbrains.kotlin:kotlin-stdlib:2.4.10:$STDLIB"; do
    jar="${a##*:}"; coords="${a%:*}"
    [ -f "$jar" ] || ./mvnw -B -ntp -q dependency:get -Dartifact="$coords" >/dev/null
  done
  CP="$ASM:$META:$STDLIB"
fi

update=0
MODULES=()
for a in "$@"; do
  case "$a" in
    --update) update=1 ;;
    comm-*) [[ " ${ALL_MODULES[*]} " == *" $a "* ]] || { echo "api-check: $a is not a published module (${ALL_MODULES[*]})" >&2; exit 2; }
            MODULES+=("$a") ;;
    *) echo "usage: $0 [--update] [MODULE...]" >&2; exit 2 ;;
  esac
done
[ ${#MODULES[@]} -gt 0 ] || MODULES=("${ALL_MODULES[@]}")
failed=()
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for m in "${MODULES[@]}"; do
  classes="$m/target/classes"
  if [ ! -d "$classes" ]; then
    echo "api-check: $classes does not exist; build first (./mvnw -B -ntp package -DskipTests)" >&2
    exit 2
  fi
  "$JAVA_HOME/bin/java" -cp "$CP" scripts/api/ApiDump.java "$classes" "$m/src/main/kotlin" "$m/src/main/java" > "$tmp/$m.api"
  dump="$m/api/$m.api"
  if [ "$update" = 1 ]; then
    mkdir -p "$m/api"
    cp "$tmp/$m.api" "$dump"
    echo "api-check: wrote $dump ($(grep -c ' {$' "$dump") classes)"
  elif ! diff -u "$dump" "$tmp/$m.api" > "$tmp/$m.diff" 2>&1; then
    failed+=("$m")
    echo "api-check: the public API of $m differs from $dump:" >&2
    head -60 "$tmp/$m.diff" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "api-check: FAILED for ${failed[*]}. If the change is intended, run scripts/api-check.sh --update, review the diff of the .api files and commit them." >&2
  exit 1
fi
[ "$update" = 1 ] || echo "api-check: the public API of ${MODULES[*]} matches the dump$([ ${#MODULES[@]} -gt 1 ] && echo s)"
