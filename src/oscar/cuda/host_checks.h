// Host-side error reporting shared by the CUDA entry points: a std::runtime_error that
// names the entry point, and the check after a kernel launch. Internal to the CUDA code (the kernels
// here and the device model in src/oscar/engine/cuda).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

namespace oscar::cuda::detail {

[[noreturn]] inline void fail(const std::string& what, const std::string& detail) {
  throw std::runtime_error(what + ": " + detail);
}

// The one check of a CUDA runtime call: throws naming the call and CUDA's error.
inline void check_cuda(cudaError_t e, const std::string& call) {
  if (e != cudaSuccess) fail("CUDA", call + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Throws when the last launch failed (bad configuration, no device, …).
inline void check_launch(const std::string& what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(what, std::string("launch: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// The cache-shape checks decode and prefill attention share, in their order: "" when the
// shape is supported, else what is not (the caller names its entry point). hist_* are
// the history pools and page table, checked only when bits != 0.
inline std::string kv_shape_problem(int head_dim, int n_heads, int n_kv_heads, int bits, int group, int max_group,
                                    const void* hist_end, const void* hist_k, const void* hist_v,
                                    const void* hist_blocks) {
  if (head_dim != 64 && head_dim != 128) return "head_dim " + std::to_string(head_dim) + " not supported (64 or 128)";
  if (!(n_kv_heads > 0 && n_heads > 0 && n_heads % n_kv_heads == 0))
    return "n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " + std::to_string(n_kv_heads);
  const int gqa = n_heads / n_kv_heads;
  if (gqa < 1 || gqa > max_group)
    return "GQA group " + std::to_string(gqa) + " not supported (1.." + std::to_string(max_group) + ")";
  if (bits != 0 && bits != 2 && bits != 4 && bits != 8)
    return "bits " + std::to_string(bits) + " not supported (0 = BF16 only, 2, 4, 8)";
  if (bits == 0) return "";
  if (!((group == 32 || group == 64 || group == 128) && group <= head_dim))
    return "group size " + std::to_string(group) + " not supported (32, 64 or 128, at most head_dim)";
  if (!(hist_end && hist_k && hist_v && hist_blocks)) return "history pointers are null (bits != 0)";
  if (!(aligned16(hist_k) && aligned16(hist_v))) return "history pools must be 16-byte aligned";
  return "";
}

}  // namespace oscar::cuda::detail
