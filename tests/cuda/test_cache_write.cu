// oscar::cuda::write_fp_rows and demote_to_history against the host: every BF16 row written
// must be the round-to-nearest-even of its f32 input, every demoted history row must equal,
// byte for byte, what the independent host quantizer (cuda_test_util.h, docs/kv-layout.md
// §1–§3 with the §2 clip) makes of the same BF16 row, and no other byte may change (pools
// start poisoned).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "oscar/cuda/cache_write.h"
#include "oscar/cuda/decode_attention.h"

namespace {

using namespace oscar_cuda_test;
constexpr int kPage = oscar::cuda::kDecodeFpBlockTokens;       // tokens per fp page
constexpr int kHistPage = oscar::cuda::kDecodeHistBlockTokens;  // rows per history page
constexpr uint16_t kBf16Poison = 0x7fc0;
constexpr uint8_t kQuantPoison = 0x7e;

std::vector<int32_t> shuffled_ids(int n, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

// n_tokens new rows from positions pos[b] of B sequences, rotated by random orthogonal-ish
// matrices when `rotate`; every other row of the pools must stay poison. Unrotated rows are
// exact (BF16 round to nearest even); rotated ones within one BF16 step of the f64 x·R
// (f32 sums may round the other way at a tie).
// self_check: the host expects the unrotated rows of a rotated write, which must be caught.
void run_write_fp(int d, int n_kv, const std::vector<int>& pos, int n_tokens, bool rotate, uint32_t seed,
                  bool self_check = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int B = int(pos.size());
  const int stride = (*std::max_element(pos.begin(), pos.end()) + n_tokens) / kPage + 2;
  const int n_pages = B * stride + 2;
  const std::vector<int32_t> ids = shuffled_ids(n_pages, rng);
  std::vector<int32_t> table(size_t(B) * stride, -1);
  int next = 0;
  for (int b = 0; b < B; ++b)
    for (int pg = pos[size_t(b)] / kPage; pg <= (pos[size_t(b)] + n_tokens - 1) / kPage; ++pg)
      table[size_t(b) * stride + size_t(pg)] = ids[size_t(next++)];
  std::vector<float> k(size_t(B) * n_tokens * n_kv * d), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) k[i] = normal(rng), v[i] = normal(rng);
  k[0] = 1.0f + 0x1p-8f;  // a tie: rounds to even
  std::vector<float> rk(size_t(d) * d), rv(rk.size());
  for (size_t i = 0; i < rk.size(); ++i) rk[i] = normal(rng) / std::sqrt(float(d)), rv[i] = normal(rng) / std::sqrt(float(d));
  const size_t pool = size_t(n_pages) * n_kv * kPage * d;
  const std::vector<uint16_t> poison(pool, kBf16Poison);
  DeviceBuffer dk = DeviceBuffer::from(k), dv = DeviceBuffer::from(v), dpos = DeviceBuffer::from(pos),
               dtab = DeviceBuffer::from(table), fk = DeviceBuffer::from(poison), fv = DeviceBuffer::from(poison),
               drk = DeviceBuffer::from(rk), drv = DeviceBuffer::from(rv);
  oscar::cuda::FpWriteParams p;
  p.batch = B;
  p.n_tokens = n_tokens;
  p.n_kv_heads = n_kv;
  p.head_dim = d;
  p.pos = dpos.as<int32_t>();
  p.k = dk.as<float>();
  p.v = dv.as<float>();
  if (rotate) {
    p.rot_k = drk.as<float>();
    p.rot_v = drv.as<float>();
  }
  p.fp_k = fk.as<uint16_t>();
  p.fp_v = fv.as<uint16_t>();
  p.fp_blocks = dtab.as<int32_t>();
  p.fp_blocks_stride = stride;
  oscar::cuda::write_fp_rows(p);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> got_k = download<uint16_t>(fk, pool), got_v = download<uint16_t>(fv, pool);
  std::vector<bool> written(pool, false);
  long bad = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < n_tokens; ++i)
      for (int h = 0; h < n_kv; ++h) {
        const int t = pos[size_t(b)] + i;
        const size_t src = ((size_t(b) * n_tokens + i) * n_kv + h) * d;
        const size_t dst = ((size_t(table[size_t(b) * stride + size_t(t / kPage)]) * n_kv + h) * kPage + t % kPage) * d;
        for (int x = 0; x < d; ++x) {
          written[dst + size_t(x)] = true;
          for (int kv = 0; kv < 2; ++kv) {
            const std::vector<float>& in = kv == 0 ? k : v;
            const uint16_t got = (kv == 0 ? got_k : got_v)[dst + size_t(x)];
            if (!rotate || self_check) {
              bad += got != f32_to_bf16(in[src + size_t(x)]);
              continue;
            }
            const std::vector<float>& R = kv == 0 ? rk : rv;
            double ref = 0.0;
            for (int j = 0; j < d; ++j) ref += double(in[src + size_t(j)]) * double(R[size_t(j) * d + size_t(x)]);
            bad += !(std::fabs(double(bf16_to_f32(got)) - ref) <= std::fabs(ref) * 0x1p-8 + 1e-6);
          }
        }
      }
  for (size_t i = 0; i < pool; ++i)
    if (!written[i]) bad += (got_k[i] != kBf16Poison) + (got_v[i] != kBf16Poison);
  if (self_check) {
    report(bad > 0, "write_fp_rows self-check: unrotated expectations of a rotated write are caught (" +
                        std::to_string(bad) + " values)");
    return;
  }
  report(bad == 0, "write_fp_rows d" + std::to_string(d) + " kv" + std::to_string(n_kv) + " B" + std::to_string(B) +
                       " tokens " + std::to_string(n_tokens) + (rotate ? " rotated" : "") + ": " +
                       std::to_string(bad) + " values wrong or stray");
}

