# Sourced by the device-side scripts (tools/gpu/check.sh, tests/gemm_cuda/gpu_round.sh): unpacks
# the build dependencies the device image lacks (GoogleTest, Google Benchmark, OpenBLAS, oneDNN; .debs
# carried in .gpu-deps, fetched here by tools/gpu/fetch_deps.sh) into /tmp/gpu-deps once, and sets
# P (their prefix), LIBDIR, LD_LIBRARY_PATH, PATH (nvcc) and GPU_CMAKE_FLAGS. Needs ROOT set by the caller.
P=/tmp/gpu-deps/usr
DEPS="${TESSERA_GPU_DEPS:-$ROOT/.gpu-deps}"
if [ -d "$DEPS/debs" ] && [ ! -d "$P" ]; then
  mkdir -p /tmp/gpu-deps
  for f in "$DEPS"/debs/*.deb; do dpkg -x "$f" /tmp/gpu-deps; done
fi
LIBDIR="$P/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$LIBDIR:$LIBDIR/openblas-pthread:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:$PATH"
# The configure flags every device build shares (sm_90a Release, the carried deps), for
# tools/gpu/check.sh, tools/gpu/gemm_ab.sh and tests/gemm_cuda/gpu_round.sh.
GPU_CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DTESSERA_CUDA=ON
                 -DCMAKE_PREFIX_PATH="$P" -DBLAS_LIBRARIES="$LIBDIR/openblas-pthread/libopenblas.so"
                 -DTESSERA_CBLAS_INCLUDE_DIR="$P/include/x86_64-linux-gnu")
