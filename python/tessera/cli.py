"""The `tessera` command installed by `pip install .` (console entry point tessera.cli:main).

It runs the native `tessera` program (tools/cli), which the wheel installs inside the package
as tessera/bin/tessera; `python -m tessera.cli demo ...` does the same. In a CMake build tree
(PYTHONPATH=<build>/python) the program is <build>/tools/tessera.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def program() -> Path:
    """Path of the native tessera program; FileNotFoundError naming where it was looked for."""
    here = Path(__file__).resolve().parent
    candidates = [here / "bin" / "tessera", here.parent.parent / "tools" / "tessera"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError(
        "the tessera program is not installed next to the Python package (looked for "
        + ", ".join(str(c) for c in candidates)
        + "); build with TESSERA_BUILD_TOOLS=ON (pip install . does)")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        exe = program()
    except FileNotFoundError as e:
        print(f"tessera: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(str(exe), [str(exe), *args])  # replaces this process; returns only on failure
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
