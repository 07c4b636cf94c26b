// The server's request body → parameters on arbitrary bytes, for both endpoints: the JSON
// parse and every field's check. A refusal is a RequestError with a 4xx status and the
// field it names; anything else escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "oscar/serve/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  oscar::serve::RequestLimits limits{/*max_tokens_cap=*/8192};
  for (const auto e : {oscar::serve::Endpoint::chat, oscar::serve::Endpoint::completion}) {
    try {
      const auto r = oscar::serve::parse_request_text(e, body, limits);
      FUZZ_EXPECT(!r.max_tokens || (*r.max_tokens >= 1 && *r.max_tokens <= limits.max_tokens_cap));
      FUZZ_EXPECT(int(r.stop.size()) <= limits.max_stop && r.top_logprobs >= 0 &&
                  r.top_logprobs <= limits.max_top_logprobs);
      for (const int32_t id : r.prompt_tokens) FUZZ_EXPECT(id >= 0);
    } catch (const oscar::serve::RequestError& err) {
      FUZZ_EXPECT(err.status >= 400 && err.status < 500);
    }
  }
  return 0;
}
