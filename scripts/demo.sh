#!/usr/bin/env bash
# The tensor-parallel training demo (comm-examples): a Megatron-style MLP block trained on 4 ranks,
# checked against the same model computed densely on one rank.
#   scripts/demo.sh                                   local backend (coroutine ranks), 4 ranks
#   scripts/demo.sh --backend mpi --world 4           4 processes under mpirun (Open MPI; --mpi mpich)
#   scripts/demo.sh --sequence-parallel               all-gather / reduce-scatter along the sequence
#   scripts/demo.sh --help                            every option
# Builds what is needed first (Maven wrapper, quiet; skipped when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/run-module.sh
tpcomm_run comm-examples dev.tpcomm.examples.DemoMain "$@"
