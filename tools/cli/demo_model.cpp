// The demo's MoE layer: router (top-k softmax over the selected logits, as Mixtral), token
// dispatch to experts, GroupedMLP experts scaled by the routing probabilities, combine; an FP32
// teacher of the same shape gives regression targets; Adam on FP32 master weights.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "demo_model.h"
#include "tessera/core/buffer.h"
#include "tessera/core/status.h"
#include "tessera/gemm/grouped_gemm.h"
#include "tessera/nn/grouped_mlp.h"

namespace tessera::cli::demo {
namespace {

using nn::GroupedMLP;

// Where each token's k slots go. Invariants: splits sums to B*k; rows are grouped by expert in
// ascending order; row_of[b*k + j] is the routed row of token b's slot j.
struct Routing {
  std::vector<int64_t> splits;     // (E)
  std::vector<int64_t> row_token;  // (T) token of each routed row
  std::vector<int64_t> row_of;     // (B*k)
  std::vector<int> expert;         // (B*k) selected expert of each slot
  std::vector<float> probs;        // (B*k) softmax over the selected logits
  std::vector<float> row_probs;    // (T)
};

// Router logits (b, e) = x (b, h) · wrᵀ on the host: tessera's grouped GEMM with one group (the
// CPU backend's BLAS), O(b·e·h) work on every core.
std::vector<float> router_logits(const std::vector<float>& x, const float* wr, int64_t b,
                                 int64_t h, int64_t e) {
  std::vector<float> logits(static_cast<size_t>(b * e));
  int64_t offsets[2] = {0, b};
  GroupedGemmProblem p;
  p.kind = GroupedGemmKind::kMGrouped;
  p.num_groups = 1;
  p.a = GemmOperand::from_dense(
      TensorView::contiguous(const_cast<float*>(x.data()), DType::kFloat32, {b, h}));
  p.b = GemmOperand::from_dense(
      TensorView::contiguous(const_cast<float*>(wr), DType::kFloat32, {1, e, h}));
  p.d = TensorView::contiguous(logits.data(), DType::kFloat32, {b, e});
  p.group_offsets = TensorView::contiguous(offsets, DType::kInt64, {2});
  grouped_gemm(p);
  return logits;
}

// Routing of b tokens: logits, then top-k and softmax token by token in parallel (the result
// does not depend on the thread count).
Routing route(const std::vector<float>& x, const float* wr, int64_t b, int64_t h, int64_t e,
              int64_t k) {
  Routing r;
  r.splits.assign(static_cast<size_t>(e), 0);
  r.expert.resize(static_cast<size_t>(b * k));
  r.probs.resize(static_cast<size_t>(b * k));
  const std::vector<float> all_logits = router_logits(x, wr, b, h, e);
#pragma omp parallel
  {
    std::vector<int> order(static_cast<size_t>(e));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < b; ++t) {
      const float* logits = all_logits.data() + t * e;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int c) {
        return logits[a] > logits[c] || (logits[a] == logits[c] && a < c);
      });
      const float top = logits[order[0]];
      double denom = 0;
      for (int64_t j = 0; j < k; ++j) denom += std::exp(double(logits[order[j]] - top));
      for (int64_t j = 0; j < k; ++j) {
        r.expert[t * k + j] = order[j];
        r.probs[t * k + j] = static_cast<float>(std::exp(double(logits[order[j]] - top)) / denom);
      }
    }
  }
  for (int64_t s = 0; s < b * k; ++s) ++r.splits[r.expert[s]];
  std::vector<int64_t> next(static_cast<size_t>(e), 0);
  for (int64_t j = 1; j < e; ++j) next[j] = next[j - 1] + r.splits[j - 1];
  r.row_token.resize(static_cast<size_t>(b * k));
  r.row_of.resize(static_cast<size_t>(b * k));
  r.row_probs.resize(static_cast<size_t>(b * k));
  for (int64_t s = 0; s < b * k; ++s) {
    const int64_t row = next[r.expert[s]]++;
    r.row_of[s] = row;
    r.row_token[row] = s / k;
    r.row_probs[row] = r.probs[s];
  }
  return r;
}

