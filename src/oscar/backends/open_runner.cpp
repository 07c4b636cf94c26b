#include "oscar/backends/open_runner.h"

#include <fmt/format.h>

#include <algorithm>

#include "oscar/core/error.h"
#include "oscar/core/format_bytes.h"
#include "oscar/engine/cpu_runner.h"
#include "oscar/engine/kv_budget.h"
#if OSCAR_WITH_CUDA
#include <cuda_runtime.h>

#include "oscar/engine/cuda/device_runner.h"
#endif

namespace oscar::engine {

namespace {

// The CPU's tokens per step, as llama.cpp's ubatch.
constexpr int64_t kCpuStepTokens = 512;

OpenedRunner open_cpu(Transformer& model, const RunnerPlan& p) {
  OpenedRunner o;
  o.step_tokens = p.step_tokens > 0 ? p.step_tokens : kCpuStepTokens;
  if (!p.budgeted) {
    o.runner = std::make_unique<CpuRunner>(model, model.make_cache(int64_t(p.max_seqs) * p.ctx));
    o.seqs_at_ctx = p.max_seqs;
    o.plan = fmt::format("KV cache for {} sequences of {} tokens", p.max_seqs, p.ctx);
    return o;
  }
  const KvPlan plan = plan_kv_cache(model, p.kv_budget_bytes, p.max_seqs, p.ctx, o.step_tokens);
  const int64_t block = model.kv_spec().block_tokens, quarter = std::max<int64_t>(p.ctx / 4, 1);
  o.seqs_at_ctx = sequences_that_fit(model, plan, p.ctx);
  o.plan = fmt::format(
      "KV bytes per token: sink/recent (fp) {:.1f}, history {:.1f}; pages: {} fp ({} B each), {} history ({} B each)\n"
      "KV cache: {} for up to {} sequences of {} tokens; sequences that fit at once: {} at {} tokens, {} at {} tokens",
      double(plan.fp_page_bytes) / double(block), double(plan.history_page_bytes) / double(block), plan.pages.fp,
      plan.fp_page_bytes, plan.pages.history, plan.history_page_bytes, format_bytes(plan.bytes), p.max_seqs, p.ctx,
      o.seqs_at_ctx, p.ctx, sequences_that_fit(model, plan, quarter), quarter);
  o.runner = std::make_unique<CpuRunner>(model, model.make_cache(plan.pages));
  return o;
}

#if OSCAR_WITH_CUDA
OpenedRunner open_cuda(Transformer& model, const RunnerPlan& p) {
  // A step is one forward where its rows fit: the rows cover a budgeted plan's steps.
  const int64_t rows = p.budgeted ? std::max(p.step_tokens, p.forward_rows) : p.forward_rows;
  const DeviceKvPlan plan = plan_device_kv(model, p.budgeted ? p.kv_budget_bytes : 0, p.max_seqs, p.ctx, rows);
  OpenedRunner o;
  o.step_tokens = p.step_tokens > 0 ? p.step_tokens : plan.forward_rows;
  o.seqs_at_ctx = plan.seqs_at_ctx;
  o.plan = fmt::format(
      "KV bytes per token on the GPU: fp {:.1f}, history {:.1f}; pages: {} fp ({} B each), {} history ({} B each); "
      "{} for up to {} sequences of {} tokens, {} fit at once",
      double(plan.fp_page_bytes) / double(plan.fp_page_tokens), double(plan.hist_page_bytes) / double(plan.hist_page_tokens),
      plan.fp_pages, plan.fp_page_bytes, plan.hist_pages, plan.hist_page_bytes, format_bytes(plan.bytes), p.max_seqs, p.ctx,
      plan.seqs_at_ctx);
  o.runner = std::make_unique<DeviceRunner>(model, plan, p.max_seqs, p.ctx);
  return o;
}
#endif

}  // namespace

void check_device(const std::string& device) {
  if (device == "cpu") return;
  if (device != "cuda") fail("--device {}: cpu or cuda", device);
#if OSCAR_WITH_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    fail("--device cuda: no CUDA device ({})", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
#else
  fail("--device cuda: this oscar was built without the CUDA backend (no nvcc at configure time)");
#endif
}

OpenedRunner open_runner(Transformer& model, const RunnerPlan& plan) {
  check_device(plan.device);
  if (plan.max_seqs < 1 || plan.ctx < 1) fail("a runner needs at least one sequence of one token");
#if OSCAR_WITH_CUDA
  if (plan.device == "cuda") return open_cuda(model, plan);
#endif
  return open_cpu(model, plan);
}

}  // namespace oscar::engine
