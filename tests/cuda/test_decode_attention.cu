// oscar::cuda::decode_attention against an f64 host reference, on random mixed caches
// built here with an independent quantizer for the docs/kv-layout.md §1 row layout.
// The reference reads the same bytes (pools + page tables) the GPU reads. With a key bias
// (--k-bias-split: f32 scores per key, DecodeAttentionParams::key_bias) the reference adds
// the same values. Run from main.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_test_util.h"
#include "oscar/cuda/check_cuda.h"
#include "oscar/cuda/decode_attention.h"

namespace {

using namespace oscar_cuda_test;
using oscar::cuda::DecodeAttentionParams;

// ---- a random mixed cache on the host ----------------------------------------------------

struct Case {
  std::string name;
  int bits;  // 0: BF16 only
  int d, group_size, n_kv, gqa, sink, window, chunk;  // chunk 0: decode_attention_default_chunk
  std::vector<int> lens;
  bool tensor_cores = true;   // DecodeAttentionParams::tensor_cores
  bool window_bound = false;  // pass the exact max_window_keys (else 0: max_seq_len)
  bool key_bias = false;      // DecodeAttentionParams::key_bias: a score added to every key
  // INT2/INT4/INT8 with G = d take the tensor-core path (decode_attention.h).
  bool split() const { return tensor_cores && bits != 0 && group_size == d; }
};

constexpr int kPage = oscar::cuda::kDecodeFpBlockTokens;       // tokens per fp page
constexpr int kHistPage = oscar::cuda::kDecodeHistBlockTokens;  // rows per history page
constexpr uint16_t kBf16Poison = 0x7fc0;  // NaN: a row the kernel must not read
constexpr uint8_t kQuantPoison = 0x7e;    // every fp16 made of it is NaN (scale and zero)

struct HostCache {
  Case c;
  RowFormat fmt{};
  int n_heads = 0, fp_stride = 0, hist_stride = 0;
  std::vector<int> hist_end;                    // [B]
  std::vector<int32_t> fp_blocks, hist_blocks;  // [B, stride]
  std::vector<uint16_t> fp_k, fp_v;             // [n_fp_blocks, n_kv, 16, d]
  std::vector<uint8_t> hist_k, hist_v;          // [n_hist_blocks, n_kv, 16 · row_bytes]
  std::vector<float> q;                         // [B, n_heads, d]
  int key_bias_stride = 0;
  std::vector<float> key_bias;                  // [B, n_heads, key_bias_stride], log2 units; empty = none

  int batch() const { return int(c.lens.size()); }
  int hist_begin(int b) const { return std::min(c.sink, c.lens[size_t(b)]); }
  int hist_stop(int b) const {
    return c.bits == 0 ? hist_begin(b) : std::min(std::max(hist_end[size_t(b)], hist_begin(b)), c.lens[size_t(b)]);
  }
  bool in_history(int b, int t) const { return t >= hist_begin(b) && t < hist_stop(b); }
  size_t page_bytes() const { return size_t(kHistPage) * size_t(fmt.row_bytes()); }
};

HostCache build_cache(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.5f, 1.5f);
  HostCache h;
  h.c = c;
  h.fmt = RowFormat{c.d, c.bits == 0 ? 8 : c.bits, c.bits == 0 ? c.d : c.group_size};
  h.n_heads = c.n_kv * c.gqa;
  const int B = int(c.lens.size());
  const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
  h.fp_stride = (max_len + kPage - 1) / kPage + 2;  // spare −1 entries past the end
  h.hist_stride = (max_len + kHistPage - 1) / kHistPage + 2;
  h.hist_end.resize(size_t(B));
  for (int b = 0; b < B; ++b)  // T = 1 demotion: h(t) = S + max(0, t − S − W)
    h.hist_end[size_t(b)] = c.sink + std::max(0, c.lens[size_t(b)] - c.sink - c.window);

