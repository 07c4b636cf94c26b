// One query position of prefill attention for the `group` query heads that share a KV
// head, with keys summed in position order and nothing shared with other rows: a row's
// result depends only on its own query and keys, so a prompt gives the same bits however
// it is cut into chunks, batched with others, or resumed after a prefix-cache hit. (The
// sgemm it replaced blocked its sums by the tile and the context length.)
#pragma once
#include <cstdint>

namespace oscar {

struct PrefillPositionArgs {
  int group = 1, head_dim = 0;
  float scale = 1.0f;
  const float* k = nullptr;   // [n_kv, d] full-precision keys (f32, gathered)
  const float* v = nullptr;   // [n_kv, d]
  const float* kq = nullptr;  // [n_kv, d] dequantized history keys; rows [hb, he) are read
  const float* vq = nullptr;  // [n_kv, d]
  int64_t hb = 0, he = 0;     // this position's history range: keys t in [hb, he) come from kq / vq
};

// q: [group, d]; out: [group, d]; scores: scratch of group × visible floats. Keys 0 .. visible − 1.
void prefill_position_ref(const PrefillPositionArgs& a, const float* q, int64_t visible, float* scores, float* out);
void prefill_position_avx2(const PrefillPositionArgs& a, const float* q, int64_t visible, float* scores, float* out);

}  // namespace oscar
