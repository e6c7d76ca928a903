// Uses the installed headers and library: encodes one value and checks it.
#include <cstdio>

#include <tessera/tessera.h>

int main() {
  float x = 1.0f;
  unsigned char code = 0;
  tessera::encode(tessera::TensorView::contiguous(&x, tessera::DType::kFloat32, {1}),
                  tessera::TensorView::contiguous(&code, tessera::DType::kFloat8E4M3, {1}));
  if (code != 0x38) {
    std::printf("consumer: expected 0x38, got %#x\n", code);
    return 1;
  }
  std::printf("consumer: find_package(tessera) works (tessera %s)\n", TESSERA_VERSION_STRING);
  return 0;
}
