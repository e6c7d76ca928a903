#!/usr/bin/env bash
# Every test on a fresh machine: install, build (warnings as errors), C++ tests, the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer (with the sanitized Python extension: the
# Python entry-point fuzzer and test_hardening.py), the installed package from C++ (CMake) and
# plain C (gcc + pkg-config), the C and C++ programs of docs/ as written (tests/docs), pytest (the
# tessera.torch tests included: torch is installed), then `pip install .` into a throwaway venv
# (the distribution's name, version and license, tessera.torch's compiled ops against the
# venv's torch).
# Everything Python is .venv's (scripts/install_deps.sh): CMake's Python, pytest's, the fuzzer's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh test
. scripts/venv.sh
py="$VIRTUAL_ENV/bin/python"
jobs="$(nproc)"

echo "== build (warnings are errors)"
bash scripts/build.sh -DTESSERA_WERROR=ON >/dev/null
echo "== C++ tests"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== C++ tests (and the 20k-call C API fuzz loop) under ASan + UBSan"
cmake -S . -B build-asan -G Ninja -DTESSERA_SANITIZE=ON -DTESSERA_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCH=OFF \
  -DTESSERA_BUILD_TOOLS=OFF -DTESSERA_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE="$py" >/dev/null
cmake --build build-asan -j "$jobs" >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure --no-tests=error -j "$jobs"
echo "== the Python entry-point fuzzer (50k calls) and test_hardening.py under ASan + UBSan"
BUILD_DIR=build-asan bash tools/fuzz/python_sanitized.sh 50000 1

echo "== installed package, from a non-default prefix that is then moved (relocatable)"
rm -rf build/pkg-prefix build/pkg-moved build/consumer build/c_consumer
cmake --install build --prefix build/pkg-prefix >/dev/null
mv build/pkg-prefix build/pkg-moved
# C++: find_package(tessera); the consumer sets no C++ standard (tessera::tessera requires 20).
cmake -S tests/packaging/consumer -B build/consumer -G Ninja \
  -DCMAKE_PREFIX_PATH="$PWD/build/pkg-moved" >/dev/null
cmake --build build/consumer >/dev/null
build/consumer/consumer
# C: gcc (no C++ driver) with pkg-config's flags only.
pc_dir="$(dirname "$(find "$PWD/build/pkg-moved" -name tessera.pc -print -quit)")"
gcc -std=c11 -Wall -Wextra -Werror tests/packaging/c_consumer/main.c \
  $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs tessera) -o build/c_consumer
build/c_consumer
[ "$(PKG_CONFIG_PATH="$pc_dir" pkg-config --modversion tessera)" = "$(cat VERSION)" ] ||
  { echo "tessera.pc's version is not VERSION's"; exit 1; }
echo "== the C and C++ code of docs/, compiled and run as written against the installed package"
"$py" tests/docs/run_doc_blocks.py build/pkg-moved

echo "== Python tests"
"$py" -c "import torch" || { echo "torch is not importable: the tessera.torch tests would skip"; exit 1; }
TESSERA_BUILD_DIR="$PWD/build" "$py" -m pytest -q tests/python

echo "== pip install . into a throwaway venv: pip show, tessera --version, tessera.__version__"
# CPU only (TESSERA_CUDA=OFF: the CUDA build is tested above) and in its own build directory,
# so that a later plain `pip install .` does not find this configuration cached (made anew: its
# cache would name the previous run's temporary build environment).
rm -rf build/pip-venv build/pip-build
"$py" -m venv build/pip-venv
build/pip-venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
# torch first: the build, isolated by pip, must find the venv's torch and build tessera.torch's
# compiled ops against it. It is .venv's torch (and its requirements), linked in by a .pth file
# rather than downloaded a second time (tests/packaging/link_dists.py).
"$py" tests/packaging/link_dists.py "$PWD/build/pip-venv/torch-dists" torch
echo "$PWD/build/pip-venv/torch-dists" > "$(build/pip-venv/bin/python -c \
  'import sysconfig; print(sysconfig.get_path("purelib"))')/torch_dists.pth"
build/pip-venv/bin/python -m pip install -q --disable-pip-version-check \
  -C build-dir=build/pip-build -C cmake.define.TESSERA_CUDA=OFF .
version="$(cat VERSION)"
show="$(build/pip-venv/bin/python -m pip show tessera-moe)"
echo "$show" | grep -E '^(Name|Version|License-Expression):'
for want in "Name: tessera-moe" "Version: $version" "License-Expression: Apache-2.0"; do
  grep -qx "$want" <<<"$show" || { echo "pip show tessera-moe lacks '$want'"; exit 1; }
done
[ "$(build/pip-venv/bin/tessera --version)" = "tessera $version" ] ||
  { echo "the installed tessera command does not print 'tessera $version'"; exit 1; }
# -I: the installed package (PYTHONPATH ignored).
build/pip-venv/bin/python -I -c "import tessera, sys; sys.exit(tessera.__version__ != '$version')" ||
  { echo "the installed tessera.__version__ is not $version"; exit 1; }
# The installed tessera.torch loads its compiled ops into the venv's torch (no ABI mismatch) and
# runs one training step through the C++ autograd node built for that torch.
build/pip-venv/bin/python -I -c "
import torch, tessera.torch as tt
from tessera.torch import _ext
assert _ext.linear is not None, 'the C++ autograd nodes were not built for this torch'
x = torch.randn(32, 64, dtype=torch.bfloat16, requires_grad=True)
m = tt.GroupedLinear(2, 64, 32, recipe='fp8_rowwise')
y = m(x, torch.tensor([16, 32], dtype=torch.int32))
assert '_LinearFn' not in type(y.grad_fn).__name__, type(y.grad_fn)
y.float().sum().backward()
assert x.grad is not None and m.weight.grad is not None
print('installed tessera.torch: one fp8_rowwise step (C++ node) on torch', torch.__version__)" ||
  { echo "the installed tessera.torch does not run a step"; exit 1; }
echo "test.sh: all tests passed"
