// Chat templates: detection from the GGUF's Jinja text, exact rendering of ChatML and
// Llama 3, and SmolLM2's default system message.
#include <gtest/gtest.h>

#include <vector>

#include "oscar/text/chat_template.h"

using namespace oscar;

namespace {

// tokenizer.chat_template of SmolLM2-135M-Instruct, as stored in its GGUF.
const std::string smollm2_template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n"
    "'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}";

// The part of Qwen2.5-Instruct's template that picks the system message (escaped newlines).
const std::string qwen25_template =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n{%- endif %}\n";

const std::string llama3_template =
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}";

const std::vector<ChatMessage> conversation = {
    {"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}};

}  // namespace

TEST(ChatTemplate, Detection) {
  EXPECT_EQ(detect_chat_template(smollm2_template, "llama"), ChatTemplateKind::chatml);
  EXPECT_EQ(detect_chat_template(qwen25_template, "qwen2"), ChatTemplateKind::chatml);
  EXPECT_EQ(detect_chat_template(llama3_template, "llama"), ChatTemplateKind::llama3);
  EXPECT_EQ(detect_chat_template("", "qwen2"), ChatTemplateKind::chatml);
  EXPECT_EQ(detect_chat_template("", "qwen3"), ChatTemplateKind::chatml);
  EXPECT_EQ(detect_chat_template("", "llama"), ChatTemplateKind::none);
  EXPECT_EQ(detect_chat_template("{{ messages }}", "llama"), ChatTemplateKind::none);
}

TEST(ChatTemplate, ChatMl) {
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::chatml, conversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::chatml, std::span(conversation).subspan(1, 1), false),
            "<|im_start|>user\nHi!<|im_end|>\n");
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::chatml, {}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::llama3, std::span(conversation).first(2), true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::llama3, std::span(conversation).subspan(1, 1), false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>");
}

TEST(ChatTemplate, NoneJoinsContents) {
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::none, std::span(conversation).subspan(1, 1), true), "Hi!");
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::none, std::span(conversation).first(2), false), "Be brief.\nHi!");
}

TEST(ChatTemplate, DefaultSystemMessageFromTheTemplate) {
  EXPECT_EQ(default_system_message(smollm2_template), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(default_system_message(qwen25_template), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(default_system_message(llama3_template), "");
  EXPECT_EQ(default_system_message(""), "");
  // A system turn built from the messages is not a default.
  EXPECT_EQ(default_system_message("{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"), "");
  // Escapes inside the literal are decoded.
  EXPECT_EQ(default_system_message(R"({{ '<|im_start|>system\nYou\'re a \"bot\".<|im_end|>\n' }})"), "You're a \"bot\".");
}

TEST(ChatTemplate, SmolLm2RenderingWithDefaultSystem) {
  // What SmolLM2's Jinja template renders for one user turn with add_generation_prompt.
  const std::string sys = default_system_message(smollm2_template);
  const std::vector<ChatMessage> user_only = {{"user", "What is 2+2?"}};
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::chatml, user_only, true, sys),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // A system message of the caller's replaces the default.
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::chatml, std::span(conversation).first(2), false, sys),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n");
  // Like the template, an empty conversation gets no system turn.
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::chatml, {}, true, sys), "<|im_start|>assistant\n");
}
