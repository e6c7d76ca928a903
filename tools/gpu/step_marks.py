"""Where an eager training step waits for its host, without a profiler: one fwd+bwd step of each
contender of `python -m tessera.bench train` on one linear shape, timed as the bench times it
(a synchronize before each step), with a host clock and a CUDA event at three points: the step's
start, the forward's return (y in hand) and the backward's return. The device stamp of a point is
when the GPU had finished everything launched before it, so

  * host fwd > device fwd: the GPU finished the forward's kernels and then waited for the host;
  * device end - graph: what the eager step costs over the same kernels replayed from one CUDA
    graph (launch gaps, the wait before the first kernel and between forward and backward); the
    replay is timed before and after the eager steps, and their mean is subtracted.

    python3 tools/gpu/step_marks.py [shape] [--imbalanced] [--recipes fp8_rowwise,fp8_current]
                                    [--polling]

Medians over --steps steps (µs since the step's start; tessera.bench.timing.marked_step_us).
--polling also times each contender waiting for the GPU by polling an event between steps (the
CPU kept busy) instead of torch.cuda.synchronize(). Not a benchmark: the events and clock
reads add a few µs to each interval; the bench's figures stay `python -m tessera.bench train`.
"""
import argparse

import torch

from tessera.bench import shapes, timing, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="?", default="qwen3-fc2")
    ap.add_argument("--imbalanced", action="store_true")
    ap.add_argument("--recipes", default="fp8_rowwise,fp8_current")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--polling", action="store_true",
                    help="also time each contender waiting by polling an event between steps")
    a = ap.parse_args()
    import tessera.torch as tt
    e, per, k, n = shapes.LINEAR_SHAPES[a.shape]
    case = train.Case(e, per, k, n, a.imbalanced)
    recipes = ["bf16"] + [r for r in a.recipes.split(",") if r and r != "bf16"]
    contenders = [(label, f) for label, f in train.linear_contenders(tt, None, recipes)
                  if label == "torch bf16" or label == "tessera bf16" or "cached-W" in label]
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}; "
          f"{shapes.describe(a.shape)} {'skewed' if a.imbalanced else 'balanced'}; "
          f"median of {a.steps} synchronized steps, µs since the step's start")
    print("| contender | host fwd | device fwd | host end | device end (step) | graph replay "
          "before / after | eager - graph |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, f in contenders:
        x = case.x.detach().requires_grad_()
        w = case.w.detach().requires_grad_()

        def fwd(f=f, x=x, w=w):
            x.grad = w.grad = None
            return f(x, w, case.offs)

        def bwd(y):
            y.backward(case.dy)

        step, _, _ = train.linear_step(lambda xx, ww, f=f: f(xx, ww, case.offs), case)
        replay = train.graphed(step)
        graph_us = lambda: train.timed_interleaved({"g": replay}, a.steps)["g"] * 1e3  # noqa
        before = graph_us()
        marked = [(polling, timing.marked_step_us(fwd, bwd, a.steps, polling))
                  for polling in ((False, True) if a.polling else (False,))]
        after = graph_us()  # the replay again: drift between the two shows in the spread
        for polling, (hf, df, he, de) in marked:
            name = label + (" (polling wait)" if polling else "")
            print(f"| {name} | {hf:.1f} | {df:.1f} | {he:.1f} | {de:.1f} | {before:.1f} / "
                  f"{after:.1f} | {de - (before + after) / 2:.1f} |", flush=True)


if __name__ == "__main__":
    main()
