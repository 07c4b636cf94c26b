// oscar::cuda::DeviceModel end to end: tiny random Llama / Qwen2 / Qwen3-like models on the
// GPU against an independent host forward pass in double (written from the formulas, not
// from src/oscar), through the mixed KV cache of docs/kv-layout.md §8 (BF16 sink and recent
// window, INT2/INT4/INT8 history quantized by the test's own quantizer, R_K / R_V rotations,
// per-layer clip ratios): three sequences of different lengths, prefill by steps, batched
// steps over changing slot sets, CUDA graphs (bitwise equal to plain steps), slot reuse, the
// cache's rows after the run (read through the page tables), and the refusals (full cache,
// sequence at max_seq_len, bad token ids, wrong-size tensors). Self-checks show that each
// comparison can fail: a corrupted weight, the reference without quantization, a wrong clip.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../../bench/cuda/random_weights.cuh"
#include "cuda_test_util.h"
#include "oscar/cuda/decode_attention.h"
#include "oscar/engine/cuda/device_model.h"

namespace {

using namespace oscar_cuda_test;
namespace oc = oscar::cuda;

// The shape of every test model: GQA 2, head_dim 64 (the tensor-core history path at G = 64).
constexpr int kEmbd = 128, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kFf = 192, kVocab = 301;
constexpr float kRmsEps = 1e-6f;
constexpr double kRopeTheta = 10000.0;
// Wq and Wk are drawn this much wider than the other matrices (±gain/sqrt(n_in)) so that the
// scores spread over a few units: flat attention would average the history's errors away.
constexpr float kQkGain = 2.0f;

using Real = double;  // the reference's arithmetic
using Vec = std::vector<Real>;

// ---- tolerances and tallies --------------------------------------------------------------

// A step's logits row compared with the reference's; scale = max(1, max|ref|).
struct Tolerance {
  double max_rel = 0.0;  // per row: max|Δ| ≤ max_rel · scale (0: not checked)
  double rel_l2 = 0.0;   // over all rows of the run: sqrt(ΣΔ² / Σref²)
  double agree = 1.0;    // fraction of rows whose device argmax is the reference's argmax…
  double tie = 0.0;      // …or within tie · scale of the reference's maximum (a near tie)
};

// Both sides round the same GEMM inputs and cache rows to BF16, so what is left is
// summation order (1e-7) and the BF16 roundings it tips the other way: an input within
// 1e-7 of a rounding midpoint (about one token in 20 has one) moves by 2^-8 relative, and
// the K/V rows computed from it then differ by about an ulp in many elements, in the cache,
// for every later token of the sequence. Measured on an H100 over 10 seeds (and about the
// same from the reference run in f32 against itself): BF16 cache worst row 7.7e-3 · scale,
// rel L2 2.8e-3; INT2 layers rel L2 ≤ 1.5e-2; INT4 ≤ 7.1e-3; greedy ids equal at ≥ 99 %.
// The bounds leave ≥ 2.5× margin and stay below what one corrupted weight does (rel L2
// ≥ 0.097: 10× the BF16 bound) or quantizing instead of not (rel L2 ≥ 0.23 with INT2 on
// every layer: 4.6× the INT2 bound; ≥ 0.063 with INT4: 3× the INT4 bound).
// BF16 cache: per-row max bound; greedy ids may differ only where the reference's two top
// logits are within twice that bound (a difference the bound itself allows).
constexpr Tolerance kBf16Tol{2e-2, 1e-2, 1.0, 4e-2};
// Quantized history: the device quantizes its own BF16 rows, so a row that differs in the
// last bit can change a code (a 1.5σ step at INT2) or a group's min/max and with it scale
// and zero; the tensor-core path also rounds q and the softmax weights to f16 (2^-11
// relative). A flipped code moves one value of one key by a whole step, so no per-row max
// bound (worst rows reach 0.12 · scale); greedy ids may differ at near ties (≤ 1e-2 · scale)
// and at ≤ 5 % of rows.
constexpr Tolerance kInt2Tol{0.0, 5e-2, 0.95, 1e-2};
constexpr Tolerance kInt4Tol{0.0, 2e-2, 0.95, 1e-2};

int argmax_of(const float* x, int n) {  // first maximum; NaN never wins
  int best = 0;
  float bv = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (x[i] > bv) bv = x[i], best = i;
  return best;
}

struct Stats {
  long rows = 0, agree = 0, nonfinite = 0;
  double worst_rel = 0.0;  // max over rows of max|Δ| / scale
  double d2 = 0.0, r2 = 0.0;

  void add(const float* got, const Vec& want, const Tolerance& tol) {
    ++rows;
    double mx = 0.0, worst = 0.0;
    bool finite = true;
    int iw = 0;
    for (int i = 0; i < kVocab; ++i) {
      mx = std::max(mx, std::fabs(double(want[size_t(i)])));
      if (want[size_t(i)] > want[size_t(iw)]) iw = i;
      if (!std::isfinite(got[i])) {
        finite = false;
        continue;
      }
      const double e = std::fabs(double(got[i]) - double(want[size_t(i)]));
      worst = std::max(worst, e);
      d2 += e * e;
      r2 += double(want[size_t(i)]) * double(want[size_t(i)]);
    }
    const double scale = std::max(1.0, mx);
    if (!finite) ++nonfinite;
    worst_rel = std::max(worst_rel, worst / scale);
    const int ig = argmax_of(got, kVocab);
    if (ig == iw || double(want[size_t(iw)] - want[size_t(ig)]) <= tol.tie * scale) ++agree;
  }
  double rel_l2() const { return r2 > 0.0 ? std::sqrt(d2 / r2) : std::sqrt(d2); }
  bool ok(const Tolerance& t) const {
    return rows > 0 && nonfinite == 0 && (t.max_rel <= 0.0 || worst_rel <= t.max_rel) && rel_l2() <= t.rel_l2 &&
           double(agree) >= t.agree * double(rows);
  }
  std::string describe(const Tolerance& t) const {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%ld rows: max|dlogit|/max(1,max|ref|) %.2e%s, rel L2 %.2e (<= %.0e), greedy %ld/%ld (>= %.0f%%%s), "
                  "non-finite %ld",
                  rows, worst_rel, t.max_rel > 0.0 ? (" (<= " + fmt_e(t.max_rel) + ")").c_str() : " (not bounded)",
                  rel_l2(), t.rel_l2, agree, rows, 100.0 * t.agree, t.tie > 0.0 ? ", near ties excused" : "",
                  nonfinite);
    return buf;
  }
  static std::string fmt_e(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0e", x);
    return b;
  }
};

// ---- a random model -----------------------------------------------------------------------

