#include "oscar/attention/key_bias.h"

#include <algorithm>
#include <cmath>

#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {

KeyBias::KeyBias(const RopeFreqs& rope, int n_kv_heads, int head_dim, const float* bias,
                 const std::function<void(float* rows, int64_t n)>& to_cache)
    : rope_(rope), n_kv_heads_(n_kv_heads), d_(head_dim) {
  OSCAR_CHECK(n_kv_heads > 0 && head_dim > 0 && head_dim <= 256 && head_dim % 8 == 0,
              "key bias of {} heads × {} unsupported", n_kv_heads, head_dim);
  OSCAR_CHECK(int(rope.inv_freq.size()) * 2 == head_dim, "RoPE has {} frequencies for head_dim {}",
              rope.inv_freq.size(), head_dim);
  const int d = d_, half = d / 2;
  const int64_t kvd = int64_t(n_kv_heads) * d;
  // Row r of `basis` is the cs(t)[r] coefficient of RoPE(b, t): for pair (a, b) of frequency i,
  // RoPE gives a' = b_a·cos − b_b·sin and b' = b_a·sin + b_b·cos.
  std::vector<float> basis(size_t(d * kvd), 0.0f);
  for (int i = 0; i < half; ++i) {
    const int a = rope.style == RopeStyle::interleaved ? 2 * i : i;
    const int b = rope.style == RopeStyle::interleaved ? 2 * i + 1 : i + half;
    float* cos_row = basis.data() + int64_t(i) * kvd;
    float* sin_row = basis.data() + int64_t(half + i) * kvd;
    for (int h = 0; h < n_kv_heads; ++h) {
      const float* bh = bias + int64_t(h) * d;
      cos_row[h * d + a] = bh[a];
      cos_row[h * d + b] = bh[b];
      sin_row[h * d + a] = -bh[b];
      sin_row[h * d + b] = bh[a];
    }
  }
  if (to_cache) to_cache(basis.data(), d);  // linear in b, so the map applies row by row
  m_t_.resize(size_t(kvd * d));
  for (int r = 0; r < d; ++r)
    for (int64_t e = 0; e < kvd; ++e) m_t_[size_t(e * d + r)] = basis[size_t(r * kvd + e)];
  m_ = std::move(basis);
  table_.resize(size_t(d) * kBlock + 16);  // + 16: a 16-key step may start up to 1 column before the end
  std::vector<float> cs(static_cast<size_t>(d));
  for (int j = 0; j < kBlock; ++j) {
    rope_cos_sin(rope_, j, half, cs.data());
    for (int r = 0; r < d; ++r) table_[size_t(r * kBlock + j)] = cs[size_t(r)];
  }
  coarse_.resize(size_t(kBlock) * d);
  for (int a = 0; a < kBlock; ++a) rope_cos_sin(rope_, int64_t(a) * kBlock, half, coarse_.data() + a * d);
}

namespace {

// cs(x + y) from cs(x) and cs(y): cos(x + y) = cos x cos y − sin x sin y, sin(x + y) =
// sin x cos y + cos x sin y, per frequency (`half` of them; cos first, then sin).
void add_angles(const float* x, const float* y, int half, float* out) {
  for (int i = 0; i < half; ++i) {
    const float cx = x[i], sx = x[half + i], cy = y[i], sy = y[half + i];
    out[i] = cx * cy - sx * sy;
    out[half + i] = sx * cy + cx * sy;
  }
}

}  // namespace

void KeyBias::anchor(int64_t t0, FarAnchor& far, float* cs) const {
  const int half = d_ / 2;
  if (const int64_t span = t0 / kSpan; span != far.span) {
    far.span = span;
    rope_cos_sin(rope_, span * kSpan, half, far.cs);
  }
  add_angles(far.cs, coarse_.data() + (t0 % kSpan) / kBlock * d_, half, cs);
}

void KeyBias::turn(const float* coef, const float* cs0, float* out) const {
  // c·cs(t0 + j) = Σ_i c_i·cos(t0θ + jθ) + c_{h+i}·sin(t0θ + jθ), expanded by the angle sums.
  const int half = d_ / 2;
  for (int i = 0; i < half; ++i) {
    const float c = coef[i], s = coef[half + i], c0 = cs0[i], s0 = cs0[half + i];
    out[i] = c * c0 + s * s0;
    out[half + i] = s * c0 - c * s0;
  }
}

