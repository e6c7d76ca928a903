// Status strings, check macros, dtype/device parsing.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/status.h"

namespace tessera {
namespace {

TEST(Status, EveryCodeHasADistinctName) {
  std::set<std::string> names;
  for (int s = 0; s <= static_cast<int>(Status::kInternal); ++s) {
    const std::string name = status_string(static_cast<Status>(s));
    EXPECT_NE(name, "unknown status") << s;
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
  }
}

TEST(Status, CheckThrowsWithLocationConditionAndMessage) {
  const int rows = 3;
  try {
    TESSERA_CHECK_STATUS(rows % 2 == 0, Status::kShapeMismatch, "rows = ", rows, " must be even");
    FAIL() << "check did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    const std::string what = e.what();
    EXPECT_NE(what.find("rows = 3 must be even"), std::string::npos) << what;
    EXPECT_NE(what.find("rows % 2 == 0"), std::string::npos) << what;
    EXPECT_NE(what.find("test_status.cpp"), std::string::npos) << what;
    EXPECT_NE(what.find("shape mismatch"), std::string::npos) << what;
  }
}

TEST(Status, PassingCheckDoesNothing) {
  EXPECT_NO_THROW(TESSERA_CHECK(1 + 1 == 2, "never"));
}

TEST(DType, ParseAcceptsCanonicalNamesAndAliases) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const auto dt = static_cast<DType>(d);
    EXPECT_EQ(parse_dtype(dtype_name(dt)), dt);
  }
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kFloat8E4M3);
  EXPECT_EQ(parse_dtype("bf16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("float4_e2m1fn"), DType::kFloat4E2M1);
}

TEST(DType, UnknownNameNamesTheAcceptedValues) {
  try {
    parse_dtype("e3m4");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'e3m4'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos);
  }
}

TEST(DType, BytesRoundSubByteUp) {
  EXPECT_EQ(dtype_bytes(DType::kFloat4E2M1, 3), 2);
  EXPECT_EQ(dtype_bytes(DType::kFloat4E2M1, 4), 2);
  EXPECT_EQ(dtype_bytes(DType::kBFloat16, 5), 10);
  EXPECT_EQ(dtype_bytes(DType::kInt64, 2), 16);
}

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(to_string(Device::cuda(2)), "cuda:2");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU"}) {
    EXPECT_THROW(parse_device(bad), Error) << bad;
  }
}

}  // namespace
}  // namespace tessera
