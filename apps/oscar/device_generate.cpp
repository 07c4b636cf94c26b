#include "device_generate.h"

#include <fmt/format.h>

#include <chrono>
#include <random>
#include <stdexcept>

#include "oscar/core/error.h"
#if OSCAR_WITH_CUDA
#include <cuda_runtime.h>

#include "oscar/cuda_engine/device_model_loader.h"
#endif

namespace oscar::cli {

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

#if OSCAR_WITH_CUDA
namespace {

// The configured model on the GPU for one sequence of up to `capacity` tokens at a time.
std::shared_ptr<cuda::DeviceModel> make_device_model(LoadedModel& m, int64_t capacity) {
  cuda::KvCacheLimits limits;
  limits.max_seqs = 1;
  limits.max_seq_len = capacity;
  std::shared_ptr<cuda::DeviceModel> dm;
  try {
    dm = std::make_shared<cuda::DeviceModel>(device_host_model(*m.transformer), device_kv_format(*m.transformer), limits);
  } catch (const std::runtime_error& e) {
    fail("--device cuda: {}", e.what());
  }
  fmt::print(stderr, "device: weights {:.2f} GiB (BF16), KV cache {:.2f} GiB reserved\n",
             double(dm->weight_bytes()) / (1 << 30), double(dm->cache().bytes_reserved()) / (1 << 30));
  return dm;
}

}  // namespace

GenerationStats generate_on_device(LoadedModel& m, int64_t capacity, const std::vector<int32_t>& prompt,
                                   int n_predict, Sampler& sampler, const std::function<bool(int32_t)>& on_token) {
  GenerationStats st;
  const std::shared_ptr<cuda::DeviceModel> dm = make_device_model(m, capacity);
  const int slot = dm->cache().add_sequence();
  const SamplerParams& sp = sampler.params();
  const bool greedy = sp.temperature <= 0.0f && sp.repeat_penalty == 1.0f;
  // The GPU draws when the chain needs no history and top-k fits its kernel; otherwise the
  // host Sampler runs on the downloaded logits.
  const bool on_device = !greedy && sp.repeat_penalty == 1.0f && sp.top_k >= 1 && sp.top_k <= cuda::kSampleMaxTopK;
  const cuda::SampleParams dev_params{sp.temperature, sp.top_k, sp.top_p, sp.min_p};
  std::mt19937_64 rng(sp.seed);
  std::vector<int32_t> history(prompt);
  auto t0 = std::chrono::steady_clock::now();
  dm->prefill(slot, prompt);
  st.n_prompt = int64_t(prompt.size());
  auto next = [&]() -> int32_t {
    if (greedy) return dm->download_next_ids(1)[0];
    if (on_device) {
      dm->sample(1, dev_params, {double(rng() >> 11) * 0x1.0p-53});
      return dm->download_next_ids(1)[0];
    }
    const std::vector<float> logits = dm->download_logits(1);
    return sampler.sample(logits, history);
  };
  int32_t id = prompt.empty() ? -1 : next();
  st.prompt_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_predict && id >= 0; ++i) {
    if (m.tokenizer->is_eog(id)) break;
    ++st.n_generated;
    history.push_back(id);
    if (!on_token(id)) break;
    if (i + 1 == n_predict || dm->cache().length(slot) + 1 > capacity) break;
    dm->step({slot}, {id}, /*use_graph=*/true);
    id = next();
  }
  st.generate_seconds = seconds_since(t0);
  const int64_t n = dm->cache().length(slot);
  const size_t used = dm->cache().bytes_for_length(n), bf16 = dm->cache().bf16_bytes_for_length(n);
  fmt::print(stderr, "KV cache on the GPU ({}): {} tokens, {} in pages; BF16 KV pages would hold {}: {:.2f}x less\n",
             m.transformer->kv_spec().name(), n, format_bytes(int64_t(used)), format_bytes(int64_t(bf16)),
             used ? double(bf16) / double(used) : 1.0);
  return st;
}
ChunkLogitsFn device_chunk_logits(LoadedModel& m, int n_ctx) {
  const std::shared_ptr<cuda::DeviceModel> dm = make_device_model(m, n_ctx);
  return [dm](std::span<const int32_t> chunk, int first, std::vector<float>& logits) -> int64_t {
    const int slot = dm->cache().add_sequence();
    try {
      dm->prefill(slot, std::vector<int32_t>(chunk.begin(), chunk.end()), &logits, first);
    } catch (const std::runtime_error& e) {
      fail("--device cuda: {}", e.what());
    }
    const int64_t bytes = int64_t(dm->cache().bytes_for_length(int64_t(chunk.size())));
    dm->cache().remove_sequence(slot);
    return bytes;
  };
}
PromptGenerateFn device_prompt_generate(LoadedModel& m, int64_t capacity) {
  const std::shared_ptr<cuda::DeviceModel> dm = make_device_model(m, capacity);
  const Tokenizer* tok = m.tokenizer.get();
  const ModelConfig c = m.transformer->config();
  return [dm, tok, c, capacity](std::span<const int32_t> prompt, int max_new) {
    if (prompt.empty()) fail("niah: the prompt is empty");
    NiahGeneration out;
    const int slot = dm->cache().add_sequence();
    try {
      dm->prefill(slot, std::vector<int32_t>(prompt.begin(), prompt.end()));
      const int64_t n = dm->cache().length(slot);
      out.kv_bits_per_element =
          8.0 * double(dm->cache().bytes_for_length(n)) / (2.0 * c.n_layers * c.n_kv_heads * c.head_dim * double(n));
      for (int i = 0; i < max_new; ++i) {
        const int32_t id = dm->download_next_ids(1)[0];  // greedy: the first largest logit
        if (tok->is_eog(id)) break;
        out.ids.push_back(id);
        if (i + 1 == max_new || dm->cache().length(slot) + 1 > capacity) break;
        dm->step({slot}, {id}, /*use_graph=*/true);
      }
    } catch (const std::runtime_error& e) {
      dm->cache().remove_sequence(slot);
      fail("--device cuda: {}", e.what());
    }
    dm->cache().remove_sequence(slot);
    out.text = tok->decode(out.ids, /*render_control=*/false);
    return out;
  };
}
DeviceBenchFn device_bench(LoadedModel& m, int64_t capacity) {
  const std::shared_ptr<cuda::DeviceModel> dm = make_device_model(m, capacity);
  return [dm](const std::vector<int32_t>& prompt, const std::vector<int32_t>& gen) {
    DeviceBenchResult r;
    const int slot = dm->cache().add_sequence();
    try {
      auto t0 = std::chrono::steady_clock::now();
      dm->prefill(slot, prompt);
      dm->download_next_ids(1);  // waits for the GPU
      r.prefill_tokens_per_s = double(prompt.size()) / seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      for (const int32_t t : gen) dm->step({slot}, {t}, /*use_graph=*/true);
      dm->download_next_ids(1);
      if (!gen.empty()) r.decode_tokens_per_s = double(gen.size()) / seconds_since(t0);
    } catch (const std::runtime_error& e) {
      dm->cache().remove_sequence(slot);
      fail("--device cuda: {}", e.what());
    }
    dm->cache().remove_sequence(slot);
    return r;
  };
}
#else
DeviceBenchFn device_bench(LoadedModel&, int64_t) {
  check_device("cuda");
  return {};
}

PromptGenerateFn device_prompt_generate(LoadedModel&, int64_t) {
  check_device("cuda");
  return {};
}

ChunkLogitsFn device_chunk_logits(LoadedModel&, int) {
  check_device("cuda");
  return {};
}

GenerationStats generate_on_device(LoadedModel&, int64_t, const std::vector<int32_t>&, int, Sampler&,
                                   const std::function<bool(int32_t)>&) {
  check_device("cuda");
  return {};
}
#endif

}  // namespace oscar::cli
