"""The developer tools' pure-Python parts: tools/sass/region_counts.py's source marking (the
nvcc / cuobjdump run is not exercised here)."""
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
