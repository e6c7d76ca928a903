// Bench-only C entry of the PUBLIC grouped GEMM API (loaded by grouped_gemm_bench.py through
// ctypes when it links): FP8 rowwise forward on torch-owned device pointers and stream, so the
// bench times what a user of tessera::run pays (validation + dispatch + kernel). Never throws;
// returns 0 or a nonzero status with the message in tessera_bench_api_last_error().
#include <cstdint>
#include <exception>
#include <string>

#include "tessera/core/status.h"
#include "tessera/gemm/grouped_gemm.h"

namespace {
thread_local std::string g_last_error;
}

extern "C" const char* tessera_bench_api_last_error() { return g_last_error.c_str(); }

// The PUBLIC API path (can_implement checks + run) on FP8 E4M3 rowwise quantized operands, as the
// quantizer lays them out: A (T, K) codes with T scales, B (G·N, K) codes with G·N scales; D BF16
// (T, N); int32 end offsets on the device. Returns 0 or the status (message as above).
extern "C" int tessera_bench_api_fp8_forward(int groups, const int32_t* end_offsets,
                                             int64_t tokens, int64_t n, int64_t k, const void* a,
                                             const float* sa, const void* b, const float* sb,
                                             void* d, void* workspace, int64_t workspace_bytes,
                                             void* stream) {
  using namespace tessera;
  try {
    const Device dev = Device::cuda(0);
    auto operand = [&](const void* data, const float* scale, int64_t rows) {
      QuantizedTensorView q;
      q.config.mode = ScalingMode::kRowwise;
      q.config.element = DType::kFloat8E4M3;
      q.rows = rows;
      q.cols = k;
      q.device = dev;
      q.data = TensorView::contiguous(const_cast<void*>(data), DType::kFloat8E4M3, {rows, k}, dev);
      q.scale_inv = TensorView::contiguous(const_cast<float*>(scale), DType::kFloat32, {rows, 1}, dev);
      return GemmOperand::from_quantized(q, false);
    };
    GroupedGemmProblem p;
    p.kind = GroupedGemmKind::kMGrouped;
    p.num_groups = groups;
    p.a = operand(a, sa, tokens);
    p.b = operand(b, sb, groups * n);
    p.d = TensorView::contiguous(d, DType::kBFloat16, {tokens, n}, dev);
    p.group_offsets = TensorView::contiguous(const_cast<int32_t*>(end_offsets), DType::kInt32,
                                             {groups}, dev);
    p.offsets_format = GroupOffsetsFormat::kEndOffsets;
    run(p, TensorView::contiguous(workspace, DType::kUInt8, {workspace_bytes}, dev),
        Stream{stream});
    return 0;
  } catch (const tessera::Error& e) {
    g_last_error = e.what();
    return static_cast<int>(e.status());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return static_cast<int>(tessera::Status::kInternal);
  }
}
