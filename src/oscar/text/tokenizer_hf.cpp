// TokenizerData from a Hugging Face tokenizer.json (+ tokenizer_config.json). We do not
// interpret the file's pipeline generally: we recognise the few byte-level BPE designs
// that oscar's Tokenizer implements exactly and refuse everything else by name, so a
// model either tokenizes like HF `tokenizers` or does not load.
#include "oscar/text/tokenizer_hf.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "oscar/core/error.h"

namespace oscar {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

// A JSON value for an error message, cut short.
std::string brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

bool flag(const json& obj, const char* key, bool dflt) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  return it->is_boolean() ? it->get<bool>() : dflt;
}

std::string type_of(const json& obj) {
  if (!obj.is_object()) return obj.is_null() ? "null" : brief(obj);
  const auto it = obj.find("type");
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "(no type)";
}

// --- pre-tokenizer -> oscar pre type ---------------------------------------------

bool is_byte_level(const json& p, bool use_regex) {
  return type_of(p) == "ByteLevel" && !flag(p, "add_prefix_space", false) && flag(p, "use_regex", true) == use_regex;
}

// The regex of a Split that isolates its matches, else nullopt.
std::optional<std::string> isolating_split_regex(const json& p) {
  if (type_of(p) != "Split" || flag(p, "invert", false)) return std::nullopt;
  const auto behavior = p.find("behavior");
  if (behavior == p.end() || *behavior != "Isolated") return std::nullopt;
  const auto pattern = p.find("pattern");
  if (pattern == p.end() || !pattern->is_object() || !pattern->contains("Regex")) return std::nullopt;
  const json& r = (*pattern)["Regex"];
  return r.is_string() ? std::optional<std::string>(r.get<std::string>()) : std::nullopt;
}

// The pre type whose regexes are exactly those of Split(regex) + ByteLevel(no regex).
std::optional<std::string> pre_type_of_split(const std::string& regex) {
  for (const char* name : {"llama-bpe", "qwen2"}) {
    const auto spec = find_pre_type(name);
    if (spec && spec->regexes.size() == 1 && spec->regexes[0] == regex) return name;
  }
  return std::nullopt;
}

std::string pre_type_of(const json& pre, const std::string& file) {
  std::vector<json> stages;
  if (type_of(pre) == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    for (const json& p : pre["pretokenizers"]) stages.push_back(p);
  } else if (!pre.is_null()) {
    stages.push_back(pre);
  }
  if (stages.size() == 1 && is_byte_level(stages[0], true)) return "gpt2";
  if (stages.size() == 2 && type_of(stages[0]) == "Digits" && flag(stages[0], "individual_digits", false) &&
      is_byte_level(stages[1], true)) {
    return "smollm";
  }
  if (stages.size() == 2 && is_byte_level(stages[1], false)) {
    if (const auto regex = isolating_split_regex(stages[0])) {
      if (const auto name = pre_type_of_split(*regex)) return *name;
      fail("{}: pre_tokenizer splits on a regex oscar does not know (only Llama 3's and Qwen2's): {}", file, *regex);
    }
  }
  fail("{}: unsupported pre_tokenizer {} (oscar knows ByteLevel(use_regex), Digits(individual_digits) + "
       "ByteLevel(use_regex), and Split(Llama 3 or Qwen2 regex) + ByteLevel(use_regex=false), all without "
       "add_prefix_space)",
       file, brief(pre));
}

// --- model, normalizer, decoder ----------------------------------------------------

void check_bpe_model(const json& model, const std::string& file) {
  if (type_of(model) != "BPE") fail("{}: model.type is '{}'; only byte-level 'BPE' is supported", file, type_of(model));
  if (flag(model, "byte_fallback", false)) {
    fail("{}: model.byte_fallback is true (a SentencePiece-style BPE); only byte-level BPE is supported", file);
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      fail("{}: model.{} is {}; only an empty one is supported", file, key, brief(*it));
    }
  }
  const auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    fail("{}: model.dropout is {}; BPE dropout is not supported", file, brief(*dropout));
  }
}

