// Group starts and padded starts of a step's wgrad layout: CPU loop, CUDA dispatch.
#include "nn/step_layout.h"

#include "tessera/core/checked_math.h"
#include "tessera/core/status.h"
#include "tessera/nn/token_padding.h"

namespace tessera::nn::detail {

void group_starts(const GroupOffsets& groups, int64_t align, int64_t* starts, int64_t* padded,
                  Device device, Stream stream) {
  TESSERA_CHECK(align >= 1, "align ", align, " must be >= 1");
  if (device.is_cuda()) return cuda::group_starts(groups, align, starts, padded, stream);
  padded[0] = 0;
  for (int64_t g = 0; g < groups.groups; ++g) {
    const int64_t b = groups.begin(g), e = groups.end(g);
    const int64_t m = e > b ? e - b : 0;
    starts[g] = b;
    padded[g + 1] = padded[g] + (m + align - 1) / align * align;
  }
  starts[groups.groups] = groups.groups > 0 ? groups.end(groups.groups - 1) : 0;
}

int64_t padded_rows_for(int64_t rows, int64_t groups, int64_t align) {
  return checked_round_up(padded_rows_bound(rows, groups, align), align, "padded rows");
}

}  // namespace tessera::nn::detail
