// The chat template renderer on arbitrary conversations: the input is split at NUL bytes
// into a GGUF chat template text (detection and the default system message come from it),
// then role, content, role, content, ...; its first byte picks the template kind and
// whether to add the generation prompt. Every message's content appears in the rendering.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "oscar/core/error.h"
#include "oscar/text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::vector<std::string> fields(1);
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0) fields.emplace_back();
    else fields.back().push_back(char(data[i]));
  }
  try {
    const std::string& jinja = fields[0];
    const auto detected = oscar::detect_chat_template(jinja, (mode & 8) ? "qwen2" : "llama");
    const std::string system = oscar::default_system_message(jinja);
    std::vector<oscar::ChatMessage> msgs;
    for (size_t i = 1; i + 1 < fields.size(); i += 2) msgs.push_back({fields[i], fields[i + 1]});
    const oscar::ChatTemplateKind kinds[] = {oscar::ChatTemplateKind::chatml, oscar::ChatTemplateKind::llama3,
                                             oscar::ChatTemplateKind::none, detected};
    const auto kind = kinds[mode % 4];
    const std::string out = oscar::apply_chat_template(kind, msgs, (mode & 4) != 0, system);
    for (const auto& m : msgs) FUZZ_EXPECT(out.find(m.content) != std::string::npos);
  } catch (const oscar::Error&) {
  }
  return 0;
}