// NFC is accepted although oscar does not normalize: text already in NFC (nearly all
// text) tokenizes identically; other text may differ (llama.cpp ignores it likewise).
void check_normalizer(const json& n, const std::string& file) {
  if (n.is_null() || type_of(n) == "NFC") return;
  fail("{}: unsupported normalizer {} (only none or NFC)", file, brief(n));
}

void check_decoder(const json& d, const std::string& file) {
  if (d.is_null() || type_of(d) == "ByteLevel") return;
  fail("{}: unsupported decoder {} (only ByteLevel)", file, brief(d));
}

// --- vocabulary ------------------------------------------------------------------------

int32_t token_id(const json& v, int64_t limit, const std::string& file, const std::string& field) {
  if (!v.is_number_integer()) fail("{}: {} is {}, not a token id", file, field, brief(v));
  const int64_t id = v.get<int64_t>();
  // Ids must be 0..n-1 without gaps, so any id >= the number of entries is out of range.
  if (id < 0 || id >= limit) fail("{}: {} = {} is outside [0, {})", file, field, id, limit);
  return static_cast<int32_t>(id);
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<uint8_t> set;  // 1: id has a token
  std::unordered_map<std::string, int32_t> id_of;
};

void read_vocab(const json& root, const std::string& file, Vocab& v) {
  const json& model = root["model"];
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) fail("{}: model.vocab is missing or not an object", file);
  json no_added = json::array();
  const auto added_it = root.find("added_tokens");
  const json& added = added_it == root.end() || added_it->is_null() ? no_added : *added_it;
  if (!added.is_array()) fail("{}: added_tokens is not an array", file);

  const auto limit = static_cast<int64_t>(vocab->size() + added.size());
  if (limit > INT32_MAX) fail("{}: {} tokens is too many", file, limit);
  int32_t max_id = -1;
  std::vector<std::pair<std::string, int32_t>> entries;
  for (const auto& [text, id_json] : vocab->items()) {
    const int32_t id = token_id(id_json, limit, file, "model.vocab['" + text + "']");
    entries.emplace_back(text, id);
    max_id = std::max(max_id, id);
  }
  std::vector<std::tuple<std::string, int32_t, bool>> added_entries;
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string()) {
      fail("{}: {} is {}, not {{id, content, ...}}", file, field, brief(a));
    }
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (flag(a, key, false)) fail("{}: {}.{} is true, which oscar's special-token matching does not do", file, field, key);
    }
    const int32_t id = token_id(a["id"], limit, file, field + ".id");
    added_entries.emplace_back(a["content"].get<std::string>(), id, flag(a, "special", false));
    max_id = std::max(max_id, id);
  }
  if (max_id < 0) fail("{}: model.vocab is empty", file);

  const auto n = static_cast<size_t>(max_id) + 1;
  v.tokens.assign(n, {});
  v.types.assign(n, static_cast<int32_t>(TokenType::normal));
  v.set.assign(n, 0);
  for (auto& [text, id] : entries) {
    if (v.set[id]) fail("{}: model.vocab gives id {} to both '{}' and '{}'", file, id, v.tokens[id], text);
    v.tokens[id] = std::move(text);
    v.set[id] = 1;
  }
  std::vector<uint8_t> seen_added(n, 0);
  for (auto& [text, id, special] : added_entries) {
    if (seen_added[id]) fail("{}: added_tokens gives id {} to both '{}' and '{}'", file, id, v.tokens[id], text);
    seen_added[id] = 1;
    // An added token usually repeats a vocab entry (same id, same text); a different
    // text under the same id is a duplicate id.
    if (v.set[id] && v.tokens[id] != text) {
      fail("{}: added token '{}' has id {}, which model.vocab gives to '{}'", file, text, id, v.tokens[id]);
    }
    v.tokens[id] = std::move(text);
    v.set[id] = 1;
    v.types[id] = static_cast<int32_t>(special ? TokenType::control : TokenType::user_defined);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!v.set[i]) fail("{}: no token has id {} (ids must run from 0 to {} without gaps)", file, i, max_id);
    v.id_of.try_emplace(v.tokens[i], static_cast<int32_t>(i));
  }
}