// dst row i = src row index[i] (rows of h floats), in parallel.
void gather_rows(const std::vector<float>& src, const std::vector<int64_t>& index, int64_t h,
                 std::vector<float>& dst) {
  const int64_t n = static_cast<int64_t>(index.size());
  dst.resize(static_cast<size_t>(n * h));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(src.begin() + index[i] * h, h, dst.begin() + i * h);
  }
}

// A float32 array on the layer's device. On the CPU it can alias host memory (no copies).
struct DeviceArray {
  Buffer buffer;
  float* data = nullptr;
  Device device = Device::cpu();
  DeviceArray(int64_t n, Device d) : device(d) {
    buffer = Buffer(static_cast<size_t>(std::max<int64_t>(n, 1) * 4), d);
    data = buffer.as<float>();
  }
  DeviceArray() = default;
  DeviceArray(float* host, Device d) : data(host), device(d) {}  // CPU alias
  TensorView view(std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(data, DType::kFloat32, shape, device);
  }
  void upload(const float* host, int64_t n) {
    if (n > 0 && host != data) copy_bytes(data, device, host, Device::cpu(), size_t(n) * 4);
  }
  void download(float* host, int64_t n) const {
    if (n > 0 && host != data) copy_bytes(host, Device::cpu(), data, device, size_t(n) * 4);
  }
};

// Plain Adam (beta 0.9 / 0.999, eps 1e-8) on a flat FP32 parameter vector.
struct Adam {
  std::vector<float> m, v;
  int64_t t = 0;
  void step(std::vector<float>& w, const std::vector<float>& g, float lr) {
    if (m.empty()) m.assign(w.size(), 0.0f), v.assign(w.size(), 0.0f);
    ++t;
    const float c1 = static_cast<float>(1 / (1 - std::pow(0.9, double(t))));
    const float c2 = static_cast<float>(1 / (1 - std::pow(0.999, double(t))));
    const int64_t n = static_cast<int64_t>(w.size());
    float* wp = w.data();
    float* mp = m.data();
    float* vp = v.data();
    const float* gp = g.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      mp[i] = 0.9f * mp[i] + 0.1f * gp[i];
      vp[i] = 0.999f * vp[i] + 0.001f * gp[i] * gp[i];
      wp[i] -= lr * (mp[i] * c1) / (std::sqrt(vp[i] * c2) + 1e-8f);
    }
  }
};

// Router + experts. All trainable parameters live in one flat host vector [router | fc1 | fc2]
// (Adam runs there) copied into the experts' master weights before each step; gradients land
// in a flat vector of the same layout (on the CPU the MLP writes them there directly).
class MoELayer {
 public:
  MoELayer(const DemoConfig& c, const Recipe& recipe, uint64_t seed, float scale)
      : c_(c), mlp_(c.experts, c.hidden, c.ffn, recipe, mlp_options(c)) {
    mlp_.reset_parameters(seed);
    n_router_ = c.experts * c.hidden;
    n_w1_ = mlp_.fc1().weight().numel();
    n_w2_ = mlp_.fc2().weight().numel();
    params_.resize(static_cast<size_t>(n_router_ + n_w1_ + n_w2_));
    grads_.assign(params_.size(), 0.0f);
    std::mt19937_64 rng(seed ^ 0xA5A5A5A5ull);
    std::normal_distribution<float> n01(0.0f, 1.0f / std::sqrt(float(c.hidden)));
    for (int64_t i = 0; i < n_router_; ++i) params_[i] = n01(rng) * scale;
    copy_bytes(params_.data() + n_router_, Device::cpu(), mlp_.fc1().weight().data, c.device,
               size_t(n_w1_) * 4);
    copy_bytes(params_.data() + n_router_ + n_w1_, Device::cpu(), mlp_.fc2().weight().data,
               c.device, size_t(n_w2_) * 4);
    for (size_t i = size_t(n_router_); i < params_.size(); ++i) params_[i] *= scale;
    push_weights();
    allocate_scratch();
  }

  // out (B, H) for x (B, H); with a target and `train`, also backpropagates the mean squared
  // error into gradients(). Returns the loss (0 without a target).
  double step(const std::vector<float>& x, const std::vector<float>* target,
              std::vector<float>& out, bool train, int64_t* saved_bytes);
  const std::vector<float>& gradients() const { return grads_; }
  void apply(float lr) {
    adam_.step(params_, grads_, lr);
    push_weights();
  }

