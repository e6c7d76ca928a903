// Bench-only C entry (loaded by grouped_gemm_bench.py through ctypes): runs tessera's sm90 grouped
// GEMM on raw device pointers owned by PyTorch, on the given stream, with torch's conventions:
// int32 cumulative END offsets, A (T, K) tokens, B (G, N, K) K-major (M-grouped), or the
// transposed operands (M, T) and (N, T) of wgrad (K-grouped). Never throws; returns 0 or a
// nonzero status with the message in tessera_bench_last_error().
#include <cstdint>
#include <exception>
#include <string>

#include "gemm/cuda/grouped_gemm_sm90.h"
#include "gemm/cuda/heuristics/grouped_gemm_config.h"
#include "tessera/core/status.h"

namespace {
thread_local std::string g_last_error;
}

extern "C" const char* tessera_bench_last_error() { return g_last_error.c_str(); }

// elem: 0 BF16, 1 FP8 E4M3 with rowwise scales sa[g*sa_gs + row], sb[g*sb_gs + col] (row =
// token row for M-grouped, output row for K-grouped).
// out: 0 BF16, 2 FP32. block_n/stages/num_sms: 0 = heuristic. epilogue: 0 heuristic,
// 1 register stores, 2 TMA stores (where they apply). schedule: 0 heuristic, 1 cooperative
// (block_n 256), 2 ping-pong (block_n 128); block_n alone picks the matching schedule.
// raster_band: -1 heuristic, else Sm90Config::raster_band (0 = m blocks fastest, b = bands of b).
// cluster: 0 heuristic, else Sm90Config::cluster (1, or 2 CTAs multicasting shared operands).
extern "C" int tessera_bench_grouped_gemm(int k_grouped, int elem, int groups,
                                          const int32_t* end_offsets, int64_t capacity, int64_t m,
                                          int64_t n, int64_t k, const void* a, const void* b,
                                          void* d, int out, float beta, const float* sa,
                                          const float* sb, int64_t sa_gs, int64_t sb_gs,
                                          void* workspace,
                                          int64_t workspace_bytes, void* stream, int block_n,
                                          int stages, int num_sms, int epilogue, int schedule,
                                          int raster_band, int cluster) {
  using namespace tessera::gemm_cuda;
  try {
    Sm90GroupedGemm g;
    g.elem = elem ? ElemKind::kE4M3 : ElemKind::kBF16;
    auto& p = g.params;
    p.k_grouped = k_grouped;
    p.num_groups = groups;
    p.offsets = end_offsets;
    p.offsets_int64 = 0;
    p.offsets_start = 0;
    p.capacity = capacity;
    p.m = m;
    p.n = n;
    p.k = k;
    p.d = d;
    p.out_type = out == 2 ? tessera::gemm_sm90::OutType::kFP32 : tessera::gemm_sm90::OutType::kBF16;
    p.ldd = n;
    p.beta = beta;
    if (k_grouped) {
      p.d_group_stride = m * n;
      g.a = {a, m, capacity, capacity};
      g.b = {b, n, capacity, capacity};
    } else {
      p.b_group_rows = n;
      g.a = {a, capacity, k, k};
      g.b = {b, groups * n, k, k};
    }
    if (sa && sb) {
      p.scale_a = sa;
      p.scale_b = sb;
      p.sa_rs = 1;
      p.sb_rs = 1;
      p.sa_gs = sa_gs;
      p.sb_gs = sb_gs;
    }
    g.config = select_sm90_config(g, 0);
    if (block_n) {  // 128: the ping-pong kernel, 256: the cooperative one
      g.config.block_n = block_n;
      g.config.pingpong = block_n == 128;
    }
    if (stages) g.config.stages = stages;
    if (num_sms) g.config.num_sms = num_sms;
    if (epilogue) g.config.tma_store = epilogue == 2;
    if (schedule) {
      g.config.pingpong = schedule == 2;
      g.config.block_n = schedule == 2 ? 128 : 256;
    }
    if (raster_band >= 0) g.config.raster_band = raster_band;
    if (cluster > 0) g.config.cluster = cluster;
    if (workspace_bytes < sm90_workspace_bytes(g)) {
      g_last_error = "workspace too small";
      return static_cast<int>(tessera::Status::kBufferTooSmall);
    }
    launch_grouped_gemm_sm90(g, workspace, workspace_bytes, stream);
    return 0;
  } catch (const tessera::Error& e) {
    g_last_error = e.what();
    return static_cast<int>(e.status());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return static_cast<int>(tessera::Status::kInternal);
  }
}