struct Variant {
  std::string name;
  int n_layers = 2;
  bool qkv_bias = false, qk_norm = false, tied = false, interleaved = false;
  double position_scale = 1.0;
  int sink = 16, window = 32, group = 64;
  std::vector<int> bits;              // per layer
  std::vector<float> k_clip, v_clip;  // per layer
  std::vector<int> rot_k, rot_v;      // per layer: 1 = a random orthogonal R
  std::vector<int> k_shift;           // per layer: 1 = a random --k-mean key shift; empty: none
  Tolerance tol;
  bool corrupt_check = false;  // self-check: a reference with one wk element changed must be caught
  bool bf16_kv_check = false;  // self-check: the reference with a BF16 cache must be caught
};

std::vector<uint16_t> random_bf16(size_t n, float amp, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<uint16_t> w(n);
  for (uint16_t& x : w) x = f32_to_bf16(u(rng));
  return w;
}

std::vector<float> random_f32(size_t n, float center, float spread, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(center - spread, center + spread);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Rows orthonormalized by Gram-Schmidt (twice per row) in double, stored as f32.
std::vector<float> random_orthogonal(int d, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> a(size_t(d) * d);
  for (double& x : a) x = normal(rng);
  for (int r = 0; r < d; ++r) {
    double* row = a.data() + size_t(r) * d;
    for (int pass = 0; pass < 2; ++pass)
      for (int q = 0; q < r; ++q) {
        const double* prev = a.data() + size_t(q) * d;
        double dot = 0.0;
        for (int i = 0; i < d; ++i) dot += row[i] * prev[i];
        for (int i = 0; i < d; ++i) row[i] -= dot * prev[i];
      }
    double norm = 0.0;
    for (int i = 0; i < d; ++i) norm += row[i] * row[i];
    norm = std::sqrt(norm);
    for (int i = 0; i < d; ++i) row[i] /= norm;
  }
  return std::vector<float>(a.begin(), a.end());
}

oscar::ModelDims make_dims(const Variant& var) {
  oscar::ModelDims s;
  s.n_layers = var.n_layers;
  s.n_embd = kEmbd;
  s.n_ff = kFf;
  s.n_heads = kHeads;
  s.n_kv_heads = kKvHeads;
  s.head_dim = kHeadDim;
  s.n_vocab = kVocab;
  s.rms_eps = kRmsEps;
  s.qkv_bias = var.qkv_bias;
  s.qk_norm = var.qk_norm;
  s.tied_embeddings = var.tied;
  return s;
}

oscar::RopeFreqs make_rope(const Variant& var) {
  oscar::RopeFreqs r;
  r.style = var.interleaved ? oscar::RopeStyle::interleaved : oscar::RopeStyle::neox;
  r.inv_freq.resize(kHeadDim / 2);
  for (int i = 0; i < kHeadDim / 2; ++i) r.inv_freq[size_t(i)] = std::pow(kRopeTheta, -2.0 * i / kHeadDim);
  r.position_scale = var.position_scale;
  return r;
}

// Matrices uniform in ±1/sqrt(n_in) (Wq, Wk: ±kQkGain/sqrt(n_in)), norms 1 ± 0.2, biases small.
oc::HostModel make_model(const Variant& var, std::mt19937& rng) {
  oc::HostModel m;
  m.dims = make_dims(var);
  m.rope = make_rope(var);
  const size_t E = kEmbd, F = kFf, QD = size_t(kHeads) * kHeadDim, KD = size_t(kKvHeads) * kHeadDim;
  const float ae = 1.0f / std::sqrt(float(E)), aq = 1.0f / std::sqrt(float(QD)), af = 1.0f / std::sqrt(float(F));
  m.token_embd = random_bf16(size_t(kVocab) * E, ae, rng);
  if (!var.tied) m.output = random_bf16(size_t(kVocab) * E, ae, rng);
  m.output_norm = random_f32(E, 1.0f, 0.2f, rng);
  for (int l = 0; l < var.n_layers; ++l) {
    oc::HostLayer L;
    L.wq = random_bf16(QD * E, kQkGain * ae, rng);
    L.wk = random_bf16(KD * E, kQkGain * ae, rng);
    L.wv = random_bf16(KD * E, ae, rng);
    L.wo = random_bf16(E * QD, aq, rng);
    L.w_gate = random_bf16(F * E, ae, rng);
    L.w_up = random_bf16(F * E, ae, rng);
    L.w_down = random_bf16(E * F, af, rng);
    L.attn_norm = random_f32(E, 1.0f, 0.2f, rng);
    L.ffn_norm = random_f32(E, 1.0f, 0.2f, rng);
    if (var.qkv_bias) {  // k's bias the largest, as in Qwen2 (a constant the quantizer must span)
      L.bq = random_f32(QD, 0.0f, 0.2f, rng);
      L.bk = random_f32(KD, 0.0f, 0.5f, rng);
      L.bv = random_f32(KD, 0.0f, 0.1f, rng);
    }
    if (var.qk_norm) {
      L.q_norm = random_f32(kHeadDim, 1.0f, 0.2f, rng);
      L.k_norm = random_f32(kHeadDim, 1.0f, 0.2f, rng);
    }
    m.layers.push_back(std::move(L));
  }
  return m;
}

oscar::KvFormat make_format(const Variant& var, std::mt19937& rng) {
  oscar::KvFormat f;
  f.sink = var.sink;
  f.window = var.window;
  f.group = var.group;
  f.set_bits(var.bits);
  f.k_clip = var.k_clip;
  f.v_clip = var.v_clip;
  f.rot_k.resize(size_t(var.n_layers));
  f.rot_v.resize(size_t(var.n_layers));
  for (int l = 0; l < var.n_layers; ++l) {
    if (var.rot_k[size_t(l)]) f.rot_k[size_t(l)] = random_orthogonal(kHeadDim, rng);
    if (var.rot_v[size_t(l)]) f.rot_v[size_t(l)] = random_orthogonal(kHeadDim, rng);
  }
  if (!var.k_shift.empty()) {
    f.k_shift.resize(size_t(var.n_layers));
    std::normal_distribution<float> g(0.0f, 2.0f);
    for (int l = 0; l < var.n_layers; ++l)
      if (var.k_shift[size_t(l)])
        for (int i = 0; i < kKvHeads * kHeadDim; ++i) f.k_shift[size_t(l)].push_back(g(rng));
  }
  return f;
}

// ---- the reference forward pass -----------------------------------------------------------

Real bf16_round(Real x) { return Real(bf16_to_f32(f32_to_bf16(float(x)))); }

Vec to_real(const std::vector<uint16_t>& w) {
  Vec r(w.size());
  for (size_t i = 0; i < w.size(); ++i) r[i] = Real(bf16_to_f32(w[i]));
  return r;
}
Vec to_real(const std::vector<float>& w) { return Vec(w.begin(), w.end()); }

// y = bf16(x)·Wᵀ + b, W [n_out, n_in]: the device casts every GEMM input to BF16.
Vec linear(const Vec& x, const Vec& w, const Vec& b, int n_out) {
  const size_t n_in = x.size();
  Vec xb(n_in), y(static_cast<size_t>(n_out));
  for (size_t i = 0; i < n_in; ++i) xb[i] = bf16_round(x[i]);
  for (int o = 0; o < n_out; ++o) {
    Real acc = b.empty() ? Real(0) : b[size_t(o)];
    const Real* row = w.data() + size_t(o) * n_in;
    for (size_t i = 0; i < n_in; ++i) acc += xb[i] * row[i];
    y[size_t(o)] = acc;
  }
  return y;
}

// x[0..n) / sqrt(mean(x²) + eps) · w, in place.
void rmsnorm(Real* x, const Real* w, int n) {
  Real ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const Real inv = Real(1) / std::sqrt(ss / Real(n) + Real(kRmsEps));
  for (int i = 0; i < n; ++i) x[i] = x[i] * inv * w[i];
}
Vec rmsnormed(Vec x, const Vec& w) {
  rmsnorm(x.data(), w.data(), int(x.size()));
  return x;
}

// One head of d at position pos: pairs (i, i + d/2) (neox) or (2i, 2i + 1) (interleaved) by
// angle pos·scale·inv_freq[i].
void rope(Real* x, int64_t pos, int d, const oscar::RopeFreqs& r) {
  const bool interleaved = r.style == oscar::RopeStyle::interleaved;
  for (int i = 0; i < d / 2; ++i) {
    const double a = double(pos) * r.position_scale * r.inv_freq[size_t(i)];
    const Real c = Real(std::cos(a)), sn = Real(std::sin(a));
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + d / 2;
    const Real x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * c - x1 * sn;
    x[i1] = x0 * sn + x1 * c;
  }
}

// x[0..d) ← x·R (or x·Rᵀ), R [d, d] row-major.
void rotate(Real* x, const Vec& r, int d, bool transpose) {
  Vec y(size_t(d), Real(0));
  for (int j = 0; j < d; ++j)
    for (int i = 0; i < d; ++i) y[size_t(i)] += x[j] * (transpose ? r[size_t(i) * d + j] : r[size_t(j) * d + i]);
  std::copy(y.begin(), y.end(), x);
}

// softmax(q·k_j / sqrt(d)) over the keys j ∈ [0, n), then Σ_j w_j v_j; rows of d floats.
void attend(const Real* q, const std::vector<const float*>& keys, const std::vector<const float*>& values, int d,
            Real* out) {
  const size_t n = keys.size();
  Vec s(n);
  Real mx = -INFINITY;
  for (size_t j = 0; j < n; ++j) {
    Real dot = 0;
    for (int i = 0; i < d; ++i) dot += q[i] * Real(keys[j][i]);
    s[j] = dot / std::sqrt(Real(d));
    mx = std::max(mx, s[j]);
  }
  Real sum = 0;
  for (Real& x : s) sum += (x = std::exp(x - mx));
  std::fill(out, out + d, Real(0));
  for (size_t j = 0; j < n; ++j)
    for (int i = 0; i < d; ++i) out[i] += s[j] / sum * Real(values[j][i]);
}

// The llama-family forward pass, one token at a time per sequence slot, over a host copy of
// the cache: rows as stored (BF16 after rotation) and, for layers with history, as attention
// reads them once demoted (quantize_row/dequantize_row of the stored row, the layer's clip).
class Reference {
 public:
  Reference(const oc::HostModel& m, const oscar::KvFormat& kv, int max_seqs)
      : s_(m.dims), rope_(m.rope), kv_(kv), seqs_(size_t(max_seqs)) {
    embd_ = to_real(m.token_embd);
    out_ = m.output.empty() ? embd_ : to_real(m.output);
    out_norm_ = to_real(m.output_norm);
    for (size_t l = 0; l < m.layers.size(); ++l) {
      const oc::HostLayer& h = m.layers[l];
      Layer L{to_real(h.wq),       to_real(h.wk),     to_real(h.wv),        to_real(h.wo),
              to_real(h.w_gate),   to_real(h.w_up),   to_real(h.w_down),    to_real(h.attn_norm),
              to_real(h.ffn_norm), to_real(h.bq),     to_real(h.bk),        to_real(h.bv),
              to_real(h.q_norm),   to_real(h.k_norm), to_real(kv.rot_k[l]), to_real(kv.rot_v[l]),
              kv.k_shift.empty() ? Vec() : to_real(kv.k_shift[l])};
      layers_.push_back(std::move(L));
    }
    for (int i = 0; i < max_seqs; ++i) reset(i);
  }

  void reset(int slot) {
    Seq& q = seqs_[size_t(slot)];
    q.len = 0;
    q.k.assign(layers_.size(), {});
    q.v.assign(layers_.size(), {});
    q.k_hist.assign(layers_.size(), {});
    q.v_hist.assign(layers_.size(), {});
  }
  int64_t length(int slot) const { return seqs_[size_t(slot)].len; }
  // The K or V rows of (slot, layer) as the cache stores them: [t, n_kv_heads, d] BF16 values.
  const std::vector<float>& rows(int slot, size_t layer, bool key) const {
    const Seq& q = seqs_[size_t(slot)];
    return key ? q.k[layer] : q.v[layer];
  }

  // The logits of token `id` at position length(slot); the sequence grows by one.
  Vec step(int slot, int32_t id) {
    Seq& sq = seqs_[size_t(slot)];
    const int E = s_.n_embd, d = s_.head_dim, H = s_.n_heads, Hkv = s_.n_kv_heads, gqa = H / Hkv;
    const size_t kvd = size_t(Hkv) * d;
    const int64_t p = sq.len, t = p + 1;
    // The keys this query sees: [sink 0..S) ‖ [history S..h(t)) ‖ [recent h(t)..t).
    const int64_t h_end = kv_.sink + std::max<int64_t>(0, t - kv_.sink - kv_.window);
    Vec x(embd_.begin() + int64_t(id) * E, embd_.begin() + int64_t(id + 1) * E);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      const int bits = kv_.bits(l);
      const Vec h = rmsnormed(x, L.attn_norm);
      Vec q = linear(h, L.wq, L.bq, H * d), k = linear(h, L.wk, L.bk, Hkv * d), v = linear(h, L.wv, L.bv, Hkv * d);
      for (int hd = 0; hd < H; ++hd) {
        if (s_.qk_norm) rmsnorm(q.data() + size_t(hd) * d, L.q_norm.data(), d);
        rope(q.data() + size_t(hd) * d, p, d, rope_);
        if (!L.rot_k.empty()) rotate(q.data() + size_t(hd) * d, L.rot_k, d, false);
      }
      for (int hd = 0; hd < Hkv; ++hd) {
        if (s_.qk_norm) rmsnorm(k.data() + size_t(hd) * d, L.k_norm.data(), d);
        rope(k.data() + size_t(hd) * d, p, d, rope_);
        if (!L.rot_k.empty()) rotate(k.data() + size_t(hd) * d, L.rot_k, d, false);
        if (!L.k_shift.empty())
          for (int e = 0; e < d; ++e) k[size_t(hd) * d + size_t(e)] -= L.k_shift[size_t(hd) * d + size_t(e)];
        if (!L.rot_v.empty()) rotate(v.data() + size_t(hd) * d, L.rot_v, d, false);
      }
      // Store the rows as the cache does (BF16), and what their demoted form will read as.
      for (size_t i = 0; i < kvd; ++i) {
        sq.k[l].push_back(float(bf16_round(k[i])));
        sq.v[l].push_back(float(bf16_round(v[i])));
      }
      if (bits > 0) {
        const RowFormat fmt{d, bits, kv_.group};
        std::vector<uint8_t> row(size_t(fmt.row_bytes()));
        std::vector<float> deq(static_cast<size_t>(d));
        for (int hd = 0; hd < Hkv; ++hd)
          for (int kvi = 0; kvi < 2; ++kvi) {
            const float* src = (kvi == 0 ? sq.k[l] : sq.v[l]).data() + size_t(p) * kvd + size_t(hd) * d;
            quantize_row(fmt, src, row.data(), kvi == 0 ? kv_.k_clip[l] : kv_.v_clip[l]);
            dequantize_row(fmt, row.data(), deq.data());
            std::vector<float>& dst = kvi == 0 ? sq.k_hist[l] : sq.v_hist[l];
            dst.insert(dst.end(), deq.begin(), deq.end());
          }
      }
      Vec att(size_t(H) * d);
      std::vector<const float*> keys(static_cast<size_t>(t)), values(static_cast<size_t>(t));
      for (int hq = 0; hq < H; ++hq) {
        const int hk = hq / gqa;
        for (int64_t j = 0; j < t; ++j) {
          const bool hist = bits > 0 && j >= kv_.sink && j < h_end;
          const size_t off = size_t(j) * kvd + size_t(hk) * d;
          keys[size_t(j)] = (hist ? sq.k_hist[l] : sq.k[l]).data() + off;
          values[size_t(j)] = (hist ? sq.v_hist[l] : sq.v[l]).data() + off;
        }
        attend(q.data() + size_t(hq) * d, keys, values, d, att.data() + size_t(hq) * d);
        if (!L.rot_v.empty()) rotate(att.data() + size_t(hq) * d, L.rot_v, d, true);
      }
      const Vec o = linear(att, L.wo, {}, E);
      for (int i = 0; i < E; ++i) x[size_t(i)] += o[size_t(i)];
      const Vec h2 = rmsnormed(x, L.ffn_norm);
      Vec g = linear(h2, L.wg, {}, s_.n_ff);
      const Vec u = linear(h2, L.wu, {}, s_.n_ff);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (Real(1) + std::exp(-g[i])) * u[i];
      const Vec down = linear(g, L.wd, {}, E);
      for (int i = 0; i < E; ++i) x[size_t(i)] += down[size_t(i)];
    }
    sq.len = t;
    return linear(rmsnormed(x, out_norm_), out_, {}, s_.n_vocab);
  }

 private:
  struct Layer {
    Vec wq, wk, wv, wo, wg, wu, wd, attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm, rot_k, rot_v, k_shift;
  };
  struct Seq {
    int64_t len = 0;
    std::vector<std::vector<float>> k, v, k_hist, v_hist;  // per layer: [t, n_kv_heads, d]
  };
  oscar::ModelDims s_;
  oscar::RopeFreqs rope_;
  oscar::KvFormat kv_;
  Vec embd_, out_, out_norm_;
  std::vector<Layer> layers_;
  std::vector<Seq> seqs_;
};

