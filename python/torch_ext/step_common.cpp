// Shared pieces of the training-step ops: cached specs, delayed state views, weight copies.
#include "step_common.h"

#include <map>
#include <mutex>
#include <tuple>

#include "tessera/core/status.h"

namespace tessera::torch_ext {
namespace {

using SpecKey = std::tuple<std::string, std::string, int64_t, int64_t, int64_t, bool, int>;

template <class Spec, class Make>
const Spec& cached(std::map<SpecKey, Spec>& cache, std::mutex& mutex, const SpecKey& key,
                   Make make) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make()).first;
  return it->second;
}

}  // namespace

const nn::LinearSpec& linear_spec(const std::string& recipe, const std::string& name,
                                  int64_t groups, int64_t in, int64_t out, bool bias,
                                  DType weight_dtype) {
  static std::map<SpecKey, nn::LinearSpec> cache;
  static std::mutex mutex;
  return cached(cache, mutex,
                {recipe, name, groups, in, out, bias, static_cast<int>(weight_dtype)}, [&] {
                  return nn::make_linear_spec(parse_recipe_spec(recipe), name, groups, in, out,
                                              bias, nn::dense_dtype_of_weight(weight_dtype));
                });
}

const nn::MlpSpec& mlp_spec(const std::string& recipe1, const std::string& recipe2,
                            const std::string& prefix, int64_t groups, int64_t hidden,
                            int64_t ffn, bool bias, DType weight_dtype) {
  static std::map<SpecKey, nn::MlpSpec> cache;
  static std::mutex mutex;
  const std::string both = recipe1 + "\n" + recipe2;
  return cached(cache, mutex,
                {both, prefix, groups, hidden, ffn, bias, static_cast<int>(weight_dtype)}, [&] {
                  return nn::make_mlp_spec(parse_recipe_spec(recipe1), parse_recipe_spec(recipe2),
                                           prefix, groups, hidden, ffn, bias,
                                           nn::dense_dtype_of_weight(weight_dtype));
                });
}

nn::LinearState linear_state(const OptTensor& scale, const OptTensor& history) {
  nn::LinearState s;
  if (!scale.has_value() || !history.has_value()) return s;
  const TensorView sv = view_of(*scale, "delayed_scale");
  const TensorView hv = view_of(*history, "amax_history");
  TESSERA_CHECK_STATUS(sv.dtype == DType::kFloat32 && hv.dtype == DType::kFloat32 &&
                           sv.is_contiguous() && hv.is_contiguous() && sv.ndim == 2 &&
                           sv.shape[0] == 3 && hv.ndim == 3 && hv.shape[0] == 3 &&
                           hv.shape[2] == sv.shape[1],
                       Status::kShapeMismatch,
                       "delayed state: expected contiguous float32 delayed_scale (3, G) and "
                       "amax_history (3, L, G), got ", sv.to_string(), " and ", hv.to_string());
  const int64_t groups = sv.shape[1], len = hv.shape[1];
  DelayedScalingState* rows[3] = {&s.input, &s.weight, &s.grad_output};
  for (int64_t r = 0; r < 3; ++r) {
    rows[r]->scale = TensorView::contiguous(sv.as<float>() + r * groups, DType::kFloat32,
                                            {groups}, sv.device);
    rows[r]->amax_history = TensorView::contiguous(hv.as<float>() + r * len * groups,
                                                   DType::kFloat32, {len, groups}, hv.device);
  }
  return s;
}

nn::WeightCopies weight_copies(const nn::LinearSpec& spec, const Tensor& weight,
                               const OptTensor& cache, bool requantize,
                               const nn::LinearState& state, nn::Allocator& alloc, Stream stream,
                               Tensor* made) {
  const TensorView w = view_of(weight, "weight");
  TESSERA_CHECK_STATUS(w.is_contiguous(), Status::kInvalidArgument,
                       "weight: must be contiguous (G, out, in)");
  if (requantize) {
    nn::WeightCopies c = nn::quantize_weight(spec, w, state, alloc, stream);
    *made = tensor_of(c.storage, w.device);
    return c;
  }
  const int64_t need = nn::weight_copies_bytes(spec, w.dtype);
  TESSERA_CHECK(need == 0 || cache.has_value(),
                "weight cache: the weight copies were not made yet (requantize the weights)");
  const nn::Allocation storage = cache.has_value() ? allocation_of(*cache) : nn::Allocation{};
  return nn::view_weight_copies(spec, w, storage);
}

CallScope::CallScope(const Tensor& t) : device_(device_of(t)) {
  if (device_.is_cuda()) {
    guard_ = std::make_unique<torch::stable::accelerator::DeviceGuard>(device_.index);
  }
  stream_ = current_stream(device_);
}

TensorView offsets_view(const Tensor& offs, int64_t groups) {
  const TensorView v = view_of(offs, "offs");
  TESSERA_CHECK_STATUS((v.dtype == DType::kInt32 || v.dtype == DType::kInt64) && v.ndim == 1 &&
                           v.shape[0] == groups,
                       Status::kShapeMismatch, "offs: expected (", groups,
                       ",) int32 cumulative end offsets, got ", v.to_string());
  TESSERA_CHECK_STATUS(v.is_contiguous(), Status::kShapeMismatch, "offs: a strided view (stride ",
                       v.strides[0], "); pass contiguous offsets (offs.contiguous())");
  return v;
}

DType dtype_arg(torch::headeronly::ScalarType t, const char* arg) {
  namespace sh = torch::headeronly;
  switch (t) {
    case sh::ScalarType::Float: return DType::kFloat32;
    case sh::ScalarType::BFloat16: return DType::kBFloat16;
    case sh::ScalarType::Half: return DType::kFloat16;
    default:
      TESSERA_FAIL(Status::kDTypeMismatch, arg, ": expected float32, bfloat16 or float16");
  }
}

}  // namespace tessera::torch_ext
