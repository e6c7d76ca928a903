"""docs/api.md is the API reference generated from the docstrings (tools/docs/api_reference.py):
regenerated here in memory, it must equal the committed page (issue 32, item 6)."""
import importlib.util
import os

import pytest

pytest.importorskip("torch")  # tessera.torch is part of the reference
pytest.importorskip("tessera.torch")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def load_generator():
    path = os.path.join(ROOT, "tools", "docs", "api_reference.py")
    spec = importlib.util.spec_from_file_location("api_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_api_md_is_current():
    gen = load_generator()
    committed = open(os.path.join(ROOT, "docs", "api.md")).read()
    assert gen.render() == committed, (
        "docs/api.md is not the docstrings' current reference: run "
        "python3 tools/docs/api_reference.py")


def test_api_md_covers_every_public_name():
    gen = load_generator()
    text = gen.render()
    import importlib as il
    for modname in gen.MODULES:
        mod = il.import_module(modname)
        for name in mod.__all__:
            assert f"`{modname}.{name}`" in text, (modname, name)
    assert " at 0x" not in text
