#include "oscar/engine/cuda/device_runner.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "oscar/core/error.h"
#include "oscar/engine/cuda/device_model_loader.h"
#include "oscar/engine/cuda/device_weight_loader.h"
#include "oscar/engine/kv_budget.h"

namespace oscar {

namespace {

// DeviceModel and its cache report trouble as std::runtime_error; the engine's one error
// type is oscar::Error.
template <typename F>
auto device_call(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}: {}", what, e.what());
  }
}

}  // namespace

DeviceKvPlan plan_device_kv(const Transformer& t, int64_t budget_bytes, int max_seqs, int64_t ctx,
                            int64_t forward_rows) {
  const ModelConfig& c = t.config();
  const cuda::KvPageGeometry g(c.n_layers, c.n_kv_heads, c.head_dim, device_kv_format(t));
  DeviceKvPlan p;
  p.fp_page_bytes = int64_t(g.fp_page_bytes());
  p.hist_page_bytes = int64_t(g.hist_page_bytes());
  p.fp_page_tokens = g.fp_page_tokens();
  p.hist_page_tokens = g.hist_page_tokens();
  int64_t fp_per_seq = 0;
  for (int64_t n = 1; n <= ctx; ++n) fp_per_seq = std::max(fp_per_seq, g.fp_pages_for_length(n));
  fp_per_seq += 1;  // a step's new page comes before the released one goes
  const int64_t hist_per_seq = g.hist_pages_for_length(ctx);
  p.forward_rows = forward_rows > 0 ? forward_rows : kDefaultForwardRows;
  if (p.forward_rows > (int64_t(1) << 20)) fail("{} rows in one forward: at most 1048576", p.forward_rows);
  const int64_t transient = p.forward_rows / p.fp_page_tokens + 3;  // one prefill piece holds its pages
  const engine::KvBudgetSplit split = engine::split_kv_budget(
      budget_bytes, {fp_per_seq, hist_per_seq}, {p.fp_page_bytes, p.hist_page_bytes}, transient, max_seqs);
  if (split.n_seqs < 1)
    fail("a KV budget of {:.1f} MiB cannot hold one sequence of {} tokens on the GPU ({:.1f} MiB): raise --kv-mem or "
         "lower -c", double(split.budget_bytes) / (1 << 20), ctx,
         double((fp_per_seq + transient) * p.fp_page_bytes + hist_per_seq * p.hist_page_bytes) / (1 << 20));
  if (!g.has_history()) {
    p.fp_pages = split.budget_bytes / p.fp_page_bytes;
  } else {  // fp pages for the windows of the sequences that fit (all their tokens where a layer keeps BF16)
    p.fp_pages = split.pages.fp;
    // At least one: the device allocates each layer's history pool from this count, and
    // its step kernels need one even where no sequence reaches history (ctx ≤ S + W).
    p.hist_pages = std::max<int64_t>(1, split.pages.history);
  }
  p.bytes = p.fp_pages * p.fp_page_bytes + p.hist_pages * p.hist_page_bytes;
  p.seqs_at_ctx = std::min<int64_t>((p.fp_pages - (g.has_history() ? transient : 0)) / fp_per_seq,
                                    hist_per_seq > 0 ? p.hist_pages / hist_per_seq : INT64_MAX);
  return p;
}

DeviceRunner::DeviceRunner(const Transformer& t, const DeviceKvPlan& plan, int max_seqs, int64_t ctx)
    : n_vocab_(t.config().n_vocab), shape_(t.kv_shape()), kv_name_(t.kv_spec().name()) {
  cuda::KvCacheLimits limits;
  limits.max_seqs = max_seqs;
  limits.max_seq_len = ctx;
  limits.fp_pages = plan.fp_pages;
  limits.hist_pages = plan.hist_pages;
  limits.prefill_chunk = int(plan.forward_rows > 0 ? plan.forward_rows : kDefaultForwardRows);
  dm_ = device_call("--device cuda", [&] { return load_device_model(t, limits, cuda::GemmPrecision::bf16, &load_); });
}

std::string DeviceRunner::describe() const {
  cudaDeviceProp prop{};
  int dev = 0;
  const bool named = cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess;
  return fmt::format("cuda ({}): BF16 weights {:.2f} GiB (streamed from {:.2f} GiB stored in {:.1f} s), cuBLAS "
                     "products; KV '{}': decode attention split-KV (quantized history on tensor cores), one graph per "
                     "batch size; one forward per step over the decode rows and prefill chunks",
                     named ? prop.name : "GPU", double(dm_->weight_bytes()) / (1 << 30),
                     double(load_.file_bytes) / (1 << 30), load_.seconds, kv_name_);
}

