#!/usr/bin/env bash
# A self-contained bundle that runs the GPU check on a machine with an NVIDIA GPU and no JDK, no
# Maven and no network (the lent H100: see ../shared/notes/gpu-bindings.md):
#   scripts/gpu-bundle.sh DIR          writes DIR/tpcomm-gpu-bundle-<version>.tar.gz (< 60 MB)
# It holds a jlinked JDK 25 runtime (jlink --strip-debug --no-header-files --no-man-pages
# --compress zip-9, modules from jdeps), the jars of comm-nccl and comm-rccl, their test classes
# (the GpuCheckMains) and test classpaths, the programs of scripts/gpu/ (C calling NCCL, PyTorch, the
# report), and one command, made with the same mechanism as scripts/dist.sh (scripts/dist-lib.sh):
#   tar xzf tpcomm-gpu-bundle-*.tar.gz && tpcomm-gpu-bundle-*/tpcomm-gpu-check [STEP...]
# Steps (default: all, in this order), on GPU 0, logs in ./tpcomm-gpu-results/:
#   conformance      the comm-testkit cases (collectives, tag-0 point-to-point ring, split/group,
#                    failure modes) through comm-nccl's JavaCPP binding
#   conformance-ffm  the same through comm-rccl's java.lang.foreign binding opened on libnccl.so.2
#                    and libcudart.so (RCCL exports NCCL's API)
#   allocations      with JavaCPP's allocation guard at one byte, ncclGetUniqueId, an init and a
#                    split must not allocate through JavaCPP's accounting (issue 35 finding 7), world 1
#   mpi-staging      when mpirun is on PATH: two MPI ranks on GPU 0, the mpi backend staging CUDA
#                    tensors through comm-nccl's provider and the real CUDA runtime (gpu-check mpi-staging)
#   probe            split_probe.cu (built there with nvcc): what a non-blocking ncclCommSplit
#                    returns, *newcomm and the parent's state right after, when each changes
#   sweep            the all-reduce sweep 8 B..256 MiB (comm-gpu AllReduceSweep's protocol) of C
#                    calling NCCL (nccl_allreduce.cu, blocking and non-blocking communicators),
#                    tpcomm through both bindings and torch.distributed, each twice in opposite
#                    orders, then report.md (scripts/gpu/sweep_report.py), titled with what the
#                    times measure at that world; and the host cost of a non-blocking ncclGroupEnd
#                    (scripts/gpu/nonblocking_cost.cc)
#   sanitizer        the conformance at world 1 once under compute-sanitizer --tool memcheck
#                    (--target-processes all: the JVM), when it is installed; time-limited
# The world: two processes on GPU 0 with NCCL_MULTI_RANK_GPU_ENABLE=1 and a file rendezvous when the
# NCCL there is 2.30 or later (it reads the version first; NVIDIA/nccl src/init.cc,
# initTransportsRank), else one; the command says which and why. Every process runs with
# NCCL_DEBUG=INFO and its own NCCL_DEBUG_FILE in the results folder.
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
  "gpu-check: GpuCheckMain (comm-nccl, JavaCPP binding) with the bundle's runtime; arguments: conformance | bench [--max-bytes N] | version."
tpcomm_launcher "$tree/bin/gpu-check-ffm" dev.tpcomm.rccl.GpuCheckMainKt \
  "gpu-check-ffm: GpuCheckMain (comm-rccl, java.lang.foreign binding) with the bundle's runtime; arguments: conformance | bench [--max-bytes N] | version, and --nvidia."
mkdir -p "$tree/gpu"
cp scripts/gpu/nccl_allreduce.cu scripts/gpu/split_probe.cu scripts/gpu/uniqueid_file.h scripts/gpu/nonblocking_cost.cc \
  scripts/gpu/torch_allreduce.py scripts/gpu/sweep_report.py "$tree/gpu/"
tpcomm_jlink "$tree/runtime" "$tree/lib"
cp LICENSE "$tree/"

