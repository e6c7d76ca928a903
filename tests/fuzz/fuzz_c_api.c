/* A bounded random-call fuzzer of the C API, in plain C: codecs (sized and unchecked forms),
 * quantizers (configs, recipes, buffer sizes, quantize, dequantize, update), grouped GEMM
 * problems (create, set_*, can_implement, workspace_size, run; outputs aliasing inputs:
 * fuzz_c_api_gemm.c), the expert-parallel routing ops (fuzz_c_api_moe.c) and handle misuse
 * (fuzz_c_api_handles.c), with sizes drawn from 0 to INT64_MAX (powers of two +-1,
 * INT64_MAX - small, negatives, INT64_MIN), int flags and enums outside their range, and
 * consistent small problems mutated one field at a time.
 *
 * The caller is honest where the API trusts it: every buffer it passes is allocated with the
 * byte size it claims, and the calls whose memory extent the API cannot check (tessera_encode /
 * tessera_decode, the x/out of quantize/dequantize, GEMM tensors, routing buffers) get buffers
 * that cover what their sizes say — or, when they would not fit, sizes the library must refuse
 * before touching memory. Handles are misused only where the library's magic word makes it
 * defined: a handle used or destroyed again right after its destroy (before a create could
 * reuse its memory), a handle of the other type, a pointer to readable memory that is no
 * handle. Everything else is left to the library, which must answer with a status, never a
 * crash, hang or sanitizer report (build with -DTESSERA_SANITIZE=ON).
 *
 * Checked invariants (a violation is a finding): every status is a tessera_status value; a
 * failure leaves a non-empty tessera_last_error(), a success an empty one; sizes reported OK are
 * >= 0 and come from shapes whose element count fits int64; an OK sized codec call had buffers
 * large enough; a call given a flag outside {0, 1}, an enum outside its range or a capacity
 * below -1 fails; a GEMM whose output is its input (same address, both non-empty) is refused;
 * num_tokens x top_k past int64 is refused; a destroyed or wrong handle is refused.
 *
 * Usage: fuzz_c_api [calls (default 20000)] [seed (default 1)]. Exit status 0 = no finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_c_api.h"

static uint64_t g_state = 1;
static long long g_calls = 0, g_findings = 0;
static long long g_status_count[16];
static long long g_quantized = 0, g_dequantized = 0;
long long g_gemm_runs = 0, g_moe_runs = 0, g_aliased_refused = 0, g_misuse_refused = 0;

uint64_t rnd(void) {
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return g_state * 2685821657736338717ULL;
}
int64_t rnd_below(int64_t n) { return n <= 0 ? 0 : (int64_t)(rnd() % (uint64_t)n); }
int chance(int percent) { return rnd_below(100) < percent; }

int64_t rand_size(void) {
  switch (rnd_below(12)) {
    case 0: return 0;
    case 1: return rnd_below(4);
    case 2: return rnd_below(40);
    case 3: return rnd_below(300);
    case 4: return rnd_below(5000);
    case 5: return ((int64_t)1 << rnd_below(63)) + rnd_below(3) - 1;
    case 6: return INT64_MAX - rnd_below(200);
    case 7: return (int64_t)(rnd() >> 1);
    case 8: return (int64_t)1 << (31 + rnd_below(3));
    case 9: return chance(50) ? -1 - rnd_below(3) : INT64_MIN + rnd_below(2);
    default: return 1 + rnd_below(64);
  }
}

int32_t rand_dtype(void) {
  if (chance(5)) return chance(50) ? -1 : 11 + (int32_t)rnd_below(100);
  return (int32_t)rnd_below(11);
}

int dtype_bits(int32_t dt) {
  switch (dt) {
    case TESSERA_DTYPE_FLOAT64: case TESSERA_DTYPE_INT64: return 64;
    case TESSERA_DTYPE_FLOAT32: case TESSERA_DTYPE_INT32: return 32;
    case TESSERA_DTYPE_BFLOAT16: case TESSERA_DTYPE_FLOAT16: return 16;
    case TESSERA_DTYPE_E2M1: return 4;
    default: return 8;
  }
}

tessera_device rand_device(void) {
  tessera_device d = {0, 0};
  if (chance(3)) d.device_type = 1;                 /* CUDA: no device in a CPU build */
  if (chance(2)) d.device_type = (int32_t)rnd();    /* garbage */
  if (chance(2)) d.device_index = -1 - (int32_t)rnd_below(5);
  return d;
}

