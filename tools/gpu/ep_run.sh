#!/usr/bin/env bash
# Multi-GPU expert-parallel measurement (issue 18): correctness EP vs one process, dispatch /
# combine GB/s per rank (DSv3-like: 4096 tokens/rank, hidden 7168, top-8, 256 experts; FP8
# dispatch, BF16 combine) next to a plain all_to_all_single of the BF16 rows, and a MoE training
# step in tokens/s next to a PyTorch-only BF16 baseline.
#   tools/gpu/ep_run.sh N [extra args for ep_dist_bench.py]      (BUILD_DIR defaults to ./build)
set -euo pipefail
N="${1:-8}"
shift || true
here="$(cd "$(dirname "$0")" && pwd)"
BUILD_DIR="${BUILD_DIR:-$here/../../build}"
# NVLink multicast (NVLS) stays off on the lent machines (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
exec torchrun --standalone --nproc-per-node "$N" "$here/ep_dist_bench.py" "$@"
