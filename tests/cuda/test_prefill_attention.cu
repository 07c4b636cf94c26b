// oscar::cuda::prefill_attention against an f64 host reference: n consecutive query tokens
// of one sequence over a random mixed cache in which a key is stored in whichever forms
// some query reads it (BF16 in an fp page, quantized in a history page, or both), every
// other row poisoned with NaN. The reference reads the same bytes. With --k-bias-split the
// kernel adds c·cs(t) per (query, key) (key_bias.h) and the reference adds it in double with
// exact cos/sin. Run from main.cu.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_test_util.h"
#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/key_bias.h"
#include "oscar/cuda/prefill_attention.h"

namespace {

using namespace oscar_cuda_test;
using oscar::cuda::PrefillAttentionParams;

struct Case {
  std::string name;
  int bits;  // 0: BF16 only
  int d, group_size, n_kv, gqa, sink, window;
  int t0, n;  // query tokens t0 .. t0 + n − 1
  bool key_bias = false;  // PrefillAttentionParams::key_bias
  double position_scale = 1.0;
};

constexpr int kPage = oscar::cuda::kDecodeFpBlockTokens;       // tokens per fp page
constexpr int kHistPage = oscar::cuda::kDecodeHistBlockTokens;  // rows per history page
constexpr uint16_t kBf16Poison = 0x7fc0;
constexpr uint8_t kQuantPoison = 0x7e;  // every fp16 made of it is NaN

struct HostCache {
  Case c;
  RowFormat fmt{};
  int n_heads = 0, len = 0;
  std::vector<int32_t> seq_len, hist_end;       // per query row
  std::vector<char> fp_wanted, hist_wanted;     // per key
  std::vector<int32_t> fp_blocks, hist_blocks;  // one sequence's page tables
  std::vector<uint16_t> fp_k, fp_v;
  std::vector<uint8_t> hist_k, hist_v;
  std::vector<float> q;  // [n, n_heads, d]
  std::vector<float> coef;       // [n, n_heads, d] key-bias coefficients (α, β); empty = none
  std::vector<double> inv_freq;  // [d / 2]
  size_t page_bytes() const { return size_t(kHistPage) * size_t(fmt.row_bytes()); }
};

// h(t) = S + max(0, t − S − W): the cache's window rule for a sequence of t tokens.
int history_end(const Case& c, int t) { return c.sink + std::max(0, t - c.sink - c.window); }

bool row_reads_history(const Case& c, int h, int j) { return c.bits != 0 && j >= c.sink && j < h; }

HostCache build_cache(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.5f, 1.5f);
  HostCache h;
  h.c = c;
  h.fmt = RowFormat{c.d, c.bits == 0 ? 8 : c.bits, c.bits == 0 ? c.d : c.group_size};
  h.n_heads = c.n_kv * c.gqa;
  h.len = c.t0 + c.n;
  h.fp_wanted.assign(size_t(h.len), 0);
  h.hist_wanted.assign(size_t(h.len), 0);
  for (int i = 0; i < c.n; ++i) {
    const int len = c.t0 + i + 1, he = history_end(c, len);
    h.seq_len.push_back(len);
    h.hist_end.push_back(he);
    for (int j = 0; j < len; ++j) (row_reads_history(c, he, j) ? h.hist_wanted : h.fp_wanted)[size_t(j)] = 1;
  }
  // Pages where some wanted row lives; ids shuffled over pools with spare poisoned pages.
  const int n_pages = (h.len + kPage - 1) / kPage + 1;
  h.fp_blocks.assign(size_t(n_pages) + 2, -1);
  h.hist_blocks.assign(size_t(n_pages) + 2, -1);
  std::vector<size_t> fp_need, hist_need;
  for (int p = 0; p < n_pages; ++p) {
    bool fp = false, hist = false;
    for (int j = p * kPage; j < std::min(h.len, p * kPage + kPage); ++j) fp = fp || h.fp_wanted[size_t(j)];
    for (int j = c.sink + p * kHistPage; j < std::min(h.len, c.sink + p * kHistPage + kHistPage); ++j)
      hist = hist || h.hist_wanted[size_t(j)];
    if (fp) fp_need.push_back(size_t(p));
    if (hist) hist_need.push_back(size_t(p));
  }
  auto assign = [&](const std::vector<size_t>& need, std::vector<int32_t>& table) {
    std::vector<int> ids(need.size() + 3);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (size_t i = 0; i < need.size(); ++i) table[need[i]] = ids[i];
    return int(ids.size());
  };
  const int n_fp = assign(fp_need, h.fp_blocks), n_hist = assign(hist_need, h.hist_blocks);
  h.fp_k.assign(size_t(n_fp) * c.n_kv * kPage * c.d, kBf16Poison);
  h.fp_v = h.fp_k;
  if (c.bits != 0) {
    h.hist_k.assign(size_t(n_hist) * c.n_kv * h.page_bytes(), kQuantPoison);
    h.hist_v = h.hist_k;
  }
  std::vector<float> key_bias(size_t(c.n_kv) * c.d), k(size_t(c.d)), v(size_t(c.d));
  for (float& x : key_bias) x = uni(rng);
  for (int j = 0; j < h.len; ++j)
    for (int kvh = 0; kvh < c.n_kv; ++kvh) {
      for (int i = 0; i < c.d; ++i) k[size_t(i)] = normal(rng) + key_bias[size_t(kvh) * c.d + i], v[size_t(i)] = normal(rng);
      if (h.fp_wanted[size_t(j)]) {
        const size_t off = ((size_t(h.fp_blocks[size_t(j / kPage)]) * c.n_kv + kvh) * kPage + size_t(j % kPage)) * c.d;
        for (int i = 0; i < c.d; ++i) h.fp_k[off + i] = f32_to_bf16(k[size_t(i)]), h.fp_v[off + i] = f32_to_bf16(v[size_t(i)]);
      }
      if (h.hist_wanted[size_t(j)]) {
        const size_t off = (size_t(h.hist_blocks[size_t((j - c.sink) / kHistPage)]) * c.n_kv + kvh) * h.page_bytes() +
                           size_t((j - c.sink) % kHistPage) * size_t(h.fmt.row_bytes());
        quantize_row(h.fmt, k.data(), h.hist_k.data() + off);
        quantize_row(h.fmt, v.data(), h.hist_v.data() + off);
      }
    }
  h.q.resize(size_t(c.n) * h.n_heads * c.d);
  for (float& x : h.q) x = normal(rng);
  h.inv_freq.resize(size_t(c.d / 2));
  for (int i = 0; i < c.d / 2; ++i) h.inv_freq[size_t(i)] = std::pow(1e6, -2.0 * i / c.d);
  if (c.key_bias) {  // bias scores of a few log2 units, as large as the keys' own
    h.coef.resize(h.q.size());
    for (float& x : h.coef) x = 4.0f * normal(rng);
  }
  return h;
}

