// CPU loops of the expert-parallel routing ops: routing metadata (sequential, in pair order, so
// the kept pairs and their ranks are the normative ones), permute with optional per-row
// quantization, the gather-add of permute's backward and unpermute, unpermute's backward, and the
// dequantize of a received payload.
// Arguments arrive checked (moe_routing.cpp). Element rules: moe_kernels.h.
#include <algorithm>
#include <vector>

#include "core/cpu_parallel.h"
#include "core/host_bytes.h"
#include "nn/moe_kernels.h"
#include "tessera/core/dispatch.h"
#include "tessera/core/status.h"
#include "tessera/formats/codecs.h"
#include "tessera/formats/half.h"

namespace tessera::detail::moe {
namespace {

template <class Idx, class Map>
void routing_typed(const RoutingArgs& a) {
  const auto* idx = static_cast<const Idx*>(a.indices);
  auto* slot = static_cast<Map*>(a.slot_map);
  auto* row_pair = static_cast<Map*>(a.row_pair);
  const int64_t pairs = a.tokens * a.top_k;
  std::vector<int64_t> routed(static_cast<size_t>(a.experts), 0);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t e = static_cast<int64_t>(idx[p]);
    TESSERA_CHECK_STATUS(e >= 0 && e < a.experts, Status::kOutOfRange, "moe_routing: indices[",
                         p / a.top_k, ", ", p % a.top_k, "] = ", e, " is not an expert in [0, ",
                         a.experts, ")");
    ++routed[static_cast<size_t>(e)];
  }
  int64_t dropped = 0;
  a.padded_offsets[0] = 0;
  for (int64_t e = 0; e < a.experts; ++e) {
    const int64_t r = routed[static_cast<size_t>(e)];
    const int64_t kept = a.capacity < 0 ? r : std::min(r, a.capacity);
    const int64_t rows = a.capacity < 0 ? (kept + a.align - 1) / a.align * a.align : a.capacity;
    a.counts[e] = kept;
    a.padded_offsets[e + 1] = a.padded_offsets[e] + rows;
    dropped += r - kept;
  }
  *a.dropped = dropped;
  std::fill(row_pair, row_pair + a.rows, static_cast<Map>(-1));
  std::vector<int64_t> next(static_cast<size_t>(a.experts), 0);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t e = static_cast<int64_t>(idx[p]);
    const int64_t rank = next[static_cast<size_t>(e)]++;
    if (rank < a.counts[e]) {
      const int64_t s = a.padded_offsets[e] + rank;
      slot[p] = static_cast<Map>(s);
      row_pair[s] = static_cast<Map>(p);
    } else {
      slot[p] = static_cast<Map>(-1);
    }
  }
}

// One permuted row quantized per block; weight: the row's values are weighted_element(*weight, ·)
// (null: the values themselves).
template <class In>
void quantize_row(const RowQuant& q, const In* src, const float* weight, int64_t h, uint8_t* out,
                  void* scale_base, int64_t scale_row) {
  const auto value = [&](int64_t i) {
    const float v = to_float(src[i]);
    return weight != nullptr ? weighted_element<In>(*weight, v) : v;
  };
  for (int64_t b = 0; b < q.scale_cols; ++b) {  // rowwise: one block, also when h = 0
    const int64_t b0 = b * q.block, n = std::min(q.block, h - b0);
    uint32_t m = 0;
    for (int64_t i = 0; src != nullptr && i < n; ++i)
      m = std::max(m, scale_rules::abs_bits(value(b0 + i)));
    const float mult = block_multiplier(q, m, scale_base, scale_row * q.scale_cols + b);
    for (int64_t i = 0; i < n; ++i) {
      const float v = src != nullptr ? value(b0 + i) : 0.0f;
      out[b0 + i] = encode_element(q, v * mult);
    }
  }
}

template <class In, class Map>
void permute_typed(const PermuteArgs& a) {
  const auto* x = static_cast<const In*>(a.x);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const int64_t h = a.hidden;
  const bool quantized = a.quant.mode != RowQuantMode::kNone;
#pragma omp parallel for schedule(static) if (a.rows * h >= kParallelWork)
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t p = static_cast<int64_t>(row_pair[r]);
    const In* src = p >= 0 ? x + (p / a.top_k) * h : nullptr;
    if (quantized) {
      const float* weight = a.weights != nullptr && p >= 0 ? a.weights + p : nullptr;
      quantize_row(a.quant, src, weight, h, static_cast<uint8_t*>(a.out) + r * h, a.scale_inv,
                   r);
    } else if (src != nullptr) {
      host_copy_bytes(static_cast<In*>(a.out) + r * h, src, static_cast<size_t>(h) * sizeof(In));
    } else {
      host_zero_bytes(static_cast<In*>(a.out) + r * h, static_cast<size_t>(h) * sizeof(In));
    }
  }
  if (quantized) {  // block1x128 scale padding rows (a multiple of 4) are zero, as the quantizer
    const int64_t esize = a.quant.mode == RowQuantMode::kMXFP8 ? 1 : 4;
    auto* base = static_cast<uint8_t*>(a.scale_inv);
    host_zero_bytes(base + a.rows * a.quant.scale_cols * esize,
                    static_cast<size_t>((a.scale_rows - a.rows) * a.quant.scale_cols * esize));
  }
}

