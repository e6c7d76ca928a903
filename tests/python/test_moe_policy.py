"""tessera.torch's MoE modules keep no policy of their own and import one way: each recipe's
dispatch payload mode and token alignment are the C++ recipe table's (tessera.recipe_table), the
permute's payload modes are exactly the scaling modes the C++ permute fuses, and moe_ops imports
neither moe_dist nor the facade moe, and no module imports the facade (no import circle), while
every public import path keeps working in a fresh interpreter.
CPU only; skips without torch."""
import ast
import os
import subprocess
import sys

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
    """QUANT_MODES is the C++ list (moe_permute_modes): every mode of it runs, every other mode is
    refused."""
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


def _package_imports(path: str) -> set:
    """The tessera.torch modules that the file at `path` imports (relative imports, by name)."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module)
            else:
                names.update(a.name for a in node.names)
    return names


def test_moe_modules_import_one_way():
    here = os.path.dirname(tt.__file__)
    graph = {m: _package_imports(os.path.join(here, m + ".py")) & {"moe", "moe_ops", "moe_dist",
                                                                    "moe_layer", "moe_reference"}
             for m in ("moe", "moe_ops", "moe_dist", "moe_layer", "moe_reference")}
    assert graph["moe_ops"] == set(), graph
    assert graph["moe_dist"] == {"moe_ops"}, graph
    assert all("moe" not in deps for m, deps in graph.items()), graph   # the facade is a leaf

    def reaches(a, b, seen=()):
        return any(d == b or (d not in seen and reaches(d, b, seen + (d,))) for d in graph[a])
    assert not any(reaches(m, m) for m in graph), graph


@pytest.mark.parametrize("first", ["tessera.torch.moe_dist", "tessera.torch.moe_ops"])
def test_a_fresh_interpreter_imports_any_moe_module_first(first):
    """Every public import path of the MoE names works after `first` (the package's __init__
    runs before any submodule, so the order proper is test_moe_modules_import_one_way's)."""
    code = f"""
import importlib
first = importlib.import_module({first!r})
from tessera.torch import MoELayer, moe, moe_dist, moe_ops
from tessera.torch.moe import (DispatchState, QUANT_MODES, all_to_all_expert_rows, capacity_for,
                               check_config, combine, dispatch, moe_routing, recipe_dispatch_mode,
                               route)
from tessera.torch.moe_reference import ReferenceGroupedMLP, reference_moe
assert dispatch is moe_dist.dispatch and moe_routing is moe_ops.moe_routing
assert route is moe_ops.route
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr)
