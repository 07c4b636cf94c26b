// The PCRE2 pre-tokenizer of each pre type against HF `tokenizers` splits of the corpus
// (tests/data/pretokenize_expected.json, made by tests/reference/tokenizer_reference.py).
#include <gtest/gtest.h>

#include "oscar/core/error.h"
#include "oscar/text/pre_type.h"
#include "oscar/text/pretokenizer.h"
#include "tokenizer_test_util.h"

namespace oscar {
namespace {

std::vector<std::string> split_strings(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view s : p.split(text)) out.emplace_back(s);
  return out;
}

PreTokenizer for_pre(const std::string& pre) {
  const auto spec = find_pre_type(pre);
  if (!spec) throw Error("no pre type " + pre);
  return PreTokenizer(spec->regexes);
}

class PreTokenizerReference : public ::testing::TestWithParam<std::string> {};

TEST_P(PreTokenizerReference, CorpusSplitsMatchHf) {
  const std::string pre = GetParam();
  const auto fx = test::read_json("tests/data/pretokenize_expected.json").at(pre);
  const PreTokenizer p = for_pre(pre);
  const std::string text = test::read_file(test::source_path("tests/data/tokenizer_corpus.txt"));
  size_t start = 0;
  for (const auto& expected : fx["lines"]) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    EXPECT_EQ(split_strings(p, line), expected.get<std::vector<std::string>>()) << pre << " line: " << line;
  }
  EXPECT_EQ(split_strings(p, text), fx["whole_file"].get<std::vector<std::string>>()) << pre;
}

INSTANTIATE_TEST_SUITE_P(AllPreTypes, PreTokenizerReference,
                         ::testing::Values("smollm", "gpt2", "qwen2", "llama-bpe"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(PreTokenizer, TypeSpecifics) {
  EXPECT_EQ(split_strings(for_pre("llama-bpe"), "12345"), (std::vector<std::string>{"123", "45"}));
  EXPECT_EQ(split_strings(for_pre("qwen2"), "123"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(split_strings(for_pre("smollm"), "a123"), (std::vector<std::string>{"a", "1", "2", "3"}));
  EXPECT_EQ(split_strings(for_pre("gpt2"), "a 123"), (std::vector<std::string>{"a", " 123"}));
  EXPECT_EQ(split_strings(for_pre("llama3"), "IT'S"), (std::vector<std::string>{"IT", "'S"}));
  EXPECT_EQ(split_strings(for_pre("gpt2"), "IT'S"), (std::vector<std::string>{"IT", "'", "S"}));
  EXPECT_TRUE(find_pre_type("llama-bpe")->ignore_merges);
  EXPECT_FALSE(find_pre_type("qwen2")->ignore_merges);
  EXPECT_FALSE(find_pre_type("no-such-pre").has_value());
}

TEST(PreTokenizer, InvalidUtf8IsCoveredNotRejected) {
  const std::string bad = "ok \xFF\xFE  caf\xC3 \xE4\xB8 end\xF0\x9F";
  for (const char* pre : {"smollm", "gpt2", "qwen2", "llama-bpe"}) {
    std::string joined;
    for (std::string_view s : for_pre(pre).split(bad)) {
      EXPECT_FALSE(s.empty());
      joined += s;
    }
    EXPECT_EQ(joined, bad) << pre;
  }
}

TEST(PreTokenizer, BadRegexIsAnError) { EXPECT_THROW(PreTokenizer({"(unclosed"}), Error); }

TEST(PreTokenizer, EmptyText) { EXPECT_TRUE(for_pre("qwen2").split("").empty()); }

}  // namespace
}  // namespace oscar
