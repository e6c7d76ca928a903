// Status codes, the Error exception and the check macros used by every layer.
//
// TESSERA_CHECK(cond, message parts...) throws tessera::Error{Status::kInvalidArgument} with
// "file:line: check `cond` failed: <message>". TESSERA_CHECK_STATUS picks the status. A condition
// that is a string literal is rejected at compile time (it would always be true). Text that a
// caller passed (a name to parse, an option key) goes into a message through echo(): at most
// kMaxEchoedChars bytes of it, so that a message stays short whatever the input.
#pragma once

#include "tessera/config.h"

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace tessera {

enum class Status : int {
  kOk = 0,
  kInvalidArgument = 1,   // a value outside what the operation accepts
  kShapeMismatch = 2,     // shapes or sizes that do not agree
  kDTypeMismatch = 3,     // a dtype the operation does not take in that position
  kMisaligned = 4,        // pointer, stride or size alignment not met
  kUnsupported = 5,       // valid, but not implemented for this format/arch/backend
  kOutOfRange = 6,        // index, offset or value past its bound (also int32 overflow)
  kBufferTooSmall = 7,    // an output or workspace buffer smaller than needed
  kOutOfMemory = 8,       // allocation failed
  kDeviceError = 9,       // a CUDA runtime / driver / library error
  kNoDevice = 10,         // CUDA requested but absent (no driver, no GPU, or built without CUDA)
  kInternal = 11,         // a broken invariant inside tessera: a bug
};

// Stable, human-readable name of a status ("invalid argument", ...).
const char* status_string(Status s) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

// A caller's text in a message: `os << echo(text)` writes text whole when it has at most
// kMaxEchoedChars bytes, else its first kMaxEchoedChars bytes (cut before a UTF-8 character that
// would straddle the limit) followed by "...".
inline constexpr size_t kMaxEchoedChars = 64;
struct Echo {
  std::string_view text;
};
inline Echo echo(std::string_view text) noexcept { return Echo{text}; }
std::ostream& operator<<(std::ostream& os, Echo e);

namespace detail {

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

[[noreturn]] void throw_error(Status status, const char* file, int line, const char* condition,
                              const std::string& message);

}  // namespace detail
}  // namespace tessera

#define TESSERA_DETAIL_REJECT_LITERAL(cond)                                           \
  static_assert(!std::is_array_v<std::remove_reference_t<decltype((cond))>>,          \
                "TESSERA_CHECK: the condition is a string literal and can never fail")

#define TESSERA_CHECK_STATUS(cond, status, ...)                                                \
  do {                                                                                         \
    TESSERA_DETAIL_REJECT_LITERAL(cond);                                                       \
    if (!(cond)) {                                                                             \
      ::tessera::detail::throw_error((status), __FILE__, __LINE__, #cond,                     \
                                     ::tessera::detail::concat(__VA_ARGS__));                  \
    }                                                                                          \
  } while (0)

#define TESSERA_CHECK(cond, ...) \
  TESSERA_CHECK_STATUS(cond, ::tessera::Status::kInvalidArgument, __VA_ARGS__)

// Unconditional failure with a status; for the default case of a dispatch switch.
#define TESSERA_FAIL(status, ...)                                              \
  ::tessera::detail::throw_error((status), __FILE__, __LINE__, nullptr,        \
                                 ::tessera::detail::concat(__VA_ARGS__))