// ---- the refusal helper ---------------------------------------------------------------------

// The message of what `call` throws ("" when nothing): error_of for std::runtime_error, and
// any other exception marked so that a check expecting a refusal fails on it.
constexpr const char* kWrongType = "[not a std::runtime_error] ";
template <class Call>
std::string refusal(Call&& call) {
  try {
    return error_of(call);
  } catch (const std::exception& e) {
    return std::string(kWrongType) + e.what();
  }
}
bool is_refusal(const std::string& msg) { return !msg.empty() && msg.find(kWrongType) == std::string::npos; }

// ---- the device's cache against the reference's rows -------------------------------------

// After a run, every row the device's cache holds for the active sequences (page tables and
// pools of device_kv_cache.h: fp pages [page, n_kv_heads, 16, d] BF16 for sink and recent
// tokens, history pages [page, n_kv_heads, 16 · row_bytes] for [S, h(t))) against the
// reference's rows. Layer 0's rows come straight from the embeddings, so they are the
// reference's bit for bit (BF16 rows) and byte for byte (history rows: quantize_row of the
// reference's BF16 row with the layer's clip) except where a BF16 rounding tips (above):
// ≥ 95 % / ≥ 90 % must be identical. Later layers also carry the code flips of the layers
// before them (a K row of the layer after an INT2 layer differs by up to 13 % measured), so
// for every layer only a row in the wrong place, from a stale or missing page or written
// with another rotation (row rel L2 ≈ 1.4) must be excluded: BF16 rows rel L2 ≤ kFpRowTol,
// dequantized history rows ≤ kHistRowTol (a few codes one step off: ≤ 0.27 measured).
constexpr double kFpRowTol = 0.4, kHistRowTol = 0.7;
constexpr double kFpSameMin = 0.95, kHistSameMin = 0.9;

