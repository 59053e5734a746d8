#!/usr/bin/env bash
# Compile-checks the GPU bundle's CUDA programs on a machine without a GPU (scripts/dist-check.sh
# calls it when nvcc and an nccl.h are there):
#   scripts/gpu/compile-check.sh DIR NCCL_INCLUDE_DIR
# Builds every DIR/*.cu with nvcc against NCCL_INCLUDE_DIR/nccl.h, links each against a stub
# libnccl.so.2 that defines the nccl* functions the programs call (each one aborts: none may be
# reached), and runs each without arguments: without a GPU each must print "no GPU found" and exit 2
# before its first NCCL call. nvcc links the CUDA runtime statically, so no libcudart is needed.
set -euo pipefail
dir="${1:?usage: $0 DIR NCCL_INCLUDE_DIR}"
inc="${2:?usage: $0 DIR NCCL_INCLUDE_DIR}"
[ -f "$inc/nccl.h" ] || { echo "compile-check.sh: no nccl.h in $inc" >&2; exit 1; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "compile-check.sh: no nvcc" >&2; exit 1; }
work=$(mktemp -d /tmp/tpcomm-gpu-compile.XXXXXX)
trap 'rm -rf "$work"' EXIT

version=$(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' "$inc/nccl.h" | head -1)
# The stub: every ncclXxx( the programs call, as a function that aborts.
grep -oh 'nccl[A-Z][A-Za-z]*(' "$dir"/*.cu | tr -d '(' | sort -u \
  | awk '{ printf "void %s(void) { fputs(\"stub libnccl.so.2: %s called\\n\", stderr); abort(); }\n", $1, $1 }' \
  | { printf '#include <stdio.h>\n#include <stdlib.h>\n'; cat; } >"$work/stub.c"
mkdir -p "$work/lib"
cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$work/lib/libnccl.so.2" "$work/stub.c"
status=0
for src in "$dir"/*.cu; do
  name=$(basename "$src" .cu)
  if ! "$nvcc" -O2 -o "$work/$name" "$src" -I"$inc" -L"$work/lib" -Xlinker -rpath -Xlinker "$work/lib" \
      -l:libnccl.so.2 >"$work/$name.nvcc.log" 2>&1; then
    echo "compile-check: $name.cu did not compile with $("$nvcc" --version | tail -1) against nccl.h $version:"
    cat "$work/$name.nvcc.log"; status=1; continue
  fi
  set +e; out=$("$work/$name" 2>&1); rc=$?; set -e
  if [ "$rc" = 2 ] && grep -q '^no GPU found' <<<"$out"; then
    echo "compile-check: $name.cu compiled (nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), nccl.h $version, stub libnccl.so.2) and ran: $out (exit 2)"
  else
    echo "compile-check: $name should say 'no GPU found' and exit 2 here; got exit $rc: $out"; status=1
  fi
done
exit $status
