#!/usr/bin/env bash
# Installs what building and testing tessera needs on a fresh Debian machine (apt-get + pip).
# Idempotent: packages already present are not reinstalled.
set -euo pipefail

# libdnnl-dev: oneDNN, the CPU backend's native BF16 GEMM (docs/gemm.md); without it BF16 runs
# the FP32 path.
apt_pkgs=(g++ ninja-build pkg-config libopenblas-dev libdnnl-dev libgtest-dev libgmock-dev
          libbenchmark-dev)
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

# CMake >= 3.28 (the CUDA C++20 dialect of nvcc 13 is unknown to Debian's 3.25), Python tooling.
python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/requirements-dev.txt"
hash -r
