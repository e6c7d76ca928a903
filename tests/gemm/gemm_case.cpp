// Grouped GEMM test fixtures and the loop-of-single-GEMMs oracle (see gemm_case.h).
#include "gemm/gemm_case.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

namespace tessera::test {
namespace {

constexpr uint8_t kPoisonByte = 0x5A;

void store(DType dt, void* base, int64_t i, float v) {
  switch (dt) {
    case DType::kFloat32: static_cast<float*>(base)[i] = v; break;
    case DType::kBFloat16: static_cast<bf16*>(base)[i] = bf16::from_float(v); break;
    case DType::kFloat16: static_cast<fp16*>(base)[i] = fp16::from_float(v); break;
    default: throw std::logic_error("test store: not a float input dtype");
  }
}

double load(DType dt, const void* base, int64_t i) {
  switch (dt) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kBFloat16: return static_cast<const bf16*>(base)[i].to_float();
    case DType::kFloat16: return static_cast<const fp16*>(base)[i].to_float();
    default: throw std::logic_error("test load: not a float input dtype");
  }
}

Owned make_owned(DType dt, std::initializer_list<int64_t> shape) {
  Owned o;
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  o.bytes.assign(static_cast<size_t>(dtype_bytes(dt, numel)), 0);
  o.view = TensorView::contiguous(o.bytes.data(), dt, shape);
  return o;
}

// Random values in [lo, hi) for the first `live` elements, NaN after (capacity poison).
void fill(Owned& o, std::mt19937& rng, int64_t live, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  const int64_t n = o.view.numel();
  for (int64_t i = 0; i < n; ++i) {
    store(o.view.dtype, o.bytes.data(), i,
          i < live ? dist(rng) : std::numeric_limits<float>::quiet_NaN());
  }
}

void make_offsets(GemmFixture& f) {
  const GemmCase& c = f.c;
  const bool start = c.offsets_format == GroupOffsetsFormat::kStartOffsets;
  const int64_t g = c.groups();
  f.offsets = make_owned(c.offsets_dtype, {start ? g + 1 : g});
  int64_t acc = 0, idx = 0;
  auto put = [&](int64_t v) {
    if (c.offsets_dtype == DType::kInt64) {
      f.offsets.view.as<int64_t>()[idx++] = v;
    } else {
      f.offsets.view.as<int32_t>()[idx++] = static_cast<int32_t>(v);
    }
  };
  if (start) put(0);
  for (int64_t r : c.group_rows) put(acc += r);
}

}  // namespace

double d_value(const TensorView& d, int64_t i) { return load(d.dtype, d.data, i); }

GemmCase small_m_grouped_case(std::string name) {
  GemmCase c;
  c.name = std::move(name);
  c.group_rows = {3, 0, 5};
  c.extra_rows = 2;
  c.n = 8, c.k = 12;
  return c;
}

GemmFixture make_fixture(const GemmCase& c, uint32_t seed) {
  GemmFixture f;
  f.c = c;
  std::mt19937 rng(seed);
  const int64_t g = c.groups();
  int64_t total = 0;
  for (int64_t r : c.group_rows) total += r;
  const int64_t cap = total + c.extra_rows;
  switch (c.kind) {
    case GroupedGemmKind::kMGrouped:
      f.a = make_owned(c.in_dtype, {cap, c.k});
      f.b = c.transpose_b ? make_owned(c.in_dtype, {g, c.n, c.k}) : make_owned(c.in_dtype, {g, c.k, c.n});
      f.d = make_owned(c.out_dtype, {cap, c.n});
      fill(f.a, rng, total * c.k);
      fill(f.b, rng, f.b.view.numel());
      break;
    case GroupedGemmKind::kKGrouped:
      f.a = make_owned(c.in_dtype, {cap, c.m});
      f.b = make_owned(c.in_dtype, {cap, c.n});
      f.d = make_owned(c.out_dtype, {g, c.m, c.n});
      fill(f.a, rng, total * c.m);
      fill(f.b, rng, total * c.n);
      break;
    case GroupedGemmKind::kBatched:
      f.a = c.transpose_a ? make_owned(c.in_dtype, {g, c.k, c.m}) : make_owned(c.in_dtype, {g, c.m, c.k});
      f.b = c.transpose_b ? make_owned(c.in_dtype, {g, c.n, c.k}) : make_owned(c.in_dtype, {g, c.k, c.n});
      f.d = make_owned(c.out_dtype, {g, c.m, c.n});
      fill(f.a, rng, f.a.view.numel());
      fill(f.b, rng, f.b.view.numel());
      break;
  }
  if (c.beta != 0.0f) {
    fill(f.d, rng, f.d.view.numel());
  } else {
    std::fill(f.d.bytes.begin(), f.d.bytes.end(), kPoisonByte);
  }
  f.d_initial = f.d.bytes;
  if (c.bias) {
    f.bias = make_owned(c.in_dtype, {g, c.n});
    fill(f.bias, rng, f.bias.view.numel());
  }
  if (c.group_alpha) {
    f.group_alpha = make_owned(DType::kFloat32, {g});
    fill(f.group_alpha, rng, g, 0.5f, 2.0f);
  }
  if (c.kind != GroupedGemmKind::kBatched) make_offsets(f);

  GroupedGemmProblem& p = f.problem;
  p.kind = c.kind;
  p.num_groups = g;
  p.a = GemmOperand::from_dense(f.a.view);
  p.b = GemmOperand::from_dense(f.b.view);
  p.transpose_a = c.transpose_a;
  p.transpose_b = c.transpose_b;
  p.d = f.d.view;
  p.group_offsets = f.offsets.view;
  p.offsets_format = c.offsets_format;
  p.alpha = c.alpha;
  p.beta = c.beta;
  p.bias = f.bias.view;
  p.group_alpha = f.group_alpha.view;
  return f;
}

