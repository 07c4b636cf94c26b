#include "oscar/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "oscar/core/error.h"

namespace oscar {

void SamplerParams::validate() const {
  // Written as !(valid) so that NaN is rejected too.
  if (!(temperature >= 0.0f) || std::isinf(temperature)) fail("sampler: temperature = {} must be >= 0 and finite", temperature);
  if (top_k < 0) fail("sampler: top_k = {} must be >= 0 (0 turns it off)", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("sampler: top_p = {} must be in (0, 1]", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("sampler: min_p = {} must be in [0, 1]", min_p);
  if (!(repeat_penalty > 0.0f) || std::isinf(repeat_penalty)) fail("sampler: repeat_penalty = {} must be > 0 and finite", repeat_penalty);
  if (repeat_last_n < -1) fail("sampler: repeat_last_n = {} must be >= -1 (-1: whole history)", repeat_last_n);
}

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) fail("argmax: empty logits");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;  // strict: the first maximum wins
  return int32_t(best);
}

Sampler::Sampler(SamplerParams p) : params_(p), rng_(p.seed) { params_.validate(); }

void Sampler::reset(uint64_t seed) {
  params_.seed = seed;
  rng_.seed(seed);
}

namespace {

// Total order: higher logit first, then lower id, so every sort is deterministic.
struct ByLogitDesc {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};

void check_logits(std::span<const float> logits) {
  if (logits.empty()) fail("sampler: empty logits");
  if (logits.size() > size_t(std::numeric_limits<int32_t>::max())) fail("sampler: {} logits is too many", logits.size());
  bool any_finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    // -inf is a legitimate mask; NaN and +inf mean a broken forward pass.
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity())
      fail("sampler: logit of token {} is {}", i, logits[i]);
    any_finite |= std::isfinite(logits[i]);
  }
  if (!any_finite) fail("sampler: every logit is -inf");
}

}  // namespace

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  check_logits(logits);
  const std::span<const float> l = apply_penalty(logits, history);
  if (params_.temperature <= 0.0f) return argmax(l);
  select_top_k(l);
  apply_top_p_min_p();
  return draw();
}

// llama.cpp style: once per distinct token in the last n of history, pushing its logit
// towards "less likely" whatever its sign. Returns `logits` itself when nothing changes.
std::span<const float> Sampler::apply_penalty(std::span<const float> logits, std::span<const int32_t> history) {
  const SamplerParams& p = params_;
  const size_t window = p.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.repeat_last_n));
  if (p.repeat_penalty == 1.0f || window == 0) return logits;
  std::vector<int32_t> recent(history.end() - std::ptrdiff_t(window), history.end());
  std::sort(recent.begin(), recent.end());
  recent.erase(std::unique(recent.begin(), recent.end()), recent.end());
  penalized_.assign(logits.begin(), logits.end());
  for (const int32_t t : recent) {
    if (t < 0 || size_t(t) >= logits.size()) fail("sampler: history token {} is outside the vocabulary ({})", t, logits.size());
    float& x = penalized_[size_t(t)];
    x = x > 0.0f ? x / p.repeat_penalty : x * p.repeat_penalty;
  }
  return penalized_;
}

// Fills cand_ with the top_k best logits (all of them when top-k is off).
void Sampler::select_top_k(std::span<const float> l) {
  const size_t n = l.size();
  const size_t k = params_.top_k > 0 ? std::min(n, size_t(params_.top_k)) : n;
  cand_.clear();
  if (k <= 1024 && k < n) {
    // One pass with a heap of the k best: nearly every logit is rejected by a single
    // compare against the worst kept one. Ties keep the lower id (scanning upwards, a tie
    // never replaces).
    for (size_t i = 0; i < k; ++i) cand_.push_back({l[i], int32_t(i)});
    std::make_heap(cand_.begin(), cand_.end(), ByLogitDesc{});  // front: the worst kept
    for (size_t i = k; i < n; ++i) {
      if (!(l[i] > cand_.front().logit)) continue;
      std::pop_heap(cand_.begin(), cand_.end(), ByLogitDesc{});
      cand_.back() = {l[i], int32_t(i)};
      std::push_heap(cand_.begin(), cand_.end(), ByLogitDesc{});
    }
    return;
  }
  cand_.resize(n);
  for (size_t i = 0; i < n; ++i) cand_[i] = {l[i], int32_t(i)};
  if (k < n) {
    std::nth_element(cand_.begin(), cand_.begin() + std::ptrdiff_t(k - 1), cand_.end(), ByLogitDesc{});
    cand_.resize(k);
  }
}

