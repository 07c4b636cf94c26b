// Attention over the mixed cache ([sink] ‖ quantized history ‖ [recent]):
//  * decode (split over segments and chunks, history read packed) equals the double
//    reference over the f32 K/V the cache stands for — sink/recent rows bf16-rounded,
//    history rows as the codec dequantizes them (computed here from the codec, not the cache);
//  * prefill gives each query what decode would give it at its own position (so
//    perplexity measures the quantized cache);
//  * rotating q and k by one orthogonal R leaves attention unchanged (f32 cache).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>

#include "../mixed_cache_util.h"
#include "../test_util.h"
#include "oscar/attention/attention.h"
#include "oscar/rotation/hadamard.h"
#include "oscar/kv/history_formats.h"

namespace oscar {
namespace {

KvSpec mixed_spec(KvQuant q, int sink, int recent, int block_tokens, int group, bool clip) {
  KvSpec s;
  s.mode = kv_quant_name(q);
  s.quant = q;
  s.sink = sink;
  s.recent = recent;
  s.block_tokens = block_tokens;
  s.group = group;
  s.kivi_tokens = 8;
  s.k_clip = clip ? 0.96f : 0.0f;
  s.v_clip = clip ? 0.92f : 0.0f;
  return s;
}

// A one-layer cache filled with n tokens in one step, and the f32 K/V
// ([n_kv_heads, n, d]) that attention over it should see.
struct MixedFilled {
  KvSpec spec;
  std::vector<HistoryFormat> kf, vf;
  KvCache cache;
  SeqId seq = 0;
  std::vector<float> k_rows, v_rows;  // as written: [n, n_kv_heads, d]
  std::vector<float> k_ref, v_ref;    // what the cache stands for: [n_kv_heads, n, d]
};

std::vector<float> expected_kv(const KvSpec& spec, const HistoryFormat* f, const std::vector<float>& rows, int H,
                               int d, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n * H * d));
  const int64_t S = std::min<int64_t>(n, spec.sink), h = test::expected_history_end(spec, n);
  std::vector<float> w(static_cast<size_t>(n * d));
  for (int head = 0; head < H; ++head) {
    for (int64_t t = 0; t < n; ++t)
      for (int c = 0; c < d; ++c) w[size_t(t * d + c)] = test::fp_stored(spec, rows[size_t((t * H + head) * d + c)]);
    float* o = out.data() + int64_t(head) * n * d;
    std::copy(w.begin(), w.end(), o);
    if (f == nullptr) continue;
    if (f->per_channel) {
      for (int64_t b0 = S; b0 < h; b0 += f->block_tokens) test::codec_round_trip_kivi_keys(*f, w.data() + b0 * d, o + b0 * d);
    } else {
      for (int64_t t = S; t < h; ++t) test::codec_round_trip_row(*f, w.data() + t * d, o + t * d);
    }
  }
  return out;
}

std::unique_ptr<MixedFilled> fill_mixed(const KvSpec& spec, int n_kv_heads, int d, int64_t n, uint64_t seed) {
  const KvShape shape{1, n_kv_heads, d};
  auto [kf, vf] = make_history_formats(spec, shape, nullptr);
  auto f = std::unique_ptr<MixedFilled>(new MixedFilled{spec, kf, vf, KvCache(shape, spec, n + 64, kf, vf), 0, {}, {}, {}, {}});
  f->seq = f->cache.add_sequence();
  const int64_t row = int64_t(n_kv_heads) * d;
  f->k_rows = test::random_vector(size_t(n * row), seed, -2, 2);
  f->v_rows = test::random_vector(size_t(n * row), seed + 1);
  if (n > 0) {
    EXPECT_TRUE(f->cache.reserve(f->seq, n));
    f->cache.write(0, f->seq, 0, n, f->k_rows.data(), f->v_rows.data());
    f->cache.demote(0, f->seq, n);
    f->cache.commit(f->seq, n);
  }
  const bool q = spec.quantized();
  f->k_ref = expected_kv(spec, q ? &f->kf[0] : nullptr, f->k_rows, n_kv_heads, d, n);
  f->v_ref = expected_kv(spec, q ? &f->vf[0] : nullptr, f->v_rows, n_kv_heads, d, n);
  return f;
}

// Tolerance of the decode comparisons: max |got − ref| ≤ 1e-5 · max |ref| over the
// output of all heads (f32 accumulation over ≤ 1100 keys against a double reference).
constexpr double kDecodeRelTol = 1e-5;

