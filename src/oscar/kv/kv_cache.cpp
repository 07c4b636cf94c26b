#include "oscar/kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "oscar/core/error.h"
#include "oscar/ops/convert.h"

namespace oscar {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The fp K and V rows of (kv_head, token) as f32.
void load_fp_rows(const KvSeqView& v, int kv_head, int64_t t, float* k_out, float* v_out) {
  const int64_t off = v.row_offset(kv_head, t);
  const int d = v.head_dim;
  if (v.dtype == KvDtype::f32) {
    std::memcpy(k_out, v.k_pool + off, size_t(d) * 4);
    std::memcpy(v_out, v.v_pool + off, size_t(d) * 4);
  } else {
    bf16_to_f32(reinterpret_cast<const bf16*>(v.k_pool + off), k_out, d);
    bf16_to_f32(reinterpret_cast<const bf16*>(v.v_pool + off), v_out, d);
  }
}

LazyBuffer alloc_pool(size_t bytes, int64_t capacity) {
  const std::string what = fmt::format("a KV cache pool of {} tokens", capacity);
  return LazyBuffer(bytes, what.c_str());
}
}  // namespace

KvCache::KvCache(KvShape shape, KvSpec spec, int64_t capacity_tokens, std::vector<HistoryFormat> k_formats,
                 std::vector<HistoryFormat> v_formats)
    : shape_(shape),
      spec_(spec),
      k_formats_(std::move(k_formats)),
      v_formats_(std::move(v_formats)),
      fp_alloc_(int32_t(ceil_div(std::max<int64_t>(capacity_tokens, 1), spec.block_tokens))),
      q_alloc_(spec.quantized() ? int32_t(ceil_div(std::max<int64_t>(capacity_tokens, 1), history_block_tokens()) + 1) : 0) {
  if (capacity_tokens <= 0) fail("KV cache capacity must be positive, got {}", capacity_tokens);
  allocate_pools();
}

KvCache::KvCache(KvShape shape, KvSpec spec, KvPages pages, std::vector<HistoryFormat> k_formats,
                 std::vector<HistoryFormat> v_formats)
    : shape_(shape),
      spec_(spec),
      k_formats_(std::move(k_formats)),
      v_formats_(std::move(v_formats)),
      fp_alloc_(int32_t(std::clamp<int64_t>(pages.fp, 0, INT32_MAX))),
      q_alloc_(spec.quantized() ? int32_t(std::clamp<int64_t>(pages.history, 0, INT32_MAX)) : 0) {
  if (pages.fp <= 0) fail("KV cache needs at least one fp page, got {}", pages.fp);
  if (pages.fp > INT32_MAX || pages.history > INT32_MAX) fail("KV cache of {} + {} pages is too large", pages.fp, pages.history);
  allocate_pools();
}

void KvCache::allocate_pools() {
  OSCAR_CHECK(shape_.n_layers > 0 && shape_.n_kv_heads > 0 && shape_.head_dim > 0, "bad KV shape");
  spec_.validate();
  if (spec_.quantized()) {
    if (int(k_formats_.size()) != shape_.n_layers || int(v_formats_.size()) != shape_.n_layers)
      fail("quantized KV cache needs a K and a V format per layer ({} layers)", shape_.n_layers);
    for (int l = 0; l < shape_.n_layers; ++l)
      OSCAR_CHECK(k_formats_[size_t(l)].block_tokens == history_block_tokens() &&
                      v_formats_[size_t(l)].block_tokens == history_block_tokens(),
                  "layer {}: history formats must use {}-token blocks", l, history_block_tokens());
  }
  const int64_t capacity = capacity_tokens();
  const size_t fp_bytes = size_t(fp_block_bytes()) * size_t(fp_alloc_.n_blocks());
  for (int l = 0; l < shape_.n_layers; ++l) {
    k_.push_back(alloc_pool(fp_bytes, capacity));
    v_.push_back(alloc_pool(fp_bytes, capacity));
    if (spec_.quantized()) {
      qk_.push_back(alloc_pool(size_t(q_block_bytes(true, l)) * size_t(q_alloc_.n_blocks()), capacity));
      qv_.push_back(alloc_pool(size_t(q_block_bytes(false, l)) * size_t(q_alloc_.n_blocks()), capacity));
    }
  }
}

