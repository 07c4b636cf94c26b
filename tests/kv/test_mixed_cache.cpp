// The mixed KV cache: [sink] ‖ [quantized history] ‖ [recent] per sequence, in pages.
// After every commit the counts (length, history tokens, free pages, bytes, bits per
// element) must equal a hand computation, and every token's row must come back from
// the segment it belongs to: full-precision rows exactly as written (bf16-rounded),
// history rows exactly as the codec's quantize → dequantize of that written row.
// Windows are small and pages (3 tokens) divide nothing, so every boundary is crossed.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <tuple>

#include "../mixed_cache_util.h"
#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/kv/history_formats.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {
namespace {

constexpr KvQuant kAllKinds[] = {KvQuant::int8,           KvQuant::int4,
                                 KvQuant::int2,           KvQuant::int2_lloyd_max,
                                 KvQuant::int2_lloyd_max_exact, KvQuant::kivi2};

// Small windows: sink 4, recent 8, 3-token pages (dividing neither), KIVI T = 4.
KvSpec small_spec(KvQuant q, KvDtype dt = KvDtype::bf16) {
  KvSpec s;
  s.mode = kv_quant_name(q);
  s.dtype = dt;
  s.quant = q;
  s.block_tokens = 3;
  s.sink = 4;
  s.recent = 8;
  s.group = 32;
  s.kivi_tokens = 4;
  s.k_clip = q == KvQuant::kivi2 ? 0.0f : 0.9f;  // exercise the clipping path too
  s.v_clip = q == KvQuant::kivi2 ? 0.0f : 0.85f;
  return s;
}

// The value written at (sequence tag, layer, K/V, head, token, channel): pseudo-random
// in [−1, 1] plus a drift with the token index, so rows of different tokens differ
// everywhere (a row served for the wrong token cannot match).
float row_value(uint32_t tag, int layer, int side, int head, int64_t t, int c) {
  uint64_t x = (uint64_t(tag) << 40) ^ (uint64_t(layer) << 36) ^ (uint64_t(side) << 35) ^ (uint64_t(head) << 28) ^
               (uint64_t(t) << 10) ^ uint64_t(c);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  const float u = float(double(x >> 11) / double(1ull << 53)) * 2.0f - 1.0f;
  return u + 0.03f * float(t) * (side == 0 ? 1.0f : -1.0f);
}

// A cache plus what was written into it, and the hand-computed expectations.
class Mixed {
 public:
  Mixed(KvShape shape, KvSpec spec, int64_t capacity) : shape_(shape), spec_(spec), cache_(make(shape, spec, capacity)) {
    auto [kf, vf] = make_history_formats(spec, shape, nullptr);
    kf_ = kf;
    vf_ = vf;
  }

  KvCache& cache() { return cache_; }
  const KvSpec& spec() const { return spec_; }

  SeqId add(uint32_t tag) {
    const SeqId s = cache_.add_sequence();
    seqs_[s] = {tag, 0};
    return s;
  }
  void clear(SeqId s, uint32_t new_tag) {
    cache_.clear_sequence(s);
    seqs_[s] = {new_tag, 0};
  }
  void remove(SeqId s) {
    cache_.remove_sequence(s);
    seqs_.erase(s);
  }

  // Swap: the image and the rows it was written with; swap_in gives them a new id (−1: refused).
  struct Swapped {
    KvSwapImage image;
    uint32_t tag = 0;
    int64_t length = 0;
  };
  Swapped swap_out(SeqId s) {
    const auto [tag, len] = seqs_.at(s);
    Swapped w{cache_.swap_out(s), tag, len};
    seqs_.erase(s);
    return w;
  }
  SeqId swap_in(const Swapped& w) {
    const SeqId s = cache_.swap_in(w.image);
    if (s >= 0) seqs_[s] = {w.tag, w.length};
    return s;
  }

