"""Writes docs/api.md, the API reference of tessera's public Python surface, from the code itself:
module by module (tessera, tessera.nn, tessera.torch, tessera.torch.moe), each name of the
module's __all__ in sorted order with its signature and docstring; a class also lists the public
methods and properties it defines itself (not those it inherits, e.g. from torch.nn.Module).

    python3 tools/docs/api_reference.py            # writes docs/api.md
    python3 tools/docs/api_reference.py --check    # exit 1 if docs/api.md is not current

The package is imported from $TESSERA_BUILD_DIR/python (default build/python), as the tests do;
tessera.torch needs PyTorch. tests/python/test_api_reference.py runs render() and compares.
The output is deterministic: no object addresses, names sorted, values shown only for tuples of
strings (the recipe and mode lists), never for build-dependent values such as the version.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "docs", "api.md")
MODULES = ("tessera", "tessera.nn", "tessera.torch", "tessera.torch.moe")
COMMAND = "python3 tools/docs/api_reference.py"

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _clean(text: str) -> str:
    return _ADDRESS.sub("", text)


def _doc(obj) -> str:
    doc = inspect.getdoc(obj) if not isinstance(obj, (str, tuple, list)) else None
    return _clean(doc.strip()) if doc else ""


def _nb_split(doc: str, name: str):
    """A nanobind function's docstring starts with its signature line(s) (one per overload),
    then a blank line, then the text: (signature lines, text)."""
    lines = doc.splitlines()
    sig = []
    while lines and lines[0].startswith(name + "("):
        sig.append(lines.pop(0))
    while lines and not lines[0].strip():
        lines.pop(0)
    return sig, "\n".join(lines).strip()


def _function(name: str, fn):
    """(signature lines, docstring) of a function, a nanobind function or a torch custom op."""
    init_fn = getattr(fn, "_init_fn", None)  # torch.library.custom_op's CustomOpDef
    if init_fn is not None and callable(init_fn):
        fn = init_fn
    if type(fn).__name__ in ("nb_func", "nb_method", "nb_bound_method"):
        # nanobind's signature lines (inspect.signature gives "(*args, **kwargs)" for them on
        # some Python versions, so the page would depend on the interpreter)
        return _nb_split(_doc(fn), name)
    try:
        return [name + _clean(str(inspect.signature(fn)))], _doc(fn)
    except (TypeError, ValueError):
        return _nb_split(_doc(fn), name)


def _class_header(name: str, cls) -> str:
    bases = [b for b in cls.__bases__ if b is not object]
    names = [b.__qualname__ if b.__module__ == "builtins" else f"{b.__module__}.{b.__qualname__}"
             for b in bases]
    return f"class {name}" + (f"({', '.join(names)})" if names else "")


def _fence(text: str) -> list[str]:
    fence = "~~~" if "```" in text else "```"
    return [fence, text, fence]


def _entry(title: str, sig: list[str], doc: str, level: str) -> list[str]:
    out = [f"{level} `{title}`", ""]
    if sig:
        out += _fence("\n".join(sig)) + [""]
    out += (_fence(doc) if doc else ["(no docstring)"]) + [""]
    return out


def _render_class(modname: str, name: str, cls) -> list[str]:
    try:
        sig = [name + _clean(str(inspect.signature(cls)))]
    except (TypeError, ValueError):
        init = cls.__dict__.get("__init__")
        sig = _nb_split(_doc(init), "__init__")[0] if init is not None else []
        sig = [s.replace("__init__(self, ", name + "(").replace("__init__(self)", name + "()")
               for s in sig]
    out = [f"### `{modname}.{name}`", "", *_fence("\n".join([_class_header(name, cls)] + sig)),
           ""]
    doc = _doc(cls)
    out += (_fence(doc) if doc else ["(no docstring)"]) + [""]
    for member in sorted(k for k in cls.__dict__ if not k.startswith("_")):
        raw = cls.__dict__[member]
        if isinstance(raw, (staticmethod, classmethod)):
            raw = raw.__func__
        if isinstance(raw, property) or type(raw).__name__ in ("nb_property", "getset_descriptor"):
            out += _entry(f"{name}.{member}", [f"{member}  (property)"], _doc(raw), "####")
        elif callable(raw):
            sig, text = _function(member, raw)
            out += _entry(f"{name}.{member}", sig, text, "####")
    return out


def _render_value(modname: str, name: str, value) -> list[str]:
    if isinstance(value, (tuple, list, frozenset)) and all(isinstance(v, str) for v in value):
        shown = f"{name} = {value!r}"
    else:
        shown = f"{name}: {type(value).__name__}"
    return [f"### `{modname}.{name}`", "", *_fence(shown), ""]


def render() -> str:
    out = ["# API reference (generated)", "",
           f"Generated from the docstrings by `{COMMAND}`; do not edit by hand "
           "(tests/python/test_api_reference.py fails when this page is not current). "
           "Every public name (the module's `__all__`), sorted, with its signature and "
           "docstring; a class lists the methods and properties it defines itself. "
           "Narrative docs: [python.md](python.md), [torch_training.md](torch_training.md), "
           "[moe.md](moe.md).", ""]
    out += ["Modules: " + ", ".join(f"[`{m}`](#{m.replace('.', '')})" for m in MODULES), ""]
    for modname in MODULES:
        mod = importlib.import_module(modname)
        out += [f"## {modname}", ""]
        doc = _doc(mod)
        if doc:
            out += _fence(doc) + [""]
        for name in sorted(getattr(mod, "__all__", [])):
            obj = getattr(mod, name)
            if inspect.ismodule(obj):
                out += [f"### `{modname}.{name}`", "",
                        f"The module `{obj.__name__}`"
                        + (" (below)." if obj.__name__ in MODULES else "."), ""]
            elif inspect.isclass(obj):
                out += _render_class(modname, name, obj)
            elif callable(obj):
                sig, text = _function(name, obj)
                out += _entry(f"{modname}.{name}", sig, text, "###")
            else:
                out += _render_value(modname, name, obj)
    text = "\n".join(out).rstrip() + "\n"
    return re.sub(r"[ \t]+\n", "\n", text)


def _import_path() -> None:
    build = os.environ.get("TESSERA_BUILD_DIR", os.path.join(ROOT, "build"))
    py = os.path.abspath(os.path.join(build, "python"))
    if os.path.isdir(os.path.join(py, "tessera")) and py not in sys.path:
        sys.path.insert(0, py)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Writes (or checks) docs/api.md from the docstrings.")
    p.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is not current")
    p.add_argument("-o", "--output", default=OUT, help="the file to write (default docs/api.md)")
    args = p.parse_args(argv)
    _import_path()
    text = render()
    if args.check:
        current = open(args.output).read() if os.path.exists(args.output) else ""
        if current != text:
            print(f"{args.output} is not current: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    with open(args.output, "w") as f:
        f.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
