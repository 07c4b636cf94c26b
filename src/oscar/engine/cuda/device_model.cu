// The decoder on the GPU (device_model.h): weights, one step's kernels, graphs.
#include "oscar/engine/cuda/device_model.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "oscar/cuda/attention_prologue.h"
#include "oscar/cuda/cache_write.h"
#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/elementwise.h"
#include "oscar/cuda/key_bias.h"
#include "oscar/cuda/prefill_attention.h"
#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

using detail::check_cuda;
using detail::check_launch;
using detail::fail;

// Rows from which the prologue leaves R_K to two matrix products (H200, Qwen3-8B shape, 8K
// INT2-OSCAR prefill: docs/cuda.md); the prologue's own 8-heads-a-CTA form starts at 64 too.
constexpr int kRotateByProductRows = 64;

// Per-step inputs, in this order, each max_batch ints (device and pinned host copies).
// kLastRow: forward()'s row of each sequence's last token.
enum Input { kIds, kPos, kSeqLen, kHistEnd, kDemoteFrom, kDemoteTo, kSlots, kBadId, kLastRow, kNumInputs };

__global__ void bf16_to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __uint_as_float(uint32_t(x[i]) << 16);
}

// dst[b][i] = src[slots[b]][i]: the batch's page tables from the per-slot tables.
__global__ void gather_tables(const int32_t* src, const int32_t* slots, int32_t* dst, int stride) {
  const int b = blockIdx.y;
  const int32_t* row = src + int64_t(slots[b]) * stride;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < stride; i += gridDim.x * blockDim.x)
    dst[int64_t(b) * stride + i] = row[i];
}

// out[i] = x[rows[i]], rows of `width` floats.
__global__ void gather_rows(const float* x, const int32_t* rows, int width, float* out) {
  const float* src = x + int64_t(rows[blockIdx.x]) * width;
  for (int j = threadIdx.x; j < width; j += blockDim.x) out[int64_t(blockIdx.x) * width + j] = src[j];
}

// Replaces *buf with a block of `need` bytes (the contents are not kept; the old block is
// freed first, so the two never coexist). A failed allocation leaves it null and names
// `what` and the size.
template <class T>
void regrow(T** buf, size_t* bytes, size_t need, const char* what) {
  if (*buf) cudaFree(*buf);
  *buf = nullptr;
  *bytes = 0;
  const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(buf), need);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *buf = nullptr;
    fail("DeviceModel", std::string(e == cudaErrorMemoryAllocation ? "out of GPU memory" : cudaGetErrorString(e)) +
                            " allocating the " + what + ": " + std::to_string(need >> 20) + " MiB");
  }
  *bytes = need;
}
}  // namespace

namespace {
// What the device cannot run, by field name.
void validate_for_device(const ModelDims& m, const RopeFreqs& rope) {
  const char* what = "DeviceModel";
  if (m.n_layers <= 0 || m.n_embd <= 0 || m.n_ff <= 0 || m.n_heads <= 0 || m.n_kv_heads <= 0 || m.n_vocab <= 0)
    fail(what, "every size must be positive");
  if (m.head_dim != 64 && m.head_dim != 128) fail(what, "head_dim " + std::to_string(m.head_dim) + " (64 or 128)");
  if (m.n_heads % m.n_kv_heads != 0 || m.n_heads / m.n_kv_heads > kDecodeMaxGroup)
    fail(what, "n_heads / n_kv_heads must be a whole number from 1 to " + std::to_string(kDecodeMaxGroup));
  if (rope.inv_freq.size() != size_t(m.head_dim / 2))
    fail(what, "RoPE's inv_freq has " + std::to_string(rope.inv_freq.size()) + " entries, expected head_dim / 2");
  if (!(m.rms_eps > 0.0f)) fail(what, "rms_eps must be positive");
}
}  // namespace

DeviceModel::DeviceModel(const ModelDims& dims, const RopeFreqs& rope, const KvFormat& kv,
                         const KvCacheLimits& limits, GemmPrecision precision)
    : dims_(dims), rope_(rope), kv_(kv), precision_(precision) {
  validate_for_device(dims_, rope_);
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  cache_ = std::make_unique<DeviceKvCache>(dims.n_layers, dims.n_kv_heads, dims.head_dim, kv, limits);
  cache_->set_stream(stream_);
  max_seqs_ = limits.max_seqs;
  prefill_chunk_ = limits.prefill_chunk;
  max_rows_ = std::max(max_seqs_, prefill_chunk_);
  key_bias_split_ = kv.k_bias_split && dims.qkv_bias;
  logits_rows_ = std::max(max_seqs_, std::min(prefill_chunk_, limits.prefill_logits_rows));
  const int widest = std::max({dims.n_embd, dims.n_heads * dims.head_dim, dims.n_ff});
  linear_ = std::make_unique<Linear>(stream_, size_t(max_rows_) * size_t(widest));
  allocate_weights();
  allocate_activations();
}

DeviceModel::DeviceModel(const ModelDims& dims, const RopeFreqs& rope, const KvFormat& kv,
                         const KvCacheLimits& limits, const WeightLoader& weights, GemmPrecision precision)
    : DeviceModel(dims, rope, kv, limits, precision) {
  load_weights(weights);
}

DeviceModel::DeviceModel(const HostModel& m, const KvFormat& kv, const KvCacheLimits& limits,
                         GemmPrecision precision)
    : DeviceModel(m.dims, m.rope, kv, limits, HostModelLoader(m), precision) {}