struct CacheTally {
  long fp_rows = 0, hist_rows = 0, bad = 0;
  long l0_fp_rows = 0, l0_fp_same = 0, l0_hist_rows = 0, l0_hist_same = 0;  // layer 0
  double fp_worst = 0.0, hist_worst = 0.0;                                  // largest row rel L2
  std::string first_bad;
  bool ok() const {
    return bad == 0 && fp_rows > 0 && double(l0_fp_same) >= kFpSameMin * double(l0_fp_rows) &&
           double(l0_hist_same) >= kHistSameMin * double(l0_hist_rows);
  }
  std::string describe() const {
    char buf[400];
    std::snprintf(
        buf, sizeof buf,
        "layer 0: BF16 rows %ld/%ld identical (>= %.0f%%), history rows %ld/%ld byte-identical "
        "(>= %.0f%%); all layers: %ld BF16 rows, worst rel L2 %.2e (<= %.1f), %ld history rows, worst dequantized "
        "rel L2 %.2e (<= %.1f); %ld rows out of bounds or missing",
        l0_fp_same, l0_fp_rows, 100.0 * kFpSameMin, l0_hist_same, l0_hist_rows, 100.0 * kHistSameMin, fp_rows, fp_worst,
        kFpRowTol, hist_rows, hist_worst, kHistRowTol, bad);
    return buf + (first_bad.empty() ? std::string() : ", first: " + first_bad);
  }
};

