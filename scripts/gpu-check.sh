#!/usr/bin/env bash
# ----------------------------------------------------------------------------------------------
# NEVER RUN IN CI, AND NEVER RUN BY THE AUTHORS: this script was written on a machine with no GPU,
# no NCCL, no RCCL and no HIP, and has not been executed anywhere. It is for a machine with
# NVIDIA GPUs (nccl) or AMD GPUs (rccl). See docs/gpu.md for what it checks and what was only
# exercised through the simulated platform.
# ----------------------------------------------------------------------------------------------
# What it does, for the backend given as $1 (nccl | rccl; default: nccl when nvidia-smi lists a
# GPU, else rccl when rocm-smi/rocminfo find one):
#   1. builds comm-gpu (the engine and, in its test-jar, the simulated platform) and comm-<backend>
#      with its test classes (the GPU check mains live there);
#   2. conformance, world of 1 on GPU 0: every comm-testkit case (collectives on device tensors,
#      argument refusals, failure modes on fresh communicators) on the real library;
#   3. conformance, one process per GPU when there are several (RANK/WORLD_SIZE/LOCAL_RANK set
#      here, the unique id shared through a file rendezvous in a fresh temp directory); on a machine
#      with one NVIDIA GPU, two processes on GPU 0 instead when its NCCL is 2.30 or later (read first
#      with GpuCheckMain's `version`): NCCL accepts two ranks of one communicator on one GPU from
#      2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 (NVIDIA/nccl src/init.cc, initTransportsRank; earlier
#      releases stop with "Duplicate GPU detected"). It says which it ran and why;
#   4. the all-reduce sweep (8 B .. 256 MiB, float32, sum) through tpcomm on all GPUs (comm-gpu's
#      AllReduceSweep: lines "sweep <impl> each|pipelined <bytes> <us per call, 5 rounds>"), and the
#      same sizes with raw NCCL/RCCL through nccl-tests / rccl-tests `all_reduce_perf` when it is on
#      PATH or in $NCCL_TESTS_DIR/build (its own table; its time column is the pipelined mode's).
#      On a one-GPU NVIDIA machine without Maven, scripts/gpu-bundle.sh's bundle does more (C and
#      PyTorch references, the java.lang.foreign binding, the split probe, compute-sanitizer; docs/gpu.md).
# Every process runs with NCCL_DEBUG=INFO (unless set) and NCCL_DEBUG_FILE per rank; the logs stay in
# ${TPCOMM_GPU_RESULTS:-./tpcomm-gpu-results}.
# Exit status: non-zero when a conformance case failed or a process crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

count_nvidia() {
  local n=0
  if command -v nvidia-smi >/dev/null 2>&1; then n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
  echo "${n:-0}"
}
count_amd() {
  local n=0
  if command -v rocm-smi >/dev/null 2>&1; then n=$(rocm-smi --showid 2>/dev/null | grep -cE '^GPU\[[0-9]+\]' || true)
  elif command -v rocminfo >/dev/null 2>&1; then n=$(rocminfo 2>/dev/null | grep -c 'Device Type: *GPU' || true); fi
  echo "${n:-0}"
}

backend="${1:-}"
if [ -z "$backend" ]; then
  if [ "$(count_nvidia)" -gt 0 ]; then backend=nccl; elif [ "$(count_amd)" -gt 0 ]; then backend=rccl; else
    echo "no NVIDIA or AMD GPU found (nvidia-smi / rocm-smi); nothing to check" >&2; exit 2; fi
fi
case "$backend" in
  nccl) gpus=$(count_nvidia); main=dev.tpcomm.nccl.GpuCheckMainKt; perf_default=all_reduce_perf ;;
  rccl) gpus=$(count_amd); main=dev.tpcomm.rccl.GpuCheckMainKt; perf_default=all_reduce_perf ;;
  *) echo "usage: $0 [nccl|rccl]" >&2; exit 2 ;;
esac
[ "$gpus" -ge 1 ] || { echo "$backend: no GPU visible" >&2; exit 2; }
echo "== $backend on $gpus GPU(s)"

module="comm-$backend"
./mvnw -B -q -pl "$module" -am package -DskipTests dependency:build-classpath \
  -Dmdep.includeScope=test -Dmdep.outputFile=target/gpu-check.classpath
cp="$module/target/test-classes:$module/target/classes:$(cat "$module/target/gpu-check.classpath")"
jvm=(java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -cp "$cp")

results="${TPCOMM_GPU_RESULTS:-$PWD/tpcomm-gpu-results}"; mkdir -p "$results"
export NCCL_DEBUG="${NCCL_DEBUG:-INFO}"
status=0
run_world() { # $1 = world size, $2 = mode, $3 = "shared" to put every rank on GPU 0 (LOCAL_RANK=0)
  local n=$1 mode=$2 shared=${3:-} dir pids=() r name
  dir=$(mktemp -d /tmp/tpcomm-gpu-check.XXXXXX)
  name="$mode-world$n${shared:+-gpu0}"
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$([ -n "$shared" ] && echo 0 || echo $r) TPCOMM_RENDEZVOUS="file://$dir/rendezvous" \
      TPCOMM_TIMEOUT_SECONDS=120 NCCL_DEBUG_FILE="$results/nccl-$name.rank$r.%p.log" \
      "${jvm[@]}" "$main" "$mode" > "$results/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    if ! wait "${pids[$r]}"; then echo "rank $r of $n ($mode) failed, log: $results/$name.rank$r.log"; status=1; fi
  done
  rm -rf "$dir"
  cat "$results/$name.rank0.log"
}

echo "== conformance, world of 1"
run_world 1 conformance
if [ "$gpus" -gt 1 ]; then
  echo "== conformance, world of $gpus (one process per GPU)"
  run_world "$gpus" conformance
elif [ "$backend" = nccl ]; then
  # One GPU: two ranks of one communicator on it, where NCCL allows it (2.30+).
  version_line=$("${jvm[@]}" "$main" version 2>&1 | grep '^nccl version' || true)
  code=$(sed -n 's/^nccl version \([0-9][0-9]*\) .*/\1/p' <<<"$version_line")
  if [ -n "$code" ] && [ "$code" -ge 23000 ]; then
    echo "== conformance, world of 2 on GPU 0 (${version_line#nccl version }: 2.30 or later accepts two ranks on one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1)"
    NCCL_MULTI_RANK_GPU_ENABLE=1 run_world 2 conformance shared
  else
    echo "== no world of 2 on one GPU: ${version_line:-the NCCL version could not be read} (two ranks of one communicator on one GPU need NCCL 2.30+)"
  fi
fi

echo "== all-reduce sweep through tpcomm ($gpus GPU(s))"
run_world "$gpus" bench

perf="${NCCL_TESTS_DIR:+$NCCL_TESTS_DIR/build/}$perf_default"
if command -v "$perf" >/dev/null 2>&1 || [ -x "$perf" ]; then
  echo "== all-reduce sweep with raw $backend ($perf)"
  "$perf" -b 8 -e 256M -f 2 -g "$gpus" -d float -o sum || status=1
else
  echo "== raw $backend sweep skipped: build nccl-tests (NVIDIA) or rccl-tests (AMD) and set NCCL_TESTS_DIR"
fi
exit $status
