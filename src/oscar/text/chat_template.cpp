#include "oscar/text/chat_template.h"

#include <optional>

namespace oscar {

namespace {

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// Decodes the inside of a Jinja string literal up to its end; nullopt when the text
// holds an unescaped quote or an expression, i.e. it is not one constant string.
std::optional<std::string> decode_literal(const std::string& raw) {
  if (contains(raw, "{{") || contains(raw, "{%")) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c == '\'' || c == '"') return std::nullopt;
    if (c != '\\' || i + 1 == raw.size()) {
      out += c;
      continue;
    }
    const char e = raw[++i];
    out += e == 'n' ? '\n' : e == 't' ? '\t' : e;  // \' \" \\ stand for themselves
  }
  return out;
}

}  // namespace

ChatTemplateKind detect_chat_template(const std::string& jinja, const std::string& arch) {
  if (contains(jinja, "<|im_start|>")) return ChatTemplateKind::chatml;
  if (contains(jinja, "<|start_header_id|>")) return ChatTemplateKind::llama3;
  if (arch.rfind("qwen", 0) == 0) return ChatTemplateKind::chatml;
  return ChatTemplateKind::none;
}

std::string default_system_message(const std::string& jinja) {
  const std::string open = "<|im_start|>system";
  const std::string close = "<|im_end|>";
  for (size_t pos = jinja.find(open); pos != std::string::npos; pos = jinja.find(open, pos + 1)) {
    size_t body = pos + open.size();
    // The role line ends in a newline, written literally or as the escape \n.
    if (jinja.compare(body, 1, "\n") == 0) body += 1;
    else if (jinja.compare(body, 2, "\\n") == 0) body += 2;
    else continue;
    const size_t end = jinja.find(close, body);
    if (end == std::string::npos) break;
    if (auto text = decode_literal(jinja.substr(body, end - body)); text && !text->empty()) return *text;
  }
  return "";
}

std::string apply_chat_template(ChatTemplateKind kind, std::span<const ChatMessage> msgs, bool add_generation_prompt,
                                const std::string& default_system) {
  std::string out;
  switch (kind) {
    case ChatTemplateKind::chatml:
      if (!default_system.empty() && !msgs.empty() && msgs.front().role != "system")
        out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
      for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplateKind::llama3:
      out += "<|begin_of_text|>";
      for (const auto& m : msgs) out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplateKind::none:
      for (size_t i = 0; i < msgs.size(); ++i) out += (i ? "\n" : "") + msgs[i].content;
      break;
  }
  return out;
}

}  // namespace oscar