SeqId DeviceRunner::add_sequence() {
  return device_call("add_sequence", [&] { return SeqId(dm_->cache().add_sequence()); });
}

void DeviceRunner::free_sequence(SeqId seq) {
  device_call("free_sequence", [&] { dm_->cache().remove_sequence(int(seq)); });
}

int64_t DeviceRunner::length(SeqId seq) const { return dm_->cache().length(int(seq)); }

KvPages DeviceRunner::append_need(SeqId seq, int64_t n) const {
  const auto p = dm_->cache().append_need(int(seq), n);
  return {p.fp, p.hist};
}

KvPages DeviceRunner::pages_for_length(int64_t t) const {
  const auto p = dm_->cache().pages_for_length(t);
  return {p.fp, p.hist};
}

KvPages DeviceRunner::free_pages() const {
  // Pages only the prefix cache holds count as free: run() evicts them when needed.
  const auto p = dm_->cache().free_pages(), c = dm_->cache().cache_only_pages();
  return {p.fp + c.fp, p.hist + c.hist};
}

engine::KvPageBytes DeviceRunner::page_bytes() const {
  return {int64_t(dm_->cache().fp_page_bytes()), int64_t(dm_->cache().hist_page_bytes())};
}

KvSegmentUsage DeviceRunner::usage() const {
  KvSegmentUsage u;
  dm_->cache().segment_pages(&u.sink_pages, &u.recent_pages, &u.history_pages);
  const auto c = dm_->cache().cache_only_pages();
  u.cached_fp_pages = c.fp;
  u.cached_history_pages = c.hist;
  const auto f = dm_->cache().free_pages();
  u.fp_free_pages = f.fp;
  u.history_free_pages = f.hist;
  return u;
}

int DeviceRunner::enable_prefix_cache(std::string_view salt) {
  const cuda::DeviceKvCache& c = dm_->cache();
  const KvFormat& f = c.format();
  const cuda::KvPageGeometry g = c.geometry();
  const int B = g.fp_page_tokens();
  if (g.has_history() && g.keeps_fp())
    fail("prefix cache: a format with BF16-only layers beside quantized ones keeps no shareable pages on the GPU");
  if (g.has_history() && (f.sink % B != 0 || f.window % B != 0))
    fail("prefix cache: the sink ({}) and window ({}) must be whole pages of {} tokens", f.sink, f.window, B);
  const std::string what =
      fmt::format("{}|cuda|{}|sink {}|recent {}|group {}|page {}", salt, kv_name_, f.sink, f.window, f.group, B);
  prefix_.enable(what, PrefixWindows{B, f.sink, g.has_history(), [g](int64_t t) { return g.history_end(t); }});
  return B;
}

int64_t DeviceRunner::attach_prefix(SeqId seq, std::span<const int32_t> tokens) {
  cuda::DeviceKvCache& c = dm_->cache();
  const int slot = int(seq);
  OSCAR_CHECK(c.length(slot) == 0, "attach_prefix needs an empty sequence");
  const std::vector<PrefixEntry*> found = prefix_.find(tokens);
  if (found.empty()) return 0;
  const int64_t B = cuda::KvPageGeometry::fp_page_tokens(), H = cuda::KvPageGeometry::hist_page_tokens();
  const int64_t S = c.format().sink;
  // Blocks are fp pages, history pages are four times larger: the blocks of one history page
  // must name the same page (they do when one sequence registered them).
  const auto first_block_of_page = [&](int64_t b) { return (S + (b * B - S) / H * H) / B; };
  const int64_t n = prefix_.usable_blocks(found, [&](int64_t m) {
    for (int64_t b = 0; b < m; ++b)
      if (prefix_.needs_history(b, m) && found[size_t(b)]->history != found[size_t(first_block_of_page(b))]->history)
        return false;
    return true;
  });
  if (n == 0) return 0;
  const int64_t P = n * B, h = c.history_end(P);
  std::vector<int32_t> fp(size_t(n), -1), hist;
  prefix_.touch_prefix(std::span(found).first(size_t(n)));
  for (int64_t b = 0; b < n; ++b) {
    if (!prefix_.needs_history(b, n)) {
      fp[size_t(b)] = found[size_t(b)]->fp;
    } else if ((b * B - S) % H == 0) {
      hist.push_back(found[size_t(b)]->history);
    }
  }
  device_call("attach_prefix", [&] { c.adopt(slot, P, fp, hist); });
  // The history page the hit ends inside gets the next rows: a private copy of it.
  if (!hist.empty() && (h - S) % H != 0) {
    const int64_t last = int64_t(hist.size()) - 1;
    if (!device_call("attach_prefix", [&] { return c.unshare_hist(slot, last); }) &&
        !(evict_for({0, 1}) && device_call("attach_prefix", [&] { return c.unshare_hist(slot, last); }))) {
      device_call("attach_prefix", [&] { c.clear_sequence(slot); });
      return 0;
    }
  }
  prefix_.count_hits(n);
  return P;
}