 private:
  static nn::GroupedMLPOptions mlp_options(const DemoConfig& c) {
    nn::GroupedMLPOptions o;
    o.name = "moe";
    o.device = c.device;
    return o;
  }
  void push_weights() {
    copy_bytes(mlp_.fc1().weight().data, c_.device, params_.data() + n_router_, Device::cpu(),
               size_t(n_w1_) * 4);
    copy_bytes(mlp_.fc2().weight().data, c_.device, params_.data() + n_router_ + n_w1_,
               Device::cpu(), size_t(n_w2_) * 4);
  }
  void backward(const std::vector<float>& x, const Routing& r, nn::GroupedMLPContext& ctx,
                const std::vector<float>& dout);
  void router_backward(const std::vector<float>& x, const Routing& r,
                       const std::vector<float>& drow_probs);

  void allocate_scratch();

  DemoConfig c_;
  GroupedMLP mlp_;
  int64_t n_router_ = 0, n_w1_ = 0, n_w2_ = 0;
  std::vector<float> params_, grads_;
  Adam adam_;
  // Per-step arrays, allocated once (the row count is fixed): host copies of the routed tokens,
  // outputs and gradients, and their device arrays (on the CPU: aliases of the host ones, and
  // the weight gradients write straight into grads_).
  std::vector<float> xr_, yr_, dyr_, dout_, row_probs_, drow_probs_;
  DeviceArray xd_, pd_, yd_, dyd_, dpd_, dw1_, dw2_;
};

void MoELayer::allocate_scratch() {
  const int64_t rows = c_.tokens * c_.topk, h = c_.hidden;
  for (std::vector<float>* v : {&xr_, &yr_, &dyr_}) v->resize(static_cast<size_t>(rows * h));
  dout_.resize(static_cast<size_t>(c_.tokens * h));
  row_probs_.resize(static_cast<size_t>(rows));
  drow_probs_.resize(static_cast<size_t>(rows));
  const Device d = c_.device;
  float* g1 = grads_.data() + n_router_;
  if (d.is_cpu()) {
    xd_ = DeviceArray(xr_.data(), d), yd_ = DeviceArray(yr_.data(), d);
    dyd_ = DeviceArray(dyr_.data(), d), pd_ = DeviceArray(row_probs_.data(), d);
    dpd_ = DeviceArray(drow_probs_.data(), d);
    dw1_ = DeviceArray(g1, d), dw2_ = DeviceArray(g1 + n_w1_, d);
    return;
  }
  xd_ = DeviceArray(rows * h, d), yd_ = DeviceArray(rows * h, d), dyd_ = DeviceArray(rows * h, d);
  pd_ = DeviceArray(rows, d), dpd_ = DeviceArray(rows, d);
  dw1_ = DeviceArray(n_w1_, d), dw2_ = DeviceArray(n_w2_, d);
}

void MoELayer::router_backward(const std::vector<float>& x, const Routing& r,
                               const std::vector<float>& drow_probs) {
  const int64_t b = static_cast<int64_t>(r.row_of.size()) / c_.topk, k = c_.topk, h = c_.hidden;
  // d loss / d logit of each routed row: p (dp − Σ_j p_j dp_j) over the token's slots.
  std::vector<float> dlogit(r.row_of.size());
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < b; ++t) {
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      dot += double(r.probs[t * k + j]) * drow_probs[r.row_of[t * k + j]];
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = r.row_of[t * k + j];
      dlogit[row] = static_cast<float>(r.probs[t * k + j] * (drow_probs[row] - dot));
    }
  }
  // Rows are grouped by expert: one expert's router row per thread, rows in token order.
  std::vector<int64_t> start(static_cast<size_t>(c_.experts) + 1, 0);
  for (int64_t j = 0; j < c_.experts; ++j) start[j + 1] = start[j] + r.splits[j];
  float* dwr = grads_.data();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t j = 0; j < c_.experts; ++j) {
    float* row = dwr + j * h;
    std::fill(row, row + h, 0.0f);
    for (int64_t rr = start[j]; rr < start[j + 1]; ++rr) {
      const float dl = dlogit[rr];
      const float* xt = x.data() + r.row_token[rr] * h;
      for (int64_t c = 0; c < h; ++c) row[c] += dl * xt[c];
    }
  }
}

