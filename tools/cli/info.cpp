// `tessera info`: the format table, the recipe table (tessera::kRecipeTable), build options and
// the CUDA devices found.
#include <cstdio>

#include "commands.h"
#include "tessera/quantize/recipe.h"
#include "tessera/tessera.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera::cli {

namespace {

void print_devices() {
  const int n = cuda_device_count();
  std::printf("CUDA devices: %d\n", n);
#if defined(TESSERA_WITH_CUDA)
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    std::printf("  cuda:%d  %s  sm_%d%d  %d SMs  %.1f GiB  L2 %.0f MiB\n", i, p.name, p.major,
                p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0,
                p.l2CacheSize / 1048576.0);
  }
#endif
}

// One row per built-in recipe, read from the constexpr table in tessera/quantize/recipe.h.
void print_recipes() {
  std::printf("\n%-12s %-12s %-12s %-7s %-12s %-7s %5s  %s\n", "recipe", "activations", "weights",
              "element", "scale", "block", "align", "rule");
  for (const RecipeInfo& r : recipe_table()) {
    char block[16];
    if (r.block_rows == 0 && r.block_cols == 0) {
      std::snprintf(block, sizeof block, "tensor");
    } else if (r.block_cols == 0) {
      std::snprintf(block, sizeof block, "row");
    } else {
      std::snprintf(block, sizeof block, "%dx%d", r.block_rows, r.block_cols);
    }
    std::printf("%-12s %-12s %-12s %-7s %-12s %-7s %5d  %s\n", r.name,
                scaling_mode_name(r.activation_mode), scaling_mode_name(r.weight_mode),
                element_format_name(r.default_format), dtype_name(r.scale_dtype), block,
                r.token_alignment, r.rule);
  }
}

}  // namespace

int run_info(const Args& args) {
  if (!args.empty()) {
    const bool help = args[0] == "--help" || args[0] == "-h";
    // A bad option is named on stderr (the usage alone left the user guessing which word was
    // refused); --help prints the usage on stdout.
    if (!help) std::fprintf(stderr, "tessera info: unknown option '%s' (it takes none)\n",
                            args[0].c_str());
    std::fprintf(help ? stdout : stderr, "usage: tessera info\n  Prints the element format "
                 "table, the recipe table, build options and the CUDA devices found.\n");
    return help ? 0 : 2;
  }
  std::printf("tessera %s\n", TESSERA_VERSION_STRING);
  std::printf("build: CUDA backend %s, C++%ld, OpenMP on\n", cuda_compiled() ? "on" : "off",
              __cplusplus / 100 % 100);
  std::printf("CPU BF16 GEMM: %s\n", cpu_bf16_gemm_path().c_str());
  print_devices();
  std::printf("\n%-9s %-15s %4s %3s %3s %5s %14s %14s %14s %4s %4s\n", "format", "ml_dtypes",
              "bits", "exp", "man", "bias", "max finite", "min normal", "min subnormal", "inf",
              "nan");
  for (const FormatInfo& f : format_table()) {
    std::printf("%-9s %-15s %4d %3d %3d %5d %14.6g %14.6g %14.6g %4s %4s\n", f.name,
                f.ml_dtypes_name, f.bits, f.exponent_bits, f.mantissa_bits, f.exponent_bias,
                f.max_finite, f.min_normal, f.min_subnormal, f.has_inf ? "yes" : "no",
                f.has_nan ? "yes" : "no");
  }
  print_recipes();
  return 0;
}

}  // namespace tessera::cli
