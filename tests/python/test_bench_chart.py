"""python -m tessera.bench chart: which rows become bars (cpu and train JSON), and the chart file
itself (drawn with matplotlib: every bar's label and value in the SVG)."""
import json
import os
import subprocess
import sys

import pytest

from tessera.bench.chart import speedups

CPU_ROWS = [
    {"shape": "8x512x1024x1024", "imbalanced": False, "op": "fwd", "x_torch": 1.5},
    {"shape": "8x512x1024x1024", "imbalanced": True, "op": "step", "x_torch": 0.75},
]
TRAIN_ROWS = [
    {"suite": "linear", "shape": "qwen3-fc1", "imbalanced": False, "impl": "torch bf16",
     "ms": 1.4, "x_torch_bf16": 1.0},
    {"suite": "linear", "shape": "qwen3-fc1", "imbalanced": False, "impl": "tessera fp8 cached-W",
     "ms": 1.7, "x_torch_bf16": 0.82},
    {"suite": "linear", "shape": "qwen3-fc1", "imbalanced": True, "impl": "tessera bf16",
     "ms": 1.5, "x_torch_bf16": 0.9},
    {"suite": "linear", "shape": "dsv3-fc1", "imbalanced": False, "impl": "tessera nvfp4",
     "error": "UnsupportedError: ..."},
]


def test_cpu_rows_become_one_bar_each():
    peer, bars = speedups(CPU_ROWS)
    assert peer.startswith("torch._grouped_mm")
    assert bars == [("8x512x1024x1024 fwd bal", 1.5), ("8x512x1024x1024 step imb", 0.75)]


def test_train_rows_keep_tessera_rows_with_a_time():
    peer, bars = speedups(TRAIN_ROWS)
    assert peer == "torch BF16 autograd"
    assert bars == [("qwen3-fc1 bal fp8 cached-W", 0.82), ("qwen3-fc1 imb bf16", 0.9)]


def test_the_command_draws_every_bar(tmp_path):
    pytest.importorskip("matplotlib")
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(TRAIN_ROWS))
    out = tmp_path / "chart.svg"
    r = subprocess.run([sys.executable, "-m", "tessera.bench", "chart", str(rows), str(out),
                        "--title", "a test run"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert "2 bars" in r.stdout
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for text in ("qwen3-fc1 bal fp8 cached-W", "qwen3-fc1 imb bf16", "0.82", "0.90", "a test run"):
        assert text in svg, text


def test_rows_without_speedups_are_refused(tmp_path):
    pytest.importorskip("matplotlib")
    from tessera.bench.chart import draw
    with pytest.raises(ValueError, match="no speed-up"):
        draw([TRAIN_ROWS[0]], str(tmp_path / "x.svg"))
