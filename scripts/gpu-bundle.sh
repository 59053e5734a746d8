#!/usr/bin/env bash
# A self-contained bundle that runs the GPU check on a machine with an NVIDIA GPU and no JDK, no
# Maven and no network (the lent H100: see ../shared/notes/gpu-bindings.md):
#   scripts/gpu-bundle.sh DIR          writes DIR/tpcomm-gpu-bundle-<version>.tar.gz (< 60 MB)
# It holds a jlinked JDK 25 runtime (jlink --strip-debug --no-header-files --no-man-pages
# --compress zip-9, modules from jdeps), the jars of comm-nccl, its test classes (GpuCheckMain) and
# their test classpath, and one command, made with the same mechanism as scripts/dist.sh
# (scripts/dist-lib.sh):
#   tar xzf tpcomm-gpu-bundle-*.tar.gz && tpcomm-gpu-bundle-*/tpcomm-gpu-check
# which runs, at world size 1 on GPU 0, the comm-testkit conformance cases through the JavaCPP
# NCCL binding, then the all-reduce sweep 8 B..256 MiB, printing both and keeping the logs in
# ./tpcomm-gpu-results/. On a machine with no NVIDIA GPU (no /dev/nvidia* device or no
# libcuda.so.1 driver library) it prints "no GPU found: ..." and exits with status 2, as
# scripts/gpu-check.sh does, before starting Java.
# Options after DIR: --no-build (use what is built).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/dist-lib.sh

dir="${1:-}"
[ -n "$dir" ] || { echo "usage: $0 DIR [--no-build]" >&2; exit 2; }
build=1; [ "${2:-}" = "--no-build" ] && build=0
mkdir -p "$dir"
version=$(tpcomm_version)
limit_mb=60

if [ "$build" = 1 ]; then
  echo "building comm-nccl and its test classes ..." >&2
  ./mvnw -B -q -ntp -pl comm-nccl -am package -DskipTests dependency:build-classpath \
    -Dmdep.includeScope=test -Dmdep.outputFile=target/gpu-bundle.classpath 2>&1 \
    | { grep -v -e 'sun.misc.Unsafe' -e 'Please consider reporting' >&2 || true; }
else
  # The jars are built (e.g. by scripts/release-check.sh's install into $TPCOMM_RELEASE_REPO): only
  # resolve comm-nccl's test classpath, against that repository when there is one.
  repo_flags=()
  if [ -n "${TPCOMM_RELEASE_REPO:-}" ]; then
    repo_flags=(-Dmaven.repo.local="$TPCOMM_RELEASE_REPO")
    [ -d "$HOME/.m2/repository" ] && repo_flags+=(-Dmaven.repo.local.tail="$HOME/.m2/repository")
  fi
  ./mvnw -B -q -ntp "${repo_flags[@]}" -pl comm-nccl dependency:build-classpath \
    -Dmdep.includeScope=test -Dmdep.outputFile=target/gpu-bundle.classpath 2>&1 \
    | { grep -v -e 'sun.misc.Unsafe' -e 'Please consider reporting' >&2 || true; }
fi
[ -f comm-nccl/target/gpu-bundle.classpath ] && [ -d comm-nccl/target/test-classes/dev/tpcomm/nccl ] \
  || { echo "gpu-bundle.sh: comm-nccl is not built with its test classes (run without --no-build)" >&2; exit 1; }

stage=$(mktemp -d /tmp/tpcomm-gpu-bundle.XXXXXX)
trap 'rm -rf "$stage"' EXIT
tree="$stage/tpcomm-gpu-bundle-$version"
mkdir -p "$tree/lib"
jar --create --file "$tree/lib/comm-nccl-$version-gpucheck.jar" -C comm-nccl/target/test-classes .
tpcomm_dist_jars "$tree/lib" "comm-nccl/target/comm-nccl-$version.jar" "$(cat comm-nccl/target/gpu-bundle.classpath)"
# Test-only jars GpuCheckMain never loads (MockK and its agent, the JUnit/Kotest runners, the
# coroutines debug agent, and JNA, which Kotest's console output uses and which would pull
# java.desktop into the runtime): without them the bundle stays under the limit.
rm -f "$tree"/lib/mockk*.jar "$tree"/lib/byte-buddy*.jar "$tree"/lib/objenesis*.jar "$tree"/lib/jna*.jar \
  "$tree"/lib/junit-jupiter*.jar "$tree"/lib/kotest-runner-junit*.jar "$tree"/lib/kotlinx-coroutines-debug*.jar