  // Pages: an fp page exists when one of its tokens is sink/recent, a history page when one
  // of its rows is history; ids are shuffled over pools with spare (poisoned) pages.
  h.fp_blocks.assign(size_t(B) * h.fp_stride, -1);
  h.hist_blocks.assign(size_t(B) * h.hist_stride, -1);
  std::vector<std::pair<int, int>> fp_need, hist_need;  // (b, page index)
  for (int b = 0; b < B; ++b) {
    const int t = c.lens[size_t(b)];
    for (int p = 0; p * kPage < t; ++p) {
      bool fp = false;
      for (int x = p * kPage; x < std::min(t, p * kPage + kPage); ++x) fp = fp || !h.in_history(b, x);
      if (fp) fp_need.emplace_back(b, p);
    }
    for (int p = 0; h.hist_begin(b) + p * kHistPage < h.hist_stop(b); ++p) hist_need.emplace_back(b, p);
  }
  const int n_fp_blocks = int(fp_need.size()) + 3, n_hist_blocks = int(hist_need.size()) + 3;
  std::vector<int> fp_ids(static_cast<size_t>(n_fp_blocks)), hist_ids(static_cast<size_t>(n_hist_blocks));
  std::iota(fp_ids.begin(), fp_ids.end(), 0);
  std::iota(hist_ids.begin(), hist_ids.end(), 0);
  std::shuffle(fp_ids.begin(), fp_ids.end(), rng);
  std::shuffle(hist_ids.begin(), hist_ids.end(), rng);
  for (size_t i = 0; i < fp_need.size(); ++i)
    h.fp_blocks[size_t(fp_need[i].first) * h.fp_stride + size_t(fp_need[i].second)] = fp_ids[i];
  for (size_t i = 0; i < hist_need.size(); ++i)
    h.hist_blocks[size_t(hist_need[i].first) * h.hist_stride + size_t(hist_need[i].second)] = hist_ids[i];

  const size_t fp_elems = size_t(n_fp_blocks) * c.n_kv * kPage * c.d;
  h.fp_k.assign(fp_elems, kBf16Poison);
  h.fp_v.assign(fp_elems, kBf16Poison);
  if (c.bits != 0) {
    h.hist_k.assign(size_t(n_hist_blocks) * c.n_kv * h.page_bytes(), kQuantPoison);
    h.hist_v.assign(h.hist_k.size(), kQuantPoison);
  }

  // Rows: keys get a per-channel offset (so zeros are not all near L/2), values are N(0, 1).
  std::vector<float> key_bias(size_t(c.n_kv) * c.d);
  for (float& v : key_bias) v = uni(rng);
  std::vector<float> k(size_t(c.d)), v(size_t(c.d));
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < c.lens[size_t(b)]; ++t) {
      for (int kvh = 0; kvh < c.n_kv; ++kvh) {
        for (int i = 0; i < c.d; ++i) {
          k[size_t(i)] = normal(rng) + key_bias[size_t(kvh) * c.d + i];
          v[size_t(i)] = normal(rng);
        }
        if (h.in_history(b, t)) {
          const int page = h.hist_blocks[size_t(b) * h.hist_stride + size_t((t - c.sink) / kHistPage)];
          const size_t off = (size_t(page) * c.n_kv + kvh) * h.page_bytes() +
                             size_t((t - c.sink) % kHistPage) * size_t(h.fmt.row_bytes());
          quantize_row(h.fmt, k.data(), h.hist_k.data() + off);
          quantize_row(h.fmt, v.data(), h.hist_v.data() + off);
        } else {
          const int page = h.fp_blocks[size_t(b) * h.fp_stride + size_t(t / kPage)];
          const size_t off = ((size_t(page) * c.n_kv + kvh) * kPage + size_t(t % kPage)) * c.d;
          for (int i = 0; i < c.d; ++i) {
            h.fp_k[off + size_t(i)] = f32_to_bf16(k[size_t(i)]);
            h.fp_v[off + size_t(i)] = f32_to_bf16(v[size_t(i)]);
          }
        }
      }
    }
  }
  h.q.resize(size_t(B) * h.n_heads * c.d);
  for (float& x : h.q) x = normal(rng);
  if (c.key_bias) {
    // Bias scores as large as the keys' own (Qwen2.5's are larger than the rest of the
    // score): a smooth wave over positions, as RoPE of a bias gives, plus noise; entries
    // past each sequence's length are NaN (never read).
    h.key_bias_stride = max_len + 5;
    h.key_bias.assign(size_t(B) * h.n_heads * h.key_bias_stride, NAN);
    for (int b = 0; b < B; ++b)
      for (int hh = 0; hh < h.n_heads; ++hh) {
        const float amp = uni(rng) * 4.0f, freq = 0.01f + 0.05f * std::fabs(uni(rng));
        for (int t = 0; t < c.lens[size_t(b)]; ++t)
          h.key_bias[(size_t(b) * h.n_heads + hh) * h.key_bias_stride + t] = amp * std::sin(freq * t) + 1.5f * normal(rng);
      }
  }
  return h;
}

