#include "oscar/serve/openai_api.h"

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

namespace oscar::serve {

using json = nlohmann::json;

RequestError::RequestError(std::string field_, std::string message, int status_)
    : std::runtime_error(std::move(message)), field(std::move(field_)), status(status_) {}

namespace {

[[noreturn]] void bad(std::string field, std::string message) { throw RequestError(std::move(field), std::move(message)); }

// Every optional OpenAI field is nullable: null counts as absent.
const json* find(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// A client's string quoted in an error message, cut so that a huge value cannot
// make a huge error (error_json repairs a character the cut splits).
std::string shown(std::string_view s) {
  constexpr size_t kMax = 64;
  return s.size() <= kMax ? fmt::format("'{}'", s) : fmt::format("'{}...'", s.substr(0, kMax));
}

// is_number() is false for booleans, so `"max_tokens": true` is refused here even though
// nlohmann would convert it; NaN and infinities only come from bodies built in code.
double get_number(const json& v, const std::string& field) {
  if (!v.is_number()) bad(field, fmt::format("'{}' must be a number, got {}", field, v.type_name()));
  const double x = v.get<double>();
  if (!std::isfinite(x)) bad(field, fmt::format("'{}' must be finite", field));
  return x;
}

// Integral floats (3.0) are accepted: some clients serialise every number as a float.
int64_t get_integer(const json& v, const std::string& field) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(field, fmt::format("'{}' = {} is out of range", field, v.get<uint64_t>()));
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_number()) bad(field, fmt::format("'{}' must be an integer, got {}", field, v.type_name()));
  const double x = get_number(v, field);
  if (x != std::floor(x)) bad(field, fmt::format("'{}' must be an integer, got {}", field, x));
  if (!(x >= -0x1p63 && x < 0x1p63)) bad(field, fmt::format("'{}' = {} is out of range", field, x));
  return int64_t(x);
}

int64_t get_integer_in(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  const int64_t x = get_integer(v, field);
  if (x < lo || x > hi) bad(field, fmt::format("'{}' = {} must be in [{}, {}]", field, x, lo, hi));
  return x;
}

// A float parameter in [lo, hi], or (lo, hi] when lo_open. Checked after the cast to
// float so that a tiny positive top_p cannot round to a 0 the sampler refuses.
float get_float_in(const json& v, const std::string& field, double lo, double hi, bool lo_open = false) {
  const float x = float(get_number(v, field));
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
    bad(field, fmt::format("'{}' = {} must be in {}{}, {}]", field, x, lo_open ? '(' : '[', lo, hi));
  return x;
}

bool get_bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) bad(field, fmt::format("'{}' must be true or false, got {}", field, v.type_name()));
  return v.get<bool>();
}

const std::string& get_string(const json& v, const std::string& field) {
  if (!v.is_string()) bad(field, fmt::format("'{}' must be a string, got {}", field, v.type_name()));
  return v.get_ref<const std::string&>();
}

// "content": a string, or an array of {"type":"text","text":...} parts joined with "".
std::string parse_content(const json& c, const std::string& field) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(field, fmt::format("'{}' must be a string or an array of content parts, got {}", field, c.type_name()));
  std::string text;
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string part_field = fmt::format("{}[{}]", field, j);
    const json& part = c[j];
    if (!part.is_object()) bad(part_field, fmt::format("'{}' must be an object, got {}", part_field, part.type_name()));
    const json* type = find(part, "type");
    if (!type) bad(part_field + ".type", fmt::format("'{}.type' is required", part_field));
    const std::string& t = get_string(*type, part_field + ".type");
    if (t != "text") bad(part_field + ".type", fmt::format("content part type {} is not supported (only 'text')", shown(t)));
    const json* part_text = find(part, "text");
    if (!part_text) bad(part_field + ".text", fmt::format("'{}.text' is required", part_field));
    text += get_string(*part_text, part_field + ".text");
  }
  return text;
}

