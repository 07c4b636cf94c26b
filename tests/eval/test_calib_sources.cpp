// Calibration text from several sources (calib_sources.h): -f PATH[:WEIGHT] parsing, the
// corpus manifest, chat .jsonl through the model's template (the ChatML fixture tokenizer),
// the prompt shares (within one prompt of the weights), evenly spaced windows, the
// historical single-file cut, determinism, and clear errors for bad inputs.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>

#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/eval/calib_sources.h"
#include "oscar/text/tokenizer_hf.h"

namespace oscar {
namespace {

namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() : dir_(fs::temp_directory_path() / ("oscar_calib_sources_" + std::to_string(::getpid()) + "_" +
                                                std::to_string(counter_++))) {
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string dir() const { return dir_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

using test::error_of;

// Source i's stream: token t of source i is i · 1e6 + t, so every fitted token names its origin.
SourceTokens numbered(int source, int64_t n) {
  SourceTokens s;
  for (int64_t t = 0; t < n; ++t) s.ids.push_back(int32_t(source * 1000000 + t));
  return s;
}

TEST(CalibSources, ApportionSumsAndStaysWithinOneOfTheShare) {
  const std::vector<std::vector<double>> cases = {{1, 1, 1, 1, 1, 1, 1, 1}, {3, 1}, {1, 2, 3, 4, 5}, {0.1, 10, 0.5},
                                                  {1, 1, 1}, {7}};
  for (const auto& w : cases)
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(40), int64_t(97), int64_t(1000)}) {
      for (bool one : {false, true}) {
        if (one && n < int64_t(w.size())) continue;
        const std::vector<int64_t> a = apportion(w, n, one);
        ASSERT_EQ(std::accumulate(a.begin(), a.end(), int64_t(0)), n);
        const double total = std::accumulate(w.begin(), w.end(), 0.0);
        for (size_t i = 0; i < w.size(); ++i) {
          if (one) {
            EXPECT_GE(a[i], 1);
          }
          // At least one each can take from the big shares: then within one of the share plus one.
          EXPECT_LE(std::abs(double(a[i]) - double(n) * w[i] / total), one ? 2.0 : 1.0) << "n " << n << " i " << i;
        }
      }
    }
  EXPECT_EQ(apportion(std::vector<double>{3, 1}, 40, true), (std::vector<int64_t>{30, 10}));
  EXPECT_EQ(apportion(std::vector<double>(8, 1.0), 40, true), std::vector<int64_t>(8, 5));
  EXPECT_EQ(apportion(std::vector<double>{1, 1, 1}, 4, false), (std::vector<int64_t>{2, 1, 1}));  // ties: earlier first
}

TEST(CalibSources, WindowsAreEvenlySpacedAndSnapToConversations) {
  for (int64_t total : {int64_t(54), int64_t(97), int64_t(1000)})
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(5)})
      for (int64_t len : {int64_t(1), int64_t(10), total / n}) {
        const std::vector<int64_t> s = window_starts(total, n, len, {});
        ASSERT_EQ(int64_t(s.size()), n);
        EXPECT_EQ(s[0], 0);
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_EQ(s[size_t(j)], j * total / n);
          EXPECT_LE(s[size_t(j)] + len, total);
          if (j > 0) {
            EXPECT_GE(s[size_t(j)], s[size_t(j - 1)] + len);  // no overlap
          }
        }
      }
  const std::vector<int64_t> docs = {0, 30, 41, 77, 90};
  EXPECT_EQ(window_starts(100, 2, 20, docs), (std::vector<int64_t>{0, 77}));  // 50 -> 77 (fits before 100)
  EXPECT_EQ(window_starts(100, 2, 30, docs), (std::vector<int64_t>{0, 50}));  // 77 + 30 > 100: stays at 50
  // 25 -> 30 (30 + 10 <= 50), 50 -> 77 would pass 75: stays, 75 -> 77 (87 <= 100).
  EXPECT_EQ(window_starts(100, 4, 10, docs), (std::vector<int64_t>{0, 30, 50, 77}));
}