struct DemoteCase {
  std::string name;
  int bits, d, group, n_kv, sink;
  float k_clip, v_clip;
  std::vector<int> from, to;  // token ranges per sequence
  int special;                // 0 random; 1 adds constant, zero, tied, huge and tiny rows
};

// Row values: N(0, 1) plus per-channel offsets, or the special rows.
float row_value(int special, int t, int x, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float base = normal(rng) + 0.3f * float(x % 7);
  if (special == 0) return base;
  switch (t % 6) {
    case 0: return 2.5f;                                  // constant row
    case 1: return 0.0f;                                  // zero row
    case 2: return (x % 3 == 0 ? -1.0f : 1.0f) * 0.75f;   // |x| all tied
    case 3: return base * 3000.0f;                        // large
    case 4: return base * 1e-6f;                          // tiny: subnormal fp16 scales
    default: return base;
  }
}

// Bytes that differ between the device's demotion and the host quantizer; host_clip (if
// given) replaces both ratios on the host side only (the self-check).
// With `layers`, the rows go through demote_to_history_layers as two layers: the case's, and
// a second with its own history pools and the two clip ratios swapped.
long demote_diff(const DemoteCase& c, uint32_t seed, long* rows_out, float host_clip = -1.0f, bool layers = false) {
  std::mt19937 rng(seed);
  const int B = int(c.from.size());
  const RowFormat fmt{c.d, c.bits, c.group};
  const int row_bytes = fmt.row_bytes();
  const int max_len = *std::max_element(c.to.begin(), c.to.end());
  const int fp_stride = max_len / kPage + 2, hist_stride = max_len / kHistPage + 2;
  // Pages for every token (fp) and every history row (hist), shuffled, with spare pages.
  const int n_fp = B * fp_stride + 2, n_hist = B * hist_stride + 2;
  const std::vector<int32_t> fp_ids = shuffled_ids(n_fp, rng), hist_ids = shuffled_ids(n_hist, rng);
  std::vector<int32_t> fp_tab(size_t(B) * fp_stride, -1), hist_tab(size_t(B) * hist_stride, -1);
  int next_fp = 0, next_hist = 0;
  for (int b = 0; b < B; ++b) {
    for (int pg = 0; pg * kPage < c.to[size_t(b)]; ++pg) fp_tab[size_t(b) * fp_stride + size_t(pg)] = fp_ids[size_t(next_fp++)];
    for (int pg = 0; c.sink + pg * kHistPage < c.to[size_t(b)]; ++pg)
      hist_tab[size_t(b) * hist_stride + size_t(pg)] = hist_ids[size_t(next_hist++)];
  }
  const size_t fp_pool = size_t(n_fp) * c.n_kv * kPage * c.d;
  std::vector<uint16_t> fk(fp_pool, kBf16Poison), fv(fp_pool, kBf16Poison);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < c.to[size_t(b)]; ++t)
      for (int h = 0; h < c.n_kv; ++h)
        for (int x = 0; x < c.d; ++x) {
          const size_t i = ((size_t(fp_tab[size_t(b) * fp_stride + size_t(t / kPage)]) * c.n_kv + h) * kPage + t % kPage) * c.d + x;
          fk[i] = f32_to_bf16(row_value(c.special, t, x, rng));
          fv[i] = f32_to_bf16(row_value(c.special, t + 3, x, rng));
        }
  const size_t page_bytes = size_t(kHistPage) * row_bytes, hist_pool = size_t(n_hist) * c.n_kv * page_bytes;
  const std::vector<uint8_t> poison(hist_pool, kQuantPoison);
  DeviceBuffer dfk = DeviceBuffer::from(fk), dfv = DeviceBuffer::from(fv), dft = DeviceBuffer::from(fp_tab),
               dht = DeviceBuffer::from(hist_tab), dhk = DeviceBuffer::from(poison), dhv = DeviceBuffer::from(poison),
               dfrom = DeviceBuffer::from(c.from), dto = DeviceBuffer::from(c.to);
  oscar::cuda::DemoteParams p;
  p.batch = B;
  p.n_kv_heads = c.n_kv;
  p.head_dim = c.d;
  p.bits = c.bits;
  p.group = c.group;
  p.sink = c.sink;
  p.k_clip = c.k_clip;
  p.v_clip = c.v_clip;
  for (int b = 0; b < B; ++b) p.max_rows = std::max(p.max_rows, c.to[size_t(b)] - c.from[size_t(b)]);
  p.hist_from = dfrom.as<int32_t>();
  p.hist_to = dto.as<int32_t>();
  p.fp_k = dfk.as<uint16_t>();
  p.fp_v = dfv.as<uint16_t>();
  p.fp_blocks = dft.as<int32_t>();
  p.fp_blocks_stride = fp_stride;
  p.hist_k = dhk.as<uint8_t>();
  p.hist_v = dhv.as<uint8_t>();
  p.hist_blocks = dht.as<int32_t>();
  p.hist_blocks_stride = hist_stride;
  DeviceBuffer dhk2 = DeviceBuffer::from(poison), dhv2 = DeviceBuffer::from(poison);
  if (layers) {
    oscar::cuda::DemoteLayer l0, l1;
    l0.fp_k = l1.fp_k = p.fp_k, l0.fp_v = l1.fp_v = p.fp_v, l0.bits = l1.bits = c.bits;
    l0.hist_k = p.hist_k, l0.hist_v = p.hist_v, l0.k_clip = c.k_clip, l0.v_clip = c.v_clip;
    l1.hist_k = dhk2.as<uint8_t>(), l1.hist_v = dhv2.as<uint8_t>(), l1.k_clip = c.v_clip, l1.v_clip = c.k_clip;
    const std::vector<oscar::cuda::DemoteLayer> recs = {l0, l1};
    DeviceBuffer drecs = DeviceBuffer::from(recs);
    oscar::cuda::DemoteParams shared = p;
    shared.fp_k = shared.fp_v = nullptr, shared.hist_k = shared.hist_v = nullptr;
    oscar::cuda::demote_to_history_layers(shared, drecs.as<oscar::cuda::DemoteLayer>(), 2);
    CHECK_CUDA(cudaDeviceSynchronize());
  } else {
    oscar::cuda::demote_to_history(p);
    CHECK_CUDA(cudaDeviceSynchronize());
  }

  std::vector<uint8_t> want_k = poison, want_v = poison, want_k2 = poison, want_v2 = poison;
  std::vector<float> row(size_t(c.d));
  long rows = 0;
  for (int b = 0; b < B; ++b)
    for (int t = c.from[size_t(b)]; t < c.to[size_t(b)]; ++t, ++rows)
      for (int h = 0; h < c.n_kv; ++h) {
        const int r = t - c.sink;
        const size_t dst = (size_t(hist_tab[size_t(b) * hist_stride + size_t(r / kHistPage)]) * c.n_kv + h) * page_bytes +
                           size_t(r % kHistPage) * row_bytes;
        for (int kv = 0; kv < 2; ++kv) {
          const std::vector<uint16_t>& src = kv == 0 ? fk : fv;
          const size_t s0 = ((size_t(fp_tab[size_t(b) * fp_stride + size_t(t / kPage)]) * c.n_kv + h) * kPage + t % kPage) * c.d;
          for (int x = 0; x < c.d; ++x) row[size_t(x)] = bf16_to_f32(src[s0 + size_t(x)]);
          const float clip = host_clip >= 0.0f ? host_clip : kv == 0 ? c.k_clip : c.v_clip;
          quantize_row(fmt, row.data(), (kv == 0 ? want_k : want_v).data() + dst, clip);
          if (layers) quantize_row(fmt, row.data(), (kv == 0 ? want_k2 : want_v2).data() + dst, kv == 0 ? c.v_clip : c.k_clip);
        }
      }
  const std::vector<uint8_t> got_k = download<uint8_t>(dhk, hist_pool), got_v = download<uint8_t>(dhv, hist_pool);
  long diff = 0;
  for (size_t i = 0; i < hist_pool; ++i) diff += (got_k[i] != want_k[i]) + (got_v[i] != want_v[i]);
  if (layers) {
    const std::vector<uint8_t> got_k2 = download<uint8_t>(dhk2, hist_pool), got_v2 = download<uint8_t>(dhv2, hist_pool);
    for (size_t i = 0; i < hist_pool; ++i) diff += (got_k2[i] != want_k2[i]) + (got_v2[i] != want_v2[i]);
  }
  *rows_out = rows;
  return diff;
}