void DeviceRunner::register_prefix(SeqId seq, std::span<const int32_t> tokens) {
  if (!prefix_.enabled()) return;
  using Pool = cuda::DeviceKvCache::Pool;
  cuda::DeviceKvCache& c = dm_->cache();
  const int slot = int(seq);
  const int64_t B = cuda::KvPageGeometry::fp_page_tokens(), H = cuda::KvPageGeometry::hist_page_tokens();
  const int64_t S = c.format().sink, L = std::min<int64_t>(int64_t(tokens.size()), c.length(slot));
  const bool quantized = c.geometry().has_history();
  const int64_t h = quantized ? c.history_end(c.length(slot)) : 0;  // rows [S, h) are written history
  prefix_.put_prefix(prefix_.keys(tokens, L / B), [&](int64_t b, PrefixEntry& e) {
    if (e.fp < 0) {
      const int32_t p = c.entry(Pool::fp, slot, b);
      if (p >= 0) device_call("register_prefix", [&] { c.cache_hold(Pool::fp, e.fp = p); });
    }
    if (e.history < 0 && quantized && b * B >= S && (b + 1) * B <= h) {
      const int32_t p = c.entry(Pool::hist, slot, (b * B - S) / H);
      if (p >= 0) device_call("register_prefix", [&] { c.cache_hold(Pool::hist, e.history = p); });
    }
  });
}

int64_t DeviceRunner::swap_out(SeqId seq) {
  cuda::DeviceKvCache& c = dm_->cache();
  const size_t bytes = device_call("swap_out", [&] { return c.swap_bytes(int(seq)); });
  if (!swap_.fits(int64_t(bytes))) return -1;
  // Pinned, so that the copies run at the bus's speed, and reused (pinned_pool.h); refused
  // (no swap, nothing changed) when the host cannot pin that much.
  size_t size = 0;
  uint8_t* host = bytes > 0 ? pinned_.take(bytes, size_t(swap_.stats().capacity_bytes), &size) : nullptr;
  if (bytes > 0 && !host) return -1;
  SwapImage img;
  img.bytes = std::shared_ptr<uint8_t>(host, [this, size](uint8_t* p) { pinned_.give(p, size); });
  img.table = device_call("swap_out", [&] { return c.swap_out(int(seq), img.bytes.get()); });
  return swap_.put(std::move(img), int64_t(bytes));
}

KvPages DeviceRunner::swap_need(int64_t handle) const {
  const auto p = swap_.get(handle).table.pages();
  return {p.fp, p.hist};
}

SeqId DeviceRunner::swap_in(int64_t handle) {
  cuda::DeviceKvCache& c = dm_->cache();
  const SwapImage& img = swap_.get(handle);
  const KvPages need = swap_need(handle), free = free_pages();
  if (need.fp > free.fp || need.history > free.history || !evict_for(need)) return -1;
  const int slot = device_call("swap_in", [&] { return c.add_sequence(); });
  if (!device_call("swap_in", [&] { return c.swap_in(slot, img.table, img.bytes.get()); })) {
    c.remove_sequence(slot);
    return -1;
  }
  swap_.drop(handle);
  return SeqId(slot);
}

bool DeviceRunner::evict_for(const KvPages& need) {
  using Pool = cuda::DeviceKvCache::Pool;
  cuda::DeviceKvCache& c = dm_->cache();
  while (c.free_pages().fp < need.fp || c.free_pages().hist < need.history) {
    const bool want_fp = c.free_pages().fp < need.fp;
    // The least recently used entry holding a page of the short pool that only the cache
    // holds (a history page frees once all four of its blocks' entries are gone).
    const bool evicted = prefix_.evict_one(
        [&](const PrefixEntry& e) {
          return want_fp ? c.cache_only(Pool::fp, e.fp) : c.cache_only(Pool::hist, e.history);
        },
        [&](const PrefixEntry& e) {
          if (e.fp >= 0) c.cache_drop(Pool::fp, e.fp);
          if (e.history >= 0) c.cache_drop(Pool::hist, e.history);
        });
    if (!evicted) return false;
  }
  return true;
}

