#!/usr/bin/env bash
# The GPU bundle's command (scripts/gpu-bundle.sh, `tpcomm-gpu-check`) checked end to end without a
# GPU, a JDK or Maven, in seconds: it takes the command out of gpu-bundle.sh, puts stub programs
# where the bundle's are (bin/gpu-check, bin/gpu-check-ffm: a "version" line, then a run that
# sleeps past its step limit or passes; no nvcc, so the C programs are not built), runs it with
# TPCOMM_GPU_DRY_RUN=1 and a small budget, and checks that
#   - it finishes within the budget it was given (plus the 15 s it keeps for the summary),
#   - every process stops at the per-step limit (a stub that hangs is reported as stopped),
#   - the output folder it is given holds exactly summary.txt and tpcomm-gpu-logs.tar.gz,
#   - the summary names the inventory, the bindings, the world and one line per step,
#   - a machine without a GPU (no dry run) gets "no GPU found", exit 2, and the same two files.
#   scripts/gpu-bundle-dry-run.sh            (exit 0 when all hold)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/tpcomm-gpu-dry.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "gpu-bundle-dry-run: $*" >&2; exit 1; }

home="$work/tpcomm-gpu-bundle-dry"
mkdir -p "$home/bin" "$home/gpu"
awk '/^cat >"\$tree\/tpcomm-gpu-check" <<.EOF.$/{p=1;next} p&&/^EOF$/{p=0} p' scripts/gpu-bundle.sh >"$home/tpcomm-gpu-check"
[ -s "$home/tpcomm-gpu-check" ] || fail "could not find the tpcomm-gpu-check heredoc in scripts/gpu-bundle.sh"
chmod +x "$home/tpcomm-gpu-check"
cp scripts/gpu/*.cu scripts/gpu/*.h scripts/gpu/*.cc scripts/gpu/*.py "$home/gpu/"
# Stubs: the JavaCPP binding answers and passes; the FFM binding hangs (as a wedged NCCL would).
cat >"$home/bin/gpu-check" <<'EOF'
#!/usr/bin/env bash
case "$1" in version) echo "nccl version 23007 (stub JavaCPP binding)";; *) echo "stub gpu-check $*: passed";; esac
EOF
cat >"$home/bin/gpu-check-ffm" <<'EOF'
#!/usr/bin/env bash
case "$1" in version) echo "nccl version 23007 (stub FFM binding)";; *) echo "stub gpu-check-ffm $*: hangs"; exec sleep 600;; esac
EOF
chmod +x "$home/bin/"*

out="$work/out"
start=$SECONDS
set +e
TPCOMM_GPU_DRY_RUN=1 TPCOMM_GPU_BUDGET=60 TPCOMM_GPU_STEP_TIMEOUT=5 TPCOMM_GPU_WORLD=2 PATH=/usr/bin:/bin \
  "$home/tpcomm-gpu-check" --out "$out" >"$work/run.log" 2>&1
rc=$?
set -e
took=$((SECONDS - start))
echo "-- dry run: exit $rc after $took s"
[ "$took" -le 75 ] || { cat "$work/run.log"; fail "the dry run took $took s, past its 60 s budget"; }
[ "$rc" = 1 ] || { cat "$work/run.log"; fail "the dry run should fail (a stub hangs), exit 1, got $rc"; }
files=$(cd "$out" && ls -A | sort | tr '\n' ' ')
[ "$files" = "summary.txt tpcomm-gpu-logs.tar.gz " ] || fail "the output folder holds '$files', not only summary.txt and tpcomm-gpu-logs.tar.gz"
summary="$out/summary.txt"
for want in "dry run" "binding gpu-check loads" "world: world of 2" "passed  conformance, JavaCPP" \
    "FAILED  conformance, java.lang.foreign" "exit status: 1"; do
  grep -q -- "$want" "$summary" || { cat "$summary"; fail "summary.txt lacks '$want'"; }
done
listing=$(tar tzf "$out/tpcomm-gpu-logs.tar.gz")
grep -q 'conformance-ffm.log' <<<"$listing" || fail "the tarball lacks conformance-ffm.log"
grep -q "stopped at the time limit (5 s)" "$work/run.log" || { cat "$work/run.log"; fail "the hanging step was not reported as stopped at its 5 s limit"; }
echo "-- output folder: $files; summary:"
sed 's/^/   /' "$summary"

# A binding that does not load: its conformance is skipped with the reason, not run.
cat >"$home/bin/gpu-check" <<'EOF2'
#!/usr/bin/env bash
echo "UnsatisfiedLinkError: no jnicudart (stub: the preset does not load)" >&2; exit 1
EOF2
out3="$work/out3"
set +e
TPCOMM_GPU_DRY_RUN=1 TPCOMM_GPU_BUDGET=40 TPCOMM_GPU_STEP_TIMEOUT=3 TPCOMM_GPU_WORLD=1 PATH=/usr/bin:/bin \
  "$home/tpcomm-gpu-check" --out "$out3" conformance >"$work/run3.log" 2>&1
set -e
grep -q "binding gpu-check does not load: UnsatisfiedLinkError" "$out3/summary.txt" \
  && grep -q "skipped conformance, JavaCPP binding.*does not load here" "$out3/summary.txt" \
  || { cat "$out3/summary.txt" "$work/run3.log"; fail "a binding that does not load should be named and its conformance skipped"; }
echo "-- a binding that does not load: named in summary.txt, its conformance skipped"

# Without a GPU and without the dry run: "no GPU found", exit 2, the same two files.
out2="$work/out2"
set +e
msg=$(TPCOMM_GPU_OUT="$out2" PATH=/usr/bin:/bin "$home/tpcomm-gpu-check" 2>&1); rc=$?
set -e
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "-- this machine has an NVIDIA device: the no-GPU case was not checked"
else
  [ "$rc" = 2 ] && grep -q '^no GPU found' <<<"$msg" || { echo "$msg"; fail "without a GPU: expected 'no GPU found' and exit 2, got $rc"; }
  files=$(cd "$out2" && ls -A | sort | tr '\n' ' ')
  [ "$files" = "summary.txt tpcomm-gpu-logs.tar.gz " ] || fail "without a GPU the output folder holds '$files'"
  echo "-- no GPU: exit 2, 'no GPU found', output folder: $files"
fi
echo "gpu-bundle-dry-run: OK"
