#include "oscar/kv/kv_cache.h"

#include <cstring>

#include "oscar/core/error.h"
#include "oscar/ops/convert.h"

namespace oscar {

namespace {
int32_t blocks_for(int64_t tokens, int block_tokens) {
  return int32_t((tokens + block_tokens - 1) / block_tokens);
}
}  // namespace

KvCache::KvCache(KvShape shape, KvSpec spec, int64_t capacity_tokens)
    : shape_(shape), spec_(spec), alloc_(blocks_for(capacity_tokens, spec.block_tokens)) {
  OSCAR_CHECK(shape.n_layers > 0 && shape.n_kv_heads > 0 && shape.head_dim > 0, "bad KV shape");
  OSCAR_CHECK(spec.block_tokens > 0, "block_tokens must be positive");
  OSCAR_CHECK(capacity_tokens > 0, "KV capacity must be positive, got {}", capacity_tokens);
  const size_t bytes = size_t(block_bytes()) * size_t(alloc_.n_blocks());
  try {
    k_.assign(size_t(shape.n_layers), std::vector<uint8_t>(bytes));
    v_.assign(size_t(shape.n_layers), std::vector<uint8_t>(bytes));
  } catch (const std::bad_alloc&) {
    fail("out of memory allocating a KV cache of {} tokens ({:.1f} MiB)", capacity_tokens,
         2.0 * double(bytes) * shape.n_layers / (1 << 20));
  }
}

int64_t KvCache::block_bytes() const {
  return int64_t(shape_.n_kv_heads) * spec_.block_tokens * shape_.head_dim * spec_.bytes_per_element();
}

int64_t KvCache::bytes_per_token() const {
  return 2LL * shape_.n_layers * shape_.n_kv_heads * shape_.head_dim * spec_.bytes_per_element();
}

int64_t KvCache::bytes_used(SeqId seq) const { return seq_ref(seq).length * bytes_per_token(); }

int64_t KvCache::bytes_allocated() const { return 2LL * shape_.n_layers * block_bytes() * alloc_.n_blocks(); }

SeqId KvCache::add_sequence() {
  const SeqId id = next_id_++;
  seqs_.emplace(id, Sequence{});
  return id;
}

KvCache::Sequence& KvCache::seq_ref(SeqId seq) {
  auto it = seqs_.find(seq);
  OSCAR_CHECK(it != seqs_.end(), "unknown sequence {}", seq);
  return it->second;
}

const KvCache::Sequence& KvCache::seq_ref(SeqId seq) const {
  auto it = seqs_.find(seq);
  OSCAR_CHECK(it != seqs_.end(), "unknown sequence {}", seq);
  return it->second;
}

void KvCache::clear_sequence(SeqId seq) {
  Sequence& s = seq_ref(seq);
  for (int32_t b : s.blocks) alloc_.release(b);
  s.blocks.clear();
  s.length = 0;
}

void KvCache::remove_sequence(SeqId seq) {
  clear_sequence(seq);
  seqs_.erase(seq);
}

int64_t KvCache::length(SeqId seq) const { return seq_ref(seq).length; }

bool KvCache::reserve(SeqId seq, int64_t n) {
  Sequence& s = seq_ref(seq);
  const int32_t need = blocks_for(s.length + n, spec_.block_tokens) - int32_t(s.blocks.size());
  if (need <= 0) return true;
  if (!alloc_.can_allocate(need)) return false;
  for (int32_t i = 0; i < need; ++i) s.blocks.push_back(alloc_.allocate());
  return true;
}

void KvCache::write(int layer, SeqId seq, int64_t pos, int64_t n, const float* k, const float* v) {
  const Sequence& s = seq_ref(seq);
  OSCAR_CHECK(layer >= 0 && layer < shape_.n_layers, "layer {} out of range", layer);
  OSCAR_CHECK(pos == s.length, "KV write at {} but sequence {} has length {}", pos, seq, s.length);
  OSCAR_CHECK(blocks_for(pos + n, spec_.block_tokens) <= int64_t(s.blocks.size()), "KV pages not reserved");
  const KvSeqView view = this->view(layer, seq, pos + n);
  uint8_t* kp = k_[size_t(layer)].data();
  uint8_t* vp = v_[size_t(layer)].data();
  const int d = shape_.head_dim;
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      const float* ks = k + (t * shape_.n_kv_heads + h) * d;
      const float* vs = v + (t * shape_.n_kv_heads + h) * d;
      const int64_t off = view.row_offset(h, pos + t);
      if (spec_.dtype == KvDtype::f32) {
        std::memcpy(kp + off, ks, size_t(d) * 4);
        std::memcpy(vp + off, vs, size_t(d) * 4);
      } else {
        f32_to_bf16(ks, reinterpret_cast<bf16*>(kp + off), d);
        f32_to_bf16(vs, reinterpret_cast<bf16*>(vp + off), d);
      }
    }
  }
}

void KvCache::commit(SeqId seq, int64_t n) {
  Sequence& s = seq_ref(seq);
  OSCAR_CHECK(blocks_for(s.length + n, spec_.block_tokens) <= int64_t(s.blocks.size()), "commit past reserved pages");
  s.length += n;
}

KvSeqView KvCache::view(int layer, SeqId seq, int64_t n_tokens) const {
  const Sequence& s = seq_ref(seq);
  OSCAR_CHECK(blocks_for(n_tokens, spec_.block_tokens) <= int64_t(s.blocks.size()), "view past reserved pages");
  KvSeqView v;
  v.dtype = spec_.dtype;
  v.k_pool = k_[size_t(layer)].data();
  v.v_pool = v_[size_t(layer)].data();
  v.blocks = s.blocks.data();
  v.n_tokens = n_tokens;
  v.block_tokens = spec_.block_tokens;
  v.n_kv_heads = shape_.n_kv_heads;
  v.head_dim = shape_.head_dim;
  return v;
}

void KvCache::gather_f32(int layer, SeqId seq, int kv_head, int64_t n, float* k_out, float* v_out) const {
  const KvSeqView v = view(layer, seq, n);
  const int d = shape_.head_dim;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t off = v.row_offset(kv_head, t);
    if (spec_.dtype == KvDtype::f32) {
      std::memcpy(k_out + t * d, v.k_pool + off, size_t(d) * 4);
      std::memcpy(v_out + t * d, v.v_pool + off, size_t(d) * 4);
    } else {
      bf16_to_f32(reinterpret_cast<const bf16*>(v.k_pool + off), k_out + t * d, d);
      bf16_to_f32(reinterpret_cast<const bf16*>(v.v_pool + off), v_out + t * d, d);
    }
  }
}

}  // namespace oscar
