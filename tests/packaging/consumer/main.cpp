// Uses the installed headers and library through the umbrella header only: an encode, an MXFP8
// quantization, a grouped tensor (GroupedTensorOptions), the padded-rows bound of nn and the
// offsets length of scan, each checked against a value worked out by hand.
#include <array>
#include <cstdio>
#include <vector>

#include <tessera/tessera.h>

namespace {

int fail(const char* what) {
  std::printf("consumer: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  float x = 1.0f;
  unsigned char code = 0;
  tessera::encode(tessera::TensorView::contiguous(&x, tessera::DType::kFloat32, {1}),
                  tessera::TensorView::contiguous(&code, tessera::DType::kFloat8E4M3, {1}));
  if (code != 0x38) return fail("encode(1.0) is not e4m3 0x38");

  // A block of 1.0 in MXFP8: a power-of-two scale and an E4M3 code, so the round trip is exact.
  std::vector<float> row(32, 1.0f), back(32, 0.0f);
  tessera::Quantizer q(tessera::make_config(tessera::ScalingMode::kMXFP8));
  tessera::QuantizedTensor t = q.allocate(1, 32);
  q.quantize(tessera::TensorView::contiguous(row.data(), tessera::DType::kFloat32, {1, 32}), t);
  tessera::dequantize(t.view(), tessera::TensorView::contiguous(back.data(),
                                                                tessera::DType::kFloat32, {1, 32}));
  if (back[31] != 1.0f) return fail("MXFP8 round trip of 1.0 is not exact");

  tessera::GroupedTensorOptions o;
  o.dtype = tessera::DType::kBFloat16;
  const std::array<std::array<int64_t, 2>, 2> shapes = {{{3, 8}, {5, 8}}};
  const tessera::GroupedTensor g = tessera::GroupedTensor::from_shapes(shapes, o);
  if (g.view().logical_rows != 8 || g.storage_bytes() != 8 * 8 * 2)
    return fail("grouped tensor of (3, 8) + (5, 8) bf16 is not (8, 8), 128 bytes");

  // Worst case of 10 rows in 4 groups padded to 16: each group may add 15 rows, 10 + 4 * 15.
  if (tessera::padded_rows_bound(10, 4, 16) != 70) return fail("padded_rows_bound(10, 4, 16) != 70");
  tessera::OffsetsSpec spec;
  spec.leading_zero = true;  // N + 1 entries
  if (tessera::offsets_length(4, spec) != 5) return fail("offsets_length(4, leading zero) != 5");

  std::printf("consumer: find_package(tessera) works (tessera %s)\n", TESSERA_VERSION_STRING);
  return 0;
}