/* Values outside {0, 1} / outside [0, count) that an int32 argument may carry. */
static int32_t out_of_range(int32_t count) {
  switch (rnd_below(5)) {
    case 0: return -1;
    case 1: return count;
    case 2: return count + 1 + (int32_t)rnd_below(100);
    case 3: return INT32_MIN;
    default: return INT32_MAX;
  }
}

int32_t rand_flag(int percent, int* valid) { return rand_enum(2, percent, valid); }

int32_t rand_enum(int32_t count, int percent, int* valid) {
  if (!chance(percent)) return (int32_t)rnd_below(count);
  *valid = 0;
  return out_of_range(count);
}

void finding(const char* what, int status) {
  ++g_findings;
  fprintf(stderr, "FINDING after %lld calls: %s (status %d, last error: '%s')\n", g_calls, what,
          status, tessera_last_error());
}

tessera_status note(tessera_status s) {
  const char* msg = tessera_last_error();
  ++g_calls;
  if ((int)s < 0 || (int)s > TESSERA_STATUS_INTERNAL) {
    finding("status outside tessera_status", (int)s);
    return s;
  }
  ++g_status_count[s];
  if (s == TESSERA_STATUS_INTERNAL) finding("internal error (a bug by definition)", (int)s);
  if (s != TESSERA_STATUS_OK && msg[0] == '\0') finding("failure without a message", (int)s);
  if (s == TESSERA_STATUS_OK && msg[0] != '\0') finding("success with a stale message", (int)s);
  return s;
}

tessera_status refused(tessera_status s, const char* what) {
  if (s == TESSERA_STATUS_OK) finding(what, (int)s);
  return s;
}

void* arena_alloc(Arena* a, int64_t bytes) {
  unsigned char* p;
  int64_t i;
  if (a->n == (int)(sizeof a->p / sizeof a->p[0])) return NULL;
  p = (unsigned char*)malloc((size_t)(bytes > 0 ? bytes : 1));
  if (p == NULL) abort();
  for (i = 0; i < bytes; ++i) p[i] = (unsigned char)rnd();
  a->p[a->n++] = p;
  return p;
}
void arena_free(Arena* a) {
  while (a->n > 0) free(a->p[--a->n]);
}

/* Elements of dt that fit in `bytes`. */
static int64_t fitting(int32_t dt, int64_t bytes) { return bytes * 8 / dtype_bits(dt); }

/* ---- codecs ------------------------------------------------------------------------------ */
static void fuzz_codec(void) {
  Arena a = {{0}, 0};
  const int32_t sdt = chance(70) ? (int32_t)rnd_below(3) : rand_dtype();
  const int32_t ddt = rand_dtype();
  const int64_t sb = rnd_below(kCap / 4), db = rnd_below(kCap / 4);
  void* src = chance(3) ? NULL : arena_alloc(&a, sb);
  void* dst = chance(3) ? NULL : arena_alloc(&a, db);
  const tessera_device dev = chance(90) ? (tessera_device){0, 0} : rand_device();
  int64_t numel = chance(50) ? rand_size() : rnd_below(fitting(ddt, db) + 2);
  tessera_status s;
  s = note(tessera_encode_sized(src, src ? sb : 0, sdt, dst, dst ? db : 0, ddt, numel, dev, NULL));
  if (s == TESSERA_STATUS_OK && (numel > fitting(sdt, sb) || numel > fitting(ddt, db)))
    finding("encode_sized succeeded with buffers too small", s);
  s = note(tessera_decode_sized(dst, dst ? db : 0, ddt, (float*)src, src ? sb : 0, numel, dev,
                                NULL));
  if (s == TESSERA_STATUS_OK && (numel > fitting(ddt, db) || numel > sb / 4))
    finding("decode_sized succeeded with buffers too small", s);
  /* The unchecked forms, with an honest numel. */
  numel = src && dst ? rnd_below(1 + (fitting(sdt, sb) < fitting(ddt, db) ? fitting(sdt, sb)
                                                                          : fitting(ddt, db)))
                     : 0;
  note(tessera_encode(src, sdt, dst, ddt, numel, dev, NULL));
  numel = src && dst ? rnd_below(1 + (fitting(ddt, db) < sb / 4 ? fitting(ddt, db) : sb / 4)) : 0;
  note(tessera_decode(dst, ddt, (float*)src, numel, dev, NULL));
  if (tessera_status_string((int32_t)rnd()) == NULL) finding("status string NULL", 0);
  arena_free(&a);
}

