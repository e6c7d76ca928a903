"""Runs every ```python block of docs/*.md as a script (a file of its own, so that programs that
start processes, `torch.multiprocessing.spawn`, work as they would pasted into one): the pages'
examples work as pasted.
A block marked ```python excerpt (a piece of a larger program) is not run; blocks that import
torch are skipped when PyTorch is missing. (The C and C++ blocks: tests/docs/run_doc_blocks.py.)"""
import glob
import os
import re
import subprocess
import sys

import pytest

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
BLOCKS = [(os.path.basename(page), code)
          for page in sorted(glob.glob(os.path.join(DOCS, "*.md")))
          for code in re.findall(r"^```python\n(.*?)^```", open(page).read(), re.S | re.M)]


def test_the_quickstart_has_python_blocks():
    assert sum(page == "quickstart.md" for page, _ in BLOCKS) >= 2


def test_moe_has_a_multi_process_example():
    assert any(page == "moe.md" and "mp.spawn" in code and '"gloo"' in code
               for page, code in BLOCKS)


@pytest.mark.parametrize("page,code", BLOCKS,
                         ids=[f"{page}-{i}" for i, (page, _) in enumerate(BLOCKS)])
def test_block_runs(page, code, tmp_path):
    if "import torch" in code:
        pytest.importorskip("torch")
    script = tmp_path / "block.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), f"a {page} block prints its results"