std::vector<WeightTarget> DeviceModel::weight_targets() const {
  const ModelDims& s = dims_;
  const int64_t e = s.n_embd, hd = s.head_dim, qd = int64_t(s.n_heads) * hd, kvd = int64_t(s.n_kv_heads) * hd,
                ff = s.n_ff;
  std::vector<WeightTarget> t;
  auto mat = [&](WeightKind k, int layer, std::string name, int64_t rows, int64_t cols, uint16_t* p) {
    t.push_back({k, layer, std::move(name), rows, cols, p, nullptr});
  };
  auto vec = [&](WeightKind k, int layer, std::string name, int64_t n, float* p) {
    if (p) t.push_back({k, layer, std::move(name), 1, n, nullptr, p});
  };
  mat(WeightKind::token_embd, -1, "token_embd.weight", s.n_vocab, e, token_embd_);
  if (!s.tied_embeddings) mat(WeightKind::output, -1, "output.weight", s.n_vocab, e, output_.bf16);
  vec(WeightKind::output_norm, -1, "output_norm.weight", e, output_norm_);
  for (int l = 0; l < s.n_layers; ++l) {
    const LayerPtrs& d = layers_[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    mat(WeightKind::wq, l, p + "attn_q.weight", qd, e, d.wq.bf16);
    mat(WeightKind::wk, l, p + "attn_k.weight", kvd, e, d.wk.bf16);
    mat(WeightKind::wv, l, p + "attn_v.weight", kvd, e, d.wv.bf16);
    mat(WeightKind::wo, l, p + "attn_output.weight", e, qd, d.wo.bf16);
    mat(WeightKind::w_gate, l, p + "ffn_gate.weight", ff, e, d.w_gate.bf16);
    mat(WeightKind::w_up, l, p + "ffn_up.weight", ff, e, d.w_up.bf16);
    mat(WeightKind::w_down, l, p + "ffn_down.weight", e, ff, d.w_down.bf16);
    vec(WeightKind::attn_norm, l, p + "attn_norm.weight", e, d.attn_norm);
    vec(WeightKind::ffn_norm, l, p + "ffn_norm.weight", e, d.ffn_norm);
    vec(WeightKind::bq, l, p + "attn_q.bias", qd, d.bq);
    vec(WeightKind::bk, l, p + "attn_k.bias", kvd, d.bk);
    vec(WeightKind::bv, l, p + "attn_v.bias", kvd, d.bv);
    vec(WeightKind::q_norm, l, p + "attn_q_norm.weight", hd, d.q_norm);
    vec(WeightKind::k_norm, l, p + "attn_k_norm.weight", hd, d.k_norm);
  }
  return t;
}

void DeviceModel::load_weights(const WeightLoader& weights) {
  for (const WeightTarget& t : weight_targets()) weights.load(t, stream_);
  check_cuda(cudaStreamSynchronize(stream_), "DeviceModel: loading the weights");
  if (precision_ == GemmPrecision::f32) make_f32_copies();
}

void HostModelLoader::load(const WeightTarget& t, cudaStream_t stream) const {
  const HostLayer* l = t.layer >= 0 && size_t(t.layer) < m_.layers.size() ? &m_.layers[size_t(t.layer)] : nullptr;
  if (t.layer >= 0 && !l)
    fail("DeviceModel", "the host model has " + std::to_string(m_.layers.size()) + " layers, not " +
                            std::to_string(t.layer + 1));
  const std::vector<uint16_t>* m16 = nullptr;
  const std::vector<float>* v32 = nullptr;
  const char* field = "";  // HostModel's member, for the error
  switch (t.kind) {
    case WeightKind::token_embd: m16 = &m_.token_embd, field = "token_embd"; break;
    case WeightKind::output: m16 = &m_.output, field = "output"; break;
    case WeightKind::output_norm: v32 = &m_.output_norm, field = "output_norm"; break;
    case WeightKind::wq: m16 = &l->wq, field = "wq"; break;
    case WeightKind::wk: m16 = &l->wk, field = "wk"; break;
    case WeightKind::wv: m16 = &l->wv, field = "wv"; break;
    case WeightKind::wo: m16 = &l->wo, field = "wo"; break;
    case WeightKind::w_gate: m16 = &l->w_gate, field = "w_gate"; break;
    case WeightKind::w_up: m16 = &l->w_up, field = "w_up"; break;
    case WeightKind::w_down: m16 = &l->w_down, field = "w_down"; break;
    case WeightKind::attn_norm: v32 = &l->attn_norm, field = "attn_norm"; break;
    case WeightKind::ffn_norm: v32 = &l->ffn_norm, field = "ffn_norm"; break;
    case WeightKind::bq: v32 = &l->bq, field = "bq"; break;
    case WeightKind::bk: v32 = &l->bk, field = "bk"; break;
    case WeightKind::bv: v32 = &l->bv, field = "bv"; break;
    case WeightKind::q_norm: v32 = &l->q_norm, field = "q_norm"; break;
    case WeightKind::k_norm: v32 = &l->k_norm, field = "k_norm"; break;
  }
  const size_t want = size_t(t.rows) * size_t(t.cols);
  const size_t n = m16 ? m16->size() : v32->size();
  if (n != want)
    fail("DeviceModel", (t.layer >= 0 ? "layers[" + std::to_string(t.layer) + "]." : std::string()) + field + " (" +
                            t.name + ") has " + std::to_string(n) + " elements, expected " + std::to_string(want));
  // Synchronous (pageable memory): the host vectors may go once the constructor returns.
  if (m16) check_cuda(cudaMemcpyAsync(t.bf16, m16->data(), n * 2, cudaMemcpyHostToDevice, stream), "uploading " + t.name);
  else check_cuda(cudaMemcpyAsync(t.f32, v32->data(), n * 4, cudaMemcpyHostToDevice, stream), "uploading " + t.name);
}

void DeviceModel::make_f32_copies() {
  const ModelDims& s = dims_;
  const int64_t e = s.n_embd, qd = int64_t(s.n_heads) * s.head_dim, kvd = int64_t(s.n_kv_heads) * s.head_dim,
                ff = s.n_ff;
  auto copy = [&](Matrix& w, int64_t n, const std::string& name) {
    w.f32 = weights_mem_.allocate_array<float>(size_t(n), name + " (f32)");
    bf16_to_f32_kernel<<<1024, 256, 0, stream_>>>(w.bf16, w.f32, n);
  };
  copy(output_, int64_t(s.n_vocab) * e, "output");
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerPtrs& d = layers_[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    copy(d.wq, qd * e, p + "wq");
    copy(d.wk, kvd * e, p + "wk");
    copy(d.wv, kvd * e, p + "wv");
    copy(d.wo, e * qd, p + "wo");
    copy(d.w_gate, ff * e, p + "w_gate");
    copy(d.w_up, ff * e, p + "w_up");
    copy(d.w_down, e * ff, p + "w_down");
  }
  check_launch("DeviceModel: f32 weights");
  check_cuda(cudaStreamSynchronize(stream_), "DeviceModel: f32 weights");
}

void DeviceModel::mm(const Matrix& w, const float* x, const uint16_t* x16, const float* bias, float* y, int64_t m,
                     int n_in, int n_out, bool accumulate) {
  if (precision_ == GemmPrecision::f32)
    linear_->linear_f32(x, w.f32, bias, y, m, n_in, n_out, accumulate);
  else if (x16)
    linear_->linear_bf16(x16, w.bf16, bias, y, m, n_in, n_out, accumulate);
  else
    linear_->linear(x, w.bf16, bias, y, m, n_in, n_out, accumulate);
}

DeviceModel::~DeviceModel() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  if (stream_) cudaStreamSynchronize(stream_);
  if (h_inputs_) cudaFreeHost(h_inputs_);
  if (attn_workspace_) cudaFree(attn_workspace_);
  if (prefill_scratch_) cudaFree(prefill_scratch_);
  if (key_bias_scores_) cudaFree(key_bias_scores_);
  linear_.reset();
  cache_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

void DeviceModel::allocate_weights() {
  const ModelDims& s = dims_;
  const size_t e = size_t(s.n_embd), hd = size_t(s.head_dim), qd = size_t(s.n_heads) * hd,
               kvd = size_t(s.n_kv_heads) * hd, ff = size_t(s.n_ff), vocab = size_t(s.n_vocab);
  DeviceMemory& mem = weights_mem_;
  token_embd_ = mem.allocate_array<uint16_t>(vocab * e, "token_embd");
  output_.bf16 = s.tied_embeddings ? token_embd_ : mem.allocate_array<uint16_t>(vocab * e, "output");
  output_norm_ = mem.allocate_array<float>(e, "output_norm");
  inv_freq_ = mem.allocate_array<double>(hd / 2, "rope frequencies");
  check_cuda(cudaMemcpy(inv_freq_, rope_.inv_freq.data(), hd / 2 * sizeof(double), cudaMemcpyHostToDevice),
             "uploading rope frequencies");
  if (key_bias_split_) {
    const std::vector<float> cs = key_bias_cs_table(rope_.inv_freq, rope_.position_scale);
    key_bias_cs_ = mem.allocate_array<float>(cs.size(), "key bias cos/sin table");
    check_cuda(cudaMemcpy(key_bias_cs_, cs.data(), cs.size() * sizeof(float), cudaMemcpyHostToDevice),
               "uploading the key bias cos/sin table");
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "layer " + std::to_string(l) + " ";
    LayerPtrs d{};
    // W_q, W_k, W_v back to back ([qd + 2·kvd, E]), and W_gate, W_up ([2F, E]): a one-row
    // step reads each group as one matrix, in one product (layer()).
    d.wq.bf16 = mem.allocate_array<uint16_t>((qd + 2 * kvd) * e, p + "wq, wk, wv");
    d.wk.bf16 = d.wq.bf16 + qd * e;
    d.wv.bf16 = d.wk.bf16 + kvd * e;
    d.wo.bf16 = mem.allocate_array<uint16_t>(e * qd, p + "wo");
    d.w_gate.bf16 = mem.allocate_array<uint16_t>(2 * ff * e, p + "w_gate, w_up");
    d.w_up.bf16 = d.w_gate.bf16 + ff * e;
    d.w_down.bf16 = mem.allocate_array<uint16_t>(e * ff, p + "w_down");
    d.attn_norm = mem.allocate_array<float>(e, p + "attn_norm");
    d.ffn_norm = mem.allocate_array<float>(e, p + "ffn_norm");
    if (s.qkv_bias) {
      d.bq = mem.allocate_array<float>(qd + 2 * kvd, p + "bq, bk, bv");
      d.bk = d.bq + qd;
      d.bv = d.bk + kvd;
    }
    if (s.qk_norm) {
      d.q_norm = mem.allocate_array<float>(hd, p + "q_norm");
      d.k_norm = mem.allocate_array<float>(hd, p + "k_norm");
    }
    auto rotation = [&](const std::vector<std::vector<float>>& rots, const char* name) -> float* {
      if (rots.empty() || rots[size_t(l)].empty()) return nullptr;
      float* r = mem.allocate_array<float>(hd * hd, p + name);
      check_cuda(cudaMemcpy(r, rots[size_t(l)].data(), hd * hd * 4, cudaMemcpyHostToDevice), "uploading " + p + name);
      return r;
    };
    d.rot_k = rotation(kv_.rot_k, "R_K");
    d.rot_v = rotation(kv_.rot_v, "R_V");
    d.k_shift = nullptr;
    if (!kv_.k_shift.empty() && !kv_.k_shift[size_t(l)].empty()) {
      d.k_shift = mem.allocate_array<float>(kvd, p + "k_shift");
      check_cuda(cudaMemcpy(d.k_shift, kv_.k_shift[size_t(l)].data(), kvd * 4, cudaMemcpyHostToDevice),
                 "uploading " + p + "k_shift");
    }
    layers_.push_back(d);
  }
}

void DeviceModel::allocate_activations() {
  const ModelDims& s = dims_;
  const size_t b = size_t(max_rows_), qd = size_t(s.n_heads) * size_t(s.head_dim),
               kvd = size_t(s.n_kv_heads) * size_t(s.head_dim);
  DeviceMemory& mem = act_mem_;
  auto f32 = [&](size_t n, const char* name) { return mem.allocate_array<float>(b * n, name); };
  x_ = f32(size_t(s.n_embd), "activations");
  h_ = f32(size_t(s.n_embd), "activations");
  q_ = f32(qd, "activations");
  q_rot_ = f32(qd, "activations");
  att_ = f32(qd, "activations");
  att_rot_ = f32(qd, "activations");
  k_ = f32(kvd, "activations");
  v_ = f32(kvd, "activations");
  gate_ = f32(size_t(s.n_ff), "activations");
  up_ = f32(size_t(s.n_ff), "activations");
  if (key_bias_split_) key_bias_coef_ = f32(qd, "key bias coefficients");
  logits_ = mem.allocate_array<float>(size_t(logits_rows_) * size_t(s.n_vocab), "logits");
  h16_ = mem.allocate_array<uint16_t>(b * size_t(s.n_embd), "activations");
  gate16_ = mem.allocate_array<uint16_t>(b * size_t(s.n_ff), "activations");
  next_ids_ = mem.allocate_array<int32_t>(b, "next ids");
  uniforms_ = mem.allocate_array<double>(b, "sampling uniforms");
  d_inputs_ = mem.allocate_array<int32_t>(b * kNumInputs, "step inputs");
  check_cuda(cudaMallocHost(&h_inputs_, b * kNumInputs * sizeof(int32_t)), "cudaMallocHost(step inputs)");
  std::memset(h_inputs_, 0, b * kNumInputs * sizeof(int32_t));
  auto in = [&](Input i) { return d_inputs_ + size_t(i) * b; };
  ids_ = in(kIds), pos_ = in(kPos), seq_len_ = in(kSeqLen), hist_end_ = in(kHistEnd);
  demote_from_ = in(kDemoteFrom), demote_to_ = in(kDemoteTo), slots_ = in(kSlots), bad_id_ = in(kBadId);
  last_row_ = in(kLastRow);
  x_last_ = mem.allocate_array<float>(size_t(logits_rows_) * size_t(s.n_embd), "activations");
  qkv1_ = mem.allocate_array<float>(qd + 2 * kvd, "activations");
  gate_up1_ = mem.allocate_array<float>(2 * size_t(s.n_ff), "activations");
  fp_blocks_ = mem.allocate_array<int32_t>(b * size_t(cache_->fp_stride()), "batch page tables");
  hist_blocks_ = mem.allocate_array<int32_t>(b * size_t(cache_->hist_stride()), "batch page tables");
  // A layer's pools never move, so its demotion record is made once.
  std::vector<DemoteLayer> demote;
  DemoteParams shared = demote_params(1);
  for (int l = 0; l < s.n_layers; ++l) {
    if (kv_.bits(l) == 0) continue;
    DemoteLayer d;
    d.fp_k = cache_->fp_k(l), d.fp_v = cache_->fp_v(l), d.hist_k = cache_->hist_k(l), d.hist_v = cache_->hist_v(l);
    d.bits = kv_.bits(l), d.k_clip = kv_.k_clip[size_t(l)], d.v_clip = kv_.v_clip[size_t(l)];
    check_demote_layer(shared, d);
    demote.push_back(d);
  }
  n_demote_layers_ = int(demote.size());
  if (n_demote_layers_ > 0) {
    demote_layers_ = mem.allocate_array<DemoteLayer>(demote.size(), "demotion records");
    check_cuda(cudaMemcpy(demote_layers_, demote.data(), demote.size() * sizeof(DemoteLayer), cudaMemcpyHostToDevice),
               "uploading demotion records");
  }
}

// The fields of a demotion every quantized layer shares, for `batch` sequences.
DemoteParams DeviceModel::demote_params(int batch) const {
  DemoteParams dp;
  dp.batch = batch, dp.n_kv_heads = dims_.n_kv_heads, dp.head_dim = dims_.head_dim, dp.group = kv_.group;
  dp.sink = kv_.sink;
  dp.max_rows = 1;  // the window moves by one token per step
  dp.hist_from = demote_from_, dp.hist_to = demote_to_;
  dp.fp_blocks = fp_blocks_, dp.fp_blocks_stride = cache_->fp_stride();
  dp.hist_blocks = hist_blocks_, dp.hist_blocks_stride = cache_->hist_stride();
  return dp;
}

void DeviceModel::check_tokens(const std::vector<int32_t>& tokens, const char* what) const {
  for (const int32_t t : tokens)
    if (t < 0 || t >= dims_.n_vocab)
      fail(what, "token id " + std::to_string(t) + " outside [0, " + std::to_string(dims_.n_vocab) + ")");
}

void DeviceModel::check_slots(const std::vector<int>& slots, const char* what) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!cache_->active(slots[i])) fail(what, "sequence slot " + std::to_string(slots[i]) + " is not active");
    for (size_t j = 0; j < i; ++j)
      if (slots[j] == slots[i]) fail(what, "sequence slot " + std::to_string(slots[i]) + " appears twice");
  }
}