/* ---- quantizers -------------------------------------------------------------------------- */
static const char* const kRecipes[] = {
    "mxfp8", "nvfp4", "fp8_current", "fp8_current:e5m2", "fp8_delayed", "fp8_rowwise",
    "fp8_block", "fp8_delayed:e4m3", "mxfp8:e5m2", "", "bogus", "nvfp4:e4m3", ":", "fp8_block:"};

static tessera_quantizer make_quantizer(void) {
  tessera_quantizer q = NULL;
  const tessera_device dev = chance(95) ? (tessera_device){0, 0} : rand_device();
  if (chance(30)) {
    const char* r = kRecipes[rnd_below(sizeof kRecipes / sizeof kRecipes[0])];
    int valid = 1;
    const int32_t type = rand_enum(6, 5, &valid);
    const tessera_status s =
        note(tessera_quantizer_create_from_recipe(chance(2) ? NULL : r, type, dev, &q));
    if (!valid) refused(s, "create_from_recipe took a tensor_type out of range");
    return q;
  }
  {
    tessera_quantizer_config c;
    int valid = 1;
    tessera_status s;
    memset(&c, 0, sizeof c);
    if (note(tessera_quantizer_config_default((int32_t)rnd_below(11) - 1, &c)) != TESSERA_STATUS_OK)
      return NULL;
    c.rowwise = chance(70);
    c.columnwise = chance(50);
    if (chance(30)) c.scale_layout = rand_enum(2, 20, &valid);
    if (c.mode == TESSERA_SCALING_TENSOR && chance(30)) {
      c.delayed = 1;
      c.amax_history_len = (int32_t)rnd_below(6);
    }
    if (chance(10)) c.element = rand_dtype();
    if (chance(10)) c.margin = (int32_t)rnd_below(300) - 150;
    if (chance(10)) c.amax_epsilon = chance(50) ? -1.0f : (float)rnd_below(3) * 0.01f;
    if (chance(10)) c.random_hadamard = 1;
    if (chance(10)) c.stochastic_rounding = 1;
    if (chance(5)) c.e8m0_rounding = rand_enum(2, 50, &valid);
    if (chance(5)) c.amax_algo = rand_enum(2, 50, &valid);
    if (chance(5)) {
      /* One boolean field outside {0, 1}. */
      int32_t* flags[] = {&c.rowwise, &c.columnwise, &c.delayed, &c.power_of_two_scales,
                          &c.random_hadamard, &c.stochastic_rounding};
      *flags[rnd_below(6)] = rand_flag(100, &valid);
    }
    c.rng_seed = rnd();
    s = note(tessera_quantizer_create(chance(1) ? NULL : &c, dev, &q));
    if (!valid) refused(s, "quantizer_create took a config flag or enum out of range");
  }
  return q;
}

/* One usage's buffers: honest sizes from buffer_sizes when small, else small honest ones. */
static void usage_buffers(tessera_quantizer q, int64_t rows, int64_t cols, int cw, Arena* a,
                          void** data, int64_t* data_bytes, void** scale, int64_t* scale_bytes) {
  int64_t db = 0, sb = 0, elements;
  const tessera_status s = note(tessera_quantizer_buffer_sizes(q, rows, cols, cw, &db, &sb));
  if (s == TESSERA_STATUS_OK && (db < 0 || sb < 0)) finding("negative buffer size", s);
  if (s == TESSERA_STATUS_OK &&
      (rows < 0 || cols < 0 || __builtin_mul_overflow(rows, cols, &elements)))
    finding("buffer_sizes took a shape whose element count is not an int64", s);
  if (s != TESSERA_STATUS_OK || db > kCap || sb > kCap) {
    db = rnd_below(64);
    sb = rnd_below(64);
  } else if (chance(10)) {
    if (chance(50) && db > 0) --db; else if (sb > 0) --sb;  /* one byte short: refused */
  }
  *data = chance(5) ? NULL : arena_alloc(a, db);
  *data_bytes = db;
  *scale = chance(3) ? NULL : arena_alloc(a, sb);
  *scale_bytes = sb;
}

