#include "oscar/rotation/rotation_set.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "oscar/core/error.h"
#include "oscar/rotation/hadamard.h"
#include "oscar/core/layer_list.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {

namespace {

// Orthogonality probe in O(d²) instead of O(d³) for RᵀR: every row has unit norm, and two
// fixed pseudo-random vectors keep their norm through x·R. A d×d matrix that passes is
// orthogonal up to float32 storage error with overwhelming probability; a transposed, scaled,
// truncated or garbage matrix fails. Tolerance 1e-3: stored rotations are float32 (≈1e-6).
void check_rotation(const std::vector<float>& R, int d, int layer, const char* side) {
  const size_t dd = static_cast<size_t>(d) * static_cast<size_t>(d);
  if (R.empty()) return;  // identity
  if (R.size() != dd)
    fail("rotation set: layer {} {}_rotation has {} elements, expected {}×{} = {}", layer, side, R.size(), d, d, dd);
  for (int i = 0; i < d; ++i) {
    double n2 = 0.0;
    for (int j = 0; j < d; ++j) {
      const double r = R[static_cast<size_t>(i) * static_cast<size_t>(d) + static_cast<size_t>(j)];
      if (!std::isfinite(r)) fail("rotation set: layer {} {}_rotation[{}][{}] is not finite", layer, side, i, j);
      n2 += r * r;
    }
    if (std::abs(n2 - 1.0) > 1e-3)
      fail("rotation set: layer {} {}_rotation is not orthogonal: row {} has squared norm {}", layer, side, i, n2);
  }
  std::vector<double> x(static_cast<size_t>(d)), y(static_cast<size_t>(d));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int probe = 0; probe < 2; ++probe) {
    double xn2 = 0.0;
    for (double& v : x) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<double>(static_cast<int64_t>(state >> 11) - (int64_t(1) << 52)) / double(int64_t(1) << 52);
      xn2 += v * v;
    }
    std::fill(y.begin(), y.end(), 0.0);
    for (int i = 0; i < d; ++i) {
      const float* row = R.data() + static_cast<size_t>(i) * static_cast<size_t>(d);
      for (int j = 0; j < d; ++j) y[static_cast<size_t>(j)] += x[static_cast<size_t>(i)] * row[j];
    }
    double yn2 = 0.0;
    for (double v : y) yn2 += v * v;
    if (std::abs(yn2 / xn2 - 1.0) > 1e-3)
      fail("rotation set: layer {} {}_rotation is not orthogonal: ‖x·R‖²/‖x‖² = {} for a probe vector", layer, side,
           yn2 / xn2);
  }
}

void check_eigenvalues(const std::vector<float>& e, int d, int layer, const char* side) {
  if (!e.empty() && e.size() != static_cast<size_t>(d))
    fail("rotation set: layer {} {}_eigenvalues has {} elements, expected head_dim {}", layer, side, e.size(), d);
}

void check_clip(float c, int layer, const char* side) {
  if (!(c >= 0.0f && c <= 1.0f)) fail("rotation set: layer {} {}_clip = {} is outside [0, 1]", layer, side, c);
}

}  // namespace

void RotationSet::validate() const {
  const int d = head_dim;
  if (d <= 0 || !is_power_of_two(d) || d % 4 != 0)
    fail("rotation set: head_dim {} is not supported (needs a power of two divisible by 4)", d);
  if (group_size <= 0 || group_size > d || d % group_size != 0)
    fail("rotation set: group_size {} must divide head_dim {} (1 ≤ G ≤ d)", group_size, d);
  if (sink_tokens < 0) fail("rotation set: sink_tokens {} is negative", sink_tokens);
  if (recent_tokens < 0) fail("rotation set: recent_tokens {} is negative", recent_tokens);
  if (source_grouping != "layer")
    fail("rotation set: source_grouping '{}' is not supported (only 'layer': one rotation per layer)", source_grouping);
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerRotation& l = layers[i];
    if (l.layer != static_cast<int>(i)) fail("rotation set: layers[{}] has layer id {}", i, l.layer);
    check_rotation(l.k_rotation, d, l.layer, "k");
    check_rotation(l.v_rotation, d, l.layer, "v");
    check_eigenvalues(l.k_eigenvalues, d, l.layer, "k");
    check_eigenvalues(l.v_eigenvalues, d, l.layer, "v");
    check_clip(l.k_clip, l.layer, "k");
    check_clip(l.v_clip, l.layer, "v");
    if (l.k_mean.size() % size_t(d) != 0)
      fail("rotation set: layer {} k_mean has {} values, not a multiple of head_dim {}", l.layer, l.k_mean.size(), d);
    for (float x : l.k_mean)
      if (!std::isfinite(x)) fail("rotation set: layer {} k_mean has a non-finite value", l.layer);
    if (l.k_scale.size() % size_t(d) != 0)
      fail("rotation set: layer {} k_scale has {} values, not a multiple of head_dim {}", l.layer, l.k_scale.size(), d);
    for (float x : l.k_scale)
      if (!(std::isfinite(x) && x > 0.0f)) fail("rotation set: layer {} k_scale has a value {} that is not finite and > 0", l.layer, x);
  }
  if (!kv_layers.empty()) {
    try {
      parse_layer_list(kv_layers, static_cast<int>(layers.size()), "kv_layers");  // the types: kv's parse_kv_layers
    } catch (const Error& e) {
      fail("rotation set: kv_layers '{}': {}", kv_layers, e.what());
    }
  }
  if (!(kv_budget_bits >= 0.0 && kv_budget_bits <= 32.0))
    fail("rotation set: kv_budget_bits {} is not in [0, 32]", kv_budget_bits);
}

void rotate_row_ref(const float* R, int d, const float* x, float* y) {
  for (int j = 0; j < d; ++j) y[j] = 0.0f;
  for (int i = 0; i < d; ++i) {
    const float xi = x[i];
    const float* row = R + static_cast<int64_t>(i) * d;
    for (int j = 0; j < d; ++j) y[j] += xi * row[j];
  }
}

void rotate_row(const float* R, int d, const float* x, float* y) {
  OSCAR_CHECK(x != y, "rotate_row: x and y must not overlap (d = {})", d);
  if (d % 8 == 0 && use_avx2()) return rotate_row_avx2(R, d, x, y);
  rotate_row_ref(R, d, x, y);
}

void rotate_rows(const float* R, int d, const float* x, float* y, int64_t n_rows) {
  OSCAR_CHECK(n_rows == 0 || x != y, "rotate_rows: x and y must not overlap (d = {})", d);
  const bool avx2 = d % 8 == 0 && use_avx2();
  for (int64_t r = 0; r < n_rows; ++r) {
    if (avx2) {
      rotate_row_avx2(R, d, x + r * d, y + r * d);
    } else {
      rotate_row_ref(R, d, x + r * d, y + r * d);
    }
  }
}

}  // namespace oscar
