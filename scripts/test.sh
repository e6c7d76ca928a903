#!/usr/bin/env bash
# Every test on a fresh machine: install, build (warnings as errors), C++ tests, the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer, the installed-package consumer, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
PY_CMAKE_BIN="$(python3 -c 'import cmake, os; print(os.path.join(os.path.dirname(cmake.__file__), "data", "bin"))' 2>/dev/null || true)"
[ -x "$PY_CMAKE_BIN/cmake" ] && export PATH="$PY_CMAKE_BIN:$PATH"
jobs="$(nproc)"

echo "== build (warnings are errors)"
bash scripts/build.sh -DTESSERA_WERROR=ON >/dev/null
echo "== C++ tests"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== C++ tests under ASan + UBSan"
cmake -S . -B build-asan -G Ninja -DTESSERA_SANITIZE=ON -DTESSERA_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_BUILD_BENCH=OFF -DTESSERA_BUILD_TOOLS=OFF >/dev/null
cmake --build build-asan -j "$jobs" >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

echo "== installed package: find_package(tessera) and pkg-config from a separate project"
rm -rf build/install build/consumer
cmake --install build --prefix build/install >/dev/null
cmake -S tests/packaging/consumer -B build/consumer -G Ninja \
  -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/consumer >/dev/null
build/consumer/consumer
PKG_CONFIG_PATH="$PWD/build/install/lib/pkgconfig" pkg-config --cflags --libs tessera >/dev/null

echo "== Python tests"
TESSERA_BUILD_DIR="$PWD/build" python3 -m pytest -q tests/python
