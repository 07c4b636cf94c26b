#include "oscar/model/transformer.h"

#include <algorithm>
#include <functional>

#include "oscar/attention/attention.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/kv/history_formats.h"
#include "oscar/model/rotation_absorb.h"
#include "oscar/ops/activation.h"
#include "oscar/ops/matmul.h"
#include "oscar/ops/norm.h"

namespace oscar {

namespace {

// The row-wise steps of a multi-row pass (prefill) spread over the pool; each row is
// computed exactly as alone, so results do not depend on the split. One row runs inline.
void for_rows(int64_t rows, const std::function<void(int64_t, int64_t)>& fn) {
  if (rows <= 1) return fn(0, rows);
  default_pool().parallel_for(rows, 8, fn);
}

void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) {
  for_rows(rows, [&](int64_t r0, int64_t r1) { rmsnorm(x + r0 * n, w, y + r0 * n, r1 - r0, n, eps); });
}

}  // namespace

Transformer::Transformer(ModelWeights weights)
    : w_(std::move(weights)), rope_(rope_freqs(w_.config)) {
  set_kv_format({}, {});
}

KvShape Transformer::kv_shape() const {
  return KvShape{config().n_layers, config().n_kv_heads, config().head_dim};
}

void Transformer::configure_kv(const KvSpec& spec, const RotationSet* rotations, bool absorb_v) {
  // Reconfiguring is fine (calibration compares KV types on one model) unless R_V went into
  // the weights: those cannot be taken back out.
  OSCAR_CHECK(!(rotation_.active() && rotation_.v_absorbed()), "configure_kv called again after R_V was absorbed");
  spec.validate();
  const ModelConfig& c = config();
  spec.validate_layers(c.n_layers);
  const bool calibrated = spec.uses_rotation(KvRotation::calibrated, c.n_layers);
  if (calibrated && rotations == nullptr)
    fail("KV type '{}' needs calibrated rotations (--rotations DIR|GGUF, made by `oscar calibrate`)", spec.name());
  if (calibrated && (rotations->head_dim != c.head_dim || int(rotations->layers.size()) != c.n_layers))
    fail("rotations are for {} layers of head_dim {}, the model has {} layers of head_dim {}",
         rotations->layers.size(), rotations->head_dim, c.n_layers, c.head_dim);
  // With --kv-layers only the OSCAR layers take the set's matrices: the others' are
  // dropped (empty = identity), so R_V is absorbed into those layers' W_v / W_o alone.
  std::optional<RotationSet> masked;
  if (calibrated && spec.mixed()) {
    masked = *rotations;
    for (int l = 0; l < c.n_layers; ++l)
      if (spec.layer_rotation(l) != KvRotation::calibrated) {
        masked->layers[size_t(l)].k_rotation.clear();
        masked->layers[size_t(l)].v_rotation.clear();
      }
  }
  const RotationSet* rs = !calibrated ? nullptr : masked ? &*masked : rotations;
  // Quantized weights cannot take R_V without requantizing: values rotate at run time then
  // (v·R_V after W_v, o·R_Vᵀ before W_o; d² multiply-adds per head and token).
  absorb_v = absorb_v && w_.v_rotation_absorbable();
  KvRotator rotator = KvRotator::for_spec(spec, c.n_layers, c.head_dim, rs, absorb_v);  // checks before absorbing
  check_key_scale_available(spec, rs, c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {  // size checks, also before absorbing
    layer_key_mean(spec, rs, l, c.n_kv_heads, c.head_dim);
    layer_key_scale(spec, rs, l, c.n_kv_heads, c.head_dim);
  }
  if (rs && absorb_v) absorb_v_rotation(w_, *rs);
  rotation_ = std::move(rotator);
  kv_spec_ = spec;
  std::vector<std::vector<float>> key_shift(size_t(c.n_layers)), key_scale(size_t(c.n_layers));
  const int64_t kvd = int64_t(c.n_kv_heads) * c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) {
    const float* s = layer_key_scale(spec, rs, l, c.n_kv_heads, c.head_dim);
    if (s) key_scale[size_t(l)].assign(s, s + kvd);
    if (const float* m = layer_key_mean(spec, rs, l, c.n_kv_heads, c.head_dim)) {
      std::vector<float>& shift = key_shift[size_t(l)];
      shift.assign(m, m + kvd);  // (m ⊘ s)·R_K: the shift of the stored key
      if (s) unscale_key_rows(s, c.n_kv_heads, c.head_dim, shift.data(), 1);
      rotation_.rotate_k(l, shift.data(), c.n_kv_heads);
    }
  }
  k_formats_.clear();
  v_formats_.clear();
  if (spec.quantized()) {
    auto [kf, vf] = make_history_formats(spec, kv_shape(), rs);
    k_formats_ = std::move(kf);
    v_formats_ = std::move(vf);
  }
  set_kv_format(std::move(key_shift), std::move(key_scale));
}

