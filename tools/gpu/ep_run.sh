#!/usr/bin/env bash
# Multi-GPU expert parallelism (issues 30, 33): first the correctness test (EP over N GPUs against
# the same MoELayer on one GPU, tests/python/test_moe_ep_gpu.py, under torchrun), then dispatch /
# combine GB/s per rank (DSv3-like: 4096 tokens/rank, hidden 7168, top-8, 256 experts; FP8
# dispatch, BF16 combine) next to a plain all_to_all_single of the BF16 rows, and a MoE training
# step in tokens/s next to a PyTorch-only BF16 baseline (tools/gpu/ep_dist_bench.py).
#   tools/gpu/ep_run.sh N [extra args for ep_dist_bench.py]      (BUILD_DIR defaults to ./build)
# EP_TEST=0 skips the test (N = 1 skips it too: it needs 2+ ranks). On one GPU, 256 DSv3 experts
# (weights, gradients, FP8 copies) leave some layer rows out of memory on an H200 (they print
# "skipped"); --experts 64 runs them all.
set -euo pipefail
N="${1:-8}"
shift || true
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$root/build}"
# NVLink multicast (NVLS) stays off on the lent machines (KINDS.md), in every process torchrun
# starts (they inherit this environment; the test asserts it).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
export TESSERA_BUILD_DIR="$BUILD_DIR"
rc=0
if [ "${EP_TEST:-1}" = 1 ] && [ "$N" -ge 2 ]; then
  (cd "$root" && torchrun --standalone --nproc-per-node "$N" -m pytest -q -s -p no:cacheprovider \
     tests/python/test_moe_ep_gpu.py) || rc=$?
  echo "EP correctness test over $N GPUs: rc=$rc"
fi
torchrun --standalone --nproc-per-node "$N" "$here/ep_dist_bench.py" "$@" || rc=$?
exit $rc
