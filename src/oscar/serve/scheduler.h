// The engine thread: it alone drives the Runner (model and KV pages). HTTP threads
// submit requests and read their output channels. Each step, in the spirit of nano-vllm:
// schedule → run → postprocess.
//   schedule: every decoding sequence takes one token; prefilling sequences take chunks of
//             their prompts under a per-step token budget (so a long prompt does not stall
//             the streams); waiting requests are admitted (FIFO) while the KV pages their
//             prompts need are free, beside what the running requests may still write
//             (output_reserve of each one's remaining max_tokens), and fewer than max_seqs
//             run. When pages still run out for a decode, the newest sequence is preempted:
//             its pages are copied to the runner's swap space (host memory) and freed, and
//             restored bit for bit when readmitted; where the swap space is full, its
//             whole pages are left to the prefix cache and the rest is recomputed.
//   run:      one Runner::run over all of them.
//   postprocess: sample, detokenize, stop strings, finish (pages freed at once).
// A cancelled request (client gone) is dropped at the start of the next step.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "oscar/engine/runner.h"
#include "oscar/sampling/sampler.h"
#include "oscar/serve/metrics.h"
#include "oscar/serve/request_state.h"
#include "oscar/serve/stop_matcher.h"
#include "oscar/text/tokenizer.h"
#include "oscar/text/utf8_stream.h"

namespace oscar::serve {

struct SchedulerConfig {
  int max_seqs = 8;            // sequences in the running batch at most
  int64_t step_tokens = 512;   // tokens per step (decode tokens first, then prefill chunks)
  int64_t ctx = 4096;          // tokens per sequence (prompt + generated)
  // The share of each admitted request's remaining max_tokens whose pages admission holds
  // back. 1: a request is admitted only when its prompt and its whole output fit beside
  // what the running ones may still write, so none is preempted (the rest queue); 0: by the
  // prompt alone, and sequences that outgrow the pages are preempted and recomputed.
  double output_reserve = 1.0;
};

class Scheduler {
 public:
  Scheduler(engine::Runner& runner, const Tokenizer& tokenizer, SchedulerConfig config, Metrics& metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void start();  // the engine thread
  // Queues a request; false when admission is closed (shutting down).
  bool submit(std::shared_ptr<RequestState> r);
  void close_admission();
  bool idle() const;   // nothing queued, waiting or running
  void cancel_all();   // every request ends as "cancelled" at the next step
  void stop();         // joins the engine thread; what is left ends as "cancelled"

  const SchedulerConfig& config() const { return config_; }

 private:
  struct Active {
    std::shared_ptr<RequestState> req;
    uint64_t order = 0;            // arrival: the largest is the newest (preempted first)
    SeqId seq = -1;                // -1: not admitted
    std::vector<int32_t> tokens;   // prompt + generated
    int64_t cached = 0;            // tokens in the KV cache
    int64_t generated = 0;
    bool prompt_counted = false;
    bool registered = false;       // its prompt's pages offered to the prefix cache
    int64_t cached_tokens = 0;     // prompt tokens the prefix cache supplied (first admission)
    int64_t preempted_held = 0;    // tokens it held when last preempted (0: not waiting to resume)
    int64_t swapped = -1;          // its swap-space handle while preempted and swapped out
    Sampler sampler;
    StopMatcher stop;
    Utf8Stream utf8;
    Active(std::shared_ptr<RequestState> r, uint64_t o);
    int64_t pending() const { return int64_t(tokens.size()) - cached; }  // tokens not in the cache
  };
  struct Part {  // one sequence's share of a step
    Active* a;
    int64_t n;
  };

  void loop();
  void intake();
  void reap_cancelled();
  bool schedule();  // fills batch_/parts_; false: nothing can run
  // The pages of a at its end as admission counts it (at least at_least tokens): its tokens
  // so far and output_reserve of those it may still generate, within the context.
  KvPages reserve_to_end(const Active& a, int64_t at_least) const;
  // What admitting a must find free: its pages to its end (its tokens and one more, at
  // least); with nothing running, its tokens alone decide.
  KvPages admission_pages(const Active& a) const;
  int64_t largest_chunk(const Active& a, int64_t n, const KvPages& planned, const KvPages& free) const;
  void run_step();
  // Whether a's next token needs its logits row on the host (sampling, penalty, logprobs).
  static bool needs_logits(const Active& a);
  void postprocess(Active& a, const float* logits, int32_t greedy_id);
  void finish(Active& a, const std::string& reason, const std::string& error = "");
  void preempt_newest();  // running_'s newest back to the queue, its pages swapped out or freed
  // Readmits a swapped-out sequence when its pages fit beside `reserved`; false: not now.
  bool resume_swapped(Active& a, const KvPages& reserved);
  void remove_finished();
  void publish();
  TokenLogprob logprob_of(const float* logits, int32_t id, int top) const;

  engine::Runner& runner_;
  const Tokenizer& tokenizer_;
  const SchedulerConfig config_;
  Metrics& metrics_;

  // Shared with HTTP threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<RequestState>> incoming_;
  bool accepting_ = true, stop_ = false, busy_ = false, cancel_requested_ = false;

  // Engine thread only.
  std::deque<std::unique_ptr<Active>> waiting_;
  std::vector<std::unique_ptr<Active>> running_;
  uint64_t next_order_ = 0;
  int64_t running_max_ = 0;
  engine::Batch batch_;
  std::vector<Part> parts_;
  engine::StepOutput out_;
  std::thread thread_;
};

}  // namespace oscar::serve
