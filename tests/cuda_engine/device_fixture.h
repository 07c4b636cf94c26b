// A GPU-vs-CPU test case in one file: a model (as the CUDA backend receives it), its KV
// format, a token sequence and the CPU engine's logits for every position. The CPU side
// (no GPU needed) writes it; oscar_cuda_tests on the GPU machine (which has no project
// dependencies) reads it with its own reader and runs the same tokens through
// oscar::cuda::DeviceModel. Little-endian layout, in order:
//   "OSCFIX3\0"; i32 n_layers n_embd n_ff n_heads n_kv_heads head_dim n_vocab qkv_bias
//   qk_norm tied interleaved; f32 rms_eps; f64 position_scale; f64 inv_freq[d/2];
//   i32 sink window group k_bias_split; i32 bits[L]; f32 k_clip[L]; f32 v_clip[L];
//   per layer: i32 has_rot_k, f32 [d·d] if set; i32 has_rot_v, f32 [d·d] if set;
//     i32 has_k_shift, f32 [n_kv_heads·d] if set;
//   u16 token_embd[V·E]; u16 output[V·E] unless tied; f32 output_norm[E];
//   per layer: u16 wq wk wv wo w_gate w_up w_down; f32 attn_norm ffn_norm;
//   f32 bq bk bv if qkv_bias; f32 q_norm k_norm if qk_norm;
//   i32 n_tokens; i32 tokens[n]; f32 logits[n·V].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "oscar/engine/cuda/device_model.h"

namespace oscar {

void write_device_fixture(const std::string& path, const cuda::HostModel& m, const KvFormat& kv,
                          const std::vector<int32_t>& tokens, const std::vector<float>& logits);

}  // namespace oscar