ChatMessage parse_message(const json& m, size_t i) {
  const std::string field = fmt::format("messages[{}]", i);
  if (!m.is_object()) bad(field, fmt::format("'{}' must be an object, got {}", field, m.type_name()));
  ChatMessage msg;
  const json* role = find(m, "role");
  if (!role) bad(field + ".role", fmt::format("'{}.role' is required", field));
  msg.role = get_string(*role, field + ".role");
  if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system role
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
    bad(field + ".role", fmt::format("role {} is not one of system, developer, user, assistant, tool", shown(msg.role)));
  // An assistant turn may carry only tool calls, so its content may be null or absent.
  if (const json* c = find(m, "content")) msg.content = parse_content(*c, field + ".content");
  else if (msg.role != "assistant") bad(field + ".content", fmt::format("'{}.content' is required", field));
  return msg;
}

std::vector<ChatMessage> parse_messages(const json& body, const RequestLimits& limits) {
  const json* v = find(body, "messages");
  if (!v) bad("messages", "'messages' is required");
  if (!v->is_array()) bad("messages", fmt::format("'messages' must be an array, got {}", v->type_name()));
  if (v->empty()) bad("messages", "'messages' must not be empty");
  if (v->size() > size_t(limits.max_messages))
    bad("messages", fmt::format("at most {} messages are accepted, got {}", limits.max_messages, v->size()));
  std::vector<ChatMessage> msgs;
  msgs.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) msgs.push_back(parse_message((*v)[i], i));
  return msgs;
}

// "prompt": a string, [one string], or an array of token ids; batches are refused.
void parse_prompt(const json& body, CompletionRequest& r) {
  const json* p = find(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    return;
  }
  if (!p->is_array()) bad("prompt", fmt::format("'prompt' must be a string or an array of token ids, got {}", p->type_name()));
  if (p->empty()) bad("prompt", "'prompt' must not be an empty array");
  if ((*p)[0].is_string()) {
    if (p->size() != 1) bad("prompt", fmt::format("batched prompts are not supported (got {} strings)", p->size()));
    r.prompt = (*p)[0].get<std::string>();
    return;
  }
  if ((*p)[0].is_array()) bad("prompt", "batched prompts (arrays of token arrays) are not supported");
  r.prompt_tokens.reserve(p->size());
  for (size_t j = 0; j < p->size(); ++j)
    r.prompt_tokens.push_back(
        int32_t(get_integer_in((*p)[j], fmt::format("prompt[{}]", j), 0, std::numeric_limits<int32_t>::max())));
}

std::string parse_stop_string(const json& v, const std::string& field, const RequestLimits& limits) {
  const std::string& s = get_string(v, field);
  if (s.empty()) bad(field, fmt::format("'{}' must not be empty", field));
  if (s.size() > size_t(limits.max_stop_len))
    bad(field, fmt::format("'{}' is {} bytes, more than the limit of {}", field, s.size(), limits.max_stop_len));
  return s;
}

std::vector<std::string> parse_stop(const json& body, const RequestLimits& limits) {
  std::vector<std::string> stops;
  const json* v = find(body, "stop");
  if (!v) return stops;
  if (v->is_string()) {
    stops.push_back(parse_stop_string(*v, "stop", limits));
    return stops;
  }
  if (!v->is_array()) bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}", v->type_name()));
  if (v->size() > size_t(limits.max_stop))
    bad("stop", fmt::format("at most {} stop strings are accepted, got {}", limits.max_stop, v->size()));
  for (size_t i = 0; i < v->size(); ++i) stops.push_back(parse_stop_string((*v)[i], fmt::format("stop[{}]", i), limits));
  return stops;
}

uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

void parse_sampling(const json& body, SamplerParams& s) {
  // OpenAI's defaults; the llama.cpp extensions (top_k, min_p, repeat_penalty) start off.
  s = SamplerParams{};
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  s.repeat_penalty = 1.0f;
  if (const json* v = find(body, "temperature")) s.temperature = get_float_in(*v, "temperature", 0.0, 2.0);
  if (const json* v = find(body, "top_p")) s.top_p = get_float_in(*v, "top_p", 0.0, 1.0, /*lo_open=*/true);
  if (const json* v = find(body, "top_k")) s.top_k = int(get_integer_in(*v, "top_k", 0, 1'000'000));
  if (const json* v = find(body, "min_p")) s.min_p = get_float_in(*v, "min_p", 0.0, 1.0);
  if (const json* v = find(body, "repeat_penalty")) s.repeat_penalty = get_float_in(*v, "repeat_penalty", 0.0, 10.0, true);
  if (const json* v = find(body, "repeat_last_n")) s.repeat_last_n = int(get_integer_in(*v, "repeat_last_n", -1, 1'000'000));
  // Accepted and ignored: OpenAI clients send 0 by default, and the sampler has no
  // presence/frequency penalty (repeat_penalty is its nearest kin).
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (const json* v = find(body, key)) get_float_in(*v, key, -2.0, 2.0);
  if (const json* v = find(body, "seed")) {
    // Any 64-bit integer: a negative seed is taken modulo 2^64.
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(get_integer(*v, "seed"));
  } else {
    s.seed = random_seed();
  }
}

