// KvCache's prefix cache: whole pages of a prompt shared between sequences (see the
// contract in kv_cache.h and docs/server.md). SHA-256 comes from OpenSSL's libcrypto.
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>

#include "oscar/core/error.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {

namespace {
void sha256(const void* data, size_t n, uint8_t out[32]) {
  unsigned len = 0;
  OSCAR_CHECK(EVP_Digest(data, n, out, &len, EVP_sha256(), nullptr) == 1 && len == 32, "SHA-256 failed");
}
}  // namespace

size_t KvCache::PrefixKeyHash::operator()(const PrefixKey& k) const {
  size_t h;
  std::memcpy(&h, k.data(), sizeof h);  // the key is a digest: any 8 bytes of it are uniform
  return h;
}

void KvCache::enable_prefix_cache(std::string_view salt) {
  if (spec_.quant == KvQuant::kivi2) fail("prefix cache: KIVI's per-channel key blocks cannot be shared");
  const int B = spec_.block_tokens;
  if (spec_.quantized() && (spec_.sink % B != 0 || spec_.recent % B != 0))
    fail("prefix cache: the sink ({}) and recent ({}) windows must be whole pages of {} tokens", spec_.sink,
         spec_.recent, B);
  // The salt fixes everything that makes equal tokens give different pages.
  const std::string what = fmt::format("{}|{}|sink {}|recent {}|group {}|page {}", salt, spec_.name(), spec_.sink,
                                        spec_.recent, spec_.group, B);
  sha256(what.data(), what.size(), prefix_salt_.data());
  prefix_on_ = true;
}

std::vector<KvCache::PrefixKey> KvCache::prefix_keys(std::span<const int32_t> tokens, int64_t n_blocks) const {
  const int B = spec_.block_tokens;
  std::vector<PrefixKey> keys(static_cast<size_t>(n_blocks));
  std::vector<uint8_t> buf(64 + size_t(B) * 4);
  PrefixKey parent{};
  for (int64_t b = 0; b < n_blocks; ++b) {
    std::memcpy(buf.data(), parent.data(), 32);
    std::memcpy(buf.data() + 32, prefix_salt_.data(), 32);
    for (int i = 0; i < B; ++i) {  // token ids little-endian, whatever the host order
      const uint32_t id = uint32_t(tokens[size_t(b * B + i)]);
      for (int k = 0; k < 4; ++k) buf[64 + size_t(i) * 4 + size_t(k)] = uint8_t(id >> (8 * k));
    }
    sha256(buf.data(), buf.size(), keys[size_t(b)].data());
    parent = keys[size_t(b)];
  }
  return keys;
}

KvPages KvCache::evictable_pages() const {
  KvPages n;
  for (const auto& [key, e] : prefix_) {
    if (e.fp >= 0 && fp_alloc_.owners(e.fp) == 1) ++n.fp;
    if (e.history >= 0 && q_alloc_.owners(e.history) == 1) ++n.history;
  }
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
    auto victim = prefix_.end();
    for (auto it = prefix_.begin(); it != prefix_.end(); ++it) {
      const PrefixEntry& e = it->second;
      const bool frees = want_fp ? e.fp >= 0 && fp_alloc_.owners(e.fp) == 1
                                 : e.history >= 0 && q_alloc_.owners(e.history) == 1;
      if (frees && (victim == prefix_.end() || e.used < victim->second.used)) victim = it;
    }
    if (victim == prefix_.end()) return false;
    if (victim->second.fp >= 0) fp_alloc_.release(victim->second.fp);
    if (victim->second.history >= 0) q_alloc_.release(victim->second.history);
    prefix_.erase(victim);
  }
  return true;
}

int64_t KvCache::attach_prefix(SeqId seq, std::span<const int32_t> tokens) {
  Sequence& s = seq_ref(seq);
  OSCAR_CHECK(s.length == 0 && s.blocks.empty(), "attach_prefix needs an empty sequence");
  if (!prefix_on_ || tokens.size() < 3) return 0;
  const int64_t B = spec_.block_tokens, sink_blocks = spec_.sink / B;
  // Leave at least two tokens to compute: a one-token rest would run as a decode step,
  // whose attention sums differ in the last bits from the prefill that a miss runs.
  const int64_t n_full = (int64_t(tokens.size()) - 2) / B;
  const std::vector<PrefixKey> keys = prefix_keys(tokens, n_full);
  std::vector<PrefixEntry*> found;
  for (const PrefixKey& k : keys) {
    auto it = prefix_.find(k);
    if (it == prefix_.end()) break;
    found.push_back(&it->second);
  }
  prefix_queries_ += n_full;
  // The longest prefix whose pages fit the windows the sequence has at that length.
  const bool quantized = spec_.quantized();
  auto needs_history = [&](int64_t b, int64_t h) { return quantized && b >= sink_blocks && (b + 1) * B <= h; };
  int64_t n = int64_t(found.size());
  for (; n > 0; --n) {
    const int64_t h = spec_.history_end(n * B);
    bool ok = true;
    for (int64_t b = 0; b < n && ok; ++b)
      ok = needs_history(b, h) ? found[size_t(b)]->history >= 0 : found[size_t(b)]->fp >= 0;
    if (ok) break;
  }
  if (n == 0) return 0;
  const int64_t P = n * B, h = spec_.history_end(P);
  for (int64_t b = 0; b < n; ++b) {
    PrefixEntry& e = *found[size_t(b)];
    e.used = ++prefix_clock_;
    if (needs_history(b, h)) {
      q_alloc_.retain(e.history);
      s.q_blocks.push_back(e.history);
      s.blocks.push_back(-1);  // its fp rows are history only, as after a commit
    } else {
      fp_alloc_.retain(e.fp);
      s.blocks.push_back(e.fp);
    }
  }
  s.length = P;
  s.demoted_end = quantized ? h : 0;
  prefix_hits_ += n;
  return P;
}

void KvCache::register_prefix(SeqId seq, std::span<const int32_t> tokens) {
  if (!prefix_on_) return;
  const Sequence& s = seq_ref(seq);
  const int64_t B = spec_.block_tokens, sink_blocks = spec_.sink / B;
  const int64_t n_full = std::min<int64_t>(int64_t(tokens.size()), s.length) / B;
  const std::vector<PrefixKey> keys = prefix_keys(tokens, n_full);
  for (int64_t b = 0; b < n_full; ++b) {
    PrefixEntry& e = prefix_[keys[size_t(b)]];
    e.used = ++prefix_clock_;
    if (e.fp < 0 && s.blocks[size_t(b)] >= 0) {
      e.fp = s.blocks[size_t(b)];
      fp_alloc_.retain(e.fp);
    }
    const int64_t qi = b - sink_blocks;
    if (e.history < 0 && spec_.quantized() && qi >= 0 && (b + 1) * B <= s.demoted_end) {
      e.history = s.q_blocks[size_t(qi)];
      q_alloc_.retain(e.history);
    }
    if (e.fp < 0 && e.history < 0) prefix_.erase(keys[size_t(b)]);  // nothing to share (cannot happen: kept for safety)
  }
}

PrefixCacheStats KvCache::prefix_stats() const { return {prefix_queries_, prefix_hits_, int64_t(prefix_.size())}; }

}  // namespace oscar
