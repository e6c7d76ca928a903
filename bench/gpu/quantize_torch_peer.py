"""torch.compile'd PyTorch rowwise FP8 quantization of a 16384x7168 BF16 tensor: the baseline of
bench/gpu/quantize.sh, timed exactly like bench/gpu/torch_peers.py quant() (median of 30 CUDA-event
timings after 5 warm-ups, bytes = 3 per element + 4 per row). Prints one JSON line per figure."""
import json

import torch

from bench_common import bench  # bench/gpu/, the script's own folder


def main():
    torch.manual_seed(0)
    x = torch.randn(16384, 7168, device="cuda", dtype=torch.bfloat16)

    def eager():
        amax = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
        sc = 448.0 / amax
        return (x.float() * sc).to(torch.float8_e4m3fn), 1.0 / sc

    nbytes = x.numel() * 3 + x.shape[0] * 4
    comp = torch.compile(eager)
    for name, fn in (("torch eager rowwise fp8", eager), ("torch.compile rowwise fp8", comp)):
        t = bench(fn)
        print(json.dumps({"name": name, "us": t * 1e6, "tbps": nbytes / t / 1e12}), flush=True)


if __name__ == "__main__":
    main()