int64_t DeviceModel::stage_rows(const std::vector<int>& slots, const std::vector<int32_t>& tokens,
                                const std::vector<int64_t>& positions) {
  const size_t b = size_t(max_rows_);
  int64_t max_len = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t t = positions[i];
    max_len = std::max(max_len, t + 1);
    h_inputs_[kIds * b + i] = tokens[i];
    h_inputs_[kPos * b + i] = int32_t(t);
    h_inputs_[kSeqLen * b + i] = int32_t(t + 1);
    h_inputs_[kHistEnd * b + i] = int32_t(cache_->history_end(t + 1));
    h_inputs_[kDemoteFrom * b + i] = int32_t(cache_->history_end(t));
    h_inputs_[kDemoteTo * b + i] = int32_t(cache_->history_end(t + 1));
    h_inputs_[kSlots * b + i] = slots[i];
  }
  check_cuda(cudaMemcpyAsync(d_inputs_, h_inputs_, b * kNumInputs * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
             "uploading step inputs");
  return max_len;
}

void DeviceModel::ensure_prefill_scratch(int64_t hist_end) {
  PrefillAttentionParams p;
  p.n_kv_heads = dims_.n_kv_heads, p.head_dim = dims_.head_dim, p.sink = kv_.sink, p.max_hist_end = int(hist_end);
  p.bits = kv_.any_history() ? 2 : 0;
  const size_t need = prefill_attention_scratch_bytes(p);
  if (need > prefill_scratch_bytes_) regrow(&prefill_scratch_, &prefill_scratch_bytes_, need, "prefill history scratch");
}