  // One step of n tokens, as the model runs it: reserve, per layer write → demote, commit.
  // Returns reserve's answer (and does nothing more when it refuses).
  bool append(SeqId s, int64_t n) {
    auto& [tag, len] = seqs_.at(s);
    if (!cache_.reserve(s, n)) return false;
    const int H = shape_.n_kv_heads, d = shape_.head_dim;
    std::vector<float> k(static_cast<size_t>(n * H * d)), v(static_cast<size_t>(n * H * d));
    for (int l = 0; l < shape_.n_layers; ++l) {
      for (int64_t i = 0; i < n; ++i)
        for (int h = 0; h < H; ++h)
          for (int c = 0; c < d; ++c) {
            k[size_t((i * H + h) * d + c)] = row_value(tag, l, 0, h, len + i, c);
            v[size_t((i * H + h) * d + c)] = row_value(tag, l, 1, h, len + i, c);
          }
      cache_.write(l, s, len, n, k.data(), v.data());
      cache_.demote(l, s, len + n);
    }
    cache_.commit(s, n);
    len += n;
    return true;
  }

  // fp pages a sequence of length t holds: ceil(t/B) minus those whose tokens are all
  // history (first token ≥ sink, last < history_end).
  int64_t expected_fp_pages(int64_t t) const {
    const int64_t B = spec_.block_tokens, h = test::expected_history_end(spec_, t);
    int64_t pages = 0;
    for (int64_t b = 0; b * B < t; ++b) pages += page_released(b, h) ? 0 : 1;
    return pages;
  }
  bool page_released(int64_t b, int64_t h) const {
    const int64_t B = spec_.block_tokens;
    return spec_.quantized() && b * B >= spec_.sink && (b + 1) * B <= h;
  }

  // Counts of every sequence and of the whole cache.
  void check_counts() const {
    int64_t pages = 0;
    for (const auto& [s, st] : seqs_) {
      const int64_t t = st.second;
      SCOPED_TRACE(::testing::Message() << "seq " << s << " length " << t);
      ASSERT_EQ(cache_.length(s), t);
      const int64_t h = test::expected_history_end(spec_, t);
      ASSERT_EQ(spec_.history_end(t), h);
      const int64_t hist = h - std::min<int64_t>(t, spec_.sink);
      ASSERT_EQ(cache_.history_tokens(s), hist);
      // bytes: fp rows 2·L·H·d·elem each, history rows H·d·(k bits + v bits)/8 per layer.
      const int64_t L = shape_.n_layers, H = shape_.n_kv_heads, d = shape_.head_dim;
      double bytes = double(t - hist) * 2.0 * double(L * H * d) * spec_.fp_bytes_per_element();
      for (int l = 0; l < L && hist > 0; ++l)
        bytes += double(hist) * double(H * d) *
                 (test::expected_history_bits(kf_[size_t(l)]) + test::expected_history_bits(vf_[size_t(l)])) / 8.0;
      ASSERT_EQ(cache_.bytes_used(s), int64_t(bytes + 0.5));
      const double bpe = t == 0 ? 8.0 * spec_.fp_bytes_per_element()
                                : 8.0 * double(int64_t(bytes + 0.5)) / (2.0 * double(L * H * d) * double(t));
      ASSERT_DOUBLE_EQ(cache_.bits_per_element(s), bpe);
      pages += expected_fp_pages(t);
    }
    ASSERT_EQ(cache_.free_tokens(), cache_.capacity_tokens() - pages * spec_.block_tokens);
  }

