"""tessera.torch GroupedLinear / GroupedMLP with FP32 master weights (params_dtype=torch.float32:
weights cast or quantized for compute, the compute copy cached per weight version) and Megatron-
style main-grad accumulation (accumulate_main_grad=True: the wgrad GEMM adds into the FP32
weight.main_grad with beta = 1, weight.grad untouched), against torch FP32/FP64 references over
two micro-batches; eager == torch.compile."""

import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")
import tessera  # noqa: E402
from torch_oracles import grouped_products as reference, ends, sqnr  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tessera.cuda_compiled() else [])
SIZES = [48, 0, 32, 16, 0, 64]  # multiples of 16, empty groups
RECIPES = ["bf16", "fp8_rowwise", "fp8_current", "fp8_delayed"]




def micro_batches(n, t, k, out, device, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(t, k, generator=g).to(torch.bfloat16).to(device),
             torch.randn(t, out, generator=g).to(torch.bfloat16).to(device)) for _ in range(n)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", RECIPES)
def test_fp32_master_weights_step_matches_fp32_reference(device, recipe):
    torch.manual_seed(20)
    g, k, n = len(SIZES), 128, 64
    layer = tt.GroupedLinear(g, k, n, recipe=recipe, device=device, params_dtype=torch.float32)
    assert layer.weight.dtype == torch.float32
    offs = ends(SIZES, device)
    (x0, dy), = micro_batches(1, sum(SIZES), k, n, device, 21)
    floor = 40.0 if recipe == "bf16" else 20.0
    for step in range(2):  # the second step: delayed scaling calibrated
        x = x0.detach().requires_grad_()
        layer.zero_grad(set_to_none=True)
        y = layer(x, offs)
        y.backward(dy)
    want = reference(x0, layer.weight.detach(), dy, SIZES)
    dbs = [sqnr(a, b) for a, b in zip((y.detach(), x.grad, layer.weight.grad), want)]
    print(f"\n[fp32 master {recipe} {device}] SQNR y {dbs[0]:.1f} dx {dbs[1]:.1f} "
          f"dW {dbs[2]:.1f} dB")
    assert min(dbs) >= floor
    assert y.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    assert layer.weight.grad.dtype == torch.float32  # straight out of the wgrad GEMM


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_master_weights_bf16_copy_reused_only_under_the_promise(device):
    torch.manual_seed(22)
    g = len(SIZES)
    layer = tt.GroupedLinear(g, 64, 32, recipe="bf16", device=device,
                             params_dtype=torch.float32)
    offs = ends(SIZES, device)
    x = torch.randn(sum(SIZES), 64, device=device, dtype=torch.bfloat16)
    y1 = layer(x, offs)
    copy = layer.weight_cache.copies  # the bf16 compute copy, as the step lays it out
    assert torch.equal(copy.view(torch.bfloat16).view(g, 32, 64),
                       layer.weight.detach().bfloat16())
    with torch.no_grad():
        y2 = layer(x, offs, is_first_microbatch=False)  # promised unchanged: reused
    assert layer.weight_cache.copies is copy and torch.equal(y1.detach(), y2)
    with torch.no_grad():
        layer.weight.data.mul_(2)  # a write torch does not record (no version bump) ...
        y_default = layer(x, offs)  # ... is seen: without a promise the copy is re-made
    assert layer.weight_cache.copies is not copy
    want = tt.grouped_linear(x, layer.weight.detach().bfloat16(), offs, "bf16")
    assert torch.equal(y_default, want)
    y1.float().square().sum().backward()
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    with torch.no_grad():  # a new version: re-made even under the promise
        y3 = layer(x, offs, is_first_microbatch=False)
    want = tt.grouped_linear(x, layer.weight.detach().bfloat16(), offs, "bf16")
    assert torch.equal(y3, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("params_dtype", [torch.float32, torch.bfloat16])
def test_main_grad_accumulates_two_micro_batches(device, recipe, params_dtype):
    torch.manual_seed(23)
    g, k, n = len(SIZES), 64, 32
    layer = tt.GroupedLinear(g, k, n, recipe=recipe, bias=True, device=device,
                             params_dtype=params_dtype, accumulate_main_grad=True)
    plain = tt.GroupedLinear(g, k, n, recipe=recipe, bias=True, device=device,
                             params_dtype=params_dtype)
    plain.load_state_dict(layer.state_dict())
    main_grad = layer.weight.main_grad
    assert main_grad.dtype == torch.float32 and main_grad.shape == layer.weight.shape
    assert torch.count_nonzero(main_grad) == 0
    main_grad.fill_(0.25)  # accumulation adds to what is there (the caller zeroes it)
    offs = ends(SIZES, device)
    plain_sum = torch.zeros_like(main_grad)
    ref_sum = torch.zeros(main_grad.shape, dtype=torch.float64)
    for x, dy in micro_batches(2, sum(SIZES), k, n, device, 24):
        layer(x, offs).backward(dy)
        plain.zero_grad(set_to_none=True)
        plain(x, offs).backward(dy)
        plain_sum += plain.weight.grad.float()
        ref_sum += reference(x, layer.weight.detach(), dy, SIZES)[2]
    assert layer.weight.grad is None and layer.weight.main_grad is main_grad
    assert layer.bias.grad is not None  # the bias keeps a plain .grad
    acc = main_grad - 0.25
    # the same operands as the layer without main_grad: the sum of its two FP32 wgrads
    # (bf16 params: the plain layer's dW is rounded to bf16, so compare at that level)
    floor_plain = 100.0 if params_dtype == torch.float32 else 45.0
    db_plain, db_ref = sqnr(acc, plain_sum), sqnr(acc, ref_sum)
    print(f"\n[main_grad {recipe} {params_dtype} {device}] SQNR vs plain {db_plain:.1f} "
          f"vs fp64 {db_ref:.1f} dB")
    assert db_plain >= floor_plain
    assert db_ref >= (60.0 if recipe == "bf16" else 20.0)
    # empty groups: nothing added
    assert torch.all(main_grad[1] == 0.25) and torch.all(main_grad[4] == 0.25)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["bf16", "fp8_current"])
