// The decoder on the GPU (Llama / Qwen2 / Qwen3), the device twin of oscar::Transformer:
// BF16 weights in device memory, cuBLAS products, the layer ops of elementwise.h, the KV
// cache of device_kv_cache.h written by cache_write.h and read by decode_attention.h.
// One step runs one new token for each of a batch of sequences (continuous batching: each
// at its own length) and leaves the logits and the greedy next ids on the device; a step
// can be captured once per batch shape as a CUDA graph and replayed.
//
// Self-contained like decode_attention.h (CUDA runtime and cuBLAS): the host side that
// turns oscar::ModelWeights into HostModel lives with the engine.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "oscar/cuda/cache_write.h"
#include "oscar/engine/cuda/device_kv_cache.h"
#include "oscar/model/model_dims.h"
#include "oscar/cuda/device_memory.h"
#include "oscar/cuda/linear.h"
#include "oscar/cuda/sampling.h"

namespace oscar::cuda {

// Weights on the host, row-major like oscar::ModelWeights: matrices as BF16 bits, norms
// and biases f32 (empty when the model has none).
struct HostLayer {
  std::vector<uint16_t> wq, wk, wv, wo;  // [H·d, E], [Hkv·d, E] ×2, [E, H·d]
  std::vector<uint16_t> w_gate, w_up;    // [F, E]
  std::vector<uint16_t> w_down;          // [E, F]
  std::vector<float> attn_norm, ffn_norm;  // [E]
  std::vector<float> bq, bk, bv;           // [H·d], [Hkv·d] ×2
  std::vector<float> q_norm, k_norm;       // [d]
};
struct HostModel {
  ModelDims dims;
  RopeFreqs rope;
  std::vector<uint16_t> token_embd;  // [V, E]
  std::vector<uint16_t> output;      // [V, E]; empty when tied
  std::vector<float> output_norm;    // [E]
  std::vector<HostLayer> layers;
};

// One tensor of a DeviceModel, as the model asks a WeightLoader to fill it: which tensor,
// its shape and where its values go on the device.
enum class WeightKind {
  token_embd, output, output_norm,                           // the model's
  attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm,      // each layer's
  ffn_norm, w_gate, w_up, w_down,
};
struct WeightTarget {
  WeightKind kind;
  int layer = -1;              // -1 for the model's own tensors
  std::string name;            // the GGUF name: token_embd.weight, blk.3.attn_q.weight, blk.3.attn_q.bias, …
  int64_t rows = 0, cols = 0;  // [rows, cols] row-major (vectors: rows 1)
  uint16_t* bf16 = nullptr;    // device: the matrices, as BF16
  float* f32 = nullptr;        // device: the norms and biases, f32
};

// Fills a DeviceModel's weights, one tensor at a time in the model's order (token_embd,
// output, output_norm, then each layer's), asynchronously on `stream` (the model
// synchronizes once at the end). Throws std::runtime_error naming the tensor.
// device_weight_loader.h reads them from a model file; HostModelLoader from a HostModel;
// bench/cuda/random_weights.cuh makes random ones for benchmarks.
class WeightLoader {
 public:
  virtual ~WeightLoader() = default;
  virtual void load(const WeightTarget& t, cudaStream_t stream) const = 0;
};

// A HostModel's tensors (each size checked against the shape).
class HostModelLoader final : public WeightLoader {
 public:
  explicit HostModelLoader(const HostModel& m) : m_(m) {}
  void load(const WeightTarget& t, cudaStream_t stream) const override;

 private:
  const HostModel& m_;
};

// How the matrix products run. bf16: activations cast to BF16, tensor cores, f32 sums (the
// engine). f32: f32 copies of the (BF16-valued) weights and f32 activations, no TF32 — what
// the CPU engine computes, for checking the GPU against it end to end; twice the memory.
enum class GemmPrecision { bf16, f32 };

class DeviceModel {
 public:
  // Allocates the weights and has `weights` fill them, tensor by tensor (the host holds
  // at most what the loader stages); std::runtime_error naming the tensor on failure.
  // The model is `dims` with RoPE's table `rope` (model_dims.h, shared with the CPU engine);
  // std::runtime_error naming the field where the device cannot run them.
  DeviceModel(const ModelDims& dims, const RopeFreqs& rope, const KvFormat& kv, const KvCacheLimits& limits,
              const WeightLoader& weights, GemmPrecision precision = GemmPrecision::bf16);
  // Uploads a HostModel (HostModelLoader).
  DeviceModel(const HostModel& m, const KvFormat& kv, const KvCacheLimits& limits,
              GemmPrecision precision = GemmPrecision::bf16);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  const ModelDims& dims() const { return dims_; }
  const RopeFreqs& rope() const { return rope_; }
  DeviceKvCache& cache() { return *cache_; }
  const DeviceKvCache& cache() const { return *cache_; }
  size_t weight_bytes() const { return weights_mem_.bytes(); }
  cudaStream_t stream() const { return stream_; }