GemmFixture copy_of(const GemmFixture& f) {
  GemmFixture c = f;
  for (Owned* o : {&c.a, &c.b, &c.d, &c.bias, &c.offsets, &c.group_alpha}) {
    if (o->view.data != nullptr) o->view.data = o->bytes.data();
  }
  GroupedGemmProblem& p = c.problem;
  if (!p.a.is_quantized) p.a.dense = c.a.view;
  if (!p.b.is_quantized) p.b.dense = c.b.view;
  p.d = c.d.view;
  p.bias = c.bias.view;
  p.group_offsets = c.offsets.view;
  p.group_alpha = c.group_alpha.view;
  return c;
}

Expected loop_of_gemms(const GemmFixture& f) {
  const GemmCase& c = f.c;
  const int64_t g_count = c.groups(), n = c.n;
  const int64_t d_numel = f.d.view.numel();
  Expected e;
  e.value.resize(d_numel);
  e.abs_sum.assign(d_numel, 0.0);
  e.written.assign(d_numel, false);
  for (int64_t i = 0; i < d_numel; ++i) e.value[i] = load(c.out_dtype, f.d_initial.data(), i);
  const void* a = f.a.bytes.data();
  const void* b = f.b.bytes.data();
  int64_t start = 0;
  for (int64_t g = 0; g < g_count; ++g) {
    const int64_t rows = c.kind == GroupedGemmKind::kBatched ? 0 : c.group_rows[g];
    // This group's op(A_g) (mg, kg) and op(B_g) (kg, n), and where D_g row i starts.
    int64_t mg = 0, kg = 0, d_row0 = 0;
    std::vector<double> opa, opb;
    auto A = [&](int64_t i) { return load(c.in_dtype, a, i); };
    auto B = [&](int64_t i) { return load(c.in_dtype, b, i); };
    if (c.kind == GroupedGemmKind::kMGrouped) {
      mg = rows, kg = c.k, d_row0 = start;
    } else if (c.kind == GroupedGemmKind::kKGrouped) {
      mg = c.m, kg = rows, d_row0 = g * c.m;
    } else {
      mg = c.m, kg = c.k, d_row0 = g * c.m;
    }
    opa.resize(mg * kg);
    opb.resize(kg * n);
    for (int64_t i = 0; i < mg; ++i) {
      for (int64_t kk = 0; kk < kg; ++kk) {
        double v = 0;
        if (c.kind == GroupedGemmKind::kMGrouped) v = A((start + i) * c.k + kk);
        if (c.kind == GroupedGemmKind::kKGrouped) v = A((start + kk) * c.m + i);
        if (c.kind == GroupedGemmKind::kBatched) {
          v = c.transpose_a ? A((g * c.k + kk) * c.m + i) : A((g * c.m + i) * c.k + kk);
        }
        opa[i * kg + kk] = v;
      }
    }
    for (int64_t kk = 0; kk < kg; ++kk) {
      for (int64_t j = 0; j < n; ++j) {
        double v = 0;
        if (c.kind == GroupedGemmKind::kKGrouped) {
          v = B((start + kk) * n + j);
        } else {
          v = c.transpose_b ? B((g * n + j) * kg + kk) : B((g * kg + kk) * n + j);
        }
        opb[kk * n + j] = v;
      }
    }
    const double alpha =
        c.group_alpha ? double{c.alpha} * f.group_alpha.view.as<float>()[g] : double{c.alpha};
    for (int64_t i = 0; i < mg; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, acc_abs = 0;
        for (int64_t kk = 0; kk < kg; ++kk) {
          acc += opa[i * kg + kk] * opb[kk * n + j];
          acc_abs += std::fabs(opa[i * kg + kk] * opb[kk * n + j]);
        }
        const int64_t idx = (d_row0 + i) * n + j;
        const double bias = c.bias ? load(c.in_dtype, f.bias.bytes.data(), g * n + j) : 0.0;
        const double old = c.beta != 0.0f ? e.value[idx] : 0.0;
        e.value[idx] = alpha * acc + bias + old;
        e.abs_sum[idx] = std::fabs(alpha) * acc_abs + std::fabs(bias) + std::fabs(old);
        e.written[idx] = true;
      }
    }
    start += rows;
  }
  return e;
}

