// Hands out fixed-size KV pages by index. Small verbs, exact accounting: a page is
// either free or owned by exactly one sequence.
#pragma once
#include <cstdint>
#include <vector>

namespace oscar {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks);
  int32_t n_blocks() const { return int32_t(owned_.size()); }
  int32_t n_free() const { return int32_t(free_.size()); }
  bool can_allocate(int32_t n) const { return n <= n_free(); }
  int32_t allocate();              // throws oscar::Error when none is free
  void release(int32_t block);     // throws on double free or a bad index

 private:
  std::vector<int32_t> free_;      // stack of free block ids (lowest id on top)
  std::vector<uint8_t> owned_;     // 1 while allocated
};

}  // namespace oscar
