// Bulk element conversion (scale 1): the CPU path is multithreaded and vectorizable, the CUDA
// path runs on `stream`. Both views must be contiguous, on the same device, with equal numel.
#pragma once

#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"

namespace tessera {

// src: float32/bfloat16/float16 → dst: e4m3, e5m2, e8m0, e2m1 (packed), bfloat16 or float16.
void encode(const TensorView& src, const TensorView& dst, Stream stream = {});
// src: any float format above → dst: float32.
void decode(const TensorView& src, const TensorView& dst, Stream stream = {});

namespace detail {
void encode_cuda(const TensorView& src, const TensorView& dst, Stream stream);
void decode_cuda(const TensorView& src, const TensorView& dst, Stream stream);
}  // namespace detail

}  // namespace tessera
