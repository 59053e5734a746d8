#!/usr/bin/env bash
# The binary distribution a cluster user copies to a node without Maven:
#   tpcomm-<version>-bin.tar.gz
#     bin/tpcomm-bench   nccl-tests-style benchmark (comm-bench BenchMain; --help)
#     bin/tpcomm-demo    the tensor-parallel MLP demo (comm-examples DemoMain; --help)
#     bin/tpcomm-check   the conformance suite against a backend (comm-bench CheckMain; --help)
#     bin/tpcomm-run     starts N local ranks with torchrun's variables, without MPI or Python (scripts/dist/tpcomm-run)
#     lib/               every jar they run with, plus the Java facade (comm-java-interop), comm-djl and comm-store
#                        with theirs, so that a user's program runs with -cp 'lib/*'
#     README.md, LICENSE
#     runtime/           with --jlink: a jlinked JDK 25 (then no Java is needed on the node)
#
#   scripts/dist.sh [--jlink] [--out DIR] [--no-build]
# --out: where the archive goes (default target/dist). --no-build: use the jars already built.
# Prints the archive's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/dist-lib.sh

jlink=0; out=target/dist; build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --jlink) jlink=1 ;;
    --out) out="${2:?--out needs a folder}"; shift ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "dist.sh: unknown argument '$1' (--jlink, --out DIR, --no-build)" >&2; exit 2 ;;
  esac
  shift
done

version=$(tpcomm_version)
if [ "$build" = 1 ]; then
  echo "building comm-bench, comm-examples, comm-java-interop, comm-djl and comm-store ..." >&2
  ./mvnw -B -q -ntp -pl comm-bench,comm-examples,comm-java-interop,comm-djl,comm-store -am package -DskipTests 2>&1 | { grep -v -e 'sun.misc.Unsafe' -e 'Please consider reporting' >&2 || true; }
fi

stage=$(mktemp -d /tmp/tpcomm-dist.XXXXXX)
trap 'rm -rf "$stage"' EXIT
tree="$stage/tpcomm-$version"
for mod in comm-bench comm-examples comm-java-interop comm-djl comm-store; do
  [ -f "$mod/target/$mod-$version.jar" ] && [ -f "$mod/target/classpath.txt" ] \
    || { echo "dist.sh: $mod is not built (run without --no-build)" >&2; exit 1; }
  tpcomm_dist_jars "$tree/lib" "$mod/target/$mod-$version.jar" "$(cat "$mod/target/classpath.txt")"
done
tpcomm_launcher "$tree/bin/tpcomm-bench" dev.tpcomm.bench.BenchMain "tpcomm-bench: nccl-tests-style collective benchmark of tpcomm (--help lists every option)."
tpcomm_launcher "$tree/bin/tpcomm-demo" dev.tpcomm.examples.DemoMain "tpcomm-demo: a Megatron-style tensor-parallel MLP on any backend, checked against the dense model (--help)."
tpcomm_launcher "$tree/bin/tpcomm-check" dev.tpcomm.bench.CheckMain "tpcomm-check: comm-testkit's conformance suite against one backend (--help)."
install -m 755 scripts/dist/tpcomm-run "$tree/bin/tpcomm-run"
cp LICENSE "$tree/"
sed "s/@VERSION@/$version/g" scripts/dist/README.md > "$tree/README.md"
if [ "$jlink" = 1 ]; then
  tpcomm_jlink "$tree/runtime" "$tree/lib"
  archive="$out/tpcomm-$version-bin-linux-$(uname -m).tar.gz"
else
  archive="$out/tpcomm-$version-bin.tar.gz"
fi
tpcomm_tar "$archive" "$tree"
echo "dist: $(du -h "$archive" | cut -f1) $(tar -tzf "$archive" | grep -c '\.jar$') jars" >&2
readlink -f "$archive"
