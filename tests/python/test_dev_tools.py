"""The developer tools' pure-Python parts: tools/sass/region_counts.py's source marking (the
nvcc / cuobjdump run is not exercised here) and tools/step_bytes.py's byte model."""
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "sass"))
import region_counts  # noqa: E402

sys.path.pop(0)

SRC = """
__device__ void helper(int x);  // a declaration: left alone
template <int kA>
__device__ __forceinline__ void helper(int x) {
  if (x < 0) return;
  for (int i = 0; i < kA; ++i) { use(i); }
}
__device__ void caller() { helper<2>(1); }
"""


def test_mark_brackets_each_definition_and_every_return():
    out = region_counts.mark(SRC, "helper", "7000")
    begin = 'asm volatile("nanosleep.u32 %0;" :: "n"(7000));'
    end = 'asm volatile("nanosleep.u32 %0;" :: "n"((7000) + 500));'
    assert out.count(begin) == 1 and out.count(end) == 2, out
    # the early return keeps its condition: `if (...) { end; return; }`
    assert "if (x < 0) { " + end + " return; }" in out
    # the declaration and the call are untouched; the end marker closes the body
    assert "__device__ void helper(int x);  // a declaration" in out
    assert out.index(end, out.index("use(i)")) < out.index("__device__ void caller")
    assert "void caller() { helper<2>(1); }" in out


def test_mark_refuses_a_missing_function():
    with pytest.raises(SystemExit, match="no definition of nowhere"):
        region_counts.mark(SRC, "nowhere", "1")


def test_step_bytes_optim_floors_match_the_byte_count_by_hand():
    """tools/step_bytes.py --optim on qwen3-fc2 (128 experts x 256 tokens, 768 -> 2048): the
    torch and 'update in the wgrad' floors worked out here from the bytes its docstring lists."""
    import subprocess
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "step_bytes.py"), "--optim",
                          "--shapes", "qwen3-fc2"], capture_output=True, text=True, check=True)
    row = [c.strip() for c in out.stdout.strip().splitlines()[-1].strip("|").split("|")]
    t, k, n, w = 128 * 256, 768, 2048, 128 * 2048 * 768
    bw, bf16, fp8 = 4.3e12, 790e12, 1446e12
    flops = 2 * t * k * n

    def floor(byte_counts, peak):  # µs: each kernel max(bytes / bw, FLOPs / peak)
        return sum(max(b / bw, f / peak) for b, f in byte_counts) * 1e6

    torch_us = floor([(2 * t * k + 2 * w + 2 * t * n, flops),
                      (2 * t * n + 2 * w + 2 * t * k, flops),
                      (2 * t * k + 2 * t * n + 2 * w, flops), (14 * w, 0)], bf16)
    # FP8 GEMMs (1-byte x, dy, W; 16-bit outputs), wgrad without its dW store, x and dy made in
    # two reads (6 bytes per element), the update with both copies: 14 + 2 - 2 bytes per weight
    fused_us = floor([(t * k + w + 2 * t * n, flops), (t * n + w + 2 * t * k, flops),
                      (t * k + t * n, flops), (6 * t * k, 0), (6 * t * n, 0), (14 * w, 0)], fp8)
    assert row[0] == "qwen3-fc2" and row[1] == f"{w / 1e6:.0f}"
    assert row[2] == f"{torch_us:.0f}"
    assert row[-2:] == [f"{fused_us:.0f}", f"{torch_us / fused_us:.2f}"]