cat >"$tree/tpcomm-gpu-check" <<'EOF'
#!/usr/bin/env bash
# The bundle's one command (made by scripts/gpu-bundle.sh): the tpcomm GPU check on GPU 0.
#   tpcomm-gpu-check [--out DIR] [conformance] [conformance-ffm] [probe] [sweep] [sanitizer]
# Default steps: conformance conformance-ffm allocations mpi-staging probe sweep, in this order, within one time budget
# (TPCOMM_GPU_BUDGET seconds, default 500: under 9 minutes with the inventory); the sanitizer only
# when named (the second, optional command: tpcomm-gpu-check --out DIR sanitizer).
# Output: DIR (--out, else TPCOMM_GPU_OUT, else ./tpcomm-gpu-out) receives exactly two files:
# summary.txt (the inventory: driver, CUDA runtimes, every libnccl with its version, which binding
# loads, the world and why; then one line per step) and tpcomm-gpu-logs.tar.gz (every log). Logs
# are written to a temporary folder first, so DIR never holds anything else of this run.
# conformance      the comm-testkit cases through comm-nccl's JavaCPP binding
# conformance-ffm  the same through comm-rccl's java.lang.foreign binding on libnccl.so.2
# probe            split_probe.cu: what a non-blocking ncclCommSplit returns and when its child appears
# sweep            the all-reduce sweep (C/NCCL blocking and non-blocking, tpcomm both bindings,
#                  torch.distributed; report.md) and the host cost of a non-blocking group
# sanitizer        the conformance (JavaCPP, world 1) once under compute-sanitizer memcheck, when
#                  compute-sanitizer is on PATH or in /usr/local/cuda*; skipped otherwise
# The world: 2 ranks, two processes both on GPU 0 with NCCL_MULTI_RANK_GPU_ENABLE=1, when the NCCL
# found is 2.30 or later (NVIDIA/nccl src/init.cc, initTransportsRank); 1 otherwise (older NCCL
# refuses two ranks of one communicator on one GPU). It prints which and why. The probe also runs at 1.
# Every NCCL process runs with NCCL_DEBUG=INFO (unless set) and its own NCCL_DEBUG_FILE; all logs go
# to ./tpcomm-gpu-results/. Exit status: 0 when every step passed, 1 when a case failed or a step
# crashed or timed out, 2 when there is no NVIDIA GPU (no /dev/nvidia* device or no libcuda.so.1).
# Environment: TPCOMM_GPU_WORLD=N forces the world; TPCOMM_GPU_STEP_TIMEOUT (seconds per process,
# default 120, and never past the budget); TPCOMM_GPU_SWEEP_MAX_BYTES (default 67108864);
# TPCOMM_GPU_SANITIZER_TIMEOUT (seconds, default 300); TPCOMM_GPU_BUDGET (seconds, default 500).
set -uo pipefail
home="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
all=(conformance conformance-ffm allocations mpi-staging probe sweep sanitizer)
out="${TPCOMM_GPU_OUT:-}"
steps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "usage: $0 [--out DIR] [STEP...]" >&2; exit 2; }; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    *) steps+=("$1"); shift ;;
  esac
done
[ ${#steps[@]} -gt 0 ] || steps=(conformance conformance-ffm allocations mpi-staging probe sweep)
for s in "${steps[@]}"; do
  case " ${all[*]} " in *" $s "*) ;; *) echo "usage: $0 [--out DIR] [STEP...]; steps: ${all[*]} (default: all but sanitizer, in this order)" >&2; exit 2 ;; esac