void Transformer::set_kv_format(std::vector<std::vector<float>> k_shift, std::vector<std::vector<float>> k_scale) {
  const ModelConfig& c = config();
  KvFormat f;
  f.sink = kv_spec_.sink;
  f.window = kv_spec_.recent;
  f.group = std::min(kv_spec_.group, c.head_dim);
  // The layers with a key bias cache k − RoPE(b_k, t)·R_K and add q·a_t back (key_bias.h).
  f.k_bias_split = kv_spec_.k_bias_split && c.qkv_bias;
  const bool history = !k_formats_.empty();
  for (int l = 0; l < c.n_layers; ++l) {
    f.k_quant.push_back(history ? k_formats_[size_t(l)].quant : KvQuant::none);
    f.v_quant.push_back(history ? v_formats_[size_t(l)].quant : KvQuant::none);
    f.k_clip.push_back(history ? k_formats_[size_t(l)].clip : 0.0f);
    f.v_clip.push_back(history ? v_formats_[size_t(l)].clip : 0.0f);
    f.rot_k.push_back(rotation_.k_matrix(l));
    f.rot_v.push_back(rotation_.v_matrix(l));
  }
  // The per-layer lists that hold nothing anywhere are left empty.
  const auto none = [](const std::vector<std::vector<float>>& v) {
    return std::all_of(v.begin(), v.end(), [](const std::vector<float>& x) { return x.empty(); });
  };
  if (none(f.rot_v)) f.rot_v.clear();
  if (!none(k_shift)) f.k_shift = std::move(k_shift);
  if (!none(k_scale)) f.k_scale = std::move(k_scale);
  kv_format_ = std::move(f);
}

KvCache Transformer::make_cache(int64_t capacity_tokens) const {
  return KvCache(kv_shape(), kv_spec_, capacity_tokens, k_formats_, v_formats_);
}

KvCache Transformer::make_cache(KvPages pages) const {
  return KvCache(kv_shape(), kv_spec_, pages, k_formats_, v_formats_);
}

void Transformer::check_cache(const KvCache& cache) const {
  for (int l = 0; l < config().n_layers; ++l)
    if (cache.spec().layer_rotation(l) != kv_spec_.layer_rotation(l))
      fail("KV cache of type '{}' does not match the model's configured KV type '{}'", cache.spec().name(),
           kv_spec_.name());
}

void Transformer::forward(KvCache& cache, SeqId seq, std::span<const int32_t> tokens, LogitsFor which,
                          std::vector<float>& logits, int64_t logits_from) {
  const ModelConfig& c = config();
  const int64_t n = int64_t(tokens.size()), E = c.n_embd;
  OSCAR_CHECK(n > 0, "forward needs at least one token");
  OSCAR_CHECK(logits_from >= 0 && logits_from < n, "logits_from {} outside [0, {})", logits_from, n);
  const SeqTokens one[1] = {SeqTokens{seq, tokens}};
  begin_pass(cache, one);
  run_layers(cache);
  cache.commit(seq, n);

  const int64_t first = which == LogitsFor::last ? n - 1 : logits_from, rows = n - first;
  rmsnorm(x_.data() + first * E, w_.output_norm.data(), h_.data(), rows, E, c.rms_eps);
  logits.resize(size_t(rows * c.n_vocab));
  qmat::linear(w_.output_matrix(), h_.data(), nullptr, logits.data(), rows);
}

