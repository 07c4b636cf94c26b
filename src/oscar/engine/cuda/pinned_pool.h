// Pinned host buffers for swap images, kept for reuse. Pinning costs far more than the copy
// it speeds up: on the H200's host, cudaMallocHost + cudaFreeHost of 0.72 GB took 327 ms
// against 30 ms for the copies out and back in (bench_e2e_decode's swap_pin_ms), so a swap
// that pinned its own memory would cost a fifth of recomputing a 32K INT2 prompt, and more
// than recomputing an 8K BF16 one. Buffers come in whole 64 MiB steps; a freed one serves
// any later image up to its size; the pool never pins more than its limit in all.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>

namespace oscar {

class PinnedPool {
 public:
  PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool();

  // A buffer of at least `bytes` (its size in *size), or nullptr when the limit or the
  // host refuses; free buffers go first when a new one would pass the limit.
  uint8_t* take(size_t bytes, size_t limit, size_t* size);
  void give(uint8_t* p, size_t size);  // back for reuse
  size_t pinned() const { return pinned_; }

 private:
  std::multimap<size_t, uint8_t*> free_;  // by size
  size_t pinned_ = 0;                     // in use and free
};

}  // namespace oscar
