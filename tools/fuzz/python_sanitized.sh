#!/usr/bin/env bash
# Builds tessera._tessera under AddressSanitizer + UndefinedBehaviorSanitizer (CPU only: the
# -DTESSERA_SANITIZE=ON configuration of the C++ ASan stage of scripts/test.sh, plus the Python
# extension), then, in the uninstrumented interpreter with the sanitizer runtimes preloaded, runs
# the Python entry-point fuzzer (tests/python/fuzz_entry_points.py) and tests/python/
# test_hardening.py (the regression tests of the fuzzers' findings).
#
# Usage: tools/fuzz/python_sanitized.sh [calls (default 20000)] [seed (default 1)]
# Build directory: $BUILD_DIR (default build-pyasan; scripts/test.sh passes its build-asan).
# Exit status 0 only when the fuzzer reports that it made at least `calls` calls under ASan with
# 0 findings, test_hardening.py passes, and neither log holds a sanitizer report; a report ends
# the process at once (halt on error).
set -euo pipefail
cd "$(dirname "$0")/../.."
calls="${1:-20000}"
seed="${2:-1}"
build="${BUILD_DIR:-build-pyasan}"
PY_CMAKE_BIN="$(python3 -c 'import cmake, os; print(os.path.join(os.path.dirname(cmake.__file__), "data", "bin"))' 2>/dev/null || true)"
[ -x "$PY_CMAKE_BIN/cmake" ] && export PATH="$PY_CMAKE_BIN:$PATH"

cmake -S . -B "$build" -G Ninja -DTESSERA_SANITIZE=ON -DTESSERA_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_BUILD_PYTHON=ON -DTESSERA_BUILD_BENCH=OFF \
  -DTESSERA_BUILD_TOOLS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target _tessera tessera_python_files >/dev/null
build="$(cd "$build" && pwd)"
ext="$(ls "$build"/python/tessera/_tessera*.so)"
# ldd's whole output first: `ldd | grep -q` under pipefail fails at random when grep exits at the
# first match while ldd still writes (SIGPIPE, status 141).
deps="$(ldd "$ext" 2>&1)" || { echo "python_sanitized: ldd $ext failed: $deps"; exit 1; }
grep -q libasan <<<"$deps" || { echo "python_sanitized: $ext is not ASan-instrumented"; exit 1; }

# Runs "$@" with the sanitized package. The extension links libasan / libubsan dynamically (no
# -static-libstdc++ under TESSERA_SANITIZE); ASan's runtime must come first in the process, hence
# LD_PRELOAD. ASAN_OPTIONS: CPython leaks by design (detect_leaks=0); the fuzzer cannot cap its
# address space under ASan (the shadow memory reserves terabytes), so single allocations past
# 8 GiB fail instead: malloc / calloc / aligned_alloc return null (NumPy's MemoryError, tessera's
# kOutOfMemory; ASan prints "WARNING: ... failed to allocate", which is not a finding). UBSan:
# the build has -fno-sanitize-recover=all; halt_on_error says so again.
sanitized() {
  LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
    ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:max_allocation_size_mb=8192:halt_on_error=1:exitcode=86" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87" \
    CUDA_VISIBLE_DEVICES="" PYTHONPATH="$build/python" TESSERA_BUILD_DIR="$build" "$@"
}

# Fails (exit 1) when log $1 holds a sanitizer report, printing it.
no_report() {
  if grep -qE 'ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer' "$1"; then
    echo "python_sanitized: FAILED: a sanitizer report in $1:"
    grep -m1 -A40 -E 'ERROR: AddressSanitizer|runtime error:' "$1"
    exit 1
  fi
}

log="$build/fuzz_entry_points.log"
echo "python_sanitized: fuzz_entry_points.py, $calls calls, seed $seed, log $log"
rc=0
sanitized python3 -W ignore tests/python/fuzz_entry_points.py "$calls" "$seed" >"$log" 2>&1 || rc=$?
tail -n 2 "$log"
no_report "$log"
summary="$(grep '^fuzz_entry_points: ' "$log" || true)"
made="$(sed -n 's/^fuzz_entry_points: \([0-9]*\) calls (seed [0-9]*, under ASan).*/\1/p' <<<"$summary")"
if [ "$rc" -ne 0 ] || [ -z "$made" ] || [ "$made" -lt "$calls" ] || ! grep -q ' 0 findings;' <<<"$summary"; then
  echo "python_sanitized: FAILED: exit $rc, summary: ${summary:-none (a crash?)}"
  tail -n 60 "$log"
  exit 1
fi

# -s: pytest's capture would swallow a report printed just before the sanitizer ends the process.
tlog="$build/test_hardening.log"
echo "python_sanitized: tests/python/test_hardening.py, log $tlog"
rc=0
sanitized python3 -m pytest -q -s -p no:cacheprovider tests/python/test_hardening.py >"$tlog" 2>&1 || rc=$?
tail -n 1 "$tlog"
no_report "$tlog"
[ "$rc" -eq 0 ] || { echo "python_sanitized: FAILED: test_hardening.py (exit $rc)"; tail -n 60 "$tlog"; exit 1; }
echo "python_sanitized: $made calls and test_hardening.py under ASan + UBSan, 0 findings"
