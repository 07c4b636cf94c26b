// KvCache's swap: a sequence's pages copied to host memory and back (kv_cache.h).
#include <cstring>

#include "oscar/core/error.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {

KvPages KvSwapImage::pages() const {
  KvPages p;
  for (uint8_t h : fp_held) p.fp += h;
  p.history = history_pages;
  return p;
}

int64_t KvCache::swap_bytes(SeqId seq) const {
  const Sequence& s = seq_ref(seq);
  int64_t fp = 0;
  for (int32_t b : s.blocks) fp += b >= 0;
  return fp * fp_page_bytes() + int64_t(s.q_blocks.size()) * history_page_bytes();
}

KvSwapImage KvCache::swap_out(SeqId seq) {
  const Sequence& s = seq_ref(seq);
  KvSwapImage img;
  img.length = s.length;
  img.demoted_end = s.demoted_end;
  img.history_pages = int64_t(s.q_blocks.size());
  img.bytes.resize(size_t(swap_bytes(seq)));
  uint8_t* out = img.bytes.data();
  const auto copy_page = [&](const LazyBuffer& pool, int64_t page, int64_t bytes) {
    std::memcpy(out, pool.data() + page * bytes, size_t(bytes));
    out += bytes;
  };
  for (int32_t b : s.blocks) {
    img.fp_held.push_back(b >= 0);
    if (b < 0) continue;
    for (int l = 0; l < shape_.n_layers; ++l) {
      copy_page(k_[size_t(l)], b, fp_block_bytes());
      copy_page(v_[size_t(l)], b, fp_block_bytes());
    }
  }
  for (int32_t b : s.q_blocks)
    for (int l = 0; l < shape_.n_layers; ++l) {
      copy_page(qk_[size_t(l)], b, q_block_bytes(true, l));
      copy_page(qv_[size_t(l)], b, q_block_bytes(false, l));
    }
  OSCAR_CHECK(out == img.bytes.data() + img.bytes.size(), "swap image size");
  remove_sequence(seq);
  return img;
}

SeqId KvCache::swap_in(const KvSwapImage& img) {
  const KvPages need = img.pages(), free = free_pages();
  const int64_t B = spec_.block_tokens;
  OSCAR_CHECK(int64_t(img.fp_held.size()) >= (img.length + B - 1) / B && img.bytes.size() ==
                  size_t(need.fp * fp_page_bytes() + need.history * history_page_bytes()),
              "swap image of {} tokens does not match this cache", img.length);
  if (need.fp > free.fp || need.history > free.history || !evict_for(need)) return -1;
  const SeqId id = add_sequence();
  Sequence& s = seq_ref(id);
  s.length = img.length;
  s.demoted_end = img.demoted_end;
  const uint8_t* in = img.bytes.data();
  const auto copy_page = [&](LazyBuffer& pool, int64_t page, int64_t bytes) {
    std::memcpy(pool.data() + page * bytes, in, size_t(bytes));
    in += bytes;
  };
  for (uint8_t held : img.fp_held) {
    s.blocks.push_back(held ? fp_alloc_.allocate() : -1);
    if (!held) continue;
    for (int l = 0; l < shape_.n_layers; ++l) {
      copy_page(k_[size_t(l)], s.blocks.back(), fp_block_bytes());
      copy_page(v_[size_t(l)], s.blocks.back(), fp_block_bytes());
    }
  }
  for (int64_t i = 0; i < img.history_pages; ++i) {
    s.q_blocks.push_back(q_alloc_.allocate());
    for (int l = 0; l < shape_.n_layers; ++l) {
      copy_page(qk_[size_t(l)], s.q_blocks.back(), q_block_bytes(true, l));
      copy_page(qv_[size_t(l)], s.q_blocks.back(), q_block_bytes(false, l));
    }
  }
  return id;
}

}  // namespace oscar