std::vector<std::string> read_merges(const json& model, const std::string& file) {
  std::vector<std::string> out;
  const auto merges = model.find("merges");
  if (merges == model.end() || merges->is_null()) return out;
  if (!merges->is_array()) fail("{}: model.merges is not an array", file);
  out.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    if (m.is_string()) {
      std::string text = m.get<std::string>();
      const size_t sp = text.find(' ', 1);
      if (sp == std::string::npos || sp + 1 == text.size()) {
        fail("{}: model.merges[{}] = {} is not \"left right\"", file, i, brief(m));
      }
      out.push_back(std::move(text));
      continue;
    }
    // The newer form: ["left", "right"]. Byte-level tokens hold no raw space, so
    // "left right" is unambiguous.
    if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string()) {
      fail("{}: model.merges[{}] is {}, not \"left right\" or [left, right]", file, i, brief(m));
    }
    const std::string left = m[0].get<std::string>(), right = m[1].get<std::string>();
    if (left.empty() || right.empty() || left.find(' ') != std::string::npos || right.find(' ') != std::string::npos) {
      fail("{}: model.merges[{}] = {} has an empty token or one with a space", file, i, brief(m));
    }
    out.push_back(left + " " + right);
  }
  return out;
}

// --- special tokens ----------------------------------------------------------------

// The text of the special token the post-processor puts before the sequence, if any.
std::optional<std::string> leading_special(const json& pp, const std::string& file) {
  const std::string type = type_of(pp);
  if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    for (const json& p : pp["processors"]) {
      if (auto s = leading_special(p, file)) return s;
    }
    return std::nullopt;
  }
  if (type == "TemplateProcessing") {
    const auto single = pp.find("single");
    if (single == pp.end() || !single->is_array() || single->empty()) return std::nullopt;
    const json& first = (*single)[0];
    if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].is_object()) {
      const json& id = first["SpecialToken"]["id"];
      if (!id.is_string()) fail("{}: post_processor.single[0].SpecialToken.id is {}", file, brief(id));
      return id.get<std::string>();
    }
    return std::nullopt;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto cls = pp.find("cls");
    if (cls != pp.end() && cls->is_array() && !cls->empty() && (*cls)[0].is_string()) return (*cls)[0].get<std::string>();
  }
  return std::nullopt;
}

// The text of a tokenizer_config.json token field: "text" or {"content": "text"};
// nullopt when absent or null.
std::optional<std::string> config_token(const json& config, const char* key, const std::string& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  fail("{}: {} is {}, not a string or {{\"content\": ...}}", file, key, brief(*it));
}

int32_t config_token_id(const json& config, const char* key, const Vocab& v, const std::string& file) {
  const auto text = config_token(config, key, file);
  if (!text) return -1;
  const auto it = v.id_of.find(*text);
  if (it == v.id_of.end()) fail("{}: {} '{}' is not in the vocabulary", file, key, *text);
  return it->second;
}

std::optional<bool> config_bool(const json& config, const char* key, const std::string& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) fail("{}: {} is {}, not true or false", file, key, brief(*it));
  return it->get<bool>();
}

}  // namespace

