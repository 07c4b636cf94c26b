#include "oscar/ops/rope.h"

#include <cmath>
#include <numbers>

#include "oscar/core/error.h"

namespace oscar {

RopeFreqs rope_freqs(const ModelConfig& cfg) {
  RopeFreqs f;
  f.style = cfg.rope_style;
  const int half = cfg.head_dim / 2;
  f.inv_freq.resize(size_t(half));
  for (int i = 0; i < half; ++i) f.inv_freq[size_t(i)] = std::pow(double(cfg.rope_theta), -2.0 * i / cfg.head_dim);
  const RopeScaling& s = cfg.rope_scaling;
  if (s.type == "none" || s.type.empty()) {
  } else if (s.type == "linear") {
    f.position_scale = 1.0 / s.factor;
  } else if (s.type == "llama3") {
    // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    const double low_wavelen = s.original_context / s.low_freq_factor;
    const double high_wavelen = s.original_context / s.high_freq_factor;
    for (double& inv : f.inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen > low_wavelen) {
        inv /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        inv = (1.0 - smooth) * inv / s.factor + smooth * inv;
      }
    }
  } else {
    fail("unsupported rope scaling type '{}' (supported: none, linear, llama3)", s.type);
  }
  return f;
}

void rope_cos_sin(const RopeFreqs& f, int64_t pos, int half, float* cs) {
  const double p = double(pos) * f.position_scale;
  for (int i = 0; i < half; ++i) {
    const double a = p * f.inv_freq[size_t(i)];
    cs[i] = float(std::cos(a));
    cs[half + i] = float(std::sin(a));
  }
}

void rope_apply(const RopeFreqs& f, float* x, int n_heads, int head_dim, int64_t pos) {
  const int half = head_dim / 2;
  // cos/sin once per token, shared by every head.
  float cs[1024];
  OSCAR_CHECK(half <= 512, "head_dim {} too large for RoPE", head_dim);
  rope_cos_sin(f, pos, half, cs);
  const float* sn = cs + half;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      // interleaved pairs (2i, 2i+1); neox pairs (i, i + d/2)
      const int a = f.style == RopeStyle::interleaved ? 2 * i : i;
      const int b = f.style == RopeStyle::interleaved ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs[i] - x1 * sn[i];
      v[b] = x0 * sn[i] + x1 * cs[i];
    }
  }
}

void append_rope_rows(const RopeFreqs& f, const float* bias, int n_heads, int head_dim, int64_t p0, int64_t p1,
                      std::vector<float>& out) {
  const size_t row = size_t(n_heads) * size_t(head_dim);
  for (int64_t p = p0; p < p1; ++p) {
    const size_t at = out.size();
    out.insert(out.end(), bias, bias + row);
    rope_apply(f, out.data() + at, n_heads, head_dim, p);
  }
}

}  // namespace oscar
