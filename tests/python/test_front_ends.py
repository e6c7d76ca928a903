"""One step, two front ends: tessera.torch's grouped_linear (PyTorch autograd over tessera's ops)
and tessera.nn's GroupedLinear (the C++ nn layer) give the same bits for every recipe when
handed the same FP32 inputs and weights, on group sizes that are multiples of every recipe's
token alignment (128: the C++ layer then pads nothing, so both quantize the same matrices) —
one set of numerics whichever front end a user trains with."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
import tessera.nn as tn  # noqa: E402
from tessera.torch import linear as tl  # noqa: E402

SIZES = [128, 0, 256, 128]
# tessera.nn recipe name -> the tessera.torch recipe of the same roles
RECIPES = {"fp8_current:e4m3": "fp8_current", "fp8_rowwise": "fp8_rowwise",
           "fp8_block": "fp8_block", "mxfp8": "mxfp8", "nvfp4": "nvfp4", "bf16": "bf16",
           "fp8_delayed": tt.DelayedScaling(),
           "fp8_delayed:e4m3": tt.DelayedScaling(fp8_format="e4m3")}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_torch_step_equals_the_cpp_layer_bit_for_bit(recipe):
    g, k, n, t = len(SIZES), 192, 64, sum(SIZES)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((t, k)).astype(np.float32)
    dy = rng.standard_normal((t, n)).astype(np.float32)
    layer = tn.GroupedLinear(g, k, n, recipe, name="fc1")
    layer.reset_parameters(3)
    y, ctx = layer.forward(x, SIZES)
    dx, dw, _ = layer.backward(ctx, dy)

    xt = torch.from_numpy(x).requires_grad_()
    wt = torch.from_numpy(layer.weight.copy()).requires_grad_()
    offs = torch.tensor(SIZES).cumsum(0).to(torch.int32)
    torch_recipe = RECIPES[recipe]
    state = (torch_recipe.initial_state() if isinstance(torch_recipe, tt.DelayedScaling)
             else None)
    tl.SR_OFFSETS.reset(0)  # NVFP4 dy: the first draw of the C++ layer's quantizer
    yt = tl.grouped_linear(xt, wt, offs, torch_recipe, delayed_state=state, name="fc1")
    yt.backward(torch.from_numpy(dy))

    # bf16: the torch step returns y and dx in bfloat16 (the C++ layer in float32)
    got = [torch.from_numpy(a).to(b.dtype) for a, b in ((y, yt), (dx, xt.grad), (dw, wt.grad))]
    if recipe == "bf16":
        got[1] = got[1].to(torch.bfloat16).float()
    for what, a, b in zip(("y", "dx", "dW"), got, (yt.detach(), xt.grad, wt.grad)):
        assert torch.equal(a, b), f"{recipe}: {what}"