void expect_decode_matches(const AttentionShape& s, const MixedFilled& f, int64_t n, uint64_t seed,
                           const std::string& what) {
  auto q = test::random_vector(size_t(s.n_heads * s.head_dim), seed, -2, 2);
  const size_t out_n = size_t(s.n_heads * s.head_dim);
  std::vector<float> ref(out_n), got(out_n, NAN), got_ref(out_n, NAN);
  attention_ref(s, q.data(), 1, n - 1, f.k_ref.data(), f.v_ref.data(), n, ref.data());
  const KvSeqView view = f.cache.view(0, f.seq, n);
  attention_decode(s, view, q.data(), got.data());
  attention_decode_ref(s, view, q.data(), got_ref.data());
  const double e = test::max_rel_error(got.data(), ref.data(), out_n);
  const double e_ref = test::max_rel_error(got_ref.data(), ref.data(), out_n);
  EXPECT_LE(e, kDecodeRelTol) << "attention_decode " << what;
  EXPECT_LE(e_ref, kDecodeRelTol) << "attention_decode_ref " << what;
}

// The main sweep: int2 (the OSCAR format) over GQA groups, head dims, quant groups,
// clipping, and lengths through every window boundary plus long ones.
TEST(MixedAttention, DecodeEqualsReferenceOverDequantizedCache) {
  const int sink = 4, recent = 8;
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= sink + recent + 5; ++n) lengths.push_back(n);
  lengths.push_back(300);
  lengths.push_back(1100);
  for (int gqa : {1, 3, 6}) {
    for (int d : {64, 128}) {
      for (int group : {32, 64, 128}) {
        if (group > d) continue;
        for (bool clip : {false, true}) {
          const KvSpec spec = mixed_spec(KvQuant::int2, sink, recent, 5, group, clip);
          const AttentionShape s{2 * gqa, 2, d};
          for (int64_t n : lengths) {
            auto f = fill_mixed(spec, 2, d, n, uint64_t(n * 131 + d + group + gqa));
            expect_decode_matches(s, *f, n, uint64_t(n + 7 * gqa),
                                  "gqa " + std::to_string(gqa) + " d " + std::to_string(d) + " G " +
                                      std::to_string(group) + (clip ? " clip" : "") + " n " + std::to_string(n));
          }
        }
      }
    }
  }
}

// Every history format (and the unquantized bf16 cache) through the same comparison.
TEST(MixedAttention, DecodeEqualsReferenceForEveryKind) {
  for (KvQuant q : {KvQuant::none, KvQuant::int8, KvQuant::int4, KvQuant::int2, KvQuant::int2_lloyd_max,
                    KvQuant::int2_lloyd_max_exact, KvQuant::kivi2}) {
    for (int d : {64, 128}) {
      const KvSpec spec = mixed_spec(q, 4, 8, 5, 64, q != KvQuant::kivi2);
      const AttentionShape s{6, 2, d};
      for (int64_t n : {1, 4, 5, 12, 13, 17, 20, 21, 29, 300, 1100}) {
        auto f = fill_mixed(spec, 2, d, n, uint64_t(n * 17 + d + int(q)));
        expect_decode_matches(s, *f, n, uint64_t(n + 3),
                              std::string(kv_quant_name(q)) + " d " + std::to_string(d) + " n " + std::to_string(n));
      }
    }
  }
}

