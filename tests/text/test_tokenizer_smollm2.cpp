// The real SmolLM2 tokenizer (from $OSCAR_MODEL) against ids that HF `tokenizers`
// produced for tests/data/tokenizer_corpus.txt (tests/reference/tokenizer_reference.py).
#include <gtest/gtest.h>

#include <random>

#include "oscar/core/error.h"
#include "tokenizer_test_util.h"

namespace oscar {
namespace {

#define REQUIRE_SMOLLM2()                                                            \
  const Tokenizer* tok_ptr = test::smollm2_tokenizer();                               \
  if (tok_ptr == nullptr) GTEST_SKIP() << "model not found: " << test::model_path(); \
  const Tokenizer& tok = *tok_ptr

std::string corpus() { return test::read_file(test::source_path("tests/data/tokenizer_corpus.txt")); }

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

TEST(TokenizerSmolLM2, Metadata) {
  REQUIRE_SMOLLM2();
  EXPECT_EQ(tok.n_vocab(), 49152);
  EXPECT_EQ(tok.pre(), "smollm");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.find_token("<|im_end|>"), 2);
  EXPECT_TRUE(tok.is_eog(2));  // <|im_end|>
  EXPECT_TRUE(tok.is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_FALSE(tok.is_eog(19556));
  EXPECT_EQ(tok.token_type(1), TokenType::control);
}

TEST(TokenizerSmolLM2, CorpusLinesMatchReference) {
  REQUIRE_SMOLLM2();
  const auto fx = test::read_json("tests/data/tokenizer_expected_smollm2.json");
  ASSERT_EQ(fx["n_vocab"].get<int>(), tok.n_vocab());
  const std::string text = corpus();
  size_t start = 0, n_lines = 0;
  for (const auto& line : fx["lines"]) {
    // The fixture's lines are the corpus split on '\n'; check we read the same file.
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string s = text.substr(start, end - start);
    start = end + 1;
    ASSERT_EQ(line["text"].get<std::string>(), s);
    EXPECT_EQ(tok.encode(s, false, true), ids_of(line["ids"])) << "parse_special, line: " << s;
    EXPECT_EQ(tok.encode(s, false, false), ids_of(line["ids_plain"])) << "plain, line: " << s;
    ++n_lines;
  }
  EXPECT_EQ(n_lines, 58u);
}

TEST(TokenizerSmolLM2, WholeFileMatchesReference) {
  REQUIRE_SMOLLM2();
  const auto fx = test::read_json("tests/data/tokenizer_expected_smollm2.json");
  const std::string text = corpus();
  EXPECT_EQ(tok.encode(text, false, true), ids_of(fx["whole_file"]["ids"]));
  EXPECT_EQ(tok.encode(text, false, false), ids_of(fx["whole_file"]["ids_plain"]));
  EXPECT_EQ(tok.decode(tok.encode(text, false, true)), text);
  EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text);
}

TEST(TokenizerSmolLM2, PublishedIds) {
  REQUIRE_SMOLLM2();
  // Ids of the real SmolLM2 tokenizer for these strings (digits split one by one).
  EXPECT_EQ(tok.encode("Hello world! 123", false, false), (std::vector<int32_t>{19556, 905, 17, 216, 33, 34, 35}));
  EXPECT_EQ(tok.encode("  multiple   spaces", false, false), (std::vector<int32_t>{216, 2701, 256, 5600}));
  EXPECT_EQ(tok.encode("\n", false, false), std::vector<int32_t>{198});
}

TEST(TokenizerSmolLM2, CorpusLinesRoundTrip) {
  REQUIRE_SMOLLM2();
  const std::string text = corpus();
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string s = text.substr(start, end + 1 - start);  // with its newline
    for (bool special : {false, true}) EXPECT_EQ(tok.decode(tok.encode(s, false, special)), s);
    start = end + 1;
  }
}

TEST(TokenizerSmolLM2, SpecialTokens) {
  REQUIRE_SMOLLM2();
  const std::string chat = "<|im_start|>user\nHi<|im_end|>\n";
  const auto ids = tok.encode(chat, false, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids[ids.size() - 2], 2);
  EXPECT_EQ(tok.decode(ids), chat);
  EXPECT_EQ(tok.decode(ids, false), "user\nHi\n");
  const auto plain = tok.encode(chat, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(tok.decode(plain), chat);
  EXPECT_EQ(tok.encode("x", true, false), (std::vector<int32_t>{1, *tok.find_token("x")}));
  EXPECT_EQ(tok.token_to_piece(1), "<|im_start|>");
}

TEST(TokenizerSmolLM2, PiecesAreRawBytes) {
  REQUIRE_SMOLLM2();
  const auto the = tok.find_token("Ġthe");
  ASSERT_TRUE(the.has_value());
  EXPECT_EQ(tok.token_to_piece(*the), " the");
  // A CJK character split over tokens: pieces can be partial UTF-8, joined they are exact.
  const std::string s = "你好，世界";
  std::string joined;
  for (int32_t id : tok.encode(s, false, false)) joined += tok.token_to_piece(id);
  EXPECT_EQ(joined, s);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{tok.n_vocab()}), Error);
}

TEST(TokenizerSmolLM2, RandomBytesRoundTrip) {
  REQUIRE_SMOLLM2();
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xFF);
    // Bytes without a token of their own are dropped, as HF drops them (SmolLM2 lacks
    // 21 of them, e.g. 0xC0, 0xFF); everything else must come back exactly.
    std::string kept;
    for (char c : s) {
      if (tok.can_encode_byte(static_cast<uint8_t>(c))) kept += c;
    }
    for (bool special : {false, true}) ASSERT_EQ(tok.decode(tok.encode(s, false, special)), kept) << iter;
  }
}

TEST(TokenizerSmolLM2, RandomUtf8RoundTrip) {
  REQUIRE_SMOLLM2();
  const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\t", "\n", "\r\n", "7", "'s", "'LL", "é", "ß",
                                             "中", "ー", "й", "ع", "न", "😀", "‍", "️", "<|im_end|>", "<|", "!",
                                             "\u00a0", "\u3000", "0", "..."};
  std::mt19937 rng(99);
  for (int iter = 0; iter < 500; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    for (bool special : {false, true}) ASSERT_EQ(tok.decode(tok.encode(s, false, special)), s) << s;
  }
}

TEST(TokenizerSmolLM2, LongRunsDoNotBreakTheRegex) {
  REQUIRE_SMOLLM2();
  for (const std::string& unit : {std::string(" "), std::string("\n"), std::string("a"), std::string("中"),
                                   std::string("7"), std::string("!"), std::string(" \t")}) {
    std::string s;
    for (int i = 0; i < 50000; ++i) s += unit;
    s += "end";
    EXPECT_EQ(tok.decode(tok.encode(s, false, false)), s) << "unit '" << unit << "'";
  }
}

}  // namespace
}  // namespace oscar
