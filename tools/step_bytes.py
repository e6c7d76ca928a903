"""The floor of one grouped-linear training step (forward, dgrad, wgrad) from its DRAM bytes and
FLOPs, for torch's BF16 step and tessera's FP8 rowwise step with cached weights: each kernel takes
at least max(bytes / bandwidth, FLOPs / peak), the step at least the sum. The ratio of the two
floors bounds what FP8 can gain on a shape whatever its kernels do, for each way of quantizing x
and dy:

  * two reads (what runs today: the maxima pass, then the pass writing both copies): 6 bytes
    per element (2 + 2 read, 1 + 1 written);
  * one read (each element read once, both copies written): 4;
  * codes (the rowwise copy made by whatever produced x and dy — an FP8 dispatch, a fused
    previous op — and the columnwise copy made from its codes: 1 + 1 read, 1 written): 3;
  * free (both copies made by the previous op): 0.

With --optim, the floors of one step plus the optimizer step on the layer's BF16 weights (python
-m tessera.bench train --optim): torch's step plus torch.optim.AdamW(fused=True), whose states
are in the weight's dtype (per weight: the weight read and written, 2 + 2 bytes; its gradient
read, 2; both moments read and written, 4 + 4: 14 bytes), against tessera's FP8 rowwise step
(x and dy in two reads) with its weight copies made in one of four ways:

  * after the update (quantize_weights_, or the next forward): the new weight read twice (the
    maxima, then both copies) and both FP8 copies written: 14 + 6 bytes;
  * in the update's own pass: both copies written, the new weight read once more for the
    columnwise copy (its scales span every row of an expert): 14 + 2 + 2;
  * the same with both copies' scales known before the pass: 14 + 2;
  * the update also inside the weight gradient's GEMM (dW neither written nor read again):
    14 + 2 - 2, and the wgrad without its 2-byte dW store.

    python3 tools/step_bytes.py [--shapes qwen3-fc1,...] [--bw 4.3] [--bf16 790] [--fp8 1446]
                                [--optim]

Defaults: every linear shape of tessera.bench.shapes; 4.3 TB/s (the H200's device-to-device copy,
docs/gemm_cuda.md), 790 TFLOP/s BF16 and 1,446 FP8 (dense figures measured on the H200). Standard
library only: a model, not a measurement (the measured steps: python -m tessera.bench train).
"""
import argparse
import importlib.util
import os

# shapes.py on its own (the tessera package imports NumPy and the compiled module)
_spec = importlib.util.spec_from_file_location("shapes", os.path.join(
    os.path.dirname(__file__), "..", "python", "tessera", "bench", "shapes.py"))
_shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shapes)
LINEAR_SHAPES = _shapes.LINEAR_SHAPES


def gemms(t, k, n, g, act, weight):
    """(name, bytes, flops) of the three GEMMs with activations of `act` bytes per element
    (x, dy as read), weights of `weight` bytes (read twice: forward, dgrad), 16-bit y, dx, dW."""
    flops = 2 * t * k * n
    w = g * n * k
    return [("forward", t * k * act + w * weight + t * n * 2, flops),
            ("dgrad", t * n * act + w * weight + t * k * 2, flops),
            ("wgrad", t * k * act + t * n * act + w * 2, flops)]


QUANT = (("2 reads", 6), ("1 read", 4), ("codes", 3), ("free", 0))  # bytes per element


def floor_us(kernels, bw, peak):
    return sum(max(b / (bw * 1e12), f / (peak * 1e12)) for _, b, f in kernels) * 1e6


ADAMW = 14  # bytes per BF16 weight of a fused AdamW step with BF16 moments
# (label, bytes per weight beyond the step's, whether the wgrad still stores dW)
WEIGHT_COPIES = (("copies after the update", ADAMW + 6, True),
                 ("copies in the update", ADAMW + 4, True),
                 ("copies in the update, scales known", ADAMW + 2, True),
                 ("update in the wgrad", ADAMW + 2 - 2, False))


def optim_table(a):
    """The --optim table: torch's step + AdamW against tessera's with each way of making the
    weight copies; the ratio is torch's floor over tessera's."""
    print(f"floors of step + AdamW(fused, BF16 moments) at {a.bw} TB/s, {a.bf16} BF16 / {a.fp8} "
          "FP8 TFLOP/s; µs; × = torch's floor / tessera's (FP8 rowwise, x and dy in two reads)")
    print("| shape | weights (M) | torch step + AdamW µs | "
          + " | ".join(f"{label} µs | ×" for label, _, _ in WEIGHT_COPIES) + " |")
    print("|---|---:|---:|" + "---:|---:|" * len(WEIGHT_COPIES))
    for name in a.shapes.split(","):
        g, per, k, n = LINEAR_SHAPES[name]
        t, w = g * per, g * n * k
        base = floor_us(gemms(t, k, n, g, 2, 2) + [("adamw", ADAMW * w, 0)], a.bw, a.bf16)
        quant = [("quant x", 6 * t * k, 0), ("quant dy", 6 * t * n, 0)]
        row = [name, f"{w / 1e6:.0f}", f"{base:.0f}"]
        for _, per_weight, stores_dw in WEIGHT_COPIES:
            fp8 = gemms(t, k, n, g, 1, 1)
            if not stores_dw:
                fp8 = [(s, b - 2 * w if s == "wgrad" else b, f) for s, b, f in fp8]
            us = floor_us(fp8 + quant + [("optimizer", per_weight * w, 0)], a.bw, a.fp8)
            row += [f"{us:.0f}", f"{base / us:.2f}"]
        print("| " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(LINEAR_SHAPES))
    ap.add_argument("--bw", type=float, default=4.3, help="DRAM bandwidth, TB/s")
    ap.add_argument("--bf16", type=float, default=790.0, help="BF16 dense peak, TFLOP/s")
    ap.add_argument("--fp8", type=float, default=1446.0, help="FP8 dense peak, TFLOP/s")
    ap.add_argument("--optim", action="store_true",
                    help="the floors of the step plus the optimizer step instead")
    a = ap.parse_args()
    if a.optim:
        optim_table(a)
        return
    print(f"floors at {a.bw} TB/s, {a.bf16} BF16 / {a.fp8} FP8 TFLOP/s; µs per step; "
          f"ratio = BF16 floor / FP8 floor")
    print("| shape | BF16 MB | BF16 µs | FP8 GEMM MB | "
          + " | ".join(f"FP8 µs, quant {q} | ×" for q, _ in QUANT) + " |")
    print("|---|---:|---:|---:|" + "---:|---:|" * len(QUANT))
    for name in a.shapes.split(","):
        g, per, k, n = LINEAR_SHAPES[name]
        t = g * per
        bf16 = gemms(t, k, n, g, 2, 2)
        fp8 = gemms(t, k, n, g, 1, 1)
        base = floor_us(bf16, a.bw, a.bf16)
        row = [name, f"{sum(b for _, b, _ in bf16) / 1e6:.0f}", f"{base:.0f}",
               f"{sum(b for _, b, _ in fp8) / 1e6:.0f}"]
        for _, per in QUANT:
            us = floor_us(fp8 + [("quant x", per * t * k, 0), ("quant dy", per * t * n, 0)],
                          a.bw, a.fp8)
            row += [f"{us:.0f}", f"{base / us:.2f}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