int KvCache::history_block_tokens() const {
  return spec_.quant == KvQuant::kivi2 ? spec_.kivi_tokens : spec_.block_tokens;
}

int64_t KvCache::fp_block_bytes() const {
  return int64_t(shape_.n_kv_heads) * spec_.block_tokens * shape_.head_dim * spec_.fp_bytes_per_element();
}

int64_t KvCache::q_block_bytes(bool key, int layer) const {
  const HistoryFormat& f = key ? k_formats_[size_t(layer)] : v_formats_[size_t(layer)];
  return int64_t(shape_.n_kv_heads) * int64_t(f.block_bytes());
}

int64_t KvCache::bytes_per_token() const {
  return 2LL * shape_.n_layers * shape_.n_kv_heads * shape_.head_dim * spec_.fp_bytes_per_element();
}

int64_t KvCache::history_tokens(SeqId seq) const {
  const Sequence& s = seq_ref(seq);
  return spec_.history_end(s.length) - std::min<int64_t>(s.length, spec_.sink);
}

int64_t KvCache::bytes_used(SeqId seq) const {
  const Sequence& s = seq_ref(seq);
  const int64_t hist = history_tokens(seq);
  const int64_t fp_tokens = s.length - hist;
  double bytes = double(fp_tokens) * double(bytes_per_token());
  for (int l = 0; l < shape_.n_layers && hist > 0; ++l) {
    const double bits = k_formats_[size_t(l)].bits_per_element() + v_formats_[size_t(l)].bits_per_element();
    bytes += double(hist) * shape_.n_kv_heads * shape_.head_dim * bits / 8.0;
  }
  return int64_t(bytes + 0.5);
}

double KvCache::bits_per_element(SeqId seq) const {
  const int64_t n = seq_ref(seq).length;
  if (n == 0) return 8.0 * spec_.fp_bytes_per_element();
  return 8.0 * double(bytes_used(seq)) / (2.0 * shape_.n_layers * shape_.n_kv_heads * shape_.head_dim * double(n));
}

int64_t KvCache::bytes_allocated() const {
  int64_t n = 2LL * shape_.n_layers * fp_block_bytes() * fp_alloc_.n_blocks();
  for (int l = 0; l < shape_.n_layers && spec_.quantized(); ++l)
    n += (q_block_bytes(true, l) + q_block_bytes(false, l)) * q_alloc_.n_blocks();
  return n;
}

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

void KvCache::release_all(Sequence& s) {
  for (int32_t b : s.blocks)
    if (b >= 0) fp_alloc_.release(b);
  for (int32_t b : s.q_blocks) q_alloc_.release(b);
  s = Sequence{};
}

void KvCache::clear_sequence(SeqId seq) { release_all(seq_ref(seq)); }

void KvCache::remove_sequence(SeqId seq) {
  release_all(seq_ref(seq));
  seqs_.erase(seq);
}

int64_t KvCache::length(SeqId seq) const { return seq_ref(seq).length; }

KvPages KvCache::reserve_need(SeqId seq, int64_t n) const {
  const Sequence& s = seq_ref(seq);
  KvPages need;
  need.fp = std::max<int64_t>(0, ceil_div(s.length + n, spec_.block_tokens) - int64_t(s.blocks.size()));
  if (spec_.quantized()) {
    const int64_t hist = spec_.history_end(s.length + n) - std::min<int64_t>(s.length + n, spec_.sink);
    need.history = std::max<int64_t>(0, ceil_div(hist, history_block_tokens()) - int64_t(s.q_blocks.size()));
  }
  return need;
}

bool KvCache::can_reserve(SeqId seq, int64_t n) const {
  const KvPages need = reserve_need(seq, n), free = free_pages();
  return need.fp <= free.fp && need.history <= free.history;
}

bool KvCache::reserve(SeqId seq, int64_t n) {
  const KvPages need = reserve_need(seq, n), free = free_pages();
  if (need.fp > free.fp || need.history > free.history || !evict_for(need)) return false;
  Sequence& s = seq_ref(seq);
  for (int64_t i = 0; i < need.fp; ++i) s.blocks.push_back(fp_alloc_.allocate());
  for (int64_t i = 0; i < need.history; ++i) s.q_blocks.push_back(q_alloc_.allocate());
  return true;
}

