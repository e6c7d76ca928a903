/* The C API from plain C: version, statuses, encode/decode, and errors instead of crashes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tessera/c_api.h"

#include "c_expect.h"

int main(void) {
  const tessera_device cpu = {0, 0};
  float x[6] = {1.0f, -2.5f, 448.0f, 1000.0f, 0.0f, 0.3f};
  unsigned char codes[6];
  float back[6];

  EXPECT(strlen(tessera_version()) >= 5);
  EXPECT(strcmp(tessera_status_string(TESSERA_STATUS_OK), "ok") == 0);
  EXPECT(strcmp(tessera_status_string(TESSERA_STATUS_SHAPE_MISMATCH), "shape mismatch") == 0);
  EXPECT(strcmp(tessera_status_string(99), "unknown status") == 0);

  EXPECT(tessera_encode(x, TESSERA_DTYPE_FLOAT32, codes, TESSERA_DTYPE_E4M3, 6, cpu, NULL) ==
         TESSERA_STATUS_OK);
  EXPECT(codes[0] == 0x38 && codes[2] == 0x7E && codes[3] == 0x7E && codes[4] == 0x00);
  EXPECT(tessera_decode(codes, TESSERA_DTYPE_E4M3, back, 6, cpu, NULL) == TESSERA_STATUS_OK);
  EXPECT(back[0] == 1.0f && back[1] == -2.5f && back[3] == 448.0f);
  EXPECT(fabsf(back[5] - 0.3f) < 0.02f);
  EXPECT(strcmp(tessera_last_error(), "") == 0);

  /* Errors: null pointers, bad enums, negative sizes, CUDA without a device. */
  EXPECT(tessera_encode(NULL, TESSERA_DTYPE_FLOAT32, codes, TESSERA_DTYPE_E4M3, 6, cpu, NULL) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(tessera_last_error(), "src") != NULL);
  EXPECT(tessera_encode(x, 42, codes, TESSERA_DTYPE_E4M3, 6, cpu, NULL) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(tessera_last_error(), "42") != NULL);
  EXPECT(tessera_encode(x, TESSERA_DTYPE_INT32, codes, TESSERA_DTYPE_E4M3, 6, cpu, NULL) ==
         TESSERA_STATUS_DTYPE_MISMATCH);
  EXPECT(tessera_encode(x, TESSERA_DTYPE_FLOAT32, codes, TESSERA_DTYPE_E4M3, -1, cpu, NULL) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  EXPECT(tessera_decode(codes, TESSERA_DTYPE_E4M3, NULL, 6, cpu, NULL) ==
         TESSERA_STATUS_INVALID_ARGUMENT);
  {
    const tessera_device bad = {7, 0};
    EXPECT(tessera_encode(x, TESSERA_DTYPE_FLOAT32, codes, TESSERA_DTYPE_E4M3, 6, bad, NULL) ==
           TESSERA_STATUS_INVALID_ARGUMENT);
  }
  /* A successful call clears the message. */
  EXPECT(tessera_encode(x, TESSERA_DTYPE_FLOAT32, codes, TESSERA_DTYPE_E5M2, 6, cpu, NULL) ==
         TESSERA_STATUS_OK);
  EXPECT(strcmp(tessera_last_error(), "") == 0);

  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}