void DeviceModel::ensure_workspace(int rows, int64_t bound) {
  DecodeAttentionParams p;
  p.batch = rows, p.n_heads = dims_.n_heads, p.n_kv_heads = dims_.n_kv_heads, p.head_dim = dims_.head_dim;
  p.group = kv_.group, p.sink = kv_.sink, p.max_seq_len = bound;
  p.tensor_cores = precision_ == GemmPrecision::bf16;
  size_t need = 0;
  for (int l = 0; l < kv_.n_layers(); ++l) {
    const int bits = kv_.bits(l);
    p.bits = bits;  // the chunk depends on the window bound too: the same as layer() sets
    p.max_window_keys = bits == 0 ? 0 : std::min<int64_t>(bound, int64_t(kv_.sink) + kv_.window + kDecodeFpBlockTokens);
    p.chunk_keys = decode_attention_default_chunk(p, n_sm_);
    need = std::max(need, decode_attention_workspace_bytes(p));
  }
  // The decode kernels' key-bias scores: rows × heads × the key bound.
  const size_t need_bias = key_bias_split_ ? size_t(rows) * size_t(dims_.n_heads) * size_t(bound) * sizeof(float) : 0;
  if (need <= attn_workspace_bytes_ && need_bias <= key_bias_scores_bytes_) return;
  // A larger workspace moves it: graphs captured with the old one are dropped.
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  if (need > attn_workspace_bytes_) regrow(&attn_workspace_, &attn_workspace_bytes_, need, "attention workspace");
  if (need_bias > key_bias_scores_bytes_)
    regrow(&key_bias_scores_, &key_bias_scores_bytes_, need_bias, "key bias scores");
}