int64_t KvCache::fp_page_bytes() const { return 2LL * shape_.n_layers * fp_block_bytes(); }

int64_t KvCache::history_page_bytes() const {
  int64_t n = 0;
  for (int l = 0; l < shape_.n_layers && spec_.quantized(); ++l) n += q_block_bytes(true, l) + q_block_bytes(false, l);
  return n;
}

KvPages KvCache::pages_for_length(int64_t t) const {
  const int64_t B = spec_.block_tokens;
  KvPages p;
  p.fp = ceil_div(t, B);
  if (!spec_.quantized()) return p;
  // commit() releases the fp pages from the first one past the sink up to the last whole
  // page below the history end.
  const int64_t h = spec_.history_end(t);
  p.fp -= std::max<int64_t>(0, h / B - ceil_div(spec_.sink, B));
  p.history = ceil_div(h - std::min<int64_t>(t, spec_.sink), history_block_tokens());
  return p;
}

KvSegmentUsage KvCache::segment_usage() const {
  KvSegmentUsage u;
  const int64_t sink_pages = ceil_div(spec_.quantized() ? spec_.sink : 0, spec_.block_tokens);
  std::vector<uint8_t> fp_seen(size_t(fp_alloc_.n_blocks())), q_seen(size_t(q_alloc_.n_blocks()));
  for (const auto& [id, s] : seqs_) {
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      const int32_t p = s.blocks[b];
      if (p < 0 || fp_seen[size_t(p)]) continue;
      fp_seen[size_t(p)] = 1;
      (int64_t(b) < sink_pages ? u.sink_pages : u.recent_pages) += 1;
    }
    for (int32_t p : s.q_blocks)
      if (!q_seen[size_t(p)]) {
        q_seen[size_t(p)] = 1;
        ++u.history_pages;
      }
  }
  prefix_.for_each([&](const PrefixEntry& e) {
    if (e.fp >= 0 && !fp_seen[size_t(e.fp)]) fp_seen[size_t(e.fp)] = 1, ++u.cached_fp_pages;
    if (e.history >= 0 && !q_seen[size_t(e.history)]) q_seen[size_t(e.history)] = 1, ++u.cached_history_pages;
  });
  u.fp_free_pages = fp_alloc_.n_free();
  u.history_free_pages = q_alloc_.n_free();
  return u;
}