def test_main_grad_mlp_torch_compile_matches_eager(device, recipe):
    def run(compiled):
        torch.manual_seed(25)
        mlp = tt.GroupedMLP(len(SIZES), 64, 32, recipe=recipe, device=device,
                            params_dtype=torch.float32, accumulate_main_grad=True)
        fn = torch.compile(mlp, fullgraph=True, backend="aot_eager") if compiled else mlp
        offs = ends(SIZES, device)
        for x, _ in micro_batches(2, sum(SIZES), 64, 64, device, 26):
            x = x.requires_grad_()
            fn(x, offs).float().square().sum().backward()
        assert mlp.fc1.weight.grad is None
        return [x.grad, mlp.fc1.weight.main_grad, mlp.fc2.weight.main_grad]

    torch._dynamo.reset()
    for e, c in zip(run(False), run(True)):
        assert torch.equal(e, c)


def test_params_dtype_arguments():
    lin = tt.GroupedLinear(2, 8, 4, params_dtype=torch.float32)
    assert lin.weight.dtype == torch.float32
    assert tt.GroupedLinear(2, 8, 4, dtype=torch.float32).weight.dtype == torch.float32
    with pytest.raises(ValueError, match="params_dtype"):
        tt.GroupedLinear(2, 8, 4, dtype=torch.float16, params_dtype=torch.float32)
    with pytest.raises(ValueError, match="main_grad"):
        x = torch.randn(4, 8, dtype=torch.bfloat16)
        w = torch.randn(2, 4, 8, dtype=torch.bfloat16)
        tt.grouped_linear(x, w, torch.tensor([2, 4], dtype=torch.int32),
                          main_grad=torch.zeros(2, 4, 8, dtype=torch.bfloat16))


def test_main_grad_missing_under_torch_compile_is_refused_not_skipped():
    """A layer whose weight lost its main_grad (copy.deepcopy does not carry it) and that
    torch.compile traces: a graph cannot give the Parameter the attribute, so the step is
    refused with a message naming weight.main_grad — never a wgrad silently sent to .grad.
    Eager, the layer makes main_grad again."""
    import copy
    lin = tt.GroupedLinear(2, 64, 32, params_dtype=torch.float32, accumulate_main_grad=True)
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    offs = torch.tensor([8, 16], dtype=torch.int32)
    twin = copy.deepcopy(lin)
    assert getattr(twin.weight, "main_grad", None) is None
    torch._dynamo.reset()
    compiled = torch.compile(twin, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception) as info:
        compiled(x, offs)
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("weight.main_grad" in m for m in chain), chain
    assert twin.weight.grad is None
    twin(x, offs).float().sum().backward()  # eager: made again, the wgrad lands there
    assert twin.weight.grad is None and twin.weight.main_grad.abs().sum() > 0