done
out="${out:-$PWD/tpcomm-gpu-out}"
mkdir -p "$out" || { echo "cannot create the output folder $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
budget="${TPCOMM_GPU_BUDGET:-500}"
deadline=$((SECONDS + budget))
results=$(mktemp -d /tmp/tpcomm-gpu-results.XXXXXX)
summary_file="$results/summary.txt"
: >"$summary_file"
note() { echo "$*"; echo "$*" >>"$summary_file"; }
finish() { # $1 = exit status: the summary and the tarball into $out, nothing else
  local rc="$1"
  echo "exit status: $rc" >>"$summary_file"
  cp "$summary_file" "$out/summary.txt"
  tar -czf "$out/tpcomm-gpu-logs.tar.gz" -C "$results" . 2>/dev/null
  rm -rf "$results"
  echo "== results: $out/summary.txt and $out/tpcomm-gpu-logs.tar.gz"
  exit "$rc"
}
note "tpcomm GPU check, $(date -u +%FT%TZ), steps: ${steps[*]}, budget ${budget} s"

devices=$(ls /dev/nvidia[0-9]* 2>/dev/null | head -1)
driver=$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*/libcuda\.so\.1$' | head -1) || true)
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
  [ -z "$driver" ] && [ -e "$d/libcuda.so.1" ] && driver="$d/libcuda.so.1"
done
if [ "${TPCOMM_GPU_DRY_RUN:-0}" = 1 ]; then
  note "dry run (TPCOMM_GPU_DRY_RUN=1): no GPU required, every step runs against what the bundle holds (scripts/gpu-bundle-dry-run.sh)"
  devices="${devices:-dry-run}"; driver="${driver:-dry-run}"
fi
if [ -z "$devices" ] || [ -z "$driver" ]; then
  note "no GPU found: ${devices:+/dev/nvidia* present, }${devices:-no /dev/nvidia* device, }${driver:-no libcuda.so.1 (NVIDIA driver) library}${driver:+driver $driver}; nothing to check"
  finish 2
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
export NCCL_DEBUG="${NCCL_DEBUG:-INFO}"
step_limit="${TPCOMM_GPU_STEP_TIMEOUT:-120}"
step_timeout="$step_limit"
sanitizer_timeout="${TPCOMM_GPU_SANITIZER_TIMEOUT:-300}"
max_bytes="${TPCOMM_GPU_SWEEP_MAX_BYTES:-67108864}"

echo "== tpcomm GPU check: $(nvidia-smi -L 2>/dev/null | head -1), driver $driver, $(date -u +%FT%TZ)"
# The inventory (first contact): the driver, the CUDA runtimes and every libnccl this machine shows.
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo unknown)"
note "driver: $driver; CUDA driver API: $(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
lib_dirs() { # every folder a library may come from: the loader's path, ldconfig's cache, the pip wheels, the CUDA toolkits
  tr ':' '\n' <<<"$LD_LIBRARY_PATH"
  ldconfig -p 2>/dev/null | sed -n 's/.* => \(.*\)\/[^/]*$/\1/p' | sort -u
  if command -v python3 >/dev/null 2>&1; then
    python3 - <<'PY' 2>/dev/null
import site, glob, os
for s in site.getsitepackages() + [site.getusersitepackages()]:
    for d in glob.glob(os.path.join(s, "nvidia", "*", "lib")) + glob.glob(os.path.join(s, "torch", "lib")):
        print(d)
PY
  fi
  ls -d /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu 2>/dev/null
}
nccl_version_of() { # $1 = a libnccl file: its ncclGetVersion (python ctypes), else the version in its file name
  local v=""
  command -v python3 >/dev/null 2>&1 && v=$(python3 -c "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); c=ctypes.c_int(); l.ncclGetVersion(ctypes.byref(c)); print(c.value)" "$1" 2>/dev/null)
  [ -n "$v" ] || v=$(basename "$(readlink -f "$1")" | sed -n 's/^libnccl\.so\.\([0-9][0-9.]*\)$/\1/p')
  echo "${v:-unknown}"
}
best_nccl=""; best_code=0
while read -r d; do
  [ -d "$d" ] || continue
  for f in "$d"/libnccl.so*; do
    [ -e "$f" ] || continue
    real=$(readlink -f "$f"); case " ${seen_nccl:-} " in *" $real "*) continue ;; esac; seen_nccl="${seen_nccl:-} $real"
    v=$(nccl_version_of "$f"); note "libnccl: $f -> $real, version $v"
    [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -gt "$best_code" ] && { best_code=$v; best_nccl=$f; }
  done
  for f in "$d"/libcudart.so.*; do [ -e "$f" ] && note "CUDA runtime: $f -> $(basename "$(readlink -f "$f")")"; done
done < <(lib_dirs | awk 'NF && !seen[$0]++')
[ -n "${seen_nccl:-}" ] || note "libnccl: none found"
# The newest NCCL found is the one both bindings load (by name, through the loader's path): it decides the world.
if [ -n "$best_nccl" ]; then
  export LD_LIBRARY_PATH="$(dirname "$best_nccl"):$LD_LIBRARY_PATH"
  export TPCOMM_NCCL_LIBRARY="$best_nccl"
  note "chosen NCCL: $best_nccl ($best_code), first on LD_LIBRARY_PATH and TPCOMM_NCCL_LIBRARY"
