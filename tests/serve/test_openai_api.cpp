// OpenAI request parsing: every field's type and range check names the field; good
// requests of both endpoints parse to the expected values. Response builders: the
// exact JSON shapes the openai client reads, and valid UTF-8 from invalid token bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "oscar/serve/openai_api.h"

using namespace oscar::serve;
using json = nlohmann::json;

namespace {

RequestLimits limits() {
  RequestLimits l;
  l.max_tokens_cap = 4096;
  return l;
}

json chat_body() { return json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})"); }
json completion_body() { return json::parse(R"({"model": "m", "prompt": "Once upon"})"); }

// The field named by the RequestError parse_request throws; "" when it accepts the body.
std::string error_field(Endpoint e, const json& body, const RequestLimits& l = limits()) {
  try {
    parse_request(e, body, l);
  } catch (const RequestError& err) {
    EXPECT_EQ(err.status, 400);
    EXPECT_FALSE(std::string(err.what()).empty());
    return err.field;
  }
  return "";
}

// The base body of endpoint `e` with `key` set to `value` (given as JSON text).
std::string error_with(Endpoint e, const std::string& key, const std::string& value) {
  json body = e == Endpoint::chat ? chat_body() : completion_body();
  body[key] = json::parse(value);
  return error_field(e, body);
}

std::string chat_error(const std::string& body_text) { return error_field(Endpoint::chat, json::parse(body_text)); }

struct BadValue {
  std::string key, value, field;
};

}  // namespace

TEST(ParseRequest, MinimalChatGetsOpenAIDefaults) {
  const CompletionRequest r = parse_request(Endpoint::chat, chat_body(), limits());
  EXPECT_EQ(r.endpoint, Endpoint::chat);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_EQ(r.sampling.repeat_penalty, 1.0f);
  EXPECT_NO_THROW(r.sampling.validate());
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_FALSE(r.echo);
}

TEST(ParseRequest, ModelIsOptional) {
  json body = chat_body();
  body.erase("model");
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).model, "");
  body["model"] = nullptr;
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).model, "");
}

TEST(ParseRequest, SeedAbsentIsRandomAndGivenIsExact) {
  // Two random 64-bit seeds collide with probability 2^-64.
  EXPECT_NE(parse_request(Endpoint::chat, chat_body(), limits()).sampling.seed,
            parse_request(Endpoint::chat, chat_body(), limits()).sampling.seed);
  json body = chat_body();
  body["seed"] = 7;
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).sampling.seed, 7u);
  body["seed"] = -1;
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).sampling.seed, std::numeric_limits<uint64_t>::max());
  body["seed"] = json::parse("18446744073709551615");
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).sampling.seed, std::numeric_limits<uint64_t>::max());
  body["seed"] = 12.0;  // an integral float is an integer
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).sampling.seed, 12u);
}

TEST(ParseRequest, FullChatRequest) {
  const json body = json::parse(R"({
    "model": "smollm2", "user": "u1", "tools": [], "response_format": {"type": "text"},
    "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "there"}], "name": "bob"},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "tool", "content": "42", "tool_call_id": "c1"},
      {"role": "assistant"},
      {"role": "system", "content": []}
    ],
    "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "repeat_penalty": 1.1, "repeat_last_n": -1, "seed": 123, "stop": ["\n\n", "User:"],
    "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 5, "n": 1, "presence_penalty": 0, "frequency_penalty": 0.5
  })");
  const CompletionRequest r = parse_request(Endpoint::chat, body, limits());
  EXPECT_EQ(r.model, "smollm2");
  ASSERT_EQ(r.messages.size(), 6u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].content, "Hello, there");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[4].content, "");
  EXPECT_EQ(r.messages[5].content, "");
  EXPECT_EQ(r.max_tokens, 100);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r.sampling.repeat_last_n, -1);
  EXPECT_EQ(r.sampling.seed, 123u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "User:"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 5);
  EXPECT_NO_THROW(r.sampling.validate());
}