void MoELayer::backward(const std::vector<float>& x, const Routing& r, nn::GroupedMLPContext& ctx,
                        const std::vector<float>& dout) {
  const int64_t h = c_.hidden, rows = c_.tokens * c_.topk;
  gather_rows(dout, r.row_token, h, dyr_);  // (T, H)
  float* g1 = grads_.data() + n_router_;
  float* g2 = g1 + n_w1_;
  dyd_.upload(dyr_.data(), rows * h);
  nn::GroupedMLPGrads g;
  g.dprobs = dpd_.view({rows});
  g.fc1_dw = dw1_.view({c_.experts, 2 * c_.ffn, h});
  g.fc2_dw = dw2_.view({c_.experts, h, c_.ffn});
  mlp_.backward(ctx, dyd_.view({rows, h}), g);
  dpd_.download(drow_probs_.data(), rows);
  dw1_.download(g1, n_w1_);
  dw2_.download(g2, n_w2_);
  router_backward(x, r, drow_probs_);
}

double MoELayer::step(const std::vector<float>& x, const std::vector<float>* target,
                      std::vector<float>& out, bool train, int64_t* saved_bytes) {
  const int64_t b = c_.tokens, h = c_.hidden, k = c_.topk, rows = b * k;
  const Routing r = route(x, params_.data(), b, h, c_.experts, k);
  gather_rows(x, r.row_token, h, xr_);  // (T, H) routed tokens
  std::copy(r.row_probs.begin(), r.row_probs.end(), row_probs_.begin());
  xd_.upload(xr_.data(), rows * h);
  pd_.upload(row_probs_.data(), rows);
  const TensorView splits = TensorView::contiguous(const_cast<int64_t*>(r.splits.data()),
                                                   DType::kInt64, {c_.experts});
  const bool training = train && target != nullptr;
  nn::GroupedMLPContext ctx = mlp_.forward(xd_.view({rows, h}), splits, pd_.view({rows}),
                                           yd_.view({rows, h}), {training, true});
  yd_.download(yr_.data(), rows * h);
  out.assign(static_cast<size_t>(b * h), 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < b; ++t) {  // combine: the token's slots in slot order
    float* o = out.data() + t * h;
    for (int64_t j = 0; j < k; ++j) {
      const float* y = yr_.data() + r.row_of[t * k + j] * h;
      for (int64_t c = 0; c < h; ++c) o[c] += y[c];
    }
  }
  if (target == nullptr) return 0;
  double loss = 0;
  std::vector<float>& dout = dout_;  // d loss / d out
  const float* tg = target->data();
  const double scale = 2.0 / double(b * h);
#pragma omp parallel for schedule(static) reduction(+ : loss)
  for (int64_t i = 0; i < b * h; ++i) {
    const double d = double(out[i]) - tg[i];
    loss += d * d;
    dout[i] = static_cast<float>(scale * d);
  }
  loss /= double(b * h);
  if (!training) return loss;
  if (saved_bytes) *saved_bytes = ctx.saved_bytes();
  backward(x, r, ctx, dout);
  return loss;
}

// Batch `step` of the synthetic data stream (the same for every recipe): one random stream per
// token, so the rows are drawn in parallel and do not depend on the thread count.
std::vector<float> batch(const DemoConfig& c, int64_t step) {
  std::vector<float> x(static_cast<size_t>(c.tokens * c.hidden));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::seed_seq seq{c.seed, uint64_t(step), uint64_t(t)};
    std::mt19937_64 rng(seq);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    for (int64_t i = 0; i < c.hidden; ++i) x[t * c.hidden + i] = n01(rng);
  }
  return x;
}

// Gradients at the initial weights on the first `tokens` tokens of batch 0, from a layer of its
// own (calibrated on the same tokens first, as the training run is).
GradientSnapshot probe_gradients(const DemoConfig& config, const DemoData& data,
                                 const Recipe& recipe, int64_t tokens) {
  DemoConfig pc = config;
  pc.tokens = tokens;
  const size_t n = static_cast<size_t>(tokens * config.hidden);
  const std::vector<float> x(data.x.front().begin(), data.x.front().begin() + n);
  const std::vector<float> target(data.target.front().begin(), data.target.front().begin() + n);
  MoELayer probe(pc, recipe, config.seed + 2, 1.0f);
  std::vector<float> out;
  if (recipe.quantized()) probe.step(x, &target, out, true, nullptr);
  probe.step(x, &target, out, true, nullptr);
  return probe.gradients();
}

}  // namespace

