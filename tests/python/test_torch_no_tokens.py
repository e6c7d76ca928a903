"""An empty batch (T = 0 tokens: an expert-parallel rank that received none, a last micro-batch
with nothing routed) through the tessera.torch step for every recipe: y and dx empty in the
step's dtype, dW exactly zero (a sum over no tokens, whatever the weights), main_grad left as it
was, no role of a delayed recipe but the weight's moved — what the C++ nn layer does
(tests/nn/test_grouped_nn_empty.cpp) — and the layers keep working when tokens come back."""
import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
import tessera  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])
G, K, N = 4, 64, 128  # N: whole 128-row FP8 blocks per expert (fp8_block)
CUSTOM = tt.CustomRecipe(lambda role: tt.QuantizerConfig(
    "mxfp8" if role.tensor_type != "grad_output" else "nvfp4",
    "e4m3" if role.tensor_type != "grad_output" else "e2m1"), name="mx_nvfp4")
RECIPES = list(tt.RECIPES) + ["fp8_delayed:e4m3", CUSTOM]
IDS = [r if isinstance(r, str) else "custom" for r in RECIPES]


def module_step(layer, x, offs, *args):
    """y and dx of a sum-of-squares step through `layer` on fresh leaves of x."""
    x = x.detach().requires_grad_()
    y = layer(x, offs, *args)
    y.float().square().sum().backward()
    return y.detach(), x.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_linear_with_no_tokens(device, recipe, dtype):
    delayed = isinstance(recipe, str) and recipe.startswith("fp8_delayed")
    state = tt.DelayedScaling().initial_state(G, device) if delayed else None
    before = None if state is None else tuple(t.clone() for t in state)
    x = torch.randn(0, K, dtype=dtype, device=device, requires_grad=True)
    w = torch.randn(G, N, K, dtype=torch.bfloat16, device=device, requires_grad=True)
    offs = torch.zeros(G, dtype=torch.int32, device=device)
    y = tt.grouped_linear(x, w, offs, recipe, delayed_state=state, name="fc1")
    y.backward(torch.randn(0, N, dtype=y.dtype, device=device))
    assert y.shape == (0, N) and y.device == x.device
    assert x.grad.shape == (0, K) and x.grad.dtype == dtype
    assert w.grad.dtype == w.dtype and w.grad.shape == w.shape
    assert torch.count_nonzero(w.grad) == 0
    if delayed:  # x and dy quantized nothing; the weight's role took its amax
        scale, history = state
        assert torch.equal(history[0], before[1][0]) and torch.equal(history[2], before[1][2])
        assert torch.equal(scale[0], before[0][0]) and torch.equal(scale[2], before[0][2])
        # each expert's amax, rolled to the last slot of its own history
        assert torch.equal(history[1][-1], w.detach().abs().amax(dim=(1, 2)).float())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise", "mxfp8"])
def test_main_grad_is_left_unchanged(device, recipe):
    w = torch.randn(G, N, K, dtype=torch.float32, device=device, requires_grad=True)
    main_grad = torch.randn(G, N, K, dtype=torch.float32, device=device)
    kept = main_grad.clone()
    x = torch.randn(0, K, dtype=torch.bfloat16, device=device, requires_grad=True)
    offs = torch.zeros(G, dtype=torch.int32, device=device)
    y = tt.grouped_linear(x, w, offs, recipe, main_grad=main_grad)
    y.backward(torch.randn(0, N, dtype=y.dtype, device=device))
    assert w.grad is None and torch.equal(main_grad, kept) and x.grad.shape == (0, K)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_grouped_mlp_with_no_tokens_then_tokens(device, recipe):
    torch.manual_seed(0)
    hidden, ffn = 128, 64  # fp8_block's CUDA dgrad: out_features % 128 == 0 (2·ffn, hidden)
    mlp = tt.GroupedMLP(G, hidden, ffn, recipe=recipe, bias=True, device=device)
    fresh = tt.GroupedMLP(G, hidden, ffn, recipe=recipe, bias=True, device=device)
    fresh.load_state_dict(mlp.state_dict())
    empty = torch.randn(0, hidden, dtype=torch.bfloat16, device=device)
    y, dx = module_step(mlp, empty, torch.zeros(G, dtype=torch.int32, device=device),
                        torch.rand(0, device=device))
    assert y.shape == (0, hidden) and dx.shape == (0, hidden)
    for name, p in mlp.named_parameters():
        assert p.grad is not None and torch.count_nonzero(p.grad) == 0, name
    # tokens again (16 per group): the same as a layer that never saw the empty batch
    mlp.zero_grad(set_to_none=True)
    x = torch.randn(4 * 16, hidden, dtype=torch.bfloat16, device=device)
    offs = torch.arange(1, G + 1, dtype=torch.int32, device=device) * 16
    probs = torch.rand(4 * 16, device=device)
    if isinstance(recipe, str) and recipe.startswith("fp8_delayed"):
        return  # the weight roles' histories differ by the empty step's weight amax: not equal
    got, want = [], []
    for layer, out in ((mlp, got), (fresh, want)):
        tt.set_rng_offset(7)  # NVFP4 gradients: the same stochastic-rounding draws for both
        out.extend(module_step(layer, x, offs, probs))
    for what, g, r in zip(("y", "dx"), got, want):
        assert torch.equal(g, r), what
    for (name, p), q in zip(mlp.named_parameters(), fresh.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_no_tokens_under_torch_compile():
    lin = tt.GroupedLinear(G, K, N, recipe="fp8_rowwise")
    x = torch.randn(0, K, dtype=torch.bfloat16)
    offs = torch.zeros(G, dtype=torch.int32)
    eager = module_step(lin, x, offs)
    grad = lin.weight.grad.clone()
    lin.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    compiled = module_step(torch.compile(lin, fullgraph=True, backend="aot_eager"), x, offs)
    assert compiled[0].shape == eager[0].shape == (0, N) and compiled[1].shape == (0, K)
    assert torch.count_nonzero(grad) == 0 and torch.equal(lin.weight.grad, grad)