TEST(ParseRequest, NullMeansAbsent) {
  json body = chat_body();
  for (const char* key : {"max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stream",
                          "stream_options", "logprobs", "top_logprobs", "n", "presence_penalty"})
    body[key] = nullptr;
  const CompletionRequest r = parse_request(Endpoint::chat, body, limits());
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.stream);
}

TEST(ParseRequest, StopAsSingleString) {
  json body = chat_body();
  body["stop"] = "END";
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).stop, std::vector<std::string>{"END"});
  body["stop"] = json::array();
  EXPECT_TRUE(parse_request(Endpoint::chat, body, limits()).stop.empty());
}

TEST(ParseRequest, MaxTokensCapAndMaxCompletionTokens) {
  json body = chat_body();
  body["max_tokens"] = 4096;
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).max_tokens, 4096);
  body["max_tokens"] = 4097;
  try {
    parse_request(Endpoint::chat, body, limits());
    FAIL() << "max_tokens above the cap accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.field, "max_tokens");
    // The message gives both numbers.
    EXPECT_NE(std::string(e.what()).find("4097"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4096"), std::string::npos) << e.what();
  }
  body["max_tokens"] = 10;
  body["max_completion_tokens"] = 20;  // the newer name wins
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).max_tokens, 20);
  body.erase("max_tokens");
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).max_tokens, 20);
  body["max_completion_tokens"] = 5000;
  EXPECT_EQ(error_field(Endpoint::chat, body), "max_completion_tokens");
  // Not a completions field: ignored there.
  json c = completion_body();
  c["max_completion_tokens"] = 5000;
  EXPECT_FALSE(parse_request(Endpoint::completion, c, limits()).max_tokens.has_value());
}

TEST(ParseRequest, NOneAcceptedNTwoRefused) {
  json body = chat_body();
  body["n"] = 1;
  EXPECT_NO_THROW(parse_request(Endpoint::chat, body, limits()));
  body["n"] = 2;
  try {
    parse_request(Endpoint::chat, body, limits());
    FAIL() << "n = 2 accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.field, "n");
    EXPECT_STREQ(e.what(), "n > 1 is not supported");
  }
}

// Fields the server does not implement are a 400 naming them, not silently ignored; their
// neutral values pass.
TEST(ParseRequest, UnimplementedFieldsAreRefusedByName) {
  const std::vector<BadValue> refused = {
      {"tools", R"([{"type": "function", "function": {"name": "f"}}])", "tools"},
      {"functions", R"([{"name": "f"}])", "functions"},
      {"tool_choice", R"("auto")", "tool_choice"},
      {"tool_choice", R"({"type": "function", "function": {"name": "f"}})", "tool_choice"},
      {"function_call", R"("auto")", "function_call"},
      {"response_format", R"({"type": "json_object"})", "response_format"},
      {"response_format", R"({"type": "json_schema", "json_schema": {"name": "x"}})", "response_format"},
      {"response_format", R"("text")", "response_format"},
      {"logit_bias", R"({"50256": -100})", "logit_bias"},
  };
  for (const BadValue& b : refused) {
    EXPECT_EQ(error_with(Endpoint::chat, b.key, b.value), b.field) << b.key << " = " << b.value;
    EXPECT_EQ(error_with(Endpoint::completion, b.key, b.value), b.field) << b.key << " = " << b.value;
  }
  EXPECT_EQ(error_with(Endpoint::completion, "suffix", R"("the end")"), "suffix");
  const std::vector<std::pair<std::string, std::string>> neutral = {
      {"tools", "[]"}, {"tools", "null"}, {"tool_choice", R"("none")"}, {"function_call", R"("none")"},
      {"response_format", R"({"type": "text"})"}, {"logit_bias", "{}"}, {"suffix", R"("")"}};
  for (const auto& [key, value] : neutral) {
    EXPECT_EQ(error_with(Endpoint::chat, key, value), "") << key << " = " << value;
    EXPECT_EQ(error_with(Endpoint::completion, key, value), "") << key << " = " << value;
  }
}

