// Per-layer KV precision (--kv-layers): the parser (good items, every kind of bad item),
// what a mixed spec says per layer, the bf16_raw history row, and a mixed cache whose
// history rows and byte accounting follow each layer's own format.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../mixed_cache_util.h"
#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/kv/history_formats.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {
namespace {

// The error message of f(), or "" when it does not throw oscar::Error.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvLayers, ParsesRangesAndSingles) {
  const auto v = parse_kv_layers("27:int8, 0-1:int4,5-5:bf16,6:int2-oscar-lloydmax-exact", 30);
  ASSERT_EQ(v.size(), 4u);  // sorted by first layer
  EXPECT_EQ(v[0].first, 0);
  EXPECT_EQ(v[0].last, 1);
  EXPECT_EQ(v[0].type, "int4");
  EXPECT_EQ(v[0].quant, KvQuant::int4);
  EXPECT_EQ(v[1].item(), "5:bf16");
  EXPECT_EQ(v[1].quant, KvQuant::none);
  EXPECT_EQ(v[2].quant, KvQuant::int2_lloyd_max_exact);
  EXPECT_EQ(v[2].rotation, KvRotation::calibrated);
  EXPECT_FLOAT_EQ(v[2].k_clip, 0.96f);  // the type's defaults
  EXPECT_FLOAT_EQ(v[2].v_clip, 0.92f);
  EXPECT_EQ(v[3].item(), "27:int8");
  EXPECT_EQ(v[3].k_clip, 0.0f);
  for (const char* t : {"bf16", "int8", "int4", "int2", "int2-hadamard", "int2-oscar", "int2-oscar-lloydmax",
                        "int2-oscar-lloydmax-exact"})
    EXPECT_EQ(parse_kv_layers(std::string("0-29:") + t, 30).at(0).type, t);
  EXPECT_EQ(parse_kv_layers("2-3:int2-hadamard", 0).at(0).rotation, KvRotation::hadamard);  // n_layers unknown
}

TEST(KvLayers, RejectsBadItemsNamingThem) {
  struct Bad {
    const char* text;
    const char* want;  // part of the message
  };
  const Bad bad[] = {
      {"", "empty list"},
      {"0:int4,,3:int8", "item 2 of '0:int4,,3:int8' is empty"},
      {"0:int4,", "item 2"},
      {"3", "'3': expected LAYERS:TYPE"},
      {"a-b:int4", "'a-b:int4': bad layers"},
      {"-1:int4", "'-1:int4': bad layers"},
      {"1-:int4", "'1-:int4': bad layers"},
      {"1-2-3:int4", "'1-2-3:int4': bad layers"},
      {"5-2:int4", "'5-2:int4': range 5-2 is reversed"},
      {"28-30:int4", "'28-30:int4': layer 30 out of range (the model has 30 layers"},
      {"30:int8", "'30:int8': layer 30 out of range"},
      {"0:int3", "'0:int3': unknown KV type 'int3'"},
      {"0:", "'0:': unknown KV type ''"},
      {"0-3:kivi2", "'0-3:kivi2': kivi2 cannot be mixed"},
      {"0:f32", "'0:f32': f32 cannot be mixed"},
      {"0-4:int4,4-6:int8", "'0-4:int4' and '4-6:int8' overlap (layer 4)"},
      {"10-12:int4,0-29:int8", "'0-29:int8' and '10-12:int4' overlap"},
  };
  for (const Bad& b : bad) {
    const std::string msg = error_of([&] { parse_kv_layers(b.text, 30); });
    EXPECT_NE(msg.find(b.want), std::string::npos) << "'" << b.text << "' gave: " << (msg.empty() ? "no error" : msg);
  }
  // Out of range found later, when the model's layer count is known.
  KvSpec s = KvSpec::parse("int2");
  s.layer_types = parse_kv_layers("0-1:int4,40:int8", 0);
  EXPECT_NE(error_of([&] { s.validate_layers(30); }).find("'40:int8': layer 40 out of range"), std::string::npos);
  EXPECT_EQ(error_of([&] { s.validate_layers(41); }), "");
  // kivi2 and f32 as the base type cannot take per-layer types.
  for (const char* base : {"kivi2", "f32"}) {
    KvSpec b = KvSpec::parse(base);
    b.layer_types = parse_kv_layers("0:int4", 30);
    EXPECT_NE(error_of([&] { b.validate(); }).find("cannot be mixed with --kv-layers"), std::string::npos) << base;
  }
}

