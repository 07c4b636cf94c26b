#include "oscar/rotation/key_mean.h"

#include "oscar/core/error.h"

namespace oscar {

std::vector<float> key_mean_after_split(std::span<const double> key_sum, int64_t per_prompt, int prompts,
                                        const RopeFreqs& rope, std::span<const float> bias, int n_kv_heads,
                                        int head_dim) {
  const int64_t kvd = int64_t(n_kv_heads) * head_dim, n = per_prompt * prompts;
  if (n <= 0) fail("key mean: no calibration tokens");
  if (int64_t(key_sum.size()) != kvd) fail("key mean: {} sums for n_kv_heads·head_dim = {}", key_sum.size(), kvd);
  if (!bias.empty() && int64_t(bias.size()) != kvd) fail("key mean: bias has {} values, expected {}", bias.size(), kvd);
  std::vector<double> mean(key_sum.begin(), key_sum.end());
  for (double& m : mean) m /= double(n);
  if (!bias.empty()) {
    std::vector<float> rows;  // RoPE(b_k, p) for p in one prompt; every prompt repeats them
    append_rope_rows(rope, bias.data(), n_kv_heads, head_dim, 0, per_prompt, rows);
    for (int64_t i = 0; i < per_prompt * kvd; ++i) mean[size_t(i % kvd)] -= double(rows[size_t(i)]) / double(per_prompt);
  }
  return std::vector<float>(mean.begin(), mean.end());
}

}  // namespace oscar