TEST(CalibSources, MixSharesPromptsByWeight) {
  const std::vector<CalibSource> src = {{"a", 1.0, "a"}, {"b", 2.0, "b"}, {"c", 0.5, "c"}, {"d", 1.0, "d"}};
  const std::vector<SourceTokens> toks = {numbered(0, 5000), numbered(1, 9000), numbered(2, 3001), numbered(3, 4600)};
  for (auto [tokens, prompts] : {std::pair<int64_t, int64_t>{20000, 40}, {4000, 8}, {977, 13}, {400, 4}}) {
    const CalibMix mix = mix_calib_sources(src, toks, tokens, prompts, 2048, 64);
    const int64_t len = tokens / prompts;
    ASSERT_EQ(mix.per_prompt, len);
    ASSERT_EQ(mix.prompts, prompts);
    int64_t sum_prompts = 0, probe = 0;
    for (size_t i = 0; i < src.size(); ++i) {
      const CalibSourceUse& u = mix.use[i];
      sum_prompts += u.prompts;
      probe += u.probe_tokens;
      EXPECT_EQ(u.tokens, u.prompts * len);
      EXPECT_GE(u.prompts, 1);
      // The stated proportions are the token shares, within one prompt.
      const double share = double(tokens - tokens % prompts) * src[i].weight / 4.5;
      EXPECT_LE(std::abs(double(u.tokens) - share), double(len)) << "source " << i << ", " << tokens << "/" << prompts;
    }
    EXPECT_EQ(sum_prompts, prompts);
    ASSERT_EQ(int64_t(mix.ids.size()), prompts * len + probe);
    // Each prompt is one contiguous window of one source, in source order, at its recorded start.
    int64_t p = 0;
    for (size_t i = 0; i < src.size(); ++i)
      for (int64_t j = 0; j < mix.use[i].prompts; ++j, ++p)
        for (int64_t t = 0; t < len; ++t)
          ASSERT_EQ(mix.ids[size_t(p * len + t)], int32_t(i) * 1000000 + mix.use[i].starts[size_t(j)] + t);
    // The probe tokens follow the fitted ones and were not fitted on.
    std::set<int32_t> fitted(mix.ids.begin(), mix.ids.begin() + prompts * len);
    for (size_t k = size_t(prompts * len); k < mix.ids.size(); ++k) EXPECT_EQ(fitted.count(mix.ids[k]), 0u);
    // Each source's probe tokens appear in stream order, as one run from its first probe token.
    std::vector<int32_t> next(src.size(), -1);
    for (size_t k = size_t(prompts * len); k < mix.ids.size(); ++k) {
      const int32_t id = mix.ids[k], i = id / 1000000;
      if (next[size_t(i)] >= 0) {
        ASSERT_EQ(id, next[size_t(i)]) << "source " << i << " at " << k;
      }
      next[size_t(i)] = id + 1;
    }
    // The stream ends with one piece (64 tokens) of each source, in source order: the
    // queries the searches score come from every domain.
    bool all_probe = true;
    for (const CalibSourceUse& u : mix.use) all_probe = all_probe && u.probe_tokens >= 64;
    if (all_probe) {
      for (size_t i = 0; i < src.size(); ++i)
        for (int64_t t = 0; t < 64; ++t) {
          const size_t k = mix.ids.size() - (src.size() - i) * 64 + size_t(t);
          ASSERT_EQ(mix.ids[k] / 1000000, int32_t(i)) << tokens << "/" << prompts << ": piece " << i << " token " << t;
        }
    }
  }
}

TEST(CalibSources, MixIsDeterministicAndSpreadsThroughTheFile) {
  const std::vector<CalibSource> src = {{"a", 1.0, ""}, {"b", 1.0, ""}};
  const std::vector<SourceTokens> toks = {numbered(0, 10000), numbered(1, 8000)};
  const CalibMix a = mix_calib_sources(src, toks, 4000, 8, 1024, 256), b = mix_calib_sources(src, toks, 4000, 8, 1024, 256);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.use[0].starts, (std::vector<int64_t>{0, 2500, 5000, 7500}));
  EXPECT_EQ(a.use[1].starts, (std::vector<int64_t>{0, 2000, 4000, 6000}));
  EXPECT_EQ(a.use[0].probe_tokens, 512);
  EXPECT_EQ(a.ids[4000], 500);  // source 0's probe starts right after its first window
  EXPECT_EQ(a.ids[4256], 1000500);  // then source 1's first piece (pieces of 256, dealt in turn)
  EXPECT_EQ(a.ids[4512], 756);      // then source 0's second
}

TEST(CalibSources, OneSourceKeepsTheHistoricalCut) {
  const std::vector<CalibSource> src = {{"only.txt", 3.0, ""}};
  const std::vector<SourceTokens> toks = {numbered(0, 1234)};
  CalibMix mix = mix_calib_sources(src, toks, 20000, 40, 2048, 64);  // shorter than the budget: prompts shrink
  EXPECT_EQ(mix.per_prompt, 1234 / 40);
  EXPECT_EQ(mix.ids, toks[0].ids);  // the whole stream: the searches probe what follows the fitted tokens
  mix = mix_calib_sources(src, toks, 1000, 8, 0, 64);
  EXPECT_EQ(mix.per_prompt, 125);
  EXPECT_EQ(mix.use[0].starts[3], 375);
  EXPECT_NE(error_of([&] { mix_calib_sources(src, std::vector<SourceTokens>{numbered(0, 70)}, 1000, 40, 0, 64); })
                .find("has only 70 tokens for 40 prompts"),
            std::string::npos);
}