double row_rel_l2(const float* got, const float* want, int d) {
  double e2 = 0.0, w2 = 0.0;
  for (int i = 0; i < d; ++i) {
    const double e = double(got[i]) - double(want[i]);
    e2 += e * e;
    w2 += double(want[i]) * double(want[i]);
  }
  return w2 > 0.0 ? std::sqrt(e2 / w2) : std::sqrt(e2);
}

CacheTally compare_cache(const oc::DeviceModel& m, const Reference& ref, const oscar::KvFormat& kv) {
  const oc::DeviceKvCache& c = m.cache();
  const int d = kHeadDim, n_kv = kKvHeads, page = oc::kDecodeFpBlockTokens, hpage = oc::kDecodeHistBlockTokens;
  const int fs = c.fp_stride(), hs = c.hist_stride();
  std::vector<int32_t> fp_tab(size_t(c.max_seqs()) * size_t(std::max(fs, 0)));
  std::vector<int32_t> hist_tab(size_t(c.max_seqs()) * size_t(std::max(hs, 0)));
  CHECK_CUDA(cudaDeviceSynchronize());
  if (!fp_tab.empty())
    CHECK_CUDA(cudaMemcpy(fp_tab.data(), c.fp_table_device(), fp_tab.size() * 4, cudaMemcpyDeviceToHost));
  if (!hist_tab.empty() && c.hist_table_device())
    CHECK_CUDA(cudaMemcpy(hist_tab.data(), c.hist_table_device(), hist_tab.size() * 4, cudaMemcpyDeviceToHost));
  CacheTally r;
  auto bad = [&](const std::string& what) {
    if (r.bad++ == 0) r.first_bad = what;
  };
  std::vector<uint16_t> bits16(static_cast<size_t>(d));
  std::vector<float> got(static_cast<size_t>(d)), want_deq(static_cast<size_t>(d));
  for (int slot = 0; slot < c.max_seqs(); ++slot) {
    if (!c.active(slot)) continue;
    const int64_t t = c.length(slot), h = c.history_end(t);
    for (int l = 0; l < c.n_layers(); ++l) {
      const int bits = kv.bits(l);
      const RowFormat fmt{d, bits > 0 ? bits : 8, kv.group};
      const size_t rb = bits > 0 ? size_t(fmt.row_bytes()) : 0;
      if (c.row_bytes(l) != rb) bad("layer " + std::to_string(l) + " row_bytes " + std::to_string(c.row_bytes(l)));
      std::vector<uint8_t> dev(rb), want(rb);
      for (int kvi = 0; kvi < 2; ++kvi) {
        const std::vector<float>& rows = ref.rows(slot, size_t(l), kvi == 0);
        for (int64_t j = 0; j < t; ++j)
          for (int hd = 0; hd < n_kv; ++hd) {
            const float* w = rows.data() + (size_t(j) * n_kv + size_t(hd)) * d;
            const std::string where = "slot " + std::to_string(slot) + " layer " + std::to_string(l) +
                                      (kvi == 0 ? " K" : " V") + " token " + std::to_string(j) + " head " +
                                      std::to_string(hd);
            if (bits > 0 && j >= kv.sink && j < h) {
              const int64_t row = j - kv.sink;
              const int32_t pg = row / hpage < hs ? hist_tab[size_t(slot) * size_t(hs) + size_t(row / hpage)] : -1;
              if (pg < 0) {
                bad(where + ": no history page");
                continue;
              }
              const uint8_t* pool = kvi == 0 ? c.hist_k(l) : c.hist_v(l);
              CHECK_CUDA(cudaMemcpy(dev.data(),
                                    pool + ((size_t(pg) * n_kv + size_t(hd)) * hpage + size_t(row % hpage)) * rb, rb,
                                    cudaMemcpyDeviceToHost));
              quantize_row(fmt, w, want.data(), kvi == 0 ? kv.k_clip[size_t(l)] : kv.v_clip[size_t(l)]);
              ++r.hist_rows;
              if (l == 0) ++r.l0_hist_rows, r.l0_hist_same += dev == want;
              dequantize_row(fmt, dev.data(), got.data());
              dequantize_row(fmt, want.data(), want_deq.data());
              const double e = row_rel_l2(got.data(), want_deq.data(), d);
              r.hist_worst = std::max(r.hist_worst, std::isfinite(e) ? e : INFINITY);
              if (!(e <= kHistRowTol)) bad(where + ": history row rel L2 " + std::to_string(e));
            } else {
              const int32_t pg = j / page < fs ? fp_tab[size_t(slot) * size_t(fs) + size_t(j / page)] : -1;
              if (pg < 0) {
                bad(where + ": no fp page");
                continue;
              }
              const uint16_t* pool = kvi == 0 ? c.fp_k(l) : c.fp_v(l);
              CHECK_CUDA(cudaMemcpy(bits16.data(),
                                    pool + ((size_t(pg) * n_kv + size_t(hd)) * page + size_t(j % page)) * d,
                                    size_t(d) * 2, cudaMemcpyDeviceToHost));
              bool same = true;
              for (int i = 0; i < d; ++i) {
                got[size_t(i)] = bf16_to_f32(bits16[size_t(i)]);
                same = same && got[size_t(i)] == w[i];
              }
              ++r.fp_rows;
              if (l == 0) ++r.l0_fp_rows, r.l0_fp_same += same;
              const double e = row_rel_l2(got.data(), w, d);
              r.fp_worst = std::max(r.fp_worst, std::isfinite(e) ? e : INFINITY);
              if (!(e <= kFpRowTol)) bad(where + ": BF16 row rel L2 " + std::to_string(e));
            }
          }
      }
    }
  }
  return r;
}

// ---- one variant: two DeviceModels (plain and graph steps) against the references ----------

struct Check {
  std::string what;
  Reference ref;
  Tolerance tol;
  bool expect_ok;  // false: a self-check, the comparison must fail
  Stats stats;
};