template <class Y, class Out, class Map>
void gather_add_typed(const GatherAddArgs& a) {
  const auto* y = static_cast<const Y*>(a.y);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const auto* probs = static_cast<const float*>(a.probs);
  auto* out = static_cast<Out*>(a.out);
  const int64_t h = a.hidden, k = a.top_k;
#pragma omp parallel for schedule(static) if (a.tokens * h * k >= kParallelWork)
  for (int64_t t = 0; t < a.tokens; ++t) {
    std::vector<float> acc(static_cast<size_t>(h), 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = static_cast<int64_t>(slot[t * k + j]);
      if (s < 0) continue;
      const Y* row = y + s * h;
      if (probs != nullptr) {
        const float w = probs[t * k + j];
        for (int64_t c = 0; c < h; ++c) {
          const float prod = w * to_float(row[c]);
          acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] + prod;
        }
      } else {
        for (int64_t c = 0; c < h; ++c)
          acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] + to_float(row[c]);
      }
    }
    for (int64_t c = 0; c < h; ++c) out[t * h + c] = from_float<Out>(acc[static_cast<size_t>(c)]);
  }
}

// Σ_h a[h]·b[h] in the order of moe_routing.h (moe_kernels.h: kDotPartials partial sums over
// chunks of kDotChunk elements, then the halving tree).
template <class A, class B>
float chunked_dot(const A* a, const B* b, int64_t h) {
  float s[kDotPartials] = {};
  for (int l = 0; l < kDotPartials; ++l) {
    for (int64_t c0 = int64_t{l} * kDotChunk; c0 < h; c0 += int64_t{kDotPartials} * kDotChunk) {
      for (int64_t c = c0; c < c0 + kDotChunk && c < h; ++c) {
        const float prod = to_float(a[c]) * to_float(b[c]);
        s[l] = s[l] + prod;
      }
    }
  }
  for (int w = kDotPartials / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) s[l] = s[l] + s[l + w];
  return s[0];
}

template <class D, class Y, class Dy, class Map>
void scatter_typed(const ScatterArgs& a) {
  const auto* dout = static_cast<const D*>(a.dout);
  const auto* y = static_cast<const Y*>(a.y);
  const auto* slot = static_cast<const Map*>(a.slot_map);
  const auto* row_pair = static_cast<const Map*>(a.row_pair);
  const auto* probs = static_cast<const float*>(a.probs);
  auto* dy = static_cast<Dy*>(a.dy);
  const int64_t h = a.hidden, k = a.top_k;
  const int64_t dy_rows = dy != nullptr ? a.rows : 0;  // dy null: dprobs only
#pragma omp parallel for schedule(static) if (dy_rows * h >= kParallelWork)
  for (int64_t r = 0; r < dy_rows; ++r) {
    const int64_t p = static_cast<int64_t>(row_pair[r]);
    Dy* out = dy + r * h;
    if (p < 0) {
      for (int64_t c = 0; c < h; ++c) out[c] = from_float<Dy>(0.0f);
      continue;
    }
    const D* g = dout + (p / k) * h;
    const float w = probs != nullptr ? probs[p] : 1.0f;
    for (int64_t c = 0; c < h; ++c) out[c] = from_float<Dy>(w * to_float(g[c]));
  }
  if (a.dprobs == nullptr) return;
#pragma omp parallel for schedule(static) if (a.tokens * k * h >= kParallelWork)
  for (int64_t p = 0; p < a.tokens * k; ++p) {
    const int64_t s = static_cast<int64_t>(slot[p]);
    a.dprobs[p] = s < 0 ? 0.0f : chunked_dot(dout + (p / k) * h, y + s * h, h);
  }
}

template <class Out>
void dequantize_typed(const DequantizeArgs& a) {
  auto* out = static_cast<Out*>(a.out);
  const int64_t h = a.hidden;
#pragma omp parallel for schedule(static) if (a.rows * h >= kParallelWork)
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t src = dequantize_source(a, r);
    if (src < 0) {
      for (int64_t c = 0; c < h; ++c) out[r * h + c] = from_float<Out>(0.0f);
      continue;
    }
    const uint8_t* q = a.data + src * h;
    for (int64_t c = 0; c < h; ++c) {
      const int64_t at = src * a.scale_cols + c / a.block;
      const float s = a.e8m0 ? formats::decode_e8m0(static_cast<const uint8_t*>(a.scale_inv)[at])
                             : static_cast<const float*>(a.scale_inv)[at];
      const float v = a.e5m2 ? formats::decode_e5m2(q[c]) : formats::decode_e4m3(q[c]);
      out[r * h + c] = from_float<Out>(dequantize_product(v, s));
    }
  }
}

}  // namespace

