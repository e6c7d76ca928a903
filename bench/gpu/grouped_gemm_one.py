"""One grouped GEMM case of grouped_gemm_bench.py, ours and PyTorch's on the same operands: what a
profiler (ncu) looks at. Usage (bench/gpu/grouped_gemm.sh builds the library first):
  TESSERA_BENCH_LIB=build-gpu/libtessera_bench_gemm.so python3 grouped_gemm_one.py \\
      SHAPE KIND CONFIG [imb]
SHAPE: a key of grouped_gemm_bench.SHAPES; KIND: bf16-fwd, fp8-fwd, bf16-wgrad, fp8-wgrad;
CONFIG: a key of grouped_gemm_bench.SWEEP_CONFIGS, "heuristic", or "torch" (PyTorch's grouped
GEMM on the same operands). grouped_gemm_profile.sh profiles a list of such cases."""
import sys

import torch

import grouped_gemm_bench as gb
from bench_common import group_sizes


def make_case(shape, kind, imb):
    """Returns run(config) -> a callable that launches the case once with that config."""
    G, m, K, N = gb.SHAPES[shape]
    sizes = group_sizes(G, m, imb)
    total = sum(sizes)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    fp8 = kind.startswith("fp8")
    dt = torch.float8_e4m3fn if fp8 else torch.bfloat16
    if kind.endswith("fwd"):
        a = torch.randn(total, K, device="cuda").to(dt)
        w = (torch.randn(G, N, K, device="cuda") / K ** 0.5).to(dt)
        d = torch.empty(total, N, device="cuda", dtype=torch.bfloat16)
        sa = torch.rand(total, device="cuda") if fp8 else None
        sb = torch.rand(G, N, device="cuda") if fp8 else None
        ours = lambda **kw: gb.ours(0, int(fp8), offs, total, 0, N, K, a, w, d, sa, sb, 0, N, **kw)
        wt = w.transpose(-2, -1)
        if fp8:
            theirs = lambda: torch._scaled_grouped_mm(a, wt, sa, sb, offs=offs,
                                                      out_dtype=torch.bfloat16, use_fast_accum=True)
        else:
            theirs = lambda: torch._grouped_mm(a, wt, offs=offs, out_dtype=torch.bfloat16)
    else:
        dyt = torch.randn(N, total, device="cuda").to(dt)
        xt = torch.randn(K, total, device="cuda").to(dt)
        d = torch.empty(G, N, K, device="cuda", dtype=torch.bfloat16)
        sa = torch.rand(G * N, device="cuda") if fp8 else None
        sb = torch.rand(G * K, device="cuda") if fp8 else None
        ours = lambda **kw: gb.ours(1, int(fp8), offs, total, N, K, 0, dyt, xt, d, sa, sb, N, K, **kw)
        if fp8:
            theirs = lambda: torch._scaled_grouped_mm(dyt, xt.t(), sa, sb, offs=offs,
                                                      out_dtype=torch.bfloat16, use_fast_accum=True)
        else:
            theirs = lambda: torch._grouped_mm(dyt, xt.t(), offs=offs, out_dtype=torch.bfloat16)

    def run(config):
        if config == "torch":
            return theirs
        bn, st, ep, sc, band, cl = (gb.SWEEP_CONFIGS[config] if config != "heuristic"
                                    else (0, 0, 0, 0, -1, 0))
        return lambda: ours(block_n=bn, stages=st, epilogue=ep, schedule=sc, band=band, cluster=cl)

    return run


def main():
    shape, kind, config = sys.argv[1], sys.argv[2], sys.argv[3]
    imb = len(sys.argv) > 4 and sys.argv[4] == "imb"
    run = make_case(shape, kind, imb)(config)
    for _ in range(4):
        run()
    torch.cuda.synchronize()
    print("ran", shape, kind, config, "imb" if imb else "", "us:",
          round(gb.bench(run, 2, 10) * 1e6, 1), flush=True)


if __name__ == "__main__":
    main()