int64_t parse_max_tokens(const json& v, const char* key, const RequestLimits& limits) {
  const int64_t n = get_integer(v, key);
  if (n < 1) bad(key, fmt::format("'{}' = {} must be >= 1", key, n));
  if (n > limits.max_tokens_cap)
    bad(key, fmt::format("'{}' = {} is more than the {} tokens a sequence can hold", key, n, limits.max_tokens_cap));
  return n;
}

// "n" (and the legacy "best_of") may only ask for the one choice we produce.
void parse_single_choice(const json& body, const char* key) {
  const json* v = find(body, key);
  if (!v) return;
  const int64_t n = get_integer(*v, key);
  if (n > 1) bad(key, fmt::format("{} > 1 is not supported", key));
  if (n < 1) bad(key, fmt::format("'{}' = {} must be >= 1", key, n));
}

// Fields that would change what the client gets back and that the server does not
// implement: refused by name rather than ignored (a client that asked for JSON or for a
// tool call must be told). Their neutral values pass: null, an empty list or object, tool
// choice "none", response format "text", an empty suffix.
void refuse_unimplemented(const json& body, Endpoint e) {
  const auto is_string = [](const json& v, std::string_view s) { return v.is_string() && v.get<std::string>() == s; };
  for (const char* key : {"tools", "functions"})
    if (const json* v = find(body, key); v && !(v->is_array() && v->empty()))
      bad(key, fmt::format("'{}' is not supported: this server does not call tools", key));
  for (const char* key : {"tool_choice", "function_call"})
    if (const json* v = find(body, key); v && !is_string(*v, "none"))
      bad(key, fmt::format("'{}' is not supported: this server does not call tools (only \"none\")", key));
  if (const json* v = find(body, "response_format")) {
    const json* type = v->is_object() ? find(*v, "type") : nullptr;
    if (!(type && is_string(*type, "text")))
      bad("response_format", "'response_format' other than {\"type\": \"text\"} is not supported (no JSON mode or schema)");
  }
  if (const json* v = find(body, "logit_bias"); v && !(v->is_object() && v->empty()))
    bad("logit_bias", "'logit_bias' is not supported");
  if (e == Endpoint::completion)
    if (const json* v = find(body, "suffix"); v && !is_string(*v, ""))
      bad("suffix", "'suffix' (fill in the middle) is not supported");
}

}  // namespace