TEST(CalibSources, MixRefusesShortSourcesAndTooFewPrompts) {
  const std::vector<CalibSource> src = {{"big", 1.0, ""}, {"small.txt", 1.0, ""}};
  const std::vector<SourceTokens> toks = {numbered(0, 100000), numbered(1, 900)};
  EXPECT_NE(error_of([&] { mix_calib_sources(src, toks, 20000, 40, 0, 64); })
                .find("calibration source 'small.txt' has 900 tokens, fewer than its share of 20 prompts of 500"),
            std::string::npos);
  EXPECT_NE(error_of([&] { mix_calib_sources(src, toks, 200, 1, 0, 64); }).find("--prompts 1 is fewer than the 2"),
            std::string::npos);
}

TEST(CalibSources, ParseSourceWeights) {
  Scratch s;
  const std::string a = s.write("a.txt", "text\n");
  const std::string colon = s.write("odd:name.txt", "text\n");
  CalibSource c = parse_calib_source(a);
  EXPECT_EQ(c.path, a);
  EXPECT_EQ(c.weight, 1.0);
  c = parse_calib_source(a + ":2.5");
  EXPECT_EQ(c.path, a);
  EXPECT_EQ(c.weight, 2.5);
  EXPECT_EQ(parse_calib_source(colon).path, colon);  // an existing file is a path as a whole
  EXPECT_EQ(parse_calib_source(colon + ":3").weight, 3.0);
  for (const char* bad : {"x", "0", "-1", "nan", "inf", "", "2x", "1e999"})
    EXPECT_NE(error_of([&] { parse_calib_source(fmt::format("{}:{}", a, bad)); }).find("is not a number > 0"), std::string::npos)
        << bad;
  EXPECT_NE(error_of([&] { parse_calib_source(s.dir() + "/none.txt"); }).find("does not exist"), std::string::npos);
  const std::string none = s.dir() + "/none.txt";
  EXPECT_NE(error_of([&] { parse_calib_source(none + ":2"); }).find(fmt::format("'{}' does not exist", none)),
            std::string::npos);
}

TEST(CalibSources, CorpusManifest) {
  Scratch s;
  s.write("calib/prose.txt", "prose\n");
  s.write("calib/chat.jsonl", "[{\"role\": \"user\", \"content\": \"hi\"}]\n");
  s.write("eval/prose.txt", "held out\n");
  s.write("manifest.json", R"({"files": [
    {"file": "calib/prose.txt", "role": "calib", "domain": "prose-en", "sha256": "abc"},
    {"file": "eval/prose.txt", "role": "eval", "domain": "prose-en"},
    {"file": "calib/chat.jsonl", "role": "calib", "domain": "chat", "weight": 2}]})");
  const std::vector<CalibSource> c = corpus_calib_sources(s.dir());
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].path, s.dir() + "/calib/prose.txt");
  EXPECT_EQ(c[0].domain, "prose-en");
  EXPECT_EQ(c[0].weight, 1.0);
  EXPECT_EQ(c[1].domain, "chat");
  EXPECT_EQ(c[1].weight, 2.0);
  EXPECT_EQ(corpus_manifest_sha256(s.dir(), c[0].path), "abc");
  EXPECT_EQ(corpus_manifest_sha256(s.dir(), c[1].path), "");

  s.write("manifest.json", R"({"files": [{"file": "calib/prose.txt", "role": "calib", "weight": -1}]})");
  EXPECT_NE(error_of([&] { corpus_calib_sources(s.dir()); }).find("weight that is not a number > 0"), std::string::npos);
  s.write("manifest.json", R"({"files": [{"file": "calib/gone.txt", "role": "calib"}]})");
  EXPECT_NE(error_of([&] { corpus_calib_sources(s.dir()); }).find("is missing"), std::string::npos);
  s.write("manifest.json", R"({"files": [{"file": "eval/prose.txt", "role": "eval"}]})");
  EXPECT_NE(error_of([&] { corpus_calib_sources(s.dir()); }).find("no file with role \"calib\""), std::string::npos);
  s.write("manifest.json", "{not json");
  EXPECT_NE(error_of([&] { corpus_calib_sources(s.dir()); }).find("is not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { corpus_calib_sources(s.dir() + "/nowhere"); }).find("scripts/fetch-corpus.sh"),
            std::string::npos);
}

