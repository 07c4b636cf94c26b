#include "oscar/engine/kv_budget.h"

#include <algorithm>

#include "oscar/core/error.h"

namespace oscar::engine {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A one-page cache answers the geometry questions (page bytes, pages per length).
KvCache probe_cache(const Transformer& model) { return model.make_cache(KvPages{1, 1}); }

// The most fp pages a sequence holds at any length up to t, and its history pages at t.
KvPages per_sequence(const KvCache& c, int64_t t) {
  KvPages p;
  for (int64_t n = 1; n <= t; ++n) p.fp = std::max(p.fp, c.pages_for_length(n).fp);
  p.history = c.pages_for_length(t).history;
  return p;
}
}  // namespace

KvBudgetSplit split_kv_budget(int64_t budget_bytes, KvPages per_seq, KvPageBytes page_bytes, int64_t transient,
                              int max_seqs) {
  KvBudgetSplit s;
  const int64_t seq_bytes = per_seq.fp * page_bytes.fp + per_seq.history * page_bytes.history;
  s.budget_bytes = budget_bytes > 0 ? budget_bytes : int64_t(max_seqs) * seq_bytes + transient * page_bytes.fp;
  s.n_seqs = std::clamp<int64_t>((s.budget_bytes - transient * page_bytes.fp) / seq_bytes, 0, max_seqs);
  s.pages.fp = s.n_seqs * per_seq.fp + transient;
  if (page_bytes.history > 0)
    s.pages.history = std::max<int64_t>(0, s.budget_bytes - s.pages.fp * page_bytes.fp) / page_bytes.history;
  return s;
}

KvPlan plan_kv_cache(const Transformer& model, int64_t budget_bytes, int max_seqs, int64_t ctx, int64_t step_tokens) {
  OSCAR_CHECK(max_seqs > 0 && ctx > 0 && step_tokens > 0, "bad KV plan inputs");
  const KvCache probe = probe_cache(model);
  KvPlan plan;
  plan.fp_page_bytes = probe.fp_page_bytes();
  plan.history_page_bytes = probe.history_page_bytes();
  plan.per_seq = per_sequence(probe, ctx);
  const int64_t block = probe.spec().block_tokens;
  // A decoding sequence may open its next page before commit releases its oldest window
  // page: one more each. And a prefill chunk is written in fp before it is demoted; the
  // scheduler shrinks a chunk to the free pages, so a few pages for it suffice.
  if (probe.spec().quantized()) plan.per_seq.fp += 1;
  const int64_t transient = ceil_div(std::min<int64_t>(step_tokens, 128), block) + 1;
  const bool quantized = plan.history_page_bytes > 0;
  const KvBudgetSplit split =
      split_kv_budget(budget_bytes, plan.per_seq, {plan.fp_page_bytes, plan.history_page_bytes}, transient, max_seqs);
  budget_bytes = split.budget_bytes;
  if (quantized) {
    plan.pages = split.pages;
  } else {
    plan.pages.fp = budget_bytes / plan.fp_page_bytes;
  }
  plan.bytes = plan.pages.fp * plan.fp_page_bytes + plan.pages.history * plan.history_page_bytes;
  const int64_t need_fp = plan.per_seq.fp + (quantized ? transient : 0);
  if (plan.pages.fp < need_fp || plan.pages.history < plan.per_seq.history)
    fail("a KV budget of {:.1f} MiB cannot hold one sequence of {} tokens ({:.1f} MiB with its prefill pages): raise "
         "--kv-mem or lower -c",
         double(budget_bytes) / (1 << 20), ctx,
         double(need_fp * plan.fp_page_bytes + plan.per_seq.history * plan.history_page_bytes) / (1 << 20));
  return plan;
}

int64_t sequences_that_fit(const Transformer& model, const KvPlan& plan, int64_t length) {
  const KvCache probe = probe_cache(model);
  const KvPages one = per_sequence(probe, std::max<int64_t>(length, 1));
  int64_t n = one.fp > 0 ? plan.pages.fp / one.fp : 0;
  if (one.history > 0) n = std::min(n, plan.pages.history / one.history);
  return n;
}

}  // namespace oscar::engine
