// The CPU backend's oneDNN matmul runs (see bf16_gemm.h for the contract and the work split): the
// native BF16 path, and the FP32 path's GEMMs over the FP32 images of the operands. Every task is
// one matmul primitive over a strided view of the operands (no copies). The primitives are kept
// by their descriptor (shape, strides, output type, sum post-op), so a
// repeated step neither re-describes nor recompiles anything: a primitive descriptor costs tens
// of microseconds of host time even when oneDNN's own primitive cache then finds its kernel. Only the sum post-op is used (the same call in oneDNN 2.x and 3.x; the 3.x branch of
// matmul_desc is written to 3.x's API but only 2.6 has been compiled here).
#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <oneapi/dnnl/dnnl.hpp>

#include "core/host_bytes.h"
#include "gemm/cpu/bf16_gemm.h"
#include "tessera/core/dispatch.h"

namespace tessera::detail::cpu {
namespace {

using dnnl::memory;

// Rows of D per task: at most kTaskRows, halved down to kMinTaskRows while the tasks are too few
// or too uneven for the threads (make_tasks). Bigger tasks pack each B_g fewer times (oneDNN
// packs B per call) and keep K-grouped tasks on dense views (a whole D_g; a row slice of the
// transposed A is a strided view, which oneDNN 2.6 runs with gemm:jit instead of brg): 1024 vs
// 256 measured 1.00x vs 0.99x torch (wgrad, median of 29 same-run ratios), forward equal.
constexpr int64_t kTaskRows = 1024;
constexpr int64_t kMinTaskRows = 64;
constexpr int64_t kTasksPerThread = 4;
// Multiply-adds per thread, at least (~0.4 ms of one core): a smaller problem runs on the caller
// alone, since a team's closing barrier can wait a whole scheduler time slice (4-8 ms measured
// on the loaded 2-core machine) for a member another process keeps off its core.
constexpr int64_t kMinWorkPerThread = int64_t{1} << 25;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// AVX512-BF16 (CPUID.(7,1):EAX[5]) or AMX-BF16 (CPUID.(7,0):EDX[22]).
bool cpu_has_bf16_dot() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 5)) != 0) return true;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (d & (1u << 22)) != 0;
#else
  return false;
#endif
}

dnnl::matmul::primitive_desc matmul_desc(const memory::desc& a, const memory::desc& b,
                                         const memory::desc& d, const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(cpu_engine(), a, b, d, attr);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, d), attr, cpu_engine());
#endif
}

// What a matmul primitive of a task is made from: op(A) (rows, k) and op(B) (k, n), BF16 or FP32
// (f32_in), with their strides, D (rows, n) row-major, FP32 or BF16, with or without the sum
// post-op.
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                             bool, bool>;

memory::data_type in_type(bool f32_in) {
  return f32_in ? memory::data_type::f32 : memory::data_type::bf16;
}

