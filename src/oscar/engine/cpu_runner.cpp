#include "oscar/engine/cpu_runner.h"

#include <fmt/format.h>

#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/sampling/sampler.h"

namespace oscar::engine {

CpuRunner::CpuRunner(Transformer& model, KvCache cache) : model_(model), cache_(std::move(cache)) {}

namespace {
// "f32" (dequantized at load) or the file's own format of the layers' matrices.
std::string weights_kind(const ModelWeights& w) {
  if (w.layers.empty() || w.layers[0].wq.owns_f32()) return "f32";
  return fmt::format("{} (as stored)", ggml_type_name(w.layers[0].wq.type()));
}
}  // namespace

int64_t CpuRunner::swap_out(SeqId seq) {
  const int64_t bytes = cache_.swap_bytes(seq);
  if (!swap_.fits(bytes)) return -1;
  return swap_.put(cache_.swap_out(seq), bytes);
}

SeqId CpuRunner::swap_in(int64_t handle) {
  const SeqId seq = cache_.swap_in(swap_.get(handle));
  if (seq >= 0) swap_.drop(handle);
  return seq;
}

std::string CpuRunner::describe() const {
  const KvSpec& s = cache_.spec();
  return fmt::format("cpu ({} threads, {}): {} weights; batched decode products (weights read once per step), "
                     "attention per sequence over KV '{}'{}",
                     num_threads(), use_avx2() ? "AVX2+FMA" : "scalar", weights_kind(model_.weights()), s.name(),
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
  if (batch.wants_token_logits())
    model_.forward_batch(cache_, seqs_, out.logits, batch.token_logits_from, &out.token_logits);
  else
    model_.forward_batch(cache_, seqs_, out.logits);
  if (!batch.wants_token_logits()) out.token_logits.clear();
  // Every row is computed here anyway; its argmax costs one pass.
  const size_t V = size_t(model_.config().n_vocab);
  out.argmax.resize(size_t(batch.n_seqs()));
  for (size_t i = 0; i < out.argmax.size(); ++i)
    out.argmax[i] = argmax(std::span<const float>(out.logits.data() + i * V, V));
}

}  // namespace oscar::engine
