#!/usr/bin/env bash
# Runs every test of tpcomm on a fresh machine: finds JDK 25, installs the MPI implementations
# the MPI backend is tested against, and runs the Maven build through the wrapper. As root it also
# runs jobs across network namespaces (scripts/multihost.sh: MultiHostJobsTest, MultiHostDemoTest;
# about 4 minutes; TPCOMM_SKIP_MULTIHOST=1 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

need=()
for pkg in openmpi-bin libopenmpi-dev mpich libmpich-dev iproute2; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "JDK: $JAVA_HOME"
# Every relative link of README.md and docs/*.md resolves (a file, and a heading for an #anchor).
scripts/link-check.sh
# verify also checks the public API of every published module against its checked-in dump
# (<module>/api/<module>.api; scripts/api-check.sh, run by the parent POM's api-check profile).
./mvnw -B -ntp verify "$@"

# What comm-testkit puts on a user's test classpath: a user's project with Kotest's runner 6.2.4
# runs the forAllWorlds example of docs/testing.md against the built jars, and the kit brings nothing Kotest's
# runner brings itself (no engine, classgraph, xmlutil, kotlinx-io, kotlin-reflect, coroutines-test)
# and no rgxgen.
echo "== test kit in a user's project"
scripts/testkit-consumer-check.sh

# Release artifacts (sources, Dokka javadoc, BOM, POM metadata) built into a private repository,
# and a consumer project with the README's Maven lines; then the binary distribution and the GPU
# bundle, unpacked and run from a temporary folder (they reuse that build).
echo "== release check"
scripts/release-check.sh
echo "== binary distribution and GPU bundle"
scripts/dist-check.sh --no-build