// Key or value row j of KV head kvh in the form a query with history end he reads, as the
// kernel stages it: BF16, or the dequantized row rounded to BF16.
void read_row(const HostCache& h, bool key, int kvh, int j, int he, std::vector<double>& x) {
  const Case& c = h.c;
  std::vector<float> f(size_t(c.d));
  if (row_reads_history(c, he, j)) {
    const size_t off = (size_t(h.hist_blocks[size_t((j - c.sink) / kHistPage)]) * c.n_kv + kvh) * h.page_bytes() +
                       size_t((j - c.sink) % kHistPage) * size_t(h.fmt.row_bytes());
    dequantize_row(h.fmt, (key ? h.hist_k : h.hist_v).data() + off, f.data());
    for (float& e : f) e = bf16_to_f32(f32_to_bf16(e));
  } else {
    const size_t off = ((size_t(h.fp_blocks[size_t(j / kPage)]) * c.n_kv + kvh) * kPage + size_t(j % kPage)) * c.d;
    for (int i = 0; i < c.d; ++i) f[size_t(i)] = bf16_to_f32((key ? h.fp_k : h.fp_v)[off + size_t(i)]);
  }
  x.assign(f.begin(), f.end());
}

struct Reference {
  std::vector<double> out, abs_sum;  // abs_sum: Σ_j w_j·|v_j| per output element
};