// The matmul primitive of `key`, made once per thread: a primitive runs any data pointers, but
// one primitive object must not run on two threads at once (oneDNN 2.6's matmul shares its
// scratchpad between the runs of one object: concurrent tasks of one shape gave wrong sums), so
// every thread of the team keeps its own. At most kMaxMatmuls are kept per thread: past that the
// table starts over (a workload of ever-new shapes re-makes primitives as before, no worse).
constexpr size_t kMaxMatmuls = 1024;
const dnnl::matmul& cached_matmul(const MatmulKey& key) {
  thread_local std::map<MatmulKey, dnnl::matmul> table;
  const auto it = table.find(key);
  if (it != table.end()) return it->second;
  const auto [rows, k, n, a_row, a_col, b_row, b_col, f32_out, sum, f32_in] = key;
  const memory::desc a_md({rows, k}, in_type(f32_in), {a_row, a_col});
  const memory::desc b_md({k, n}, in_type(f32_in), {b_row, b_col});
  const memory::desc d_md({rows, n},
                          f32_out ? memory::data_type::f32 : memory::data_type::bf16, {n, 1});
  dnnl::primitive_attr attr;
  if (sum) {  // D += A·B (beta = 1 needs an FP32 D)
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul made(matmul_desc(a_md, b_md, d_md, attr));
  if (table.size() >= kMaxMatmuls) table.clear();
  return table.emplace(key, made).first->second;
}

// B_g of an M-grouped or batched problem: (G, N, K) when transpose_b, else (G, K, N).
void set_weight_block(const GroupedGemmProblem& p, int64_t g, int64_t n, int64_t k,
                      GroupBlock& blk) {
  blk.b = p.b.dense.as<bf16>() + g * n * k;
  blk.b_row = p.transpose_b ? 1 : n;
  blk.b_col = p.transpose_b ? k : 1;
}

// a_start: the row starts of A's groups (M-grouped; a_row_starts or = start).
GroupBlock group_block(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                       const std::vector<int64_t>& start, const std::vector<int64_t>& a_start,
                       int64_t g) {
  const auto* a = p.a.dense.as<bf16>();
  const int64_t n = dims.n;
  GroupBlock blk;
  switch (p.kind) {
    case GroupedGemmKind::kMGrouped:  // A rows grouped (own layout with a_row_starts); D (T, N)
      blk.m = start[g + 1] - start[g], blk.k = dims.k;
      blk.a = a + a_start[g] * dims.k, blk.a_row = dims.k, blk.a_col = 1;
      set_weight_block(p, g, n, dims.k, blk);
      blk.d_offset = start[g] * n;
      break;
    case GroupedGemmKind::kKGrouped:  // A (T, M) and B (T, N) rows grouped, read as A_gᵀ B_g
      blk.m = dims.m, blk.k = start[g + 1] - start[g];
      blk.a = a + start[g] * dims.m, blk.a_row = 1, blk.a_col = dims.m;
      blk.b = p.b.dense.as<bf16>() + start[g] * n, blk.b_row = n, blk.b_col = 1;
      blk.d_offset = g * dims.m * n;
      break;
    case GroupedGemmKind::kBatched:  // A (G, M, K) or (G, K, M); D (G, M, N)
      blk.m = dims.m, blk.k = dims.k;
      blk.a = a + g * dims.m * dims.k;
      blk.a_row = p.transpose_a ? 1 : dims.k;
      blk.a_col = p.transpose_a ? dims.m : 1;
      set_weight_block(p, g, n, dims.k, blk);
      blk.d_offset = g * dims.m * n;
      break;
  }
  return blk;
}

struct Task {
  int64_t g = 0, row0 = 0, rows = 0;  // rows [row0, row0 + rows) of D_g
};

std::vector<Task> make_tasks(const std::vector<GroupBlock>& blocks, int64_t n, int64_t threads) {
  std::vector<Task> tasks;
  if (n == 0) return tasks;
  // Enough tasks with work, and none above 1/(kTasksPerThread·threads) of the work: taken
  // largest first, the threads then finish within about one small task of each other.
  int64_t total = 0;
  for (const GroupBlock& b : blocks) total += b.m * b.k;
  const int64_t want = kTasksPerThread * threads;
  auto balances = [&](int64_t rows) {
    int64_t count = 0, biggest = 0;
    for (const GroupBlock& b : blocks) {
      if (b.k == 0) continue;  // a zero fill, next to nothing
      count += (b.m + rows - 1) / rows;
      biggest = std::max(biggest, std::min(rows, b.m) * b.k);
    }
    return count >= want && biggest * want <= total;
  };
  int64_t rows = kTaskRows;
  while (rows > kMinTaskRows && !balances(rows)) rows /= 2;
  for (int64_t g = 0; g < static_cast<int64_t>(blocks.size()); ++g) {
    for (int64_t r = 0; r < blocks[g].m; r += rows) {
      tasks.push_back({g, r, std::min(rows, blocks[g].m - r)});
    }
  }
  // Largest first (rows × k), so the last tasks taken are the short ones.
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& x, const Task& y) {
    return x.rows * blocks[x.g].k > y.rows * blocks[y.g].k;
  });
  return tasks;
}

struct RunContext {
  const GroupedGemmProblem& p;
  int64_t n = 0;
  std::vector<GroupBlock> blocks;
  float* staging = nullptr;  // FP32, D's layout; null when oneDNN writes D itself
  bool f32_in = false;       // the blocks' elements: FP32 (the FP32 path's images) or BF16
  const GroupImagesB* b_images = nullptr;  // B made per group (the FP32 path), or null
  uint64_t call = 0;                       // this run's number (the per-thread B buffers)
};

// B_g's image for a task of group g (GroupImagesB): this thread's buffer, refilled unless it
// already holds group g of this call.
const float* group_image_b(const RunContext& c, int64_t g) {
  thread_local std::vector<float> image;
  thread_local uint64_t held_call = 0;
  thread_local int64_t held_group = -1;
  const GroupImagesB& b = *c.b_images;
  if (held_call != c.call || held_group != g) {
    held_call = 0;  // invalid while refilled (an exception leaves it so)
    const int64_t r0 = g * b.rows;
    if (b.plan.transposed()) {  // the group's logical rows are stored columns
      image.resize(static_cast<size_t>(b.rows * b.plan.stored_rows()));
      b.plan.block(0, b.plan.stored_rows(), r0, r0 + b.rows, image.data());
    } else {
      image.resize(static_cast<size_t>(b.rows * b.plan.stored_cols()));
      b.plan.rows(r0, r0 + b.rows, image.data());
    }
    held_call = c.call, held_group = g;
  }
  return image.data();
}

