// The prefix cache's index (prefix_index.h). SHA-256 comes from OpenSSL's libcrypto.
#include "oscar/kv/prefix_index.h"

#include <openssl/evp.h>

#include <cstring>

#include "oscar/core/error.h"

namespace oscar {

namespace {
void sha256(const void* data, size_t n, uint8_t out[32]) {
  unsigned len = 0;
  OSCAR_CHECK(EVP_Digest(data, n, out, &len, EVP_sha256(), nullptr) == 1 && len == 32, "SHA-256 failed");
}
}  // namespace

size_t PrefixIndex::KeyHash::operator()(const Key& k) const {
  size_t h;
  std::memcpy(&h, k.data(), sizeof h);  // the key is a digest: any 8 bytes of it are uniform
  return h;
}

void PrefixIndex::enable(std::string_view salt, const PrefixWindows& w) {
  OSCAR_CHECK(w.block_tokens > 0 && w.history_end, "prefix index: bad windows");
  w_ = w;
  sha256(salt.data(), salt.size(), salt_.data());
  map_.clear();
  on_ = true;
}

std::vector<PrefixIndex::Key> PrefixIndex::keys(std::span<const int32_t> tokens, int64_t n_blocks) const {
  const int B = w_.block_tokens;
  std::vector<Key> keys(static_cast<size_t>(n_blocks));
  std::vector<uint8_t> buf(64 + size_t(B) * 4);
  Key parent{};
  for (int64_t b = 0; b < n_blocks; ++b) {
    std::memcpy(buf.data(), parent.data(), 32);
    std::memcpy(buf.data() + 32, salt_.data(), 32);
    for (int i = 0; i < B; ++i) {  // token ids little-endian, whatever the host order
      const uint32_t id = uint32_t(tokens[size_t(b * B + i)]);
      for (int k = 0; k < 4; ++k) buf[64 + size_t(i) * 4 + size_t(k)] = uint8_t(id >> (8 * k));
    }
    sha256(buf.data(), buf.size(), keys[size_t(b)].data());
    parent = keys[size_t(b)];
  }
  return keys;
}

std::vector<PrefixEntry*> PrefixIndex::find(std::span<const int32_t> tokens) {
  std::vector<PrefixEntry*> found;
  if (!on_ || tokens.size() < 3) return found;
  const int64_t n_full = (int64_t(tokens.size()) - 2) / w_.block_tokens;
  for (const Key& k : keys(tokens, n_full)) {
    auto it = map_.find(k);
    if (it == map_.end()) break;
    found.push_back(&it->second);
  }
  queries_ += n_full;
  return found;
}

bool PrefixIndex::needs_history(int64_t b, int64_t n) const {
  const int64_t B = w_.block_tokens;
  return w_.quantized && b * B >= w_.sink && (b + 1) * B <= w_.history_end(n * B);
}

int64_t PrefixIndex::usable_blocks(const std::vector<PrefixEntry*>& found,
                                   const std::function<bool(int64_t)>& also) const {
  for (int64_t n = int64_t(found.size()); n > 0; --n) {
    bool ok = true;
    for (int64_t b = 0; b < n && ok; ++b)
      ok = needs_history(b, n) ? found[size_t(b)]->history >= 0 : found[size_t(b)]->fp >= 0;
    if (ok && (!also || also(n))) return n;
  }
  return 0;
}

PrefixEntry& PrefixIndex::entry(const Key& k) {
  PrefixEntry& e = map_[k];
  touch(e);
  return e;
}

void PrefixIndex::touch_prefix(std::span<PrefixEntry* const> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) touch(**it);
}

void PrefixIndex::put_prefix(const std::vector<Key>& keys, const std::function<void(int64_t, PrefixEntry&)>& fill) {
  for (int64_t b = int64_t(keys.size()) - 1; b >= 0; --b) {
    PrefixEntry& e = entry(keys[size_t(b)]);
    fill(b, e);
    if (e.fp < 0 && e.history < 0) erase(keys[size_t(b)]);
  }
}

bool PrefixIndex::evict_one(const std::function<bool(const PrefixEntry&)>& frees,
                            const std::function<void(const PrefixEntry&)>& release) {
  auto victim = map_.end();
  for (auto it = map_.begin(); it != map_.end(); ++it)
    if (frees(it->second) && (victim == map_.end() || it->second.used < victim->second.used)) victim = it;
  if (victim == map_.end()) return false;
  release(victim->second);
  map_.erase(victim);
  return true;
}

}  // namespace oscar
