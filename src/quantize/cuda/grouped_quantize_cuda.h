// Grouped CUDA quantization of one contiguous varying-first / all-same input (the MoE
// activation case) into grouped storage whose metadata lives on the device. The entry points
// (grouped_quantize_contiguous_cuda, has_grouped_quantize_kernel) and their contract are
// declared in quantize/quantize_backend.h, through which the grouped layer calls down.
#pragma once

#include "quantize/quantize_backend.h"
#include "tessera/grouped/grouped_tensor.h"