void Transformer::forward_batch(KvCache& cache, std::span<const SeqTokens> seqs, std::vector<float>& logits,
                                std::span<const int64_t> token_logits_from, std::vector<float>* token_logits) {
  const ModelConfig& c = config();
  const int64_t E = c.n_embd;
  OSCAR_CHECK(token_logits_from.empty() || (token_logits_from.size() == seqs.size() && token_logits),
              "token_logits_from needs one entry per sequence and an output");
  for (size_t i = 0; i < token_logits_from.size(); ++i)
    OSCAR_CHECK(token_logits_from[i] < int64_t(seqs[i].tokens.size()), "token_logits_from {} past the sequence's {} tokens",
                token_logits_from[i], seqs[i].tokens.size());
  const std::vector<int64_t> last_row = begin_pass(cache, seqs);
  run_layers(cache);
  for (const RowSpan& sp : spans_) cache.commit(sp.seq, sp.n);
  if (token_logits) token_logits->clear();
  for (size_t i = 0; i < token_logits_from.size(); ++i) {
    if (token_logits_from[i] < 0) continue;
    // The sequence's rows end at its last row; the same products as forward(LogitsFor::all).
    const int64_t n = int64_t(seqs[i].tokens.size()), rows = n - token_logits_from[i];
    const int64_t first = last_row[i] - rows + 1;
    rmsnorm(x_.data() + first * E, w_.output_norm.data(), h_.data(), rows, E, c.rms_eps);
    const size_t at = token_logits->size();
    token_logits->resize(at + size_t(rows * c.n_vocab));
    qmat::linear(w_.output_matrix(), h_.data(), nullptr, token_logits->data() + at, rows);
  }

  const int64_t B = int64_t(seqs.size());
  std::vector<float> last(size_t(B * E));
  for (int64_t i = 0; i < B; ++i) std::copy_n(x_.data() + last_row[size_t(i)] * E, E, last.data() + i * E);
  rmsnorm(last.data(), w_.output_norm.data(), h_.data(), B, E, c.rms_eps);
  logits.resize(size_t(B * c.n_vocab));
  qmat::linear_decode(w_.output_matrix(), h_.data(), nullptr, logits.data(), B);
}

std::vector<int64_t> Transformer::begin_pass(KvCache& cache, std::span<const SeqTokens> seqs) {
  const ModelConfig& c = config();
  const int64_t E = c.n_embd;
  OSCAR_CHECK(!seqs.empty(), "a forward pass needs at least one sequence");
  check_cache(cache);
  // Every sequence's pages up front, checked together: a pass either runs whole or not at all.
  KvPages need;
  int64_t n_tokens = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    OSCAR_CHECK(!seqs[i].tokens.empty(), "sequence {} has no tokens in the pass", seqs[i].seq);
    for (size_t j = 0; j < i; ++j) OSCAR_CHECK(seqs[j].seq != seqs[i].seq, "sequence {} twice in a batch", seqs[i].seq);
    for (int32_t id : seqs[i].tokens)
      if (id < 0 || id >= c.n_vocab) fail("token id {} out of range [0, {})", id, c.n_vocab);
    const KvPages p = cache.reserve_need(seqs[i].seq, int64_t(seqs[i].tokens.size()));
    n_tokens += int64_t(seqs[i].tokens.size());
    need.fp += p.fp;
    need.history += p.history;
  }
  const KvPages free = cache.free_pages();
  if (need.fp > free.fp || need.history > free.history)
    fail("KV cache full: {} new tokens need {} fp and {} history pages, {} and {} are free", n_tokens, need.fp,
         need.history, free.fp, free.history);
  // Decode spans first so that their rows form one block for the decode products
  // (qmat::linear_decode).
  std::vector<size_t> order(seqs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return seqs[i].tokens.size() == 1; });
  spans_.clear();
  n_rows_ = n_decode_rows_ = 0;
  std::vector<int64_t> last_row(seqs.size());
  for (size_t i : order) {
    const int64_t n = int64_t(seqs[i].tokens.size());
    spans_.push_back(RowSpan{seqs[i].seq, n_rows_, n, cache.length(seqs[i].seq)});
    if (n == 1) ++n_decode_rows_;
    n_rows_ += n;
    last_row[i] = n_rows_ - 1;
  }
  for (const SeqTokens& st : seqs) OSCAR_CHECK(cache.reserve(st.seq, int64_t(st.tokens.size())), "reserve after check");
  x_.resize(size_t(n_rows_ * E));
  for (size_t k = 0; k < spans_.size(); ++k) {
    const SeqTokens& st = seqs[order[k]];
    for (int64_t t = 0; t < spans_[k].n; ++t) {
      const int64_t id = st.tokens[size_t(t)];
      w_.token_embd.dequantize_rows(id, id + 1, x_.data() + (spans_[k].row0 + t) * E);
    }
  }
  return last_row;
}