double sqnr_db(const std::vector<float>& ref, const std::vector<float>& test) {
  TESSERA_CHECK(ref.size() == test.size(), "sqnr_db: sizes differ");
  double s = 0, n = 0;
  const int64_t size = static_cast<int64_t>(ref.size());
#pragma omp parallel for schedule(static) reduction(+ : s, n)
  for (int64_t i = 0; i < size; ++i) {
    const double d = double(ref[i]) - test[i];
    s += double(ref[i]) * ref[i];
    n += d * d;
  }
  if (n == 0) return INFINITY;
  return 10.0 * std::log10(s / n);
}

double train_flops_per_token(const DemoConfig& c) {
  // Forward fc1 (2·ffn × hidden) and fc2 (hidden × ffn) per routed row, 2 flops per MAC;
  // backward twice the forward; plus the router (experts × hidden, forward and backward).
  const double mlp = 2.0 * (2.0 * double(c.ffn) * double(c.hidden) + double(c.hidden) * double(c.ffn));
  return 3.0 * mlp * double(c.topk) + 4.0 * double(c.experts) * double(c.hidden);
}

DemoData make_demo_data(const DemoConfig& config) {
  // FP32 on the CPU; on CUDA BF16 GEMMs on the device (the CUDA GEMM takes no FP32 operands,
  // and an FP32 teacher on the host would cost as much as training).
  const std::shared_ptr<Recipe> recipe = make_demo_recipe(config.device.is_cpu() ? "fp32" : "bf16");
  MoELayer teacher(config, *recipe, config.seed + 1, 1.0f);
  DemoData d;
  for (int64_t s = 0; s < config.steps; ++s) {
    d.x.push_back(batch(config, s));
    d.target.emplace_back();
    teacher.step(d.x.back(), nullptr, d.target.back(), false, nullptr);
  }
  return d;
}

RecipeRun train_recipe(const DemoConfig& config, const DemoData& data, const std::string& name,
                       const Recipe& recipe, const RunPlan& plan, ProgressFn progress,
                       void* user) {
  TESSERA_CHECK(plan.steps <= config.steps && plan.probe_tokens <= config.tokens,
                "train_recipe: the plan exceeds the data");
  RecipeRun run;
  run.name = name;
  const bool probe_is_step0 = plan.probe_tokens == config.tokens && plan.steps > 0;
  if (!probe_is_step0) run.probe_grads = probe_gradients(config, data, recipe, plan.probe_tokens);
  if (plan.steps == 0) return run;
  MoELayer student(config, recipe, config.seed + 2, 1.0f);
  std::vector<double> times;
  std::vector<float> out;
  // Calibration pass on the first batch (gradients discarded): delayed scaling starts from real
  // amax values instead of its initial scale of 1, as after a few steps of any real run. A
  // recipe without quantizers keeps no state: nothing to calibrate.
  if (recipe.quantized()) student.step(data.x.front(), &data.target.front(), out, true, nullptr);
  for (int64_t s = 0; s < plan.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = student.step(data.x[static_cast<size_t>(s)],
                                     &data.target[static_cast<size_t>(s)], out, true,
                                     s == 0 ? &run.saved_bytes : nullptr);
    if (s == 0 && probe_is_step0) run.probe_grads = student.gradients();
    student.apply(config.lr);
    const auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    run.losses.push_back(loss);
    if (progress) progress(user, s, loss);
  }
  const size_t tail = std::min<size_t>(10, run.losses.size());
  for (size_t i = run.losses.size() - tail; i < run.losses.size(); ++i) {
    run.final_loss += run.losses[i];
  }
  run.final_loss /= double(std::max<size_t>(tail, 1));
  std::sort(times.begin(), times.end());
  run.step_ms = times.empty() ? 0 : times[times.size() / 2];
  return run;
}

}  // namespace tessera::cli::demo
