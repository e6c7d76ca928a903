"""A few fwd+bwd steps of one tessera.torch.GroupedLinear, for Nsight Compute (per-kernel counters
of the training step; not a benchmark: ncu serializes and replays every launch).

    ncu --clock-control none [--launch-skip S --launch-count C] --metrics ... --csv \\
        python3 tools/gpu/ncu_step.py [recipe] [G T K N] > ncu.csv
    python3 tools/gpu/ncu_step.py --summary ncu.csv      # one line per launch

Step 0 re-quantizes the weights (is_first_microbatch=True), later steps reuse the copies.
Defaults: fp8_rowwise, the Qwen3-30B-A3B fc1 rows (128 experts x 256 tokens, K 2048, N 1536)."""
import csv
import sys


def summary(path):
    rows = [r for r in csv.DictReader(l for l in open(path) if l.startswith('"'))]
    launches = {}
    for r in rows:
        key = (int(r["ID"]), r["Kernel Name"][:60])
        unit = r["Metric Unit"] if r["Metric Unit"] not in ("", "byte") else ""
        launches.setdefault(key, []).append(f'{r["Metric Name"].split("__")[-1]}={r["Metric Value"]}{unit}')
    for (i, name), metrics in sorted(launches.items()):
        print(i, name, " ".join(metrics))


def steps(recipe, g, t, k, n, count=4):
    import torch
    import tessera.torch as tt
    m = tt.GroupedLinear(g, k, n, recipe=recipe, bias=False, device="cuda",
                         params_dtype=torch.bfloat16)
    x = torch.randn(g * t, k, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(g * t, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(1, g + 1, device="cuda", dtype=torch.int32) * t
    for i in range(count):
        m.zero_grad(set_to_none=True)
        m(x.detach().requires_grad_(), offs, is_first_microbatch=(i == 0)).backward(dy)
    torch.cuda.synchronize()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        recipe = sys.argv[1] if len(sys.argv) > 1 else "fp8_rowwise"
        g, t, k, n = (int(v) for v in sys.argv[2:6]) if len(sys.argv) >= 6 else (128, 256, 2048, 1536)
        steps(recipe, g, t, k, n)
