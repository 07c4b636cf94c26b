// Symbols form a linked list over a flat array; candidate pairs sit in a min-heap keyed
// by (rank, position). A popped candidate is stale when either side has been merged
// since it was pushed; ids only ever grow into longer tokens, so comparing the ids at
// both positions detects that.
#include "oscar/text/bpe.h"

#include <algorithm>
#include <queue>

namespace oscar {

void BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
  ranks_.try_emplace(key(left, right), Merge{static_cast<int32_t>(ranks_.size()), merged});
}

const BpeMerges::Merge* BpeMerges::find(int32_t left, int32_t right) const {
  auto it = ranks_.find(key(left, right));
  return it == ranks_.end() ? nullptr : &it->second;
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;  // index into the symbol array, -1 at the start
  int32_t next;  // -1 at the end
};

struct Candidate {
  int32_t rank;
  int32_t left;  // position of the left symbol (positions keep their order)
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

}  // namespace

void BpeMerges::merge_append(std::span<const int32_t> ids, std::vector<int32_t>& out) const {
  if (ids.size() <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Symbol> sym(ids.size());
  for (int32_t i = 0; i < n; ++i) sym[i] = Symbol{ids[i], i - 1, i + 1 < n ? i + 1 : -1};

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t l) {
    if (l < 0 || sym[l].next < 0) return;
    const int32_t r = sym[l].next;
    if (const Merge* m = find(sym[l].id, sym[r].id)) heap.push({m->rank, l, r, sym[l].id, sym[r].id, m->merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    if (l.id != c.left_id || l.next != c.right || sym[c.right].id != c.right_id) continue;  // stale
    const Symbol& r = sym[c.right];
    l.id = c.merged;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    sym[c.right].id = -1;  // unlinked
    push_pair(l.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace oscar
