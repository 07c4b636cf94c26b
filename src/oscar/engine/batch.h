// One step's work for a Runner: new tokens of several sequences, back to back.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "oscar/kv/kv_cache.h"

namespace oscar::engine {

struct Batch {
  std::vector<SeqId> seq_ids;         // [n_seqs]
  std::vector<int64_t> positions;     // [n_seqs] position of each sequence's first new token (its cached length)
  std::vector<int64_t> query_starts{0};  // [n_seqs + 1] sequence i's tokens: tokens[query_starts[i], query_starts[i + 1])
  std::vector<int32_t> tokens;        // [n_tokens]
  // [n_seqs] 0: the caller needs only the greedy id of the sequence's last token, so the
  // runner may skip bringing its logits row (152K floats on a large vocabulary) to the host.
  std::vector<uint8_t> logits_wanted;
  // [n_seqs] −1: none; k ≥ 0: also the logits of every new token from the sequence's k-th on
  // (StepOutput::token_logits; perplexity scores whole chunks this way).
  std::vector<int64_t> token_logits_from;

  int n_seqs() const { return int(seq_ids.size()); }
  int64_t n_tokens() const { return int64_t(tokens.size()); }
  std::span<const int32_t> tokens_of(int i) const {
    return std::span<const int32_t>(tokens).subspan(size_t(query_starts[size_t(i)]),
                                                    size_t(query_starts[size_t(i) + 1] - query_starts[size_t(i)]));
  }
  bool wants_logits(int i) const { return logits_wanted[size_t(i)] != 0; }
  int64_t token_logits_of(int i) const { return token_logits_from[size_t(i)]; }
  bool wants_token_logits() const {
    for (int64_t f : token_logits_from)
      if (f >= 0) return true;
    return false;
  }
  void add(SeqId seq, int64_t position, std::span<const int32_t> new_tokens, bool want_logits = true,
           int64_t token_logits_from_k = -1) {
    seq_ids.push_back(seq);
    logits_wanted.push_back(want_logits ? 1 : 0);
    token_logits_from.push_back(token_logits_from_k);
    positions.push_back(position);
    tokens.insert(tokens.end(), new_tokens.begin(), new_tokens.end());
    query_starts.push_back(int64_t(tokens.size()));
  }
  void clear() {
    seq_ids.clear();
    positions.clear();
    logits_wanted.clear();
    token_logits_from.clear();
    query_starts.assign(1, 0);
    tokens.clear();
  }
};

}  // namespace oscar::engine