void Transformer::run_layers(KvCache& cache) {
  const ModelConfig& c = config();
  const int64_t n = n_rows_;
  const int64_t qd = int64_t(c.n_heads) * c.head_dim, kvd = int64_t(c.n_kv_heads) * c.head_dim;
  h_.resize(size_t(n * c.n_embd));
  q_.resize(size_t(n * qd));
  k_.resize(size_t(n * kvd));
  v_.resize(size_t(n * kvd));
  att_.resize(size_t(n * qd));
  proj_.resize(size_t(n * c.n_embd));
  gate_.resize(size_t(n * c.n_ff));
  up_.resize(size_t(n * c.n_ff));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    attention_block(cache, layer);
    mlp_block(layer);
  }
}

void Transformer::linear(const float* x, const WeightMatrix& w, const float* bias, float* y) const {
  const int64_t nd = n_decode_rows_, rest = n_rows_ - n_decode_rows_, k = w.cols(), n = w.rows();
  if (nd > 0) qmat::linear_decode(w, x, bias, y, nd);
  if (rest > 0) qmat::linear(w, x + nd * k, bias, y + nd * n, rest);
}

void Transformer::attention_block(KvCache& cache, int layer) {
  const ModelConfig& c = config();
  const LayerWeights& l = w_.layers[size_t(layer)];
  const int64_t n = n_rows_, E = c.n_embd, hd = c.head_dim;
  const int64_t qd = c.n_heads * hd, kvd = c.n_kv_heads * hd;
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };

  rmsnorm_rows(x_.data(), l.attn_norm.data(), h_.data(), n, E, c.rms_eps);
  linear(h_.data(), l.wq, bias(l.bq), q_.data());
  linear(h_.data(), l.wk, bias(l.bk), k_.data());
  linear(h_.data(), l.wv, bias(l.bv), v_.data());
  for (const RowSpan& sp : spans_) {
    for_rows(sp.n, [&](int64_t i0, int64_t i1) {
      for (int64_t t = sp.row0 + i0; t < sp.row0 + i1; ++t) {
        float* qt = q_.data() + t * qd;
        float* kt = k_.data() + t * kvd;
        if (c.qk_norm) {
          rmsnorm(qt, l.q_norm.data(), qt, c.n_heads, hd, c.rms_eps);
          rmsnorm(kt, l.k_norm.data(), kt, c.n_kv_heads, hd, c.rms_eps);
        }
        rope_apply(rope_, qt, c.n_heads, int(hd), sp.pos0 + (t - sp.row0));
        rope_apply(rope_, kt, c.n_kv_heads, int(hd), sp.pos0 + (t - sp.row0));
      }
    });
  }
  if (observer_) observer_->on_attention_inputs(layer, n, q_.data(), k_.data(), v_.data());
  if (const std::vector<float>& s = key_scale(layer); !s.empty()) {
    // (q ⊙ s)·(k ⊘ s) = q·k: the cache quantizes the rescaled key (--k-scale).
    scale_query_rows(s.data(), c.n_heads, c.n_kv_heads, int(hd), q_.data(), n);
    unscale_key_rows(s.data(), c.n_kv_heads, int(hd), k_.data(), n);
  }
  if (rotation_.active()) {
    rotation_.rotate_k(layer, q_.data(), n * c.n_heads);  // q·R_K keeps scores: (qR)(kR)ᵀ = qkᵀ
    rotation_.rotate_k(layer, k_.data(), n * c.n_kv_heads);
    rotation_.rotate_v(layer, v_.data(), n * c.n_kv_heads);
  }
  // The cache keeps k − a_t, a_t = RoPE(b_k, t) in its basis (--k-bias-split); the bias part
  // is input-independent, so attention adds it back exactly (key_bias.h).
  const KeyBias* key_bias = kv_spec_.k_bias_split && !l.bk.empty() ? &layer_key_bias(layer) : nullptr;
  const std::vector<float>& shift = key_shift(layer);
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim};
  for (const RowSpan& sp : spans_) {
    float* k = k_.data() + sp.row0 * kvd;
    const float* key_add = nullptr;  // prefill: a_t for every key it reads
    if (key_bias) {
      const int64_t first = sp.n == 1 ? sp.pos0 : 0;
      key_add_.resize(size_t((sp.pos0 + sp.n - first) * kvd));
      key_bias->rows(first, sp.pos0 + sp.n - first, key_add_.data());
      const float* b = key_add_.data() + (sp.pos0 - first) * kvd;
      for (int64_t i = 0; i < sp.n * kvd; ++i) k[i] -= b[i];
      key_add = key_add_.data();
    }
    if (!shift.empty())
      for (int64_t t = 0; t < sp.n; ++t)  // one shift for every key: softmax cancels it (--k-mean)
        for (int64_t i = 0; i < kvd; ++i) k[t * kvd + i] -= shift[size_t(i)];
    cache.write(layer, sp.seq, sp.pos0, sp.n, k, v_.data() + sp.row0 * kvd);
    cache.demote(layer, sp.seq, sp.pos0 + sp.n);
    const float* q = q_.data() + sp.row0 * qd;
    float* out = att_.data() + sp.row0 * qd;
    if (sp.n == 1) {
      attention_decode(shape, cache.view(layer, sp.seq, sp.pos0 + 1), q, out, key_bias);
    } else {
      attention_prefill(shape, cache, layer, sp.seq, q, sp.n, sp.pos0, out, key_add);
    }
  }
  if (rotation_.active()) rotation_.unrotate_o(layer, att_.data(), n * c.n_heads);
  linear(att_.data(), l.wo, nullptr, proj_.data());
  add_inplace(x_.data(), proj_.data(), n * E);
}