TEST(ParseRequest, BooleanIsNotANumber) {
  for (const char* key : {"max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "repeat_penalty",
                          "presence_penalty", "frequency_penalty", "top_logprobs"})
    EXPECT_EQ(error_with(Endpoint::chat, key, "true"), key);
  EXPECT_EQ(error_with(Endpoint::completion, "logprobs", "true"), "logprobs");
  EXPECT_EQ(error_with(Endpoint::completion, "prompt", "[true]"), "prompt[0]");
}

TEST(ParseRequest, NonFiniteNumbersRefused) {
  // JSON text cannot hold NaN or inf, but a body built in code can.
  json body = chat_body();
  body["temperature"] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_field(Endpoint::chat, body), "temperature");
  body = chat_body();
  body["top_p"] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_field(Endpoint::chat, body), "top_p");
  body = chat_body();
  body["max_tokens"] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_field(Endpoint::chat, body), "max_tokens");
}

TEST(ParseRequest, ChatFieldRangesAndTypes) {
  const std::vector<BadValue> cases = {
      {"model", "5", "model"},
      {"max_tokens", "3.5", "max_tokens"},
      {"max_tokens", "0", "max_tokens"},
      {"max_tokens", "-1", "max_tokens"},
      {"max_tokens", "\"10\"", "max_tokens"},
      {"max_tokens", "18446744073709551615", "max_tokens"},
      {"max_tokens", "1e30", "max_tokens"},
      {"max_completion_tokens", "0", "max_completion_tokens"},
      {"temperature", "-0.1", "temperature"},
      {"temperature", "2.1", "temperature"},
      {"temperature", "\"1\"", "temperature"},
      {"top_p", "0", "top_p"},
      {"top_p", "1.5", "top_p"},
      {"top_p", "1e-50", "top_p"},  // rounds to a float 0
      {"top_k", "-1", "top_k"},
      {"top_k", "1.5", "top_k"},
      {"top_k", "1000001", "top_k"},
      {"min_p", "-0.1", "min_p"},
      {"min_p", "1.1", "min_p"},
      {"repeat_penalty", "0", "repeat_penalty"},
      {"repeat_penalty", "10.5", "repeat_penalty"},
      {"repeat_penalty", "-1", "repeat_penalty"},
      {"repeat_last_n", "-2", "repeat_last_n"},
      {"presence_penalty", "2.5", "presence_penalty"},
      {"presence_penalty", "\"0\"", "presence_penalty"},
      {"frequency_penalty", "-2.1", "frequency_penalty"},
      {"seed", "1.5", "seed"},
      {"seed", "\"1\"", "seed"},
      {"n", "0", "n"},
      {"n", "1.5", "n"},
      {"stop", "5", "stop"},
      {"stop", "\"\"", "stop"},
      {"stop", "{}", "stop"},
      {"stop", "[\"a\", \"b\", \"c\", \"d\", \"e\"]", "stop"},
      {"stop", "[\"a\", 1]", "stop[1]"},
      {"stop", "[\"\"]", "stop[0]"},
      {"stop", "[\"" + std::string(257, 'x') + "\"]", "stop[0]"},
      {"stop", "\"" + std::string(257, 'x') + "\"", "stop"},
      {"stream", "\"yes\"", "stream"},
      {"stream", "1", "stream"},
      {"logprobs", "1", "logprobs"},
      {"top_logprobs", "5", "top_logprobs"},  // without logprobs: true
      {"top_logprobs", "-1", "top_logprobs"},
      {"messages", "\"hi\"", "messages"},
      {"messages", "[]", "messages"},
      {"messages", "{}", "messages"},
      {"messages", "[\"hi\"]", "messages[0]"},
  };
  for (const BadValue& c : cases) EXPECT_EQ(error_with(Endpoint::chat, c.key, c.value), c.field) << c.key << " = " << c.value;
  // The edges themselves are accepted.
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"temperature", "0"}, {"temperature", "2"}, {"top_p", "1"}, {"top_k", "1000000"}, {"min_p", "1"},
           {"repeat_penalty", "10"}, {"presence_penalty", "-2"}, {"frequency_penalty", "2"}, {"max_tokens", "1"},
           {"max_tokens", "7.0"}, {"stop", "[\"a\", \"b\", \"c\", \"d\"]"}, {"stop", "\"" + std::string(256, 'x') + "\""},
           {"seed", "-9223372036854775808"}})
    EXPECT_EQ(error_with(Endpoint::chat, key, value), "") << key << " = " << value;
}