void run_demote(const DemoteCase& c, uint32_t seed, bool layers = false) {
  long rows = 0;
  const long diff = demote_diff(c, seed, &rows, -1.0f, layers);
  report(diff == 0, std::string(layers ? "demote (two layers, one launch) " : "demote ") + c.name + ": " +
                        std::to_string(rows) + " rows x " + std::to_string(c.n_kv) + " heads, " + std::to_string(diff) +
                        " bytes differ from the host quantizer");
}

// The comparison can fail: the host quantizing with clip 0.80 instead of the device's
// 0.96/0.92 must be caught.
void run_demote_self_check(uint32_t seed) {
  const DemoteCase c{"self-check", 2, 128, 128, 1, 64, 0.96f, 0.92f, {64}, {80}, 0};
  long rows = 0;
  const long diff = demote_diff(c, seed, &rows, 0.80f);
  report(diff > 0, "demote self-check: a host clip of 0.80 against the device's 0.96/0.92 is caught (" +
                       std::to_string(diff) + " bytes differ)");
}

void run_param_checks() {
  oscar::cuda::DemoteParams p;
  p.batch = 1;
  p.n_kv_heads = 1;
  p.head_dim = 128;
  p.bits = 3;
  const std::string msg = error_of([&] { oscar::cuda::demote_to_history(p); });
  report(msg.find("bits 3") != std::string::npos, "invalid bits refused: \"" + msg + "\"");
  oscar::cuda::DemoteLayer layer;
  layer.bits = 3;
  const std::string msg2 = error_of([&] { oscar::cuda::check_demote_layer(p, layer); });
  report(msg2.find("bits 3") != std::string::npos, "invalid layer record refused: \"" + msg2 + "\"");
}

}  // namespace

