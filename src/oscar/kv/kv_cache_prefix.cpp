// KvCache's prefix cache: whole pages of a prompt shared between sequences, through the
// PrefixIndex both caches use (its key chain and hit rule; docs/server.md).
#include <fmt/format.h>

#include <algorithm>

#include "oscar/core/error.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {

void KvCache::enable_prefix_cache(std::string_view salt) {
  if (spec_.quant == KvQuant::kivi2) fail("prefix cache: KIVI's per-channel key blocks cannot be shared");
  const int B = spec_.block_tokens;
  if (spec_.quantized() && (spec_.sink % B != 0 || spec_.recent % B != 0))
    fail("prefix cache: the sink ({}) and recent ({}) windows must be whole pages of {} tokens", spec_.sink,
         spec_.recent, B);
  // The salt fixes everything that makes equal tokens give different pages.
  const std::string what = fmt::format("{}|{}|sink {}|recent {}|group {}|page {}", salt, spec_.name(), spec_.sink,
                                        spec_.recent, spec_.group, B);
  prefix_.enable(what, PrefixWindows{B, spec_.sink, spec_.quantized(),
                                     [spec = spec_](int64_t t) { return spec.history_end(t); }});
}

KvPages KvCache::evictable_pages() const {
  KvPages n;
  prefix_.for_each([&](const PrefixEntry& e) {
    if (e.fp >= 0 && fp_alloc_.owners(e.fp) == 1) ++n.fp;
    if (e.history >= 0 && q_alloc_.owners(e.history) == 1) ++n.history;
  });
  return n;
}

KvPages KvCache::free_pages() const {
  KvPages n = evictable_pages();
  n.fp += fp_alloc_.n_free();
  n.history += q_alloc_.n_free();
  return n;
}

bool KvCache::evict_for(const KvPages& need) {
  while (fp_alloc_.n_free() < need.fp || q_alloc_.n_free() < need.history) {
    const bool want_fp = fp_alloc_.n_free() < need.fp;
    // The least recently used entry that frees a page of a pool that is short.
    const bool evicted = prefix_.evict_one(
        [&](const PrefixEntry& e) {
          return want_fp ? e.fp >= 0 && fp_alloc_.owners(e.fp) == 1
                         : e.history >= 0 && q_alloc_.owners(e.history) == 1;
        },
        [&](const PrefixEntry& e) {
          if (e.fp >= 0) fp_alloc_.release(e.fp);
          if (e.history >= 0) q_alloc_.release(e.history);
        });
    if (!evicted) return false;
  }
  return true;
}

int64_t KvCache::attach_prefix(SeqId seq, std::span<const int32_t> tokens) {
  Sequence& s = seq_ref(seq);
  OSCAR_CHECK(s.length == 0 && s.blocks.empty(), "attach_prefix needs an empty sequence");
  const std::vector<PrefixEntry*> found = prefix_.find(tokens);
  const int64_t n = prefix_.usable_blocks(found);
  if (n == 0) return 0;
  const int64_t P = n * spec_.block_tokens;
  prefix_.touch_prefix(std::span(found).first(size_t(n)));
  for (int64_t b = 0; b < n; ++b) {
    PrefixEntry& e = *found[size_t(b)];
    if (prefix_.needs_history(b, n)) {
      q_alloc_.retain(e.history);
      s.q_blocks.push_back(e.history);
      s.blocks.push_back(-1);  // its fp rows are history only, as after a commit
    } else {
      fp_alloc_.retain(e.fp);
      s.blocks.push_back(e.fp);
    }
  }
  s.length = P;
  s.demoted_end = spec_.quantized() ? spec_.history_end(P) : 0;
  prefix_.count_hits(n);
  return P;
}

void KvCache::register_prefix(SeqId seq, std::span<const int32_t> tokens) {
  if (!prefix_.enabled()) return;
  const Sequence& s = seq_ref(seq);
  const int64_t B = spec_.block_tokens, sink_blocks = spec_.sink / B;
  const int64_t n_full = std::min<int64_t>(int64_t(tokens.size()), s.length) / B;
  prefix_.put_prefix(prefix_.keys(tokens, n_full), [&](int64_t b, PrefixEntry& e) {
    if (e.fp < 0 && s.blocks[size_t(b)] >= 0) {
      e.fp = s.blocks[size_t(b)];
      fp_alloc_.retain(e.fp);
    }
    const int64_t qi = b - sink_blocks;
    if (e.history < 0 && spec_.quantized() && qi >= 0 && (b + 1) * B <= s.demoted_end) {
      e.history = s.q_blocks[size_t(qi)];
      q_alloc_.retain(e.history);
    }
  });
}

PrefixCacheStats KvCache::prefix_stats() const { return prefix_.stats(); }

}  // namespace oscar
