#include "oscar/serve/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "oscar/core/error.h"

namespace oscar::serve {

namespace {
void add_pages(KvPages& a, const KvPages& b) {
  a.fp += b.fp;
  a.history += b.history;
}
bool fits(const KvPages& need, const KvPages& planned, const KvPages& free) {
  return need.fp + planned.fp <= free.fp && need.history + planned.history <= free.history;
}
KvPages minus(const KvPages& a, const KvPages& b) {
  return {std::max<int64_t>(0, a.fp - b.fp), std::max<int64_t>(0, a.history - b.history)};
}
}  // namespace

Scheduler::Active::Active(std::shared_ptr<RequestState> r, uint64_t o)
    : req(std::move(r)), order(o), tokens(req->input.prompt), sampler(req->input.sampling), stop(req->input.stop) {}

Scheduler::Scheduler(engine::Runner& runner, const Tokenizer& tokenizer, SchedulerConfig config, Metrics& metrics)
    : runner_(runner), tokenizer_(tokenizer), config_(config), metrics_(metrics) {
  OSCAR_CHECK(config_.max_seqs > 0 && config_.step_tokens > 0 && config_.ctx > 1, "bad scheduler config");
  publish();
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::start() { thread_ = std::thread([this] { loop(); }); }

bool Scheduler::submit(std::shared_ptr<RequestState> r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return false;
    incoming_.push_back(std::move(r));
  }
  cv_.notify_all();
  return true;
}

void Scheduler::close_admission() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return incoming_.empty() && !busy_;
}

void Scheduler::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : incoming_) r->cancel();
  cancel_requested_ = true;
  cv_.notify_all();
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    accepting_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Idle: wait for work; busy: a short look at the flags between steps.
      cv_.wait_for(lock, std::chrono::milliseconds(busy_ ? 0 : 50),
                   [&] { return stop_ || cancel_requested_ || !incoming_.empty(); });
      if (stop_) break;
      if (cancel_requested_) {
        for (auto& a : waiting_) a->req->cancel();
        for (auto& a : running_) a->req->cancel();
        cancel_requested_ = false;
      }
    }
    intake();
    reap_cancelled();
    if (schedule()) run_step();
    remove_finished();
    publish();
  }
  // Shutting down: whatever is left ends now, its pages freed.
  intake();
  for (auto& a : waiting_) finish(*a, "cancelled");
  for (auto& a : running_) finish(*a, "cancelled");
  remove_finished();
  publish();
}

void Scheduler::intake() {
  std::vector<std::shared_ptr<RequestState>> got;
  {
    std::lock_guard<std::mutex> lock(mu_);
    got.swap(incoming_);
  }
  for (auto& r : got) {
    auto a = std::make_unique<Active>(std::move(r), next_order_++);
    if (a->tokens.empty() || int64_t(a->tokens.size()) >= config_.ctx) {
      finish(*a, "error", fmt::format("prompt has {} tokens; the context is {}", a->tokens.size(), config_.ctx));
      continue;
    }
    waiting_.push_back(std::move(a));
  }
}

void Scheduler::reap_cancelled() {
  for (auto& a : waiting_)
    if (a && a->req->cancelled()) finish(*a, "cancelled");
  for (auto& a : running_)
    if (a && a->req->cancelled()) finish(*a, "cancelled");
  remove_finished();
}

void Scheduler::preempt_newest() {
  std::unique_ptr<Active> a = std::move(running_.back());
  running_.pop_back();
  metrics_.count_preemption(a->cached);
  a->swapped = runner_.swap_out(a->seq);
  if (a->swapped < 0) {
    // No room to swap: its whole pages stay in the prefix cache (where it is on), evictable
    // but the most recently used: resumed before others need them, it recomputes only its
    // last page (and its generated tokens there through prefill, which may round apart).
    runner_.register_prefix(a->seq, std::span<const int32_t>(a->tokens).first(size_t(a->cached)));
    runner_.free_sequence(a->seq);
  }
  a->preempted_held = a->cached;
  a->seq = -1;
  a->cached = 0;
  // Back in the queue at its arrival: admission stays first come first served.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) { return w->order > a->order; });
  waiting_.insert(pos, std::move(a));
}