// Per-layer precision (--kv-layers): a 4-layer cache of bf16 (raw bf16 history), int8,
// int2 and int4 layers. Each layer's decode (and prefill, for its last query) equals the
// reference over that layer's own dequantized cache (1e-5 decode, 1e-4 prefill, as above).
TEST(MixedAttention, PerLayerFormatsEachEqualTheirReference) {
  KvSpec spec = mixed_spec(KvQuant::int2, 4, 8, 5, 64, true);
  spec.layer_types = parse_kv_layers("0:bf16,1:int8,3:int4", 4);
  spec.validate();
  for (int d : {64, 128}) {
    const AttentionShape s{6, 2, d};
    const KvShape shape{4, 2, d};
    auto [kf, vf] = make_history_formats(spec, shape, nullptr);
    ASSERT_EQ(kf[0].quant, KvQuant::bf16_raw);
    ASSERT_EQ(kf[2].quant, KvQuant::int2);
    for (int64_t n : {5, 13, 21, 300, 1100}) {
      KvCache cache(shape, spec, n + 64, kf, vf);
      const SeqId seq = cache.add_sequence();
      const int64_t row = 2LL * d, qrow = 6LL * d;
      std::vector<std::vector<float>> k(4), v(4);
      ASSERT_TRUE(cache.reserve(seq, n));
      for (int l = 0; l < 4; ++l) {
        k[size_t(l)] = test::random_vector(size_t(n * row), uint64_t(n * 7 + l + d), -2, 2);
        v[size_t(l)] = test::random_vector(size_t(n * row), uint64_t(n * 7 + l + d + 100));
        cache.write(l, seq, 0, n, k[size_t(l)].data(), v[size_t(l)].data());
        cache.demote(l, seq, n);
      }
      const auto q = test::random_vector(size_t(qrow), uint64_t(n + d), -2, 2);
      std::vector<float> pre_all(size_t(4 * qrow), NAN);
      for (int l = 0; l < 4; ++l)  // prefill of the last position, before commit (as the model runs)
        attention_prefill(s, cache, l, seq, q.data(), 1, n - 1, pre_all.data() + l * qrow);
      cache.commit(seq, n);
      for (int l = 0; l < 4; ++l) {
        SCOPED_TRACE(::testing::Message() << "layer " << l << " d " << d << " n " << n);
        const auto k_ref = expected_kv(spec, &kf[size_t(l)], k[size_t(l)], 2, d, n);
        const auto v_ref = expected_kv(spec, &vf[size_t(l)], v[size_t(l)], 2, d, n);
        std::vector<float> ref(static_cast<size_t>(qrow)), got(static_cast<size_t>(qrow), NAN);
        attention_ref(s, q.data(), 1, n - 1, k_ref.data(), v_ref.data(), n, ref.data());
        attention_decode(s, cache.view(l, seq, n), q.data(), got.data());
        EXPECT_LE(test::max_rel_error(got.data(), ref.data(), ref.size()), kDecodeRelTol) << "decode";
        EXPECT_LE(test::max_rel_error(pre_all.data() + l * qrow, ref.data(), ref.size()), 1e-4) << "prefill";
      }
      if (n == 1100) {  // the layers really differ: int2 is far from the bf16 layer's exact history
        const auto k2 = expected_kv(spec, &kf[2], k[2], 2, d, n);
        const auto k2_bf16 = expected_kv(spec, &kf[0], k[2], 2, d, n);
        EXPECT_GT(test::max_rel_error(k2.data(), k2_bf16.data(), k2.size()), 0.05);
      }
    }
  }
}

// Prefill of n queries at positions p .. p+n−1 (after a prefix of p tokens committed in one
// step) against decode at each position of a second cache written one token at a time
// (write → demote → decode → commit, as transformer.cpp runs a step). ≤ 1e-4 relative.
// The split-off K bias (KeyBias: decode from positions, its reference and prefill from
// rows) equals attention over keys with the rows added (≤ kDecodeRelTol, as above).
TEST(MixedAttention, KeyAddEqualsAddingToTheKeys) {
  const int kvh = 2, d = 32, gqa = 3;
  const int64_t n = 100;
  KvSpec spec = KvSpec::parse("int2");
  spec.sink = 4;
  spec.recent = 8;
  spec.group = d;
  const AttentionShape s{kvh * gqa, kvh, d};
  auto f = fill_mixed(spec, kvh, d, n, 31);
  RopeFreqs rope;
  for (int i = 0; i < d / 2; ++i) rope.inv_freq.push_back(std::pow(10000.0, -2.0 * i / d));
  const auto bias = test::random_vector(size_t(kvh * d), 32, -3, 3);
  // to_cache: some basis change of the cache (the model's ⊘ s and R_K), here a scale per column.
  const KeyBias key_bias(rope, kvh, d, bias.data(), [&](float* rows, int64_t m) {
    for (int64_t i = 0; i < m * kvh * d; ++i) rows[i] *= 0.5f + float(i % d) / float(d);
  });
  std::vector<float> add(size_t(n * kvh * d));  // [n, kvh, d]; n > KeyBias::kBlock, two anchors
  key_bias.rows(0, n, add.data());
  std::vector<float> k_ref = f->k_ref;                                    // [kvh, n, d]
  for (int h = 0; h < kvh; ++h)
    for (int64_t t = 0; t < n; ++t)
      for (int c = 0; c < d; ++c) k_ref[size_t((h * n + t) * d + c)] += add[size_t((t * kvh + h) * d + c)];
  const auto q = test::random_vector(size_t(s.n_heads * d), 33, -2, 2);
  const size_t out_n = size_t(s.n_heads * d);
  std::vector<float> ref(out_n), dec(out_n, NAN), dec_ref(out_n, NAN), pre(out_n, NAN), plain(out_n, NAN);
  attention_ref(s, q.data(), 1, n - 1, k_ref.data(), f->v_ref.data(), n, ref.data());
  const KvSeqView view = f->cache.view(0, f->seq, n);
  attention_decode(s, view, q.data(), dec.data(), &key_bias);
  attention_decode_ref(s, view, q.data(), dec_ref.data(), add.data());
  attention_prefill(s, f->cache, 0, f->seq, q.data(), 1, n - 1, pre.data(), add.data());
  attention_decode(s, view, q.data(), plain.data());
  EXPECT_LE(test::max_rel_error(dec.data(), ref.data(), out_n), kDecodeRelTol);
  EXPECT_LE(test::max_rel_error(dec_ref.data(), ref.data(), out_n), kDecodeRelTol);
  EXPECT_LE(test::max_rel_error(pre.data(), ref.data(), out_n), kDecodeRelTol);
  EXPECT_GT(test::max_rel_error(plain.data(), ref.data(), out_n), 1e-2);  // the rows matter
}

