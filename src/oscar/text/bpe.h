// Byte-pair merging over token ids: a word starts as one id per byte-level character
// and the adjacent pair with the lowest merge rank is merged until none is left.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace oscar {

class BpeMerges {
 public:
  // Rank is the insertion order; a pair added twice keeps its first (better) rank.
  void add(int32_t left, int32_t right, int32_t merged);
  size_t size() const { return ranks_.size(); }

  // Merges `symbols` (ids of one pre-token piece) and appends the result to `out`.
  // Ties in rank go to the leftmost pair, as in HF tokenizers and llama.cpp.
  void merge_append(std::span<const int32_t> symbols, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find(int32_t left, int32_t right) const;

  std::unordered_map<uint64_t, Merge> ranks_;
};

}  // namespace oscar