  // Every row of every sequence, layer and head, from the segment it belongs to.
  void check_rows() const {
    for (const auto& [s, st] : seqs_) check_rows(s);
  }
  void check_rows(SeqId s) const {
    const auto [tag, t] = seqs_.at(s);
    const int d = shape_.head_dim, S = spec_.sink;
    const int64_t h = test::expected_history_end(spec_, t);
    const auto n = static_cast<size_t>(t * d);
    std::vector<float> kfp(n), vfp(n), khist(n), vhist(n), kw(n), vw(n), kexp(n), vexp(n);
    for (int l = 0; l < shape_.n_layers; ++l) {
      const HistoryFormat& kf = kf_[size_t(l)];
      const HistoryFormat& vf = vf_[size_t(l)];
      for (int head = 0; head < shape_.n_kv_heads; ++head) {
        SCOPED_TRACE(::testing::Message() << spec_.mode << " seq " << s << " length " << t << " layer " << l
                                          << " head " << head);
        cache_.gather_fp(l, s, head, t, kfp.data(), vfp.data());
        cache_.gather_history(l, s, head, t, khist.data(), vhist.data());
        for (int64_t i = 0; i < t; ++i)
          for (int c = 0; c < d; ++c) {
            kw[size_t(i * d + c)] = test::fp_stored(spec_, row_value(tag, l, 0, head, i, c));
            vw[size_t(i * d + c)] = test::fp_stored(spec_, row_value(tag, l, 1, head, i, c));
          }
        // History expectations straight from the codecs.
        std::fill(kexp.begin(), kexp.end(), 0.0f);
        std::fill(vexp.begin(), vexp.end(), 0.0f);
        for (int64_t i = S; i < h; ++i) test::codec_round_trip_row(vf, vw.data() + i * d, vexp.data() + i * d);
        if (kf.per_channel) {
          for (int64_t b0 = S; b0 < h; b0 += kf.block_tokens)
            test::codec_round_trip_kivi_keys(kf, kw.data() + b0 * d, kexp.data() + b0 * d);
        } else {
          for (int64_t i = S; i < h; ++i) test::codec_round_trip_row(kf, kw.data() + i * d, kexp.data() + i * d);
        }
        for (int64_t i = 0; i < t; ++i) {
          const bool hist = i >= S && i < h;
          const bool released = page_released(i / spec_.block_tokens, h);
          ASSERT_TRUE(!released || hist) << "token " << i << ": page released but not history";
          // fp rows: as written where the page is held, zeros once released.
          const float* kf_want = kw.data() + i * d;
          const float* vf_want = vw.data() + i * d;
          std::vector<float> zeros(static_cast<size_t>(d), 0.0f);
          if (released) kf_want = vf_want = zeros.data();
          ASSERT_TRUE(test::all_close(kfp.data() + i * d, kf_want, size_t(d), 0, 0)) << "fp K of token " << i;
          ASSERT_TRUE(test::all_close(vfp.data() + i * d, vf_want, size_t(d), 0, 0)) << "fp V of token " << i;
          // history rows: the codec's round trip for history tokens, zeros elsewhere.
          ASSERT_TRUE(test::all_close(khist.data() + i * d, kexp.data() + i * d, size_t(d), 0, 0))
              << "history K of token " << i << (hist ? " (history)" : " (not history)");
          ASSERT_TRUE(test::all_close(vhist.data() + i * d, vexp.data() + i * d, size_t(d), 0, 0))
              << "history V of token " << i << (hist ? " (history)" : " (not history)");
        }
      }
    }
  }

  void check() const {
    check_counts();
    check_rows();
  }

 private:
  static KvCache make(KvShape shape, KvSpec spec, int64_t capacity) {
    auto [kf, vf] = make_history_formats(spec, shape, nullptr);
    return KvCache(shape, spec, capacity, kf, vf);
  }