TokenizerData tokenizer_data_from_hf(const std::string& model_dir) {
  const fs::path tok_path = fs::path(model_dir) / "tokenizer.json";
  const fs::path config_path = fs::path(model_dir) / "tokenizer_config.json";
  const std::string file = tok_path.string();
  if (!fs::exists(tok_path)) fail("{}: not found (a Hugging Face model directory needs tokenizer.json)", file);
  const json root = read_json_file(tok_path);
  const json config = fs::exists(config_path) ? read_json_file(config_path) : json::object();
  const std::string config_file = config_path.string();
  if (!root.is_object() || !root.contains("model")) fail("{}: no 'model' object", file);
  if (!config.is_object()) fail("{}: not a JSON object", config_file);

  try {
    const json& model = root["model"];
    check_bpe_model(model, file);
    check_normalizer(root.value("normalizer", json()), file);
    check_decoder(root.value("decoder", json()), file);

    TokenizerData d;
    d.model = "gpt2";
    d.pre = pre_type_of(root.value("pre_tokenizer", json()), file);
    const auto spec = find_pre_type(d.pre);
    OSCAR_CHECK(spec.has_value(), "pre type {} has no spec", d.pre);
    // The Tokenizer takes ignore_merges from the pre type; a file that says otherwise
    // would tokenize differently, so refuse it. Absent: the pre type's (as llama.cpp).
    if (const auto im = model.find("ignore_merges"); im != model.end() && im->is_boolean() &&
                                                      im->get<bool>() != spec->ignore_merges) {
      fail("{}: model.ignore_merges is {} but oscar's '{}' pre type implies {}", file, im->get<bool>(), d.pre,
           spec->ignore_merges);
    }

    Vocab v;
    read_vocab(root, file, v);
    d.merges = read_merges(model, file);

    d.bos_id = config_token_id(config, "bos_token", v, config_file);
    d.eos_id = config_token_id(config, "eos_token", v, config_file);
    d.pad_id = config_token_id(config, "pad_token", v, config_file);
    int32_t lead_id = -1;
    if (const auto lead = leading_special(root.value("post_processor", json()), file)) {
      const auto it = v.id_of.find(*lead);
      if (it == v.id_of.end()) fail("{}: post_processor prepends '{}', which is not in the vocabulary", file, *lead);
      lead_id = it->second;
      if (d.bos_id < 0) d.bos_id = lead_id;
    }
    d.add_bos = config_bool(config, "add_bos_token", config_file).value_or(lead_id >= 0 && lead_id == d.bos_id);
    d.add_eos = config_bool(config, "add_eos_token", config_file).value_or(false);
    if (d.add_bos && d.bos_id < 0) fail("{}: add_bos_token is true but there is no bos_token", config_file);

    d.tokens = std::move(v.tokens);
    d.token_types = std::move(v.types);
    return d;
  } catch (const json::exception& e) {
    // A field of an unexpected JSON type that the checks above did not name.
    fail("{}: unexpected structure: {}", file, e.what());
  }
}

std::string hf_chat_template(const std::string& model_dir) {
  const fs::path config_path = fs::path(model_dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const json config = read_json_file(config_path);
    const auto it = config.is_object() ? config.find("chat_template") : config.end();
    if (it != config.end() && it->is_string()) return it->get<std::string>();
    if (it != config.end() && it->is_array()) {
      // Several named templates: [{"name": "default", "template": "..."}, ...].
      for (const json& t : *it) {
        if (t.is_object() && t.value("name", json()) == "default" && t.value("template", json()).is_string()) {
          return t["template"].get<std::string>();
        }
      }
      fail("{}: chat_template is a list without a 'default' entry", config_path.string());
    }
    if (it != config.end() && !it->is_null()) fail("{}: chat_template is {}", config_path.string(), brief(*it));
  }
  // Newer transformers save the template beside the config instead.
  const fs::path jinja_path = fs::path(model_dir) / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    std::ifstream in(jinja_path, std::ios::binary);
    if (!in) fail("{}: cannot open", jinja_path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  const fs::path json_path = fs::path(model_dir) / "chat_template.json";
  if (fs::exists(json_path)) {
    const json j = read_json_file(json_path);
    if (j.is_object() && j.value("chat_template", json()).is_string()) return j["chat_template"].get<std::string>();
    fail("{}: no chat_template string", json_path.string());
  }
  return "";
}

}  // namespace oscar