// ---- f64 reference over the stored bytes --------------------------------------------------

// Row of (b, kvh, t) as f32: the bf16 row of its fp page or the dequantized history row.
void read_row(const HostCache& h, bool key, int b, int kvh, int t, float* x) {
  const Case& c = h.c;
  if (h.in_history(b, t)) {
    const int page = h.hist_blocks[size_t(b) * h.hist_stride + size_t((t - c.sink) / kHistPage)];
    if (page < 0) throw std::logic_error("test bug: history row without a page");
    const size_t off =
        (size_t(page) * c.n_kv + kvh) * h.page_bytes() + size_t((t - c.sink) % kHistPage) * size_t(h.fmt.row_bytes());
    dequantize_row(h.fmt, (key ? h.hist_k : h.hist_v).data() + off, x);
  } else {
    const int page = h.fp_blocks[size_t(b) * h.fp_stride + size_t(t / kPage)];
    if (page < 0) throw std::logic_error("test bug: fp row on a released page");
    const size_t off = ((size_t(page) * c.n_kv + kvh) * kPage + size_t(t % kPage)) * c.d;
    for (int i = 0; i < c.d; ++i) x[i] = bf16_to_f32((key ? h.fp_k : h.fp_v)[off + size_t(i)]);
  }
}

// The q the tensor-core path multiplies history keys by, in the reference's units: q·c with
// c = log2(e)/√d in f32, times the power of two 2^-e that puts max|q·c·2^-e| in [2^14, 2^15)
// and rounded to f16 (INT4) or to an integer in [−32768, 32767] (INT8), or in [2^12, 2^13)
// and rounded to an integer in [−8192, 8191] (INT2; INT2 and INT8 scores are integer MMAs),
// and the scaling undone (docs/cuda.md). Its scores are then exact up to f32 summation.
std::vector<double> history_q(const float* q, int d, int bits) {
  const float c = 1.4426950408889634f / std::sqrt(float(d));
  float mx = 0.0f;
  for (int i = 0; i < d; ++i) mx = std::max(mx, std::fabs(q[i] * c));
  int ex = 0;
  std::frexp(mx, &ex);
  const int e = mx > 0.0f ? ex - (bits == 2 ? 13 : 15) : 0;
  std::vector<double> r(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) {
    const float x = std::ldexp(q[i] * c, -e);
    const float q_max = bits == 2 ? 8191.0f : 32767.0f;
    const float rounded =
        bits == 4 ? fp16_to_f32(f32_to_fp16(x)) : std::min(std::max(std::nearbyint(x), -q_max - 1.0f), q_max);
    r[size_t(i)] = std::ldexp(double(rounded), e) / double(c);
  }
  return r;
}

struct Reference {
  std::vector<double> out;       // [B, n_heads, d]
  std::vector<double> hist_abs;  // Σ over history keys of weight·|v̂| per output element
};

