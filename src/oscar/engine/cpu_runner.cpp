#include "oscar/engine/cpu_runner.h"

#include <fmt/format.h>

#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/sampling/sampler.h"

namespace oscar::engine {

CpuRunner::CpuRunner(Transformer& model, KvCache cache) : model_(model), cache_(std::move(cache)) {}

std::string CpuRunner::describe() const {
  const KvSpec& s = cache_.spec();
  return fmt::format("cpu ({} threads, {}): f32 weights; batched decode products (weights read once per step), "
                     "attention per sequence over KV '{}'{}",
                     num_threads(), use_avx2() ? "AVX2+FMA" : "scalar", s.name(),
                     s.quantized() ? fmt::format(" (sink {}, recent {}, history packed {}-bit)", s.sink, s.recent, s.bits())
                                   : std::string());
}

void CpuRunner::run(const Batch& batch, StepOutput& out) {
  OSCAR_CHECK(batch.n_seqs() > 0, "empty batch");
  seqs_.clear();
  for (int i = 0; i < batch.n_seqs(); ++i) {
    const SeqId seq = batch.seq_ids[size_t(i)];
    OSCAR_CHECK(batch.positions[size_t(i)] == cache_.length(seq), "sequence {}: batch position {} but length {}", seq,
                batch.positions[size_t(i)], cache_.length(seq));
    seqs_.push_back(SeqTokens{seq, batch.tokens_of(i)});
  }
  model_.forward_batch(cache_, seqs_, out.logits);
  // Every row is computed here anyway; its argmax costs one pass.
  const size_t V = size_t(model_.config().n_vocab);
  out.argmax.resize(size_t(batch.n_seqs()));
  for (size_t i = 0; i < out.argmax.size(); ++i)
    out.argmax[i] = argmax(std::span<const float>(out.logits.data() + i * V, V));
}

}  // namespace oscar::engine
