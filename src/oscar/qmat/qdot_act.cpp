// Scalar activation quantizers of qdot.h: per block of 32 (ActQ8Block) or 256
// (ActQ8KBlock), d = max|x| / 127 and q = round-to-nearest-even(x · (1/d)); the AVX2
// versions must give these same bytes.
#include <algorithm>
#include <cmath>

#include "oscar/qmat/qdot.h"

namespace oscar::qmat {
namespace {

// d = max|x[0..n)| / 127 and q[i] = x[i]·(1/d) rounded to nearest even, clamped to ±127;
// returns d. Multiply by the reciprocal (not divide by d): the AVX2 versions do the same.
float quantize_block(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  // nearbyint follows the current rounding mode: nearest even by default.
  for (int i = 0; i < n; ++i)
    q[i] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[i] * id)), -127, 127));
  return d;
}

}  // namespace

void quantize_act_ref(const float* x, ActQ8Block* out, int64_t k) {
  const int64_t nb = k / act_block;
  for (int64_t b = 0; b < nb; ++b, x += act_block) {
    ActQ8Block& o = out[b];
    const float d = quantize_block(x, int(act_block), o.q);
    int isum = 0;
    for (int i = 0; i < act_block; ++i) isum += o.q[i];
    o.d = d;
    o.sum = d * static_cast<float>(isum);
  }
}

void quantize_act_k_ref(const float* x, ActQ8KBlock* out, int64_t k) {
  const int64_t nb = k / act_k_block;
  for (int64_t b = 0; b < nb; ++b, x += act_k_block) {
    ActQ8KBlock& o = out[b];
    o.d = quantize_block(x, int(act_k_block), o.q);
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 16 * g; i < 16 * g + 16; ++i) s += o.q[i];
      o.bsums[g] = static_cast<int16_t>(s);
    }
  }
}

}  // namespace oscar::qmat