TEST(MixedAttention, PrefillEqualsDecodePerPosition) {
  struct Case {
    KvQuant q;
    int sink, recent, block, group, d, gqa;
  };
  const Case cases[] = {
      {KvQuant::int2, 4, 8, 3, 32, 64, 3},          {KvQuant::int2, 16, 40, 16, 128, 128, 6},
      {KvQuant::int8, 4, 8, 3, 64, 64, 1},          {KvQuant::int4, 4, 8, 3, 32, 64, 3},
      {KvQuant::int2_lloyd_max, 4, 8, 3, 64, 64, 3}, {KvQuant::int2_lloyd_max_exact, 4, 8, 3, 64, 128, 3},
      {KvQuant::kivi2, 4, 8, 3, 64, 64, 3},         {KvQuant::kivi2, 0, 16, 5, 32, 128, 1},
      {KvQuant::none, 4, 8, 3, 64, 64, 3},
  };
  for (const Case& c : cases) {
    const KvSpec spec = mixed_spec(c.q, c.sink, c.recent, c.block, c.group, c.q != KvQuant::kivi2);
    const AttentionShape s{2 * c.gqa, 2, c.d};
    const KvShape shape{1, 2, c.d};
    auto [kf, vf] = make_history_formats(spec, shape, nullptr);
    for (auto [p, n] : {std::pair<int64_t, int64_t>{0, 1}, {0, 30}, {0, 300}, {7, 20}, {13, 150}, {50, 9}}) {
      SCOPED_TRACE(::testing::Message() << kv_quant_name(c.q) << " d " << c.d << " sink " << c.sink << " recent "
                                        << c.recent << " p " << p << " n " << n);
      const int64_t total = p + n, row = 2LL * c.d, qrow = int64_t(s.n_heads) * c.d;
      auto k = test::random_vector(size_t(total * row), uint64_t(total + c.d), -2, 2);
      auto v = test::random_vector(size_t(total * row), uint64_t(total + c.d + 1));
      auto q = test::random_vector(size_t(n * qrow), uint64_t(total + 5), -2, 2);
      // Prefill: prefix of p tokens in one step, then the n tokens in one step.
      KvCache a(shape, spec, total + 64, kf, vf);
      const SeqId sa = a.add_sequence();
      if (p > 0) {
        ASSERT_TRUE(a.reserve(sa, p));
        a.write(0, sa, 0, p, k.data(), v.data());
        a.demote(0, sa, p);
        a.commit(sa, p);
      }
      ASSERT_TRUE(a.reserve(sa, n));
      a.write(0, sa, p, n, k.data() + p * row, v.data() + p * row);
      a.demote(0, sa, total);
      std::vector<float> pre(size_t(n * qrow), NAN);
      attention_prefill(s, a, 0, sa, q.data(), n, p, pre.data());
      a.commit(sa, n);
      // Decode: token by token.
      KvCache b(shape, spec, total + 64, kf, vf);
      const SeqId sb = b.add_sequence();
      std::vector<float> dec(static_cast<size_t>(qrow), NAN);
      for (int64_t t = 0; t < total; ++t) {
        ASSERT_TRUE(b.reserve(sb, 1));
        b.write(0, sb, t, 1, k.data() + t * row, v.data() + t * row);
        b.demote(0, sb, t + 1);
        if (t >= p) {
          const float* qi = q.data() + (t - p) * qrow;
          attention_decode(s, b.view(0, sb, t + 1), qi, dec.data());
          const double e = test::max_rel_error(pre.data() + (t - p) * qrow, dec.data(), size_t(qrow));
          ASSERT_LE(e, 1e-4) << "query at position " << t;
        }
        b.commit(sb, 1);
      }
    }
  }
}

