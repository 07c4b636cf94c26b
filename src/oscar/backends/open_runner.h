// The one place that knows which backends this build has: a Runner for a device, sized
// for a plan. Commands and the server ask here and never branch on the device or on the
// CUDA build switch themselves.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "oscar/engine/runner.h"
#include "oscar/model/transformer.h"

namespace oscar::engine {

struct RunnerPlan {
  std::string device = "cpu";  // cpu | cuda
  int max_seqs = 1;
  int64_t ctx = 0;             // tokens per sequence
  // A server's pools (budgeted): split from kv_budget_bytes (≤ 0: room for max_seqs
  // sequences of ctx tokens), with a few transient pages for prefill chunks, which its
  // scheduler sizes to the free pages (step_tokens). Otherwise pools that hold every
  // token of max_seqs sequences of ctx, for generate()'s unscheduled prefill.
  bool budgeted = false;
  int64_t kv_budget_bytes = 0;
  int64_t step_tokens = 0;  // ≤ 0: the backend's (512 on the CPU; on the GPU its rows per forward)
  // Most token rows in one forward on the GPU (its activation buffers; a longer prompt or
  // step goes in pieces); ≤ 0: the backend's default.
  int64_t forward_rows = 0;
};

struct OpenedRunner {
  std::unique_ptr<Runner> runner;
  std::string plan;          // the KV plan in words (pages, bytes, sequences that fit), for the start-up report
  int64_t seqs_at_ctx = 0;   // sequences of ctx tokens that fit at once
  int64_t step_tokens = 0;   // tokens per scheduler step: the plan's, or the backend's default
};

// Throws oscar::Error naming the problem: an unknown device, a build without the CUDA
// backend or a machine without a GPU, a budget that cannot hold one sequence.
OpenedRunner open_runner(Transformer& model, const RunnerPlan& plan);

// Whether `device` can run here (cpu always; cuda: built with CUDA and a GPU present),
// before anything slow; throws oscar::Error with the reason.
void check_device(const std::string& device);

}  // namespace oscar::engine