void run_variant(const Variant& var, uint32_t seed) {
  std::mt19937 rng(seed);
  const oc::HostModel hm = make_model(var, rng);
  const oscar::KvFormat kv = make_format(var, rng);
  const oc::KvCacheLimits limits{3, 160, 0, 0};
  std::unique_ptr<oc::DeviceModel> plain, graph;
  const std::string made = refusal([&] {
    plain = std::make_unique<oc::DeviceModel>(hm, kv, limits);
    graph = std::make_unique<oc::DeviceModel>(hm, kv, limits);
  });
  if (!made.empty()) {
    report(false, var.name + ": DeviceModel construction threw: " + made);
    return;
  }

  std::vector<Check> checks;
  checks.push_back({"f64 reference", Reference(hm, kv, 3), var.tol, true, {}});
  if (var.corrupt_check) {
    // One element of layer 0's wk (row 5: KV head 0) set far outside the ±kQkGain/sqrt(E) range.
    oc::HostModel bad = hm;
    bad.layers[0].wk[size_t(5) * kEmbd + 17] = f32_to_bf16(1.5f);
    checks.push_back({"self-check: reference with wk[0][5,17] = 1.5", Reference(bad, kv, 3), var.tol, false, {}});
  }
  if (var.bf16_kv_check) {
    oscar::KvFormat f = kv;
    f.set_bits(std::vector<int>(size_t(f.n_layers()), 0));
    checks.push_back(
        {"self-check: reference with a BF16 cache (no quantization)", Reference(hm, f, 3), var.tol, false, {}});
  }
  Stats reused;  // rows of the sequence that reuses a slot (against the f64 reference)
  bool reusing = false;
  int reuse_slot = -1;
  long graph_rows = 0, graph_diff = 0, id_rows = 0, id_diff = 0;
  std::string problems;  // shape / bookkeeping mismatches, reported at the end
  CacheTally cache, cache_clip;
  bool cache_clip_run = false;

  auto compare_row = [&](int slot, const float* got, const std::vector<Vec>& wants) {
    for (size_t c = 0; c < checks.size(); ++c) checks[c].stats.add(got, wants[c], checks[c].tol);
    if (reusing && slot == reuse_slot) reused.add(got, wants[0], checks[0].tol);
  };
  auto ref_step = [&](int slot, int32_t id) {
    std::vector<Vec> wants;
    for (Check& c : checks) wants.push_back(c.ref.step(slot, id));
    return wants;
  };
  const size_t V = kVocab;

  // Prefill by steps on both models; compares the last row (or every row); returns the next id.
  auto prefill = [&](int slot, const std::vector<int32_t>& prompt, bool all) {
    const size_t n = prompt.size();
    std::vector<float> all_p, all_g, last_p, last_g;
    plain->prefill_by_steps(slot, prompt, all ? &all_p : nullptr);
    if (!all) last_p = plain->download_logits(1);
    const int32_t next = plain->download_next_ids(1)[0];
    graph->prefill_by_steps(slot, prompt, all ? &all_g : nullptr);
    if (!all) last_g = graph->download_logits(1);
    if (all && (all_p.size() != n * V || all_g.size() != n * V)) {
      problems += " all_logits has " + std::to_string(all_p.size()) + " floats, want " + std::to_string(n * V) + ";";
      all = false;
      last_p = plain->download_logits(1);
      last_g = graph->download_logits(1);
    }
    const std::vector<float>& rows_p = all ? all_p : last_p;
    const std::vector<float>& rows_g = all ? all_g : last_g;
    ++graph_rows;
    graph_diff += std::memcmp(rows_p.data(), rows_g.data(), rows_p.size() * sizeof(float)) != 0;
    const float* last = rows_p.data() + rows_p.size() - V;
    ++id_rows;
    id_diff += next != argmax_of(last, kVocab);
    for (size_t i = 0; i < n; ++i) {
      const std::vector<Vec> wants = ref_step(slot, prompt[i]);
      if (all)
        compare_row(slot, all_p.data() + i * V, wants);
      else if (i + 1 == n)
        compare_row(slot, last, wants);
    }
    return next;
  };

  // One batched step on both models (plain, then graph); returns the plain model's next ids.
  auto step = [&](const std::vector<int>& slots, const std::vector<int32_t>& tokens) {
    const int B = int(slots.size());
    plain->step(slots, tokens, false);
    const std::vector<float> lp = plain->download_logits(B);
    const std::vector<int32_t> ids = plain->download_next_ids(B);
    graph->step(slots, tokens, true);
    const std::vector<float> lg = graph->download_logits(B);
    ++graph_rows;
    graph_diff += lg.size() != lp.size() || std::memcmp(lp.data(), lg.data(), lp.size() * sizeof(float)) != 0;
    for (int b = 0; b < B; ++b) {
      const float* row = lp.data() + size_t(b) * V;
      ++id_rows;
      id_diff += ids[size_t(b)] != argmax_of(row, kVocab);
      compare_row(slots[size_t(b)], row, ref_step(slots[size_t(b)], tokens[size_t(b)]));
    }
    return ids;
  };

  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = token(rng);
    return t;
  };
  // Batched steps: greedy next ids, every third step a random (teacher-forced) id instead.
  std::vector<int32_t> next(3, 0);
  auto steps = [&](const std::vector<int>& slots, int n) {
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> tokens;
      for (int s : slots) tokens.push_back(i % 3 == 2 ? token(rng) : next[size_t(s)]);
      const std::vector<int32_t> ids = step(slots, tokens);
      for (size_t b = 0; b < slots.size(); ++b) next[size_t(slots[b])] = ids[b];
    }
  };

  const std::string ran = refusal([&] {
    for (int i = 0; i < 3; ++i) {
      const int sp = plain->cache().add_sequence(), sg = graph->cache().add_sequence();
      if (sp != i || sg != i) problems += " add_sequence #" + std::to_string(i) + " gave " + std::to_string(sp) + ";";
    }
    // Prompts of 1, 37 and 90 tokens (every token's logits for the longest), then batched steps
    // over all three, over two of them in another order, a slot freed and reused by a new
    // sequence, and all three again in a third order.
    const int lens[3] = {1, 37, 90};
    for (int s = 0; s < 3; ++s) next[size_t(s)] = prefill(s, random_tokens(lens[s]), s == 2);
    steps({0, 1, 2}, 30);
    steps({2, 0}, 6);
    plain->cache().remove_sequence(1);
    graph->cache().remove_sequence(1);
    reuse_slot = plain->cache().add_sequence();
    const int reuse_g = graph->cache().add_sequence();
    if (reuse_slot != 1 || reuse_g != 1 || plain->cache().length(1) != 0 || graph->cache().length(1) != 0)
      problems += " reused slot " + std::to_string(reuse_slot) + " length " + std::to_string(plain->cache().length(1)) +
                  " (want slot 1, length 0);";
    reuse_slot = 1;
    for (Check& c : checks) c.ref.reset(1);
    reusing = true;
    next[1] = prefill(1, random_tokens(45), false);
    steps({1, 2, 0}, 12);
    for (int s = 0; s < 3; ++s) {
      const int64_t want = checks[0].ref.length(s);
      if (plain->cache().length(s) != want || graph->cache().length(s) != want)
        problems += " slot " + std::to_string(s) + " length " + std::to_string(plain->cache().length(s)) + "/" +
                    std::to_string(graph->cache().length(s)) + ", want " + std::to_string(want) + ";";
    }
    cache = compare_cache(*plain, checks[0].ref, kv);
    if (var.bf16_kv_check) {  // self-check: the host quantizing with clip 0.9 on every layer
      oscar::KvFormat f = kv;
      std::fill(f.k_clip.begin(), f.k_clip.end(), 0.9f);
      std::fill(f.v_clip.begin(), f.v_clip.end(), 0.9f);
      cache_clip = compare_cache(*plain, checks[0].ref, f);
      cache_clip_run = true;
    }
    if (kv.any_history())
      for (int64_t t = 0; t <= 160; ++t) {
        const int64_t want = kv.sink + std::max<int64_t>(0, t - kv.sink - kv.window);
        if (plain->cache().history_end(t) != want) {
          problems += " history_end(" + std::to_string(t) + ") = " + std::to_string(plain->cache().history_end(t)) +
                      ", want " + std::to_string(want) + ";";
          break;
        }
      }
  });
  if (!ran.empty()) report(false, var.name + ": the run threw: " + ran);

  for (const Check& c : checks) {
    const bool ok = c.stats.ok(c.tol);
    report(ok == c.expect_ok, var.name + ": " + c.what + ": " + c.stats.describe(c.tol) +
                                  (c.expect_ok ? ""
                                   : ok        ? " -- passed (BAD: must fail)"
                                               : " -- fails (good)"));
  }
  report(reused.ok(checks[0].tol) && problems.empty(),
         var.name +
             ": slot 1 freed and reused (starts at length 0), its new sequence: " + reused.describe(checks[0].tol) +
             (problems.empty() ? "; lengths and history_end as expected" : ";" + problems));
  report(cache.ok(), var.name + ": KV cache after the run vs the reference's rows: " + cache.describe());
  if (cache_clip_run)
    report(!cache_clip.ok(),
           var.name + ": self-check: KV cache vs rows quantized with clip 0.9 instead: " + cache_clip.describe() +
               (cache_clip.ok() ? " -- passed (BAD: must fail)" : " -- fails (good)"));
  report(graph_rows > 0 && graph_diff == 0,
         var.name + ": graph steps (and prefill) bitwise equal to plain steps: " + std::to_string(graph_diff) + " of " +
             std::to_string(graph_rows) + " steps differ");
  report(id_rows > 0 && id_diff == 0, var.name + ": next ids = first argmax of the downloaded logits: " +
                                          std::to_string(id_diff) + " of " + std::to_string(id_rows) + " differ");
}

