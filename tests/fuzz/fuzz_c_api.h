/* Shared pieces of the C API fuzzer (fuzz_c_api.c has the contract): the random source, the
 * draws (sizes, dtypes, devices, flags), the call counter that checks every status, and the
 * per-step arena of honest allocations. Each fuzz_*.c file adds one family of calls. */
#ifndef TESSERA_TESTS_FUZZ_C_API_H
#define TESSERA_TESTS_FUZZ_C_API_H

#include <stdint.h>

#include "tessera/c_api.h"

enum { kCap = 1 << 14 }; /* largest buffer the fuzzer allocates, bytes */

/* ---- draws (xorshift64*) ---- */
uint64_t rnd(void);
int64_t rnd_below(int64_t n);
int chance(int percent);
/* A size from 0 to INT64_MAX, biased to small values, with the edge cases of int64 arithmetic
 * (and, 1 in 12, a negative one). */
int64_t rand_size(void);
int32_t rand_dtype(void); /* mostly a tessera_dtype, 5%: out of range */
int dtype_bits(int32_t dt);
tessera_device rand_device(void);
/* An int32 flag: 0 or 1, or (`percent` %) a value outside {0, 1} — then *valid becomes 0. */
int32_t rand_flag(int percent, int* valid);
/* An enum value in [0, count), or (`percent` %) one outside it — then *valid becomes 0. */
int32_t rand_enum(int32_t count, int percent, int* valid);

/* ---- calls ---- */
/* Counts a call and checks the invariants of every status (a tessera_status value; a failure
 * has a message, a success none; INTERNAL is a bug). Returns s. */
tessera_status note(tessera_status s);
/* Records a finding (a violated invariant) with the last error. */
void finding(const char* what, int status);
/* A call given an out-of-range argument must fail: a finding when s is OK. Returns s. */
tessera_status refused(tessera_status s, const char* what);

/* ---- honest allocations, freed together at the end of a step ---- */
typedef struct {
  void* p[48];
  int n;
} Arena;
void* arena_alloc(Arena* a, int64_t bytes); /* random bytes; NULL when the arena is full */
void arena_free(Arena* a);

/* ---- the families (one fuzz step each) ---- */
void fuzz_gemm(void);        /* fuzz_c_api_gemm.c: problems, aliasing outputs */
void fuzz_moe(void);         /* fuzz_c_api_moe.c: routing, permute, unpermute */
void fuzz_handles(void);     /* fuzz_c_api_handles.c: wrong-type and non-handle pointers */
/* Calls on a handle just destroyed (before any create of its type could reuse its memory):
 * each must be refused with INVALID_ARGUMENT saying "destroyed" (fuzz_c_api_handles.c). */
void misuse_destroyed_quantizer(tessera_quantizer q);
void misuse_destroyed_problem(tessera_grouped_gemm_problem p);

/* Successful real work, reported at the end. */
extern long long g_gemm_runs, g_moe_runs, g_aliased_refused, g_misuse_refused;

#endif
