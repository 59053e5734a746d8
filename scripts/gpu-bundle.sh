#!/usr/bin/env bash
# A self-contained bundle that runs the GPU check on a machine with an NVIDIA GPU and no JDK, no
# Maven and no network (the lent H100: see ../shared/notes/gpu-bindings.md):
#   scripts/gpu-bundle.sh DIR          writes DIR/tpcomm-gpu-bundle-<version>.tar.gz (< 60 MB)
# It holds a jlinked JDK 25 runtime (jlink --strip-debug --no-header-files --no-man-pages
# --compress zip-9, modules from jdeps), the jars of comm-nccl and comm-rccl, their test classes
# (the GpuCheckMains) and test classpaths, the programs of scripts/gpu/ (C calling NCCL, PyTorch, the
# report), and one command, made with the same mechanism as scripts/dist.sh (scripts/dist-lib.sh):
#   tar xzf tpcomm-gpu-bundle-*.tar.gz && tpcomm-gpu-bundle-*/tpcomm-gpu-check [STEP...]
# Steps (default: all, in this order), at world size 1 on GPU 0, logs in ./tpcomm-gpu-results/:
#   conformance      the comm-testkit cases through comm-nccl's JavaCPP binding
#   conformance-ffm  the same through comm-rccl's java.lang.foreign binding opened on libnccl.so.2
#                    and libcudart.so (RCCL exports NCCL's API)
#   sweep            the all-reduce sweep 8 B..256 MiB (comm-gpu AllReduceSweep's protocol) of C
#                    calling NCCL (built there with nvcc, blocking and non-blocking communicators),
#                    tpcomm through both bindings and torch.distributed, each twice in opposite
#                    orders, then report.md: the side-by-side tables (scripts/gpu/sweep_report.py);
#                    and the host cost of a non-blocking ncclGroupEnd (scripts/gpu/nonblocking_cost.cc)
# On a machine with no NVIDIA GPU (no /dev/nvidia* device or no libcuda.so.1 driver library) it
# prints "no GPU found: ..." and exits with status 2, as scripts/gpu-check.sh does, before starting Java.
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
  echo "building comm-nccl, comm-rccl and their test classes ..." >&2
  ./mvnw -B -q -ntp -pl comm-nccl,comm-rccl -am package -DskipTests dependency:build-classpath \
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
  ./mvnw -B -q -ntp "${repo_flags[@]}" -pl comm-nccl,comm-rccl dependency:build-classpath \
    -Dmdep.includeScope=test -Dmdep.outputFile=target/gpu-bundle.classpath 2>&1 \
    | { grep -v -e 'sun.misc.Unsafe' -e 'Please consider reporting' >&2 || true; }
fi
for m in nccl rccl; do
  [ -f comm-$m/target/gpu-bundle.classpath ] && [ -d comm-$m/target/test-classes/dev/tpcomm/$m ] \
    || { echo "gpu-bundle.sh: comm-$m is not built with its test classes (run without --no-build)" >&2; exit 1; }
done

stage=$(mktemp -d /tmp/tpcomm-gpu-bundle.XXXXXX)
trap 'rm -rf "$stage"' EXIT
tree="$stage/tpcomm-gpu-bundle-$version"
mkdir -p "$tree/lib"
for m in nccl rccl; do
  jar --create --file "$tree/lib/comm-$m-$version-gpucheck.jar" -C comm-$m/target/test-classes .
  tpcomm_dist_jars "$tree/lib" "comm-$m/target/comm-$m-$version.jar" "$(cat comm-$m/target/gpu-bundle.classpath)"
done
# Test-only jars GpuCheckMain never loads (MockK and its agent, the JUnit/Kotest runners, the
# coroutines debug agent, and JNA, which Kotest's console output uses and which would pull
# java.desktop into the runtime): without them the bundle stays under the limit.
rm -f "$tree"/lib/mockk*.jar "$tree"/lib/byte-buddy*.jar "$tree"/lib/objenesis*.jar "$tree"/lib/jna*.jar \
  "$tree"/lib/junit-jupiter*.jar "$tree"/lib/kotest-runner-junit*.jar "$tree"/lib/kotlinx-coroutines-debug*.jar