TEST(KvLayers, SpecPerLayer) {
  KvSpec s = KvSpec::parse("int2-oscar");
  s.layer_types = parse_kv_layers("0-1:int4,27:int8,28:bf16,29:int2-hadamard", 30);
  s.validate();
  EXPECT_EQ(s.name(), "int2-oscar+layers(0-1:int4,27:int8,28:bf16,29:int2-hadamard)");
  EXPECT_TRUE(s.quantized());
  EXPECT_EQ(s.layer_quant(0), KvQuant::int4);
  EXPECT_EQ(s.layer_quant(2), KvQuant::int2);
  EXPECT_EQ(s.layer_quant(28), KvQuant::none);
  EXPECT_EQ(s.layer_rotation(1), KvRotation::none);
  EXPECT_EQ(s.layer_rotation(2), KvRotation::calibrated);
  EXPECT_EQ(s.layer_rotation(29), KvRotation::hadamard);
  EXPECT_FLOAT_EQ(s.layer_k_clip(2), 0.96f);
  EXPECT_EQ(s.layer_k_clip(27), 0.0f);
  EXPECT_TRUE(s.uses_rotation(KvRotation::calibrated, 30));
  EXPECT_FALSE(s.uses_rotation(KvRotation::calibrated, 2));  // layers 0-1 are int4
  // The cache-wide key-bias split (on by default for int2-oscar) covers every layer.
  EXPECT_EQ(s.layer_spec(27).name(), "int8+k-bias-split");
  EXPECT_TRUE(s.layer_spec(27).k_bias_split);
  EXPECT_EQ(s.layer_spec(27).quant, KvQuant::int8);
  EXPECT_EQ(s.layer_spec(5).name(), "int2-oscar");
  EXPECT_EQ(s.history_end(1000), 1000 - 256);  // windows stay global

  // bf16 everywhere but one layer: still a cache with history (bf16 layers as raw rows).
  KvSpec b = KvSpec::parse("bf16");
  EXPECT_FALSE(b.quantized());
  b.layer_types = parse_kv_layers("3:int2", 30);
  EXPECT_TRUE(b.quantized());
  EXPECT_EQ(b.name(), "bf16+layers(3:int2)");
  const auto [kf, vf] = make_history_formats(b, KvShape{30, 3, 64}, nullptr);
  ASSERT_EQ(kf.size(), 30u);
  EXPECT_EQ(kf[0].quant, KvQuant::bf16_raw);
  EXPECT_EQ(kf[3].quant, KvQuant::int2);
  EXPECT_EQ(vf[29].quant, KvQuant::bf16_raw);
  EXPECT_EQ(kf[0].block_tokens, kf[3].block_tokens);
}

// bf16_raw rows: exactly the bf16 rounding of what was stored, and dot / axpy on them
// equal the same operations on those rounded values (f32 sums in the same order).
TEST(KvLayers, Bf16RawRoundTripsToBf16) {
  for (int d : {32, 64, 128, 256}) {
    HistoryFormat f;
    f.quant = KvQuant::bf16_raw;
    f.head_dim = d;
    f.group = std::min(d, 128);
    f.block_tokens = 5;
    EXPECT_EQ(f.block_bytes(), size_t(5 * d * 2));
    EXPECT_EQ(f.bits_per_element(), 16.0);
    auto rows = test::random_vector(size_t(5 * d), uint64_t(d), -40.0f, 40.0f);
    rows[0] = 1e-30f;  // subnormal-ish and large values keep bf16's rounding too
    rows[1] = -3.0e38f;
    std::vector<uint8_t> block(f.block_bytes(), 0xAB);
    history_store(f, block.data(), 0, 2, rows.data());
    history_store(f, block.data(), 2, 3, rows.data() + 2 * d);
    const auto q = test::random_vector(size_t(d), uint64_t(d + 1));
    std::vector<float> out(static_cast<size_t>(d));
    for (int r = 0; r < 5; ++r) {
      history_load(f, block.data(), r, out.data());
      float dot = 0.0f;
      std::vector<float> acc(size_t(d), 0.5f), acc_ref(size_t(d), 0.5f);
      for (int c = 0; c < d; ++c) {
        const float want = test::bf16_round(rows[size_t(r * d + c)]);
        ASSERT_EQ(out[size_t(c)], want) << "d " << d << " row " << r << " dim " << c;
        dot += q[size_t(c)] * want;
        acc_ref[size_t(c)] += 0.75f * want;
      }
      EXPECT_EQ(history_dot(f, block.data(), r, q.data()), dot);
      history_axpy(f, block.data(), r, 0.75f, acc.data());
      EXPECT_EQ(acc, acc_ref);
    }
  }
}

