// Chat formatting for the two template families oscar's models use (ChatML for
// Qwen/SmolLM, Llama 3 headers). We recognise a model's Jinja template by its
// special tokens rather than run Jinja: the rendered text is fixed per family.
#pragma once
#include <span>
#include <string>

namespace oscar {

struct ChatMessage {
  std::string role;     // system | user | assistant (passed through as written)
  std::string content;
};

enum class ChatTemplateKind { chatml, llama3, none };

// From the tokenizer.chat_template metadata: "<|im_start|>" -> chatml,
// "<|start_header_id|>" -> llama3; with neither, chatml for qwen* architectures, else none.
ChatTemplateKind detect_chat_template(const std::string& jinja_template_or_empty, const std::string& arch);

// The system message a ChatML template inserts when the conversation has none (SmolLM2:
// "You are a helpful AI assistant named SmolLM, trained by Hugging Face"; Qwen2.5: "You are
// Qwen, ..."), read from the template's literal text; "" when it adds none.
std::string default_system_message(const std::string& jinja_template);

// Renders the conversation. `default_system` (chatml only) is inserted as a system
// message when the conversation starts with another role, as SmolLM2's template does. `none` joins the contents with
// newlines (base models: the text is the prompt).
std::string apply_chat_template(ChatTemplateKind kind, std::span<const ChatMessage> msgs, bool add_generation_prompt,
                                const std::string& default_system = "");

}  // namespace oscar
