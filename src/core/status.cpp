// Status strings and the error thrower behind the check macros.
#include "tessera/core/status.h"

namespace tessera {

const char* status_string(Status s) noexcept {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kShapeMismatch: return "shape mismatch";
    case Status::kDTypeMismatch: return "dtype mismatch";
    case Status::kMisaligned: return "misaligned";
    case Status::kUnsupported: return "unsupported";
    case Status::kOutOfRange: return "out of range";
    case Status::kBufferTooSmall: return "buffer too small";
    case Status::kOutOfMemory: return "out of memory";
    case Status::kDeviceError: return "device error";
    case Status::kNoDevice: return "no device";
    case Status::kInternal: return "internal error";
  }
  return "unknown status";
}

std::ostream& operator<<(std::ostream& os, Echo e) {
  if (e.text.size() <= kMaxEchoedChars) return os << e.text;
  size_t cut = kMaxEchoedChars;
  // Back up over UTF-8 continuation bytes (10xxxxxx): the character they belong to starts before
  // the cut and would end after it.
  while (cut > 0 && (static_cast<unsigned char>(e.text[cut]) & 0xC0) == 0x80) --cut;
  return os << e.text.substr(0, cut) << "...";
}

namespace detail {

void throw_error(Status status, const char* file, int line, const char* condition,
                 const std::string& message) {
  std::ostringstream os;
  os << "tessera " << status_string(status) << ": " << message;
  os << " [" << file << ':' << line;
  if (condition != nullptr) os << ", check `" << condition << "` failed";
  os << ']';
  throw Error(status, os.str());
}

}  // namespace detail
}  // namespace tessera