void KeyBias::rows(int64_t p0, int64_t n, float* out) const {
  if (n <= 0) return;
  const int d = d_, half = d / 2;
  const int64_t kvd = int64_t(n_kv_heads_) * d;
  // Anchored at absolute multiples of kBlock and summed in a fixed order, so a row's bits
  // depend on t alone: the cache subtracts the same a_t however a prompt is chunked.
  const bool avx2 = use_avx2();
  const int64_t b0 = p0 / kBlock, b1 = (p0 + n + kBlock - 1) / kBlock;
  default_pool().parallel_for(b1 - b0, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> cs0(static_cast<size_t>(d)), cs(static_cast<size_t>(d));
    FarAnchor far;
    for (int64_t blk = b0 + i0; blk < b0 + i1; ++blk) {
      const int64_t t0 = blk * kBlock;
      anchor(t0, far, cs0.data());
      for (int64_t t = std::max(t0, p0); t < std::min(t0 + kBlock, p0 + n); ++t) {
        const int j = int(t - t0);
        for (int i = 0; i < half; ++i) {
          const float cj = table_[size_t(i * kBlock + j)], sj = table_[size_t((half + i) * kBlock + j)];
          cs[size_t(i)] = cs0[size_t(i)] * cj - cs0[size_t(half + i)] * sj;  // add_angles, the table transposed
          cs[size_t(half + i)] = cs0[size_t(half + i)] * cj + cs0[size_t(i)] * sj;
        }
        if (avx2) {
          row_avx2(cs.data(), out + (t - p0) * kvd);
        } else {
          row_scalar(cs.data(), out + (t - p0) * kvd);
        }
      }
    }
  });
}

void KeyBias::row_scalar(const float* cs, float* row) const {
  const int64_t kvd = int64_t(n_kv_heads_) * d_;
  for (int64_t e = 0; e < kvd; ++e) row[e] = 0.0f;
  for (int r = 0; r < d_; ++r) {
    const float c = cs[r];
    const float* m = m_.data() + int64_t(r) * kvd;
    for (int64_t e = 0; e < kvd; ++e) row[e] += m[e] * c;
  }
}

void KeyBias::coefficients(const float* q, int n_heads, float* coef) const {
  OSCAR_CHECK(n_heads % n_kv_heads_ == 0, "{} query heads over {} KV heads", n_heads, n_kv_heads_);
  const int d = d_, group = n_heads / n_kv_heads_;
  for (int h = 0; h < n_heads; ++h) {
    const float* m = m_t_.data() + int64_t(h / group) * d * d;
    const float* qh = q + int64_t(h) * d;
    float* c = coef + int64_t(h) * d;
    for (int r = 0; r < d; ++r) c[r] = 0.0f;
    for (int e = 0; e < d; ++e) {
      const float qe = qh[e];
      const float* me = m + int64_t(e) * d;
      for (int r = 0; r < d; ++r) c[r] += me[r] * qe;
    }
  }
}

void KeyBias::scores_scalar(const float* coef, int G, int64_t p0, int64_t n, float* out) const {
  const int d = d_;
  std::vector<float> cs0(static_cast<size_t>(d)), turned(static_cast<size_t>(d));
  FarAnchor far;
  for (int64_t t = p0; t < p0 + n;) {
    const int64_t t0 = t - t % kBlock;
    const int j0 = int(t - t0), m = int(std::min<int64_t>(kBlock - j0, p0 + n - t));
    anchor(t0, far, cs0.data());
    for (int g = 0; g < G; ++g) {
      turn(coef + int64_t(g) * d, cs0.data(), turned.data());
      for (int j = j0; j < j0 + m; ++j) {
        float acc = 0.0f;
        for (int r = 0; r < d; ++r) acc += turned[size_t(r)] * table_[size_t(r * kBlock + j)];
        out[g * n + (t0 + j - p0)] = acc;
      }
    }
    t += m;
  }
}

}  // namespace oscar
