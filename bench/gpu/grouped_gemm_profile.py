"""Profiles grouped GEMM cases under Nsight Compute, ours next to PyTorch's on the same operands.

Run by grouped_gemm_profile.sh as `ncu --profile-from-start off ... python3 grouped_gemm_profile.py`:
every case is warmed up outside the profiled range, then launched once inside it (ours with the
heuristic's config, then torch's), so the report holds one kernel per (case, side) plus whatever
helper kernels torch launches. PROFILE_CASES: "shape:kind[:imb],..." (grouped_gemm_one.py names); PROFILE_CONFIGS: the configs
launched per case ("heuristic", "torch" or grouped_gemm_bench.SWEEP_CONFIGS names).
"""
import os

import torch

from grouped_gemm_one import make_case

DEFAULT = ("qwen3-fc1:bf16-fwd,qwen3-fc2:bf16-fwd,qwen3-fc2:fp8-fwd,dsv3-fc1:fp8-fwd,"
           "dsv3-fc1:fp8-fwd:imb,qwen3-fc1:fp8-fwd:imb")


def main():
    for case in os.environ.get("PROFILE_CASES", DEFAULT).split(","):
        parts = case.split(":")
        run = make_case(parts[0], parts[1], len(parts) > 2 and parts[2] == "imb")
        for config in os.environ.get("PROFILE_CONFIGS", "heuristic,torch").split(","):
            fn = run(config)
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            print(f"profiled: {case} {config}", flush=True)
            torch.cuda.profiler.start()
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