void dequantize_cpu(const DequantizeArgs& a) {
  dispatch_float_input(a.out_dtype, "out", [&](auto ot) {
    dequantize_typed<typename decltype(ot)::type>(a);
  });
}

void regroup_cpu(const RegroupArgs& a) {
  const int64_t w = a.sources, l = a.locals, chunks = w * l;
  // Exclusive chunk starts of both orders (entry `chunks`: the total); the expert-major ones with
  // each expert's padding added to its last chunk.
  std::vector<int64_t> src(static_cast<size_t>(chunks) + 1), dst(static_cast<size_t>(chunks) + 1);
  dispatch_index_dtype(a.count_dtype, "counts", [&](auto ct) {
    const auto* c = static_cast<const typename decltype(ct)::type*>(a.counts);
    for (int64_t s = 0; s < w; ++s) {
      for (int64_t e = 0; e < l; ++e) {
        const int64_t n = static_cast<int64_t>(c[s * a.stride + e]);
        TESSERA_CHECK(n >= 0, "moe_regroup_index: counts[", s, ", ", e, "] = ", n,
                      " is negative");
        TESSERA_CHECK_STATUS(n <= a.rows, Status::kShapeMismatch, "moe_regroup_index: counts[",
                             s, ", ", e, "] = ", n, " exceeds the ", a.rows, " rows");
        src[s * l + e + 1] = n;  // sizes first, scanned below
        dst[e * w + s + 1] = n;
      }
    }
  });
  for (int64_t e = 0; e < l; ++e) {
    int64_t total = 0;
    for (int64_t s = 0; s < w; ++s) total += dst[e * w + s + 1];
    dst[e * w + w] += regroup_padded(total, a.align) - total;
  }
  for (int64_t c = 0; c < chunks; ++c) {
    src[c + 1] += src[c];
    dst[c + 1] += dst[c];
    TESSERA_CHECK_STATUS(src[c + 1] <= a.rows, Status::kShapeMismatch,
                         "moe_regroup_index: counts sum past the ", a.rows, " rows");
  }
  TESSERA_CHECK_STATUS(src[chunks] == a.rows, Status::kShapeMismatch,
                       "moe_regroup_index: counts sum to ", src[chunks], ", not to the ", a.rows,
                       " rows");
  TESSERA_CHECK_STATUS(dst[chunks] == a.padded_rows, Status::kShapeMismatch,
                       "moe_regroup_index: the experts' rows padded to multiples of ", a.align,
                       " sum to ", dst[chunks], ", not to the ", a.padded_rows, " padded rows");
  for (int64_t i = 0; i < a.padded_rows; ++i) {
    if (a.source_of)
      a.source_of[i] = regroup_row(dst.data(), src.data(), chunks, l, w, i, a.rows, a.rows);
  }
  for (int64_t i = 0; i < a.rows; ++i) {
    if (a.expert_of) {
      a.expert_of[i] =
          regroup_row(src.data(), dst.data(), chunks, w, l, i, a.padded_rows,
                                    a.padded_rows > 0 ? a.padded_rows - 1 : 0);
    }
  }
}

void routing_cpu(const RoutingArgs& a) {
  dispatch_index_dtype(a.index_dtype, "indices", [&](auto it) {
    dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
      routing_typed<typename decltype(it)::type, typename decltype(mt)::type>(a);
    });
  });
}

void permute_cpu(const PermuteArgs& a) {
  dispatch_float_input(a.x_dtype, "x", [&](auto xt) {
    dispatch_index_dtype(a.map_dtype, "row_pair", [&](auto mt) {
      permute_typed<typename decltype(xt)::type, typename decltype(mt)::type>(a);
    });
  });
}

void gather_add_cpu(const GatherAddArgs& a) {
  dispatch_float_input(a.y_dtype, "y", [&](auto yt) {
    dispatch_float_input(a.out_dtype, "out", [&](auto ot) {
      dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
        gather_add_typed<typename decltype(yt)::type, typename decltype(ot)::type,
                         typename decltype(mt)::type>(a);
      });
    });
  });
}

void scatter_cpu(const ScatterArgs& a) {
  dispatch_float_input(a.dout_dtype, "dout", [&](auto dt) {
    dispatch_float_input(a.y_dtype, "y", [&](auto yt) {
      dispatch_float_input(a.dy_dtype, "dy", [&](auto gt) {
        dispatch_index_dtype(a.map_dtype, "slot_map", [&](auto mt) {
          scatter_typed<typename decltype(dt)::type, typename decltype(yt)::type,
                        typename decltype(gt)::type, typename decltype(mt)::type>(a);
        });
      });
    });
  });
}

}  // namespace tessera::detail::moe
