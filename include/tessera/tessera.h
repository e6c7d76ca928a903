// tessera: low-precision grouped tensors and grouped GEMM. The one header C++ users include.
#pragma once

#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/dtype.h"
#include "tessera/core/status.h"
#include "tessera/core/stream.h"
#include "tessera/core/tensor_view.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/convert.h"
#include "tessera/formats/format_table.h"
#include "tessera/formats/half.h"
#include "tessera/gemm/grouped_gemm.h"
