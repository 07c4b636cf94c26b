// Named shapes of real models (their published hyperparameters), and GGUF files with
// random weights at such a shape: benchmarks can run a Qwen3-8B-sized model on a machine
// without network or model files. The file loads like a converted model (llama.cpp's
// metadata keys and tensor names, a byte-level BPE tokenizer, a ChatML template).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/formats/ggml_type.h"
#include "oscar/model/model_config.h"

namespace oscar {

struct ModelShape {
  std::string name;           // the --shape name, e.g. "qwen3-8b"
  ModelConfig config;         // as the real model's GGUF describes it (config.name empty)
  std::string tokenizer_pre;  // tokenizer.ggml.pre of the real model's GGUF
};

// qwen3-32b, qwen3-8b, llama3-8b, qwen2.5-1.5b, smollm2-135m, and tiny (2 layers, for tests).
const std::vector<ModelShape>& model_shapes();
// Throws oscar::Error listing the known names.
const ModelShape& find_model_shape(std::string_view name);
std::string known_model_shapes();  // "qwen3-8b, llama3-8b, ..."

// The fewest tokens a random vocabulary can have: the 256 byte tokens and 3 control tokens.
constexpr int k_random_vocab_min = 256 + 3;

struct RandomTensor {
  enum class Fill { uniform, ones };
  std::string name;           // llama.cpp's name: token_embd.weight, blk.N.attn_q.weight, ...
  GgmlType type;              // matrices BF16 or Q8_0, norms and biases f32
  std::vector<uint64_t> ne;   // innermost first: a linear layer [out, in] is {in, out}
  Fill fill;
  float range;                // uniform: values in ±range (1/sqrt(ne[0]) for matrices)
};

// Every tensor a model with config `c` has, in the order the file stores them; the
// matrices as matrix_type (BF16 or Q8_0; anything else throws oscar::Error).
std::vector<RandomTensor> random_model_tensors(const ModelConfig& c, GgmlType matrix_type = GgmlType::bf16);

// ggml's Q8_0 of n values (a multiple of 32): per block of 32, d = max|x| / 127 as fp16 and
// round(x / d) as int8 — what llama.cpp's quantizer writes. out: n / 32 · 34 bytes.
void quantize_q8_0(const float* x, uint8_t* out, int64_t n);

struct RandomModelStats {
  uint64_t n_tensors = 0;
  uint64_t n_params = 0;
  uint64_t file_bytes = 0;
};

// Writes `shape` (its config.n_vocab tokens, at least k_random_vocab_min) to `path` via
// path.tmp, generating and writing each tensor in chunks on default_pool(): memory stays
// a few tens of MB whatever the shape. Element i of a tensor depends only on the seed,
// the tensor's name and i, so the same seed gives the same bytes on any thread count.
// The tokenizer: the 256 byte tokens, then words over [Ġa-z] built one merge at a time,
// then <|endoftext|> (bos, pad), <|im_start|>, <|im_end|> as control tokens; eos is
// <|im_end|> for Qwen and <|endoftext|> otherwise. Throws oscar::Error naming the file.
// matrix_type Q8_0 halves the file (a 32B model in 35 GB): the values are the BF16 file's,
// quantized.
RandomModelStats write_random_model(const ModelShape& shape, const std::string& path, uint64_t seed,
                                    GgmlType matrix_type = GgmlType::bf16);

}  // namespace oscar