namespace {

// Top-p needs the candidates' mass in logit order, but not a full sort: a histogram of the
// mass over logit buckets (best first) finds the bucket where the running mass crosses
// top_p, and only that bucket is sorted. Logits more than `bucket_span` below the best
// carry < e^-32 of the mass each and share the last bucket.
constexpr int n_buckets = 512;
constexpr float bucket_span = 32.0f;

int bucket_of(float logit, float max_logit) {
  const float d = (max_logit - logit) * (n_buckets / bucket_span);  // >= 0; +inf for -inf logits
  return d < float(n_buckets - 1) ? int(d) : n_buckets - 1;
}

}  // namespace

// Both filters keep a prefix of the candidates in logit order, so applying min-p first
// (a cheap threshold) and then top-p's cut gives llama.cpp's top-p -> min-p set, provided
// top-p's probabilities are normalized over all candidates: the histogram is taken first.
void Sampler::apply_top_p_min_p() {
  const float m = std::max_element(cand_.begin(), cand_.end(), [](auto& a, auto& b) { return a.logit < b.logit; })->logit;
  const bool top_p_on = params_.top_p < 1.0f;
  if (top_p_on) {
    hist_.assign(n_buckets, 0.0);
    for (const auto& c : cand_) hist_[size_t(bucket_of(c.logit, m))] += std::exp(c.logit - m);  // float exp: fast, ample precision
  }

  if (params_.min_p > 0.0f) {
    // p_i / p_max >= min_p  <=>  logit_i >= max + log(min_p); the maximum always stays.
    const double threshold = double(m) + std::log(double(params_.min_p));
    std::erase_if(cand_, [&](const Candidate& c) { return double(c.logit) < threshold && c.logit != m; });
  }
  if (top_p_on) keep_top_p(m);
}

// Keeps the shortest best-first prefix holding top_p of the histogram's total mass.
void Sampler::keep_top_p(float m) {
  const std::vector<double>& hist = hist_;
  double z = 0.0;
  for (double h : hist) z += h;
  const double target = double(params_.top_p) * z;
  int cross = 0;  // the bucket in which the running mass reaches target
  double before = 0.0;
  while (cross < n_buckets - 1 && before + hist[size_t(cross)] < target) before += hist[size_t(cross++)];
  // [better buckets: all kept | the crossing bucket | worse buckets: dropped]
  const auto mid = std::partition(cand_.begin(), cand_.end(), [&](const Candidate& c) { return bucket_of(c.logit, m) < cross; });
  const auto end = std::partition(mid, cand_.end(), [&](const Candidate& c) { return bucket_of(c.logit, m) == cross; });
  std::sort(mid, end, ByLogitDesc{});
  double cum = before;
  for (auto it = mid; it != end; ++it) {
    cum += std::exp(it->logit - m);
    if (cum >= target) {
      cand_.erase(it + 1, cand_.end());
      return;
    }
  }
  // Min-p removed the rest of this bucket (or rounding left the sum just short): keep it all.
  cand_.erase(end, cand_.end());
}

int32_t Sampler::draw() {
  const float m = std::max_element(cand_.begin(), cand_.end(), [](auto& a, auto& b) { return a.logit < b.logit; })->logit;
  const float inv_t = 1.0f / params_.temperature;
  double total = 0.0;
  for (auto& c : cand_) {
    // Reuse the logit slot for the unnormalized probability.
    c.logit = std::exp((c.logit - m) * inv_t);
    total += c.logit;
  }
  // 53 random bits -> [0, 1): the same on every standard library, unlike uniform_real_distribution.
  const double u = double(rng_() >> 11) * 0x1.0p-53 * total;
  double cum = 0.0;
  for (const auto& c : cand_) {
    cum += c.logit;
    if (u < cum) return c.id;
  }
  // Rounding left u at the very top: take the last token with any weight.
  for (auto it = cand_.rbegin(); it != cand_.rend(); ++it)
    if (it->logit > 0.0f) return it->id;
  return cand_.front().id;
}

}  // namespace oscar
