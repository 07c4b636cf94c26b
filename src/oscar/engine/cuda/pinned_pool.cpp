#include "oscar/engine/cuda/pinned_pool.h"

#include <cuda_runtime.h>

namespace oscar {

namespace {
constexpr size_t kStep = size_t(64) << 20;
}

PinnedPool::~PinnedPool() {
  for (auto& [size, p] : free_) cudaFreeHost(p);
}

uint8_t* PinnedPool::take(size_t bytes, size_t limit, size_t* size) {
  const size_t want = (bytes + kStep - 1) / kStep * kStep;
  // The smallest free buffer that holds it, unless it is far larger (a long image's buffer
  // kept for long images).
  if (auto it = free_.lower_bound(want); it != free_.end() && it->first <= 2 * want) {
    uint8_t* p = it->second;
    *size = it->first;
    free_.erase(it);
    return p;
  }
  while (pinned_ + want > limit && !free_.empty()) {
    auto it = free_.begin();
    cudaFreeHost(it->second);
    pinned_ -= it->first;
    free_.erase(it);
  }
  if (pinned_ + want > limit) return nullptr;
  void* p = nullptr;
  if (cudaMallocHost(&p, want) != cudaSuccess) {
    cudaGetLastError();  // clears the error: the swap is refused, nothing else changes
    return nullptr;
  }
  pinned_ += want;
  *size = want;
  return static_cast<uint8_t*>(p);
}

void PinnedPool::give(uint8_t* p, size_t size) {
  if (p) free_.emplace(size, p);
}

}  // namespace oscar
