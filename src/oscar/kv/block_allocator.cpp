#include "oscar/kv/block_allocator.h"

#include "oscar/core/error.h"

namespace oscar {

BlockAllocator::BlockAllocator(int32_t n_blocks) : refs_(size_t(n_blocks), 0) {
  OSCAR_CHECK(n_blocks >= 0, "negative block count {}", n_blocks);
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) fail("KV cache is full: all {} pages are in use", n_blocks());
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[size_t(b)] = 1;
  return b;
}

void BlockAllocator::retain(int32_t block) {
  OSCAR_CHECK(block >= 0 && block < n_blocks(), "block {} out of range [0, {})", block, n_blocks());
  OSCAR_CHECK(refs_[size_t(block)] > 0, "block {} retained while free", block);
  ++refs_[size_t(block)];
}

void BlockAllocator::release(int32_t block) {
  OSCAR_CHECK(block >= 0 && block < n_blocks(), "block {} out of range [0, {})", block, n_blocks());
  OSCAR_CHECK(refs_[size_t(block)] > 0, "block {} released twice", block);
  if (--refs_[size_t(block)] == 0) free_.push_back(block);
}

}  // namespace oscar
