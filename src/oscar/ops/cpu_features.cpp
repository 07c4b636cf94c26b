#include "oscar/ops/cpu_features.h"

#include <cstdlib>

namespace oscar {

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
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