TEST(ParseRequest, ChatMessages) {
  EXPECT_EQ(chat_error(R"({})"), "messages");
  EXPECT_EQ(chat_error(R"({"messages": null})"), "messages");
  EXPECT_EQ(chat_error(R"({"messages": [{"content": "hi"}]})"), "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": 1, "content": "hi"}]})"), "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                                        {"role": "bot", "content": "c"}]})"),
            "messages[2].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user"}]})"), "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": null}]})"), "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "system", "content": null}]})"), "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]})"),
            "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": ["x"]}]})"), "messages[0].content[0]");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"text": "x"}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
                          {"type": "image_url", "image_url": {"url": "http://x"}}]}]})"),
            "messages[0].content[1].type");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})"),
            "messages[0].content[0].text");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]})"),
            "messages[0].content[0].text");

  RequestLimits l = limits();
  l.max_messages = 2;
  const json three = json::parse(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                                 {"role": "user", "content": "c"}]})");
  EXPECT_EQ(error_field(Endpoint::chat, three, l), "messages");
  l.max_messages = 3;
  EXPECT_EQ(error_field(Endpoint::chat, three, l), "");
}

TEST(ParseRequest, StreamOptions) {
  json body = chat_body();
  body["stream_options"] = json::parse(R"({"include_usage": true})");
  EXPECT_EQ(error_field(Endpoint::chat, body), "stream_options");  // without stream
  body["stream"] = false;
  EXPECT_EQ(error_field(Endpoint::chat, body), "stream_options");
  body["stream"] = true;
  EXPECT_TRUE(parse_request(Endpoint::chat, body, limits()).include_usage);
  body["stream_options"] = json::object();
  EXPECT_FALSE(parse_request(Endpoint::chat, body, limits()).include_usage);
  body["stream_options"] = json::parse(R"({"include_usage": "yes"})");
  EXPECT_EQ(error_field(Endpoint::chat, body), "stream_options.include_usage");
  body["stream_options"] = 5;
  EXPECT_EQ(error_field(Endpoint::chat, body), "stream_options");
  body["stream_options"] = nullptr;  // null is fine even without stream
  body["stream"] = false;
  EXPECT_EQ(error_field(Endpoint::chat, body), "");
}

TEST(ParseRequest, ChatLogprobs) {
  json body = chat_body();
  body["logprobs"] = true;
  CompletionRequest r = parse_request(Endpoint::chat, body, limits());
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  body["top_logprobs"] = 20;
  EXPECT_EQ(parse_request(Endpoint::chat, body, limits()).top_logprobs, 20);
  body["top_logprobs"] = 21;
  EXPECT_EQ(error_field(Endpoint::chat, body), "top_logprobs");
  body["logprobs"] = false;
  body["top_logprobs"] = 0;  // asks for nothing: accepted
  EXPECT_EQ(error_field(Endpoint::chat, body), "");
  body["top_logprobs"] = 1;
  EXPECT_EQ(error_field(Endpoint::chat, body), "top_logprobs");
}

