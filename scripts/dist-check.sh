#!/usr/bin/env bash
# Checks the binary distribution and the GPU bundle the way a user on a node would use them
# (called by scripts/test.sh; about 2-4 minutes on 2 cores):
#   1. scripts/dist.sh, unpacked into a temporary folder and run from there (not from the
#      repository): the host-side modules' jars in lib/ (comm-java-interop and comm-djl included,
#      their classes loading from lib/* alone), bin/tpcomm-check --backend local (worlds of 1 and 2) and --backend mpi --world 2
#      (every case, Open MPI and MPICH) and its refusal when mpirun started it, bin/tpcomm-bench under mpirun (2 processes, Open MPI,
#      small sizes, a few iterations), bin/tpcomm-demo --help, an unknown backend refused by each
#      launcher (one line, exit 2) and each launcher's --help naming it;
#   2. scripts/gpu-bundle.sh into a temporary folder: under 60 MB, unpacked, its one command stops
#      with "no GPU found" (exit 2) on a machine without an NVIDIA GPU, with no step named and with
#      every step named (conformance conformance-ffm allocations mpi-staging probe sweep sanitizer), leaving only
#      summary.txt and tpcomm-gpu-logs.tar.gz in its output folder, and refuses an unknown step
#      (exit 2); its command runs end to end on stubs (scripts/gpu-bundle-dry-run.sh); its jlinked runtime starts both GpuCheckMains, which report NCCL unavailable
#      (exit 2) rather than crashing (comm-nccl's JavaCPP one; comm-rccl's java.lang.foreign one,
#      --nvidia, which opens this machine's libcudart.so.13 and finds no libnccl.so.2), also in their
#      `version` mode, which the bundle reads to choose the world; its sweep report passes its
#      self-test; and, when nvcc and an nccl.h are here (TPCOMM_NCCL_INCLUDE, or /usr/include,
#      /usr/local/include, /usr/local/cuda/include), its CUDA programs (nccl_allreduce.cu,
#      split_probe.cu) compile against it and a stub libnccl.so.2 and say "no GPU found", exit 2
#      (scripts/gpu/compile-check.sh).
# Options: --no-build (reuse the built jars).
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$PWD
source scripts/env.sh
nobuild=()
if [ "${1:-}" = "--no-build" ]; then
  nobuild=(--no-build)
  # what scripts/release-check.sh installed, to resolve the GPU bundle's classpath against
  export TPCOMM_RELEASE_REPO="${TPCOMM_RELEASE_REPO:-/tmp/tpcomm-release-m2}"
fi

work=$(mktemp -d /tmp/tpcomm-dist-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "dist check FAILED: $*" >&2; exit 1; }
start=$(date +%s)

