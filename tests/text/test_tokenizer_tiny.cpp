// The tokenizer on hand-made vocabularies: merge order, special tokens, byte mapping
// and validation errors, without any file.
#include <gtest/gtest.h>

#include "oscar/core/error.h"
#include "oscar/text/byte_level.h"
#include "oscar/text/tokenizer.h"

namespace oscar {
namespace {

// Ids 0..255 are the byte characters; `extra` tokens follow from id 256.
TokenizerData tiny_data(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                        const std::string& pre = "gpt2") {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  for (int b = 0; b < 256; ++b) d.tokens.push_back(byte_level::byte_to_text(static_cast<uint8_t>(b)));
  for (const auto& t : extra) d.tokens.push_back(t);
  d.merges = merges;
  return d;
}

int32_t id_of(const Tokenizer& t, const std::string& text) {
  auto id = t.find_token(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

TEST(ByteLevel, MapsLikeGpt2AndRoundTrips) {
  EXPECT_EQ(byte_level::byte_to_text(' '), "Ġ");
  EXPECT_EQ(byte_level::byte_to_text('\n'), "Ċ");
  EXPECT_EQ(byte_level::byte_to_text('\t'), "ĉ");
  EXPECT_EQ(byte_level::byte_to_text('a'), "a");
  EXPECT_EQ(byte_level::byte_to_text(0xAD), "Ń");  // the last moved byte
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string text;
  byte_level::encode_append(all, text);
  EXPECT_EQ(byte_level::decode(text), all);
  EXPECT_EQ(byte_level::decode("中"), std::nullopt);  // outside the alphabet
  EXPECT_EQ(byte_level::decode("\xC4"), std::nullopt);  // truncated
}

TEST(TokenizerTiny, MergesFollowRankNotPosition) {
  // "b c" outranks "a b", so "abc" must become a|bc then abc, never ab|c.
  Tokenizer t(tiny_data({"bc", "ab", "abc"}, {"b c", "a b", "a bc"}));
  EXPECT_EQ(t.encode("abc", false, false), std::vector<int32_t>{id_of(t, "abc")});
  EXPECT_EQ(t.encode("ab", false, false), std::vector<int32_t>{id_of(t, "ab")});
  // "abab": "b c" never applies; "a b" merges both pairs; no "ab ab" merge exists.
  EXPECT_EQ(t.encode("abab", false, false), (std::vector<int32_t>{id_of(t, "ab"), id_of(t, "ab")}));
}

TEST(TokenizerTiny, EqualRanksMergeLeftmostFirst) {
  Tokenizer t(tiny_data({"aa", "aaa"}, {"a a", "aa a"}));
  // a a a: the leftmost "a a" merges first -> aa|a -> aaa.
  EXPECT_EQ(t.encode("aaa", false, false), std::vector<int32_t>{id_of(t, "aaa")});
  // a a a a: aa|aa (no "aa aa" merge), not a|aaa.
  EXPECT_EQ(t.encode("aaaa", false, false), (std::vector<int32_t>{id_of(t, "aa"), id_of(t, "aa")}));
}

TEST(TokenizerTiny, MergeCreatedLaterCanStillWin) {
  // After "w x" (rank 0) the new pair (wx, y) has rank 1 and must beat the pairs
  // queued before it, "x y" (rank 2, now stale) and "y z" (rank 3).
  Tokenizer t(tiny_data({"wx", "wxy", "xy", "yz"}, {"w x", "wx y", "x y", "y z"}));
  EXPECT_EQ(t.encode("wxyz", false, false), (std::vector<int32_t>{id_of(t, "wxy"), 'z'}));
}

TEST(TokenizerTiny, PreTokenizerBoundsMerges) {
  // "Ġb" exists, but the GPT-2 regex cuts "a b" into "a" and " b": no merge across.
  Tokenizer t(tiny_data({"aĠ", "Ġb"}, {"a Ġ", "Ġ b"}));
  EXPECT_EQ(t.encode("a b", false, false), (std::vector<int32_t>{'a', id_of(t, "Ġb")}));
}

TEST(TokenizerTiny, SpecialTokensLongestLeftmostAndOnlyWhenAsked) {
  TokenizerData d = tiny_data({"<|x|>", "<|x|>y", "<s>"}, {});
  d.token_types.assign(d.tokens.size(), 1);
  d.token_types[256] = 3;  // control
  d.token_types[257] = 4;  // user-defined, longer, same start
  d.token_types[258] = 3;
  d.bos_id = 258;
  Tokenizer t(std::move(d));
  EXPECT_EQ(t.encode("a<|x|>y<|x|>", false, true), (std::vector<int32_t>{'a', 257, 256}));
  EXPECT_EQ(t.encode("<|x|>", true, true), (std::vector<int32_t>{258, 256}));
  const auto plain = t.encode("<|x|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(t.decode(plain), "<|x|>");
  EXPECT_EQ(t.decode(std::vector<int32_t>{'a', 257, 256}), "a<|x|>y<|x|>");
  EXPECT_EQ(t.decode(std::vector<int32_t>{'a', 257, 256}, false), "a<|x|>y");  // control hidden
  EXPECT_EQ(t.token_to_piece(256), "<|x|>");
  EXPECT_EQ(t.token_to_piece(' '), " ");
}

TEST(TokenizerTiny, AddBosOnlyWithBosToken) {
  Tokenizer t(tiny_data({}, {}));
  EXPECT_EQ(t.encode("a", true, true), std::vector<int32_t>{'a'});
}

TEST(TokenizerTiny, MissingByteTokensAreDropped) {
  TokenizerData d = tiny_data({}, {});
  d.tokens[0xFF] = "unused-ff";  // no token for byte 0xFF any more
  Tokenizer t(std::move(d));
  EXPECT_FALSE(t.can_encode_byte(0xFF));
  EXPECT_EQ(t.encode("a\xFF" "b", false, false), (std::vector<int32_t>{'a', 'b'}));
}

TEST(TokenizerTiny, EogAndLookups) {
  TokenizerData d = tiny_data({"<|im_end|>", "<|endoftext|>", "<|other|>"}, {});
  d.token_types.assign(d.tokens.size(), 1);
  d.token_types[256] = d.token_types[257] = d.token_types[258] = 3;
  d.eos_id = 'e';
  Tokenizer t(std::move(d));
  EXPECT_TRUE(t.is_eog(256));
  EXPECT_TRUE(t.is_eog(257));
  EXPECT_FALSE(t.is_eog(258));
  EXPECT_TRUE(t.is_eog('e'));
  EXPECT_FALSE(t.is_eog('a'));
  EXPECT_FALSE(t.is_eog(-1));
  EXPECT_FALSE(t.is_eog(100000));
  EXPECT_EQ(t.find_token("<|other|>"), 258);
  EXPECT_EQ(t.find_token("nope"), std::nullopt);
  EXPECT_EQ(t.n_vocab(), 259);
}

void expect_error(TokenizerData d, const std::string& needle) {
  try {
    Tokenizer t(std::move(d));
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TokenizerTiny, ValidationErrorsNameTheProblem) {
  expect_error(tiny_data({}, {}, "klingon"), "klingon");
  auto d = tiny_data({}, {});
  d.model = "llama";
  expect_error(d, "llama");
  expect_error(tiny_data({}, {"a zz"}), "unknown token 'zz'");
  expect_error(tiny_data({}, {"a b"}), "'ab', which is not a token");
  expect_error(tiny_data({}, {"ab"}), "not 'left right'");
  d = tiny_data({}, {});
  d.eos_id = 999;
  expect_error(d, "eos token id 999");
  d = tiny_data({}, {});
  d.token_types.assign(d.tokens.size(), 1);
  d.token_types[5] = 42;
  expect_error(d, "unknown type 42");
  d = tiny_data({}, {});
  d.token_types = {1, 1};
  expect_error(d, "token_type has 2 entries");
  d = tiny_data({}, {});
  d.tokens.clear();
  expect_error(d, "empty");
}

TEST(TokenizerTiny, DecodeRejectsBadIds) {
  Tokenizer t(tiny_data({}, {}));
  EXPECT_THROW(t.decode(std::vector<int32_t>{1, 256}), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(t.token_to_piece(300), Error);
}

}  // namespace
}  // namespace oscar

// tokenizer_data_from_gguf on in-memory GGUF images.
#include "oscar/formats/gguf.h"

namespace oscar {
namespace {

gguf::GgufWriter tiny_gguf(const std::string& pre) {
  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_level::byte_to_text(static_cast<uint8_t>(b)));
  tokens.push_back("ab");
  tokens.push_back("<|begin_of_text|>");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  gguf::Value types;
  types.type = gguf::ValueType::array;
  types.elem_type = gguf::ValueType::i32;
  for (size_t i = 0; i < tokens.size(); ++i) {
    gguf::Value v;
    v.type = gguf::ValueType::i32;
    v.i = i + 1 == tokens.size() ? 3 : 1;
    types.array.push_back(v);
  }
  w.set("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {"a b"});
  w.set_u32("tokenizer.ggml.bos_token_id", 257);
  return w;
}

TEST(TokenizerGguf, ReadsKeysAndDefaults) {
  const auto bytes = tiny_gguf("llama-bpe").to_bytes();
  const auto f = gguf::GgufFile::parse(bytes.data(), bytes.size(), "tiny.gguf");
  TokenizerData d = tokenizer_data_from_gguf(f);
  EXPECT_EQ(d.pre, "llama-bpe");
  EXPECT_EQ(d.tokens.size(), 258u);
  EXPECT_EQ(d.token_types.back(), 3);
  EXPECT_EQ(d.bos_id, 257);
  EXPECT_EQ(d.eos_id, -1);
  EXPECT_TRUE(d.add_bos);  // llama3 pre types add BOS unless the file says otherwise
  Tokenizer t(std::move(d));
  EXPECT_EQ(t.encode("ab<|begin_of_text|>", true, true), (std::vector<int32_t>{257, 256, 257}));
}

TEST(TokenizerGguf, FileFlagsOverrideDefaultsAndMissingKeysAreNamed) {
  auto w = tiny_gguf("qwen2");
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  auto bytes = w.to_bytes();
  EXPECT_FALSE(tokenizer_data_from_gguf(gguf::GgufFile::parse(bytes.data(), bytes.size(), "q.gguf")).add_bos);

  gguf::GgufWriter empty;
  empty.set_string("general.architecture", "llama");
  bytes = empty.to_bytes();
  const auto f = gguf::GgufFile::parse(bytes.data(), bytes.size(), "empty.gguf");
  try {
    tokenizer_data_from_gguf(f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oscar