CompletionRequest parse_request(Endpoint e, const json& body, const RequestLimits& limits) {
  if (!body.is_object()) bad("body", fmt::format("the request body must be a JSON object, got {}", body.type_name()));
  CompletionRequest r;
  r.endpoint = e;
  if (const json* v = find(body, "model")) r.model = get_string(*v, "model");
  if (e == Endpoint::chat) r.messages = parse_messages(body, limits);
  else parse_prompt(body, r);

  if (const json* v = find(body, "max_tokens")) r.max_tokens = parse_max_tokens(*v, "max_tokens", limits);
  // Chat's newer name wins when both are sent.
  if (const json* v = find(body, "max_completion_tokens"); v && e == Endpoint::chat)
    r.max_tokens = parse_max_tokens(*v, "max_completion_tokens", limits);

  parse_sampling(body, r.sampling);
  r.stop = parse_stop(body, limits);
  parse_single_choice(body, "n");
  if (e == Endpoint::completion) parse_single_choice(body, "best_of");
  refuse_unimplemented(body, e);

  if (const json* v = find(body, "stream")) r.stream = get_bool(*v, "stream");
  if (const json* v = find(body, "stream_options")) {
    if (!v->is_object()) bad("stream_options", fmt::format("'stream_options' must be an object, got {}", v->type_name()));
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (const json* u = find(*v, "include_usage")) r.include_usage = get_bool(*u, "stream_options.include_usage");
  }

  if (e == Endpoint::chat) {
    if (const json* v = find(body, "logprobs")) r.logprobs = get_bool(*v, "logprobs");
    if (const json* v = find(body, "top_logprobs")) {
      r.top_logprobs = int(get_integer_in(*v, "top_logprobs", 0, limits.max_top_logprobs));
      // 0 asks for nothing extra, so it is let through without logprobs.
      if (r.top_logprobs > 0 && !r.logprobs) bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    }
  } else {
    // Legacy completions: "logprobs": n asks for the sampled token's logprob plus n alternatives.
    if (const json* v = find(body, "logprobs")) {
      r.logprobs = true;
      r.top_logprobs = int(get_integer_in(*v, "logprobs", 0, limits.max_top_logprobs));
    }
    if (const json* v = find(body, "echo"); v && get_bool(*v, "echo")) bad("echo", "'echo': true is not supported");
  }
  return r;
}

CompletionRequest parse_request_text(Endpoint e, std::string_view body, const RequestLimits& limits) {
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& ex) {
    // parse_error, or out_of_range for a number like 1e999; drop nlohmann's "[json.exception...] " tag.
    std::string_view what = ex.what();
    if (const size_t cut = what.find("] "); cut != std::string_view::npos) what.remove_prefix(cut + 2);
    bad("body", fmt::format("the request body is not valid JSON: {}", what));
  }
  return parse_request(e, j, limits);
}

std::string utf8_sanitize(std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = uint8_t(s[i]);
    if (b < 0x80) {
      out += char(b);
      ++i;
      continue;
    }
    // Sequence length and the allowed range of the second byte, which rules out
    // overlong forms, UTF-16 surrogates and code points above U+10FFFF.
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    size_t n = 1;  // bytes of the (possibly truncated) sequence that fit
    while (len > 0 && n < len && i + n < s.size()) {
      const auto c = uint8_t(s[i + n]);
      if (n == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
      ++n;
    }
    if (n == len) out.append(s.substr(i, len));
    else out += kReplacement;  // one U+FFFD per maximal invalid subpart
    i += n;
  }
  return out;
}

namespace {

// OpenAI sends -9999 for "very unlikely"; JSON has no -inf and NaN would print as null.
double logprob_value(float lp) { return lp >= -9999.0f ? double(lp) : -9999.0; }

json bytes_json(std::string_view s) {
  json a = json::array();
  for (char c : s) a.push_back(int(uint8_t(c)));
  return a;
}

json token_entry(std::string_view token, float lp) {
  json t = json::object();
  t["token"] = utf8_sanitize(token);
  t["logprob"] = logprob_value(lp);
  t["bytes"] = bytes_json(token);
  return t;
}

// Chat shape: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null}.
json chat_logprobs_json(const std::vector<TokenLogprob>* lps) {
  if (!lps) return nullptr;
  json content = json::array();
  for (const TokenLogprob& t : *lps) {
    json entry = token_entry(t.token, t.logprob);
    json top = json::array();
    for (const auto& [tok, lp] : t.top) top.push_back(token_entry(tok, lp));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  json j = json::object();
  j["content"] = std::move(content);
  j["refusal"] = nullptr;
  return j;
}

// Legacy completions shape; `offset`: bytes of completion text before the first token.
json legacy_logprobs_json(const std::vector<TokenLogprob>* lps, int64_t offset) {
  if (!lps) return nullptr;
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  for (const TokenLogprob& t : *lps) {
    tokens.push_back(utf8_sanitize(t.token));
    token_logprobs.push_back(logprob_value(t.logprob));
    json top = json::object();
    // emplace keeps the first (most likely) of two tokens that sanitize to the same text.
    for (const auto& [tok, lp] : t.top) top.emplace(utf8_sanitize(tok), logprob_value(lp));
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset);
    offset += int64_t(t.token.size());
  }
  json j = json::object();
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(token_logprobs);
  j["top_logprobs"] = std::move(top_logprobs);
  j["text_offset"] = std::move(text_offset);
  return j;
}

json optional_string(const std::optional<std::string>& s) { return s ? json(utf8_sanitize(*s)) : json(nullptr); }

json envelope(const char* object, const std::string& id, int64_t created, const std::string& model) {
  json j = json::object();
  j["id"] = utf8_sanitize(id);
  j["object"] = object;
  j["created"] = created;
  j["model"] = utf8_sanitize(model);
  return j;
}

const char* chunk_object(Endpoint e) { return e == Endpoint::chat ? "chat.completion.chunk" : "text_completion"; }

}  // namespace