// f64 attention with q rounded as the kernel rounds it (BF16 of q·log2(e)/√d), base-2
// softmax. len_delta and hist_delta shift every row's key count and history end (the
// self-checks' wrong references; a key keeps its form where the other one is not stored).
Reference reference(const HostCache& h, int len_delta = 0, int hist_delta = 0, bool with_key_bias = true) {
  const Case& c = h.c;
  const float qscale = float(1.4426950408889634 / std::sqrt(double(c.d)));
  Reference r;
  r.out.assign(h.q.size(), 0.0);
  r.abs_sum.assign(h.q.size(), 0.0);
  std::vector<double> row;
  std::vector<double> cs(h.coef.empty() ? 0 : size_t(h.len) * c.d);  // cs(j): cos, then sin, in double
  for (size_t j = 0; j < cs.size() / size_t(c.d); ++j)
    for (int e = 0; e < c.d / 2; ++e) {
      const double a = double(j) * c.position_scale * h.inv_freq[size_t(e)];
      cs[j * c.d + e] = std::cos(a), cs[j * c.d + c.d / 2 + e] = std::sin(a);
    }
  for (int kvh = 0; kvh < c.n_kv; ++kvh) {
    std::vector<std::vector<double>> keys(size_t(h.len)), keys_h(size_t(h.len)), vals(size_t(h.len)), vals_h(size_t(h.len));
    for (int j = 0; j < h.len; ++j) {  // both forms where stored
      if (h.fp_wanted[size_t(j)]) read_row(h, true, kvh, j, -1, keys[size_t(j)]), read_row(h, false, kvh, j, -1, vals[size_t(j)]);
      if (h.hist_wanted[size_t(j)]) read_row(h, true, kvh, j, INT32_MAX, keys_h[size_t(j)]), read_row(h, false, kvh, j, INT32_MAX, vals_h[size_t(j)]);
    }
    for (int i = 0; i < c.n; ++i) {
      const int len = h.seq_len[size_t(i)] + len_delta, he0 = h.hist_end[size_t(i)], he = he0 + hist_delta;
      // A shifted history end moves a key to its other form only where that form is stored.
      const auto reads_history = [&](int j) {
        const bool moved = row_reads_history(c, he, j);
        return (moved ? h.hist_wanted : h.fp_wanted)[size_t(j)] ? moved : row_reads_history(c, he0, j);
      };
      for (int g = 0; g < c.gqa; ++g) {
        const size_t o0 = (size_t(i) * h.n_heads + size_t(kvh) * c.gqa + g) * c.d;
        std::vector<double> q(static_cast<size_t>(c.d)), s(static_cast<size_t>(std::max(len, 0)));
        for (int e = 0; e < c.d; ++e) q[size_t(e)] = bf16_to_f32(f32_to_bf16(h.q[o0 + e] * qscale));
        double mx = -INFINITY;
        for (int j = 0; j < len; ++j) {
          const bool hist = reads_history(j);
          const std::vector<double>& kr = hist ? keys_h[size_t(j)] : keys[size_t(j)];
          if (kr.empty()) throw std::logic_error("test bug: a key read in a form that is not stored");
          double dot = 0.0;
          for (int e = 0; e < c.d; ++e) dot += q[size_t(e)] * kr[size_t(e)];
          if (with_key_bias && !h.coef.empty()) {  // c·cs(j), in the scores' log2 units
            double kb = 0.0;
            for (int e = 0; e < c.d; ++e) kb += double(h.coef[o0 + e]) * cs[size_t(j) * c.d + e];
            dot += double(qscale) * kb;
          }
          s[size_t(j)] = dot;
          mx = std::max(mx, dot);
        }
        double l = 0.0;
        for (int j = 0; j < len; ++j) l += (s[size_t(j)] = std::exp2(s[size_t(j)] - mx));
        for (int j = 0; j < len; ++j) {
          const bool hist = reads_history(j);
          const std::vector<double>& vr = hist ? vals_h[size_t(j)] : vals[size_t(j)];
          const double w = s[size_t(j)] / l;
          for (int e = 0; e < c.d; ++e) r.out[o0 + e] += w * vr[size_t(e)], r.abs_sum[o0 + e] += w * std::fabs(vr[size_t(e)]);
        }
      }
    }
  }
  return r;
}