const KeyBias& Transformer::layer_key_bias(int layer) {
  const ModelConfig& c = config();
  if (key_bias_.empty()) key_bias_.resize(size_t(c.n_layers));
  std::unique_ptr<KeyBias>& kb = key_bias_[size_t(layer)];
  if (!kb) {
    // Into the cache's basis as the keys go: under --k-scale the query is q ⊙ s, so the key
    // part it meets is a_t ⊘ s; then R_K.
    kb = std::make_unique<KeyBias>(rope_, c.n_kv_heads, c.head_dim, w_.layers[size_t(layer)].bk.data(),
                                   [&](float* rows, int64_t n) {
                                     if (const std::vector<float>& s = key_scale(layer); !s.empty())
                                       unscale_key_rows(s.data(), c.n_kv_heads, c.head_dim, rows, n);
                                     if (rotation_.active()) rotation_.rotate_k(layer, rows, n * c.n_kv_heads);
                                   });
  }
  return *kb;
}

void Transformer::mlp_block(int layer) {
  const ModelConfig& c = config();
  const LayerWeights& l = w_.layers[size_t(layer)];
  const int64_t n = n_rows_, E = c.n_embd, F = c.n_ff;
  rmsnorm_rows(x_.data(), l.ffn_norm.data(), h_.data(), n, E, c.rms_eps);
  linear(h_.data(), l.w_gate, nullptr, gate_.data());
  linear(h_.data(), l.w_up, nullptr, up_.data());
  for_rows(n, [&](int64_t r0, int64_t r1) { swiglu(gate_.data() + r0 * F, up_.data() + r0 * F, (r1 - r0) * F); });
  linear(gate_.data(), l.w_down, nullptr, proj_.data());
  add_inplace(x_.data(), proj_.data(), n * E);
}

}  // namespace oscar