tpcomm_launcher "$tree/bin/gpu-check" dev.tpcomm.nccl.GpuCheckMainKt \
  "gpu-check: GpuCheckMain (comm-nccl, JavaCPP binding) with the bundle's runtime; arguments: conformance | bench."
tpcomm_launcher "$tree/bin/gpu-check-ffm" dev.tpcomm.rccl.GpuCheckMainKt \
  "gpu-check-ffm: GpuCheckMain (comm-rccl, java.lang.foreign binding) with the bundle's runtime; arguments: conformance|bench [--nvidia]."
mkdir -p "$tree/gpu"
cp scripts/gpu/nccl_allreduce.cu scripts/gpu/nonblocking_cost.cc scripts/gpu/torch_allreduce.py scripts/gpu/sweep_report.py "$tree/gpu/"
tpcomm_jlink "$tree/runtime" "$tree/lib"
cp LICENSE "$tree/"

cat >"$tree/tpcomm-gpu-check" <<'EOF'
#!/usr/bin/env bash
# The bundle's one command (made by scripts/gpu-bundle.sh): the tpcomm GPU check at world size 1
# on GPU 0. Steps (default all): conformance (JavaCPP binding), conformance-ffm (java.lang.foreign
# binding on libnccl.so.2), sweep (C/NCCL, tpcomm both bindings, torch.distributed; report.md).
# Logs go to ./tpcomm-gpu-results/. Exit status: 0 when every step passed, 1 when a case failed or
# a step crashed, 2 when there is no NVIDIA GPU (no /dev/nvidia* device or no libcuda.so.1).
set -uo pipefail
home="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(conformance conformance-ffm sweep)
for s in "${steps[@]}"; do
  case "$s" in conformance|conformance-ffm|sweep) ;; *) echo "usage: $0 [conformance] [conformance-ffm] [sweep]" >&2; exit 2 ;; esac
done

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
nccl_home=""
if command -v python3 >/dev/null 2>&1; then
  for pkg in nvidia.nccl nvidia.cuda_runtime nvidia.cu13; do
    d=$(python3 -c "import $pkg, os; print(os.path.dirname($pkg.__file__ or list($pkg.__path__)[0]))" 2>/dev/null) || continue
    [ -d "$d/lib" ] && LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ "$pkg" = nvidia.nccl ] && [ -f "$d/include/nccl.h" ] && nccl_home="$d"
  done