// lens overrides the sequence lengths (the drop-a-key self-check).
Reference reference(const HostCache& h, const std::vector<int>& lens, bool with_key_bias = true) {
  const Case& c = h.c;
  std::vector<double> out(h.q.size(), 0.0), hist_abs(h.q.size(), 0.0);
  std::vector<float> row(size_t(c.d));
  std::vector<std::vector<double>> q_hist(size_t(h.batch()) * h.n_heads);
  for (size_t i = 0; i < q_hist.size(); ++i) q_hist[i] = history_q(h.q.data() + i * c.d, c.d, c.bits);
  for (int b = 0; b < h.batch(); ++b) {
    const int t_len = lens[size_t(b)];
    for (int kvh = 0; kvh < c.n_kv; ++kvh) {
      std::vector<double> s(size_t(t_len) * c.gqa);
      for (int t = 0; t < t_len; ++t) {
        read_row(h, true, b, kvh, t, row.data());
        for (int g = 0; g < c.gqa; ++g) {
          const size_t head = size_t(b) * h.n_heads + size_t(kvh) * c.gqa + g;
          const float* q = h.q.data() + head * c.d;
          const bool rounded = c.split() && h.in_history(b, t);
          double dot = 0.0;
          for (int i = 0; i < c.d; ++i) dot += (rounded ? q_hist[head][size_t(i)] : double(q[i])) * double(row[size_t(i)]);
          s[size_t(g) * t_len + t] = dot / std::sqrt(double(c.d));
          // The bias is in log2 units (the kernels' scores are exp2 exponents).
          if (with_key_bias && !h.key_bias.empty())
            s[size_t(g) * t_len + t] += double(h.key_bias[head * h.key_bias_stride + t]) * std::log(2.0);
        }
      }
      for (int g = 0; g < c.gqa; ++g) {
        double* sg = s.data() + size_t(g) * t_len;
        const double m = t_len > 0 ? *std::max_element(sg, sg + t_len) : 0.0;
        double l = 0.0;
        for (int t = 0; t < t_len; ++t) l += (sg[t] = std::exp(sg[t] - m));
        for (int t = 0; t < t_len; ++t) sg[t] /= l;
      }
      const size_t o0 = (size_t(b) * h.n_heads + size_t(kvh) * c.gqa) * c.d;
      for (int t = 0; t < t_len; ++t) {
        read_row(h, false, b, kvh, t, row.data());
        const bool hist = h.in_history(b, t);
        for (int g = 0; g < c.gqa; ++g)
          for (int i = 0; i < c.d; ++i) {
            const double w = s[size_t(g) * t_len + t], v = double(row[size_t(i)]);
            out[o0 + size_t(g) * c.d + i] += w * v;
            if (hist) hist_abs[o0 + size_t(g) * c.d + i] += w * std::fabs(v);
          }
      }
    }
  }
  return {out, hist_abs};
}

// ---- the GPU side ---------------------------------------------------------------------------

int g_n_sm = 0;

// Runs the kernel on the cache (with lens as the GPU's lengths); out is poisoned with NaN first.
std::vector<float> run_gpu(const HostCache& h, const std::vector<int>& lens, bool with_key_bias = true) {
  const Case& c = h.c;
  DeviceBuffer q = DeviceBuffer::from(h.q), len = DeviceBuffer::from(lens), hend = DeviceBuffer::from(h.hist_end);
  DeviceBuffer fpk = DeviceBuffer::from(h.fp_k), fpv = DeviceBuffer::from(h.fp_v);
  DeviceBuffer fpb = DeviceBuffer::from(h.fp_blocks), hb = DeviceBuffer::from(h.hist_blocks);
  DeviceBuffer hk = DeviceBuffer::from(h.hist_k), hv = DeviceBuffer::from(h.hist_v);
  DeviceBuffer kb = DeviceBuffer::from(h.key_bias);
  DecodeAttentionParams p;
  p.batch = h.batch();
  p.n_heads = h.n_heads;
  p.n_kv_heads = c.n_kv;
  p.head_dim = c.d;
  p.bits = c.bits;
  p.group = c.group_size;
  p.sink = c.sink;
  p.max_seq_len = *std::max_element(lens.begin(), lens.end());
  p.tensor_cores = c.tensor_cores;
  if (c.window_bound)
    for (int b = 0; b < h.batch(); ++b)
      p.max_window_keys = std::max<int64_t>(p.max_window_keys, h.hist_begin(b) + lens[size_t(b)] - h.hist_stop(b));
  p.chunk_keys = c.chunk > 0 ? c.chunk : oscar::cuda::decode_attention_default_chunk(p, g_n_sm);
  p.q = q.as<float>();
  p.seq_len = len.as<int32_t>();
  p.fp_k = fpk.as<uint16_t>();
  p.fp_v = fpv.as<uint16_t>();
  p.fp_blocks = fpb.as<int32_t>();
  p.fp_blocks_stride = h.fp_stride;
  if (c.bits != 0) {
    p.hist_end = hend.as<int32_t>();
    p.hist_k = hk.as<uint8_t>();
    p.hist_v = hv.as<uint8_t>();
    p.hist_blocks = hb.as<int32_t>();
    p.hist_blocks_stride = h.hist_stride;
  }
  if (with_key_bias && !h.key_bias.empty()) p.key_bias = kb.as<float>(), p.key_bias_stride = h.key_bias_stride;
  DeviceBuffer ws(oscar::cuda::decode_attention_workspace_bytes(p));
  DeviceBuffer out(h.q.size() * sizeof(float));
  CHECK_CUDA(cudaMemset(ws.ptr, 0xff, oscar::cuda::decode_attention_workspace_bytes(p)));
  CHECK_CUDA(cudaMemset(out.ptr, 0xff, h.q.size() * sizeof(float)));  // 0xffffffff is NaN
  p.workspace = ws.as<float>();
  p.out = out.as<float>();
  oscar::cuda::decode_attention(p);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  return download<float>(out, h.q.size());
}