// (q·R)(k·R)ᵀ = q·kᵀ for orthogonal R: decode and prefill over an f32 cache of rotated keys
// with rotated queries equal the unrotated attention; with values rotated by R_V too,
// the output comes out rotated by R_V. A matrix that is not orthogonal must break it.
TEST(MixedAttention, ScoresInvariantUnderRotation) {
  KvSpec spec;
  spec.mode = "f32";
  spec.dtype = KvDtype::f32;
  spec.block_tokens = 7;
  for (int d : {64, 128}) {
    for (int variant = 0; variant < 3; ++variant) {
      // 0: random orthogonal, 1: Hadamard (what int2-hadamard applies), 2: Hadamard · random orthogonal.
      std::vector<float> R = variant == 1 ? hadamard_matrix(d) : test::random_orthogonal(d, uint64_t(d + variant));
      if (variant == 2) R = test::rotate_rows_f64(hadamard_matrix(d), R, d);
      const std::vector<float> Rv = test::random_orthogonal(d, uint64_t(d * 3 + variant));
      const AttentionShape s{6, 2, d};
      const int64_t n = 97, row = 2LL * d, qrow = 6LL * d;
      auto k = test::random_vector(size_t(n * row), uint64_t(d), -2, 2);
      auto v = test::random_vector(size_t(n * row), uint64_t(d + 1));
      auto q = test::random_vector(size_t(n * qrow), uint64_t(d + 2), -2, 2);
      auto run = [&](const std::vector<float>& kk, const std::vector<float>& vv, const std::vector<float>& qq,
                     std::vector<float>& dec, std::vector<float>& pre) {
        KvCache c(KvShape{1, 2, d}, spec, n);
        const SeqId sq = c.add_sequence();
        ASSERT_TRUE(c.reserve(sq, n));
        c.write(0, sq, 0, n, kk.data(), vv.data());
        c.commit(sq, n);
        dec.assign(size_t(qrow), NAN);
        attention_decode(s, c.view(0, sq, n), qq.data() + (n - 1) * qrow, dec.data());
        pre.assign(size_t(n * qrow), NAN);
        attention_prefill(s, c, 0, sq, qq.data(), n, 0, pre.data());
      };
      std::vector<float> dec0, pre0, dec1, pre1, dec2, pre2;
      run(k, v, q, dec0, pre0);
      const auto kr = test::rotate_rows_f64(k, R, d), qr = test::rotate_rows_f64(q, R, d);
      run(kr, v, qr, dec1, pre1);
      SCOPED_TRACE(::testing::Message() << "d " << d << " variant " << variant);
      EXPECT_LE(test::max_rel_error(dec1.data(), dec0.data(), dec0.size()), 1e-5) << "decode";
      EXPECT_LE(test::max_rel_error(pre1.data(), pre0.data(), pre0.size()), 1e-5) << "prefill";
      // Values rotated by R_V: the output is out·R_V.
      run(kr, test::rotate_rows_f64(v, Rv, d), qr, dec2, pre2);
      const auto dec0_rot = test::rotate_rows_f64(dec0, Rv, d), pre0_rot = test::rotate_rows_f64(pre0, Rv, d);
      EXPECT_LE(test::max_rel_error(dec2.data(), dec0_rot.data(), dec0.size()), 1e-5) << "decode, R_V";
      EXPECT_LE(test::max_rel_error(pre2.data(), pre0_rot.data(), pre0.size()), 1e-5) << "prefill, R_V";
      // Control: scaling one column of R (no longer orthogonal) changes the scores.
      std::vector<float> bad = R;
      for (int i = 0; i < d; ++i) bad[size_t(i * d)] *= 1.5f;
      std::vector<float> dec3, pre3;
      run(test::rotate_rows_f64(k, bad, d), v, test::rotate_rows_f64(q, bad, d), dec3, pre3);
      EXPECT_GT(test::max_rel_error(pre3.data(), pre0.data(), pre0.size()), 1e-3) << "non-orthogonal control";
    }
  }
}

}  // namespace
}  // namespace oscar