fi
[ -d /usr/local/cuda/lib64 ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
[ -n "$nccl_home" ] || for d in /usr /usr/local /usr/local/cuda; do [ -f "$d/include/nccl.h" ] && { nccl_home="$d"; break; }; done

results="$PWD/tpcomm-gpu-results"; mkdir -p "$results"
echo "== tpcomm GPU check: $(nvidia-smi -L 2>/dev/null | head -1), driver $driver, $(date -u +%FT%TZ)"
echo "   LD_LIBRARY_PATH=$LD_LIBRARY_PATH; NCCL headers: ${nccl_home:-none found}; logs in $results"
status=0

jvm() { # $1 = log name, then the launcher and its arguments: a world of one with a fresh file rendezvous
  local log="$1" rdv rc; shift
  rdv=$(mktemp -d /tmp/tpcomm-gpu-rdv.XXXXXX)
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 TPCOMM_RENDEZVOUS="file://$rdv/rendezvous" TPCOMM_TIMEOUT_SECONDS=120 \
    "$@" 2>&1 | tee "$results/$log.log"
  rc=${PIPESTATUS[0]}
  rm -rf "$rdv"
  return "$rc"
}

step() { # $1 = name, then the command: runs it, records a failure
  local name="$1"; shift
  echo "== $name"
  "$@"; local rc=$?
  [ "$rc" = 0 ] || { echo "== $name exited with $rc"; status=1; }
}

sweep_pass() { # $@ = implementations in the order to run them; appends to the sweep logs
  local impl
  for impl in "$@"; do
    echo "-- sweep: $impl"
    case "$impl" in
      c-nccl) "$results/nccl_allreduce" >>"$results/sweep-c.log" 2>&1 || { echo "c-nccl failed"; status=1; } ;;
      c-nccl-nonblocking) "$results/nccl_allreduce" --nonblocking >>"$results/sweep-c-nonblocking.log" 2>&1 || { echo "c-nccl-nonblocking failed"; status=1; } ;;
      tpcomm-javacpp) jvm run-javacpp "$home/bin/gpu-check" bench >/dev/null; rc=$?; cat "$results/run-javacpp.log" >>"$results/sweep-javacpp.log"; [ "$rc" = 0 ] || { echo "tpcomm-javacpp failed ($rc)"; status=1; } ;;
      tpcomm-ffm) jvm run-ffm "$home/bin/gpu-check-ffm" bench --nvidia >/dev/null; rc=$?; cat "$results/run-ffm.log" >>"$results/sweep-ffm.log"; [ "$rc" = 0 ] || { echo "tpcomm-ffm failed ($rc)"; status=1; } ;;
      torch) python3 "$home/gpu/torch_allreduce.py" >>"$results/sweep-torch.log" 2>&1 || { echo "torch failed (see sweep-torch.log)"; status=1; } ;;
    esac
  done
}

sweep() {
  rm -f "$results"/sweep-*.log
  local impls=(tpcomm-javacpp tpcomm-ffm torch)
  if [ -n "$nccl_home" ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
    local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    if "$nvcc" -O2 -o "$results/nccl_allreduce" "$home/gpu/nccl_allreduce.cu" -I"$nccl_home/include" \
        -L"$nccl_home/lib" -Xlinker -rpath -Xlinker "$nccl_home/lib" -l:libnccl.so.2 >"$results/nvcc.log" 2>&1; then
      impls=(c-nccl c-nccl-nonblocking "${impls[@]}")
    else
      echo "nvcc could not build the C program (see nvcc.log): no C reference"; status=1
    fi
  else
    echo "no nvcc or no nccl.h: no C reference"; status=1
  fi
  # The host cost of a non-blocking group (a std::thread per ncclGroupEnd with two or more ranks),
  # which a world of one cannot show: measured on this host's CPUs (docs/gpu.md).
  if command -v g++ >/dev/null 2>&1 && g++ -O2 -pthread -o "$results/nonblocking_cost" "$home/gpu/nonblocking_cost.cc" 2>"$results/g++.log"; then
    "$results/nonblocking_cost" | tee "$results/nonblocking-cost.log"
  else
    echo "no g++: the non-blocking group cost was not measured"
  fi
  sweep_pass "${impls[@]}"
  local reversed=(); for ((i = ${#impls[@]} - 1; i >= 0; i--)); do reversed+=("${impls[$i]}"); done
  sweep_pass "${reversed[@]}"
  grep -h '^#' "$results"/sweep-*.log | sort -u
  python3 "$home/gpu/sweep_report.py" "$results"/sweep-*.log | tee "$results/report.md"
}

for s in "${steps[@]}"; do
  case "$s" in
    conformance) step "conformance, JavaCPP binding (world of 1, GPU 0)" jvm conformance "$home/bin/gpu-check" conformance ;;
    conformance-ffm) step "conformance, java.lang.foreign binding on libnccl.so.2 (world of 1, GPU 0)" jvm conformance-ffm "$home/bin/gpu-check-ffm" conformance --nvidia ;;
    sweep) step "all-reduce sweep: C/NCCL, tpcomm (both bindings), torch.distributed" sweep ;;
  esac
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
