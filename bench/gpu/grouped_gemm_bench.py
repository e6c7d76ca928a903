"""tessera sm90 grouped GEMM vs PyTorch on the docs/architecture.md MoE shapes, measured in the same run.

Driven by bench/gpu/grouped_gemm.sh, which builds libtessera_bench_gemm.so (bench/gpu/
grouped_gemm_entry.cpp linked against the build's libtessera.a). Ours is called through ctypes on
torch-owned device pointers and torch's current stream; both sides are timed with the same
harness (CUDA events, warm-up, median of REPS runs), on the same random inputs, after each of our
results has been validated against torch and an FP32 per-group reference on the GPU.

Rows: BF16 forward (vs torch._grouped_mm), FP8 rowwise forward (vs torch._scaled_grouped_mm,
fast accumulation, as torch_peers.py), BF16 wgrad (K-grouped, vs torch._grouped_mm 2d x 2d) and
FP8 rowwise wgrad (ours; torch's 2d x 2d scaled grouped mm when it accepts the call).
FLOPs count valid rows only: 2 * sum(sizes) * N * K.
"""
import ctypes
import json
import os
import sys

import torch

import bench_common  # bench/gpu/, the script's own folder
from bench_common import group_sizes

REPS = int(os.environ.get("GEMM_BENCH_REPS", "50"))
dev = "cuda"
lib = ctypes.CDLL(os.environ["TESSERA_BENCH_LIB"])
lib.tessera_bench_last_error.restype = ctypes.c_char_p
_vp, _i64, _i32, _f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
lib.tessera_bench_grouped_gemm.argtypes = [
    _i32, _i32, _i32, _vp, _i64, _i64, _i64, _i64, _vp, _vp, _vp, _i32, _f, _vp, _vp, _i64, _i64,
    _vp, _i64, _vp, _i32, _i32, _i32, _i32, _i32, _i32, _i32]
api = None  # the public API entry (grouped_gemm_api_entry.cpp), when it linked
if os.environ.get("TESSERA_BENCH_API_LIB"):
    api = ctypes.CDLL(os.environ["TESSERA_BENCH_API_LIB"])
    api.tessera_bench_api_last_error.restype = ctypes.c_char_p
    api.tessera_bench_api_fp8_forward.argtypes = [
        _i32, _vp, _i64, _i64, _i64, _vp, _vp, _vp, _vp, _vp, _vp, _i64, _vp]
SWEEP = os.environ.get("GEMM_BENCH_SWEEP", "0") == "1"
SWEEP_ONLY = os.environ.get("GEMM_BENCH_SWEEP_ONLY", "")  # shape substring, e.g. "qwen3"
SWEEP_REPS = int(os.environ.get("GEMM_BENCH_SWEEP_REPS", "15"))
# name: (block_n, stages, epilogue: 1 register stores / 2 TMA stores, schedule: 1 cooperative /
# 2 ping-pong, raster band: -1 heuristic / 0 m blocks fastest / b bands of b m blocks, cluster:
# 1 or 2 CTAs, "_c2" names); the launcher caps stages to what fits in shared memory.
SWEEP_CONFIGS = {
    "c256x3t": (256, 3, 2, 1, 0, 1), "c256x3t_b8": (256, 3, 2, 1, 8, 1),
    "c256x3t_b16": (256, 3, 2, 1, 16, 1), "c256x4r": (256, 4, 1, 1, 0, 1),
    "p128x6t": (128, 6, 2, 2, 0, 1), "p128x5t": (128, 5, 2, 2, 0, 1),
    "p128x5t_b8": (128, 5, 2, 2, 8, 1), "p128x7r": (128, 7, 1, 2, 0, 1),
    "c256x3t_c2": (256, 3, 2, 1, 0, 2), "c256x3t_b8_c2": (256, 3, 2, 1, 8, 2),
    "c256x3t_b16_c2": (256, 3, 2, 1, 16, 2), "p128x6t_c2": (128, 6, 2, 2, 0, 2),
    "p128x5t_c2": (128, 5, 2, 2, 0, 2),
    # n blocks fastest (bands of one m block) and narrow bands: the order the dW stores go out in
    "p128x5t_b1": (128, 5, 2, 2, 1, 1), "p128x5t_b2": (128, 5, 2, 2, 2, 1),
    "p128x5t_b4": (128, 5, 2, 2, 4, 1), "c256x3t_b1": (256, 3, 2, 1, 1, 1),
}