TEST(ParseRequest, CompletionPrompts) {
  CompletionRequest r = parse_request(Endpoint::completion, completion_body(), limits());
  EXPECT_EQ(r.endpoint, Endpoint::completion);
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_TRUE(r.prompt_tokens.empty());
  EXPECT_TRUE(r.messages.empty());

  r = parse_request(Endpoint::completion, json::parse(R"({"prompt": [1, 2, 3, 2147483647, 5.0]})"), limits());
  EXPECT_EQ(r.prompt, "");
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3, 2147483647, 5}));
  r = parse_request(Endpoint::completion, json::parse(R"({"prompt": ["only one"]})"), limits());
  EXPECT_EQ(r.prompt, "only one");
  r = parse_request(Endpoint::completion, json::parse(R"({"prompt": ""})"), limits());
  EXPECT_EQ(r.prompt, "");
  EXPECT_TRUE(r.prompt_tokens.empty());

  const std::vector<BadValue> cases = {
      {"prompt", "null", "prompt"},         {"prompt", "5", "prompt"},
      {"prompt", "{}", "prompt"},           {"prompt", "[]", "prompt"},
      {"prompt", "[\"a\", \"b\"]", "prompt"}, {"prompt", "[[1, 2]]", "prompt"},
      {"prompt", "[1, -1]", "prompt[1]"},   {"prompt", "[1, 2.5]", "prompt[1]"},
      {"prompt", "[1, \"a\"]", "prompt[1]"}, {"prompt", "[1, 2147483648]", "prompt[1]"},
      {"prompt", "[null]", "prompt[0]"},    {"logprobs", "21", "logprobs"},
      {"logprobs", "-1", "logprobs"},       {"logprobs", "1.5", "logprobs"},
      {"echo", "true", "echo"},             {"echo", "\"no\"", "echo"},
      {"best_of", "2", "best_of"},          {"n", "3", "n"},
      {"max_tokens", "5000", "max_tokens"}, {"temperature", "3", "temperature"},
  };
  for (const BadValue& c : cases)
    EXPECT_EQ(error_with(Endpoint::completion, c.key, c.value), c.field) << c.key << " = " << c.value;
  EXPECT_EQ(error_field(Endpoint::completion, json::parse(R"({"model": "m"})")), "prompt");
}

TEST(ParseRequest, CompletionLogprobsAndEcho) {
  json body = completion_body();
  body["logprobs"] = 3;
  body["echo"] = false;
  body["best_of"] = 1;
  CompletionRequest r = parse_request(Endpoint::completion, body, limits());
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_FALSE(r.echo);
  body["logprobs"] = 0;  // the sampled token's logprob, no alternatives
  r = parse_request(Endpoint::completion, body, limits());
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  body["logprobs"] = nullptr;
  EXPECT_FALSE(parse_request(Endpoint::completion, body, limits()).logprobs);
  // "echo" means nothing to chat: ignored there like any unknown field.
  json chat = chat_body();
  chat["echo"] = true;
  EXPECT_EQ(error_field(Endpoint::chat, chat), "");
}

TEST(ParseRequestText, MalformedBodies) {
  auto field = [](std::string_view text) {
    try {
      parse_request_text(Endpoint::chat, text, limits());
    } catch (const RequestError& e) {
      return e.field;
    }
    return std::string();
  };
  EXPECT_EQ(field(""), "body");
  EXPECT_EQ(field("{"), "body");
  EXPECT_EQ(field(R"({"messages": [}")"), "body");
  EXPECT_EQ(field("[1, 2]"), "body");
  EXPECT_EQ(field("\"text\""), "body");
  EXPECT_EQ(field("null"), "body");
  EXPECT_EQ(field(R"({"max_tokens": 1e999, "messages": []})"), "body");  // number overflow
  EXPECT_EQ(field("{\"model\": \"\xff\"}"), "body");                     // invalid UTF-8
  EXPECT_EQ(field(std::string(100000, '[') + std::string(100000, ']')), "body");  // deep nesting: no stack overflow
  EXPECT_EQ(field(R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 9})"), "temperature");

  const CompletionRequest r =
      parse_request_text(Endpoint::completion, R"({"prompt": [5, 6], "max_tokens": 3, "stream": true})", limits());
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_TRUE(r.stream);

  // The parse error's message becomes a JSON error that serialises despite the bad byte.
  try {
    parse_request_text(Endpoint::chat, "{\"model\": \"\xff\"}", limits());
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_NO_THROW((void)error_json(e).dump());
  }
}

TEST(Utf8Sanitize, ValidTextUnchanged) {
  const std::string s = "plain ascii, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80, \xF4\x8F\xBF\xBF";
  EXPECT_EQ(utf8_sanitize(s), s);
  EXPECT_EQ(utf8_sanitize(""), "");
  EXPECT_EQ(utf8_sanitize(std::string_view("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8Sanitize, InvalidBytesBecomeReplacementCharacters) {
  const std::string R = "\xEF\xBF\xBD";  // U+FFFD
  // Expected values as Python's bytes.decode("utf-8", "replace") gives them.
  EXPECT_EQ(utf8_sanitize("\xFF"), R);
  EXPECT_EQ(utf8_sanitize("a\x80z"), "a" + R + "z");                 // stray continuation byte
  EXPECT_EQ(utf8_sanitize("a\xC3"), "a" + R);                        // truncated at the end
  EXPECT_EQ(utf8_sanitize("\xE2\x82z"), R + "z");                    // one U+FFFD per maximal subpart
  EXPECT_EQ(utf8_sanitize("\xF0\x9F\x98"), R);                       // first 3 bytes of an emoji
  EXPECT_EQ(utf8_sanitize("\x98\x80"), R + R);                       // its tail
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), R + R);                       // overlong "/"
  EXPECT_EQ(utf8_sanitize("\xE0\x80\xAF"), R + R + R);               // overlong 3-byte
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), R + R + R);               // UTF-16 surrogate
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), R + R + R + R);       // above U+10FFFF
  EXPECT_EQ(utf8_sanitize("\xF5\xC3\xA9"), R + "\xC3\xA9");          // invalid lead, then valid
  EXPECT_EQ(utf8_sanitize("\xC3\xC3\xA9"), R + "\xC3\xA9");          // a lead byte ends the subpart
  EXPECT_NO_THROW((void)json(utf8_sanitize("\xFF\xFE text \xC3")).dump());
}