float group_alpha(const GroupedGemmProblem& p, int64_t g) {
  return p.group_alpha.data == nullptr ? p.alpha : p.alpha * p.group_alpha.as<float>()[g];
}

// D rows [d0, d0 + rows·n) = alpha_g · acc + bias_g + beta · D, rounded to D's dtype; acc is the
// FP32 product at the same offsets, or null for an empty contraction (a zero product).
void staged_epilogue(const GroupedGemmProblem& p, int64_t g, const float* acc, int64_t d0,
                     int64_t rows, int64_t n) {
  std::vector<float> bias(static_cast<size_t>(n), 0.0f);
  if (p.bias.data != nullptr) {
    dispatch_float_input(p.bias.dtype, "bias", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = p.bias.as<T>() + g * n;
      for (int64_t j = 0; j < n; ++j) bias[j] = to_float(src[j]);
    });
  }
  const float alpha = group_alpha(p, g);
  const bool add_d = p.beta != 0.0f;
  dispatch_float_input(p.d.dtype, "D", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Row by row (bias[j] without a division per element, a loop the compiler vectorizes).
    for (int64_t r = 0; r < rows; ++r) {
      T* d = p.d.as<T>() + d0 + r * n;
      const float* a = acc != nullptr ? acc + r * n : nullptr;
      for (int64_t j = 0; j < n; ++j) {
        float v = (a != nullptr ? alpha * a[j] : 0.0f) + bias[j];
        if (add_d) v += to_float(d[j]);
        d[j] = from_float<T>(v);
      }
    }
  });
}

// One task: a matmul into D (or the staging area), then our epilogue when staged.
void run_task(const RunContext& c, const Task& t, dnnl::stream& stream) {
  const GroupedGemmProblem& p = c.p;
  const GroupBlock& blk = c.blocks[t.g];
  const int64_t n = c.n, d0 = blk.d_offset + t.row0 * n;
  const bool staged = c.staging != nullptr;
  if (blk.k > 0) {
    const bool f32_out = staged || p.d.dtype == DType::kFloat32;
    const dnnl::matmul& matmul =
        cached_matmul({t.rows, blk.k, n, blk.a_row, blk.a_col, blk.b_row, blk.b_col, f32_out,
                       !staged && p.beta != 0.0f, c.f32_in});
    const memory::desc a_md({t.rows, blk.k}, in_type(c.f32_in), {blk.a_row, blk.a_col});
    const memory::desc b_md({blk.k, n}, in_type(c.f32_in), {blk.b_row, blk.b_col});
    const memory::desc d_md({t.rows, n},
                            f32_out ? memory::data_type::f32 : memory::data_type::bf16, {n, 1});
    void* d_ptr = staged ? static_cast<void*>(c.staging + d0)
                         : static_cast<void*>(static_cast<char*>(p.d.data) +
                                              d0 * (f32_out ? 4 : 2));
    const int64_t elem = c.f32_in ? 4 : 2;
    const char* a = static_cast<const char*>(blk.a) + t.row0 * blk.a_row * elem;
    memory a_mem(a_md, cpu_engine(), const_cast<char*>(a));
    const void* b = c.b_images != nullptr ? group_image_b(c, t.g) : blk.b;
    memory b_mem(b_md, cpu_engine(), const_cast<void*>(b));
    memory d_mem(d_md, cpu_engine(), d_ptr);
    matmul.execute(stream,
                   {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, d_mem}});
    stream.wait();
  }
  if (staged) {
    staged_epilogue(p, t.g, blk.k > 0 ? c.staging + d0 : nullptr, d0, t.rows, n);
  } else if (blk.k == 0 && p.beta == 0.0f) {  // an empty contraction writes +0
    host_zero_bytes(static_cast<char*>(p.d.data) + d0 * dtype_bytes(p.d.dtype, 1),
                    static_cast<size_t>(dtype_bytes(p.d.dtype, t.rows * n)));
  }
}

void run_task_checked(const RunContext& c, const Task& t, dnnl::stream& stream) {
  try {
    run_task(c, t, stream);
  } catch (const dnnl::error& e) {
    TESSERA_FAIL(Status::kInternal, "oneDNN ", c.f32_in ? "FP32" : "BF16", " matmul (group ",
                 t.g, ", rows ", t.row0, "+", t.rows, "): ", e.what());
  }
}