static void fuzz_quantizer(void) {
  Arena a = {{0}, 0};
  tessera_quantized_buffers b;
  tessera_quantizer_config got;
  int64_t rows, cols, big, db = 0, sb = 0;
  int valid = 1;
  int32_t flag;
  void *x, *out;
  tessera_quantizer q = make_quantizer();
  if (q == NULL) return;
  rows = chance(70) ? rnd_below(70) : rand_size();
  cols = chance(70) ? rnd_below(200) : rand_size();
  memset(&b, 0, sizeof b);
  memset(&got, 0, sizeof got);
  note(tessera_quantizer_get_config(q, &got));
  if (got.rowwise ? chance(95) : chance(20))
    usage_buffers(q, rows, cols, 0, &a, &b.data, &b.data_bytes, &b.scale_inv, &b.scale_inv_bytes);
  if (got.columnwise ? chance(95) : chance(20))
    usage_buffers(q, rows, cols, 1, &a, &b.columnwise_data, &b.columnwise_data_bytes,
                  &b.columnwise_scale_inv, &b.columnwise_scale_inv_bytes);
  flag = rand_flag(100, &valid);
  if (chance(5))
    refused(note(tessera_quantizer_buffer_sizes(q, rows, cols, flag, &db, &sb)),
            "buffer_sizes took a columnwise flag outside {0, 1}");
  b.amax = chance(90) ? (float*)arena_alloc(&a, 4) : NULL;
  b.columnwise_amax = chance(90) ? (float*)arena_alloc(&a, 4) : NULL;
  /* x and out: a call that passes the output checks has rows*cols <= 2 * data bytes (E2M1 packs
   * two per byte), so 8 bytes per data byte cover any float input or output. */
  big = b.data_bytes > b.columnwise_data_bytes ? b.data_bytes : b.columnwise_data_bytes;
  x = arena_alloc(&a, 8 * big + 8);
  out = arena_alloc(&a, 8 * big + 8);
  g_quantized += note(tessera_quantize(chance(2) ? NULL : q, chance(3) ? NULL : x,
                                       chance(90) ? (int32_t)rnd_below(3) : rand_dtype(), rows,
                                       cols, chance(2) ? NULL : &b, NULL)) == TESSERA_STATUS_OK;
  valid = 1;
  flag = rand_flag(5, &valid);
  {
    const tessera_status s = note(tessera_dequantize(q, &b, rows, cols, flag, (float*)out, NULL));
    g_dequantized += s == TESSERA_STATUS_OK;
    if (!valid) refused(s, "dequantize took a columnwise flag outside {0, 1}");
  }
  note(tessera_quantizer_update(q, NULL));
  note(tessera_quantizer_get_config(q, chance(2) ? NULL : &got));
  note(tessera_quantizer_destroy(q));
  if (chance(10)) misuse_destroyed_quantizer(q);
  arena_free(&a);
}

int main(int argc, char** argv) {
  const long long target = argc > 1 ? atoll(argv[1]) : 20000;
  int i;
  g_state = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1) * 0x9E3779B97F4A7C15ULL | 1;
  while (g_calls < target && g_findings < 20) {
    switch (rnd_below(10)) {
      case 0: case 1: fuzz_codec(); break;
      case 2: case 3: case 4: fuzz_quantizer(); break;
      case 5: case 6: case 7: fuzz_gemm(); break;
      case 8: fuzz_moe(); break;
      default: fuzz_handles(); break;
    }
  }
  printf("fuzz_c_api: %lld calls, %lld findings; statuses:", g_calls, g_findings);
  for (i = 0; i <= TESSERA_STATUS_INTERNAL; ++i) {
    if (g_status_count[i] > 0) printf(" %s=%lld", tessera_status_string(i), g_status_count[i]);
  }
  printf("\nfuzz_c_api: successful quantize %lld, dequantize %lld, grouped GEMM runs %lld, "
         "routing runs %lld; aliased outputs refused %lld, handle misuses refused %lld\n",
         g_quantized, g_dequantized, g_gemm_runs, g_moe_runs, g_aliased_refused,
         g_misuse_refused);
  return g_findings == 0 ? 0 : 1;
}
