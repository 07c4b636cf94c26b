#include "oscar/ops/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>

namespace oscar {

namespace {
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
}  // namespace

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return has;
}

bool use_avx2() {
  static const bool off = [] {
    const char* e = std::getenv("OSCAR_NO_AVX2");
    return e != nullptr && e[0] == '1';
  }();
  return cpu_has_avx2() && !off;
}

}  // namespace oscar