std::vector<float> run_gpu(const HostCache& h, oscar::cuda::PrefillKernel kernel) {
  const Case& c = h.c;
  DeviceBuffer q = DeviceBuffer::from(h.q), len = DeviceBuffer::from(h.seq_len), he = DeviceBuffer::from(h.hist_end);
  DeviceBuffer fpk = DeviceBuffer::from(h.fp_k), fpv = DeviceBuffer::from(h.fp_v);
  DeviceBuffer fpb = DeviceBuffer::from(h.fp_blocks), hb = DeviceBuffer::from(h.hist_blocks);
  DeviceBuffer hk = DeviceBuffer::from(h.hist_k), hv = DeviceBuffer::from(h.hist_v);
  DeviceBuffer coef = DeviceBuffer::from(h.coef), inv_freq = DeviceBuffer::from(h.inv_freq);
  DeviceBuffer cs = DeviceBuffer::from(oscar::cuda::key_bias_cs_table(h.inv_freq, c.position_scale));
  DeviceBuffer out(h.q.size() * sizeof(float));
  CHECK_CUDA(cudaMemset(out.ptr, 0xff, h.q.size() * sizeof(float)));  // NaN
  PrefillAttentionParams p;
  p.n_tokens = c.n, p.n_heads = h.n_heads, p.n_kv_heads = c.n_kv, p.head_dim = c.d;
  p.bits = c.bits, p.group = c.group_size, p.sink = c.sink;
  p.q = q.as<float>(), p.seq_len = len.as<int32_t>();
  p.fp_k = fpk.as<uint16_t>(), p.fp_v = fpv.as<uint16_t>(), p.fp_blocks = fpb.as<int32_t>();
  if (c.bits != 0) {
    p.hist_end = he.as<int32_t>();
    p.hist_k = hk.as<uint8_t>(), p.hist_v = hv.as<uint8_t>(), p.hist_blocks = hb.as<int32_t>();
  }
  if (!h.coef.empty()) {
    p.key_bias.coef = coef.as<float>(), p.key_bias.cs_table = cs.as<float>();
    p.key_bias.inv_freq = inv_freq.as<double>(), p.key_bias.position_scale = c.position_scale;
  }
  p.out = out.as<float>();
  for (int i = 0; i < c.n; ++i) p.max_hist_end = std::max(p.max_hist_end, std::min(h.hist_end[size_t(i)], h.seq_len[size_t(i)]));
  DeviceBuffer scratch(oscar::cuda::prefill_attention_scratch_bytes(p));
  CHECK_CUDA(cudaMemset(scratch.ptr, 0xff, oscar::cuda::prefill_attention_scratch_bytes(p)));  // NaN
  p.scratch = scratch.as<uint16_t>();
  oscar::cuda::prefill_attention(p, nullptr, kernel);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  return download<float>(out, h.q.size());
}