TEST(CalibSources, ChatJsonlErrorsNameTheLine) {
  const std::vector<std::vector<ChatMessage>> ok = parse_chat_jsonl(
      "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}]\n\n"
      "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Q\"}]",
      "x.jsonl");
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0][1].role, "assistant");
  EXPECT_EQ(ok[0][1].content, "Hello");
  EXPECT_EQ(ok[1][0].role, "system");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[{\"role\": \"user\", \"content\": \"Hi\"}]\n{broken\n", "x.jsonl:2: not valid JSON"},
      {"{\"role\": \"user\", \"content\": \"Hi\"}\n", "x.jsonl:1: expected a non-empty JSON list"},
      {"[]\n", "x.jsonl:1: expected a non-empty JSON list"},
      {"[{\"role\": \"user\"}]\n", "x.jsonl:1: message 1 needs string \"role\" and \"content\""},
      {"[{\"role\": \"user\", \"content\": 3}]\n", "x.jsonl:1: message 1 needs string"},
      {"\n\n[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"bot\", \"content\": \"b\"}]\n",
       "x.jsonl:3: message 2 has role 'bot'"},
      {"\n  \n", "x.jsonl: no conversations"},
  };
  for (const auto& [text, want] : bad)
    EXPECT_NE(error_of([&] { parse_chat_jsonl(text, "x.jsonl"); }).find(want), std::string::npos) << want;
}

TEST(CalibSources, JsonlGoesThroughTheChatTemplate) {
  const std::string fixture = std::string(OSCAR_SOURCE_DIR) + "/tests/data/hf_tok_smollm";
  const Tokenizer tok(tokenizer_data_from_hf(fixture));
  const std::string tmpl = hf_chat_template(fixture);
  const ChatTemplateKind kind = detect_chat_template(tmpl, "llama");
  ASSERT_EQ(kind, ChatTemplateKind::chatml);
  const std::string sys = default_system_message(tmpl);
  Scratch s;
  const std::string path = s.write("chat.jsonl",
                                   "[{\"role\": \"user\", \"content\": \"Hi there\"}, {\"role\": \"assistant\", "
                                   "\"content\": \"Hello!\"}]\n"
                                   "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                                   "\"content\": \"Why?\"}, {\"role\": \"assistant\", \"content\": \"Because.\"}]\n");
  const SourceTokens st = tokenize_calib_source(tok, kind, sys, path);
  // The template's own text: its default system message first, each message in
  // <|im_start|>role ... <|im_end|>, no generation prompt; the markers are single special tokens.
  const std::string first =
      "<|im_start|>system\nYou are a tiny test assistant.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n";
  const std::string second =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\nBecause."
      "<|im_end|>\n";
  std::vector<int32_t> want = tok.encode(first, tok.add_bos(), true);
  const std::vector<int32_t> want2 = tok.encode(second, tok.add_bos(), true);
  ASSERT_EQ(st.doc_starts, (std::vector<int64_t>{0, int64_t(want.size())}));
  want.insert(want.end(), want2.begin(), want2.end());
  EXPECT_EQ(st.ids, want);
  const int32_t im_start = tok.find_token("<|im_start|>").value();
  EXPECT_EQ(st.ids[0], im_start);
  EXPECT_EQ(std::count(st.ids.begin(), st.ids.end(), im_start), 6);
  // Plain text is tokenized as calibration always did: no BOS, no special tokens.
  const std::string txt = s.write("plain.txt", "Plain <|im_start|> text.\n");
  EXPECT_EQ(tokenize_calib_source(tok, kind, sys, txt).ids, tok.encode("Plain <|im_start|> text.\n", false, false));
  EXPECT_TRUE(tokenize_calib_source(tok, kind, sys, txt).doc_starts.empty());
  // A malformed line is an error naming the file and line.
  const std::string broken = s.write("broken.jsonl", "[{\"role\": \"user\", \"content\": \"ok\"}]\nnot json\n");
  EXPECT_NE(error_of([&] { tokenize_calib_source(tok, kind, sys, broken); }).find("broken.jsonl:2: not valid JSON"),
            std::string::npos);
}

TEST(CalibSources, FileSha256) {
  Scratch s;
  EXPECT_EQ(file_sha256(s.write("abc", "abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(file_sha256(s.write("empty", "")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_NE(error_of([&] { file_sha256(s.dir() + "/none"); }).find("cannot read"), std::string::npos);
}

}  // namespace
}  // namespace oscar