bool Scheduler::schedule() {
  batch_.clear();
  parts_.clear();
  std::sort(running_.begin(), running_.end(), [](const auto& x, const auto& y) { return x->order < y->order; });
  // 1. Every decoding sequence takes one token. When their pages do not fit, the newest
  //    running sequence goes back to the queue (recomputed later), until they do.
  while (true) {
    KvPages need;
    for (auto& a : running_)
      if (a->pending() == 1) add_pages(need, runner_.append_need(a->seq, 1));
    if (fits(need, {}, runner_.free_pages()) || running_.size() <= 1) break;
    preempt_newest();
  }
  const KvPages free = runner_.free_pages();
  KvPages planned;
  int64_t budget = config_.step_tokens;
  for (auto& a : running_)
    if (a->pending() == 1) {
      add_pages(planned, runner_.append_need(a->seq, 1));
      parts_.push_back({a.get(), 1});
      --budget;
    }
  // 2. Prefilling sequences, oldest first, in chunks under the budget. What they still
  //    need to reach the end of their prompts, and what every running sequence may still
  //    write (output_reserve), is held back from admission below.
  KvPages outstanding;
  for (auto& a : running_)
    add_pages(outstanding, minus(reserve_to_end(*a, 0), runner_.pages_for_length(int64_t(a->tokens.size()))));
  for (auto& a : running_) {
    if (a->pending() <= 1) continue;
    const int64_t n = largest_chunk(*a, std::min(a->pending(), std::max<int64_t>(budget, 0)), planned, free);
    if (n > 0) {
      add_pages(planned, runner_.append_need(a->seq, n));
      parts_.push_back({a.get(), n});
      budget -= n;
    }
    add_pages(outstanding, minus(runner_.pages_for_length(int64_t(a->tokens.size())), runner_.pages_for_length(a->cached)));
  }
  // 3. Admission, first come first served, by the exact pages of the whole prompt (less
  //    what the prefix cache already holds of it) and of the output it may reserve. With
  //    nothing running, the prompt alone decides: a request is never kept waiting for
  //    pages that no other request holds.
  while (!waiting_.empty() && budget > 0 && int64_t(running_.size()) < config_.max_seqs) {
    Active& a = *waiting_.front();
    if (a.swapped >= 0) {
      KvPages reserved = planned;
      add_pages(reserved, outstanding);
      if (!resume_swapped(a, reserved)) break;
      // Its next token (a decode row, as before it left) or the rest of its prompt.
      const int64_t n = largest_chunk(a, std::min(a.pending(), budget), planned, runner_.free_pages());
      if (n > 0) {
        add_pages(planned, runner_.append_need(a.seq, n));
        parts_.push_back({&a, n});
        budget -= n;
      }
      add_pages(outstanding, minus(reserve_to_end(a, 0), runner_.pages_for_length(a.cached + std::max<int64_t>(n, 0))));
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      continue;
    }
    a.seq = runner_.add_sequence();
    const int64_t hit = runner_.attach_prefix(a.seq, a.tokens);
    KvPages reserved = planned;
    add_pages(reserved, outstanding);
    const int64_t T = int64_t(a.tokens.size());
    const KvPages whole = admission_pages(a);
    if (!fits(minus(whole, runner_.pages_for_length(hit)), reserved, runner_.free_pages())) {
      runner_.free_sequence(a.seq);
      a.seq = -1;
      break;
    }
    a.cached = hit;
    const int64_t n = largest_chunk(a, std::min(a.pending(), budget), planned, runner_.free_pages());
    if (n <= 0) {
      runner_.free_sequence(a.seq);
      a.seq = -1;
      a.cached = 0;
      break;
    }
    const KvPages need = runner_.append_need(a.seq, n);
    add_pages(planned, need);
    add_pages(outstanding, minus(minus(runner_.pages_for_length(T), runner_.pages_for_length(hit)), need));
    add_pages(outstanding, minus(reserve_to_end(a, 0), runner_.pages_for_length(T)));
    parts_.push_back({&a, n});
    budget -= n;
    if (a.preempted_held > 0) {
      metrics_.count_resumption(a.preempted_held, std::min(hit, a.preempted_held), 0);
      a.preempted_held = 0;
    }
    if (!a.prompt_counted) {
      metrics_.add_prompt_tokens(int64_t(a.req->input.prompt.size()));
      a.prompt_counted = true;
      a.cached_tokens = std::min<int64_t>(hit, int64_t(a.req->input.prompt.size()));
      a.req->set_cached_tokens(a.cached_tokens);
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  running_max_ = std::max<int64_t>(running_max_, int64_t(running_.size()));
  // 4. Nothing fits although sequences are prefilling: the newest gives its pages back.
  if (parts_.empty() && running_.size() > 1) preempt_newest();
  for (const Part& p : parts_)
    batch_.add(p.a->seq, p.a->cached, std::span<const int32_t>(p.a->tokens).subspan(size_t(p.a->cached), size_t(p.n)),
               needs_logits(*p.a));
  return !parts_.empty();
}

bool Scheduler::resume_swapped(Active& a, const KvPages& reserved) {
  // Admission as for a prompt whose prefix cache hit is the whole image: the pages it
  // brings back, and those it may still grow by.
  KvPages need = runner_.swap_need(a.swapped);
  add_pages(need, minus(admission_pages(a), runner_.pages_for_length(a.preempted_held)));
  if (!fits(need, reserved, runner_.free_pages())) return false;
  const SeqId seq = runner_.swap_in(a.swapped);
  if (seq < 0) return false;
  a.seq = seq;
  a.swapped = -1;
  a.cached = runner_.length(seq);
  metrics_.count_resumption(a.preempted_held, 0, a.preempted_held);
  a.preempted_held = 0;
  return true;
}

KvPages Scheduler::admission_pages(const Active& a) const {
  const int64_t T = int64_t(a.tokens.size());
  return running_.empty() ? runner_.pages_for_length(T + 1) : reserve_to_end(a, T + 1);
}

KvPages Scheduler::reserve_to_end(const Active& a, int64_t at_least) const {
  const double left = double(std::max<int64_t>(a.req->input.max_new_tokens - a.generated, 0));
  const int64_t grow = int64_t(std::ceil(config_.output_reserve * left)), end = int64_t(a.tokens.size()) + grow;
  KvPages p = runner_.pages_for_length(std::max(std::min(end, config_.ctx), at_least));
  // A window that slides over fp pages (history behind it) holds, on its way, up to one
  // page more than at the end (where it starts inside a page), and a step takes its new
  // page before the old one goes.
  if (grow > 0 && p.history > 0) p.fp += 2;
  return p;
}

int64_t Scheduler::largest_chunk(const Active& a, int64_t n, const KvPages& planned, const KvPages& free) const {
  // The longest chunk of at most n tokens whose pages fit beside what the step has planned;
  // shorter by whole pages, so that a tight fp pool slows a prefill instead of stopping it.
  // A chunk never leaves exactly one prompt token: that token would run as a decode step,
  // whose attention differs in the last bits from prefill, and the request's tokens would
  // depend on how it was batched.
  const auto shorten = [&](int64_t c) { return a.pending() - c == 1 ? c - 1 : c; };
  n = shorten(n);
  while (n > 0 && !fits(runner_.append_need(a.seq, n), planned, free)) {
    const int64_t step = n % 16 == 0 ? 16 : n % 16;
    n = shorten(n - step);
  }
  return n;
}

void Scheduler::run_step() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    runner_.run(batch_, out_);
  } catch (const std::exception& e) {
    // Not expected (pages were checked); fail this step's requests, keep serving the rest.
    for (const Part& p : parts_) finish(*p.a, "error", fmt::format("engine step failed: {}", e.what()));
    return;
  }
  const auto t1 = std::chrono::steady_clock::now();
  const int32_t n_vocab = runner_.n_vocab();
  for (size_t i = 0; i < parts_.size(); ++i) {
    Active& a = *parts_[i].a;
    a.cached += parts_[i].n;
    if (!a.registered && a.cached >= int64_t(a.req->input.prompt.size())) {
      runner_.register_prefix(a.seq, a.req->input.prompt);  // the prompt's pages, for later requests
      a.registered = true;
    }
    if (a.pending() == 0) postprocess(a, out_.logits.data() + i * size_t(n_vocab), out_.argmax[i]);
  }
  const auto t2 = std::chrono::steady_clock::now();
  metrics_.add_step(std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
                    int64_t(parts_.size()));
}

