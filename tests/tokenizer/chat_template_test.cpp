// Chat template family detection from the template text, rendering, default system prompts.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "tiny_vocab.h"

namespace tessera {
namespace {

std::unique_ptr<Tokenizer> tok() {
  auto c = test::bpe_config({}, {}, {{"<s>", kTokenControl}, {"</s>", kTokenControl}});
  c.bos_id = 256;
  c.eos_id = 257;
  return test::make(c);
}

ChatTemplate parse(std::string_view text, const Tokenizer& t) {
  auto r = ChatTemplate::from_template_text(text, t);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : ChatTemplate{};
}

// SmolLM2-Instruct's template, a ChatML template with its own default system turn.
constexpr std::string_view kSmolLm =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatTemplate, ChatMlWithDefaultSystemPrompt) {
  auto t = tok();
  const ChatTemplate c = parse(kSmolLm, *t);
  EXPECT_EQ(c.family(), ChatFamily::kChatML);
  EXPECT_EQ(c.render({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(c.render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n");
  EXPECT_EQ(c.render({}, false), "");
}

TEST(ChatTemplate, DefaultSystemPromptFromEscapedLiteral) {
  // Same text with Jinja escapes instead of raw newlines, in double quotes.
  auto t = tok();
  const ChatTemplate c = parse(
      "{%- if messages[0].role != 'system' %}{{- \"<|im_start|>system\\nYou are "
      "\\\"Q\\\".<|im_end|>"
      "\\n\" }}{%- endif %}{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content "
      "+ '<|im_end|>\\n' }}{%- endfor %}",
      *t);
  EXPECT_EQ(c.render({{"user", "x"}}, false),
            "<|im_start|>system\nYou are \"Q\".<|im_end|>\n<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, PlainChatMlHasNoDefaultSystem) {
  auto t = tok();
  const ChatTemplate c = parse(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\n' }}{% endif %}",
      *t);
  EXPECT_EQ(c.render({{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  auto t = tok();
  const ChatTemplate c = parse(
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
      "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
      *t);
  EXPECT_EQ(c.family(), ChatFamily::kLlama3);
  EXPECT_EQ(c.render({{"system", "S"}, {"user", "  Hi \n"}}, true),
            "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2AndMistral) {
  auto t = tok();
  const ChatTemplate l2 = parse(
      "{% if messages[0]['role'] == 'system' %}...{% set content = '<<SYS>>\\n' + system_message "
      "+ '\\n<</SYS>>\\n\\n' + message['content'] %}{{ bos_token + '[INST] ' + content.strip() + "
      "' [/INST]' }}{{ ' '  + content.strip() + ' ' + eos_token }}",
      *t);
  EXPECT_EQ(l2.family(), ChatFamily::kLlama2);
  EXPECT_EQ(
      l2.render({{"system", "S"}, {"user", "Hi "}, {"assistant", " Yo"}, {"user", "Q"}}, true),
      "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST] Yo </s><s>[INST] Q [/INST]");
  const ChatTemplate mi = parse(
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' "
      "+ message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
      "message['content'] + eos_token}}{% endif %}{% endfor %}",
      *t);
  EXPECT_EQ(mi.family(), ChatFamily::kLlama2);
  EXPECT_EQ(mi.render({{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Q"}}, true),
            "<s>[INST] Hi [/INST]Yo</s>[INST] Q [/INST]");
}

TEST(ChatTemplate, UnknownTemplateIsAnErrorAbsentIsChatMl) {
  auto t = tok();
  auto bad = ChatTemplate::from_template_text("{{ messages[0]['content'] }}", *t);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnsupported);
  for (const char* f : {"ChatML", "Llama-3", "Llama-2/Mistral"})
    EXPECT_NE(bad.status().message().find(f), std::string::npos) << f;
  auto none = ChatTemplate::from_template_text(std::nullopt, *t);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->family(), ChatFamily::kChatML);
  EXPECT_EQ(none->render({{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat_family_name(ChatFamily::kLlama3), "llama3");
}

}  // namespace
}  // namespace tessera