// ---- refusals --------------------------------------------------------------------------------

void run_refusal_checks(uint32_t seed) {
  std::mt19937 rng(seed);
  Variant base;
  base.name = "refusals";
  base.bits = {0, 0};
  base.k_clip = base.v_clip = {0.0f, 0.0f};
  base.rot_k = base.rot_v = {0, 0};
  const oc::HostModel hm = make_model(base, rng);
  const oscar::KvFormat bf16 = make_format(base, rng);
  oscar::KvFormat int2 = bf16;
  int2.set_bits({2, 2});
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);

  // Steps one slot token by token until a step throws or n ran: (steps that ran, message).
  auto run_until_refused = [&](oc::DeviceModel& m, int slot, int n) {
    for (int i = 0; i < n; ++i) {
      const std::vector<int> s{slot};
      const std::vector<int32_t> t{token(rng)};
      const std::string msg = refusal([&] { m.step(s, t); });
      if (!msg.empty()) return std::make_pair(i, msg);
    }
    return std::make_pair(n, std::string());
  };
  // A model made with `limits` runs `ok_steps` tokens and refuses the next (length unchanged).
  auto full_case = [&](const std::string& what, const oscar::KvFormat& kv, const oc::KvCacheLimits& limits, int ok_steps) {
    std::pair<int, std::string> r{-1, ""};
    int64_t len = -1;
    const std::string made = refusal([&] {
      oc::DeviceModel m(hm, kv, limits);
      const int slot = m.cache().add_sequence();
      r = run_until_refused(m, slot, ok_steps + 1);
      len = m.cache().length(slot);
    });
    report(made.empty() && r.first == ok_steps && is_refusal(r.second) && len == ok_steps,
           what + ": " + std::to_string(r.first) + " steps ran (want " + std::to_string(ok_steps) + "), length " +
               std::to_string(len) + ", then \"" + r.second + "\"" + (made.empty() ? "" : " [threw: " + made + "]"));
  };
  full_case("fp pool of 1 page (BF16)", bf16, oc::KvCacheLimits{1, 64, 1, 0}, 16);
  // S 16, W 32: the token at position 112 demotes history row 80 = S + 64, the first of a
  // second 64-row page.
  static_assert(oc::kDecodeHistBlockTokens == 64, "the expected step count assumes 64-row history pages");
  full_case("history pool of 1 page (INT2, S 16, W 32)", int2, oc::KvCacheLimits{1, 200, 0, 1}, 112);
  full_case("sequence at max_seq_len 20", bf16, oc::KvCacheLimits{1, 20, 0, 0}, 20);

  {  // Token ids outside [0, V), alone and beside a valid one; a second add_sequence with one slot.
    std::string msgs[3], add_msg, made;
    made = refusal([&] {
      oc::DeviceModel m(hm, bf16, oc::KvCacheLimits{2, 32, 0, 0});
      const int a = m.cache().add_sequence(), b = m.cache().add_sequence();
      const std::vector<int> one{a}, two{a, b};
      const std::vector<int32_t> t0{kVocab}, t1{-1}, t2{5, kVocab + 7};
      msgs[0] = refusal([&] { m.step(one, t0); });
      msgs[1] = refusal([&] { m.step(one, t1); });
      msgs[2] = refusal([&] { m.step(two, t2); });
      add_msg = refusal([&] { m.cache().add_sequence(); });
    });
    report(made.empty() && is_refusal(msgs[0]) && is_refusal(msgs[1]) && is_refusal(msgs[2]),
           "token ids " + std::to_string(kVocab) + ", -1 and {5, " + std::to_string(kVocab + 7) + "} refused: \"" +
               msgs[0] + "\" / \"" + msgs[1] + "\" / \"" + msgs[2] + "\"" +
               (made.empty() ? "" : " [threw: " + made + "]"));
    report(made.empty() && is_refusal(add_msg), "add_sequence with every slot taken refused: \"" + add_msg + "\"");
  }

  // Wrong tensors and formats: the constructor refuses, naming the tensor or field.
  struct Bad {
    std::string what;
    std::vector<std::string> names;  // the message must contain one of these
    oc::HostModel m;
    oscar::KvFormat kv;
  };
  std::vector<Bad> bad;
  auto add = [&](const std::string& what, std::vector<std::string> names) {
    bad.push_back({what, std::move(names), hm, bf16});
    return &bad.back();
  };
  add("layers[1].wk one element short", {"wk"})->m.layers[1].wk.pop_back();
  add("output missing (not tied)", {"output"})->m.output.clear();
  add("layers[0].attn_norm one element long", {"attn_norm"})->m.layers[0].attn_norm.push_back(1.0f);
  add("RoPE's inv_freq of 31 entries", {"inv_freq"})->m.rope.inv_freq.pop_back();
  add("qkv_bias without biases", {"bq", "bk", "bv"})->m.dims.qkv_bias = true;
  add("KvFormat bits for 1 of 2 layers", {"bits"})->kv.set_bits({0});
  add("KvFormat rot_k[0] one element short", {"rot_k"})->kv.rot_k[0].assign(size_t(kHeadDim) * kHeadDim - 1, 0.0f);
  add("KvFormat k_shift for 1 of 2 layers", {"k_shift"})->kv.k_shift = {std::vector<float>(size_t(kKvHeads * kHeadDim))};
  add("KvFormat k_shift[1] one KV head short", {"k_shift"})->kv.k_shift = {{}, std::vector<float>(size_t(kHeadDim))};
  for (const Bad& b : bad) {
    const std::string msg = refusal([&] { oc::DeviceModel m(b.m, b.kv, oc::KvCacheLimits{1, 32, 0, 0}); });
    bool named = false;
    for (const std::string& n : b.names) named = named || msg.find(n) != std::string::npos;
    report(is_refusal(msg) && named, "constructor refuses " + b.what + ": \"" + msg + "\"");
  }

  {  // RandomWeightLoader (the benchmarks' model): steps run, logits finite, ids in range.
    bool ok = false;
    std::string detail;
    const std::string msg = refusal([&] {
      Variant q = base;
      q.qkv_bias = true;
      q.bits = {2, 2};
      q.k_clip = q.v_clip = {0.96f, 0.92f};
      const oscar::KvFormat kv = make_format(q, rng);
      auto m = std::make_unique<oc::DeviceModel>(make_dims(q), make_rope(q), kv, oc::KvCacheLimits{2, 128, 0, 0},
                                                 oc::RandomWeightLoader(seed));
      const int a = m->cache().add_sequence(), b = m->cache().add_sequence();
      long bad_values = 0, bad_ids = 0;
      for (int i = 0; i < 70; ++i) {
        const std::vector<int> slots{a, b};
        const std::vector<int32_t> tokens{token(rng), token(rng)};
        m->step(slots, tokens, i % 2 == 1);
        for (float x : m->download_logits(2)) bad_values += !std::isfinite(x);
        for (int32_t id : m->download_next_ids(2)) bad_ids += id < 0 || id >= kVocab;
      }
      ok = bad_values == 0 && bad_ids == 0;
      detail = std::to_string(bad_values) + " non-finite logits, " + std::to_string(bad_ids) + " ids out of range";
    });
    report(msg.empty() && ok, "random weights (INT2, qkv bias), 70 steps of 2: " + detail +
                                  (msg.empty() ? "" : " [threw: " + msg + "]"));
  }
}