  KvShape shape_;
  KvSpec spec_;
  KvCache cache_;
  std::vector<HistoryFormat> kf_, vf_;
  std::map<SeqId, std::pair<uint32_t, int64_t>> seqs_;  // tag, length
};

const KvShape kShape{2, 2, 64};

TEST(MixedCache, HistoryEndIsTheWindowFormula) {
  // r(t) = S + T·⌊max(0, t − S − W)/T⌋ for t > S, min(t, S) otherwise; no history without quant.
  KvSpec s = small_spec(KvQuant::kivi2);
  for (int64_t t : {0, 3, 4, 12, 15, 16, 19, 20}) EXPECT_EQ(s.history_end(t), test::expected_history_end(s, t)) << t;
  EXPECT_EQ(s.history_end(15), 4);   // 3 past the windows: no whole KIVI block yet
  EXPECT_EQ(s.history_end(16), 8);   // one block of 4
  EXPECT_EQ(s.history_end(19), 8);   // the recent window holds W .. W + T − 1 tokens
  EXPECT_EQ(s.history_end(20), 12);
  KvSpec i2 = small_spec(KvQuant::int2);
  EXPECT_EQ(i2.history_end(12), 4);
  EXPECT_EQ(i2.history_end(13), 5);
  EXPECT_EQ(i2.history_end(2), 2);  // shorter than the sink: everything is sink
  KvSpec none;
  none.sink = 4;
  EXPECT_EQ(none.history_end(100), 4);  // unquantized: empty history
}

// Every length from 0 to past the windows (by at least 5 and two KIVI blocks), one token
// at a time, and the same lengths written in one step (prefill places tokens directly).
TEST(MixedCache, DemotionOneTokenAtATimeAndInOneStep) {
  for (KvQuant q : kAllKinds) {
    for (KvDtype dt : {KvDtype::bf16, KvDtype::f32}) {
      const KvSpec spec = small_spec(q, dt);
      SCOPED_TRACE(::testing::Message() << kv_quant_name(q) << (dt == KvDtype::f32 ? " f32" : " bf16"));
      const int64_t max_len = spec.sink + spec.recent + std::max(5, 2 * spec.demote_tokens() + 3);
      Mixed m(kShape, spec, 64);
      const SeqId s = m.add(1);
      m.check();
      for (int64_t t = 1; t <= max_len; ++t) {
        ASSERT_TRUE(m.append(s, 1));
        ASSERT_NO_FATAL_FAILURE(m.check()) << "after token " << t;
      }
      for (int64_t t = 0; t <= max_len; ++t) {
        Mixed one(kShape, spec, 64);
        const SeqId a = one.add(2);
        if (t > 0) {
          ASSERT_TRUE(one.append(a, t));
        }
        ASSERT_NO_FATAL_FAILURE(one.check()) << "one step of " << t;
      }
    }
  }
}

// Random step sizes on three interleaved sequences; then clear one and refill it with
// different rows, and remove everything: every page comes back.
TEST(MixedCache, RandomStepsInterleavedSequences) {
  for (KvQuant q : kAllKinds) {
    const KvSpec spec = small_spec(q);
    SCOPED_TRACE(kv_quant_name(q));
    Mixed m(kShape, spec, 200);
    const int64_t capacity = m.cache().capacity_tokens();
    ASSERT_EQ(m.cache().free_tokens(), capacity);
    std::vector<SeqId> seqs = {m.add(11), m.add(12), m.add(13)};
    std::vector<int64_t> len(3, 0);
    std::mt19937 rng(uint32_t(int(q) * 7 + 1));
    std::uniform_int_distribution<int> step(1, 9);
    for (int round = 0; round < 12; ++round) {
      for (size_t i = 0; i < seqs.size(); ++i) {
        const int n = step(rng);
        ASSERT_TRUE(m.append(seqs[i], n));
        len[i] += n;
        ASSERT_NO_FATAL_FAILURE(m.check()) << "round " << round << " seq " << i << " +" << n;
      }
    }
    // Clear the middle one while the others keep their pages; refill with new rows.
    m.clear(seqs[1], 99);
    ASSERT_NO_FATAL_FAILURE(m.check()) << "after clear";
    for (int n : {5, 1, 13, 2, 7}) {
      ASSERT_TRUE(m.append(seqs[1], n));
      ASSERT_NO_FATAL_FAILURE(m.check()) << "refill +" << n;
    }
    m.remove(seqs[0]);
    ASSERT_NO_FATAL_FAILURE(m.check()) << "after remove";
    m.remove(seqs[2]);
    m.clear(seqs[1], 5);
    EXPECT_EQ(m.cache().free_tokens(), capacity);
    m.remove(seqs[1]);
    EXPECT_EQ(m.cache().free_tokens(), capacity);
  }
}

// Swap out and back in: the pages go back to the pools at once (and are reused by another
// sequence meanwhile), and the restored sequence reads every row exactly as before, in
// other pages, and goes on growing (its history demotes as if it had never left). A
// swap_in that does not fit changes nothing.
TEST(MixedCache, SwapOutAndInRestoresEveryRow) {
  for (KvQuant q : kAllKinds) {
    SCOPED_TRACE(kv_quant_name(q));
    const KvSpec spec = small_spec(q);
    Mixed m(kShape, spec, 120);
    const SeqId a = m.add(31), b = m.add(32);
    const int64_t len_a = spec.sink + spec.recent + 2 * spec.demote_tokens() + 7;
    ASSERT_TRUE(m.append(a, len_a));
    ASSERT_TRUE(m.append(b, 5));
    const KvPages free_before = m.cache().free_pages();
    const int64_t bytes = m.cache().swap_bytes(a);
    Mixed::Swapped w = m.swap_out(a);
    EXPECT_EQ(int64_t(w.image.bytes.size()), bytes);
    const KvPages held = w.image.pages();
    EXPECT_EQ(held.fp, m.cache().pages_for_length(len_a).fp);
    EXPECT_EQ(held.history, m.cache().pages_for_length(len_a).history);
    EXPECT_EQ(m.cache().free_pages().fp, free_before.fp + held.fp);
    EXPECT_EQ(m.cache().free_pages().history, free_before.history + held.history);
    // b takes the freed pages and writes its own rows into them.
    ASSERT_TRUE(m.append(b, len_a));
    ASSERT_NO_FATAL_FAILURE(m.check());
    // Not enough pages for the image: refused, nothing changed.
    const SeqId c = m.add(33);
    while (m.append(c, 3)) {
    }
    const KvPages free_full = m.cache().free_pages();
    EXPECT_EQ(m.swap_in(w), -1);
    EXPECT_EQ(m.cache().free_pages().fp, free_full.fp);
    EXPECT_EQ(m.cache().free_pages().history, free_full.history);
    m.remove(c);
    const SeqId a2 = m.swap_in(w);
    ASSERT_GE(a2, 0);
    ASSERT_NO_FATAL_FAILURE(m.check()) << "after swap_in";
    for (int n : {1, 1, 4, 9}) {
      ASSERT_TRUE(m.append(a2, n));
      ASSERT_NO_FATAL_FAILURE(m.check()) << "grown +" << n;
    }
    m.remove(a2);
    m.remove(b);
    EXPECT_EQ(m.cache().free_tokens(), m.cache().capacity_tokens());
  }
}

// A cleared sequence refilled with new rows must read the new rows, in the same pages
// (the allocator hands the released pages back first) — also for formats that decode
// a whole block (KIVI keys). One layer and one head so the same block is read last
// before the clear and first after it.
TEST(MixedCache, RefilledPagesServeTheNewRows) {
  for (KvQuant q : kAllKinds) {
    SCOPED_TRACE(kv_quant_name(q));
    const KvSpec spec = small_spec(q);
    Mixed m(KvShape{1, 1, 64}, spec, 64);
    const SeqId s = m.add(21);
    const int64_t t = spec.sink + spec.recent + spec.demote_tokens();  // exactly one history block for KIVI
    ASSERT_TRUE(m.append(s, t));
    ASSERT_NO_FATAL_FAILURE(m.check());
    m.clear(s, 22);
    ASSERT_TRUE(m.append(s, t));
    ASSERT_NO_FATAL_FAILURE(m.check()) << "after refill";
  }
}

// A refused reserve leaves everything as it was: counts, pages, rows; a smaller request
// that fits still works afterwards. Both pools: fp pages (sequences with windows) and
// history pages (no windows, so fp pages come back at every commit and history grows).
TEST(MixedCache, RefusedReserveChangesNothing) {
  for (KvQuant q : kAllKinds) {
    // 0: small windows (history pages run out), 1: no windows, 1-token pages (history
    // pages run out), 2: a recent window larger than the cache (fp pages run out).
    for (int mode : {0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << kv_quant_name(q) << " mode " << mode);
      KvSpec spec = small_spec(q);
      if (mode == 1) {
        spec.sink = 0;
        spec.recent = 0;
        spec.block_tokens = 1;
      }
      if (mode == 2) spec.recent = 64;
      Mixed m(kShape, spec, 30);
      const SeqId a = m.add(31), b = m.add(32);
      ASSERT_TRUE(m.append(b, 2));
      int64_t refused = 0;
      for (int step = 0; step < 200 && refused == 0; ++step) {
        const int64_t before_free = m.cache().free_tokens(), before_len = m.cache().length(a);
        const int64_t before_bytes = m.cache().bytes_used(a), before_hist = m.cache().history_tokens(a);
        const int64_t n = 1 + step % 4;
        if (m.append(a, n)) {
          ASSERT_NO_FATAL_FAILURE(m.check_counts());
          continue;
        }
        refused = n;
        EXPECT_EQ(m.cache().free_tokens(), before_free);
        EXPECT_EQ(m.cache().length(a), before_len);
        EXPECT_EQ(m.cache().bytes_used(a), before_bytes);
        EXPECT_EQ(m.cache().history_tokens(a), before_hist);
        ASSERT_NO_FATAL_FAILURE(m.check());
      }
      ASSERT_GT(refused, 0) << "the cache never filled";
      // Shrink the request until one fits (or none does); state stays exact either way.
      for (int64_t n = refused - 1; n >= 1; --n)
        if (m.append(a, n)) break;
      ASSERT_NO_FATAL_FAILURE(m.check());
      m.remove(a);
      m.remove(b);
      EXPECT_EQ(m.cache().free_tokens(), m.cache().capacity_tokens());
    }
  }
}

// Each kind round-trips through the cache with the error its bit width allows: the
// relative RMS error of history rows (uniform rows in [−1, 1], no clipping) against
// the written rows. Bounds: about twice the measured values, far below a broken codec's.
TEST(MixedCache, EachKindRoundTripsWithinItsBudget) {
  const std::map<KvQuant, double> budget = {{KvQuant::int8, 0.01},          {KvQuant::int4, 0.1},
                                            {KvQuant::int2, 0.5},           {KvQuant::int2_lloyd_max, 0.5},
                                            {KvQuant::int2_lloyd_max_exact, 0.5}, {KvQuant::kivi2, 0.5}};
  for (KvQuant q : kAllKinds) {
    KvSpec spec = small_spec(q);
    spec.k_clip = spec.v_clip = 0.0f;
    SCOPED_TRACE(kv_quant_name(q));
    const KvShape shape{1, 2, 64};
    auto [kf, vf] = make_history_formats(spec, shape, nullptr);
    KvCache cache(shape, spec, 128, kf, vf);
    const SeqId s = cache.add_sequence();
    const int64_t n = 60;
    const int row = shape.n_kv_heads * shape.head_dim;
    auto k = test::random_vector(size_t(n * row), 7), v = test::random_vector(size_t(n * row), 8);
    ASSERT_TRUE(cache.reserve(s, n));
    cache.write(0, s, 0, n, k.data(), v.data());
    cache.demote(0, s, n);
    cache.commit(s, n);
    const int64_t h = spec.history_end(n);
    ASSERT_GT(h - spec.sink, 30);
    for (int head = 0; head < shape.n_kv_heads; ++head) {
      std::vector<float> kh(size_t(n * 64)), vh(size_t(n * 64));
      cache.gather_history(0, s, head, n, kh.data(), vh.data());
      for (auto [got, src, side] : {std::tuple{&kh, &k, "K"}, std::tuple{&vh, &v, "V"}}) {
        double err2 = 0.0, ref2 = 0.0;
        for (int64_t t = spec.sink; t < h; ++t)
          for (int c = 0; c < 64; ++c) {
            const double x = test::bf16_round((*src)[size_t(t * row + head * 64 + c)]);
            const double e = (*got)[size_t(t * 64 + c)] - x;
            err2 += e * e;
            ref2 += x * x;
          }
        const double rel = std::sqrt(err2 / ref2);
        EXPECT_LT(rel, budget.at(q)) << side << " head " << head;
        EXPECT_GT(rel, 0.0) << side << ": history is not quantized at all";
      }
    }
  }
}

// The pools are sized for the whole capacity but committed page by page as they are touched
// (LazyBuffer), so a long prompt must keep reusing a few fp pages: those of the sink, the
// recent window and the batch in flight. With the pages freed last handed out first, a
// 4000-token prompt in 512-token batches touches no fp page past that bound.
TEST(MixedCache, LongPromptReusesFewFpPages) {
  KvSpec spec;
  spec.mode = "int2";
  spec.quant = KvQuant::int2;
  spec.block_tokens = 16;
  spec.sink = 64;
  spec.recent = 256;
  spec.group = 64;
  const KvShape shape{1, 1, 64};
  auto [kf, vf] = make_history_formats(spec, shape, nullptr);
  KvCache cache(shape, spec, 4096, kf, vf);
  const SeqId s = cache.add_sequence();
  const int64_t batch = 512, n = 4000;
  const auto rows = test::random_vector(size_t(batch * 64), 3);
  int32_t max_page = -1;
  for (int64_t pos = 0; pos < n; pos += batch) {
    const int64_t b = std::min(batch, n - pos);
    ASSERT_TRUE(cache.reserve(s, b));
    cache.write(0, s, pos, b, rows.data(), rows.data());
    cache.demote(0, s, pos + b);
    cache.commit(s, b);
    const KvSeqView v = cache.view(0, s, pos + b);
    for (int64_t p = 0; p < (pos + b + 15) / 16; ++p) max_page = std::max(max_page, v.blocks[p]);
  }
  // sink 4 pages + recent 16 + a batch 32 + the partial pages at each end.
  EXPECT_LE(max_page, (64 + 256 + 2 * 512) / 16) << "fp pages touched across the prompt";
  EXPECT_GE(max_page, (64 + 256 + 512) / 16 - 2);
}

}  // namespace
}  // namespace oscar