TokenLogprob Scheduler::logprob_of(const float* logits, int32_t id, int top) const {
  const int32_t n = runner_.n_vocab();
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (int32_t j = 0; j < n; ++j) sum += std::exp(double(logits[j]) - mx);
  const double lse = double(mx) + std::log(sum);
  TokenLogprob lp;
  lp.token = tokenizer_.token_to_piece(id);
  lp.logprob = float(double(logits[id]) - lse);
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    const int k = std::min(top, n);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t x, int32_t y) {
      return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
    });
    for (int j = 0; j < k; ++j)
      lp.top.emplace_back(tokenizer_.token_to_piece(ids[size_t(j)]), float(double(logits[ids[size_t(j)]]) - lse));
  }
  return lp;
}

bool Scheduler::needs_logits(const Active& a) {
  const SamplerParams& p = a.req->input.sampling;
  return p.temperature > 0.0f || p.repeat_penalty != 1.0f || a.req->input.logprobs;
}

void Scheduler::postprocess(Active& a, const float* logits, int32_t greedy_id) {
  const int32_t n_vocab = runner_.n_vocab();
  // Greedy without a penalty or logprobs is the runner's argmax: the same id the sampler
  // would pick, without reading the row on the host.
  const int32_t id = needs_logits(a) ? a.sampler.sample(std::span<const float>(logits, size_t(n_vocab)), a.tokens)
                                     : greedy_id;
  if (tokenizer_.is_eog(id)) {
    finish(a, "stop");
    return;
  }
  a.tokens.push_back(id);
  ++a.generated;
  metrics_.add_generated_tokens(1);
  std::optional<TokenLogprob> lp;
  if (a.req->input.logprobs) lp = logprob_of(logits, id, a.req->input.top_logprobs);
  const StopMatcher::Result r = a.stop.push(tokenizer_.token_to_piece(id));
  std::string text = a.utf8.push(r.emit);
  if (r.stopped) {
    a.req->append(text + a.utf8.flush(), lp ? &*lp : nullptr, a.generated);
    finish(a, "stop");
    return;
  }
  a.req->append(text, lp ? &*lp : nullptr, a.generated);
  if (a.generated >= a.req->input.max_new_tokens || int64_t(a.tokens.size()) >= config_.ctx) finish(a, "length");
}

