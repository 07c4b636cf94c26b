// tokenizer_data_from_hf on tiny byte-level BPEs trained with HF `tokenizers`, one per
// pre-tokenizer design (tests/reference/make_hf_tokenizer_fixture.py): ids must equal
// HF's for every corpus line, and malformed or unsupported files must be refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "oscar/core/error.h"
#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer_hf.h"
#include "tokenizer_test_util.h"

namespace oscar {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string fixture_dir(const std::string& style) { return test::source_path("tests/data/hf_tok_" + style); }

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

class HfCorpus : public testing::TestWithParam<std::string> {};

TEST_P(HfCorpus, IdsMatchHfAndRoundTrip) {
  const std::string dir = fixture_dir(GetParam());
  const Tokenizer tok(tokenizer_data_from_hf(dir));
  const json fx = json::parse(test::read_file(dir + "/expected.json"));
  ASSERT_EQ(tok.n_vocab(), fx["n_vocab"].get<int32_t>());
  const std::string corpus = test::read_file(test::source_path("tests/data/tokenizer_corpus.txt"));
  size_t start = 0, n_lines = 0, n_normalized = 0;
  auto check = [&](const json& e) {
    // Where HF's normalizer (NFC) changed the text, encode what its BPE model saw:
    // oscar does not normalize (see tokenizer_hf.cpp).
    const std::string text = e.contains("normalized") ? e["normalized"].get<std::string>() : e["text"].get<std::string>();
    n_normalized += e.contains("normalized");
    EXPECT_EQ(tok.encode(text, false, true), ids_of(e["ids"])) << GetParam() << ": " << text;
    EXPECT_EQ(tok.encode(text, tok.add_bos(), true), ids_of(e["ids_post"])) << GetParam() << ": " << text;
    EXPECT_EQ(tok.decode(tok.encode(text, false, true)), text);
    EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text);
  };
  for (const json& line : fx["lines"]) {
    const size_t end = std::min(corpus.find('\n', start), corpus.size());
    ASSERT_EQ(line["text"].get<std::string>(), corpus.substr(start, end - start)) << "fixture is stale";
    start = end + 1;
    check(line);
    ++n_lines;
  }
  EXPECT_EQ(n_lines, 58u);
  ASSERT_EQ(fx["whole_file"]["text"].get<std::string>(), corpus);
  check(fx["whole_file"]);
  // Only the NFC style normalizes, and only the two lines with decomposed or
  // compatibility characters (plus the whole file).
  EXPECT_EQ(n_normalized, GetParam() == "qwen2" ? 3u : 0u);
}