// |gpu − ref| ≤ 5e-5 + 5e-4·|ref| + 2^-8·Σ_j w_j·|v_j| per element (each weight is
// rounded to BF16 for P·V, a relative error ≤ 2^-9; scores are exact up to f32 sums since
// the reference rounds q and the rows as the kernel does), and relative L2 ≤ 3e-3.
struct Compare {
  bool ok;
  double worst, rel_l2;  // worst: max error / allowed
  long nan_count;
};
Compare compare(const std::vector<float>& got, const Reference& ref) {
  double worst = 0.0, num = 0.0, den = 0.0;
  long nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++nan;
      continue;
    }
    const double err = std::fabs(double(got[i]) - ref.out[i]);
    worst = std::max(worst, err / (5e-5 + 5e-4 * std::fabs(ref.out[i]) + 0x1p-8 * ref.abs_sum[i]));
    num += err * err, den += ref.out[i] * ref.out[i];
  }
  const double rel = std::sqrt(num / std::max(den, 1e-30));
  return {nan == 0 && worst <= 1.0 && rel <= 3e-3, worst, rel, nan};
}

std::string describe(const Compare& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "worst error %.3f of the tolerance, rel L2 %.2e (<= 3e-03), non-finite %ld", r.worst,
                r.rel_l2, r.nan_count);
  return buf;
}

void run_case(const Case& c, uint32_t seed, bool self_check) {
  const HostCache h = build_cache(c, seed);
  const Reference ref = reference(h);
  const std::string what = c.name + " t0=" + std::to_string(c.t0) + " n=" + std::to_string(c.n);
  // Both kernels where the Hopper one applies (d 128 without the key bias): each against the
  // reference; the self-checks below run on the first.
  const bool two = c.d == 128 && !c.key_bias;
  if (two) {
    const Compare r = compare(run_gpu(h, oscar::cuda::PrefillKernel::portable), ref);
    report(r.ok, "prefill_attention [mma.sync] " + what + ": " + describe(r));
  }
  const std::vector<float> got = run_gpu(h, oscar::cuda::PrefillKernel::fastest);
  const Compare r = compare(got, ref);
  report(r.ok, std::string("prefill_attention ") + (two ? "[fastest] " : "") + what + (c.key_bias ? " [key bias]" : "") +
                   ": " + describe(r));
  if (!self_check) return;
  // The comparison can fail: one key less per row, and the band of keys stored in both
  // forms read in BF16 for one more page (history ends 16 earlier).
  const auto must_fail = [&](const Compare& wrong, const std::string& which) {
    report(!wrong.ok, "prefill_attention " + what + ": self-check, " + which + ": " +
                          (wrong.ok ? "passes (BAD)" : "fails (good, " + describe(wrong) + ")"));
  };
  must_fail(compare(got, reference(h, -1, 0)), "reference without each row's last key");
  if (c.bits == 2 || c.bits == 4)
    must_fail(compare(got, reference(h, 0, -16)), "reference with history ends 16 earlier (where stored)");
  if (c.key_bias) must_fail(compare(got, reference(h, 0, 0, false)), "reference without the key bias");
}

void run_param_checks() {
  PrefillAttentionParams p;
  p.n_tokens = 4, p.n_heads = 12, p.n_kv_heads = 1, p.head_dim = 128;
  std::string msg = error_of([&] { oscar::cuda::prefill_attention(p); });
  report(msg.find("GQA group 12") != std::string::npos, "prefill_attention refuses GQA 12: \"" + msg + "\"");
  p.n_heads = 4, p.head_dim = 80;
  msg = error_of([&] { oscar::cuda::prefill_attention(p); });
  report(msg.find("head_dim 80") != std::string::npos, "prefill_attention refuses head_dim 80: \"" + msg + "\"");
  p.head_dim = 64, p.bits = 2, p.group = 128;
  msg = error_of([&] { oscar::cuda::prefill_attention(p); });
  report(msg.find("group size 128") != std::string::npos, "prefill_attention refuses G 128 > d 64: \"" + msg + "\"");
  DeviceBuffer any(256);
  p.group = 64, p.sink = 4, p.max_hist_end = 20;
  p.q = any.as<float>(), p.seq_len = any.as<int32_t>(), p.hist_end = any.as<int32_t>(), p.out = any.as<float>();
  p.fp_k = p.fp_v = any.as<uint16_t>(), p.fp_blocks = p.hist_blocks = any.as<int32_t>();
  p.hist_k = p.hist_v = any.as<uint8_t>();
  msg = error_of([&] { oscar::cuda::prefill_attention(p); });
  report(msg.find("scratch is null") != std::string::npos, "prefill_attention refuses a missing scratch: \"" + msg + "\"");
}

}  // namespace

