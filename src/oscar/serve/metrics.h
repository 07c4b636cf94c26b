// Server counters and gauges, written by the engine and HTTP threads, rendered in the
// Prometheus text format for GET /metrics.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "oscar/engine/runner.h"

namespace oscar::serve {

// The engine thread's view after its last step (the runner is not safe to read from others).
struct EngineSnapshot {
  int64_t waiting = 0, running = 0;
  int64_t running_max = 0;              // most sequences running at once since start
  KvSegmentUsage kv;
  engine::KvPageBytes page_bytes;
  int64_t prefix_queries = 0, prefix_hits = 0;  // full prompt blocks looked up / found
  engine::SwapStats swap;
};

class Metrics {
 public:
  void count_request(int status);
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n);
  // A sequence preempted holding `held` tokens; later, resumed with `swapped` of them
  // restored from the swap space or `kept` found in the prefix cache (the rest recomputed).
  void count_preemption(int64_t held);
  void count_resumption(int64_t held, int64_t kept, int64_t swapped);
  // One engine step: seconds in the runner's forward and in the host work after it
  // (sampling, stop strings, detokenizing), to show where a step's time goes.
  void add_step(double forward_s, double host_s, int64_t decode_rows);
  void set_engine(const EngineSnapshot& s);
  EngineSnapshot engine() const;
  std::string render() const;  // Prometheus text format 0.0.4

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> requests_by_status_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0, preemptions_ = 0;
  int64_t preempted_tokens_ = 0, resumed_tokens_ = 0, resumed_kept_tokens_ = 0, resumed_swapped_tokens_ = 0;
  int64_t steps_ = 0, step_rows_ = 0;
  double forward_s_ = 0.0, host_s_ = 0.0;
  EngineSnapshot engine_;
};

}  // namespace oscar::serve
