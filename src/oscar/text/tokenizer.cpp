// Tokenizer construction (validation, lookup tables) and the encode/decode paths.
// encode: special-token split -> regex pre-tokenizer -> byte-level ids -> BPE merges.
#include "oscar/text/tokenizer.h"

#include <array>

#include "oscar/core/error.h"
#include "oscar/text/byte_level.h"

namespace oscar {
namespace {

// Texts that end a turn or a document in the vocabularies we know (control tokens only).
constexpr std::array<std::string_view, 10> k_eog_texts = {
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>",   "<|eom_id|>", "<|end_of_text|>",
    "<end_of_turn>", "<|end|>",    "<|return|>",   "<EOT>",      "<|end▁of▁sentence|>",
};

PreTypeSpec validated_pre_type(const TokenizerData& d) {
  if (d.model != "gpt2") {
    fail("tokenizer: unsupported tokenizer.ggml.model '{}' (only 'gpt2' byte-level BPE is implemented)", d.model);
  }
  auto spec = find_pre_type(d.pre);
  if (!spec) fail("tokenizer: unknown tokenizer.ggml.pre '{}' (known: {})", d.pre, known_pre_types());
  return *spec;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerData d)
    : data_(std::move(d)), spec_(validated_pre_type(data_)), pre_tokenizer_(spec_.regexes) {
  const size_t n = data_.tokens.size();
  if (n == 0) fail("tokenizer: tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) fail("tokenizer: {} tokens is too many", n);
  if (data_.token_types.empty()) data_.token_types.assign(n, static_cast<int32_t>(TokenType::normal));
  if (data_.token_types.size() != n) {
    fail("tokenizer: tokenizer.ggml.token_type has {} entries for {} tokens", data_.token_types.size(), n);
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = data_.token_types[i];
    if (t < 0 || t > static_cast<int32_t>(TokenType::byte)) fail("tokenizer: token {} has unknown type {}", i, t);
  }
  const std::pair<const char*, int32_t> ids[] = {
      {"bos", data_.bos_id}, {"eos", data_.eos_id}, {"eot", data_.eot_id}, {"pad", data_.pad_id}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= static_cast<int64_t>(n)) fail("tokenizer: {} token id {} is outside the vocabulary of {}", name, id, n);
  }
  if (data_.add_bos && data_.bos_id < 0) fail("tokenizer: add_bos_token is set but there is no bos_token_id");

  id_of_text_.reserve(n);
  pieces_.resize(n);
  eog_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& text = data_.tokens[i];
    id_of_text_.try_emplace(text, id);
    const auto type = static_cast<TokenType>(data_.token_types[i]);
    // Normal tokens are stored byte-level; special and added tokens as their own text.
    std::optional<std::string> bytes;
    if (type == TokenType::normal || type == TokenType::undefined) bytes = byte_level::decode(text);
    pieces_[i] = bytes ? std::move(*bytes) : text;
    if (type == TokenType::control || type == TokenType::user_defined) {
      specials_.add(text, id);
      for (std::string_view e : k_eog_texts) eog_[i] |= text == e;
    }
  }
  for (int32_t id : {data_.eos_id, data_.eot_id}) {
    if (id >= 0) eog_[id] = 1;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of_text_.find(byte_level::byte_to_text(static_cast<uint8_t>(b)));
    byte_ids_[b] = it == id_of_text_.end() ? -1 : it->second;
  }

  for (size_t r = 0; r < data_.merges.size(); ++r) {
    const std::string& m = data_.merges[r];
    const size_t sp = m.find(' ', 1);  // from 1: a token may itself be a space in odd vocabs
    if (sp == std::string::npos) fail("tokenizer: merge {} '{}' is not 'left right'", r, m);
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    const auto l = id_of_text_.find(left), rt = id_of_text_.find(right), lr = id_of_text_.find(left + right);
    if (l == id_of_text_.end()) fail("tokenizer: merge {} '{}' names unknown token '{}'", r, m, left);
    if (rt == id_of_text_.end()) fail("tokenizer: merge {} '{}' names unknown token '{}'", r, m, right);
    if (lr == id_of_text_.end()) fail("tokenizer: merge {} '{}' makes '{}', which is not a token", r, m, left + right);
    merges_.add(l->second, rt->second, lr->second);
  }
}

void Tokenizer::check_id(int32_t id, const char* what) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: {}: token id {} is outside [0, {})", what, id, n_vocab());
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id, "token_type");
  return static_cast<TokenType>(data_.token_types[id]);
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_[id] != 0; }

std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const {
  const auto it = id_of_text_.find(std::string(piece));
  if (it == id_of_text_.end()) return std::nullopt;
  return it->second;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && data_.bos_id >= 0) out.push_back(data_.bos_id);
  if (!parse_special) {
    encode_fragment(text, out);
    return out;
  }
  size_t pos = 0;
  for (;;) {
    const SpecialTokenMatcher::Match m = specials_.find(text, pos);
    if (m.pos == std::string_view::npos) break;
    encode_fragment(text.substr(pos, m.pos - pos), out);
    out.push_back(m.id);
    pos = m.pos + m.len;
  }
  encode_fragment(text.substr(pos), out);
  return out;
}

void Tokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  for (std::string_view piece : pre_tokenizer_.split(text)) encode_piece(piece, out);
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (spec_.ignore_merges) {
    std::string text;
    byte_level::encode_append(piece, text);
    const auto it = id_of_text_.find(text);
    if (it != id_of_text_.end()) {
      const auto type = static_cast<TokenType>(data_.token_types[it->second]);
      if (type != TokenType::control && type != TokenType::user_defined) {
        out.push_back(it->second);
        return;
      }
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols.push_back(id);
  }
  merges_.merge_append(symbols, out);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const { return decode(ids, true); }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_control) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id, "decode");
    if (!render_control && data_.token_types[id] == static_cast<int32_t>(TokenType::control)) continue;
    out += pieces_[id];
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  check_id(id, "token_to_piece");
  return pieces_[id];
}

}  // namespace oscar
