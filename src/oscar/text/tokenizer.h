// Byte-level BPE tokenizer (GPT-2 style) built from GGUF metadata, for the pre types
// of SmolLM2 ("smollm"), Llama 3 ("llama-bpe") and Qwen2 ("qwen2"), plus plain GPT-2.
// encode() matches Hugging Face `tokenizers` on the same vocabulary; decode() returns
// the exact bytes. A Tokenizer is immutable after construction and safe to share
// between threads.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "oscar/text/bpe.h"
#include "oscar/text/pre_type.h"
#include "oscar/text/pretokenizer.h"
#include "oscar/text/special_tokens.h"

namespace oscar {

namespace gguf {
class GgufFile;
}

// llama.cpp's token types, as stored in tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

struct TokenizerData {
  std::string model;                 // tokenizer.ggml.model; must be "gpt2"
  std::string pre;                   // tokenizer.ggml.pre ("smollm", "llama-bpe", "qwen2", ...)
  std::vector<std::string> tokens;   // [n_vocab] token text (byte-level for normal tokens)
  std::vector<int32_t> token_types;  // [n_vocab] TokenType values; empty: all normal
  std::vector<std::string> merges;   // "left right", best rank first
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;
};

// Reads the tokenizer.ggml.* keys; throws oscar::Error naming a missing or bad key.
TokenizerData tokenizer_data_from_gguf(const gguf::GgufFile& f);

class Tokenizer {
 public:
  // Validates everything; throws oscar::Error naming what is wrong (unknown model or
  // pre type, a token type out of range, a special id out of range, a merge naming an
  // unknown token, ...).
  explicit Tokenizer(TokenizerData d);

  // add_bos is honoured only when the vocabulary has a BOS token. With parse_special,
  // the text of CONTROL and USER_DEFINED tokens is matched first (leftmost, longest)
  // and becomes that single id; without it such text is ordinary text. Any bytes are
  // accepted; a byte whose byte-level character is not in the vocabulary is dropped
  // (as HF does without an unknown token), see can_encode_byte().
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // Exact bytes of the ids; control tokens decode to their text. Throws oscar::Error
  // for an id outside [0, n_vocab).
  std::string decode(std::span<const int32_t> ids) const;
  // As above; with render_control=false control tokens (<|im_end|>, ...) decode to "".
  std::string decode(std::span<const int32_t> ids, bool render_control) const;
  // Raw bytes of one token (may be a partial UTF-8 sequence); throws for a bad id.
  std::string token_to_piece(int32_t id) const;

  int32_t n_vocab() const { return static_cast<int32_t>(data_.tokens.size()); }
  int32_t bos_id() const { return data_.bos_id; }
  int32_t eos_id() const { return data_.eos_id; }
  int32_t eot_id() const { return data_.eot_id; }
  int32_t pad_id() const { return data_.pad_id; }
  bool add_bos() const { return data_.add_bos; }
  bool add_eos() const { return data_.add_eos; }
  const std::string& pre() const { return data_.pre; }
  TokenType token_type(int32_t id) const;  // throws for a bad id
  // End of generation: eos, eot, and control tokens such as <|im_end|>, <|endoftext|>.
  bool is_eog(int32_t id) const;
  // Exact token text lookup (as stored in the vocabulary, i.e. byte-level for normal tokens).
  std::optional<int32_t> find_token(std::string_view piece) const;
  // Whether byte `b` has a token of its own; bytes without one are dropped by encode().
  bool can_encode_byte(uint8_t b) const { return byte_ids_[b] >= 0; }

 private:
  void check_id(int32_t id, const char* what) const;
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  TokenizerData data_;
  PreTypeSpec spec_;
  PreTokenizer pre_tokenizer_;
  BpeMerges merges_;
  SpecialTokenMatcher specials_;
  std::unordered_map<std::string, int32_t> id_of_text_;  // first id with each text
  std::array<int32_t, 256> byte_ids_{};                   // byte -> id of its character, -1: none
  std::vector<std::string> pieces_;                       // [n_vocab] decoded bytes
  std::vector<uint8_t> eog_;                              // [n_vocab] 1: ends generation
};

}  // namespace oscar
