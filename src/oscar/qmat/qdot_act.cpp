// Scalar activation quantizer of qdot.h: per block of 32, d = max|x| / 127 and
// q = round-to-nearest-even(x · (1/d)); the AVX2 version must give these same bytes.
#include <algorithm>
#include <cmath>

#include "oscar/qmat/qdot.h"

namespace oscar::qmat {

void quantize_act_ref(const float* x, ActQ8Block* out, int64_t k) {
  const int64_t nb = k / act_block;
  for (int64_t b = 0; b < nb; ++b, x += act_block) {
    ActQ8Block& o = out[b];
    float amax = 0.0f;
    for (int i = 0; i < act_block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    // Multiply by the reciprocal (not divide by d): the AVX2 version does the same.
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int isum = 0;
    for (int i = 0; i < act_block; ++i) {
      // nearbyint follows the current rounding mode: nearest even by default.
      const int q = std::clamp(static_cast<int>(std::nearbyint(x[i] * id)), -127, 127);
      o.q[i] = static_cast<int8_t>(q);
      isum += q;
    }
    o.d = d;
    o.sum = d * static_cast<float>(isum);
  }
}

}  // namespace oscar::qmat
