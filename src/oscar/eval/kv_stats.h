// Why a layer's keys or values quantize badly: statistics of the recorded rows of one
// KV head, before and after a rotation. INT2 with one scale per group of a row loses
// most where a row's largest element is far above its RMS (the step is ~max/1.5, so
// everything near the RMS collapses to one or two codes); channel outliers and a large
// constant part (Qwen2's QKV bias, which RoPE then turns with the position) are the
// usual causes.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace oscar {

struct RowStats {
  double rms = 0.0;             // over all rows and channels
  double max_over_rms = 0.0;    // mean over rows of max|x| / rms(row)
  double channel_outlier = 0.0; // max channel RMS / median channel RMS
  double bias_share = 0.0;      // ‖b‖² / mean ‖x_t‖² (0 without a bias)
};

// rows: [n, stride] with this head's d channels at offset; bias: [d] or empty.
// When R is given ([d, d] row-major), the rows are first rotated: x ← x·R.
RowStats row_stats(const float* rows, int64_t n, int64_t stride, int d, std::span<const float> bias = {},
                   const float* R = nullptr);

}  // namespace oscar