TEST(Responses, UsageAndErrors) {
  const json u = usage_json(Usage{.prompt_tokens = 10, .completion_tokens = 5, .cached_tokens = 8});
  EXPECT_EQ(u, json::parse(R"({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                                "prompt_tokens_details": {"cached_tokens": 8}})"));
  EXPECT_EQ(error_json("bad", "invalid_request_error", "temperature"),
            json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error", "param": "temperature",
                                      "code": null}})"));
  EXPECT_TRUE(error_json("busy", "server_error", "")["error"]["param"].is_null());
  const json e = error_json(RequestError("n", "n > 1 is not supported"));
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_EQ(e["error"]["message"], "n > 1 is not supported");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(RequestError("x", "y").status, 400);
  EXPECT_EQ(RequestError("x", "y", 413).status, 413);
}

TEST(Responses, ChatResponse) {
  const Usage usage{.prompt_tokens = 3, .completion_tokens = 2, .cached_tokens = 0};
  json j = chat_response("chatcmpl-ab12", 1700000000, "smollm2", "Hi!", "stop", usage, nullptr);
  EXPECT_EQ(j["id"], "chatcmpl-ab12");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smollm2");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Hi!");
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // A token that is half of "é" (0xC3 0xA9), one masked alternative.
  const std::vector<TokenLogprob> lps = {
      {"Hi", -0.25f, {{"Hi", -0.25f}, {"Hello", -1.5f}}},
      {"\xC3", -0.5f, {{"\xC3", -0.5f}, {"!", -std::numeric_limits<float>::infinity()}}},
  };
  j = chat_response("chatcmpl-1", 1, "m", "Hi\xC3", "length", usage, &lps);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi\xEF\xBF\xBD");
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp["content"].is_array());
  ASSERT_EQ(lp["content"].size(), 2u);
  EXPECT_TRUE(lp["refusal"].is_null());
  EXPECT_EQ(lp["content"][0], json::parse(R"({"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
      "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                       {"token": "Hello", "logprob": -1.5, "bytes": [72, 101, 108, 108, 111]}]})"));
  EXPECT_EQ(lp["content"][1]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(lp["content"][1]["bytes"], json::parse("[195]"));
  EXPECT_EQ(lp["content"][1]["top_logprobs"][1]["logprob"], -9999.0);
  EXPECT_NO_THROW((void)j.dump());
}

