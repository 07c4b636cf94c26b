// Hands out fixed-size KV pages by index. Small verbs, exact accounting: a page is free
// or held by one or more owners (sequences sharing a cached prefix, the prefix cache
// itself); it returns to the free list when the last owner releases it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace oscar {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks);
  int32_t n_blocks() const { return int32_t(refs_.size()); }
  int32_t n_free() const { return int32_t(free_.size()); }
  bool can_allocate(int32_t n) const { return n <= n_free(); }
  int32_t allocate();              // one owner; throws oscar::Error when none is free
  void retain(int32_t block);      // one more owner of a held block
  void release(int32_t block);     // one owner fewer; throws on a free block or a bad index
  int32_t owners(int32_t block) const { return refs_[size_t(block)]; }

 private:
  // Stack of free block ids (lowest id on top at first). A released block goes on top, so it
  // is handed out next: a long prompt keeps reusing the pages the window just left, and the
  // pools (LazyBuffer) commit memory only for pages ever touched.
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;      // owners per block; 0: free
};

}  // namespace oscar