  // One token for each sequence slot in `slots` (distinct, active), `tokens[i]` for
  // slots[i] at position length(slots[i]). Afterwards logits() holds [B, V] f32 and
  // next_ids() [B] greedy ids, on the device; both stay valid until the next step.
  // use_graph: capture the step for this batch size and key-length bucket (a power of two
  // ≥ 256, at most max_seq_len: it sizes the attention grid) on first use and replay it
  // afterwards; the same step without a graph gives bitwise the same logits.
  // Throws std::runtime_error, before anything runs, for a token id outside [0, V), a slot
  // that is not active or appears twice, or a full cache (that sequence keeps its length).
  void step(const std::vector<int>& slots, const std::vector<int32_t>& tokens, bool use_graph = false);
  const float* logits() const { return logits_; }
  const int32_t* next_ids() const { return next_ids_; }
  // Replaces next_ids() rows [0, batch) by ids drawn from the logits with the chain of
  // sampling.h (u: one uniform in [0, 1) per row, from the caller's seeded RNG).
  void sample(int batch, const SampleParams& p, const std::vector<double>& u);
  // Copies (synchronizing the stream); at most max(max_seqs, min(prefill_chunk,
  // prefill_logits_rows)) rows.
  std::vector<float> download_logits(int batch) const;
  void download_logits(int batch, float* out) const;  // into out[batch × n_vocab]
  std::vector<int32_t> download_next_ids(int batch) const;

  // One forward over several sequences' new tokens, as a chunked-prefill server mixes them:
  // slots[i] (distinct, active) gets tokens[starts[i], starts[i + 1]) (at least one) at its
  // current length. Every matrix product runs once over all the rows (at most
  // max(max_seqs, prefill_chunk)); attention runs the split-KV decode kernel over the
  // one-token sequences and prefill_attention over each longer one (its own launch per
  // layer), each row with exactly the view of the keys that decode would show it.
  // Afterwards logits() row i and next_ids()[i] are sequence i's last token's. A batch of
  // one-token sequences is step() (a CUDA graph when use_graph). token_logits_from (empty,
  // or one per sequence): k ≥ 0 also appends the logits of that sequence's tokens k … n − 1
  // to *token_logits (downloaded, in slices of the logits buffer). Throws
  // std::runtime_error, before anything runs, for bad ids, slots or starts, too many rows,
  // or a full cache.
  void forward(const std::vector<int>& slots, const std::vector<int32_t>& starts, const std::vector<int32_t>& tokens,
               bool use_graph = false, const std::vector<int64_t>& token_logits_from = {},
               std::vector<float>* token_logits = nullptr);
  int max_rows() const { return max_rows_; }

  // Prefill: the tokens of one slot in launches of up to prefill_chunk rows (matrix
  // products over all rows at once), each token a row with its own view of the keys —
  // exactly what decode would have shown it (history [S, h(t + 1)) quantized, the rest
  // BF16), through the split-KV decode kernel. Afterwards logits() row 0 / next_ids()[0]
  // are the last token's; all_logits: the logits of tokens logits_from … n − 1, [n − from, V].
  void prefill(int slot, const std::vector<int32_t>& tokens, std::vector<float>* all_logits = nullptr,
               int64_t logits_from = 0);
  // The same one step() per token (the reference prefill() is tested against).
  void prefill_by_steps(int slot, const std::vector<int32_t>& tokens, std::vector<float>* all_logits = nullptr);

 private:
  DeviceModel(const ModelDims& dims, const RopeFreqs& rope, const KvFormat& kv, const KvCacheLimits& limits,
              GemmPrecision precision);
  void allocate_weights();
  // Every weight tensor in the order WeightLoader promises.
  std::vector<WeightTarget> weight_targets() const;
  void load_weights(const WeightLoader& weights);
  void make_f32_copies();
  void allocate_activations();
  void check_tokens(const std::vector<int32_t>& tokens, const char* what) const;
  // Every slot active and none twice; std::runtime_error naming `what` and the slot.
  void check_slots(const std::vector<int>& slots, const char* what) const;
  // Fills and uploads the per-row inputs (row i: token at positions[i] of slots[i]);
  // returns the longest sequence after the rows.
  int64_t stage_rows(const std::vector<int>& slots, const std::vector<int32_t>& tokens,
                     const std::vector<int64_t>& positions);
  int64_t key_bound(int64_t max_len) const;
  void ensure_workspace(int rows, int64_t bound);
  DemoteParams demote_params(int batch) const;
  // The BF16 copy of the history prefill_attention reads, for history rows [S, hist_end).
  void ensure_prefill_scratch(int64_t hist_end);
  // A launch's rows as the kernels see them: rows [0, n_decode) one new token each, each its
  // own sequence (the decode kernel); then prefill segments, each consecutive tokens of one
  // slot (prefill_attention), with the history end of their last token.
  struct Segment {
    int row = 0, n = 0;
    int64_t hist_end = 0;
  };
  struct Plan {
    int rows = 0, n_decode = 0;
    std::vector<Segment> prefill;
    int64_t bound = 0;  // key bound (key_bound)
  };
  // The attention buffers a plan needs (decode workspace, prefill history scratch).
  void prepare_attention(const Plan& p);
  // The kernels of one launch (capturable when it is all decode rows); logits of rows ≥
  // logits_from.
  void run_plan(const Plan& p, int logits_from);
  // Logits of the rows named by the staged kLastRow inputs into logits_ rows [0, n).
  void compute_logits_gathered(int n);
  // Logits of rows [from, to) (at most logits_rows_) into logits_, greedy ids beside them.
  void compute_logits(int from, int to);
  void layer(int l, const Plan& p);