void Scheduler::finish(Active& a, const std::string& reason, const std::string& error) {
  if (a.seq >= 0) {
    runner_.free_sequence(a.seq);
    a.seq = -1;
  }
  if (a.swapped >= 0) {
    runner_.swap_drop(a.swapped);
    a.swapped = -1;
  }
  std::string reason_out = reason;
  if (reason == "stop" || reason == "length") {
    std::string tail = a.stop.flush();
    tail = a.utf8.push(tail) + a.utf8.flush();
    if (a.stop.stopped()) reason_out = "stop";
    if (!tail.empty()) a.req->append(tail, nullptr, a.generated);
  }
  Usage u;
  u.prompt_tokens = int64_t(a.req->input.prompt.size());
  u.completion_tokens = a.generated;
  u.cached_tokens = a.cached_tokens;
  a.req->finish(reason_out, u, error);
  a.req.reset();  // marks it for remove_finished
}

void Scheduler::remove_finished() {
  auto gone = [](const std::unique_ptr<Active>& a) { return !a->req; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), gone), waiting_.end());
}

void Scheduler::publish() {
  EngineSnapshot s;
  s.waiting = int64_t(waiting_.size());
  s.running = int64_t(running_.size());
  s.running_max = running_max_;
  s.kv = runner_.usage();
  s.page_bytes = runner_.page_bytes();
  const PrefixCacheStats ps = runner_.prefix_stats();
  s.prefix_queries = ps.queries;
  s.prefix_hits = ps.hits;
  s.swap = runner_.swap_stats();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.waiting += int64_t(incoming_.size());
    busy_ = !waiting_.empty() || !running_.empty();
  }
  metrics_.set_engine(s);
}

}  // namespace oscar::serve
