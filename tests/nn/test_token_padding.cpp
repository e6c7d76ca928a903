// Token padding on the CPU against the oracle loop: aligns, dtypes, row widths, empty groups,
// capacity rows left untouched, unpad ∘ pad = identity on the live rows, and errors.
#include <gtest/gtest.h>

#include "nn/test_token_padding_cases.h"
#include "tessera/core/status.h"

namespace tessera {
namespace {

using testing::kSentinel;
using testing::oracle_pad;
using testing::PaddingBuffers;
using testing::PaddingCase;
using testing::random_bytes;
using testing::random_group_sizes;
using testing::same_rows;

// Pads through pad_tokens_from_splits, checks against the oracle, then unpads and checks that
// the live rows come back and the capacity rows keep the sentinel.
void check_case(const PaddingCase& c, uint32_t seed) {
  const auto x = random_bytes(c.rows_cap() * c.row_bytes(), seed);
  PaddingBuffers b(c, Device::cpu(), Device::cpu(), x);
  pad_tokens_from_splits(b.xv, b.sv, c.align, b.xpv, b.ov, b.pov);
  ASSERT_TRUE(same_rows(PaddingBuffers::host(b.x_padded), oracle_pad(c, x), c.row_bytes()))
      << c.name();
  unpad_tokens(b.xpv, b.ov, b.pov, b.xbv);
  auto want = x;
  std::fill(want.begin() + c.total() * c.row_bytes(), want.end(), kSentinel);
  ASSERT_TRUE(same_rows(PaddingBuffers::host(b.x_back), want, c.row_bytes())) << c.name();
  // The offsets are those of splits_to_offsets.
  const auto off = PaddingBuffers::host_i64(b.offsets);
  const auto poff = PaddingBuffers::host_i64(b.padded_offsets);
  ASSERT_EQ(off.front(), 0);
  for (size_t g = 0; g < c.splits.size(); ++g) {
    ASSERT_EQ(off[g + 1] - off[g], c.splits[g]) << c.name();
    ASSERT_EQ((poff[g + 1] - poff[g]) % c.align, 0) << c.name();
    ASSERT_LT(poff[g + 1] - poff[g] - c.splits[g], c.align) << c.name();
  }
}

TEST(TokenPadding, MatchesTheOracleLoop) {
  uint32_t seed = 1;
  for (int64_t n : {1, 4, 33, 256}) {
    for (int64_t align : {1, 8, 16, 128}) {
      for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        for (int64_t k : {1, 3, 64}) {
          check_case({random_group_sizes(n, 40, seed), align, k, dt, 5}, seed);
          ++seed;
        }
      }
    }
  }
  check_case({random_group_sizes(32, 300, 9), 128, 7168, DType::kBFloat16, 0}, 9);
}

TEST(TokenPadding, EmptyGroupsAndNoRows) {
  check_case({{0, 5, 0, 17, 0}, 16, 8, DType::kFloat32, 2}, 1);
  check_case({{0, 0, 0}, 16, 8, DType::kFloat32, 4}, 2);
  check_case({{}, 16, 8, DType::kFloat32, 4}, 3);
  check_case({{16, 32}, 16, 8, DType::kFloat16, 0}, 4);  // already aligned: no padding rows
}

TEST(TokenPadding, PaddedRowsBound) {
  EXPECT_EQ(padded_rows_bound(100, 8, 16), 100 + 8 * 15);
  EXPECT_EQ(padded_rows_bound(100, 8, 1), 100);
  EXPECT_EQ(padded_rows_bound(0, 0, 128), 0);
  EXPECT_THROW(padded_rows_bound(std::numeric_limits<int64_t>::max(), 2, 16), Error);
  EXPECT_THROW(padded_rows_bound(1, 1, 0), Error);
}

TEST(TokenPadding, ErrorsAreClear) {
  const PaddingCase c{{3, 5}, 16, 4, DType::kFloat32, 0};
  const auto x = random_bytes(c.rows_cap() * c.row_bytes(), 1);
  PaddingBuffers b(c, Device::cpu(), Device::cpu(), x);
  // x_padded smaller than the exact padded total (32 rows).
  auto small = b.xpv;
  small.shape[0] = 31;
  try {
    pad_tokens_from_splits(b.xv, b.sv, c.align, small, b.ov, b.pov);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kBufferTooSmall);
  }
  // Splits that do not fit x.
  auto short_x = b.xv;
  short_x.shape[0] = 7;
  try {
    pad_tokens_from_splits(short_x, b.sv, c.align, b.xpv, b.ov, b.pov);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kOutOfRange);
  }
  auto wrong_k = b.xpv;
  wrong_k.shape[1] = 3;
  EXPECT_THROW(pad_tokens(b.xv, b.ov, b.pov, wrong_k), Error);
  auto wrong_dtype = b.xpv;
  wrong_dtype.dtype = DType::kFloat16;
  EXPECT_THROW(pad_tokens(b.xv, b.ov, b.pov, wrong_dtype), Error);
  auto int_x = b.xv;
  int_x.dtype = DType::kInt32;
  EXPECT_THROW(pad_tokens(int_x, b.ov, b.pov, b.xpv), Error);
  // Offsets that decrease are caught on the CPU.
  int64_t bad[3] = {0, 5, 2};
  EXPECT_THROW(pad_tokens(b.xv, TensorView::contiguous(bad, DType::kInt64, {3}), b.pov, b.xpv),
               Error);
  EXPECT_THROW(pad_tokens_from_splits(b.xv, b.sv, 0, b.xpv, b.ov, b.pov), Error);  // align 0
}

}  // namespace
}  // namespace tessera