// The models and caches under test.
std::vector<Variant> test_variants() {
  std::vector<Variant> variants(5);
  {
    Variant& v = variants[0];  // Llama-like: no bias, NeoX RoPE, BF16 cache
    v.name = "llama bf16";
    v.bits = {0, 0};
    v.k_clip = v.v_clip = {0.0f, 0.0f};
    v.rot_k = v.rot_v = {0, 0};
    v.tol = kBf16Tol;
    v.corrupt_check = true;
  }
  {
    Variant& v = variants[1];  // Qwen2-like: QKV bias, INT2 history with R_K, clips off / on
    v.name = "qwen2 int2 rot_k k-shift";
    v.qkv_bias = true;
    v.bits = {2, 2};
    v.k_clip = {0.0f, 0.97f};
    v.v_clip = {0.0f, 0.94f};
    v.rot_k = {1, 1};
    v.rot_v = {0, 0};
    v.k_shift = {1, 1};
    v.tol = kInt2Tol;
    v.bf16_kv_check = true;
  }
  {
    Variant& v = variants[2];  // Qwen3-like: q/k norm, interleaved RoPE, tied, INT4 with R_V
    v.name = "qwen3 int4 rot_v tied";
    v.qk_norm = true;
    v.interleaved = true;
    v.tied = true;
    v.position_scale = 0.5;
    v.bits = {4, 4};
    v.k_clip = {0.96f, 0.0f};
    v.v_clip = {0.92f, 0.0f};
    v.rot_k = {0, 1};
    v.rot_v = {1, 1};
    v.tol = kInt4Tol;
  }
  {
    Variant& v = variants[3];  // a BF16 layer beside an INT2 layer (rotations on both)
    v.name = "mixed bf16/int2 k-shift";
    v.bits = {0, 2};
    v.k_clip = {0.0f, 0.96f};
    v.v_clip = {0.0f, 0.92f};
    v.rot_k = {1, 1};
    v.rot_v = {0, 1};
    v.k_shift = {0, 1};
    v.tol = kInt2Tol;
  }
  {
    Variant& v = variants[4];  // INT8 / INT2 / BF16 at G 32 (the CUDA-core path), S and W off the page grid
    v.name = "mixed int8/int2/bf16 G32 S5 W27";
    v.n_layers = 3;
    v.qkv_bias = true;
    v.interleaved = true;
    v.sink = 5;
    v.window = 27;
    v.group = 32;
    v.bits = {8, 2, 0};
    v.k_clip = {0.9f, 0.95f, 0.0f};
    v.v_clip = {0.0f, 0.9f, 0.0f};
    v.rot_k = {1, 0, 1};
    v.rot_v = {1, 1, 0};
    v.tol = kInt2Tol;
  }
  return variants;
}

}  // namespace

namespace oscar_cuda_test {

void run_device_model_tests(uint32_t seed) {
  std::printf(
      "device_model tolerance vs the f64 reference (scale = max(1, max|ref logit|)): BF16 cache max|dlogit| <= "
      "%.0e*scale per row, rel L2 <= %.0e, greedy ids equal up to near ties; INT2 history rel L2 <= %.0e, INT4 "
      "<= %.0e, greedy ids >= %.0f%% equal (gaps <= %.0e*scale count as ties)\n",
      kBf16Tol.max_rel, kBf16Tol.rel_l2, kInt2Tol.rel_l2, kInt4Tol.rel_l2, 100.0 * kInt2Tol.agree, kInt2Tol.tie);
  const std::vector<Variant> variants = test_variants();
  for (size_t i = 0; i < variants.size(); ++i) run_variant(variants[i], seed + uint32_t(i));
  run_refusal_checks(seed + 100u);
}

}  // namespace oscar_cuda_test
