// The native-weight path (the GGUF's Q4_1 / Q8_0 rows read by integer AVX2 kernels, 8-bit
// activations) against the NumPy reference, which computes with the dequantized f32
// weights: the gap is the activation quantization alone, the same llama.cpp makes.
#include <cmath>

#include "golden.h"
#include "oscar/eval/perplexity.h"
#include "oscar/model/weight_source.h"
#include "oscar/sampling/sampler.h"

namespace oscar {
namespace {

std::unique_ptr<Transformer> native_model() {
  auto src = open_weight_source(test::default_model_path());
  return std::make_unique<Transformer>(load_model_weights(*src, WeightStorage::native));
}

// Mean over positions of KL(p_ref ‖ p) from the reference's top logits is not enough (it
// keeps only the top few): compare full rows against the f32-weight engine instead, which
// the other tests tie to the reference.
double kl_divergence(const float* ref, const float* got, int64_t n) {
  double mr = -INFINITY, mg = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mr = std::max(mr, double(ref[i])), mg = std::max(mg, double(got[i]));
  double zr = 0, zg = 0;
  for (int64_t i = 0; i < n; ++i) zr += std::exp(ref[i] - mr), zg += std::exp(got[i] - mg);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = ref[i] - mr - std::log(zr), lq = got[i] - mg - std::log(zg);
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

std::vector<float> all_logits(Transformer& m, const std::vector<int32_t>& ids) {
  KvSpec spec;
  spec.dtype = KvDtype::f32;
  m.configure_kv(spec);
  KvCache cache = m.make_cache(int64_t(ids.size()) + 8);
  const SeqId seq = cache.add_sequence();
  std::vector<float> logits;
  m.forward(cache, seq, ids, LogitsFor::all, logits);
  return logits;
}

TEST(NativeWeightsSmolLM2, MatricesStayInTheirFileFormat) {
  OSCAR_NEED_GOLDEN(g);
  const auto m = native_model();
  const ModelWeights& w = m->weights();
  EXPECT_EQ(w.token_embd.type(), GgmlType::q8_0);
  EXPECT_EQ(w.layers[0].wq.type(), GgmlType::q4_1);
  EXPECT_EQ(w.layers[29].w_down.type(), GgmlType::q4_1);
  EXPECT_FALSE(w.v_rotation_absorbable());
  // The matrices are views of the file: all weights together take about the file's bytes,
  // against 4 bytes per parameter in f32.
  const auto size = std::filesystem::file_size(test::default_model_path());
  EXPECT_LE(w.n_bytes(), int64_t(size));
  EXPECT_GT(w.n_bytes(), int64_t(size) * 9 / 10);
  EXPECT_GT(g->model->weights().n_bytes(), 5 * int64_t(size));
}

// Every prompt position against the f32-weight engine: same top-1 at ≥ 95 % of positions,
// mean KL ≤ 0.01 and max ≤ 0.1 nats; and the last position's top-1 equals the reference's.
TEST(NativeWeightsSmolLM2, LogitsCloseToF32Weights) {
  OSCAR_NEED_GOLDEN(g);
  const auto m = native_model();
  const int64_t V = m->config().n_vocab;
  for (const auto& c : g->golden["cases"]) {
    const auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto ref = all_logits(*g->model, ids), got = all_logits(*m, ids);
    const int64_t n = int64_t(ids.size());
    double kl_sum = 0, kl_max = 0;
    int same = 0;
    for (int64_t p = 0; p < n; ++p) {
      const float* r = ref.data() + p * V;
      const float* q = got.data() + p * V;
      const double kl = kl_divergence(r, q, V);
      kl_sum += kl, kl_max = std::max(kl_max, kl);
      same += argmax(std::span<const float>(r, size_t(V))) == argmax(std::span<const float>(q, size_t(V)));
    }
    std::printf("%s: %lld positions, KL mean %.2e max %.2e, same top-1 %d\n", c["name"].get<std::string>().c_str(),
                (long long)n, kl_sum / double(n), kl_max, same);
    EXPECT_LE(kl_sum / double(n), 0.01) << c["name"];
    EXPECT_LE(kl_max, 0.1) << c["name"];
    EXPECT_GE(double(same), 0.95 * double(n)) << c["name"];
    const auto want = c["last_logits"].get<std::vector<float>>();
    EXPECT_EQ(argmax(std::span<const float>(got.data() + (n - 1) * V, size_t(V))), argmax(want)) << c["name"];
  }
}

// Perplexity on the reference's chunks within 1 % of the reference's (f32 weights).
TEST(NativeWeightsSmolLM2, PerplexityCloseToReference) {
  OSCAR_NEED_GOLDEN(g);
  const auto& gj = g->golden;
  std::vector<int32_t> tokens;
  for (const auto& chunk : gj["ppl_token_ids"])
    for (int32_t id : chunk.get<std::vector<int32_t>>()) tokens.push_back(id);
  const auto m = native_model();
  KvSpec spec;
  spec.dtype = KvDtype::f32;
  m->configure_kv(spec);
  PerplexityOptions opt;
  opt.n_ctx = gj["ppl_ctx"].get<int>();
  const PerplexityResult r = perplexity(*m, tokens, opt);
  const double want = gj["ppl"].get<double>();
  std::printf("ppl (native weights, f32 KV) = %.4f, reference (f32 weights) %.4f: %+.3f %%\n", r.ppl, want,
              100.0 * (r.ppl / want - 1.0));
  EXPECT_NEAR(r.ppl, want, 0.01 * want);
}

}  // namespace
}  // namespace oscar

namespace oscar {
namespace {

// Continuous batching with native weights: the integer row kernels and the per-position
// prefill attention give each row exactly what it gets alone, so decode rows and prefill
// chunks in a mixed batch are bit-identical to one sequence at a time, and a prompt gives
// the same logits however it is cut into chunks.
TEST(NativeWeightsSmolLM2, MixedBatchRowsEqualOneSequenceAtATime) {
  OSCAR_NEED_GOLDEN(g);
  const auto m = native_model();
  m->configure_kv(KvSpec{});
  const int64_t V = m->config().n_vocab;
  KvCache batched = m->make_cache(1024), alone = m->make_cache(1024);
  std::vector<int32_t> p0(40), p1(70), p2(90);
  for (size_t i = 0; i < p0.size(); ++i) p0[i] = int32_t(100 + 7 * i);
  for (size_t i = 0; i < p1.size(); ++i) p1[i] = int32_t(300 + 11 * i);
  for (size_t i = 0; i < p2.size(); ++i) p2[i] = int32_t(900 + 13 * i);
  const SeqId b0 = batched.add_sequence(), b1 = batched.add_sequence(), b2 = batched.add_sequence();
  const SeqId a0 = alone.add_sequence(), a1 = alone.add_sequence(), a2 = alone.add_sequence();
  std::vector<float> l0, l1, blog;
  m->forward(batched, b0, p0, LogitsFor::last, l0);
  m->forward(alone, a0, p0, LogitsFor::last, l0);
  m->forward(batched, b1, std::span<const int32_t>(p1).first(30), LogitsFor::last, l1);
  m->forward(alone, a1, std::span<const int32_t>(p1).first(30), LogitsFor::last, l1);
  // One step: b0 decodes, b1 prefills its next 40 tokens, b2 its first 50.
  const int32_t next = 4242;
  const SeqTokens batch[3] = {{b0, std::span<const int32_t>(&next, 1)},
                              {b1, std::span<const int32_t>(p1).subspan(30)},
                              {b2, std::span<const int32_t>(p2).first(50)}};
  m->forward_batch(batched, batch, blog);
  std::vector<float> want;
  m->forward(alone, a0, std::span<const int32_t>(&next, 1), LogitsFor::last, want);
  for (int64_t j = 0; j < V; ++j) ASSERT_EQ(blog[size_t(j)], want[size_t(j)]) << "decode row, logit " << j;
  m->forward(alone, a1, std::span<const int32_t>(p1).subspan(30), LogitsFor::last, want);
  for (int64_t j = 0; j < V; ++j) ASSERT_EQ(blog[size_t(V + j)], want[size_t(j)]) << "prefill chunk, logit " << j;
  m->forward(alone, a2, std::span<const int32_t>(p2).first(50), LogitsFor::last, want);
  for (int64_t j = 0; j < V; ++j) ASSERT_EQ(blog[size_t(2 * V + j)], want[size_t(j)]) << "new prefill, logit " << j;
  // The same 90-token prompt whole and cut at awkward places (a one-token chunk would be a
  // decode step, which the scheduler and the prefix cache never leave a prompt with).
  KvCache whole = m->make_cache(256);
  std::vector<float> ref;
  m->forward(whole, whole.add_sequence(), p2, LogitsFor::last, ref);
  for (int64_t cut : {1, 13, 54, 88}) {
    KvCache c = m->make_cache(256);
    const SeqId s = c.add_sequence();
    m->forward(c, s, std::span<const int32_t>(p2).first(size_t(cut)), LogitsFor::last, want);
    m->forward(c, s, std::span<const int32_t>(p2).subspan(size_t(cut)), LogitsFor::last, want);
    for (int64_t j = 0; j < V; ++j) ASSERT_EQ(want[size_t(j)], ref[size_t(j)]) << "cut at " << cut << ", logit " << j;
  }
}

}  // namespace
}  // namespace oscar