// Tolerances against f64 over the same dequantized rows: |gpu − ref| ≤ atol + rtol·|ref| +
// hist·(Σ_history weight·|v̂|) per element, relative L2 ≤ rel_l2.
struct Tolerance {
  double atol, rtol, rel_l2, hist = 0.0;
};
// The CUDA-core path is f32 throughout. Outputs are O(0.01–1); f32 accumulation over ≤ 4097
// keys is off by a few 1e-6 at worst (mostly 1e-7), so this leaves ≥ 10× margin, while a
// wrong code, scale, zero or a missed key moves outputs by ≥ 1e-3 (the self-checks show it).
constexpr Tolerance kF32Tol{5e-5, 5e-4, 5e-5};
// The tensor-core path (the reference already rounds q as it does) also rounds each history
// weight p·s_V to f16, a relative error ≤ 2^-11, so an output moves by at most 2^-11 times
// its Σ_history weight·|v̂| (plus the f32 margin).
constexpr Tolerance kTensorTol{5e-5, 5e-4, 3e-4, 0x1p-11};
Tolerance tolerance(const HostCache& h) { return h.c.split() ? kTensorTol : kF32Tol; }

struct Compare {
  bool ok;
  double max_abs, rel_l2;
  long nan_count;
};

Compare compare(const std::vector<float>& got, const Reference& ref, const Tolerance& tol) {
  const std::vector<double>& want = ref.out;
  Compare r{true, 0.0, 0.0, 0};
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++r.nan_count;
      r.ok = false;
      continue;
    }
    const double e = std::fabs(double(got[i]) - want[i]);
    r.max_abs = std::max(r.max_abs, e);
    if (e > tol.atol + tol.rtol * std::fabs(want[i]) + tol.hist * ref.hist_abs[i]) r.ok = false;
    num += e * e;
    den += want[i] * want[i];
  }
  r.rel_l2 = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  if (r.rel_l2 > tol.rel_l2) r.ok = false;
  return r;
}

std::string describe(const Compare& r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "max_abs %.2e rel_l2 %.2e nan %ld", r.max_abs, r.rel_l2, r.nan_count);
  return buf;
}

std::string lens_str(const std::vector<int>& lens) {
  std::string s;
  for (int t : lens) s += (s.empty() ? "" : ",") + std::to_string(t);
  return s;
}

void run_case(const Case& c, uint32_t seed) {
  const HostCache h = build_cache(c, seed);
  const Tolerance tol = tolerance(h);
  const Compare r = compare(run_gpu(h, c.lens), reference(h, c.lens), tol);
  char tol_text[64];
  std::snprintf(tol_text, sizeof tol_text, " (rel L2 <= %.0e)", tol.rel_l2);
  report(r.ok, c.name + (c.split() ? " [tensor cores]" : "") + (c.key_bias ? " [key bias]" : "") + " lens=" + lens_str(c.lens) +
                   " chunk=" + std::to_string(c.chunk) + ": " + describe(r) + tol_text);
}