echo "== binary distribution"
archive=$(scripts/dist.sh --out "$work/out" "${nobuild[@]}" | tail -1)
[ -f "$archive" ] || fail "scripts/dist.sh wrote no archive"
case "$(basename "$archive")" in tpcomm-*-bin.tar.gz) ;; *) fail "unexpected archive name $archive" ;; esac
mkdir -p "$work/node" && tar -C "$work/node" -xzf "$archive"
home=$(echo "$work"/node/tpcomm-*)
for f in bin/tpcomm-bench bin/tpcomm-demo bin/tpcomm-check bin/tpcomm-run README.md LICENSE; do [ -e "$home/$f" ] || fail "the archive has no $f"; done
ls "$home"/lib/comm-*.jar >/dev/null || fail "the archive has no tpcomm jars in lib/"
# The distribution's README tells users to run their own programs with -cp 'lib/*': the jars of
# the host-side modules must be there (the GPU backends, with their CUDA presets, are the GPU
# bundle's, scripts/gpu-bundle.sh), and the Java facade's and comm-djl's classes (with DJL's
# API they need) must load from lib/* alone.
version=$(basename "$home"); version=${version#tpcomm-}
for m in comm-api comm-store comm-coroutines comm-mpi comm-testkit comm-java-interop comm-djl; do
  [ -f "$home/lib/$m-$version.jar" ] || fail "the archive's lib/ has no $m-$version.jar (its README says to use lib/*)"
done
cat >"$work/LibCheck.java" <<'EOF_JAVA'
public class LibCheck {
    public static void main(String[] args) throws Exception {
        for (String c : new String[] {"dev.tpcomm.java.JavaComm", "dev.tpcomm.java.OperationQueue", "dev.tpcomm.djl.DataParallel", "ai.djl.ndarray.NDArray", "dev.tpcomm.store.TcpStore"}) {
            Class.forName(c, false, LibCheck.class.getClassLoader());
        }
        System.out.println("lib/* loads the Java facade, comm-djl and comm-store");
    }
}
EOF_JAVA
java -cp "$home/lib/*" "$work/LibCheck.java" || fail "the Java facade's or comm-djl's classes do not load from the archive's lib/*"

cd "$work"   # run as a user would: not from the repository
echo "-- bin/tpcomm-check --backend local --world 1,2"
out=$("$home/bin/tpcomm-check" --backend local --world 1,2 2>&1) || { echo "$out" | tail -40; fail "tpcomm-check --backend local failed"; }
echo "$out" | tail -1
grep -q 'tpcomm-check: local backend, worlds \[1, 2\]: [1-9][0-9]* passed, 0 failed' <<<"$out" || { echo "$out" | tail -20; fail "tpcomm-check printed no clean summary"; }

# The distribution README's own command, every case: its deliberate failures (a 1 s timeout, a
# mismatch, a cancelled call) must not end the job (issue 20 item 5: the timeout case called
# MPI_Abort and mpirun exited 1 on both implementations).
for impl in openmpi mpich; do
  if ! command -v "mpirun.$impl" >/dev/null 2>&1; then
    [ "${TPCOMM_ALLOW_MISSING_MPI:-}" = 1 ] || fail "mpirun.$impl is not installed (TPCOMM_ALLOW_MISSING_MPI=1 skips it)"
    echo "-- mpirun.$impl not installed: skipped"; continue
  fi
  echo "-- bin/tpcomm-check --backend mpi --world 2 --mpi $impl (every case)"
  t0=$(date +%s)
  set +e; out=$("$home/bin/tpcomm-check" --backend mpi --world 2 --mpi "$impl" 2>&1); rc=$?; set -e
  [ "$rc" = 0 ] || { echo "$out" | grep -v '^\[mpi-' | tail -40; fail "tpcomm-check --backend mpi --mpi $impl exited $rc"; }
  echo "$out" | tail -1
  passed=$(grep -c ' Passed ' <<<"$out" || true)
  [ "$(grep -c ' Failed ' <<<"$out" || true)" = 0 ] && [ "$passed" -gt 40 ] \
    || { echo "$out" | tail -40; fail "tpcomm-check --backend mpi --mpi $impl: expected every case to pass on both ranks ($passed passed)"; }
  grep -q 'Passed failure: ' <<<"$out" || { echo "$out" | tail -40; fail "tpcomm-check --backend mpi --mpi $impl ran no failure case"; }
  echo "   $passed case results passed in $(( $(date +%s) - t0 )) s"
done

# tpcomm-check --backend mpi starts mpirun itself: started by a launcher it must refuse at once,
# saying so, rather than nest launchers (Open MPI's inner mpirun crashed in hwloc).
if command -v mpirun.openmpi >/dev/null 2>&1; then
  echo "-- bin/tpcomm-check --backend mpi under mpirun refuses to nest (exit 2)"
  set +e; out=$(timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -np 1 "$home/bin/tpcomm-check" --backend mpi --world 2 2>&1); rc=$?; set -e
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q 'launches its own MPI job.*run it without mpirun' <<<"$out" \
    || { echo "$out" | tail -20; fail "tpcomm-check --backend mpi under mpirun should refuse, saying it launches mpirun itself (got $rc)"; }
fi

echo "-- the launchers refuse an unknown backend in one line (exit 2), and their --help names them"
for tool in tpcomm-check tpcomm-bench tpcomm-demo; do
  set +e; out=$("$home/bin/$tool" --backend nosuch 2>&1); rc=$?; set -e
  [ "$rc" = 2 ] && [ "$(grep -vc 'WARNING: Using incubator modules' <<<"$out")" = 1 ] && grep -q "^$tool: .*nosuch" <<<"$out" \
    || { echo "$out"; fail "$tool --backend nosuch should print one line naming it and exit 2 (got $rc)"; }
  "$home/bin/$tool" --help 2>/dev/null | grep -q "^Usage: $tool " || fail "$tool --help does not name $tool"
done

echo "-- bin/tpcomm-check with a bad argument says what to change and exits 2"
set +e; out=$("$home/bin/tpcomm-check" --backend local --world 0 2>&1); rc=$?; set -e
[ "$rc" = 2 ] && grep -q -- '--world takes sizes 1..64' <<<"$out" || { echo "$out"; fail "tpcomm-check --world 0 should exit 2 with a message (got $rc)"; }

echo "-- bin/tpcomm-bench --backend mpi --world 2 (mpirun, Open MPI)"
out=$("$home/bin/tpcomm-bench" --backend mpi --world 2 --mpi openmpi --op all_reduce --sizes 8,1K,64K \
  --iters 5 --warmup 2 --repeats 1 --no-progress --timeout 60 2>&1) || { echo "$out" | tail -40; fail "tpcomm-bench under mpirun failed"; }
echo "$out" | grep -v '^#' | tail -4
[ "$(grep -cE '^ *(8|1024|65536) ' <<<"$out")" -ge 3 ] || { echo "$out"; fail "tpcomm-bench printed no row for each size"; }

echo "-- bin/tpcomm-run -n 2 sets torchrun's variables; a failing rank sets the exit status"
"$home/bin/tpcomm-run" -n 2 -- sh -c '[ "$WORLD_SIZE" = 2 ] && [ "$RANK" = "$LOCAL_RANK" ] && [ -n "$MASTER_PORT" ]' || fail "tpcomm-run -n 2 did not set RANK/WORLD_SIZE/LOCAL_RANK/MASTER_PORT"
set +e; "$home/bin/tpcomm-run" -n 2 -- sh -c '[ "$RANK" = 1 ] && exit 5; sleep 30' 2>/dev/null; rc=$?; set -e
[ "$rc" = 5 ] || fail "tpcomm-run: a rank exiting 5 should end the job with 5, got $rc"
echo "-- bin/tpcomm-demo --help"
"$home/bin/tpcomm-demo" --help >/dev/null 2>&1 || fail "tpcomm-demo --help failed"

echo "== GPU bundle"
cd "$repo_root"
# Its command end to end with stub programs, a small budget and a hanging step (seconds, no build).
scripts/gpu-bundle-dry-run.sh || fail "scripts/gpu-bundle-dry-run.sh failed"
bundle=$(scripts/gpu-bundle.sh "$work/gpu" "${nobuild[@]}" | tail -1)
[ -f "$bundle" ] || fail "scripts/gpu-bundle.sh wrote no bundle"
size=$(stat -c %s "$bundle"); [ "$size" -lt $((60 * 1024 * 1024)) ] || fail "the bundle is $size bytes, over 60 MB"
mkdir -p "$work/gpunode" && tar -C "$work/gpunode" -xzf "$bundle"
gpu=$(echo "$work"/gpunode/tpcomm-gpu-bundle-*)
for f in tpcomm-gpu-check bin/gpu-check bin/gpu-check-ffm gpu/nccl_allreduce.cu gpu/split_probe.cu gpu/uniqueid_file.h \
    gpu/nonblocking_cost.cc gpu/torch_allreduce.py gpu/sweep_report.py; do
  [ -e "$gpu/$f" ] || fail "the GPU bundle has no $f"
done
cd "$work"
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "-- this machine has an NVIDIA device: not checking the no-GPU path"
else
  set +e; out=$(env -u JAVA_HOME PATH=/usr/bin:/bin "$gpu/tpcomm-gpu-check" 2>&1); rc=$?; set -e
  echo "$out"
  [ "$rc" = 2 ] && grep -q '^no GPU found' <<<"$out" || fail "the bundle's command should say 'no GPU found' and exit 2 (got $rc)"
  steps=(conformance conformance-ffm allocations mpi-staging probe sweep sanitizer)
  set +e; out=$(env -u JAVA_HOME PATH=/usr/bin:/bin "$gpu/tpcomm-gpu-check" "${steps[@]}" 2>&1); rc=$?; set -e
  [ "$rc" = 2 ] && grep -q '^no GPU found' <<<"$out" || { echo "$out"; fail "tpcomm-gpu-check ${steps[*]} should say 'no GPU found' and exit 2 (got $rc)"; }
  echo "-- tpcomm-gpu-check ${steps[*]}: no GPU found, exit 2"
  # Its results: exactly the summary and the tarball, in the folder it was given (./tpcomm-gpu-out here).
  got=$(cd "$work/tpcomm-gpu-out" && ls -A | sort | tr '\n' ' ')
  [ "$got" = "summary.txt tpcomm-gpu-logs.tar.gz " ] || fail "tpcomm-gpu-check left '$got' in its output folder, not only summary.txt and tpcomm-gpu-logs.tar.gz"
  set +e; out=$(env -u JAVA_HOME PATH=/usr/bin:/bin "$gpu/tpcomm-gpu-check" bandwidth 2>&1); rc=$?; set -e
  [ "$rc" = 2 ] && grep -q '^usage:.*steps: conformance conformance-ffm allocations mpi-staging probe sweep sanitizer' <<<"$out" \
    || { echo "$out"; fail "tpcomm-gpu-check with an unknown step should print its usage and exit 2 (got $rc)"; }
  # The mode the bundle reads NCCL's version with, on both bindings: unknown here, exit 2.
  for launcher in "gpu-check version" "gpu-check-ffm version --nvidia"; do
    # shellcheck disable=SC2086
    set +e; out=$(env -u JAVA_HOME PATH=/usr/bin:/bin "$gpu"/bin/$launcher 2>&1); rc=$?; set -e
    echo "$out" | head -1 | cut -c1-200
    [ "$rc" = 2 ] && grep -q '^nccl version unknown' <<<"$out" || fail "bin/$launcher should say 'nccl version unknown' and exit 2 here (got $rc)"
  done
  # The jlinked runtime starts GpuCheckMain from the bundle's jars (no JDK on PATH): NCCL is unavailable here.
  set +e; out=$(env -u JAVA_HOME PATH=/usr/bin:/bin "$gpu/bin/gpu-check" conformance 2>&1); rc=$?; set -e
  echo "$out" | head -3
  [ "$rc" = 2 ] && grep -q 'nccl is unavailable' <<<"$out" || fail "the bundle's runtime did not start GpuCheckMain (exit $rc)"
  # comm-rccl's java.lang.foreign binding for NVIDIA: libcudart may be here (the CUDA toolkit), libnccl.so.2 is not.
  set +e; out=$(env -u JAVA_HOME PATH=/usr/bin:/bin "$gpu/bin/gpu-check-ffm" conformance --nvidia 2>&1); rc=$?; set -e
  echo "$out" | head -3
  [ "$rc" = 2 ] && grep -q 'NCCL over java.lang.foreign is unavailable' <<<"$out" || fail "the bundle's runtime did not start comm-rccl's GpuCheckMain (exit $rc)"
fi
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 "$gpu/gpu/sweep_report.py" --self-test || fail "the bundle's sweep report failed its self-test"
else
  echo "-- no /usr/bin/python3: the bundle's sweep report was not self-tested"
fi
nccl_include=""
for d in ${TPCOMM_NCCL_INCLUDE:-} /usr/include /usr/local/include /usr/local/cuda/include; do
  [ -f "$d/nccl.h" ] && { nccl_include="$d"; break; }
done
if { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } && [ -n "$nccl_include" ] && command -v cc >/dev/null 2>&1; then
  "$repo_root/scripts/gpu/compile-check.sh" "$gpu/gpu" "$nccl_include" || fail "the bundle's CUDA programs failed their compile check"
else
  echo "-- the bundle's CUDA programs were not compile-checked: needs nvcc, cc and an nccl.h (none in TPCOMM_NCCL_INCLUDE, /usr/include, /usr/local/include, /usr/local/cuda/include)"
fi
echo "dist check passed in $(( $(date +%s) - start )) s (archive $(du -h "$archive" | cut -f1), GPU bundle $((size / 1024 / 1024)) MB)"