void DeviceRunner::run(const engine::Batch& batch, engine::StepOutput& out) {
  OSCAR_CHECK(batch.n_seqs() > 0, "empty batch");
  if (prefix_.enabled()) {  // room for the step, from pages only the prefix cache holds
    KvPages need;
    for (int i = 0; i < batch.n_seqs(); ++i) {
      const KvPages p = append_need(batch.seq_ids[size_t(i)], int64_t(batch.tokens_of(i).size()));
      need.fp += p.fp;
      need.history += p.history;
    }
    if (!evict_for(need)) fail("the step needs {} fp and {} history pages; the KV cache cannot free them", need.fp,
                               need.history);
  }
  const size_t V = size_t(n_vocab_);
  // Rows that are not wanted stay as they were: at 58 sequences × 152K vocabulary a full
  // logits download is 35 MB a step, which greedy requests never read.
  out.logits.resize(size_t(batch.n_seqs()) * V);
  out.argmax.assign(size_t(batch.n_seqs()), 0);
  out.token_logits.clear();
  std::vector<float> piece_logits;  // one forward's token logits
  for (int i = 0; i < batch.n_seqs(); ++i)
    OSCAR_CHECK(batch.positions[size_t(i)] == length(batch.seq_ids[size_t(i)]), "sequence {}: batch position {} but length {}",
                batch.seq_ids[size_t(i)], batch.positions[size_t(i)], length(batch.seq_ids[size_t(i)]));
  // One forward over consecutive sequences [i0, i1) of the batch (logits rows in order).
  const auto forward = [&](int i0, int i1) {
    std::vector<int> slots;
    std::vector<int32_t> starts{0}, tokens;
    std::vector<int64_t> from;
    bool wanted = false;
    for (int i = i0; i < i1; ++i) {
      const std::span<const int32_t> t = batch.tokens_of(i);
      slots.push_back(int(batch.seq_ids[size_t(i)]));
      tokens.insert(tokens.end(), t.begin(), t.end());
      starts.push_back(int32_t(tokens.size()));
      from.push_back(batch.token_logits_of(i));
      wanted = wanted || batch.wants_logits(i);
    }
    if (!batch.wants_token_logits()) from.clear();
    device_call("forward", [&] { dm_->forward(slots, starts, tokens, /*use_graph=*/true, from, &piece_logits); });
    out.token_logits.insert(out.token_logits.end(), piece_logits.begin(), piece_logits.end());
    const std::vector<int32_t> ids = device_call("forward", [&] { return dm_->download_next_ids(i1 - i0); });
    std::copy(ids.begin(), ids.end(), out.argmax.begin() + i0);
    if (wanted) device_call("forward", [&] { dm_->download_logits(i1 - i0, out.logits.data() + size_t(i0) * V); });
  };
  // The whole batch is one forward when its rows fit the device's activations (the
  // scheduler's step budget, at most prefill_chunk tokens, does); otherwise consecutive
  // sequences go together while they fit, and a longer chunk runs alone in pieces.
  const int64_t cap = dm_->max_rows();
  int i0 = 0;
  int64_t rows = 0;
  for (int i = 0; i < batch.n_seqs(); ++i) {
    const std::span<const int32_t> t = batch.tokens_of(i);
    const int64_t n = int64_t(t.size());
    if (rows + n <= cap) {
      rows += n;
      continue;
    }
    if (i > i0) forward(i0, i);
    i0 = i, rows = n;
    if (n <= cap) continue;
    const int slot = int(batch.seq_ids[size_t(i)]);
    const int64_t from = batch.token_logits_of(i);
    // A piece's token logits: those at or past `from`, counted from the piece's start.
    const auto piece_from = [&](int64_t a, int64_t m) -> std::vector<int64_t> {
      if (from < 0 || from >= a + m) return {-1};
      return {std::max<int64_t>(from - a, 0)};
    };
    for (int64_t a = 0; a + cap < n; a += cap) {  // all but the last piece: no last-token output
      device_call("forward", [&] {
        dm_->forward({slot}, {0, int32_t(cap)}, std::vector<int32_t>(t.begin() + a, t.begin() + a + cap), false,
                     piece_from(a, cap), &piece_logits);
      });
      out.token_logits.insert(out.token_logits.end(), piece_logits.begin(), piece_logits.end());
    }
    const int64_t done = (n - 1) / cap * cap;
    engine::Batch last;
    last.add(batch.seq_ids[size_t(i)], length(slot), t.subspan(size_t(done)), batch.wants_logits(i),
             piece_from(done, n - done)[0]);
    engine::StepOutput o;
    run(last, o);
    out.argmax[size_t(i)] = o.argmax[0];
    out.token_logits.insert(out.token_logits.end(), o.token_logits.begin(), o.token_logits.end());
    if (batch.wants_logits(i)) std::copy(o.logits.begin(), o.logits.end(), out.logits.begin() + long(size_t(i) * V));
    i0 = i + 1, rows = 0;
  }
  if (batch.n_seqs() > i0) forward(i0, batch.n_seqs());
}

}  // namespace oscar