namespace oscar_cuda_test {

void run_cache_write_tests(uint32_t seed) {
  run_write_fp(128, 8, {0, 17, 4095, 300}, 1, false, seed);
  run_write_fp(64, 3, {5}, 1, false, seed + 1);
  run_write_fp(128, 2, {0, 250}, 70, false, seed + 2);  // prefill runs across pages
  run_write_fp(128, 2, {3, 31}, 5, true, seed + 3);
  run_write_fp(64, 4, {100}, 1, true, seed + 4);
  run_write_fp(64, 4, {100}, 1, true, seed + 4, true);
  // bits, d, G, n_kv, S, k_clip, v_clip, from, to (ranges start anywhere at or after S, and
  // cross pages), special rows.
  const std::vector<DemoteCase> cases = {
      {"int2 d128 G128 clip 0.96/0.92", 2, 128, 128, 8, 64, 0.96f, 0.92f, {64, 100, 64}, {65, 160, 400}, 0},
      {"int2 d128 G128 special rows", 2, 128, 128, 2, 64, 0.96f, 0.92f, {64}, {130}, 1},
      {"int2 d128 G32 no clip S7", 2, 128, 32, 2, 7, 0.0f, 1.0f, {7, 30}, {50, 31}, 1},
      {"int2 d64 G64 clip 0.9", 2, 64, 64, 3, 0, 0.9f, 0.5f, {0, 9}, {33, 70}, 0},
      {"int4 d128 G64 clip", 4, 128, 64, 2, 64, 0.96f, 0.92f, {64, 70}, {99, 71}, 1},
      {"int4 d64 G32 tiny clip", 4, 64, 32, 2, 16, 0.001f, 0.999f, {16}, {80}, 0},
      {"int8 d128 G128", 8, 128, 128, 2, 64, 0.96f, 0.0f, {64, 64}, {64, 200}, 1},
      {"int8 d64 G32", 8, 64, 32, 1, 5, 0.0f, 0.0f, {5}, {60}, 1},
  };
  for (size_t i = 0; i < cases.size(); ++i) run_demote(cases[i], seed + 10u + uint32_t(i));
  run_demote(cases[0], seed + 50u, true);
  run_demote(cases[4], seed + 54u, true);
  run_demote_self_check(seed + 99u);
  run_param_checks();
}

}  // namespace oscar_cuda_test
