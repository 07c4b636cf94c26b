// The key part that --k-bias-split keeps out of the cache, computed from positions.
//
// Qwen2's keys carry a bias b_k; after RoPE it is a_t = RoPE(b_k, t), carried into the
// cache's basis (⊘ s under --k-scale, times R_K). The cache stores k − a_t and attention adds
// q·a_t back. RoPE is linear in cs(t) = [cos tθ_0 … cos tθ_{d/2−1}, sin tθ_0 … sin tθ_{d/2−1}],
// so a_t = M·cs(t) for one d × d matrix M per KV head, and q·a_t = (Mᵀq)·cs(t): Mᵀq once per
// query, then d multiply-adds per key against a 64-position table of cs(j) that stays in L1,
// each block of 64 keys re-anchored at cs(t0) = cs(4096·b)·cs(64·a) (angle sums; the first
// factor exact in double once per 4096 positions, the second from a 64-row table). Nothing grows
// with the context: the per-layer table of a_t rows this replaces took n_kv_heads·d floats
// per token (1 KB on Qwen2.5-1.5B, several times the INT2 cache itself) and was streamed from
// memory by every decode step.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "oscar/ops/rope.h"

namespace oscar {

class KeyBias {
 public:
  static constexpr int kBlock = 64;  // positions per anchor: the cs table has kBlock rows

  // bias: [n_kv_heads, d], the key bias before RoPE. to_cache maps n rows of n_kv_heads·d
  // floats into the cache's basis in place (the model's ⊘ s and ·R_K; identity when null).
  KeyBias(const RopeFreqs& rope, int n_kv_heads, int head_dim, const float* bias,
          const std::function<void(float* rows, int64_t n)>& to_cache);

  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return d_; }

  // a_t for t in [p0, p0 + n): out [n, n_kv_heads, d], each row's bits a function of t
  // alone. Threaded over blocks of positions (call it from outside the pool).
  void rows(int64_t p0, int64_t n, float* out) const;

  // coef[h] = M_{kv(h)}ᵀ q_h for n_heads query heads in the cache basis (head h reads KV head
  // h / (n_heads / n_kv_heads)): q, coef [n_heads, d].
  void coefficients(const float* q, int n_heads, float* coef) const;

  // out[g·n + j] = q_g·a_{p0+j} for the G heads of one group, from their coefficients
  // coef [G, d]. AVX2 (8 keys per lane set) or plain loops; both in f32.
  void scores_avx2(const float* coef, int G, int64_t p0, int64_t n, float* out) const;
  void scores_scalar(const float* coef, int G, int64_t p0, int64_t n, float* out) const;

 private:
  // cs(t0) for an anchor t0 (a multiple of kBlock): [d]. `far` keeps cs(kSpan·b) of the
  // last span b seen (rope_cos_sin, as rope_apply forms them), so a pass over a range
  // pays the d/2 cos/sin pairs once per kSpan positions, not per block.
  static constexpr int64_t kSpan = int64_t(kBlock) * kBlock;
  struct FarAnchor {
    int64_t span = -1;
    float cs[256];
  };
  void anchor(int64_t t0, FarAnchor& far, float* cs) const;
  // row[e] = Σ_r m[r][e]·cs[r] (one a_t row, r in order): AVX2 and plain loops, equal bits
  // only up to FMA contraction, so rows() picks one per machine, never both.
  void row_avx2(const float* cs, float* row) const;
  void row_scalar(const float* cs, float* row) const;
  // c' with c'·cs(j) = c·cs(t0 + j), for the anchor's cs(t0): the coefficients turned by t0.
  void turn(const float* coef, const float* cs0, float* out) const;

  RopeFreqs rope_;
  int n_kv_heads_, d_;
  // M twice, one layout per use: a_t[e] = Σ_r m[r][e]·cs(t)[r] (rows: an axpy per r) and
  // coef[r] = Σ_e m_t[e][r]·q[e] (coefficients: an axpy per e).
  std::vector<float> m_;      // [d (r), n_kv_heads·d (e)]
  std::vector<float> m_t_;    // [n_kv_heads, d (e), d (r)]
  std::vector<float> table_;  // [d (r), kBlock (j)] + 16 padding: cs(j)[r], transposed for 8 keys per vector
  std::vector<float> coarse_; // [kBlock (a), d (r)]: cs(kBlock·a)[r]
};

}  // namespace oscar
