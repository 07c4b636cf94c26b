// The OpenAI wire format without the engine: /v1/chat/completions and /v1/completions
// bodies parsed and range-checked into plain structs; responses, stream chunks, usage,
// model list and errors built as JSON from plain data, every text made valid UTF-8.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "oscar/sampling/sampler.h"
#include "oscar/text/chat_template.h"

namespace oscar::serve {

// A client error naming the offending field (e.g. "messages[2].role"); what() is the message.
// Rendered as {"error":{"message":..., "type":"invalid_request_error", "param": field, "code": null}}.
struct RequestError : std::runtime_error {
  std::string field;
  int status = 400;  // HTTP status
  RequestError(std::string field, std::string message, int status = 400);
};

enum class Endpoint { chat, completion };

struct RequestLimits {
  int64_t max_tokens_cap;   // the largest max_tokens accepted (the server passes its per-sequence context)
  int max_stop = 4;         // at most this many stop strings
  int max_stop_len = 256;   // bytes per stop string
  int max_messages = 1024;
  int max_top_logprobs = 20;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;                   // as sent ("" when absent)
  std::vector<ChatMessage> messages;   // chat; role "developer" arrives as "system"
  std::string prompt;                  // completion: a string prompt
  std::vector<int32_t> prompt_tokens;  // completion: the prompt as token ids (then prompt is ""); each >= 0
  std::optional<int64_t> max_tokens;   // in [1, max_tokens_cap]; absent: until the context is full
  SamplerParams sampling;              // OpenAI defaults (see parse_request), seed random when absent
  std::vector<std::string> stop;       // each non-empty, <= max_stop_len bytes
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;                // alternatives per position, in [0, max_top_logprobs]
  bool echo = false;                   // completion only; true is refused, so always false here
};

// Throws RequestError on the first invalid field. Unknown fields are ignored.
// Sampling defaults are OpenAI's: temperature 1, top_p 1, and the llama.cpp
// extensions top_k, min_p and repeat_penalty off.
CompletionRequest parse_request(Endpoint e, const nlohmann::json& body, const RequestLimits& limits);
// Parses the raw body first: malformed JSON, or a top level that is not an object -> field "body".
CompletionRequest parse_request_text(Endpoint e, std::string_view body, const RequestLimits& limits);

// `s` with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal
// invalid subpart (as Python's bytes.decode("utf-8", "replace") does).
std::string utf8_sanitize(std::string_view s);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// One generated token. Texts are raw token bytes (a token may hold part of a
// UTF-8 character); the JSON carries them sanitized plus the exact "bytes".
struct TokenLogprob {
  std::string token;
  float logprob;                                   // natural log; -inf allowed (sent as -9999)
  std::vector<std::pair<std::string, float>> top;  // [top_logprobs] most likely first
};

nlohmann::json usage_json(const Usage& u);
// {"error":{"message","type","param","code":null}}; param "" -> null.
nlohmann::json error_json(std::string_view message, std::string_view type, std::string_view param);
nlohmann::json error_json(const RequestError& e);  // type "invalid_request_error", param e.field

// Non-streaming responses. `id` ("chatcmpl-<hex>" / "cmpl-<hex>") is the caller's;
// `created` in unix seconds; `logprobs` null -> "logprobs": null.
nlohmann::json chat_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                             const std::string& finish_reason, const Usage& usage,
                             const std::vector<TokenLogprob>* logprobs);
// Legacy logprobs shape {tokens, token_logprobs, top_logprobs: [{tok: lp}], text_offset};
// text_offset counts bytes from the start of the generated text.
nlohmann::json completion_response(const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, const std::string& finish_reason, const Usage& usage,
                                   const std::vector<TokenLogprob>* logprobs);

// Streaming: the first chat chunk carries role "assistant" and content "", then content
// deltas, then one chunk with the finish_reason and an empty delta. With include_usage
// every chunk carries "usage": null (include_usage_null) and usage_chunk() comes last.
nlohmann::json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                          const std::optional<std::string>& role, const std::optional<std::string>& content,
                          const std::optional<std::string>& finish_reason, const std::vector<TokenLogprob>* logprobs,
                          bool include_usage_null);
// `text_offset`: bytes of completion text already sent in earlier chunks (the first
// token's legacy text_offset).
nlohmann::json completion_chunk(const std::string& id, int64_t created, const std::string& model,
                                const std::string& text, const std::optional<std::string>& finish_reason,
                                const std::vector<TokenLogprob>* logprobs, bool include_usage_null,
                                int64_t text_offset = 0);
// The last chunk of an include_usage stream: "choices": [] and the usage.
nlohmann::json usage_chunk(Endpoint e, const std::string& id, int64_t created, const std::string& model,
                           const Usage& usage);

// GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by":"oscar"}]}
nlohmann::json models_json(const std::string& model_id, int64_t created);

// One server-sent event: "data: " + compact JSON + "\n\n".
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace oscar::serve
