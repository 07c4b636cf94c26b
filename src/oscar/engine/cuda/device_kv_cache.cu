// The paged KV cache on the device (device_kv_cache.h): pools per layer, page tables on the
// host mirrored per slot on the device, the window rule, and random contents for benchmarks.
#include "oscar/engine/cuda/device_kv_cache.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/host_checks.h"
#include "oscar/kv/window_rule.h"

namespace oscar::cuda {
namespace {

using detail::check_launch;
using detail::fail;

constexpr int kPage = kDecodeFpBlockTokens;        // tokens per fp page
constexpr int kHistPage = kDecodeHistBlockTokens;  // rows per history page (a multiple of kPage)
static_assert(kHistPage % kPage == 0);

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace


DeviceKvCache::DeviceKvCache(int n_layers, int n_kv_heads, int head_dim, const KvFormat& fmt,
                             const KvCacheLimits& limits)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), fmt_(fmt), limits_(limits) {
  const char* what = "DeviceKvCache";
  if (n_layers <= 0 || n_kv_heads <= 0) fail(what, "n_layers and n_kv_heads must be positive");
  if (head_dim != 64 && head_dim != 128) fail(what, "head_dim " + std::to_string(head_dim) + " (64 or 128)");
  if (fmt.sink < 0 || fmt.window < 0) fail(what, "negative sink or window");
  const auto per_layer = [&](size_t n, const char* field) {
    if (n != size_t(n_layers))
      fail(what, std::string(field) + " has " + std::to_string(n) + " entries for " + std::to_string(n_layers) +
                     " layers");
  };
  per_layer(fmt.k_quant.size(), "bits");
  per_layer(fmt.v_quant.size(), "bits");
  per_layer(fmt.k_clip.size(), "k_clip");
  per_layer(fmt.v_clip.size(), "v_clip");
  if (!fmt.rot_k.empty()) per_layer(fmt.rot_k.size(), "rot_k");
  if (!fmt.rot_v.empty()) per_layer(fmt.rot_v.size(), "rot_v");
  if (!fmt.k_shift.empty()) per_layer(fmt.k_shift.size(), "k_shift");
  for (int l = 0; l < n_layers; ++l) {
    const int b = fmt.bits(l);
    if (b < 0) fail(what, "layer " + std::to_string(l) + ": bits (a history code other than 2, 4 or 8 bits)");
    if (fmt.v_bits(l) != b) fail(what, "layer " + std::to_string(l) + ": K and V coded apart (bits)");
    if (!KvFormat::of_layer(fmt.k_scale, l).empty()) fail(what, "layer " + std::to_string(l) + ": k_scale (--k-scale)");
    if (b != 0 && (fmt.group > head_dim || (fmt.group != 32 && fmt.group != 64 && fmt.group != 128)))
      fail(what, "group " + std::to_string(fmt.group) + " (32, 64 or 128, at most head_dim)");
    for (float c : {fmt.k_clip[size_t(l)], fmt.v_clip[size_t(l)]})
      if (!(c >= 0.0f && c <= 1.0f)) fail(what, "layer " + std::to_string(l) + ": clip ratio outside [0, 1]");
    for (const auto& [rots, name] : {std::pair{&fmt.rot_k, "rot_k"}, std::pair{&fmt.rot_v, "rot_v"}})
      if (!rots->empty() && !(*rots)[size_t(l)].empty() &&
          (*rots)[size_t(l)].size() != size_t(head_dim) * size_t(head_dim))
        fail(what, "layer " + std::to_string(l) + ": " + name + " is not " + std::to_string(head_dim) + "×" +
                       std::to_string(head_dim));
    if (!fmt.k_shift.empty() && !fmt.k_shift[size_t(l)].empty() &&
        fmt.k_shift[size_t(l)].size() != size_t(n_kv_heads) * size_t(head_dim))
      fail(what, "layer " + std::to_string(l) + ": k_shift is not n_kv_heads·head_dim = " +
                     std::to_string(n_kv_heads * head_dim) + " values");
  }
  if (limits.max_seqs <= 0) fail(what, "max_seqs must be positive");
  if (limits.max_seq_len <= 0 || limits.max_seq_len > (int64_t(1) << 31) - kPage)
    fail(what, "max_seq_len " + std::to_string(limits.max_seq_len) + " outside [1, 2^31)");
  geometry_ = KvPageGeometry(n_layers, n_kv_heads, head_dim, fmt);
  fp_stride_ = int(ceil_div(limits.max_seq_len, kPage));
  hist_stride_ = int(std::max<int64_t>(1, ceil_div(std::max<int64_t>(0, limits.max_seq_len - fmt.sink), kHistPage)));
  // During a step a sequence may hold one page more than after it (the new token's page
  // comes before the released one goes), and the count wobbles by one along the way.
  if (limits.prefill_chunk <= 0) fail(what, "prefill_chunk must be positive");
  if (limits.prefill_logits_rows <= 0) fail(what, "prefill_logits_rows must be positive");
  // A prefill launch holds its tokens' pages until it ends: prefill_chunk / 16 + 1 more.
  if (limits_.fp_pages <= 0)
    limits_.fp_pages =
        limits.max_seqs * std::min(ceil_div(limits.max_seq_len, kPage),
                                   geometry_.fp_pages_for_length(limits.max_seq_len) + 3 + limits.prefill_chunk / kPage);
  if (limits_.hist_pages <= 0)
    limits_.hist_pages = fmt.any_history() ? limits.max_seqs * geometry_.hist_pages_for_length(limits.max_seq_len) : 0;

  const size_t fp_elems = size_t(n_kv_heads) * kPage * size_t(head_dim);
  for (int l = 0; l < n_layers; ++l) {
    const std::string name = "KV cache layer " + std::to_string(l);
    fp_k_.push_back(mem_.allocate_array<uint16_t>(size_t(limits_.fp_pages) * fp_elems, name + " fp K pages"));
    fp_v_.push_back(mem_.allocate_array<uint16_t>(size_t(limits_.fp_pages) * fp_elems, name + " fp V pages"));
    const size_t hist_bytes = size_t(limits_.hist_pages) * size_t(n_kv_heads) * kHistPage * row_bytes(l);
    hist_k_.push_back(hist_bytes ? mem_.allocate_array<uint8_t>(hist_bytes, name + " history K pages") : nullptr);
    hist_v_.push_back(hist_bytes ? mem_.allocate_array<uint8_t>(hist_bytes, name + " history V pages") : nullptr);
  }
  h_fp_table_.assign(size_t(limits.max_seqs) * size_t(fp_stride_), -1);
  h_hist_table_.assign(size_t(limits.max_seqs) * size_t(hist_stride_), -1);
  d_fp_table_ = mem_.allocate_array<int32_t>(h_fp_table_.size(), "KV page tables");
  d_hist_table_ = mem_.allocate_array<int32_t>(h_hist_table_.size(), "KV page tables");
  if (cudaMemcpy(d_fp_table_, h_fp_table_.data(), h_fp_table_.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(d_hist_table_, h_hist_table_.data(), h_hist_table_.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
    fail(what, "uploading the page tables failed");
  for (int64_t p = limits_.fp_pages - 1; p >= 0; --p) free_fp_.push_back(int32_t(p));
  for (int64_t p = limits_.hist_pages - 1; p >= 0; --p) free_hist_.push_back(int32_t(p));
  for (int pool = 0; pool < 2; ++pool) {
    const size_t n = size_t(pool ? limits_.hist_pages : limits_.fp_pages);
    refs_[pool].assign(n, 0);
    cache_refs_[pool].assign(n, 0);
  }
  length_.assign(size_t(limits.max_seqs), 0);
  active_.assign(size_t(limits.max_seqs), false);
}

KvPageGeometry::KvPageGeometry(int n_layers, int n_kv_heads, int head_dim, const KvFormat& fmt)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), sink_(fmt.sink), window_(fmt.window),
      keep_fp_(fmt.any_bf16_layer()), history_(fmt.any_history()) {
  for (int l = 0; l < n_layers; ++l) {
    const int b = fmt.bits(l);
    row_bytes_.push_back(b == 0 ? 0 : decode_quant_row_bytes(head_dim, b, fmt.group));
  }
}

int KvPageGeometry::fp_page_tokens() { return kPage; }
int KvPageGeometry::hist_page_tokens() { return kHistPage; }

size_t KvPageGeometry::row_bytes(int layer) const { return row_bytes_[size_t(layer)]; }

int64_t KvPageGeometry::history_end(int64_t t) const { return history_boundary(t, sink_, window_); }

int64_t KvPageGeometry::fp_pages_for_length(int64_t t) const {
  if (keep_fp_ || !history_) return ceil_div(t, kPage);
  // Released: the pages at or past the sink that end at or before h(t).
  const int64_t released = std::max<int64_t>(0, history_end(t) / kPage - ceil_div(sink_, kPage));
  return ceil_div(t, kPage) - released;
}

int64_t KvPageGeometry::hist_pages_for_length(int64_t t) const {
  if (!history_) return 0;
  // Rows [S, h(t + 1)): a step for token t also demotes row h(t).
  return ceil_div(std::max<int64_t>(0, history_end(t + 1) - sink_), kHistPage);
}

size_t KvPageGeometry::fp_page_bytes() const {
  return size_t(n_layers_) * 2 * size_t(n_kv_heads_) * kPage * size_t(head_dim_) * 2;
}

size_t KvPageGeometry::hist_page_bytes() const {
  size_t per_row = 0;
  for (size_t b : row_bytes_) per_row += 2 * b;
  return per_row * size_t(n_kv_heads_) * kHistPage;
}

size_t DeviceKvCache::bytes_for_length(int64_t t) const {
  // The pages held after t tokens (history rows up to h(t)).
  const int64_t hist = fmt_.any_history() ? ceil_div(std::max<int64_t>(0, history_end(t) - fmt_.sink), kHistPage) : 0;
  return size_t(geometry_.fp_pages_for_length(t)) * fp_page_bytes() + size_t(hist) * hist_page_bytes();
}

size_t DeviceKvCache::bf16_bytes_for_length(int64_t t) const { return size_t(ceil_div(t, kPage)) * fp_page_bytes(); }

size_t DeviceKvCache::bytes_in_use() const {
  return size_t(limits_.fp_pages - int64_t(free_fp_.size())) * fp_page_bytes() +
         size_t(limits_.hist_pages - int64_t(free_hist_.size())) * hist_page_bytes();
}

void DeviceKvCache::check_slot(int slot, const char* what) const {
  if (slot < 0 || slot >= limits_.max_seqs || !active_[size_t(slot)])
    fail(what, "sequence slot " + std::to_string(slot) + " is not active");
}

int DeviceKvCache::add_sequence() {
  for (int s = 0; s < limits_.max_seqs; ++s)
    if (!active_[size_t(s)]) {
      active_[size_t(s)] = true;
      length_[size_t(s)] = 0;
      return s;
    }
  fail("DeviceKvCache::add_sequence", "all " + std::to_string(limits_.max_seqs) + " sequence slots are in use");
}

void DeviceKvCache::remove_sequence(int slot) {
  check_slot(slot, "DeviceKvCache::remove_sequence");
  clear_sequence(slot);
  active_[size_t(slot)] = false;
}

void DeviceKvCache::clear_sequence(int slot) {
  check_slot(slot, "DeviceKvCache::clear_sequence");
  for (auto [table, stride, hist] : {std::tuple{&h_fp_table_, fp_stride_, false}, std::tuple{&h_hist_table_, hist_stride_, true}})
    for (int64_t i = 0; i < stride; ++i) {
      int32_t& p = (*table)[size_t(slot) * size_t(stride) + size_t(i)];
      if (p >= 0) release_page(hist, p);
      p = -1;
    }
  upload_tables(slot);
  length_[size_t(slot)] = 0;
}

void DeviceKvCache::upload_tables(int slot) {
  for (auto [h, d, stride] : {std::tuple{&h_fp_table_, d_fp_table_, fp_stride_},
                              std::tuple{&h_hist_table_, d_hist_table_, hist_stride_}}) {
    const size_t at = size_t(slot) * size_t(stride);
    // Pageable source: staged at once (see set_entry), ordered before the next step's kernels.
    const cudaError_t e = cudaMemcpyAsync(d + at, h->data() + at, size_t(stride) * sizeof(int32_t),
                                          cudaMemcpyHostToDevice, stream_);
    if (e != cudaSuccess) fail("DeviceKvCache", std::string("page table upload: ") + cudaGetErrorString(e));
  }
}

bool DeviceKvCache::active(int slot) const {
  return slot >= 0 && slot < limits_.max_seqs && active_[size_t(slot)];
}

int64_t DeviceKvCache::length(int slot) const {
  check_slot(slot, "DeviceKvCache::length");
  return length_[size_t(slot)];
}

void DeviceKvCache::set_entry(bool hist, int slot, int64_t i, int32_t page) {
  auto& h_table = hist ? h_hist_table_ : h_fp_table_;
  const size_t at = size_t(slot) * size_t(hist ? hist_stride_ : fp_stride_) + size_t(i);
  h_table[at] = page;
  // Pageable source: staged at once, so the host value may change right after; the copy
  // itself is ordered on the stream before the next step's kernels.
  const cudaError_t e = cudaMemcpyAsync((hist ? d_hist_table_ : d_fp_table_) + at, &h_table[at], sizeof(int32_t),
                                        cudaMemcpyHostToDevice, stream_);
  if (e != cudaSuccess) fail("DeviceKvCache", std::string("page table update: ") + cudaGetErrorString(e));
}

void DeviceKvCache::begin_tokens(int slot, int64_t n) {
  const char* what = "DeviceKvCache::begin_tokens";
  check_slot(slot, what);
  const int64_t t0 = length_[size_t(slot)];
  if (n <= 0 || t0 + n > limits_.max_seq_len)
    fail(what, "sequence slot " + std::to_string(slot) + " at length " + std::to_string(t0) + " cannot take " +
                   std::to_string(n) + " more tokens (max_seq_len " + std::to_string(limits_.max_seq_len) + ")");
  std::vector<int64_t> fp_need, hist_need;
  missing_pages(slot, n, &fp_need, &hist_need);
  if (fp_need.size() > free_fp_.size() || hist_need.size() > free_hist_.size())
    fail(what, "the KV cache is full (" + std::to_string(limits_.fp_pages) + " fp pages, " +
                   std::to_string(limits_.hist_pages) + " history pages) at token " + std::to_string(t0) +
                   " of sequence slot " + std::to_string(slot));
  for (int64_t i : fp_need) set_entry(false, slot, i, take_page(false));
  for (int64_t i : hist_need) set_entry(true, slot, i, take_page(true));
}

void DeviceKvCache::missing_pages(int slot, int64_t n, std::vector<int64_t>* fp, std::vector<int64_t>* hist) const {
  const int64_t t0 = length_[size_t(slot)];
  if (n <= 0) return;
  for (int64_t i = t0 / kPage; i <= (t0 + n - 1) / kPage && i < fp_stride_; ++i)
    if (h_fp_table_[size_t(slot) * size_t(fp_stride_) + size_t(i)] < 0) fp->push_back(i);
  if (fmt_.any_history()) {
    const int64_t r0 = history_end(t0), r1 = history_end(t0 + n);
    if (r1 > r0)
      for (int64_t i = (r0 - fmt_.sink) / kHistPage; i <= (r1 - 1 - fmt_.sink) / kHistPage && i < hist_stride_; ++i)
        if (h_hist_table_[size_t(slot) * size_t(hist_stride_) + size_t(i)] < 0) hist->push_back(i);
  }
}

DeviceKvCache::Pages DeviceKvCache::append_need(int slot, int64_t n) const {
  check_slot(slot, "DeviceKvCache::append_need");
  std::vector<int64_t> fp, hist;
  missing_pages(slot, n, &fp, &hist);
  return {int64_t(fp.size()), int64_t(hist.size())};
}

void DeviceKvCache::segment_pages(int64_t* sink, int64_t* recent, int64_t* hist) const {
  *sink = *recent = *hist = 0;
  const int64_t sink_pages = fmt_.any_history() ? ceil_div(fmt_.sink, kPage) : 0;
  std::vector<char> fp_seen(size_t(limits_.fp_pages)), hist_seen(size_t(limits_.hist_pages));
  for (int s = 0; s < limits_.max_seqs; ++s) {
    if (!active_[size_t(s)]) continue;
    for (int64_t i = 0; i < fp_stride_; ++i) {
      const int32_t p = h_fp_table_[size_t(s) * size_t(fp_stride_) + size_t(i)];
      if (p >= 0 && !fp_seen[size_t(p)]) fp_seen[size_t(p)] = 1, ++(i < sink_pages ? *sink : *recent);
    }
    for (int64_t i = 0; i < hist_stride_; ++i) {
      const int32_t p = h_hist_table_[size_t(s) * size_t(hist_stride_) + size_t(i)];
      if (p >= 0 && !hist_seen[size_t(p)]) hist_seen[size_t(p)] = 1, ++*hist;
    }
  }
}

void DeviceKvCache::end_tokens(int slot, int64_t n) {
  check_slot(slot, "DeviceKvCache::end_tokens");
  const int64_t t0 = length_[size_t(slot)];
  const int64_t t = length_[size_t(slot)] += n;
  if (geometry_.keeps_fp() || !fmt_.any_history()) return;
  // Pages at or past the sink that end at or before h(t) hold history only now.
  const int64_t first = std::max<int64_t>(ceil_div(fmt_.sink, kPage), history_end(t0) / kPage);
  for (int64_t i = first; (i + 1) * kPage <= history_end(t); ++i) {
    const int32_t p = h_fp_table_[size_t(slot) * size_t(fp_stride_) + size_t(i)];
    if (p >= 0) {
      release_page(false, p);
      set_entry(false, slot, i, -1);
    }
  }
}

int32_t DeviceKvCache::take_page(bool hist) {
  auto& free = hist ? free_hist_ : free_fp_;
  const int32_t p = free.back();
  free.pop_back();
  refs_[hist][size_t(p)] = 1;
  return p;
}

void DeviceKvCache::release_page(bool hist, int32_t page) { change_owners(hist, page, -1, false); }

void DeviceKvCache::change_owners(bool hist, int32_t page, int delta, bool by_cache) {
  auto& refs = refs_[hist];
  auto& cached = cache_refs_[hist];
  if (page < 0 || size_t(page) >= refs.size() || refs[size_t(page)] <= 0 || (delta < 0 && by_cache && cached[size_t(page)] <= 0))
    fail("DeviceKvCache", std::string(hist ? "history" : "fp") + " page " + std::to_string(page) +
                              (delta < 0 ? " released" : " shared") + " but not held");
  const auto cache_only = [&] { return cached[size_t(page)] > 0 && cached[size_t(page)] == refs[size_t(page)]; };
  const bool was = cache_only();
  refs[size_t(page)] += delta;
  if (by_cache) cached[size_t(page)] += delta;
  cache_only_[hist] += int64_t(cache_only()) - int64_t(was);
  if (refs[size_t(page)] == 0) (hist ? free_hist_ : free_fp_).push_back(page);
}

void DeviceKvCache::cache_hold(Pool pool, int32_t page) { change_owners(pool == Pool::hist, page, +1, true); }
void DeviceKvCache::cache_drop(Pool pool, int32_t page) { change_owners(pool == Pool::hist, page, -1, true); }

bool DeviceKvCache::cache_only(Pool pool, int32_t page) const {
  const bool h = pool == Pool::hist;
  return page >= 0 && size_t(page) < refs_[h].size() && cache_refs_[h][size_t(page)] > 0 &&
         cache_refs_[h][size_t(page)] == refs_[h][size_t(page)];
}

int32_t DeviceKvCache::entry(Pool pool, int slot, int64_t i) const {
  check_slot(slot, "DeviceKvCache::entry");
  const bool h = pool == Pool::hist;
  const int64_t stride = h ? hist_stride_ : fp_stride_;
  return i >= 0 && i < stride ? (h ? h_hist_table_ : h_fp_table_)[size_t(slot) * size_t(stride) + size_t(i)] : -1;
}

void DeviceKvCache::adopt(int slot, int64_t length, const std::vector<int32_t>& fp, const std::vector<int32_t>& hist) {
  const char* what = "DeviceKvCache::adopt";
  check_slot(slot, what);
  if (length_[size_t(slot)] != 0) fail(what, "sequence slot " + std::to_string(slot) + " is not empty");
  if (length <= 0 || length > limits_.max_seq_len || int64_t(fp.size()) > fp_stride_ ||
      int64_t(hist.size()) > hist_stride_)
    fail(what, "a prefix of " + std::to_string(length) + " tokens does not fit the page tables");
  for (const auto& [pages, h] : {std::pair{&fp, false}, std::pair{&hist, true}})
    for (size_t i = 0; i < pages->size(); ++i)
      if ((*pages)[i] >= 0) {
        change_owners(h, (*pages)[i], +1, false);
        set_entry(h, slot, int64_t(i), (*pages)[i]);
      }
  length_[size_t(slot)] = length;
}

bool DeviceKvCache::unshare_hist(int slot, int64_t i) {
  const char* what = "DeviceKvCache::unshare_hist";
  const int32_t page = entry(Pool::hist, slot, i);
  if (page < 0) fail(what, "sequence slot " + std::to_string(slot) + " has no history page " + std::to_string(i));
  if (free_hist_.empty()) return false;
  const int32_t q = take_page(true);
  for (int l = 0; l < n_layers_; ++l) {
    const size_t bytes = size_t(n_kv_heads_) * kHistPage * row_bytes(l);
    if (bytes == 0) continue;
    for (uint8_t* pool : {hist_k_[size_t(l)], hist_v_[size_t(l)]})
      if (cudaMemcpyAsync(pool + size_t(q) * bytes, pool + size_t(page) * bytes, bytes, cudaMemcpyDeviceToDevice,
                          stream_) != cudaSuccess)
        fail(what, "device copy failed");
  }
  set_entry(true, slot, i, q);
  release_page(true, page);
  return true;
}

}  // namespace oscar::cuda

// Swap (device_kv_cache.h): pages to and from host memory, one copy per run of
// consecutive page numbers (the free list hands them out in order, so runs are long).
namespace oscar::cuda {

DeviceKvCache::Pages DeviceKvCache::SwapTable::pages() const {
  Pages p;
  for (uint8_t h : fp_held) p.fp += h;
  for (uint8_t h : hist_held) p.hist += h;
  return p;
}

size_t DeviceKvCache::swap_bytes(int slot) const {
  check_slot(slot, "DeviceKvCache::swap_bytes");
  size_t fp = 0, hist = 0;
  for (int64_t i = 0; i < fp_stride_; ++i) fp += h_fp_table_[size_t(slot) * size_t(fp_stride_) + size_t(i)] >= 0;
  for (int64_t i = 0; i < hist_stride_; ++i)
    hist += h_hist_table_[size_t(slot) * size_t(hist_stride_) + size_t(i)] >= 0;
  return fp * fp_page_bytes() + hist * hist_page_bytes();
}

void DeviceKvCache::copy_swap(const std::vector<int32_t>& fp, const std::vector<int32_t>& hist, uint8_t* host,
                              bool to_host) {
  const auto copy_pool = [&](uint8_t* pool, size_t page_bytes, const std::vector<int32_t>& pages) {
    for (size_t i = 0; i < pages.size();) {
      size_t j = i + 1;
      while (j < pages.size() && pages[j] == pages[j - 1] + 1) ++j;
      uint8_t* dev = pool + size_t(pages[i]) * page_bytes;
      uint8_t* h = host + i * page_bytes;
      const cudaError_t e = cudaMemcpyAsync(to_host ? h : dev, to_host ? dev : h, (j - i) * page_bytes,
                                            to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream_);
      if (e != cudaSuccess) fail("DeviceKvCache swap", cudaGetErrorString(e));
      i = j;
    }
    host += pages.size() * page_bytes;
  };
  const size_t fp_bytes = size_t(n_kv_heads_) * kPage * size_t(head_dim_) * 2;
  for (int l = 0; l < n_layers_; ++l) {
    copy_pool(reinterpret_cast<uint8_t*>(fp_k_[size_t(l)]), fp_bytes, fp);
    copy_pool(reinterpret_cast<uint8_t*>(fp_v_[size_t(l)]), fp_bytes, fp);
    const size_t hist_bytes = size_t(n_kv_heads_) * kHistPage * row_bytes(l);
    if (hist_bytes == 0) continue;
    copy_pool(hist_k_[size_t(l)], hist_bytes, hist);
    copy_pool(hist_v_[size_t(l)], hist_bytes, hist);
  }
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) fail("DeviceKvCache swap", cudaGetErrorString(e));
}

DeviceKvCache::SwapTable DeviceKvCache::swap_out(int slot, uint8_t* host) {
  check_slot(slot, "DeviceKvCache::swap_out");
  SwapTable t;
  t.length = length_[size_t(slot)];
  std::vector<int32_t> fp, hist;
  for (int64_t i = 0; i < fp_stride_; ++i) {
    const int32_t p = h_fp_table_[size_t(slot) * size_t(fp_stride_) + size_t(i)];
    t.fp_held.push_back(p >= 0);
    if (p >= 0) fp.push_back(p);
  }
  for (int64_t i = 0; i < hist_stride_; ++i) {
    const int32_t p = h_hist_table_[size_t(slot) * size_t(hist_stride_) + size_t(i)];
    t.hist_held.push_back(p >= 0);
    if (p >= 0) hist.push_back(p);
  }
  copy_swap(fp, hist, host, true);
  remove_sequence(slot);
  return t;
}

bool DeviceKvCache::swap_in(int slot, const SwapTable& t, const uint8_t* host) {
  const char* what = "DeviceKvCache::swap_in";
  check_slot(slot, what);
  if (length_[size_t(slot)] != 0) fail(what, "sequence slot " + std::to_string(slot) + " is not empty");
  if (int64_t(t.fp_held.size()) != fp_stride_ || int64_t(t.hist_held.size()) != hist_stride_ ||
      t.length > limits_.max_seq_len)
    fail(what, "the swapped table does not match this cache");
  const Pages need = t.pages();
  if (need.fp > int64_t(free_fp_.size()) || need.hist > int64_t(free_hist_.size())) return false;
  // Which page holds which entry is free to choose: ascending, so that the copies run over
  // consecutive pages (the free list hands back released pages in reverse).
  std::vector<int32_t> fp(size_t(need.fp)), hist(size_t(need.hist));
  for (int32_t& p : fp) p = take_page(false);
  for (int32_t& p : hist) p = take_page(true);
  std::sort(fp.begin(), fp.end());
  std::sort(hist.begin(), hist.end());
  for (int64_t i = 0, k = 0; i < fp_stride_; ++i)
    if (t.fp_held[size_t(i)]) h_fp_table_[size_t(slot) * size_t(fp_stride_) + size_t(i)] = fp[size_t(k++)];
  for (int64_t i = 0, k = 0; i < hist_stride_; ++i)
    if (t.hist_held[size_t(i)]) h_hist_table_[size_t(slot) * size_t(hist_stride_) + size_t(i)] = hist[size_t(k++)];
  upload_tables(slot);
  copy_swap(fp, hist, const_cast<uint8_t*>(host), false);
  length_[size_t(slot)] = t.length;
  return true;
}

}  // namespace oscar::cuda