def _sweep_config(name):
    """A config by name; NAME_again is NAME timed again (later in the same sweep line: the
    run's own drift)."""
    base = name[:-len("_again")] if name.endswith("_again") else name
    if base not in SWEEP_CONFIGS:
        sys.exit(f"GEMM_BENCH_CONFIGS: unknown config {name!r}; known: {', '.join(SWEEP_CONFIGS)} "
                 "(any of them + '_again')")
    return SWEEP_CONFIGS[base]


# GEMM_BENCH_CONFIGS picks configs, e.g. "c256x3t,p128x5t,c256x3t_again"; by default all of them,
# then two again (the run's own noise).
_names = (os.environ["GEMM_BENCH_CONFIGS"].split(",") if os.environ.get("GEMM_BENCH_CONFIGS")
          else list(SWEEP_CONFIGS) + ["c256x3t_b8_again", "c256x3t_b16_again"])
SWEEP_CONFIGS = {k: _sweep_config(k) for k in _names}
sweep_rows = []

SHAPES = bench_common.SHAPES  # name: (groups, tokens per group, K, N): tessera.bench's table


def bench(fn, warmup=5, reps=REPS):
    return bench_common.bench(fn, warmup, reps)


def ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


WS = torch.empty(1 << 20, dtype=torch.uint8, device=dev)


def ours(k_grouped, elem, offs, cap, m, n, k, a, b, d, sa=None, sb=None, sa_gs=0, sb_gs=0,
         out_fp32=False, beta=0.0, block_n=0, stages=0, epilogue=0, schedule=0, band=-1,
         cluster=0):
    rc = lib.tessera_bench_grouped_gemm(
        k_grouped, elem, offs.numel(), ptr(offs), cap, m, n, k, ptr(a), ptr(b), ptr(d),
        2 if out_fp32 else 0, beta, ptr(sa), ptr(sb), sa_gs, sb_gs, ptr(WS), WS.numel(),
        ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), block_n, stages, 0, epilogue,
        schedule, band, cluster)
    if rc != 0:
        raise RuntimeError(f"tessera rc={rc}: {lib.tessera_bench_last_error().decode()}")
    return d


