#!/usr/bin/env bash
# Lists the public declarations without KDoc, from the "Undocumented:" lines Dokka's
# reportUndocumented writes into a Maven log (the release profile's Dokka run), and fails when there
# is one: every public declaration of a published module carries KDoc (issue 19, the chosen surface).
#
#   scripts/kdoc-check.sh MAVEN_LOG [LIST_OUT]     LIST_OUT: where to write the full list (optional)
#
# Dokka also lists what needs no KDoc of its own: the members the compiler generates for enums
# (values, valueOf, entries), companion objects with nothing but members, and overrides (Dokka renders
# the overridden member's documentation on them). Those are counted, not failed. Called by
# scripts/release-check.sh (whose release build runs Dokka) and scripts/docs.sh.
set -euo pipefail
log="${1:?usage: kdoc-check.sh MAVEN_LOG [LIST_OUT]}"
list="${2:-/dev/null}"
cd "$(dirname "$0")/.."
undocumented=$(grep -o 'Undocumented: .*' "$log" | sed 's/^Undocumented: //' | sort -u || true)
if ! grep -q 'dokka' "$log"; then
  echo "kdoc-check: $log shows no Dokka run (run the release profile: ./mvnw -Prelease ...)" >&2; exit 2
fi
generated=0; companions=0; overrides=0; missing=()
while IFS= read -r line; do
  [ -n "$line" ] || continue
  IFS=/ read -r pkg cls member _ <<<"$line"
  case "$member" in values|valueOf|entries) generated=$((generated + 1)); continue ;; esac
  if [ -z "$member" ] || [ "$member" = " (JVM)" ]; then
    case "$cls" in *Companion) companions=$((companions + 1)); continue ;; esac
  fi
  simple=${cls##*.}
  # shellcheck disable=SC2046 # one word per source folder
  files=$(grep -rlE "(class|object|interface) $simple\b" --include=*.kt $(ls -d */src/main/kotlin 2>/dev/null) 2>/dev/null | xargs -r grep -l "^package ${pkg}\$" 2>/dev/null || true)
  if [ "$member" = "toString" ] || { [ -n "$files" ] && grep -qE "override (suspend )?(fun|val|var) (<[^>]*> )?$member\b" $files; }; then
    overrides=$((overrides + 1)); continue
  fi
  missing+=("$line")
done <<<"$undocumented"
n=$(grep -c . <<<"$undocumented" || true)
printf '%s\n' "${missing[@]+"${missing[@]}"}" | sed '/^$/d' >"$list"
echo "kdoc-check: Dokka reports $n undocumented declarations: $generated generated enum members, $companions companion objects, $overrides overrides (documented by what they override), ${#missing[@]} without KDoc"
if [ ${#missing[@]} -gt 0 ]; then
  for m in "${missing[@]}"; do echo "  $m"; done
  echo "kdoc-check: add KDoc to the declarations above (every public declaration of a published module has it)" >&2
  exit 1
fi