// The comparison must be able to fail: a flipped history code byte and a dropped key.
void run_self_checks(const Case& c, uint32_t seed) {
  HostCache h = build_cache(c, seed);
  const Tolerance tol = tolerance(h);
  const Reference ref = reference(h, c.lens);

  // (a) Flip every bit of the first code byte of the V row with the largest weight for head
  // 0 of sequence 1 (history rows [64, 164)): INT2 codes c → 3 − c, so each of the byte's
  // 4 dims moves by ≥ 1 step.
  const int b = 1, kvh = 0;
  int best = c.sink;
  {
    std::vector<float> k(size_t(c.d));
    double best_s = -1e300;
    const float* q = h.q.data() + size_t(b) * h.n_heads * c.d;
    for (int t = c.sink; t < h.hist_stop(b); ++t) {
      read_row(h, true, b, kvh, t, k.data());
      double s = 0.0;
      for (int i = 0; i < c.d; ++i) s += double(q[i]) * k[size_t(i)];
      if (s > best_s) best_s = s, best = t;
    }
  }
  HostCache bad = h;
  const int page = h.hist_blocks[size_t(b) * h.hist_stride + size_t((best - c.sink) / kHistPage)];
  bad.hist_v[(size_t(page) * c.n_kv + kvh) * h.page_bytes() + size_t((best - c.sink) % kHistPage) * h.fmt.row_bytes()] ^= 0xff;
  const Reference ref_bad = reference(bad, c.lens);
  const std::vector<float> gpu_bad = run_gpu(bad, c.lens);
  double predicted = 0.0;
  for (size_t i = 0; i < ref.out.size(); ++i) predicted = std::max(predicted, std::fabs(ref.out[i] - ref_bad.out[i]));
  const Compare vs_orig = compare(gpu_bad, ref, tol), vs_bad = compare(gpu_bad, ref_bad, tol);
  report(predicted > 20 * tol.atol && !vs_orig.ok && vs_bad.ok,
         c.name + ": corrupted code byte (token " + std::to_string(best) + "): reference moves by " +
             std::to_string(predicted) + "; vs original " + (vs_orig.ok ? "passed (BAD)" : "fails (good)") +
             ", vs corrupted reference " + describe(vs_bad));

  // (b) The GPU sees one key less than the reference (the last sequence's last key: BF16
  // with a recent window, a history key without one).
  std::vector<int> short_lens = c.lens;
  short_lens.back() -= 1;
  const std::vector<float> gpu_short = run_gpu(h, short_lens);
  const Compare miss = compare(gpu_short, ref, tol), same = compare(gpu_short, reference(h, short_lens), tol);
  report(!miss.ok && same.ok, c.name + ": dropped last key: vs full reference " +
                                  (miss.ok ? "passed (BAD)" : "fails (good, " + describe(miss) + ")") +
                                  ", vs shortened reference " + describe(same));

  // (c) With a key bias, the GPU without it.
  if (!h.key_bias.empty()) {
    const std::vector<float> gpu_plain = run_gpu(h, c.lens, /*with_key_bias=*/false);
    const Compare biased = compare(gpu_plain, ref, tol), plain = compare(gpu_plain, reference(h, c.lens, false), tol);
    report(!biased.ok && plain.ok, c.name + ": key bias left out: vs biased reference " +
                                       (biased.ok ? "passed (BAD)" : "fails (good, " + describe(biased) + ")") +
                                       ", vs reference without it " + describe(plain));
  }
}

// Invalid parameters are refused with a message, before anything is launched.
void run_param_checks() {
  DecodeAttentionParams p;
  p.batch = 1;
  p.n_heads = 8;
  p.n_kv_heads = 2;
  p.head_dim = 96;
  p.chunk_keys = 256;
  const std::string msg = error_of([&] { oscar::cuda::decode_attention(p); });
  report(msg.find("head_dim 96") != std::string::npos, "invalid head_dim refused: \"" + msg + "\"");

  // The tensor-core split puts one sequence's chunks on its grid's z (at most 65535): more
  // are refused by name. Host pointers stand in for device ones: nothing is launched.
  alignas(16) static uint8_t pool[16];
  static int32_t table[1];
  DecodeAttentionParams s;
  s.batch = 1;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.head_dim = 128;
  s.bits = 2;
  s.group = 128;
  s.chunk_keys = 64;
  s.max_seq_len = int64_t(64) * 70000;
  s.max_window_keys = 320;
  s.hist_end = table;
  s.hist_blocks = table;
  s.hist_k = pool;
  s.hist_v = pool;
  const std::string many = error_of([&] { oscar::cuda::decode_attention(s); });
  report(many.find("65535 chunks") != std::string::npos, "split grid over 65535 chunks refused: \"" + many + "\"");
}

}  // namespace

