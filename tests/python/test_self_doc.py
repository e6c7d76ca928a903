"""tessera documents itself (issue 32, item 6): help() on the public ops shows their own
signature and docstring, the public classes have docstrings, and docs/python.md shows the
signatures the code has."""
import inspect
import os
import pydoc
import re

import pytest

torch = pytest.importorskip("torch")
tt = pytest.importorskip("tessera.torch")

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs")


@pytest.mark.parametrize("name", ["grouped_mm", "scaled_grouped_mm"])
def test_help_shows_the_op_itself(name):
    fn = getattr(tt, name)
    text = pydoc.render_doc(fn, renderer=pydoc.plaintext)
    assert "CustomOpDef" not in text, text[:300]
    assert f"{name}(mat_a: torch.Tensor, mat_b: torch.Tensor" in text, text[:300]
    assert f"torch._{name}" in text  # its own docstring


def test_public_classes_and_forwards_have_docstrings():
    for cls in (tt.MoELayer, tt.GroupedLinear, tt.GroupedMLP):
        assert cls.__doc__ and len(cls.__doc__) > 200, cls
        assert cls.forward.__doc__ != torch.nn.Module.forward.__doc__, cls
        assert cls.forward.__doc__, cls
    assert "ep_group" in tt.MoELayer.__doc__ and "capacity_factor" in tt.MoELayer.__doc__


def documented_signature(page, name):
    """The argument names of `name(...)` as docs/<page> writes them first (`name(a, b=None)`)."""
    text = open(os.path.join(DOCS, page)).read()
    m = re.search(rf"`{name}\(([^`]*)\)`", text, re.S)
    assert m, f"{page} shows no `{name}(...)`"
    return [a.split("=")[0].strip() for a in m.group(1).replace("\n", " ").split(",")]


@pytest.mark.parametrize("name", ["grouped_mm", "scaled_grouped_mm"])
def test_python_md_signatures_are_the_code(name):
    assert documented_signature("python.md", name) == list(
        inspect.signature(getattr(tt, name)).parameters)


def test_the_extension_ships_fresh_type_stubs():
    # nanobind's stubgen runs on the built module (python/CMakeLists.txt): _tessera.pyi beside
    # it, py.typed (PEP 561) in the package, and every public function of the module in the stub.
    import tessera
    from tessera import _tessera
    folder = os.path.dirname(_tessera.__file__)
    stub = os.path.join(folder, "_tessera.pyi")
    if not os.path.exists(stub):
        pytest.skip("a build without stubs (sanitized)")
    assert os.path.exists(os.path.join(os.path.dirname(tessera.__file__), "py.typed"))
    text = open(stub).read()
    public = [n for n in dir(_tessera) if not n.startswith("_") and callable(getattr(_tessera, n))
              and not isinstance(getattr(_tessera, n), type)]
    assert public
    for name in public:
        assert re.search(rf"^def {name}\(", text, re.M), name
    assert "def encode(x: " in text and "-> " in text
