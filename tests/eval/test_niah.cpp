// Needle in a haystack: needles, placement by depth, the prompt's content and length,
// and scoring. A byte-level tokenizer (one token per ASCII byte) makes lengths exact;
// the real SmolLM2 tokenizer (from $OSCAR_MODEL) checks them where merges happen.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/eval/niah.h"
#include "oscar/formats/gguf.h"
#include "oscar/text/byte_level.h"

namespace oscar {
namespace {

const char* kHaystack =
    "The cat sat on the mat. It was a warm day, and the garden smelled of roses.\n\n"
    "Nobody came to the door that afternoon. The kettle sang twice. "
    "Later the rain began, softly at first. \xC3\xA9t\xC3\xA9 was over.\n";

// Ids 0..255 are the bytes; then ChatML's two control tokens.
const Tokenizer& byte_tokenizer() {
  static const Tokenizer tok = [] {
    TokenizerData d;
    d.model = "gpt2";
    d.pre = "gpt2";
    for (int b = 0; b < 256; ++b) d.tokens.push_back(byte_level::byte_to_text(static_cast<uint8_t>(b)));
    d.tokens.push_back("<|im_start|>");
    d.tokens.push_back("<|im_end|>");
    d.token_types.assign(d.tokens.size(), 1);
    d.token_types[256] = d.token_types[257] = 3;  // control
    d.eos_id = 257;
    return Tokenizer(d);
  }();
  return tok;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

NiahNeedle needle_for(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return random_needle(rng);
}

NiahFormat chatml() {
  NiahFormat f;
  f.chat = ChatTemplateKind::chatml;
  f.default_system = "You are a helpful AI assistant.";
  return f;
}

TEST(Niah, NeedleIsSevenDigitsAndAHyphenatedKey) {
  std::set<std::string> values;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const NiahNeedle n = needle_for(seed);
    ASSERT_EQ(n.value.size(), 7u) << n.value;
    EXPECT_NE(n.value[0], '0');
    for (char c : n.value) EXPECT_TRUE(c >= '0' && c <= '9') << n.value;
    ASSERT_EQ(count(n.key, "-"), 1u) << n.key;
    EXPECT_GT(n.key.find('-'), 0u);
    EXPECT_LT(n.key.find('-') + 1, n.key.size());
    for (char c : n.key) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '-') << n.key;
    values.insert(n.value);
  }
  EXPECT_GT(values.size(), 490u);  // random, not a constant
  EXPECT_EQ(needle_for(7).value, needle_for(7).value);
  EXPECT_EQ(needle_for(7).key, needle_for(7).key);
  EXPECT_EQ(needle_sentence({"bright-river", "1234567"}), "One of the special magic numbers for bright-river is: 1234567.");
}

TEST(Niah, DepthZeroAndHundredAreTheEnds) {
  const std::string s = "One of the special magic numbers for x-y is: 1234567.";
  const std::string at0 = insert_needle(kHaystack, s, 0);
  EXPECT_EQ(at0.rfind(s + " The cat sat", 0), 0u) << at0;
  EXPECT_EQ(at0.size(), std::string(kHaystack).size() + s.size() + 1);
  const std::string at100 = insert_needle(kHaystack, s, 100);
  ASSERT_GE(at100.size(), s.size());
  EXPECT_EQ(at100.substr(at100.size() - s.size()), s);
  EXPECT_EQ(at100.substr(0, std::string(kHaystack).size()), kHaystack);
  // A haystack ending inside a word gets a space before the needle.
  EXPECT_EQ(insert_needle("ends mid-wo", s, 100), "ends mid-wo " + s);
}

TEST(Niah, MiddleDepthsLandAfterTheNearestSentenceEnd) {
  const std::string hay = kHaystack;
  const std::string s = "NEEDLE.";
  for (double depth : {10.0, 25.0, 50.0, 75.0, 90.0}) {
    const std::string out = insert_needle(hay, s, depth);
    ASSERT_EQ(count(out, s), 1u);
    const size_t at = out.find(s);
    // Right after '.' and its whitespace, and followed by a space before the next sentence.
    ASSERT_GE(at, 2u);
    EXPECT_TRUE(out[at - 1] == ' ' || out[at - 1] == '\n') << depth;
    size_t dot = at - 1;
    while (out[dot] == ' ' || out[dot] == '\n') --dot;
    EXPECT_EQ(out[dot], '.') << depth;
    EXPECT_EQ(out[at + s.size()], ' ') << depth;
    // Taking the needle (and its added space) out restores the haystack.
    EXPECT_EQ(out.substr(0, at) + out.substr(at + s.size() + 1), hay) << depth;
    // No other sentence start lies closer to the requested point.
    const double want = depth / 100.0 * double(hay.size());
    for (size_t i = 0; i + 1 < hay.size(); ++i)
      if (hay[i] == '.' && (hay[i + 1] == ' ' || hay[i + 1] == '\n')) {
        size_t b = i + 1;
        while (b < hay.size() && (hay[b] == ' ' || hay[b] == '\n')) ++b;
        EXPECT_LE(std::abs(double(at) - want), std::abs(double(b) - want) + 0.5) << depth;
      }
  }
  EXPECT_LT(insert_needle(hay, s, 25).find(s), insert_needle(hay, s, 75).find(s));
}

TEST(Niah, NoSentenceEndSplitsOnACharacterBoundary) {
  const std::string hay = "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9";  // five two-byte characters
  for (double depth : {10.0, 30.0, 50.0, 70.0}) {  // each point falls inside a character
    const std::string out = insert_needle(hay, "N.", depth);
    const size_t at = out.find("N.");
    ASSERT_NE(at, std::string::npos);
    std::string before = out.substr(0, at), after = out.substr(at + 2);
    if (!before.empty()) {
      ASSERT_EQ(before.back(), ' ');
      before.pop_back();
    }
    ASSERT_EQ(after.front(), ' ');
    after.erase(0, 1);
    EXPECT_EQ(before.size() % 2, 0u) << "cut inside a character at depth " << depth;
    EXPECT_NEAR(double(before.size()), depth / 10.0, 1.0) << depth;
    EXPECT_EQ(before + after, hay);
  }
}

TEST(Niah, BadDepthThrows) {
  EXPECT_THROW(insert_needle(kHaystack, "x.", -1), Error);
  EXPECT_THROW(insert_needle(kHaystack, "x.", 100.5), Error);
}

TEST(Niah, PromptHoldsTheNeedleOnceAndTheQuestion) {
  const Tokenizer& tok = byte_tokenizer();
  const std::vector<int32_t> hay = tok.encode(kHaystack, false, false);
  const NiahNeedle n{"bright-river", "7654321"};
  for (double depth : {0.0, 50.0, 100.0}) {
    const NiahPrompt p = build_niah_prompt(tok, hay, n, depth, 1000, chatml());
    EXPECT_EQ(count(p.text, needle_sentence(n)), 1u) << depth;
    EXPECT_EQ(count(p.text, "7654321"), 1u) << depth;
    EXPECT_EQ(count(p.text, "What is the special magic number for bright-river mentioned in the provided text?"), 1u);
    EXPECT_EQ(p.text.rfind("<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n<|im_start|>user\n"
                           "Some special magic numbers are hidden within the following text.",
                           0),
              0u);
    const std::string tail =
        "?<|im_end|>\n<|im_start|>assistant\nThe special magic number for bright-river mentioned in the provided text is";
    ASSERT_GE(p.text.size(), tail.size());
    EXPECT_EQ(p.text.substr(p.text.size() - tail.size()), tail);
    EXPECT_EQ(p.ids, tok.encode(p.text, false, true));
    EXPECT_EQ(p.ids[0], 256);  // <|im_start|> parsed as the control token
  }
  // The ends of the haystack are the ends of the filler inside the user message.
  EXPECT_NE(build_niah_prompt(tok, hay, n, 0, 1000, chatml()).text.find("afterwards.\n" + needle_sentence(n) + " The cat"),
            std::string::npos);
  EXPECT_NE(build_niah_prompt(tok, hay, n, 100, 1000, chatml()).text.find(needle_sentence(n) + "\nWhat is the special"),
            std::string::npos);
}

TEST(Niah, RawPromptHasNoTemplate) {
  const Tokenizer& tok = byte_tokenizer();
  const NiahPrompt p = build_niah_prompt(tok, tok.encode(kHaystack, false, false), {"a-b", "1234567"}, 50, 600, {});
  EXPECT_EQ(p.text.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(p.text.rfind("Some special magic numbers", 0), 0u);
  EXPECT_NE(p.text.find("provided text?\nThe special magic number for a-b mentioned in the provided text is"),
            std::string::npos);
}

TEST(Niah, LengthsMatchTheRequestWithByteTokens) {
  const Tokenizer& tok = byte_tokenizer();
  const std::vector<int32_t> hay = tok.encode(kHaystack, false, false);
  for (int64_t target : {600, 1000, 3000}) {  // the haystack holds ~220 bytes: it wraps around
    for (double depth : {0.0, 50.0, 100.0}) {
      const NiahPrompt p = build_niah_prompt(tok, hay, needle_for(uint64_t(target)), depth, target, chatml());
      EXPECT_LE(int64_t(p.ids.size()), target) << target << " " << depth;
      EXPECT_GE(int64_t(p.ids.size()), target - 2) << target << " " << depth;
    }
  }
}

TEST(Niah, ImpossibleRequestsThrow) {
  const Tokenizer& tok = byte_tokenizer();
  const std::vector<int32_t> hay = tok.encode(kHaystack, false, false);
  EXPECT_THROW(build_niah_prompt(tok, hay, needle_for(1), 50, 100, chatml()), Error);  // shorter than the task
  EXPECT_THROW(build_niah_prompt(tok, {}, needle_for(1), 50, 1000, chatml()), Error);  // no haystack
}

TEST(Niah, ScoringNeedsTheExactDigits) {
  EXPECT_TRUE(niah_correct(" 1234567.", "1234567"));
  EXPECT_TRUE(niah_correct("is 1234567.", "1234567"));
  EXPECT_TRUE(niah_correct(": 1234567\n", "1234567"));
  EXPECT_TRUE(niah_correct("1234567", "1234567"));
  EXPECT_FALSE(niah_correct("is 1234568", "1234567"));
  EXPECT_FALSE(niah_correct("is 12345678", "1234567"));
  EXPECT_FALSE(niah_correct("is 01234567", "1234567"));
  EXPECT_FALSE(niah_correct("is 123456", "1234567"));
  EXPECT_FALSE(niah_correct("is 123 4567", "1234567"));
  EXPECT_FALSE(niah_correct("", "1234567"));
  EXPECT_TRUE(niah_correct("either 7654321 or 1234567", "1234567"));
}

// The real SmolLM2 tokenizer; nullptr when the model is absent.
const Tokenizer* smollm2() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(test::default_model_path())) return nullptr;
    return std::make_unique<Tokenizer>(tokenizer_data_from_gguf(gguf::GgufFile::open(test::default_model_path())));
  }();
  return tok.get();
}

