/* The check macro of the plain-C API tests: counts checks and failures and prints each failure
 * with tessera_last_error(). Included once per test program (the counters are static). */
#ifndef TESSERA_TESTS_C_EXPECT_H
#define TESSERA_TESTS_C_EXPECT_H

#include <stdio.h>

#include "tessera/c_api.h"

static int failures = 0;
static int checks = 0;

#define EXPECT(cond)                                                                       \
  do {                                                                                     \
    ++checks;                                                                              \
    if (!(cond)) {                                                                         \
      ++failures;                                                                          \
      fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              tessera_last_error());                                                       \
    }                                                                                      \
  } while (0)

#endif