namespace oscar_cuda_test {

void run_decode_attention_tests(uint32_t seed, int n_sm) {
  g_n_sm = n_sm;
  std::printf("decode_attention tolerance: |gpu - ref| <= %.0e + %.0e*|ref| per element, no NaN, rel L2 <= %.0e; "
              "tensor cores: + 2^-11 * sum over history keys of weight*|v| per element, rel L2 <= %.0e\n",
              kF32Tol.atol, kF32Tol.rtol, kF32Tol.rel_l2, kTensorTol.rel_l2);

  // bits, d, G, n_kv, gqa, sink, window, chunk, lens. Lengths cover: empty, sink only
  // (t < S), no history yet (t <= S + W), one past the window, page and chunk edges, long
  // odd lengths; S not a multiple of 16 and S = 0; chunks of 64 … 1024 and the default.
  const std::vector<Case> cases = {
      {"int2 d128 G128 gqa4", 2, 128, 128, 2, 4, 64, 256, 256, {4097, 50, 321, 3000, 1}},
      {"int2 d128 G32 gqa6", 2, 128, 32, 1, 6, 64, 256, 512, {3001, 320, 0}},
      {"int2 d128 G64 gqa2 S7 W100", 2, 128, 64, 2, 2, 7, 100, 320, {1234, 108, 3000}},
      {"int2 d64 G64 gqa4 S0 W128", 2, 64, 64, 2, 4, 0, 128, 64, {1000, 129, 128, 97}},
      {"int2 d64 G64 gqa4 S0 W128", 2, 64, 64, 2, 4, 0, 128, 64, {1000, 129, 128, 97}, false},
      {"int2 d128 G128 gqa8 S7 W100 bound", 2, 128, 128, 2, 8, 7, 100, 320, {1234, 108, 3000, 5}, true, true},
      {"int2 d128 G128 gqa1 S20 W0", 2, 128, 128, 3, 1, 20, 0, 192, {900, 21, 64, 1100}},
      {"int2 d128 G128 gqa4 default-chunk bound", 2, 128, 128, 2, 4, 64, 256, 0, {6000, 4200, 333}, true, true},
      {"int2 d128 G128 gqa4", 2, 128, 128, 2, 4, 64, 256, 256, {4097, 50, 321, 3000, 1}, false},
      // More CTAs than one wave of an H100 (12 · 8 heads · 59 slots): CTAs start as others end.
      {"int2 d128 G128 gqa4 over one wave", 2, 128, 128, 8, 4, 64, 256, 256,
       {3000, 2890, 1234, 2500, 65, 3001, 2048, 1777, 2999, 400, 2600, 2222}},
      // History chunks over 1024 keys (what long histories under one wave get by default).
      {"int2 d128 G128 gqa4 chunk 2048", 2, 128, 128, 2, 4, 64, 256, 2048, {5000, 2100, 300, 4097}},
      {"int4 d64 G64 gqa2 S3 W50", 4, 64, 64, 2, 2, 3, 50, 128, {777, 60, 2222}},
      {"int2 d64 G32 gqa8 default-chunk", 2, 64, 32, 2, 8, 64, 256, 0, {2500, 333}},
      {"int2 no history yet", 2, 128, 128, 2, 4, 64, 256, 128, {320, 100, 64, 17}},
      {"int4 d128 G64 gqa8", 4, 128, 64, 2, 8, 64, 256, 128, {2049, 65, 700}},
      {"int4 d64 G32 gqa3", 4, 64, 32, 2, 3, 64, 256, 256, {513, 1500}},
      {"int4 d128 G128 gqa7", 4, 128, 128, 1, 7, 64, 256, 384, {1600}},
      {"int8 d64 G32 gqa1 S5 W37", 8, 64, 32, 3, 1, 5, 37, 192, {2000, 17, 4097, 6}},
      {"int8 d128 G128 gqa4", 8, 128, 128, 2, 4, 64, 256, 1024, {2500, 300, 54}},
      {"int8 d128 G128 gqa4", 8, 128, 128, 2, 4, 64, 256, 1024, {2500, 300, 54}, false},
      {"int8 d128 G128 gqa8 S7 W100 bound", 8, 128, 128, 2, 8, 7, 100, 320, {1234, 108, 3000, 5}, true, true},
      {"int8 d128 G128 gqa1 S20 W0", 8, 128, 128, 3, 1, 20, 0, 192, {900, 21, 64, 1100}},
      {"int8 d128 G128 gqa2 default-chunk bound", 8, 128, 128, 2, 2, 64, 256, 0, {6000, 4200, 333}, true, true},
      {"int8 d64 G64 gqa5", 8, 64, 64, 2, 5, 64, 256, 256, {777}},
      {"int8 d64 G64 gqa4 S0 W128", 8, 64, 64, 2, 4, 0, 128, 64, {1000, 129, 128, 97}},
      {"bf16 d128 gqa4", 0, 128, 128, 2, 4, 64, 256, 256, {3000, 1, 700}},
      {"bf16 d64 gqa8", 0, 64, 64, 1, 8, 64, 256, 512, {4097, 33}},
      // --k-bias-split: every path and piece adds the bias score of each key (sink, history,
      // recent; window CTAs; paired and single slabs; f32 kernels).
      {"int2 d128 G128 gqa4", 2, 128, 128, 2, 4, 64, 256, 256, {4097, 50, 321, 3000, 1}, true, false, true},
      {"int2 d128 G128 gqa8 S7 W100 bound", 2, 128, 128, 2, 8, 7, 100, 320, {1234, 108, 3000, 5}, true, true, true},
      {"int2 d128 G128 gqa3 S20 W0", 2, 128, 128, 3, 3, 20, 0, 192, {900, 21, 64, 1100}, true, false, true},
      {"int4 d64 G64 gqa2 S3 W50", 4, 64, 64, 2, 2, 3, 50, 128, {777, 60, 2222}, true, false, true},
      {"int2 d128 G128 gqa6 default-chunk bound", 2, 128, 128, 2, 6, 64, 256, 0, {6000, 4200, 333}, true, true, true},
      {"int2 d64 G64 gqa4 S0 W128", 2, 64, 64, 2, 4, 0, 128, 64, {1000, 129, 128, 97}, false, false, true},
      {"int2 d128 G32 gqa6", 2, 128, 32, 1, 6, 64, 256, 512, {3001, 320, 0}, true, false, true},
      {"int4 d128 G128 gqa7", 4, 128, 128, 1, 7, 64, 256, 384, {1600}, true, false, true},
      {"int8 d128 G128 gqa1 S20 W0", 8, 128, 128, 3, 1, 20, 0, 192, {900, 21, 64, 1100}, true, false, true},
      {"bf16 d128 gqa4", 0, 128, 128, 2, 4, 64, 256, 256, {3000, 1, 700}, true, false, true},
  };
  for (size_t i = 0; i < cases.size(); ++i) run_case(cases[i], seed + uint32_t(i));
  const std::vector<Case> self_checks = {
      {"self-check int2 d128 G128 gqa4", 2, 128, 128, 2, 4, 64, 256, 128, {37, 420}},
      {"self-check int2 d128 G128 gqa4", 2, 128, 128, 2, 4, 64, 256, 128, {37, 420}, false},
      {"self-check int2 d128 G128 gqa4 W0", 2, 128, 128, 2, 4, 64, 0, 128, {37, 420}},
      {"self-check int4 d64 G64 gqa8 W0", 4, 64, 64, 1, 8, 16, 0, 64, {500, 37, 259}, true, true},
      {"self-check int8 d128 G128 gqa4 W0", 8, 128, 128, 2, 4, 64, 0, 128, {37, 420}},
      {"self-check int2 d128 G128 gqa4 key bias", 2, 128, 128, 2, 4, 64, 256, 128, {37, 420}, true, false, true},
  };
  for (size_t i = 0; i < self_checks.size(); ++i) run_self_checks(self_checks[i], seed + 1000u + uint32_t(i));
  run_param_checks();
}

}  // namespace oscar_cuda_test