void KvCache::write(int layer, SeqId seq, int64_t pos, int64_t n, const float* k, const float* v) {
  const Sequence& s = seq_ref(seq);
  OSCAR_CHECK(layer >= 0 && layer < shape_.n_layers, "layer {} out of range", layer);
  OSCAR_CHECK(pos == s.length, "KV write at {} but sequence {} has length {}", pos, seq, s.length);
  OSCAR_CHECK(ceil_div(pos + n, spec_.block_tokens) <= int64_t(s.blocks.size()), "KV pages not reserved");
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

void KvCache::demote(int layer, SeqId seq, int64_t new_len) {
  if (!spec_.quantized()) return;
  const Sequence& s = seq_ref(seq);
  const int64_t begin = std::max<int64_t>(s.demoted_end, spec_.sink), end = spec_.history_end(new_len);
  if (end <= begin) return;
  const KvSeqView view = this->view(layer, seq, new_len);
  const HistoryFormat& kf = k_formats_[size_t(layer)];
  const HistoryFormat& vf = v_formats_[size_t(layer)];
  const int d = shape_.head_dim, B = history_block_tokens();
  std::vector<float> krows(size_t(B) * size_t(d)), vrows(size_t(B) * size_t(d));
  for (int h = 0; h < shape_.n_kv_heads; ++h) {
    // Whole history blocks or their tails, so per-channel formats see complete blocks.
    for (int64_t t0 = begin; t0 < end;) {
      const int64_t i = t0 - spec_.sink;
      const int row0 = int(i % B);
      const int64_t t1 = std::min(end, t0 + (B - row0));
      for (int64_t t = t0; t < t1; ++t)
        load_fp_rows(view, h, t, krows.data() + (t - t0) * d, vrows.data() + (t - t0) * d);
      const int64_t block = s.q_blocks[size_t(i / B)];
      uint8_t* kb = qk_[size_t(layer)].data() + (block * shape_.n_kv_heads + h) * int64_t(kf.block_bytes());
      uint8_t* vb = qv_[size_t(layer)].data() + (block * shape_.n_kv_heads + h) * int64_t(vf.block_bytes());
      history_store(kf, kb, row0, int(t1 - t0), krows.data());
      history_store(vf, vb, row0, int(t1 - t0), vrows.data());
      t0 = t1;
    }
  }
}

void KvCache::commit(SeqId seq, int64_t n) {
  Sequence& s = seq_ref(seq);
  OSCAR_CHECK(ceil_div(s.length + n, spec_.block_tokens) <= int64_t(s.blocks.size()), "commit past reserved pages");
  s.length += n;
  if (!spec_.quantized()) return;
  s.demoted_end = spec_.history_end(s.length);
  // Release fp pages whose tokens are all history: [first token ≥ sink, last < demoted_end].
  const int64_t B = spec_.block_tokens;
  for (int64_t b = ceil_div(spec_.sink, B); (b + 1) * B <= s.demoted_end; ++b) {
    if (s.blocks[size_t(b)] >= 0) {
      fp_alloc_.release(s.blocks[size_t(b)]);
      s.blocks[size_t(b)] = -1;
    }
  }
}

KvSeqView KvCache::view(int layer, SeqId seq, int64_t n_tokens) const {
  const Sequence& s = seq_ref(seq);
  OSCAR_CHECK(ceil_div(n_tokens, spec_.block_tokens) <= int64_t(s.blocks.size()), "view past reserved pages");
  KvSeqView v;
  v.dtype = spec_.dtype;
  v.k_pool = k_[size_t(layer)].data();
  v.v_pool = v_[size_t(layer)].data();
  v.blocks = s.blocks.data();
  v.n_tokens = n_tokens;
  v.block_tokens = spec_.block_tokens;
  v.n_kv_heads = shape_.n_kv_heads;
  v.head_dim = shape_.head_dim;
  v.hist_begin = std::min<int64_t>(n_tokens, spec_.sink);
  v.hist_end = spec_.history_end(n_tokens);
  if (spec_.quantized()) {
    v.qk_pool = qk_[size_t(layer)].data();
    v.qv_pool = qv_[size_t(layer)].data();
    v.q_blocks = s.q_blocks.data();
    v.k_format = &k_formats_[size_t(layer)];
    v.v_format = &v_formats_[size_t(layer)];
  }
  return v;
}

void KvCache::gather_fp(int layer, SeqId seq, int kv_head, int64_t n, float* k_out, float* v_out) const {
  const KvSeqView v = view(layer, seq, n);
  const int d = shape_.head_dim;
  for (int64_t t = 0; t < n; ++t) {
    if (v.blocks[t / v.block_tokens] < 0) {  // released: the row lives in history only
      std::fill_n(k_out + t * d, d, 0.0f);
      std::fill_n(v_out + t * d, d, 0.0f);
      continue;
    }
    load_fp_rows(v, kv_head, t, k_out + t * d, v_out + t * d);
  }
}

void KvCache::gather_history(int layer, SeqId seq, int kv_head, int64_t n, float* k_out, float* v_out) const {
  const KvSeqView v = view(layer, seq, n);
  const int d = shape_.head_dim;
  std::fill_n(k_out, n * d, 0.0f);
  std::fill_n(v_out, n * d, 0.0f);
  for (int64_t t = v.hist_begin; t < v.hist_end; ++t) {
    int row = 0;
    const uint8_t* kb = v.history_block(v.qk_pool, *v.k_format, kv_head, t, &row);
    const uint8_t* vb = v.history_block(v.qv_pool, *v.v_format, kv_head, t, &row);
    history_load(*v.k_format, kb, row, k_out + t * d);
    history_load(*v.v_format, vb, row, v_out + t * d);
  }
}

}  // namespace oscar
