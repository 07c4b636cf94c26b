#include "oscar/eval/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "oscar/core/error.h"

namespace oscar {

namespace {
constexpr char kMagic[8] = {'O', 'S', 'C', 'A', 'R', 'K', 'L', 'D'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeaderBytes = 8 + 4 * 4;
constexpr int64_t kRowHeaderBytes = 12;
// Below e^-37 ≈ 1e-16 a probability cannot move a KL divergence printed to 6 digits.
constexpr double kMinLogProb = -37.0;

void log_softmax(std::span<const float> logits, double* out) {
  double m = -INFINITY;
  for (float x : logits) m = std::max(m, double(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - m);
  const double lse = m + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - lse;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

std::vector<double> row_kl_divergences(std::span<const float> ref_logits, std::span<const float> test_logits,
                                       int64_t n_vocab) {
  if (n_vocab <= 0 || ref_logits.size() != test_logits.size() || ref_logits.size() % size_t(n_vocab) != 0)
    fail("KL divergence: {} and {} logits for a vocabulary of {}", ref_logits.size(), test_logits.size(), n_vocab);
  const int64_t rows = int64_t(ref_logits.size()) / n_vocab;
  std::vector<double> la(static_cast<size_t>(n_vocab)), lb(static_cast<size_t>(n_vocab)), out;
  out.reserve(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    log_softmax(ref_logits.subspan(size_t(r * n_vocab), size_t(n_vocab)), la.data());
    log_softmax(test_logits.subspan(size_t(r * n_vocab), size_t(n_vocab)), lb.data());
    double kl = 0.0;
    for (int64_t i = 0; i < n_vocab; ++i) kl += std::exp(la[size_t(i)]) * (la[size_t(i)] - lb[size_t(i)]);
    out.push_back(std::max(kl, 0.0));
  }
  return out;
}

int64_t kld_row_bytes(int64_t n_vocab) { return kRowHeaderBytes + 2 * n_vocab; }

void encode_log_probs(std::span<const float> logits, uint8_t* row) {
  const size_t n = logits.size();
  std::vector<double> lp(n);
  log_softmax(logits, lp.data());
  const int32_t arg = int32_t(std::max_element(lp.begin(), lp.end()) - lp.begin());
  double lo = 0.0;
  for (double x : lp) lo = std::min(lo, x);
  lo = std::max(lo, kMinLogProb);
  const double hi = lp[size_t(arg)];
  const float lp_min = float(lo), step = float(std::max(hi - lo, 1e-30) / 65535.0);
  std::memcpy(row, &lp_min, 4);
  std::memcpy(row + 4, &step, 4);
  std::memcpy(row + 8, &arg, 4);
  uint8_t* q = row + kRowHeaderBytes;
  for (size_t i = 0; i < n; ++i) {
    const double c = std::round((std::max(lp[i], double(lp_min)) - double(lp_min)) / double(step));
    const uint16_t v = uint16_t(std::clamp(c, 0.0, 65535.0));
    std::memcpy(q + 2 * i, &v, 2);
  }
}

void decode_log_probs(const uint8_t* row, int64_t n_vocab, double* log_probs) {
  const double lp_min = load<float>(row), step = load<float>(row + 4);
  const uint8_t* q = row + kRowHeaderBytes;
  for (int64_t i = 0; i < n_vocab; ++i) log_probs[i] = lp_min + step * double(load<uint16_t>(q + 2 * i));
}

int32_t row_argmax(const uint8_t* row) { return load<int32_t>(row + 8); }

KldBaseWriter::KldBaseWriter(const std::string& path, int n_ctx, int n_vocab, int n_chunks,
                             std::span<const int32_t> tokens)
    : path_(path), n_vocab_(n_vocab), rows_expected_(int64_t(n_chunks) * kld_rows_per_chunk(n_ctx)) {
  OSCAR_CHECK(int64_t(tokens.size()) == int64_t(n_chunks) * n_ctx, "KLD base: {} tokens for {} chunks of {}",
              tokens.size(), n_chunks, n_ctx);
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) fail("cannot write KL-divergence base file '{}'", path);
  const uint32_t hdr[4] = {kVersion, uint32_t(n_ctx), uint32_t(n_vocab), uint32_t(n_chunks)};
  bool ok = std::fwrite(kMagic, 1, 8, f_) == 8 && std::fwrite(hdr, 4, 4, f_) == 4 &&
            std::fwrite(tokens.data(), 4, tokens.size(), f_) == tokens.size();
  if (!ok) fail("writing '{}' failed (disk full?)", path);
  row_.resize(size_t(kld_row_bytes(n_vocab)));
}

KldBaseWriter::~KldBaseWriter() {
  if (f_) std::fclose(f_);
}

void KldBaseWriter::add(std::span<const float> logits) {
  OSCAR_CHECK(f_ && int64_t(logits.size()) == n_vocab_, "KLD base: bad row");
  OSCAR_CHECK(rows_ < rows_expected_, "KLD base: more rows than scored positions");
  encode_log_probs(logits, row_.data());
  if (std::fwrite(row_.data(), 1, row_.size(), f_) != row_.size()) fail("writing '{}' failed (disk full?)", path_);
  ++rows_;
}

void KldBaseWriter::finish() {
  OSCAR_CHECK(rows_ == rows_expected_, "KLD base: {} rows written, {} expected", rows_, rows_expected_);
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok) fail("closing '{}' failed (disk full?)", path_);
}

KldBaseReader::KldBaseReader(const std::string& path) : file_(path) {
  const uint8_t* p = file_.data();
  const int64_t size = int64_t(file_.size());
  if (size < kHeaderBytes || std::memcmp(p, kMagic, 8) != 0)
    fail("'{}' is not a KL-divergence base file (make one with --kl-divergence-base FILE and no --kl-divergence)", path);
  const uint32_t version = load<uint32_t>(p + 8), n_ctx = load<uint32_t>(p + 12), n_vocab = load<uint32_t>(p + 16),
                 n_chunks = load<uint32_t>(p + 20);
  if (version != kVersion) fail("'{}': KL-divergence base file version {} (this oscar reads {})", path, version, kVersion);
  if (n_ctx < 4 || n_ctx > (1u << 24) || n_vocab < 2 || n_vocab > (1u << 24) || n_chunks < 1 || n_chunks > (1u << 20))
    fail("'{}': implausible header (n_ctx {}, n_vocab {}, chunks {})", path, n_ctx, n_vocab, n_chunks);
  n_ctx_ = int(n_ctx);
  n_vocab_ = int(n_vocab);
  n_chunks_ = int(n_chunks);
  n_rows_ = int64_t(n_chunks) * kld_rows_per_chunk(n_ctx_);
  const int64_t n_tok = int64_t(n_chunks) * n_ctx;
  const int64_t want = kHeaderBytes + 4 * n_tok + n_rows_ * kld_row_bytes(n_vocab);
  if (size != want) fail("'{}' has {} bytes, its header says {} (truncated or damaged)", path, size, want);
  tokens_.resize(size_t(n_tok));
  std::memcpy(tokens_.data(), p + kHeaderBytes, size_t(4 * n_tok));
  for (int32_t t : tokens_)
    if (t < 0 || t >= n_vocab_) fail("'{}': token id {} outside the vocabulary of {}", path, t, n_vocab_);
  rows_ = p + kHeaderBytes + 4 * n_tok;
}

const uint8_t* KldBaseReader::row(int64_t i) const {
  OSCAR_CHECK(i >= 0 && i < n_rows_, "KLD base row {} of {}", i, n_rows_);
  return rows_ + i * kld_row_bytes(n_vocab_);
}

void KldStats::add(std::span<const float> logits, const uint8_t* base_row, int32_t target) {
  const size_t n = logits.size();
  base_lp_.resize(2 * n);
  double* lb = base_lp_.data();
  double* lq = lb + n;
  decode_log_probs(base_row, int64_t(n), lb);
  log_softmax(logits, lq);
  // The stored probabilities sum to 1 only up to their rounding: renormalize so that
  // identical distributions give exactly 0.
  double zb = 0.0;
  for (size_t i = 0; i < n; ++i) zb += std::exp(lb[i]);
  const double log_zb = std::log(zb);
  double kl = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double l = lb[i] - log_zb;
    kl += std::exp(l) * (l - lq[i]);
  }
  kld_.push_back(std::max(kl, 0.0));
  const size_t arg_q = size_t(std::max_element(lq, lq + n) - lq);
  same_top1_ += int64_t(arg_q) == int64_t(row_argmax(base_row));
  nll_.push_back(-lq[size_t(target)]);
  nll_base_.push_back(-(lb[size_t(target)] - log_zb));
}

KldSummary KldStats::summary() const {
  KldSummary s;
  s.n = int64_t(kld_.size());
  if (s.n == 0) return s;
  const double n = double(s.n);
  auto mean_and_stderr = [n](const std::vector<double>& v, double& mean, double& se) {
    double sum = 0.0, sum2 = 0.0;
    for (double x : v) sum += x, sum2 += x * x;
    mean = sum / n;
    se = n > 1 ? std::sqrt(std::max(0.0, sum2 / n - mean * mean) / (n - 1)) : 0.0;
  };
  mean_and_stderr(kld_, s.mean, s.mean_stderr);
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  auto quantile = [&](double q) { return sorted[size_t(std::min(n - 1, std::floor(q * (n - 1) + 0.5)))]; };
  s.median = quantile(0.5);
  s.p99 = quantile(0.99);
  s.p999 = quantile(0.999);
  s.max = sorted.back();
  s.same_top1 = double(same_top1_) / n;
  s.same_top1_stderr = std::sqrt(s.same_top1 * (1 - s.same_top1) / std::max(1.0, n - 1));
  double m, se, mb, seb;
  mean_and_stderr(nll_, m, se);
  mean_and_stderr(nll_base_, mb, seb);
  s.ppl = std::exp(m);
  s.ppl_base = std::exp(mb);
  std::vector<double> diff(kld_.size());
  for (size_t i = 0; i < diff.size(); ++i) diff[i] = nll_[i] - nll_base_[i];
  double md, sed;
  mean_and_stderr(diff, md, sed);
  s.ppl_ratio = std::exp(md);
  s.ppl_ratio_stderr = s.ppl_ratio * sed;
  return s;
}

}  // namespace oscar
