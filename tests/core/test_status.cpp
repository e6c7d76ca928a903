// Status strings, check macros, dtype/device parsing.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/status.h"
#include "tessera/quantize/recipe.h"
#include "tessera/quantize/types.h"

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

// The message of `f`'s Error; empty when it does not throw.
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Echo, ShortTextIsEchoedWhole) {
  std::ostringstream os;
  os << echo("e3m4");
  EXPECT_EQ(os.str(), "e3m4");
}

TEST(Echo, LongTextIsCutAtTheLimitWithAnEllipsis) {
  const std::string text(100000, 'x');
  std::ostringstream os;
  os << echo(text);
  EXPECT_EQ(os.str(), std::string(kMaxEchoedChars, 'x') + "...");
  // Exactly the limit: whole, no ellipsis.
  std::ostringstream exact;
  exact << echo(text.substr(0, kMaxEchoedChars));
  EXPECT_EQ(exact.str(), std::string(kMaxEchoedChars, 'x'));
}

TEST(Echo, CutNeverSplitsAUtf8Character) {
  // 63 ASCII bytes then a 2-byte character (U+00E9) straddling byte 64: the cut goes before it.
  const std::string text = std::string(kMaxEchoedChars - 1, 'a') + "\xc3\xa9" + "tail";
  std::ostringstream os;
  os << echo(text);
  EXPECT_EQ(os.str(), std::string(kMaxEchoedChars - 1, 'a') + "...");
}

// Every parser of a caller's name echoes at most a bounded prefix of it (a 1 MB name used to come
// back whole in the message).
TEST(Echo, ParsersBoundWhatTheyEcho) {
  const std::string huge = "q" + std::string(1 << 20, 'z');
  const std::string prefix = "q" + std::string(kMaxEchoedChars - 1, 'z') + "...";
  const std::pair<const char*, std::string> messages[] = {
      {"parse_dtype", message_of([&] { parse_dtype(huge); })},
      {"parse_device", message_of([&] { parse_device(huge); })},
      {"parse_recipe", message_of([&] { parse_recipe(huge); })},
      {"parse_recipe suffix", message_of([&] { parse_recipe("fp8_current:" + huge); })},
      {"recipe_info", message_of([&] { recipe_info(huge); })},
      {"scaling_mode_from_name", message_of([&] { scaling_mode_from_name(huge.c_str()); })},
  };
  for (const auto& [what, m] : messages) {
    EXPECT_FALSE(m.empty()) << what << " accepted the name";
    EXPECT_LT(m.size(), 1024u) << what << ": " << m.substr(0, 300);
    EXPECT_NE(m.find(prefix), std::string::npos) << what << ": " << m.substr(0, 300);
  }
}

}  // namespace
}  // namespace tessera
