// Helpers shared by the test executables: random inputs and element-wise closeness
// |x − ref| ≤ atol + rtol·|ref| with the worst element reported.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "oscar/core/error.h"

namespace oscar::test {

// The message of the oscar::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline ::testing::AssertionResult all_close(const float* x, const float* ref, size_t n, double atol, double rtol) {
  size_t worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::abs(double(x[i]) - double(ref[i]));
    const double excess = err - (atol + rtol * std::abs(double(ref[i])));
    if (!(excess <= worst_excess) || std::isnan(err)) {
      worst_excess = std::isnan(err) ? INFINITY : excess;
      worst = i;
    }
  }
  if (n == 0 || worst_excess <= 0.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst << ": got " << x[worst] << ", want " << ref[worst]
                                       << " (atol " << atol << ", rtol " << rtol << ")";
}

inline ::testing::AssertionResult all_close(const std::vector<float>& x, const std::vector<float>& ref, double atol,
                                            double rtol) {
  if (x.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << x.size() << " != " << ref.size();
  return all_close(x.data(), ref.data(), x.size(), atol, rtol);
}

// The default model installed by scripts/setup.sh, or "" when it is absent.
inline std::string default_model_path() {
  if (const char* p = std::getenv("OSCAR_MODEL")) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace oscar::test