INSTANTIATE_TEST_SUITE_P(Styles, HfCorpus, testing::Values("smollm", "gpt2", "llama3", "qwen2"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(TokenizerHf, MapsPreTokenizersAndSpecialTokens) {
  const Tokenizer smollm(tokenizer_data_from_hf(fixture_dir("smollm")));
  EXPECT_EQ(smollm.pre(), "smollm");
  EXPECT_EQ(smollm.bos_id(), smollm.find_token("<|im_start|>"));
  EXPECT_EQ(smollm.eos_id(), smollm.find_token("<|im_end|>"));
  EXPECT_EQ(smollm.pad_id(), smollm.eos_id());
  EXPECT_FALSE(smollm.add_bos());  // add_bos_token: false
  EXPECT_EQ(smollm.token_type(0), TokenType::control);
  EXPECT_EQ(smollm.token_type(300), TokenType::normal);
  EXPECT_TRUE(smollm.is_eog(smollm.eos_id()));

  const Tokenizer gpt2(tokenizer_data_from_hf(fixture_dir("gpt2")));  // "left right" merges
  EXPECT_EQ(gpt2.pre(), "gpt2");
  EXPECT_EQ(gpt2.bos_id(), 0);
  EXPECT_EQ(gpt2.eos_id(), 0);
  EXPECT_EQ(gpt2.pad_id(), -1);
  EXPECT_FALSE(gpt2.add_bos());

  const Tokenizer llama3(tokenizer_data_from_hf(fixture_dir("llama3")));
  EXPECT_EQ(llama3.pre(), "llama-bpe");
  EXPECT_EQ(llama3.bos_id(), llama3.find_token("<|begin_of_text|>"));  // {"content": ...} form
  EXPECT_EQ(llama3.eos_id(), llama3.find_token("<|eot_id|>"));
  EXPECT_TRUE(llama3.add_bos());  // from the TemplateProcessing post-processor

  const Tokenizer qwen2(tokenizer_data_from_hf(fixture_dir("qwen2")));
  EXPECT_EQ(qwen2.pre(), "qwen2");
  EXPECT_EQ(qwen2.bos_id(), -1);  // bos_token: null
  EXPECT_EQ(qwen2.eos_id(), qwen2.find_token("<|im_end|>"));
  EXPECT_EQ(qwen2.pad_id(), qwen2.find_token("<|endoftext|>"));
  EXPECT_FALSE(qwen2.add_bos());
  // The non-special added token lies past the trained vocabulary of 600.
  EXPECT_EQ(qwen2.n_vocab(), 601);
  EXPECT_EQ(qwen2.find_token("<tool_call>"), 600);
  EXPECT_EQ(qwen2.token_type(600), TokenType::user_defined);
  EXPECT_EQ(qwen2.encode("a<tool_call>b", false, true).size(), 3u);
}

TEST(TokenizerHf, ChatTemplates) {
  const std::string smollm = hf_chat_template(fixture_dir("smollm"));
  EXPECT_EQ(detect_chat_template(smollm, "llama"), ChatTemplateKind::chatml);
  EXPECT_EQ(default_system_message(smollm), "You are a tiny test assistant.");
  EXPECT_EQ(detect_chat_template(hf_chat_template(fixture_dir("llama3")), "llama"), ChatTemplateKind::llama3);
  EXPECT_EQ(hf_chat_template(fixture_dir("gpt2")), "");
}

// --- refusals, on edited copies of a fixture in a scratch directory -----------------

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("oscar_test_hf_tok_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

json fixture_json(const std::string& style, const std::string& name) {
  return json::parse(test::read_file(fixture_dir(style) + "/" + name));
}

// Writes the style's files, after `edit` changed tokenizer.json (tok) or
// tokenizer_config.json (config), into `dir`.
template <typename Edit>
void write_edited(const ScratchDir& dir, const std::string& style, Edit edit) {
  json tok = fixture_json(style, "tokenizer.json");
  json config = fixture_json(style, "tokenizer_config.json");
  edit(tok, config);
  if (!tok.is_null()) dir.write("tokenizer.json", tok.dump());
  if (!config.is_null()) dir.write("tokenizer_config.json", config.dump());
}

// tokenizer_data_from_hf must throw oscar::Error whose message holds every `needles`.
template <typename Edit>
void expect_refused(const std::string& style, Edit edit, std::initializer_list<const char*> needles) {
  ScratchDir dir;
  write_edited(dir, style, edit);
  try {
    (void)tokenizer_data_from_hf(dir.str());
    ADD_FAILURE() << "no error; expected one mentioning " << *needles.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

TEST(TokenizerHf, UnchangedCopyLoads) {
  ScratchDir dir;
  write_edited(dir, "smollm", [](json&, json&) {});
  EXPECT_EQ(Tokenizer(tokenizer_data_from_hf(dir.str())).n_vocab(), 600);
  // tokenizer_config.json is optional: no BOS/EOS, no template.
  fs::remove(fs::path(dir.str()) / "tokenizer_config.json");
  const TokenizerData d = tokenizer_data_from_hf(dir.str());
  EXPECT_EQ(d.bos_id, -1);
  EXPECT_EQ(d.eos_id, -1);
  EXPECT_FALSE(d.add_bos);
  EXPECT_EQ(hf_chat_template(dir.str()), "");
}

TEST(TokenizerHf, RefusesMissingAndMalformedFiles) {
  EXPECT_THROW((void)tokenizer_data_from_hf("/nonexistent/oscar/model"), Error);
  ScratchDir dir;
  try {
    (void)tokenizer_data_from_hf(dir.str());
    ADD_FAILURE() << "no error for a directory without tokenizer.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  dir.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  EXPECT_THROW((void)tokenizer_data_from_hf(dir.str()), Error);
  write_edited(dir, "smollm", [](json&, json&) {});
  dir.write("tokenizer_config.json", "{not json");
  try {
    (void)tokenizer_data_from_hf(dir.str());
    ADD_FAILURE() << "no error for a malformed tokenizer_config.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)hf_chat_template(dir.str()), Error);
}

TEST(TokenizerHf, RefusesOtherModels) {
  expect_refused("smollm", [](json& t, json&) { t["model"]["type"] = "Unigram"; }, {"tokenizer.json", "model.type", "Unigram"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["byte_fallback"] = true; }, {"model.byte_fallback"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["continuing_subword_prefix"] = "##"; },
                 {"model.continuing_subword_prefix"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["dropout"] = 0.1; }, {"model.dropout"});
  expect_refused("smollm", [](json& t, json&) { t["normalizer"] = {{"type", "Lowercase"}}; }, {"normalizer", "Lowercase"});
  expect_refused("smollm", [](json& t, json&) { t["decoder"] = {{"type", "Metaspace"}}; }, {"decoder", "Metaspace"});
  expect_refused("smollm", [](json& t, json&) { t.erase("model"); }, {"tokenizer.json", "model"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["vocab"] = json::array(); }, {"model.vocab"});
}

TEST(TokenizerHf, RefusesUnknownPreTokenizers) {
  expect_refused("smollm", [](json& t, json&) { t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; },
                 {"tokenizer.json", "pre_tokenizer", "Metaspace"});
  expect_refused("smollm", [](json& t, json&) { t["pre_tokenizer"] = nullptr; }, {"pre_tokenizer", "null"});
  expect_refused("gpt2", [](json& t, json&) { t["pre_tokenizer"]["add_prefix_space"] = true; }, {"pre_tokenizer"});
  expect_refused("smollm", [](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false; },
                 {"pre_tokenizer", "Digits"});
  expect_refused("llama3", [](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; },
                 {"pre_tokenizer", "\\s+"});
  // A Split followed by a ByteLevel that applies the GPT-2 regex as well.
  expect_refused("llama3", [](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; },
                 {"pre_tokenizer"});
  // Llama 3's regex with ignore_merges off would tokenize unlike oscar's llama-bpe.
  expect_refused("llama3", [](json& t, json&) { t["model"]["ignore_merges"] = false; }, {"model.ignore_merges"});
}

TEST(TokenizerHf, RefusesBadIds) {
  // Ids beyond the number of entries (600 vocab + 3 added) must leave a gap.
  expect_refused("smollm", [](json& t, json&) { t["model"]["vocab"]["he"] = 603; }, {"model.vocab['he']", "603"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["vocab"]["he"] = -1; }, {"model.vocab['he']", "-1"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["vocab"]["he"] = "7"; }, {"model.vocab['he']"});
  // Two vocab texts with one id: "he" takes the id of "Ġt".
  expect_refused("smollm", [](json& t, json&) { t["model"]["vocab"]["he"] = t["model"]["vocab"]["Ġt"]; },
                 {"model.vocab", "gives id"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["vocab"].erase("he"); }, {"no token has id"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["vocab"]["he"] = 602; }, {"no token has id"});
  expect_refused("smollm", [](json& t, json&) { t["added_tokens"][1]["id"] = 5; }, {"added token", "has id 5"});
  expect_refused("smollm", [](json& t, json&) { t["added_tokens"][1]["id"] = 0; }, {"added_tokens gives id 0"});
  expect_refused("smollm", [](json& t, json&) { t["added_tokens"][0]["id"] = 1000; }, {"added_tokens[0].id", "1000"});
  expect_refused("smollm", [](json& t, json&) { t["added_tokens"][0]["lstrip"] = true; }, {"added_tokens[0].lstrip"});
  expect_refused("gpt2", [](json& t, json&) { t["model"]["merges"][3] = "onlyone"; }, {"model.merges[3]"});
  expect_refused("smollm", [](json& t, json&) { t["model"]["merges"][3] = json::array({"a"}); }, {"model.merges[3]"});
  // A merge of tokens the vocabulary lacks passes the loader; the Tokenizer refuses it.
  ScratchDir dir;
  write_edited(dir, "smollm", [](json& t, json&) { t["model"]["merges"][3] = json::array({"zz", "qq"}); });
  EXPECT_THROW(Tokenizer(tokenizer_data_from_hf(dir.str())), Error);
}

TEST(TokenizerHf, RefusesBadConfig) {
  expect_refused("smollm", [](json&, json& c) { c["bos_token"] = "<|nope|>"; }, {"tokenizer_config.json", "bos_token", "<|nope|>"});
  expect_refused("smollm", [](json&, json& c) { c["eos_token"] = 7; }, {"tokenizer_config.json", "eos_token"});
  expect_refused("smollm", [](json&, json& c) { c["add_bos_token"] = "yes"; }, {"tokenizer_config.json", "add_bos_token"});
  expect_refused("gpt2", [](json&, json& c) {
    c.erase("bos_token");
    c["add_bos_token"] = true;
  }, {"add_bos_token", "bos_token"});
}

TEST(TokenizerHf, AddBosFollowsConfigThenPostProcessor) {
  ScratchDir dir;
  write_edited(dir, "llama3", [](json&, json& c) { c["add_bos_token"] = false; });
  EXPECT_FALSE(tokenizer_data_from_hf(dir.str()).add_bos);
  // Without bos_token in the config, the token the post-processor prepends is the BOS.
  write_edited(dir, "llama3", [](json&, json& c) { c.erase("bos_token"); });
  const TokenizerData d = tokenizer_data_from_hf(dir.str());
  EXPECT_TRUE(d.add_bos);
  EXPECT_EQ(d.bos_id, 0);
  // A BOS in the config but no post-processor adding it: not added.
  write_edited(dir, "llama3", [](json& t, json&) { t["post_processor"] = nullptr; });
  EXPECT_FALSE(tokenizer_data_from_hf(dir.str()).add_bos);
}

TEST(TokenizerHf, ChatTemplateSources) {
  ScratchDir dir;
  dir.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(hf_chat_template(dir.str()), "D");
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THROW((void)hf_chat_template(dir.str()), Error);
  dir.write("tokenizer_config.json", R"({"bos_token": "x"})");
  EXPECT_EQ(hf_chat_template(dir.str()), "");
  dir.write("chat_template.jinja", "{{ '<|im_start|>' }}");
  EXPECT_EQ(hf_chat_template(dir.str()), "{{ '<|im_start|>' }}");
}

}  // namespace
}  // namespace oscar