// Sets this thread's OpenMP nthreads to 1 for one scope, so oneDNN runs on it alone.
class SingleThreadedOpenMp {
 public:
  SingleThreadedOpenMp() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~SingleThreadedOpenMp() { omp_set_num_threads(saved_); }
  SingleThreadedOpenMp(const SingleThreadedOpenMp&) = delete;
  SingleThreadedOpenMp& operator=(const SingleThreadedOpenMp&) = delete;

 private:
  int saved_;
};

// The tasks on an OpenMP team of `threads`, each member running oneDNN on itself alone; with
// one task, on the caller with oneDNN's own threads; with one thread, on the caller alone.
//
// Why OpenMP: it is the pool oneDNN and torch already use, so its threads are the ones awake
// after torch's (or oneDNN's) last parallel region. libgomp workers spin for a while after a
// region; threads of our own (fresh per call, or a persistent blocking pool: both measured) then
// competed with those spinning workers and ran at 0.92x torch._grouped_mm on the idle 2-core
// machine of bench/results/2026-11-24-cpu-bf16.md, against 1.00x for the team. The FP32 path's
// blocking threads (blocking_parallel.h) are there for the mirror case, OpenMP next to OpenBLAS's
// pool; this path calls no OpenBLAS.
void run_tasks(const RunContext& c, const std::vector<Task>& tasks, int64_t threads) {
  if (tasks.size() == 1) {
    dnnl::stream stream(cpu_engine());
    run_task_checked(c, tasks[0], stream);
    return;
  }
  int64_t work = 0;
  for (const Task& t : tasks) work += t.rows * c.n * c.blocks[t.g].k;
  threads = std::min({threads, static_cast<int64_t>(tasks.size()),
                      std::max<int64_t>(1, work / kMinWorkPerThread)});
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto take_tasks = [&] {
    const SingleThreadedOpenMp single;
    try {
      dnnl::stream stream(cpu_engine());
      for (size_t i = next++; i < tasks.size(); i = next++) run_task_checked(c, tasks[i], stream);
    } catch (...) {  // nothing may leave an OpenMP region
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = tasks.size();
    }
  };
  if (threads <= 1) {
    take_tasks();
  } else {
#pragma omp parallel num_threads(static_cast<int>(threads))
    take_tasks();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

bool built_with_onednn() { return true; }

Bf16Support probe_bf16_support() {
  if (!cpu_has_bf16_dot()) return {false, "the CPU has no AVX512-BF16 or AMX-BF16"};
  const dnnl_version_t* v = dnnl_version();
  const std::string version = "onednn " + std::to_string(v->major) + "." +
                              std::to_string(v->minor) + "." + std::to_string(v->patch);
  try {
    const auto bf16_t = memory::data_type::bf16;
    const memory::desc a({64, 64}, bf16_t, memory::format_tag::ab);
    const memory::desc d({64, 64}, memory::data_type::f32, memory::format_tag::ab);
    const std::string impl = matmul_desc(a, a, d, dnnl::primitive_attr()).impl_info_str();
    if (impl.rfind("brg", 0) != 0) {
      return {false, version + " picks " + impl + ", not a native BF16 kernel"};
    }
    return {true, version + " " + impl};
  } catch (const dnnl::error& e) {
    return {false, version + ": " + e.what()};
  }
}

void grouped_gemm_bf16_onednn(const GroupedGemmProblem& p, const GroupedGemmDims& dims,
                              const std::vector<int64_t>& start,
                              const std::vector<int64_t>& a_start, float* staging) {
  RunContext c{p, dims.n, {}, staging, false};
  c.blocks.reserve(static_cast<size_t>(dims.groups));
  for (int64_t g = 0; g < dims.groups; ++g)
    c.blocks.push_back(group_block(p, dims, start, a_start, g));
  const int64_t threads = std::max(1, omp_get_max_threads());
  run_tasks(c, make_tasks(c.blocks, dims.n, threads), threads);
}

void grouped_gemm_fp32_onednn(const GroupedGemmProblem& p, int64_t n,
                              std::vector<GroupBlock> blocks, float* staging,
                              const GroupImagesB* b_images) {
  static std::atomic<uint64_t> calls{0};
  RunContext c{p, n, std::move(blocks), staging, true, b_images, ++calls};
  const int64_t threads = std::max(1, omp_get_max_threads());
  run_tasks(c, make_tasks(c.blocks, n, threads), threads);
}

}  // namespace tessera::detail::cpu
