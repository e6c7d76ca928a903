#!/usr/bin/env bash
# Installs what building tessera needs on a fresh Debian machine: system packages with apt-get,
# Python packages with pip into the repository's own virtual environment .venv/ (git-ignored;
# never the system Python). Idempotent: what is present is not installed again.
#
# Usage: scripts/install_deps.sh [demo|test]   (default test)
#   demo: what `tessera demo` needs (scripts/demo.sh): compilers, OpenBLAS, oneDNN, CMake.
#   test: everything (scripts/test.sh): also GTest, Google Benchmark, pkg-config, Python headers,
#         nanobind, scikit-build-core, NumPy, ml_dtypes, pytest, PyTorch.
# Activate .venv afterwards with `. scripts/venv.sh` (in a script) or `. .venv/bin/activate`.
# On Python 3.11 the pip installs are constrained to the versions CI last passed with
# (scripts/constraints-cp311.txt); TESSERA_UNPINNED=1 lifts that.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-test}"
case "$mode" in
  demo|test) ;;
  *) echo "usage: scripts/install_deps.sh [demo|test]" >&2; exit 2 ;;
esac

# libdnnl-dev: oneDNN, the CPU backend's native BF16 GEMM (docs/gemm.md); without it BF16 runs
# the FP32 path.
apt_pkgs=(g++ ninja-build libopenblas-dev libdnnl-dev)
if [ "$mode" = test ]; then
  # make: the default CMake generator of docs/quickstart.md's commands (tests/docs runs them).
  apt_pkgs+=(make pkg-config libgtest-dev libgmock-dev libbenchmark-dev)
fi
# The venv's interpreter is the python3 on PATH. Debian's (sys.base_prefix /usr) keeps venv and
# ensurepip in python3-venv and Python.h (the extension's build) in python3-dev.
if ! command -v python3 >/dev/null; then
  apt_pkgs+=(python3 python3-venv)
  [ "$mode" = test ] && apt_pkgs+=(python3-dev)
elif [ "$(python3 -c 'import sys; print(sys.base_prefix)')" = /usr ]; then
  apt_pkgs+=(python3-venv)
  [ "$mode" = test ] && apt_pkgs+=(python3-dev)
fi
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A venv without a working pip (python3 -m venv failed half-way) is made again.
fresh=0
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  echo "install_deps: python3 -m venv .venv ($(command -v python3), $(python3 --version))"
  rm -rf .venv
  python3 -m venv .venv
  fresh=1
fi
# The versions CI last passed with (scripts/constraints-cp311.txt says why), where they were
# recorded for this Python; TESSERA_UNPINNED=1 installs from the requirements' ranges alone.
pins=()
tag="$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
if [ "${TESSERA_UNPINNED:-0}" != 1 ] && [ -f "scripts/constraints-$tag.txt" ]; then
  pins=(-c "scripts/constraints-$tag.txt")
fi
if [ "$fresh" = 1 ]; then
  # A current pip: Debian 12's (23.0) shows no PEP 639 license in `pip show`.
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip "${pins[@]}"
fi
# Three tries: a download cut off mid-wheel (PyTorch's CUDA wheels are 2.5 GB) is the network's
# failure, not the requirements'; a real error fails all three and stops the script.
for try in 1 2 3; do
  .venv/bin/python -m pip install -q --disable-pip-version-check \
    -r "scripts/requirements-$mode.txt" "${pins[@]}" &&
    break
  [ "$try" = 3 ] && { echo "install_deps: pip install failed three times" >&2; exit 1; }
  echo "install_deps: pip install failed (try $try of 3); trying again" >&2
done