GemmTolerance gemm_tolerance(DType out_dtype, int64_t k) {
  const double u_out = format_info(out_dtype).unit_roundoff();
  const double u32 = format_info(DType::kFloat32).unit_roundoff();
  return {2.0 * u_out, static_cast<double>(k + 4) * u32};
}

std::string compare(const GemmFixture& f, const Expected& e, const GemmTolerance& tol) {
  const TensorView& d = f.d.view;
  const int64_t cols = d.shape[d.ndim - 1];
  for (int64_t i = 0; i < d.numel(); ++i) {
    if (!e.written[i]) continue;
    const double got = d_value(d, i);
    const double bound = tol.value_rel * std::fabs(e.value[i]) + tol.sum_rel * e.abs_sum[i];
    if (!(std::fabs(got - e.value[i]) <= bound)) {
      std::ostringstream os;
      os << f.c.name << ": D[" << i / cols << ", " << i % cols << "] = " << got << ", expected "
         << e.value[i] << " (|diff| " << std::fabs(got - e.value[i]) << " > bound " << bound
         << ")";
      return os.str();
    }
  }
  return "";
}

std::string check_untouched(const GemmFixture& f, const Expected& e) {
  const TensorView& d = f.d.view;
  const int64_t esize = dtype_bits(d.dtype) / 8;
  const int64_t cols = d.shape[d.ndim - 1];
  for (int64_t i = 0; i < d.numel(); ++i) {
    if (e.written[i]) continue;
    if (std::memcmp(f.d.bytes.data() + i * esize, f.d_initial.data() + i * esize,
                    static_cast<size_t>(esize)) != 0) {
      std::ostringstream os;
      os << f.c.name << ": D[" << i / cols << ", " << i % cols
         << "] was written but lies outside every group";
      return os.str();
    }
  }
  return "";
}

QuantizerConfig both_usages(ScalingMode mode, DType element, ScaleLayout layout) {
  QuantizerConfig c = make_config(mode, element);
  c.rowwise = true;
  c.columnwise = true;
  c.scale_layout = layout;
  return c;
}

std::vector<QuantRecipe> quantized_pairs() {
  using M = ScalingMode;
  const DType e5 = DType::kFloat8E5M2, f32 = DType::kFloat32;
  const ScaleLayout sw = ScaleLayout::kSwizzled;
  return {
      {"tensor", both_usages(M::kTensor), both_usages(M::kTensor)},
      {"tensor_e5m2_x_e4m3", both_usages(M::kTensor, e5), both_usages(M::kTensor)},
      {"rowwise", both_usages(M::kRowwise), both_usages(M::kRowwise)},
      {"block1x128_x_block128x128", both_usages(M::kBlock1x128), both_usages(M::kBlock128x128)},
      {"mxfp8", both_usages(M::kMXFP8), both_usages(M::kMXFP8)},
      {"mxfp8_e5m2_swizzled_x_32x32", both_usages(M::kMXFP8, e5, sw),
       both_usages(M::kMXFP8_32x32, f32, sw)},
      {"nvfp4_x_16x16", both_usages(M::kNVFP4), both_usages(M::kNVFP4_16x16)},
      {"nvfp4_swizzled", both_usages(M::kNVFP4, f32, sw), both_usages(M::kNVFP4, f32, sw)},
      {"mxfp8_x_nvfp4", both_usages(M::kMXFP8), both_usages(M::kNVFP4)},
      {"emulated_block1x128_x_rowwise", both_usages(M::kBlock1x128), both_usages(M::kRowwise)},
  };
}

}  // namespace tessera::test