tpcomm_launcher "$tree/bin/gpu-check" dev.tpcomm.nccl.GpuCheckMainKt \
  "gpu-check: GpuCheckMain (comm-nccl) with the bundle's runtime; arguments: conformance | bench."
tpcomm_jlink "$tree/runtime" "$tree/lib"
cp LICENSE "$tree/"

cat >"$tree/tpcomm-gpu-check" <<'EOF'
#!/usr/bin/env bash
# The bundle's one command (made by scripts/gpu-bundle.sh): the tpcomm GPU check at world size 1
# on GPU 0 through NCCL (JavaCPP binding): conformance cases, then the all-reduce sweep 8 B..256 MiB.
# Logs go to ./tpcomm-gpu-results/. Exit status: 0 when everything passed, 1 when a case failed or
# a step crashed, 2 when there is no NVIDIA GPU (no /dev/nvidia* device or no libcuda.so.1).
set -uo pipefail
home="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"

devices=$(ls /dev/nvidia[0-9]* 2>/dev/null | head -1)
driver=$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*/libcuda\.so\.1$' | head -1) || true)
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
  [ -z "$driver" ] && [ -e "$d/libcuda.so.1" ] && driver="$d/libcuda.so.1"
done
if [ -z "$devices" ] || [ -z "$driver" ]; then
  echo "no GPU found: ${devices:+/dev/nvidia* present, }${devices:-no /dev/nvidia* device, }${driver:-no libcuda.so.1 (NVIDIA driver) library}${driver:+driver $driver}; nothing to check"
  exit 2
fi

# NCCL and the CUDA runtime: the system's, or the pip wheels' (nvidia-nccl-cu13, nvidia-cuda-runtime).
if command -v python3 >/dev/null 2>&1; then
  for pkg in nvidia.nccl nvidia.cuda_runtime nvidia.cu13; do
    d=$(python3 -c "import $pkg, os; print(os.path.dirname($pkg.__file__ or list($pkg.__path__)[0]))" 2>/dev/null) || continue
    [ -d "$d/lib" ] && LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
fi
[ -d /usr/local/cuda/lib64 ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"

results="$PWD/tpcomm-gpu-results"; mkdir -p "$results"
echo "== tpcomm GPU check: $(nvidia-smi -L 2>/dev/null | head -1), driver $driver"
echo "   LD_LIBRARY_PATH=$LD_LIBRARY_PATH; logs in $results"
status=0
for mode in conformance bench; do
  echo "== $mode (world of 1, GPU 0)"
  rdv=$(mktemp -d /tmp/tpcomm-gpu-rdv.XXXXXX)
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 TPCOMM_RENDEZVOUS="file://$rdv/rendezvous" TPCOMM_TIMEOUT_SECONDS=120 \
    "$home/bin/gpu-check" "$mode" "$@" 2>&1 | tee "$results/$mode.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { echo "== $mode exited with $rc"; status=1; }
  rm -rf "$rdv"
done
exit $status
EOF
chmod +x "$tree/tpcomm-gpu-check"

archive="$dir/tpcomm-gpu-bundle-$version.tar.gz"
tpcomm_tar "$archive" "$tree"
size=$(stat -c %s "$archive")
echo "gpu bundle: $archive, $((size / 1024 / 1024)) MB ($(ls "$tree/lib" | wc -l) jars, runtime $(du -sh "$tree/runtime" | cut -f1) unpacked)" >&2
if [ "$size" -ge $((limit_mb * 1024 * 1024)) ]; then
  echo "gpu-bundle.sh: the bundle is $((size / 1024 / 1024)) MB, over the $limit_mb MB a GPU machine accepts" >&2
  exit 1
fi
readlink -f "$archive"