// A 4-layer cache of bf16, int8, int2 and int4 layers (over an int2 spec): every history
// row comes back as its own layer's codec makes it, and the bytes are the hand mix.
TEST(KvLayers, MixedCacheRowsAndBytes) {
  KvSpec spec = KvSpec::parse("int2");
  spec.sink = 4;
  spec.recent = 8;
  spec.block_tokens = 3;
  spec.group = 32;
  spec.layer_types = parse_kv_layers("0:bf16,1:int8,3:int4", 4);
  spec.validate();
  const int H = 2, d = 64;
  const KvShape shape{4, H, d};
  const auto [kf, vf] = make_history_formats(spec, shape, nullptr);
  const KvQuant want_q[4] = {KvQuant::bf16_raw, KvQuant::int8, KvQuant::int2, KvQuant::int4};
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(kf[size_t(l)].quant, want_q[l]);
    EXPECT_EQ(vf[size_t(l)].quant, want_q[l]);
  }
  KvCache cache(shape, spec, 200, kf, vf);
  const SeqId seq = cache.add_sequence();
  const int64_t n = 57, row = int64_t(H) * d;
  std::vector<std::vector<float>> k(4), v(4);
  // Token by token, as decode writes (write → demote per layer, then commit).
  for (int l = 0; l < 4; ++l) {
    k[size_t(l)] = test::random_vector(size_t(n * row), uint64_t(10 + l), -2, 2);
    v[size_t(l)] = test::random_vector(size_t(n * row), uint64_t(20 + l));
  }
  for (int64_t t = 0; t < n; ++t) {
    ASSERT_TRUE(cache.reserve(seq, 1));
    for (int l = 0; l < 4; ++l) {
      cache.write(l, seq, t, 1, k[size_t(l)].data() + t * row, v[size_t(l)].data() + t * row);
      cache.demote(l, seq, t + 1);
    }
    cache.commit(seq, 1);
  }
  const int64_t hist_end = 4 + (n - 4 - 8);
  ASSERT_EQ(cache.history_tokens(seq), hist_end - 4);
  std::vector<float> kh(size_t(n * d)), vh(size_t(n * d)), want(static_cast<size_t>(d)), w(static_cast<size_t>(d));
  for (int l = 0; l < 4; ++l) {
    for (int h = 0; h < H; ++h) {
      cache.gather_history(l, seq, h, n, kh.data(), vh.data());
      for (int64_t t = 4; t < hist_end; ++t) {
        for (int side = 0; side < 2; ++side) {
          const float* src = (side ? v : k)[size_t(l)].data() + (t * H + h) * d;
          for (int c = 0; c < d; ++c) w[size_t(c)] = test::bf16_round(src[c]);  // the fp row it was demoted from
          test::codec_round_trip_row(side ? vf[size_t(l)] : kf[size_t(l)], w.data(), want.data());
          const float* got = (side ? vh : kh).data() + t * d;
          for (int c = 0; c < d; ++c)
            ASSERT_EQ(got[c], want[size_t(c)]) << "layer " << l << " head " << h << " token " << t << " dim " << c;
        }
      }
    }
  }
  // Bytes: 12 fp tokens (sink + recent) at 16 bits, 45 history tokens at each layer's
  // bits: bf16 16, int8 8 + 32/32, int2 2 + 1, int4 4 + 1 — for K and V alike.
  const double hist_bits = 16.0 + 9.0 + 3.0 + 5.0;  // summed over the 4 layers
  const double want_bytes = 12.0 * 2 * 4 * H * d * 2 + 45.0 * 2 * H * d * hist_bits / 8.0;
  EXPECT_EQ(cache.bytes_used(seq), int64_t(want_bytes));
  const double want_bits = 8.0 * want_bytes / (2.0 * 4 * H * d * n);
  EXPECT_NEAR(cache.bits_per_element(seq), want_bits, 1e-12);
  EXPECT_NEAR(want_bits, (12 * 16.0 + 45 * hist_bits / 4) / 57, 1e-12);  // the mix per element, by hand
}

}  // namespace
}  // namespace oscar

namespace oscar {
namespace {

// The key-bias split is ours: on by default for the OSCAR types, off for the baselines,
// and the printed name says so only when it differs from that default.
TEST(KvSpecDefaults, KeyBiasSplit) {
  EXPECT_TRUE(KvSpec::parse("int2-oscar").k_bias_split);
  EXPECT_TRUE(KvSpec::parse("int2-oscar-lloydmax-exact").k_bias_split);
  for (const char* m : {"bf16", "int8", "int4", "int2", "int2-hadamard", "kivi2"}) EXPECT_FALSE(KvSpec::parse(m).k_bias_split) << m;
  KvSpec s = KvSpec::parse("int2-oscar");
  EXPECT_EQ(s.name(), "int2-oscar");
  s.k_bias_split = false;
  EXPECT_EQ(s.name(), "int2-oscar+no-k-bias-split");
  KvSpec b = KvSpec::parse("int4");
  b.k_bias_split = true;
  EXPECT_EQ(b.name(), "int4+k-bias-split");
}

TEST(KvSpecDefaults, KeyMean) {
  EXPECT_TRUE(KvSpec::parse("int2-oscar").k_mean);
  EXPECT_TRUE(KvSpec::parse("int2-oscar-lloydmax").k_mean);
  for (const char* m : {"bf16", "int8", "int4", "int2", "int2-hadamard", "kivi2"}) EXPECT_FALSE(KvSpec::parse(m).k_mean) << m;
  KvSpec s = KvSpec::parse("int2-oscar");
  s.k_mean = false;
  EXPECT_EQ(s.name(), "int2-oscar+no-k-mean");
}

}  // namespace
}  // namespace oscar