TEST(Responses, CompletionResponseLegacyLogprobs) {
  const std::vector<TokenLogprob> lps = {
      {" upon", -0.5f, {{" upon", -0.5f}, {" a", -2.0f}}},
      {" a", -0.25f, {}},
      {"\xE2\x82", -1.0f, {{"\xE2\x82", -1.0f}, {"\xE2\x83", -3.0f}}},  // two tokens that sanitize alike
  };
  const json j = completion_response("cmpl-1", 5, "m", " upon a", "length", Usage{}, &lps);
  EXPECT_EQ(j["object"], "text_completion");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], " upon a");
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"];
  EXPECT_EQ(lp["tokens"], json::parse(R"([" upon", " a", "\ufffd"])"));
  EXPECT_EQ(lp["token_logprobs"], json::parse("[-0.5, -0.25, -1.0]"));
  EXPECT_EQ(lp["top_logprobs"][0], json::parse(R"({" upon": -0.5, " a": -2.0})"));
  EXPECT_EQ(lp["top_logprobs"][1], json::object());
  EXPECT_EQ(lp["top_logprobs"][2], json::parse(R"({"\ufffd": -1.0})"));  // the more likely one kept
  EXPECT_EQ(lp["text_offset"], json::parse("[0, 5, 7]"));  // bytes
  EXPECT_TRUE(completion_response("cmpl-1", 5, "m", "", "stop", Usage{}, nullptr)["choices"][0]["logprobs"].is_null());
}

TEST(Responses, ChatChunks) {
  json first = chat_chunk("chatcmpl-1", 9, "m", "assistant", "", std::nullopt, nullptr, false);
  EXPECT_EQ(first, json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 9, "model": "m",
      "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]})"));
  EXPECT_FALSE(first.contains("usage"));

  const std::vector<TokenLogprob> lps = {{"Hi", -0.5f, {}}};
  json delta = chat_chunk("chatcmpl-1", 9, "m", std::nullopt, "Hi", std::nullopt, &lps, true);
  EXPECT_EQ(delta["choices"][0]["delta"], json::parse(R"({"content": "Hi"})"));
  EXPECT_EQ(delta["choices"][0]["logprobs"]["content"][0]["token"], "Hi");
  EXPECT_TRUE(delta["choices"][0]["logprobs"]["content"][0]["top_logprobs"].is_array());
  EXPECT_TRUE(delta.contains("usage"));
  EXPECT_TRUE(delta["usage"].is_null());

  json last = chat_chunk("chatcmpl-1", 9, "m", std::nullopt, std::nullopt, "stop", nullptr, true);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");

  json usage = usage_chunk(Endpoint::chat, "chatcmpl-1", 9, "m", Usage{.prompt_tokens = 4, .completion_tokens = 2, .cached_tokens = 3});
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 6);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
}

TEST(Responses, CompletionChunks) {
  const std::vector<TokenLogprob> lps = {{"ab", -0.5f, {{"ab", -0.5f}}}, {"c", -0.1f, {{"c", -0.1f}}}};
  json j = completion_chunk("cmpl-1", 9, "m", "abc", std::nullopt, &lps, false, /*text_offset=*/10);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_FALSE(j.contains("usage"));
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], "abc");
  EXPECT_TRUE(c["finish_reason"].is_null());
  EXPECT_EQ(c["logprobs"]["text_offset"], json::parse("[10, 12]"));
  j = completion_chunk("cmpl-1", 9, "m", "", "length", nullptr, true);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(j.contains("usage") && j["usage"].is_null());
  const json u = usage_chunk(Endpoint::completion, "cmpl-1", 9, "m", Usage{});
  EXPECT_EQ(u["object"], "text_completion");
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"]["total_tokens"], 0);
}

TEST(Responses, ModelsAndSse) {
  EXPECT_EQ(models_json("smollm2-135m", 42),
            json::parse(R"({"object": "list", "data": [{"id": "smollm2-135m", "object": "model", "created": 42,
                                                         "owned_by": "oscar"}]})"));
  EXPECT_EQ(sse_event(json::parse(R"({"a": 1})")), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // JSON built elsewhere with a bad byte still serialises.
  EXPECT_EQ(sse_event(json("\xFF")), "data: \"\xEF\xBF\xBD\"\n\n");
}
