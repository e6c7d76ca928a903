#!/usr/bin/env bash
# Downloads the Debian packages the GPU machine lacks into .gpu-deps/debs (git-ignored through
# .git/info/exclude); tools/gpu/check.sh unpacks them there. Run once on this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx "/.gpu-deps/" .git/info/exclude 2>/dev/null || echo "/.gpu-deps/" >> .git/info/exclude
mkdir -p .gpu-deps/debs
cd .gpu-deps/debs
apt-get download libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian libopenblas-dev \
  libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 libdnnl-dev libdnnl2
# py-spy (a static sampling profiler, Python and native frames) for tools/gpu/host_spy.sh.
cd ..
mkdir -p wheels
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  -d wheels py-spy || echo "fetch_deps: py-spy not downloaded (host_spy.sh will say so)"