// A power-of-two bound on the keys sizes the attention grid (and keys the graphs); plain
// steps use it too, so that both split the keys alike and give the same bits.
int64_t DeviceModel::key_bound(int64_t max_len) const {
  int64_t bound = 256;
  while (bound < max_len) bound *= 2;
  return std::min(bound, cache_->max_seq_len());
}

void DeviceModel::step(const std::vector<int>& slots, const std::vector<int32_t>& tokens, bool use_graph) {
  const char* what = "DeviceModel::step";
  const int batch = int(slots.size());
  if (batch == 0) return;
  if (batch > max_seqs_) fail(what, std::to_string(batch) + " sequences, more than max_seqs " + std::to_string(max_seqs_));
  if (tokens.size() != slots.size()) fail(what, "one token per sequence slot is needed");
  check_tokens(tokens, what);
  check_slots(slots, what);
  // The previous step's input copy must have left the pinned staging before it is rewritten.
  check_cuda(cudaStreamSynchronize(stream_), what);
  // Throws when full, before anything runs; pages reserved for the slots before stay with
  // them (their next token uses them).
  for (int i = 0; i < batch; ++i) cache_->begin_token(slots[size_t(i)]);
  std::vector<int64_t> positions;
  for (int i = 0; i < batch; ++i) positions.push_back(cache_->length(slots[size_t(i)]));
  Plan plan;
  plan.rows = plan.n_decode = batch;
  plan.bound = key_bound(stage_rows(slots, tokens, positions));
  prepare_attention(plan);
  if (!use_graph) {
    run_plan(plan, 0);
  } else {
    const auto key = std::make_pair(batch, plan.bound);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      run_plan(plan, 0);  // first use runs directly (one-time setup stays out of the graph)
      cudaGraph_t graph = nullptr;
      check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      try {
        run_plan(plan, 0);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      check_cuda(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
      cudaGraphExec_t exec = nullptr;
      const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      check_cuda(e, "cudaGraphInstantiate");
      graphs_.emplace(key, exec);
    } else {
      check_cuda(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
    }
  }
  for (int i = 0; i < batch; ++i) cache_->end_token(slots[size_t(i)]);
}

void DeviceModel::prefill(int slot, const std::vector<int32_t>& tokens, std::vector<float>* all_logits,
                          int64_t logits_from) {
  const char* what = "DeviceModel::prefill";
  if (all_logits) all_logits->clear();
  if (!cache_->active(slot)) fail(what, "sequence slot " + std::to_string(slot) + " is not active");
  check_tokens(tokens, what);
  for (size_t c0 = 0; c0 < tokens.size(); c0 += size_t(prefill_chunk_)) {
    const int n = int(std::min<size_t>(size_t(prefill_chunk_), tokens.size() - c0));
    const std::vector<int32_t> chunk(tokens.begin() + long(c0), tokens.begin() + long(c0) + n);
    check_cuda(cudaStreamSynchronize(stream_), what);
    cache_->begin_tokens(slot, n);  // throws when full: nothing of this chunk has run
    const int64_t t0 = cache_->length(slot);
    std::vector<int64_t> positions;
    for (int i = 0; i < n; ++i) positions.push_back(t0 + i);
    // Each token is a row of its own with its own view of the keys (as decode shows it),
    // all rows reading the one slot's page tables.
    Plan plan;
    plan.rows = n;
    plan.prefill.push_back({0, n, cache_->history_end(t0 + n)});
    plan.bound = key_bound(stage_rows(std::vector<int>(size_t(n), slot), chunk, positions));
    prepare_attention(plan);
    // Logits for the rows at or past logits_from (all_logits), else the last row's only.
    const int from = all_logits ? int(std::clamp<int64_t>(logits_from - int64_t(c0), 0, n - 1)) : n - 1;
    run_plan(plan, /*logits_from=*/n);  // the logits below, in slices of the logits buffer
    cache_->end_tokens(slot, n);
    const bool keep = all_logits && int64_t(c0) + n > logits_from;
    int last = 0;  // rows of the last slice
    for (int a = from; a < n; a += logits_rows_) {
      last = std::min(n, a + logits_rows_) - a;
      compute_logits(a, a + last);
      if (keep) {
        const std::vector<float> rows = download_logits(last);
        all_logits->insert(all_logits->end(), rows.begin(), rows.end());
      }
    }
    // The next id of the launch is the last row's (the others' ids are not kept).
    if (last > 1) argmax_rows(logits_ + int64_t(last - 1) * dims_.n_vocab, 1, dims_.n_vocab, next_ids_, stream_);
  }
}

void DeviceModel::prepare_attention(const Plan& p) {
  // bf16: prefill segments through prefill_attention; f32 products: every row through the
  // decode kernel (each row its own view of the keys, in f32).
  const bool flash = precision_ == GemmPrecision::bf16;
  const int decode_rows = flash ? p.n_decode : p.rows;
  if (decode_rows > 0) ensure_workspace(decode_rows, p.bound);
  int64_t hist_end = 0;
  for (const Segment& g : p.prefill) hist_end = std::max(hist_end, g.hist_end);
  if (flash && !p.prefill.empty()) ensure_prefill_scratch(hist_end);
}

void DeviceModel::forward(const std::vector<int>& slots, const std::vector<int32_t>& starts,
                          const std::vector<int32_t>& tokens, bool use_graph,
                          const std::vector<int64_t>& token_logits_from, std::vector<float>* token_logits) {
  const char* what = "DeviceModel::forward";
  const int n_seqs = int(slots.size());
  if (token_logits) token_logits->clear();
  if (n_seqs == 0) return;
  if (starts.size() != slots.size() + 1 || starts.front() != 0 || starts.back() != int32_t(tokens.size()))
    fail(what, "starts must run from 0 to the token count, one more than the slots");
  if (!token_logits_from.empty() && (token_logits_from.size() != slots.size() || !token_logits))
    fail(what, "token_logits_from needs one entry per sequence and an output");
  bool all_decode = true;
  for (int i = 0; i < n_seqs; ++i) {
    const int32_t n = starts[size_t(i) + 1] - starts[size_t(i)];
    if (n < 1) fail(what, "sequence " + std::to_string(i) + " has no tokens");
    if (!token_logits_from.empty() && token_logits_from[size_t(i)] >= n)
      fail(what, "token_logits_from " + std::to_string(token_logits_from[size_t(i)]) + " past sequence " +
                     std::to_string(i) + "'s " + std::to_string(n) + " tokens");
    all_decode = all_decode && n == 1;
  }
  const auto wants = [&](int i) { return !token_logits_from.empty() && token_logits_from[size_t(i)] >= 0; };
  if (all_decode) {
    step(slots, tokens, use_graph);
    bool any = false;
    for (int i = 0; i < n_seqs; ++i) any = any || wants(i);
    if (any) {  // a one-token sequence's token logits are its step row
      const std::vector<float> all = download_logits(n_seqs);
      const size_t V = size_t(dims_.n_vocab);
      for (int i = 0; i < n_seqs; ++i)
        if (wants(i)) token_logits->insert(token_logits->end(), all.begin() + long(size_t(i) * V), all.begin() + long(size_t(i + 1) * V));
    }
    return;
  }
  if (int64_t(tokens.size()) > max_rows_)
    fail(what, std::to_string(tokens.size()) + " rows, more than " + std::to_string(max_rows_));
  if (n_seqs > logits_rows_)
    fail(what, std::to_string(n_seqs) + " sequences, more than the logits buffer's " + std::to_string(logits_rows_));
  check_tokens(tokens, what);
  check_slots(slots, what);
  check_cuda(cudaStreamSynchronize(stream_), what);  // the pinned inputs are free again
  // Rows: the one-token sequences first (the decode kernel takes rows [0, n_decode)), then
  // each longer one's tokens in order.
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < n_seqs; ++i)
      if ((starts[size_t(i) + 1] - starts[size_t(i)] == 1) == (pass == 0)) order.push_back(i);
  for (int i : order) cache_->begin_tokens(slots[size_t(i)], starts[size_t(i) + 1] - starts[size_t(i)]);
  Plan plan;
  std::vector<int> row_slots, last_row(static_cast<size_t>(n_seqs));
  std::vector<int32_t> row_tokens;
  std::vector<int64_t> positions;
  for (int i : order) {
    const int slot = slots[size_t(i)], n = starts[size_t(i) + 1] - starts[size_t(i)];
    const int64_t t0 = cache_->length(slot);
    if (n == 1) ++plan.n_decode;
    else plan.prefill.push_back({int(row_slots.size()), n, cache_->history_end(t0 + n)});
    for (int k = 0; k < n; ++k) {
      row_slots.push_back(slot);
      row_tokens.push_back(tokens[size_t(starts[size_t(i)] + k)]);
      positions.push_back(t0 + k);
    }
    last_row[size_t(i)] = int(row_slots.size()) - 1;
    h_inputs_[size_t(kLastRow) * size_t(max_rows_) + size_t(i)] = int32_t(last_row[size_t(i)]);
  }
  plan.rows = int(row_slots.size());
  plan.bound = key_bound(stage_rows(row_slots, row_tokens, positions));  // uploads kLastRow too
  prepare_attention(plan);
  run_plan(plan, /*logits_from=*/plan.rows);
  for (int i = 0; i < n_seqs; ++i) {
    if (!wants(i)) continue;
    const int n = starts[size_t(i) + 1] - starts[size_t(i)], last = last_row[size_t(i)];
    for (int a = last - n + 1 + int(token_logits_from[size_t(i)]); a <= last; a += logits_rows_) {
      const int b = std::min(last + 1, a + logits_rows_);
      compute_logits(a, b);
      const std::vector<float> rows = download_logits(b - a);
      token_logits->insert(token_logits->end(), rows.begin(), rows.end());
    }
  }
  compute_logits_gathered(n_seqs);
  for (int i : order) cache_->end_tokens(slots[size_t(i)], starts[size_t(i) + 1] - starts[size_t(i)]);
}

void DeviceModel::compute_logits_gathered(int n) {
  const ModelDims& s = dims_;
  gather_rows<<<unsigned(n), 256, 0, stream_>>>(x_, last_row_, s.n_embd, x_last_);
  check_launch("DeviceModel: last rows");
  rmsnorm(x_last_, output_norm_, h_, n, s.n_embd, s.rms_eps, stream_, h16_);
  mm(output_, h_, h16_, nullptr, logits_, n, s.n_embd, s.n_vocab);
  argmax_rows(logits_, n, s.n_vocab, next_ids_, stream_);
}

void DeviceModel::run_plan(const Plan& p, int logits_from) {
  const ModelDims& s = dims_;
  const int batch = p.rows;
  const bool decode = p.n_decode == p.rows;
  const dim3 tgrid_fp(unsigned((cache_->fp_stride() + 255) / 256), unsigned(batch));
  gather_tables<<<tgrid_fp, 256, 0, stream_>>>(cache_->fp_table_device(), slots_, fp_blocks_, cache_->fp_stride());
  const dim3 tgrid_h(unsigned((cache_->hist_stride() + 255) / 256), unsigned(batch));
  gather_tables<<<tgrid_h, 256, 0, stream_>>>(cache_->hist_table_device(), slots_, hist_blocks_, cache_->hist_stride());
  check_launch("DeviceModel: page tables");
  embed_bf16(token_embd_, s.n_vocab, s.n_embd, ids_, batch, x_, bad_id_, stream_);
  // A decode step demotes the row h(t) = t − W of each sequence (docs/kv-layout.md §8): with a
  // window W ≥ 1 it was written by an earlier step, so every layer's demotion can run here,
  // in one launch, instead of one launch per layer after its prologue. A prefill launch
  // demotes rows it writes itself, and W = 0 the step's own token: those stay per layer.
  demote_hoisted_ = decode && kv_.window >= 1 && n_demote_layers_ > 0;
  if (demote_hoisted_) demote_to_history_layers(demote_params(batch), demote_layers_, n_demote_layers_, stream_);
  for (int l = 0; l < s.n_layers; ++l) layer(l, p);
  demote_hoisted_ = false;
  if (logits_from < batch) compute_logits(logits_from, batch);
}

void DeviceModel::compute_logits(int from, int to) {
  const ModelDims& s = dims_;
  const int rows = to - from;
  if (rows > logits_rows_) fail("DeviceModel", "logits of " + std::to_string(rows) + " rows at once (buffer: " +
                                                   std::to_string(logits_rows_) + ")");
  rmsnorm(x_ + int64_t(from) * s.n_embd, output_norm_, h_, rows, s.n_embd, s.rms_eps, stream_, h16_);
  mm(output_, h_, h16_, nullptr, logits_, rows, s.n_embd, s.n_vocab);
  argmax_rows(logits_, rows, s.n_vocab, next_ids_, stream_);
}

void DeviceModel::layer(int l, const Plan& p) {
  const ModelDims& s = dims_;
  const int batch = p.rows;
  const int64_t bound = p.bound;
  const LayerPtrs& w = layers_[size_t(l)];
  const int d = s.head_dim, qd = s.n_heads * d, kvd = s.n_kv_heads * d;
  const int bits = kv_.bits(l);
  DeviceKvCache& c = *cache_;

  // BF16 copies of the matrix inputs come out of the kernel before (rmsnorm, swiglu), and
  // the residual adds ride on the products' epilogue (y += x·Wᵀ).
  rmsnorm(x_, w.attn_norm, h_, batch, s.n_embd, s.rms_eps, stream_, h16_);
  // One row: q, k and v from one product over the stacked W_q, W_k, W_v (a row's outputs are
  // then contiguous); more rows: three products into their own buffers.
  const bool one_row = batch == 1 && precision_ == GemmPrecision::bf16;
  float *q_in = q_, *k_in = k_, *v_in = v_;
  if (one_row) {
    const Matrix wqkv{w.wq.bf16, nullptr};
    mm(wqkv, h_, h16_, w.bq, qkv1_, 1, s.n_embd, qd + 2 * kvd);
    q_in = qkv1_, k_in = qkv1_ + qd, v_in = qkv1_ + qd + kvd;
  } else {
    mm(w.wq, h_, h16_, w.bq, q_, batch, s.n_embd, qd);
    mm(w.wk, h_, h16_, w.bk, k_, batch, s.n_embd, kvd);
    mm(w.wv, h_, h16_, w.bv, v_, batch, s.n_embd, kvd);
  }
  // q/k norm, RoPE, R_K (q and k), R_V (v) and the K/V rows into their fp pages: one launch.
  AttentionPrologueParams pp;
  pp.batch = batch, pp.n_heads = s.n_heads, pp.n_kv_heads = s.n_kv_heads, pp.head_dim = d;
  pp.pos = pos_, pp.q = q_in, pp.k = k_in, pp.v = v_in;
  pp.q_norm = s.qk_norm ? w.q_norm : nullptr, pp.k_norm = s.qk_norm ? w.k_norm : nullptr, pp.eps = s.rms_eps;
  pp.inv_freq = inv_freq_, pp.position_scale = rope_.position_scale, pp.interleaved = rope_.style == RopeStyle::interleaved;
  pp.rot_k = w.rot_k, pp.rot_v = w.rot_v, pp.k_shift = w.k_shift, pp.q_out = q_rot_;
  // --k-bias-split: k without b_k, and each query head's coefficients of its bias scores.
  const bool key_bias = key_bias_split_ && w.bk;
  if (key_bias) pp.k_bias = w.bk, pp.q_coef = key_bias_coef_;
  pp.fp_k = c.fp_k(l), pp.fp_v = c.fp_v(l), pp.fp_blocks = fp_blocks_, pp.fp_blocks_stride = c.fp_stride();
  // A prefill's many rows rotate by R_K in two products (queries, keys) on the tensor cores
  // instead of inside the prologue, which reads R once per CTA (docs/cuda.md, "Attention
  // prologue"). TF32 inputs: the attention kernels round queries, and the cache keys, to
  // BF16 right after. The f32 precision (comparisons with the CPU) keeps the prologue's.
  const bool rotate_by_product = w.rot_k && batch >= kRotateByProductRows && precision_ == GemmPrecision::bf16;
  if (rotate_by_product) {
    pp.rot_k = nullptr, pp.q_out = q_in, pp.k_out = k_in;  // in place: each element read, then written, by one thread
    attention_prologue(pp, stream_);
    linear_->rotate(q_in, w.rot_k, q_rot_, int64_t(batch) * s.n_heads, d, false, /*tf32=*/true);
    // att_ is free until attention.
    linear_->rotate(k_in, w.rot_k, att_, int64_t(batch) * s.n_kv_heads, d, false, /*tf32=*/true);
    write_prologue_keys(pp, att_, stream_);
  } else {
    attention_prologue(pp, stream_);
  }
  if (bits != 0 && !demote_hoisted_) {
    DemoteParams dp = demote_params(batch);
    dp.bits = bits, dp.k_clip = kv_.k_clip[size_t(l)], dp.v_clip = kv_.v_clip[size_t(l)];
    dp.fp_k = c.fp_k(l), dp.fp_v = c.fp_v(l), dp.hist_k = c.hist_k(l), dp.hist_v = c.hist_v(l);
    demote_to_history(dp, stream_);
  }
  const bool flash = precision_ == GemmPrecision::bf16;
  const size_t qrow = size_t(s.n_heads) * size_t(d);
  for (const Segment& g : flash ? p.prefill : std::vector<Segment>{}) {
    // Consecutive tokens of one slot: their first row's page tables are the slot's tables.
    PrefillAttentionParams fa;
    fa.n_tokens = g.n, fa.n_heads = s.n_heads, fa.n_kv_heads = s.n_kv_heads, fa.head_dim = d;
    fa.bits = bits, fa.group = kv_.group, fa.sink = kv_.sink;
    fa.q = q_rot_ + size_t(g.row) * qrow, fa.seq_len = seq_len_ + g.row;
    fa.hist_end = bits == 0 ? nullptr : hist_end_ + g.row;
    fa.fp_k = c.fp_k(l), fa.fp_v = c.fp_v(l), fa.fp_blocks = fp_blocks_ + size_t(g.row) * size_t(c.fp_stride());
    if (bits != 0) {
      fa.hist_k = c.hist_k(l), fa.hist_v = c.hist_v(l);
      fa.hist_blocks = hist_blocks_ + size_t(g.row) * size_t(c.hist_stride());
    }
    fa.max_hist_end = int(g.hist_end), fa.scratch = prefill_scratch_;
    if (key_bias) {
      fa.key_bias.coef = key_bias_coef_ + size_t(g.row) * qrow, fa.key_bias.cs_table = key_bias_cs_;
      fa.key_bias.inv_freq = inv_freq_, fa.key_bias.position_scale = rope_.position_scale;
    }
    fa.out = att_ + size_t(g.row) * qrow;
    prefill_attention(fa, stream_);
  }
  // The decode kernel: the one-token rows [0, n_decode) (f32 products: every row).
  const int decode_rows = flash ? p.n_decode : p.rows;
  if (decode_rows > 0) {
    DecodeAttentionParams ap;
    ap.batch = decode_rows, ap.n_heads = s.n_heads, ap.n_kv_heads = s.n_kv_heads, ap.head_dim = d;
    ap.bits = bits, ap.group = kv_.group, ap.sink = kv_.sink, ap.max_seq_len = bound;
    ap.max_window_keys = bits == 0 ? 0 : std::min<int64_t>(bound, int64_t(kv_.sink) + kv_.window + kDecodeFpBlockTokens);
    ap.tensor_cores = flash;  // f32: every key in f32 on the CUDA cores
    ap.chunk_keys = decode_attention_default_chunk(ap, n_sm_);
    ap.q = q_rot_, ap.seq_len = seq_len_, ap.hist_end = bits == 0 ? nullptr : hist_end_;
    ap.fp_k = c.fp_k(l), ap.fp_v = c.fp_v(l), ap.fp_blocks = fp_blocks_, ap.fp_blocks_stride = c.fp_stride();
    if (bits != 0) {
      ap.hist_k = c.hist_k(l), ap.hist_v = c.hist_v(l), ap.hist_blocks = hist_blocks_;
      ap.hist_blocks_stride = c.hist_stride();
    }
    if (key_bias) {  // every key's q·a_t, in f32, for the kernels to add
      KeyBiasScoresParams kb;
      kb.batch = decode_rows, kb.n_heads = s.n_heads, kb.head_dim = d;
      kb.coef = key_bias_coef_, kb.seq_len = seq_len_;
      kb.inv_freq = inv_freq_, kb.position_scale = rope_.position_scale, kb.cs_table = key_bias_cs_;
      kb.max_seq_len = bound, kb.out = key_bias_scores_, kb.out_stride = bound;
      key_bias_scores(kb, stream_);
      ap.key_bias = key_bias_scores_, ap.key_bias_stride = bound;
    }
    ap.workspace = attn_workspace_, ap.out = att_;
    decode_attention(ap, stream_);
  }
  const float* att = att_;
  if (w.rot_v) {
    linear_->rotate(att_, w.rot_v, att_rot_, int64_t(batch) * s.n_heads, d, /*transpose_r=*/true);
    att = att_rot_;
  }
  mm(w.wo, att, nullptr, nullptr, x_, batch, qd, s.n_embd, /*accumulate=*/true);

  rmsnorm(x_, w.ffn_norm, h_, batch, s.n_embd, s.rms_eps, stream_, h16_);
  if (one_row) {  // gate and up from one product over the stacked W_gate, W_up
    const Matrix wgu{w.w_gate.bf16, nullptr};
    mm(wgu, h_, h16_, nullptr, gate_up1_, 1, s.n_embd, 2 * s.n_ff);
    swiglu(gate_up1_, gate_up1_ + s.n_ff, s.n_ff, stream_, gate16_);
  } else {
    mm(w.w_gate, h_, h16_, nullptr, gate_, batch, s.n_embd, s.n_ff);
    mm(w.w_up, h_, h16_, nullptr, up_, batch, s.n_embd, s.n_ff);
    swiglu(gate_, up_, int64_t(batch) * s.n_ff, stream_, gate16_);
  }
  mm(w.w_down, gate_, gate16_, nullptr, x_, batch, s.n_ff, s.n_embd, /*accumulate=*/true);
}

void DeviceModel::sample(int batch, const SampleParams& p, const std::vector<double>& u) {
  if (batch < 0 || batch > logits_rows_ || u.size() < size_t(batch))
    fail("DeviceModel::sample", "batch " + std::to_string(batch) + " with " + std::to_string(u.size()) + " uniforms");
  check_cuda(cudaMemcpyAsync(uniforms_, u.data(), size_t(batch) * sizeof(double), cudaMemcpyHostToDevice, stream_),
             "uploading uniforms");
  sample_rows(logits_, batch, dims_.n_vocab, p, uniforms_, next_ids_, stream_);
  check_cuda(cudaStreamSynchronize(stream_), "DeviceModel::sample");  // u is pageable host memory
}

std::vector<float> DeviceModel::download_logits(int batch) const {
  std::vector<float> out(size_t(std::max(batch, 0)) * size_t(dims_.n_vocab));
  download_logits(batch, out.data());
  return out;
}

void DeviceModel::download_logits(int batch, float* out) const {
  if (batch < 0 || batch > logits_rows_)
    fail("DeviceModel::download_logits", std::to_string(batch) + " rows (the buffer holds " +
                                             std::to_string(logits_rows_) + ")");
  const size_t bytes = size_t(batch) * size_t(dims_.n_vocab) * 4;
  check_cuda(cudaMemcpyAsync(out, logits_, bytes, cudaMemcpyDeviceToHost, stream_), "download logits");
  check_cuda(cudaStreamSynchronize(stream_), "download logits");
}

std::vector<int32_t> DeviceModel::download_next_ids(int batch) const {
  std::vector<int32_t> out(static_cast<size_t>(batch));
  check_cuda(cudaMemcpyAsync(out.data(), next_ids_, out.size() * 4, cudaMemcpyDeviceToHost, stream_), "download ids");
  check_cuda(cudaStreamSynchronize(stream_), "download ids");
  return out;
}

void DeviceModel::prefill_by_steps(int slot, const std::vector<int32_t>& tokens, std::vector<float>* all_logits) {
  if (all_logits) all_logits->clear();
  const std::vector<int> slots = {slot};
  for (const int32_t tok : tokens) {
    step(slots, {tok}, /*use_graph=*/true);
    if (all_logits) {
      const std::vector<float> row = download_logits(1);
      all_logits->insert(all_logits->end(), row.begin(), row.end());
    }
  }
}

}  // namespace oscar::cuda
