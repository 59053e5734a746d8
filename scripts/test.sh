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
./mvnw -B -ntp verify "$@"
