// The KL-divergence base file and statistics: stored log-probabilities round-trip within
// their quantization step, KL matches a direct double computation, and damaged files
// are refused with an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "oscar/core/error.h"
#include "oscar/eval/kl_divergence.h"
#include "../test_util.h"

namespace oscar {
namespace {

std::vector<double> log_softmax_ref(const std::vector<float>& x) {
  double m = -INFINITY, s = 0.0;
  for (float v : x) m = std::max(m, double(v));
  for (float v : x) s += std::exp(double(v) - m);
  std::vector<double> out;
  for (float v : x) out.push_back(double(v) - m - std::log(s));
  return out;
}

TEST(KlDivergence, RowRoundTrip) {
  const auto logits = test::random_vector(5000, 1, -12, 12);
  std::vector<uint8_t> row(size_t(kld_row_bytes(5000)));
  encode_log_probs(logits, row.data());
  std::vector<double> lp(5000);
  decode_log_probs(row.data(), 5000, lp.data());
  const auto ref = log_softmax_ref(logits);
  const double range = -*std::min_element(ref.begin(), ref.end());  // > 0; the top is ~0
  for (size_t i = 0; i < lp.size(); ++i) ASSERT_NEAR(lp[i], ref[i], range / 65535.0) << i;
  EXPECT_EQ(row_argmax(row.data()), int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
}

TEST(KlDivergence, MatchesDirectComputation) {
  const auto a = test::random_vector(3000, 2, -6, 6);
  auto b = a;
  const auto noise = test::random_vector(3000, 3, -1, 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] += noise[i];
  std::vector<uint8_t> row(size_t(kld_row_bytes(3000)));
  encode_log_probs(a, row.data());
  const auto la = log_softmax_ref(a), lb = log_softmax_ref(b);
  double kl = 0.0;
  for (size_t i = 0; i < la.size(); ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
  KldStats s;
  s.add(b, row.data(), 7);
  s.add(a, row.data(), 7);  // identical distributions: 0
  const KldSummary r = s.summary();
  EXPECT_EQ(r.n, 2);
  EXPECT_NEAR(r.max, kl, 1e-4 * kl + 1e-6);
  EXPECT_NEAR(r.mean, kl / 2, 1e-4 * kl + 1e-6);
  EXPECT_GT(kl, 0.05);
  EXPECT_NEAR(r.ppl_base, std::exp(-la[7]), 1e-3 * std::exp(-la[7]));
  EXPECT_NEAR(r.ppl, std::exp(-(la[7] + lb[7]) / 2), 1e-9 * r.ppl);
}

TEST(KlDivergence, PerRowOfRawLogits) {
  // Two rows: one identical (0), one perturbed (the direct double KL).
  const auto a = test::random_vector(2000, 4, -6, 6);
  auto b = a;
  const auto noise = test::random_vector(2000, 5, -1, 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] += noise[i];
  const auto la = log_softmax_ref(a), lb = log_softmax_ref(b);
  double kl = 0.0;
  for (size_t i = 0; i < la.size(); ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
  std::vector<float> ref = a, test = a;
  ref.insert(ref.end(), a.begin(), a.end());
  test.insert(test.end(), b.begin(), b.end());
  const std::vector<double> rows = row_kl_divergences(ref, test, 2000);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NEAR(rows[0], 0.0, 1e-12);
  EXPECT_NEAR(rows[1], kl, 1e-12 + 1e-9 * kl);
  EXPECT_NEAR((rows[0] + rows[1]) / 2, kl / 2, 1e-12 + 1e-9 * kl);
  EXPECT_GT(kl, 0.05);
  std::vector<float> shifted = a;  // softmax ignores a constant shift
  for (float& x : shifted) x += 3.0f;
  EXPECT_NEAR(row_kl_divergences(a, shifted, 2000).at(0), 0.0, 1e-9);
  EXPECT_THROW(row_kl_divergences(a, std::vector<float>(1999), 2000), Error);
  EXPECT_THROW(row_kl_divergences(a, a, 1999), Error);
}

TEST(KlDivergence, SameTopOne) {
  std::vector<float> base(100, 0.0f), other(100, 0.0f);
  base[3] = 5;
  other[4] = 5;
  std::vector<uint8_t> row(size_t(kld_row_bytes(100)));
  encode_log_probs(base, row.data());
  KldStats s;
  s.add(base, row.data(), 3);
  s.add(other, row.data(), 3);
  s.add(base, row.data(), 3);
  s.add(base, row.data(), 3);
  EXPECT_DOUBLE_EQ(s.summary().same_top1, 0.75);
  EXPECT_LT(s.summary().median, 1e-9);
  EXPECT_GT(s.summary().max, 1.0);
}

class KlBaseFile : public ::testing::Test {
 protected:
  std::string path = (std::filesystem::temp_directory_path() / "oscar_kld_test.bin").string();
  void TearDown() override { std::filesystem::remove(path); }
  void write_base(int n_ctx, int n_vocab, int chunks) {
    std::vector<int32_t> tokens(size_t(n_ctx * chunks));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i % size_t(n_vocab));
    KldBaseWriter w(path, n_ctx, n_vocab, chunks, tokens);
    for (int64_t r = 0; r < chunks * kld_rows_per_chunk(n_ctx); ++r)
      w.add(test::random_vector(size_t(n_vocab), uint64_t(r), -3, 3));
    w.finish();
  }
};

TEST_F(KlBaseFile, RoundTrip) {
  write_base(16, 50, 3);
  KldBaseReader r(path);
  EXPECT_EQ(r.n_ctx(), 16);
  EXPECT_EQ(r.n_vocab(), 50);
  EXPECT_EQ(r.n_chunks(), 3);
  EXPECT_EQ(r.n_rows(), 3 * 7);
  EXPECT_EQ(r.tokens()[17], 17);
  std::vector<uint8_t> want(size_t(kld_row_bytes(50)));
  encode_log_probs(test::random_vector(50, 20, -3, 3), want.data());
  EXPECT_EQ(0, std::memcmp(r.row(20), want.data(), want.size()));
  EXPECT_THROW(r.row(21), Error);
}

TEST_F(KlBaseFile, MissingRowsAreAnError) {
  std::vector<int32_t> tokens(32, 1);
  KldBaseWriter w(path, 16, 10, 2, tokens);
  w.add(std::vector<float>(10, 0.0f));
  EXPECT_THROW(w.finish(), Error);
}

TEST_F(KlBaseFile, DamagedFilesAreRefused) {
  write_base(16, 50, 2);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 1);
  EXPECT_THROW(KldBaseReader{path}, Error);
  write_base(16, 50, 2);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(24);  // first token → out of the vocabulary
    const int32_t bad = 999;
    f.write(reinterpret_cast<const char*>(&bad), 4);
  }
  EXPECT_THROW(KldBaseReader{path}, Error);
  {
    std::ofstream f(path, std::ios::binary);
    f << "not a base file at all, but long enough";
  }
  EXPECT_THROW(KldBaseReader{path}, Error);
  EXPECT_THROW(KldBaseReader{path + ".missing"}, Error);
}

}  // namespace
}  // namespace oscar