json usage_json(const Usage& u) {
  json j = json::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = json{{"cached_tokens", u.cached_tokens}};
  return j;
}

json error_json(std::string_view message, std::string_view type, std::string_view param) {
  json err = json::object();
  err["message"] = utf8_sanitize(message);
  err["type"] = utf8_sanitize(type);
  err["param"] = param.empty() ? json(nullptr) : json(utf8_sanitize(param));
  err["code"] = nullptr;
  return json{{"error", std::move(err)}};
}

json error_json(const RequestError& e) { return error_json(e.what(), "invalid_request_error", e.field); }

json chat_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                   const std::string& finish_reason, const Usage& usage, const std::vector<TokenLogprob>* logprobs) {
  json message = json::object();
  message["role"] = "assistant";
  message["content"] = utf8_sanitize(text);
  message["refusal"] = nullptr;
  json choice = json::object();
  choice["index"] = 0;
  choice["message"] = std::move(message);
  choice["logprobs"] = chat_logprobs_json(logprobs);
  choice["finish_reason"] = utf8_sanitize(finish_reason);
  json j = envelope("chat.completion", id, created, model);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return j;
}

json completion_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                         const std::string& finish_reason, const Usage& usage,
                         const std::vector<TokenLogprob>* logprobs) {
  json choice = json::object();
  choice["index"] = 0;
  choice["text"] = utf8_sanitize(text);
  choice["logprobs"] = legacy_logprobs_json(logprobs, 0);
  choice["finish_reason"] = utf8_sanitize(finish_reason);
  json j = envelope("text_completion", id, created, model);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return j;
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                const std::optional<std::string>& role, const std::optional<std::string>& content,
                const std::optional<std::string>& finish_reason, const std::vector<TokenLogprob>* logprobs,
                bool include_usage_null) {
  json delta = json::object();
  if (role) delta["role"] = utf8_sanitize(*role);
  if (content) delta["content"] = utf8_sanitize(*content);
  json choice = json::object();
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = chat_logprobs_json(logprobs);
  choice["finish_reason"] = optional_string(finish_reason);
  json j = envelope(chunk_object(Endpoint::chat), id, created, model);
  j["choices"] = json::array({std::move(choice)});
  if (include_usage_null) j["usage"] = nullptr;
  return j;
}

json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      const std::optional<std::string>& finish_reason, const std::vector<TokenLogprob>* logprobs,
                      bool include_usage_null, int64_t text_offset) {
  json choice = json::object();
  choice["index"] = 0;
  choice["text"] = utf8_sanitize(text);
  choice["logprobs"] = legacy_logprobs_json(logprobs, text_offset);
  choice["finish_reason"] = optional_string(finish_reason);
  json j = envelope(chunk_object(Endpoint::completion), id, created, model);
  j["choices"] = json::array({std::move(choice)});
  if (include_usage_null) j["usage"] = nullptr;
  return j;
}

json usage_chunk(Endpoint e, const std::string& id, int64_t created, const std::string& model, const Usage& usage) {
  json j = envelope(chunk_object(e), id, created, model);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

json models_json(const std::string& model_id, int64_t created) {
  json m = json::object();
  m["id"] = utf8_sanitize(model_id);
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "oscar";
  json j = json::object();
  j["object"] = "list";
  j["data"] = json::array({std::move(m)});
  return j;
}

std::string sse_event(const json& j) {
  // The builders above sanitize every text; `replace` only guards JSON built elsewhere.
  return fmt::format("data: {}\n\n", j.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace oscar::serve