fi
echo "   LD_LIBRARY_PATH=$LD_LIBRARY_PATH; NCCL headers: ${nccl_home:-none found}; NCCL_DEBUG=$NCCL_DEBUG; logs in $results"
nvidia-smi -q >"$results/nvidia-smi-q.txt" 2>&1
mps="MPS: unknown (no pgrep)"
if command -v pgrep >/dev/null 2>&1; then
  mps="no MPS control daemon running"; pgrep -x nvidia-cuda-mps-control >/dev/null 2>&1 && mps="an MPS control daemon is running"
fi
cm=$(grep -m1 -i 'compute mode' "$results/nvidia-smi-q.txt" | sed 's/  */ /g;s/^ //')
echo "   ${cm:-compute mode unknown (nvidia-smi -q)}; $mps"

# The NCCL version decides the world: two ranks of one communicator on one GPU are refused before 2.30
# ("Duplicate GPU detected", NVIDIA/nccl src/init.cc initTransportsRank up to v2.29.7) and accepted
# from 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 (the "Multiple Ranks are using the same GPU/Partition"
# check there; the parameter is in v2.30.3-1, the first 2.30 tag). The version is ncclGetVersion of
# the libnccl.so.2 the checks load (comm-rccl's binding opens it by name, as the loader finds it).
version_line=$("$home/bin/gpu-check-ffm" version --nvidia 2>>"$results/version.log") \
  || version_line=$("$home/bin/gpu-check" version 2>>"$results/version.log") || true
echo "$version_line" >>"$results/version.log"
# Which binding loads here (the JavaCPP preset is built for CUDA 13.3; the FFM one opens libnccl.so.2
# and libcudart by name): a binding that does not load has its steps skipped with the reason.
declare -A unloadable=()
for b in gpu-check gpu-check-ffm; do
  flag=(); [ "$b" = gpu-check-ffm ] && flag=(--nvidia)
  if line=$(timeout 60 "$home/bin/$b" version "${flag[@]}" 2>>"$results/version.log"); then note "binding $b loads: $line"
  else
    why=$(tail -1 "$results/version.log" 2>/dev/null | cut -c1-200)
    note "binding $b does not load: ${why:-no answer} (see version.log)"; unloadable[$b]="${why:-does not load}"
  fi
done
loads() { # $1 = launcher name: true when it loaded, else sets skipped=WHY
  [ -z "${unloadable[$1]:-}" ] && return 0
  skipped="bin/$1 does not load here: ${unloadable[$1]}"; return 1
}
code=$(sed -n 's/^nccl version \([0-9][0-9]*\) .*/\1/p' <<<"$version_line" | head -1)
if [ -n "${TPCOMM_GPU_WORLD:-}" ]; then
  [[ "$TPCOMM_GPU_WORLD" =~ ^[1-9][0-9]*$ ]] || { echo "TPCOMM_GPU_WORLD must be a positive number, not '$TPCOMM_GPU_WORLD'" >&2; exit 2; }
  world=$TPCOMM_GPU_WORLD; why="set by TPCOMM_GPU_WORLD (${version_line:-NCCL version unknown})"
elif [ -z "$code" ]; then
  world=1; why="NCCL's version could not be read (${version_line:-no answer}; see version.log), so no two ranks on one GPU"
elif [ "$code" -ge 23000 ]; then
  world=2; why="NCCL ${version_line#nccl version }: 2.30 or later accepts two ranks of one communicator on one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1"
else
  world=1; why="NCCL ${version_line#nccl version }: before 2.30 NCCL refuses two ranks of one communicator on one GPU"
fi
if [ "$world" -gt 1 ]; then
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  where="world of $world: $world processes on GPU 0, NCCL_MULTI_RANK_GPU_ENABLE=1, file rendezvous"
else
  where="world of 1 on GPU 0"
fi
note "world: $where. Why: $why"
status=0
summary=()
port=29517