def api_fp8_forward(offs, total, n, k, af, sa, wf, sb, d):
    rc = api.tessera_bench_api_fp8_forward(
        offs.numel(), ptr(offs), total, n, k, ptr(af), ptr(sa), ptr(wf), ptr(sb), ptr(d), ptr(WS),
        WS.numel(), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    if rc != 0:
        raise RuntimeError(f"tessera api rc={rc}: {api.tessera_bench_api_last_error().decode()}")
    return d


def sweep(kind, tag, flops, make_run, d, want, budget):
    """Times ours under each config of SWEEP_CONFIGS (heuristic tuning data). Each config's
    output d is first checked against `want` (torch's result): a config off by more than
    `budget` is reported as bad (and its time as negative)."""
    if SWEEP_ONLY and SWEEP_ONLY not in tag:
        return
    line = {"kind": kind, "shape": tag}
    for name, (bn, st, ep, sc, band, cl) in SWEEP_CONFIGS.items():
        fn = make_run(bn, st, ep, sc, band, cl)
        d.fill_(float("nan"))
        try:
            fn()
        except RuntimeError as ex:
            print(f"sweep {kind} {tag} {name}: {ex}", flush=True)
            line[name] = 0.0
            sweep_bad.append(f"{kind} {tag} {name}")
            continue
        torch.cuda.synchronize()
        ok = relerr(d, want) < budget
        tf = round(flops / bench(fn, 3, SWEEP_REPS) / 1e12, 1)
        line[name] = tf if ok else -tf
        if not ok:
            sweep_bad.append(f"{kind} {tag} {name}")
    sweep_rows.append(line)
    print("sweep", json.dumps(line), flush=True)


sweep_bad = []


def relerr(x, ref):
    x = x.float()
    if not torch.isfinite(x).all():
        return float("inf")
    return ((x - ref).norm() / ref.norm().clamp(min=1e-30)).item()


rows = []


def report(kind, tag, flops, t_ours, t_torch, err_ours, err_torch, err_vs_torch, budget,
           moved=0):
    """One timed row; `moved` = bytes a decode-size call must move at least (A, all weights, D,
    scales): its rows are judged in TB/s."""
    ok = err_ours < budget and err_vs_torch < budget
    row = {"kind": kind, "shape": tag, "ours_tflops": flops / t_ours / 1e12,
           "ours_tbps": moved / t_ours / 1e12,
           "torch_tbps": moved / t_torch / 1e12 if t_torch else 0.0,
           "torch_tflops": flops / t_torch / 1e12 if t_torch else 0.0,
           "ratio": t_torch / t_ours if t_torch else 0.0, "ours_us": t_ours * 1e6,
           "err_ours": err_ours, "err_torch": err_torch, "err_vs_torch": err_vs_torch,
           "valid": ok}
    rows.append(row)
    print(json.dumps(row), flush=True)


def forward_case(tag, sizes, K, N, decode=False):
    """BF16 and FP8 rowwise forward (+ the public-API FP8 row and the sweep unless `decode`:
    decode-size groups, rows judged in TB/s)."""
    G = len(sizes)
    total = sum(sizes)
    flops = 2 * total * K * N
    moved16 = (total * K + G * N * K + total * N) * 2 if decode else 0
    moved8 = total * K + G * N * K + total * N * 2 + 4 * (total + G * N) if decode else 0
    offs = torch.tensor(sizes, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)
    a = torch.randn(total, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(G, N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5
    bounds = [0] + offs.tolist()
    ref = torch.empty(total, N, device=dev, dtype=torch.float32)
    for g in range(G):
        s, e = bounds[g], bounds[g + 1]
        if e > s:
            ref[s:e] = a[s:e].float() @ w[g].float().t()
    # BF16
    d = torch.empty(total, N, device=dev, dtype=torch.bfloat16)
    bt = w.transpose(-2, -1)
    tout = torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)
    d.fill_(float("nan"))
    ours(0, 0, offs, total, 0, N, K, a, w, d)
    torch.cuda.synchronize()
    report("bf16 fwd", tag, flops, bench(lambda: ours(0, 0, offs, total, 0, N, K, a, w, d)),
           bench(lambda: torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)),
           relerr(d, ref), relerr(tout, ref), relerr(d, tout.float()), 1e-2, moved16)
    if SWEEP and not decode:
        sweep("bf16 fwd", tag, flops,
              lambda bn, st, ep, sc, band, cl: lambda: ours(0, 0, offs, total, 0, N, K, a, w, d, block_n=bn,
                                                  stages=st, epilogue=ep, schedule=sc, band=band,
                                                  cluster=cl),
              d, tout.float(), 1e-2)
    # FP8 rowwise (the quantization of torch_peers.py)
    a_scale = 448.0 / a.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
    af = (a.float() * a_scale).to(torch.float8_e4m3fn)
    w_scale = 448.0 / w.abs().amax(dim=2, keepdim=True).float().clamp(min=1e-12)
    wf = (w.float() * w_scale).to(torch.float8_e4m3fn)
    sa = (1.0 / a_scale).reshape(-1).contiguous()
    sb = (1.0 / w_scale).reshape(G, N).contiguous()
    wft = wf.transpose(-2, -1)
    sgm = lambda: torch._scaled_grouped_mm(af, wft, sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                           use_fast_accum=True)
    tout = sgm()
    d.fill_(float("nan"))
    run = lambda: ours(0, 1, offs, total, 0, N, K, af, wf, d, sa, sb, 0, N)
    run()
    torch.cuda.synchronize()
    t_sgm = bench(sgm)
    report("fp8 rowwise fwd", tag, flops, bench(run), t_sgm, relerr(d, ref), relerr(tout, ref),
           relerr(d, tout.float()), 5e-2, moved8)
    if SWEEP and not decode:
        sweep("fp8 rowwise fwd", tag, flops,
              lambda bn, st, ep, sc, band, cl: lambda: ours(0, 1, offs, total, 0, N, K, af, wf, d, sa, sb, 0,
                                                  N, block_n=bn, stages=st, epilogue=ep,
                                                  schedule=sc, band=band, cluster=cl),
              d, tout.float(), 5e-2)
    if api is not None and not decode:  # the same FP8 problem through the public API (QuantizedTensorView)
        d.fill_(float("nan"))
        run_api = lambda: api_fp8_forward(offs, total, N, K, af, sa, wf, sb, d)
        run_api()
        torch.cuda.synchronize()
        report("fp8 rowwise fwd api", tag, flops, bench(run_api), t_sgm, relerr(d, ref),
               relerr(tout, ref), relerr(d, tout.float()), 5e-2)


def wgrad_case(tag, sizes, K, N):
    G = len(sizes)
    total = sum(sizes)
    flops = 2 * total * K * N
    offs = torch.tensor(sizes, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)
    dy = torch.randn(total, N, device=dev, dtype=torch.bfloat16)
    x = torch.randn(total, K, device=dev, dtype=torch.bfloat16)
    dyt = dy.t().contiguous()  # (N, T): transposed operands, as the quantizer's columnwise copies
    xt = x.t().contiguous()    # (K, T)
    bounds = [0] + offs.tolist()
    ref = torch.zeros(G, N, K, device=dev, dtype=torch.float32)
    for g in range(G):
        s, e = bounds[g], bounds[g + 1]
        if e > s:
            ref[g] = dyt[:, s:e].float() @ x[s:e].float()
    d = torch.empty(G, N, K, device=dev, dtype=torch.bfloat16)
    d.fill_(float("nan"))
    run = lambda: ours(1, 0, offs, total, N, K, 0, dyt, xt, d)
    run()
    t_torch, tout = 0.0, None
    try:
        tfn = lambda: torch._grouped_mm(dyt, xt.t(), offs=offs, out_dtype=torch.bfloat16)
        tout = tfn()
        t_torch = bench(tfn)
    except Exception as ex:  # noqa: BLE001
        print(f"torch wgrad bf16 {tag}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
    torch.cuda.synchronize()
    report("bf16 wgrad", tag, flops, bench(run), t_torch, relerr(d, ref),
           relerr(tout, ref) if tout is not None else -1,
           relerr(d, tout.float()) if tout is not None else 0.0, 1e-2)
    if SWEEP:
        sweep("bf16 wgrad", tag, flops,
              lambda bn, st, ep, sc, band, cl: lambda: ours(1, 0, offs, total, N, K, 0, dyt, xt, d,
                                                  block_n=bn, stages=st, epilogue=ep, schedule=sc,
                                                  band=band, cluster=cl),
              d, ref, 1e-2)
    # FP8 rowwise wgrad: per-group, per-row scales of the transposed operands (torch's 2d x 2d
    # convention: scale_a (G*N), scale_b (G*K)).
    yq, xq, sy, sx = [], [], [], []
    for g in range(G):
        s, e = bounds[g], bounds[g + 1]
        blk_y, blk_x = dyt[:, s:e].float(), xt[:, s:e].float()
        if e == s:  # empty expert: nothing to quantize, unit scales
            cy, cx = torch.ones(N, 1, device=dev), torch.ones(K, 1, device=dev)
        else:
            cy = 448.0 / blk_y.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
            cx = 448.0 / blk_x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
        yq.append((blk_y * cy).to(torch.float8_e4m3fn))
        xq.append((blk_x * cx).to(torch.float8_e4m3fn))
        sy.append(1.0 / cy.reshape(-1))
        sx.append(1.0 / cx.reshape(-1))
    yq, xq = torch.cat(yq, dim=1).contiguous(), torch.cat(xq, dim=1).contiguous()
    sy, sx = torch.cat(sy).contiguous(), torch.cat(sx).contiguous()
    d.fill_(float("nan"))
    run = lambda: ours(1, 1, offs, total, N, K, 0, yq, xq, d, sy, sx, N, K)
    run()
    t_torch, tout = 0.0, None
    try:
        tfn = lambda: torch._scaled_grouped_mm(yq, xq.t(), sy, sx, offs=offs,
                                               out_dtype=torch.bfloat16, use_fast_accum=True)
        tout = tfn()
        t_torch = bench(tfn)
    except Exception as ex:  # noqa: BLE001
        print(f"torch wgrad fp8 {tag}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
    torch.cuda.synchronize()
    report("fp8 rowwise wgrad", tag, flops, bench(run), t_torch, relerr(d, ref),
           relerr(tout, ref) if tout is not None else -1,
           relerr(d, tout.float()) if tout is not None else 0.0, 5e-2)
    if SWEEP:
        sweep("fp8 rowwise wgrad", tag, flops,
              lambda bn, st, ep, sc, band, cl: lambda: ours(1, 1, offs, total, N, K, 0, yq, xq, d, sy, sx, N,
                                                  K, block_n=bn, stages=st, epilogue=ep,
                                                  schedule=sc, band=band, cluster=cl),
              d, ref, 5e-2)


def main():
    print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), flush=True)
    only = os.environ.get("GEMM_BENCH_ONLY", "")
    for name, (G, m, K, N) in SHAPES.items():
        if only and only not in name:
            continue
        for imb in (False, True):
            tag = name + (" imb" if imb else "")
            sizes = group_sizes(G, m, imb)
            try:
                forward_case(tag, sizes, K, N)
            except Exception as ex:  # noqa: BLE001
                print(f"FAILED fwd {tag}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
            if os.environ.get("GEMM_BENCH_WGRAD", "1") == "1":
                try:
                    wgrad_case(tag, sizes, K, N)
                except Exception as ex:  # noqa: BLE001
                    print(f"FAILED wgrad {tag}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
            torch.cuda.empty_cache()
    # Decode sizes (docs/architecture.md: 4-64 rows per expert, judged in TB/s), forward, balanced.
    for rows_per_expert in [int(r) for r in os.environ.get("GEMM_BENCH_DECODE", "4,16,64").split(",") if r]:
        for name, (G, _, K, N) in SHAPES.items():
            if only and only not in name:
                continue
            tag = f"{name} dec{rows_per_expert}"
            try:
                forward_case(tag, [rows_per_expert] * G, K, N, decode=True)
            except Exception as ex:  # noqa: BLE001
                print(f"FAILED fwd {tag}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
            torch.cuda.empty_cache()
    out_dir = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "grouped_gemm_bench.json"), "w") as f:
        json.dump({"rows": rows, "sweep": sweep_rows}, f, indent=1)
    print("\nSUMMARY (TFLOP/s, median of", REPS, "CUDA-event timings; ratio = torch time / ours)")
    print(f"{'kind':18s} {'shape':18s} {'ours':>8s} {'torch':>8s} {'ratio':>6s} "
          f"{'err ours':>9s} {'err torch':>9s} valid")
    for r in rows:
        if r["ours_tbps"]:
            continue
        print(f"{r['kind']:18s} {r['shape']:18s} {r['ours_tflops']:8.1f} {r['torch_tflops']:8.1f} "
              f"{r['ratio']:6.2f} {r['err_ours']:9.2e} {r['err_torch']:9.2e} {r['valid']}")
    decode_rows = [r for r in rows if r["ours_tbps"]]
    if decode_rows:
        print("\nDECODE (TB/s = bytes of A, all weights, D and scales / time; device copy ~4.3)")
        print(f"{'kind':18s} {'shape':20s} {'ours':>7s} {'torch':>7s} {'ratio':>6s} {'us':>8s} valid")
        for r in decode_rows:
            print(f"{r['kind']:18s} {r['shape']:20s} {r['ours_tbps']:7.2f} {r['torch_tbps']:7.2f} "
                  f"{r['ratio']:6.2f} {r['ours_us']:8.1f} {r['valid']}")
    bad = sum(not r["valid"] for r in rows)
    if sweep_rows:
        names = list(SWEEP_CONFIGS)
        print("\nSWEEP (TFLOP/s; negative = output failed validation)")
        print(f"{'kind':18s} {'shape':18s} " + " ".join(f"{n:>8s}" for n in names))
        for r in sweep_rows:
            print(f"{r['kind']:18s} {r['shape']:18s} " +
                  " ".join(f"{r[n]:8.1f}" for n in names))
        for b in sweep_bad:
            print("SWEEP CONFIG FAILED VALIDATION:", b)
    sys.exit(1 if bad or sweep_bad else 0)


if __name__ == "__main__":
    main()
