#include "oscar/engine/generate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "oscar/core/clock.h"

namespace oscar::engine {

GenerationStats generate(Runner& runner, const Tokenizer& tokenizer, SeqId seq, std::span<const int32_t> prompt,
                         int n_predict, Sampler& sampler, const std::function<bool(int32_t)>& on_token,
                         int64_t prefill_chunk, std::span<const int32_t> forced) {
  if (!forced.empty()) n_predict = std::min<int>(n_predict, int(forced.size()));
  GenerationStats st;
  StepOutput out;
  const std::vector<float>& logits = out.logits;
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  Batch batch;
  auto step = [&](std::span<const int32_t> tokens) {
    batch.clear();
    batch.add(seq, runner.length(seq), tokens);
    runner.run(batch, out);
  };
  auto t0 = std::chrono::steady_clock::now();
  const size_t chunk = prefill_chunk > 0 ? size_t(prefill_chunk) : std::max<size_t>(prompt.size(), 1);
  for (size_t at = 0; at < prompt.size(); at += chunk) step(prompt.subspan(at, std::min(chunk, prompt.size() - at)));
  st.n_prompt = int64_t(prompt.size());
  st.kv_bytes_after_prompt = runner.kv_bytes(seq);
  st.prompt_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_predict; ++i) {
    if (logits.empty()) break;
    const int32_t id = forced.empty() ? sampler.sample(logits, history) : forced[size_t(i)];
    if (forced.empty() && tokenizer.is_eog(id)) break;
    ++st.n_generated;
    history.push_back(id);
    if (!on_token(id)) break;
    if (i + 1 == n_predict) break;  // no forward pass for a token nobody will sample from
    if (!runner.can_append(seq, 1)) break;
    const int32_t one[1] = {id};
    step(one);
  }
  st.generate_seconds = seconds_since(t0);
  return st;
}

}  // namespace oscar::engine