# ranks NAME N COMMAND...: N processes of COMMAND, ranks 0..N-1, every one on GPU 0 (LOCAL_RANK=0),
# with a fresh file rendezvous (TPCOMM_RENDEZVOUS for the JVMs; @ID@ in COMMAND's arguments becomes
# an id file for the C programs, @RANK@ and @WORLD@ the rank and the world), MASTER_PORT for torch,
# NCCL_DEBUG_FILE per process, each under `timeout`. Rank 0's output goes to NAME.log (and the
# terminal unless QUIET=1), rank r's to NAME.rank<r>.log. Returns the first non-zero status; then
# $ranks_why says how each failed rank ended (printed unless QUIET=1).
ranks() {
  local name="$1" n="$2" rdv r rc=0 rc0 a args pids=(); shift 2
  ranks_why=""
  # Each process stops at the step limit, and never past the budget (15 s kept for the summary).
  ranks_limit=$step_timeout
  local left=$((deadline - SECONDS - 15)); [ "$left" -lt "$ranks_limit" ] && ranks_limit=$left
  if [ "$ranks_limit" -lt 1 ]; then ranks_why=" not run: no time left in the ${budget} s budget;"; return 124; fi
  rdv=$(mktemp -d /tmp/tpcomm-gpu-rdv.XXXXXX)
  port=$((port + 1))
  rm -f "$results/$name".rank*.log "$results/nccl-$name".rank*.log
  for ((r = n - 1; r >= 0; r--)); do
    args=()
    for a in "$@"; do a=${a//@RANK@/$r}; a=${a//@WORLD@/$n}; a=${a//@ID@/$rdv/uniqueid}; args+=("$a"); done
    local envs=(RANK=$r WORLD_SIZE=$n LOCAL_RANK=0 TPCOMM_RENDEZVOUS="file://$rdv/rendezvous" TPCOMM_TIMEOUT_SECONDS=120
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCL_DEBUG_FILE="$results/nccl-$name.rank$r.%p.log")
    if [ "$r" -gt 0 ]; then
      env "${envs[@]}" timeout -k 5 "$ranks_limit" "${args[@]}" >"$results/$name.rank$r.log" 2>&1 &
      pids+=($!)
    elif [ "${QUIET:-0}" = 1 ]; then
      env "${envs[@]}" timeout -k 5 "$ranks_limit" "${args[@]}" >"$results/$name.log" 2>&1
      rc0=$?
    else
      env "${envs[@]}" timeout -k 5 "$ranks_limit" "${args[@]}" 2>&1 | tee "$results/$name.log"
      rc0=${PIPESTATUS[0]}
    fi
  done
  [ "$rc0" = 0 ] || { rc=$rc0; explain "$name" 0 "$rc0"; }
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}"; local rr=$?
    [ "$rr" = 0 ] || { [ "$rc" != 0 ] || rc=$rr; explain "$name" $((r + 1)) "$rr"; }
  done
  rm -rf "$rdv"
  [ "$rc" = 0 ] || [ "${QUIET:-0}" = 1 ] || echo "   $name:$ranks_why (logs $name.log, $name.rank<r>.log, nccl-$name.rank<r>.<pid>.log)"
  return "$rc"
}
explain() { # NAME RANK STATUS: appends how that rank ended to $ranks_why
  case "$3" in
    124|137) ranks_why+=" rank $2 stopped at the time limit ($ranks_limit s);" ;;
    *) ranks_why+=" rank $2 exit $3;" ;;
  esac
}

step() { # $1 = name, then the command: runs it, records the result (a command may set skipped=WHY)
  local name="$1"; shift
  echo "== $name"
  local start=$SECONDS left=$((deadline - SECONDS - 15))
  if [ "$left" -lt 20 ]; then summary+=("skipped $name: no time left in the ${budget} s budget"); return; fi
  # Each process of the step stops at the step limit, and never past the budget.
  step_timeout=$(( step_limit < left ? step_limit : left ))
  skipped=""
  "$@"; local rc=$?
  if [ "$rc" = 0 ] && [ -n "$skipped" ]; then summary+=("skipped $name: $skipped")
  elif [ "$rc" = 0 ]; then summary+=("passed  $name ($((SECONDS - start)) s)")
  else echo "== $name exited with $rc"; status=1; summary+=("FAILED  $name ($((SECONDS - start)) s, exit $rc)"); fi
}

build_c() { # $1 = program name: builds $home/gpu/$1.cu into $results/$1 with nvcc against the NCCL headers found
  local nvcc
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if [ -z "$nccl_home" ] || [ ! -x "$nvcc" ]; then echo "no nvcc or no nccl.h: $1 not built"; return 1; fi
  [ -x "$results/$1" ] && [ "$results/$1" -nt "$home/gpu/$1.cu" ] && return 0
  "$nvcc" -O2 -o "$results/$1" "$home/gpu/$1.cu" -I"$nccl_home/include" -L"$nccl_home/lib" \
    -Xlinker -rpath -Xlinker "$nccl_home/lib" -l:libnccl.so.2 >"$results/nvcc-$1.log" 2>&1 \
    || { echo "nvcc could not build $1.cu (see nvcc-$1.log)"; return 1; }
}

