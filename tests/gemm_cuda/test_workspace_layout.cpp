// Host-only checks of the CUDA grouped GEMM's workspace size (dispatch.cu layout_of): a small
// problem's size against the layout worked out by hand, and problems whose transposed copies,
// padded token columns or total would pass INT64_MAX bytes refused with kOutOfRange naming the
// region, instead of a wrapped-around size. No device is needed: the size reads only the views'
// fields (run() and the public workspace_size() reach it after can_implement, on an sm_90 GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "gemm/gemm_backend.h"

namespace tessera::test {
namespace {

// A dense FP16 problem (FP16 takes the transposes into the workspace) of `kind` with B not
// transposed ((G, K, N) or the K-grouped (T, N)); the views are never dereferenced.
GroupedGemmProblem fp16_problem(GroupedGemmKind kind) {
  static int64_t offsets[3] = {0, 4, 10};
  alignas(256) static char dummy[256];
  GroupedGemmProblem p;
  p.kind = kind;
  p.num_groups = 2;
  p.transpose_b = false;
  p.a = GemmOperand::from_dense(TensorView::contiguous(dummy, DType::kFloat16, {10, 16}));
  p.b = GemmOperand::from_dense(TensorView::contiguous(dummy, DType::kFloat16, {10, 8}));
  p.d = TensorView::contiguous(dummy, DType::kFloat32, {2, 16, 8});
  if (kind != GroupedGemmKind::kBatched) {
    p.group_offsets = TensorView::contiguous(offsets, DType::kInt64, {3});
  }
  return p;
}

detail::GroupedGemmDims dims(int64_t groups, int64_t m, int64_t n, int64_t k, int64_t capacity) {
  detail::GroupedGemmDims d;
  d.groups = groups;
  d.m = m;
  d.n = n;
  d.k = k;
  d.capacity = capacity;
  return d;
}

// The status and message of the size query ("" and kOk when it gives a size).
std::pair<Status, std::string> size_error(const GroupedGemmProblem& p,
                                          const detail::GroupedGemmDims& d) {
  try {
    detail::grouped_gemm_cuda_workspace_size(p, d);
    return {Status::kOk, ""};
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
}

// K-grouped FP16, 2 groups, A (10, 16), B (10, 8), host offsets: every region rounded to 256
// bytes — tensor maps 2 x 260 = 520 → 768; offsets 3 x 8 → 256; starts 3 x 8 → 256; padded
// token columns roundup(10 + 7 x 2, 8) = 24: A^T 16 x 24 x 2 = 768, B^T 8 x 24 x 2 = 384 → 512.
TEST(CudaGemmWorkspace, SmallKGroupedSizeByHand) {
  const GroupedGemmProblem p = fp16_problem(GroupedGemmKind::kKGrouped);
  EXPECT_EQ(detail::grouped_gemm_cuda_workspace_size(p, dims(2, 16, 8, -1, 10)),
            768 + 256 + 256 + 768 + 512);
}

// M-grouped FP16 NN, 2 groups, K 16, N 8, host offsets: offsets 3 x 8 → 256, B^T 2 x 8 x 16 x 2
// = 512; host a_row_starts add their first G entries, 2 x 8 → 256 (device ones nothing).
TEST(CudaGemmWorkspace, HostARowStartsAreARegion) {
  static int64_t a_starts[3] = {0, 16, 32};
  GroupedGemmProblem p = fp16_problem(GroupedGemmKind::kMGrouped);
  const detail::GroupedGemmDims d = dims(2, -1, 8, 16, 10);
  EXPECT_EQ(detail::grouped_gemm_cuda_workspace_size(p, d), 256 + 512);
  p.a_row_starts = TensorView::contiguous(a_starts, DType::kInt64, {3});
  EXPECT_EQ(detail::grouped_gemm_cuda_workspace_size(p, d), 256 + 256 + 512);
  p.a_row_starts.device = Device::cuda(0);
  EXPECT_EQ(detail::grouped_gemm_cuda_workspace_size(p, d), 256 + 512);
}

TEST(CudaGemmWorkspace, OverflowIsOutOfRangeNamingTheRegion) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Case {
    const char* name;
    GroupedGemmKind kind;
    bool transpose_a;
    detail::GroupedGemmDims d;
    const char* region;
  };
  const Case cases[] = {
      {"K-grouped A^T: M x padded tokens", GroupedGemmKind::kKGrouped, false,
       dims(4, int64_t{1} << 40, 8, -1, int64_t{1} << 30), "K-major copy of A"},
      {"K-grouped B^T: N x padded tokens", GroupedGemmKind::kKGrouped, false,
       dims(4, 8, int64_t{1} << 40, -1, int64_t{1} << 30), "K-major copy of B"},
      {"K-grouped padded columns past INT64_MAX", GroupedGemmKind::kKGrouped, false,
       dims(2, 8, 8, -1, kMax - 3), "padded token columns"},
      {"M-grouped B^T: G x N x K", GroupedGemmKind::kMGrouped, false,
       dims(3, -1, int64_t{1} << 32, int64_t{1} << 31, 16), "K-major copy of B"},
      {"batched A^T: G x M x K", GroupedGemmKind::kBatched, true,
       dims(2, int64_t{1} << 31, 8, int64_t{1} << 31, 0), "K-major copy of A"},
      // Each copy fits (2^62 bytes), their sum does not.
      {"batched: total of two 2^62-byte copies", GroupedGemmKind::kBatched, true,
       dims(1, int64_t{1} << 30, int64_t{1} << 30, int64_t{1} << 31, 0), "total bytes"},
      // A copy 100 bytes short of INT64_MAX: its 256-byte round-up passes it.
      {"round-up of the last region", GroupedGemmKind::kMGrouped, false,
       dims(1, -1, 1, (kMax - 100) / 2, 16), "total bytes"},
  };
  for (const Case& c : cases) {
    GroupedGemmProblem p = fp16_problem(c.kind);
    p.transpose_a = c.transpose_a;
    const auto [status, message] = size_error(p, c.d);
    EXPECT_EQ(status, Status::kOutOfRange) << c.name << ": " << message;
    EXPECT_NE(message.find(c.region), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find("workspace"), std::string::npos) << c.name << ": " << message;
  }
}

}  // namespace
}  // namespace tessera::test
