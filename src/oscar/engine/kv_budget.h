// Sizing a server's KV cache from a byte budget: how many pages of each pool, and how
// many sequences of a given length fit. A quantized cache keeps only the sink and the
// recent window of each sequence in fp pages, so its fp pool is sized for as many such
// windows as the budget holds whole sequences (at most max_seqs) plus a few transient
// pages, and the rest of the budget becomes history pages.
#pragma once
#include <cstdint>

#include "oscar/engine/runner.h"
#include "oscar/kv/kv_cache.h"
#include "oscar/model/transformer.h"

namespace oscar::engine {

struct KvPlan {
  KvPages pages;              // what the cache gets
  int64_t fp_page_bytes = 0, history_page_bytes = 0;
  int64_t bytes = 0;          // pages × page bytes
  KvPages per_seq;            // pages one sequence of ctx tokens holds (fp: its most at any length)
};

// The split both devices' plans make for a quantized cache: fp pages for the windows of
// as many whole sequences (per_seq pages each) as the budget holds, at most max_seqs, plus
// `transient` fp pages; every other byte becomes history pages. budget_bytes ≤ 0: room for
// max_seqs such sequences. n_seqs = 0 when not even one fits.
struct KvBudgetSplit {
  int64_t budget_bytes = 0;  // the budget used (the default filled in)
  int64_t n_seqs = 0;
  KvPages pages;
};
KvBudgetSplit split_kv_budget(int64_t budget_bytes, KvPages per_seq, KvPageBytes page_bytes, int64_t transient,
                              int max_seqs);

// budget_bytes ≤ 0: room for max_seqs sequences of ctx tokens. Throws oscar::Error when
// the budget cannot hold one sequence of ctx tokens.
KvPlan plan_kv_cache(const Transformer& model, int64_t budget_bytes, int max_seqs, int64_t ctx, int64_t step_tokens);

// Sequences of `length` tokens that fit in the plan's pages at once.
int64_t sequences_that_fit(const Transformer& model, const KvPlan& plan, int64_t length);

}  // namespace oscar::engine
