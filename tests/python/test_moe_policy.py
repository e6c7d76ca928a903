"""tessera.torch's MoE modules keep no policy of their own: each recipe's dispatch payload mode
and token alignment are the C++ recipe table's (tessera.recipe_table), and the permute's payload
modes are exactly the scaling modes the C++ permute fuses. CPU only; skips without torch."""
import pytest

torch = pytest.importorskip("torch")

import tessera  # noqa: E402
from tessera import _tessera as C  # noqa: E402

if not hasattr(C, "_moe_routing_into"):
    pytest.skip("expert-parallel routing ops not in this build", allow_module_level=True)

import tessera.torch as tt  # noqa: E402
from tessera.torch import moe, moe_ops  # noqa: E402
from tessera.torch.moe_reference import ReferenceGroupedMLP  # noqa: E402

# The dispatch payload rule (moe_dist._recipe_dispatch_table): a recipe whose activation scaling
# mode the permute fuses sends it; every other one sends the activation dtype.
FUSED = ("rowwise", "block1x128", "mxfp8")


@pytest.mark.parametrize("row", tessera.recipe_table, ids=lambda r: r["name"])
def test_dispatch_mode_and_alignment_are_the_recipe_tables(row):
    mode, align = moe.recipe_dispatch_mode(row["name"])
    assert align == row["token_alignment"]
    assert mode == (row["activation_mode"] if row["activation_mode"] in FUSED else "none")
    layer = tt.MoELayer(16, 8, 4, 2, recipe=row["name"],
                        experts=ReferenceGroupedMLP(4, 16, 8))
    assert (layer.mode, layer.align) == (mode, align)


def test_recipe_texts_name_a_table_recipe():
    table = {r["name"]: r for r in tessera.recipe_table}
    for text, name in [("fp8_block:e4m3", "fp8_block"), ("fp8_current:hybrid", "fp8_current"),
                       ("fp8_delayed;amax_history_len=16;margin=0", "fp8_delayed"),
                       ("fp8_delayed:e4m3;amax_history_len=16", "fp8_delayed")]:
        assert moe.recipe_dispatch_mode(text)[1] == table[name]["token_alignment"], text
    for bad in ("fp9", "custom:mine;input=rowwise/e4m3", "", "mxfp8x"):
        with pytest.raises(ValueError, match=r"recipe: .* is not one of \[") as e:
            moe.recipe_dispatch_mode(bad)
        assert all(name in str(e.value) for name in table), str(e.value)


@pytest.mark.parametrize("row", C.scaling_mode_table, ids=lambda r: r["name"])
def test_quant_modes_are_the_modes_the_cpp_permute_fuses(row):
    """QUANT_MODES mirrors the C++ switch: every mode of it runs, every other mode is refused."""
    mode, rows, hidden = row["name"], 8, 256
    x = torch.randn(4, hidden).bfloat16()
    row_pair = torch.arange(rows, dtype=torch.int64)
    data = torch.empty((rows, hidden), dtype=torch.uint8)
    sdtype = torch.float32 if row["scale_dtype"] == "float32" else torch.uint8
    sinv = torch.empty(tt.scale_shape(mode, rows, hidden), dtype=sdtype)
    element = "e2m1" if row["fp4"] else "e4m3"

    def run():
        C._moe_permute_quantize_into(x, row_pair, 2, mode, element, False, data, sinv, 0)

    if mode in moe_ops.QUANT_MODES:
        run()
    else:
        with pytest.raises(C.UnsupportedError, match="is not fused into permute"):
            run()
    assert moe_ops.QUANT_MODES[0] == "none" and set(moe_ops.QUANT_MODES[1:]) == set(FUSED)