namespace oscar_cuda_test {

void run_prefill_attention_tests(uint32_t seed) {
  // bits, d, G, n_kv, gqa, sink, window, t0, n. Covers: the first launch of a prompt (rows
  // before, inside and past the sink and window), a later launch (early history pages'
  // BF16 rows gone), S off the 64-key tile grid, W smaller than a tile, GQA 1…8 including
  // 3, 6 and 7 (rows per CTA not a multiple of the group), every width, BF16 only, n = 1.
  const std::vector<Case> cases = {
      {"int2 d128 G128 gqa4 S64 W256", 2, 128, 128, 2, 4, 64, 256, 0, 700},
      {"int2 d128 G128 gqa4 S64 W256", 2, 128, 128, 2, 4, 64, 256, 900, 256},
      {"int2 d128 G32 gqa6 S64 W100", 2, 128, 32, 1, 6, 64, 100, 250, 96},
      {"int2 d64 G64 gqa1 S16 W40", 2, 64, 64, 2, 1, 16, 40, 100, 130},
      {"int2 d128 G128 gqa8 S7 W33", 2, 128, 128, 1, 8, 7, 33, 61, 50},
      {"int2 d128 G128 gqa4 one token", 2, 128, 128, 2, 4, 64, 256, 1500, 1},
      {"int4 d64 G32 gqa2 S16 W64", 4, 64, 32, 2, 2, 16, 64, 100, 77},
      {"int4 d128 G128 gqa7 S64 W256", 4, 128, 128, 1, 7, 64, 256, 400, 200},
      {"int8 d128 G64 gqa8 S4 W32", 8, 128, 64, 1, 8, 4, 32, 33, 45},
      {"int8 d64 G32 gqa3 S64 W128", 8, 64, 32, 2, 3, 64, 128, 0, 300},
      {"bf16 d64 gqa2", 0, 64, 64, 2, 2, 64, 256, 10, 130},
      {"bf16 d128 gqa4", 0, 128, 128, 2, 4, 64, 256, 600, 256},
      // Many key tiles (the Hopper kernel's double buffers), history ends crossing a tile.
      {"int2 d128 G128 gqa4 S64 W256 long", 2, 128, 128, 1, 4, 64, 256, 4000, 160},
      {"bf16 d128 gqa8 long", 0, 128, 128, 1, 8, 64, 256, 3000, 100},
      // --k-bias-split (Qwen2.5-1.5B's GQA 6; a linear position scale; d 64; BF16 only).
      {"int2 d128 G128 gqa6 S64 W256", 2, 128, 128, 2, 6, 64, 256, 900, 256, true},
      {"int2 d128 G128 gqa4 S64 W256", 2, 128, 128, 2, 4, 64, 256, 0, 700, true, 0.5},
      {"int4 d64 G32 gqa2 S16 W64", 4, 64, 32, 2, 2, 16, 64, 100, 77, true},
      {"bf16 d64 gqa8", 0, 64, 64, 1, 8, 64, 256, 10, 130, true},
  };
  for (size_t i = 0; i < cases.size(); ++i)
    run_case(cases[i], seed + uint32_t(i), i < 2 || i == 6 || i == cases.size() - 4);
  run_param_checks();
}

}  // namespace oscar_cuda_test