probe() {
  build_c split_probe || return 1
  local rc=0
  ranks probe-world1 1 "$results/split_probe" || rc=1
  if [ "$world" -gt 1 ]; then
    echo "-- the same at a world of $world (every rank on GPU 0)"
    ranks "probe-world$world" "$world" "$results/split_probe" --world @WORLD@ --rank @RANK@ --id-file @ID@ || rc=1
  fi
  return $rc
}

mpi_staging() { # two MPI ranks on GPU 0: the mpi backend staging CUDA tensors through the real CUDA runtime
  local mpirun
  mpirun=$(command -v mpirun || true)
  if [ -z "$mpirun" ]; then skipped="no mpirun on PATH (Open MPI or MPICH)"; return 0; fi
  "$mpirun" --version 2>&1 | head -1
  local extra=()
  "$mpirun" --version 2>&1 | grep -q 'Open MPI' && extra=(--allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x TPCOMM_NCCL_LIBRARY)
  timeout -k 5 "$step_timeout" "$mpirun" "${extra[@]}" -np 2 "$home/bin/gpu-check" mpi-staging 2>&1 | tee "$results/mpi-staging.log"
}

sweep_pass() { # $1 = pass number, then the implementations in the order to run them
  local pass="$1" impl c; shift
  for impl in "$@"; do
    echo "-- sweep pass $pass: $impl"
    case "$impl" in
      c-nccl) c=("$results/nccl_allreduce" --max-bytes "$max_bytes" --world @WORLD@ --rank @RANK@ --id-file @ID@) ;;
      c-nccl-nonblocking) c=("$results/nccl_allreduce" --nonblocking --max-bytes "$max_bytes" --world @WORLD@ --rank @RANK@ --id-file @ID@) ;;
      tpcomm-javacpp) c=("$home/bin/gpu-check" bench --max-bytes "$max_bytes") ;;
      tpcomm-ffm) c=("$home/bin/gpu-check-ffm" bench --nvidia --max-bytes "$max_bytes") ;;
      torch) c=(python3 "$home/gpu/torch_allreduce.py" --max-bytes "$max_bytes") ;;
    esac
    QUIET=1 ranks "sweep-$impl.$pass" "$world" "${c[@]}" || { echo "   $impl failed:$ranks_why see sweep-$impl.$pass.log"; status=1; }
  done
}

