#include "oscar/serve/metrics.h"

#include <fmt/format.h>

#include <tuple>

#include "oscar/core/heap_stats.h"

namespace oscar::serve {

void Metrics::count_request(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_by_status_[status];
}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n;
}

void Metrics::add_generated_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  generated_tokens_ += n;
}

void Metrics::count_preemption(int64_t held) {
  std::lock_guard<std::mutex> lock(mu_);
  ++preemptions_;
  preempted_tokens_ += held;
}

void Metrics::count_resumption(int64_t held, int64_t kept, int64_t swapped) {
  std::lock_guard<std::mutex> lock(mu_);
  resumed_tokens_ += held;
  resumed_kept_tokens_ += kept;
  resumed_swapped_tokens_ += swapped;
}

void Metrics::add_step(double forward_s, double host_s, int64_t decode_rows) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  step_rows_ += decode_rows;
  forward_s_ += forward_s;
  host_s_ += host_s;
}

void Metrics::set_engine(const EngineSnapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_ = s;
}

EngineSnapshot Metrics::engine() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto head = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  head("oscar_requests_total", "counter", "HTTP requests answered, by status code");
  for (const auto& [status, n] : requests_by_status_) out += fmt::format("oscar_requests_total{{status=\"{}\"}} {}\n", status, n);
  head("oscar_prompt_tokens_total", "counter", "prompt tokens of admitted requests");
  out += fmt::format("oscar_prompt_tokens_total {}\n", prompt_tokens_);
  head("oscar_generation_tokens_total", "counter", "tokens generated");
  out += fmt::format("oscar_generation_tokens_total {}\n", generated_tokens_);
  head("oscar_preemptions_total", "counter",
       "sequences preempted for KV pages (their pages copied to the swap space, or left to the prefix cache)");
  out += fmt::format("oscar_preemptions_total {}\n", preemptions_);
  head("oscar_preempted_tokens_total", "counter", "tokens the preempted sequences held in the KV cache");
  out += fmt::format("oscar_preempted_tokens_total {}\n", preempted_tokens_);
  head("oscar_resumed_tokens_total", "counter",
       "of the preempted tokens, those of sequences since resumed: restored from the swap space, found in the "
       "prefix cache, or recomputed");
  out += fmt::format("oscar_resumed_tokens_total{{source=\"swapped\"}} {}\n", resumed_swapped_tokens_);
  out += fmt::format("oscar_resumed_tokens_total{{source=\"kept\"}} {}\n", resumed_kept_tokens_);
  out += fmt::format("oscar_resumed_tokens_total{{source=\"recomputed\"}} {}\n",
                     resumed_tokens_ - resumed_kept_tokens_ - resumed_swapped_tokens_);
  head("oscar_engine_steps_total", "counter", "engine steps run");
  out += fmt::format("oscar_engine_steps_total {}\n", steps_);
  head("oscar_engine_step_rows_total", "counter", "sequence rows over all engine steps (decode and prefill parts)");
  out += fmt::format("oscar_engine_step_rows_total {}\n", step_rows_);
  head("oscar_engine_seconds_total", "counter", "engine step time: the runner's forward, then the host's sampling and streaming");
  out += fmt::format("oscar_engine_seconds_total{{part=\"forward\"}} {:.6f}\n", forward_s_);
  out += fmt::format("oscar_engine_seconds_total{{part=\"host\"}} {:.6f}\n", host_s_);
  head("oscar_heap_live_bytes", "gauge", "heap bytes in live allocations, as the allocator counts them (-1: unknown)");
  out += fmt::format("oscar_heap_live_bytes {}\n", live_heap_bytes());
  head("oscar_requests_waiting", "gauge", "requests queued for admission");
  out += fmt::format("oscar_requests_waiting {}\n", engine_.waiting);
  head("oscar_requests_running", "gauge", "sequences in the running batch");
  out += fmt::format("oscar_requests_running {}\n", engine_.running);
  head("oscar_requests_running_max", "gauge", "most sequences running at once since start");
  out += fmt::format("oscar_requests_running_max {}\n", engine_.running_max);
  const KvSegmentUsage& kv = engine_.kv;
  const engine::KvPageBytes& pb = engine_.page_bytes;
  head("oscar_kv_pages_used", "gauge", "KV pages in use, by segment (sink and recent: fp pages; history: packed pages)");
  head("oscar_kv_bytes_used", "gauge", "KV bytes in use, by segment");
  const std::pair<const char*, std::pair<int64_t, int64_t>> segs[] = {
      {"sink", {kv.sink_pages, pb.fp}}, {"history", {kv.history_pages, pb.history}}, {"recent", {kv.recent_pages, pb.fp}}};
  for (const auto& [name, pages_bytes] : segs) {
    out += fmt::format("oscar_kv_pages_used{{segment=\"{}\"}} {}\n", name, pages_bytes.first);
    out += fmt::format("oscar_kv_bytes_used{{segment=\"{}\"}} {}\n", name, pages_bytes.first * pages_bytes.second);
  }
  // Pages and bytes of each pool for one metric pair.
  auto per_pool = [&](const char* what, int64_t fp_pages, int64_t history_pages) {
    for (const auto& [pool, pages, bytes] : {std::tuple{"fp", fp_pages, pb.fp}, std::tuple{"history", history_pages, pb.history}}) {
      out += fmt::format("oscar_kv_pages_{}{{pool=\"{}\"}} {}\n", what, pool, pages);
      out += fmt::format("oscar_kv_bytes_{}{{pool=\"{}\"}} {}\n", what, pool, pages * bytes);
    }
  };
  head("oscar_kv_swap_bytes", "gauge", "host memory the swap space holds for preempted sequences, and its capacity");
  out += fmt::format("oscar_kv_swap_bytes{{what=\"used\"}} {}\n", engine_.swap.used_bytes);
  out += fmt::format("oscar_kv_swap_bytes{{what=\"capacity\"}} {}\n", engine_.swap.capacity_bytes);
  head("oscar_kv_pages_cached", "gauge", "KV pages only the prefix cache holds (evicted LRU when needed), by pool");
  head("oscar_kv_bytes_cached", "gauge", "KV bytes only the prefix cache holds, by pool");
  per_pool("cached", kv.cached_fp_pages, kv.cached_history_pages);
  head("oscar_kv_pages_free", "gauge", "free KV pages, by pool");
  head("oscar_kv_bytes_free", "gauge", "free KV bytes, by pool");
  per_pool("free", kv.fp_free_pages, kv.history_free_pages);
  head("oscar_prefix_cache_queries_total", "counter", "full prompt blocks looked up in the prefix cache");
  out += fmt::format("oscar_prefix_cache_queries_total {}\n", engine_.prefix_queries);
  head("oscar_prefix_cache_hits_total", "counter", "full prompt blocks found in the prefix cache");
  out += fmt::format("oscar_prefix_cache_hits_total {}\n", engine_.prefix_hits);
  head("oscar_prefix_cache_hit_rate", "gauge", "hits / queries (0 before any query)");
  out += fmt::format("oscar_prefix_cache_hit_rate {}\n",
                     engine_.prefix_queries ? double(engine_.prefix_hits) / double(engine_.prefix_queries) : 0.0);
  return out;
}

}  // namespace oscar::serve