  struct Matrix {
    uint16_t* bf16 = nullptr;
    float* f32 = nullptr;  // GemmPrecision::f32 only
  };
  // y [m, n_out] = x [m, n_in] · Wᵀ (+ bias; y += … when accumulate) in the model's
  // precision; x16: x already as BF16 (null: cast here).
  void mm(const Matrix& w, const float* x, const uint16_t* x16, const float* bias, float* y, int64_t m, int n_in,
          int n_out, bool accumulate = false);
  struct LayerPtrs {
    Matrix wq, wk, wv, wo, w_gate, w_up, w_down;
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm, *rot_k, *rot_v, *k_shift;
  };

  ModelDims dims_;
  RopeFreqs rope_;
  KvFormat kv_;
  cudaStream_t stream_ = nullptr;
  DeviceMemory weights_mem_, act_mem_;
  std::unique_ptr<DeviceKvCache> cache_;
  std::unique_ptr<Linear> linear_;
  std::vector<LayerPtrs> layers_;
  GemmPrecision precision_;
  uint16_t* token_embd_ = nullptr;
  Matrix output_;
  float* output_norm_ = nullptr;
  double* inv_freq_ = nullptr;
  // --k-bias-split (KvFormat::k_bias_split on a model with a key bias): the cs(j) table
  // [64, d], the prologue's coefficients [max_rows_, n_heads, d] and the decode kernels'
  // bias scores [rows, n_heads, key bound] (key_bias.h).
  bool key_bias_split_ = false;
  float* key_bias_cs_ = nullptr;
  float* key_bias_coef_ = nullptr;
  float* key_bias_scores_ = nullptr;
  size_t key_bias_scores_bytes_ = 0;

  // Per-step inputs (device, fixed addresses so graphs can replay them) and their host
  // staging: ids, positions, lengths after the step, history ends, demotion ranges.
  int max_seqs_ = 0, prefill_chunk_ = 0;
  int max_rows_ = 0;  // rows of the activation buffers: max(max_seqs, prefill_chunk)
  // Rows of the logits buffer, max(max_seqs, min(prefill_chunk, prefill_logits_rows)): a
  // prefill's logits come in slices of this many (1024 rows would take 0.6 GB at a 152K
  // vocabulary).
  int logits_rows_ = 0;
  int32_t *d_inputs_ = nullptr, *h_inputs_ = nullptr;  // pinned
  int32_t *ids_, *pos_, *seq_len_, *hist_end_, *demote_from_, *demote_to_, *bad_id_, *last_row_;
  int32_t *fp_blocks_, *hist_blocks_, *slots_;  // batch tables gathered from the slot tables
  // The quantized layers' demotion records (device), for one demotion launch per decode step
  // (demote_to_history_layers) when every demoted row predates the step's token (window ≥ 1).
  DemoteLayer* demote_layers_ = nullptr;
  int n_demote_layers_ = 0;
  bool demote_hoisted_ = false;  // run_plan did this launch's demotion before the layers
  // Activations for max_rows_ rows.
  float *x_, *h_, *q_, *q_rot_, *k_, *v_, *att_, *att_rot_, *gate_, *up_, *logits_;
  float* x_last_ = nullptr;  // [logits_rows_, n_embd] the rows whose logits forward() gives
  float* qkv1_ = nullptr;      // [qd + 2·kvd] a one-row step's q, k, v (one product)
  float* gate_up1_ = nullptr;  // [2·n_ff] a one-row step's gate and up (one product)
  uint16_t *h16_, *gate16_;  // BF16 copies of h_ and the SwiGLU output (matrix inputs)
  int32_t* next_ids_ = nullptr;
  double* uniforms_ = nullptr;  // [max_rows_] for sample()
  float* attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
  uint16_t* prefill_scratch_ = nullptr;
  size_t prefill_scratch_bytes_ = 0;
  int n_sm_ = 0;
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs_;  // (batch, key bucket) → graph
};

}  // namespace oscar::cuda