#define NEED_SMOLLM2(tok)                                                                      \
  const Tokenizer* tok = smollm2();                                                            \
  if (!tok) {                                                                                  \
    const char* req = std::getenv("OSCAR_REQUIRE_MODEL");                                      \
    if (req && req[0] == '1') FAIL() << "default model missing: " << test::default_model_path(); \
    GTEST_SKIP() << "default model missing: " << test::default_model_path();                   \
  }

TEST(NiahSmolLM2, LengthsWithinAFewTokensOfTheRequest) {
  NEED_SMOLLM2(tok);
  const std::string text = read_text(std::string(OSCAR_SOURCE_DIR) + "/tests/data/ppl_text.txt");
  const std::vector<int32_t> hay = tok->encode(text, false, false);
  ASSERT_GT(hay.size(), 1000u);
  uint64_t seed = 0;
  for (int64_t target : {256, 1024, 4096}) {  // 4096 wraps around the ~2.6k-token text
    for (double depth : {0.0, 33.0, 50.0, 100.0}) {
      const NiahNeedle n = needle_for(++seed);
      const NiahPrompt p = build_niah_prompt(*tok, hay, n, depth, target, chatml());
      EXPECT_LE(int64_t(p.ids.size()), target) << target << " " << depth;
      EXPECT_GE(int64_t(p.ids.size()), target - 4) << target << " " << depth;
      EXPECT_EQ(p.ids, tok->encode(p.text, false, true));
      EXPECT_EQ(count(p.text, needle_sentence(n)), 1u);
      EXPECT_EQ(count(p.text, "<|im_start|>"), 3u);  // system, user, assistant
    }
  }
}

}  // namespace
}  // namespace oscar