sweep() {
  rm -f "$results"/sweep-*.log "$results"/nccl-sweep-*.log
  local impls=()
  [ -z "${unloadable[gpu-check]:-}" ] && impls+=(tpcomm-javacpp) || echo "   tpcomm-javacpp left out: bin/gpu-check does not load here"
  [ -z "${unloadable[gpu-check-ffm]:-}" ] && impls+=(tpcomm-ffm) || echo "   tpcomm-ffm left out: bin/gpu-check-ffm does not load here"
  impls+=(torch)
  if build_c nccl_allreduce; then impls=(c-nccl c-nccl-nonblocking "${impls[@]}"); else echo "no C reference"; status=1; fi
  # The host cost of a non-blocking group (a std::thread per ncclGroupEnd with two or more ranks),
  # measured on this host's CPUs without NCCL (docs/gpu.md).
  if command -v g++ >/dev/null 2>&1 && g++ -O2 -pthread -o "$results/nonblocking_cost" "$home/gpu/nonblocking_cost.cc" 2>"$results/g++.log"; then
    timeout -k 5 30 "$results/nonblocking_cost" | tee "$results/nonblocking-cost.log"
  else
    echo "no g++: the non-blocking group cost was not measured"
  fi
  sweep_pass 1 "${impls[@]}"
  local reversed=() i; for ((i = ${#impls[@]} - 1; i >= 0; i--)); do reversed+=("${impls[$i]}"); done
  sweep_pass 2 "${reversed[@]}"
  local logs=(); for f in "$results"/sweep-*.log; do [[ "$f" == *.rank[0-9]*.log ]] || logs+=("$f"); done
  python3 "$home/gpu/sweep_report.py" --world "$world" --gpus 1 "${logs[@]}" | tee "$results/report.md"
}

sanitizer() {
  local cs="" c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
      /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { cs="$c"; break; }
  done
  if [ -z "$cs" ]; then
    echo "no compute-sanitizer on PATH or in /usr/local/cuda*: skipped (install the CUDA toolkit's compute-sanitizer to run it)"
    skipped="no compute-sanitizer"
    return 0
  fi
  rm -f "$results"/sanitizer-memcheck.*.log
  echo "$cs --tool memcheck --target-processes all, at most $sanitizer_timeout s; report in sanitizer-memcheck.<pid>.log"
  local rc
  local cap=$((deadline - SECONDS - 15)); [ "$sanitizer_timeout" -lt "$cap" ] && cap=$sanitizer_timeout
  step_timeout="$cap" ranks sanitizer 1 "$cs" --tool memcheck --target-processes all --launch-timeout 300 \
    --log-file "$results/sanitizer-memcheck.%p.log" "$home/bin/gpu-check" conformance
  rc=$?
  local errors counts
  errors=$(cat "$results"/sanitizer-memcheck.*.log "$results/sanitizer.log" 2>/dev/null | grep -h 'ERROR SUMMARY' | sort | uniq -c | sed 's/^ *//;s/  */ /g')
  echo "   memcheck (count, line): ${errors:-no ERROR SUMMARY line (see the logs)}"
  [ -n "$errors" ] || return 1
  counts=$(memcheck_counts "$results"/sanitizer-memcheck.*.log)
  echo "   memcheck reports: ${counts% *} counted, ${counts#* } NCCL's own drained kernel-image probes (not counted)"
  [ "${counts% *}" = 0 ] || return 1
  return "$rc"
}

# Counts memcheck's reports in the logs given: prints "<counted> <probes>". A report whose first host
# frame is NCCL's ncclInitKernelsForDevice is not counted: at init NCCL asks cudaFuncGetAttributes of
# every kernel of its fat binary and, when one has no image for this device, drains the error with
# cudaGetLastError and goes on ("Silently ignore failures", NVIDIA/nccl src/enqueue.cc
# ncclInitKernelsForDevice, v2.28.9-1); memcheck reports each such call as an API error (seen on the
# first GPU run, H200, NCCL 2.28.9: 8 of them, 4 pairs, and nothing else). Everything else counts.
memcheck_counts() {
  awk '
    /^========= (COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|Target application returned)/ { next }
    /^=========  / { if (open && !framed && /Host Frame:/) { framed = 1; if (/ncclInitKernelsForDevice/) probes++ } next }
    /^========= *$/ { open = 0; next }
    /^========= [^ ]/ { open = 1; framed = 0; total++; next }
    END { printf "%d %d\n", total - probes, probes }' "$@" /dev/null
}

run_if_loads() { # $1 = launcher, then the command: runs it when the launcher loaded, else a skip with the reason
  local b="$1"; shift
  loads "$b" || return 0
  "$@"
}

for s in "${steps[@]}"; do
  case "$s" in
    conformance) step "conformance, JavaCPP binding ($where)" run_if_loads gpu-check ranks conformance "$world" "$home/bin/gpu-check" conformance ;;
    conformance-ffm) step "conformance, java.lang.foreign binding on libnccl.so.2 ($where)" run_if_loads gpu-check-ffm ranks conformance-ffm "$world" "$home/bin/gpu-check-ffm" conformance --nvidia ;;
    allocations) step "JavaCPP's allocation guard at its tightest: ncclGetUniqueId, init, split (issue 35 finding 7, world of 1)" run_if_loads gpu-check ranks allocations 1 "$home/bin/gpu-check" allocations ;;
    mpi-staging) step "mpi backend staging CUDA tensors through the CUDA runtime (2 MPI ranks on GPU 0)" run_if_loads gpu-check mpi_staging ;;
    probe) step "split probe: a non-blocking ncclCommSplit, seen from the caller (world of 1$([ "$world" -gt 1 ] && echo ", then $world"))" probe ;;
    sweep) step "all-reduce sweep: C/NCCL, tpcomm (both bindings), torch.distributed ($where)" sweep ;;
    sanitizer) step "compute-sanitizer memcheck: conformance, JavaCPP binding, world of 1" sanitizer ;;
  esac
done
echo "== summary ($where)"
printf '   %s\n' "${summary[@]}" | tee -a "$summary_file"
finish $status
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
