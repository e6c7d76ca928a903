"""Runs every ```python block of docs/quickstart.md as a script (the quickstart must work as
pasted). Blocks that import torch are skipped when PyTorch is missing."""
import os
import re
import subprocess
import sys

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "quickstart.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(DOC).read(), re.S)


def test_the_page_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_block_runs(i):
    code = BLOCKS[i]
    if "import torch" in code:
        pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "a quickstart block prints its results"
