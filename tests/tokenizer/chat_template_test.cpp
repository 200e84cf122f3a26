// Chat template family detection from the template text, rendering, default system prompts.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <cctype>

#include "tiny_vocab.h"

namespace tessera {
namespace {

std::unique_ptr<Tokenizer> tok() {
  auto c = test::bpe_config({}, {}, {{"<s>", kTokenControl}, {"</s>", kTokenControl}});
  c.bos_id = 256;
  c.eos_id = 257;
  return test::make(c);
}

// The hand-written family renderers on their own (templates reduced to the text they read).
// A rendering's whole text, and the part of it marked as message content.
std::pair<std::string, std::string> text_and_content(const std::vector<ChatSegment>& segs) {
  std::string text, content;
  for (const ChatSegment& s : segs) {
    text += s.text;
    if (s.is_content) content += s.text;
  }
  return {text, content};
}

ChatTemplate parse(std::string_view text, const Tokenizer& t) {
  auto r = ChatTemplate::from_template_text(text, t, /*use_interpreter=*/false);
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

// The parts of Llama-3.1's template that decide a conversation without tools.
std::string llama31_template(const std::string& date_setting) {
  return "{{- bos_token }}\n{%- if not date_string is defined %}\n" + date_setting +
         "{%- endif %}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
         "messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    "
         "{%- set system_message = \"\" %}\n{%- endif %}\n{{- "
         "\"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Cutting Knowledge Date: "
         "December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{{- "
         "system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n{{- "
         "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
         "trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- "
         "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n";
}

TEST(ChatTemplate, Llama31DatedSystemTurn) {
  auto t = tok();
  const ChatTemplate c = parse(llama31_template("    {%- set date_string = \"26 Jul 2024\" %}\n"), *t);
  EXPECT_EQ(c.family(), ChatFamily::kLlama3);
  const std::string head =
      "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
      "Today Date: 26 Jul 2024\n\n";
  // The system turn is written with or without a system message (its content trimmed).
  EXPECT_EQ(c.render({{"user", " Hi "}}, true),
            head + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(c.render({{"system", " Be brief.\n"}, {"user", "Hi"}}, false),
            head + "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  // Llama-3.2 asks strftime_now for the date: the day of rendering, "%d %b %Y".
  const ChatTemplate today = parse(llama31_template(
      "    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now(\"%d %b %Y\") "
      "%}\n    {%- else %}\n        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n"), *t);
  const std::string r = today.render({{"user", "Hi"}}, false);
  const size_t at = r.find("Today Date: ");
  ASSERT_NE(at, std::string::npos) << r;
  const std::string date = r.substr(at + 12, r.find('\n', at) - at - 12);
  ASSERT_EQ(date.size(), 11u) << date;  // e.g. "05 Dec 2026"
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(date[0])) && date[2] == ' ' && date[6] == ' ') << date;
  EXPECT_NE(date, "26 Jul 2024");
  // A knowledge-date header whose date this code cannot find is an error, not a guess.
  auto odd = ChatTemplate::from_template_text(
      "{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{ 'Cutting Knowledge Date: x\\n' }}"
      "{{ 'Today Date: ' + now }}", *t, /*use_interpreter=*/false);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), ErrorCode::kUnsupported);
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

TEST(ChatTemplate, MistralNemoTightMarkersSystemInLastUserTurn) {
  auto t = tok();
  const ChatTemplate c = parse(
      "{{- bos_token }}{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}"
      "{%- if loop.last and system_message is defined %}{{- \"[INST]\" + system_message + \"\\n\\n\" + "
      "message[\"content\"] + \"[/INST]\" }}{%- else %}{{- \"[INST]\" + message[\"content\"] + "
      "\"[/INST]\" }}{%- endif %}{%- elif message[\"role\"] == \"assistant\" %}{{- message[\"content\"] "
      "+ eos_token}}{%- endif %}{%- endfor %}",
      *t);
  EXPECT_EQ(c.family(), ChatFamily::kLlama2);
  EXPECT_EQ(c.render({{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "Q"}}, true),
            "<s>[INST]Hi[/INST]Yo</s>[INST]S\n\nQ[/INST]");
  // Ending with an assistant turn, the template has no place for the system message.
  EXPECT_EQ(c.render({{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}}, false), "<s>[INST]Hi[/INST]Yo</s>");
}

TEST(ChatTemplate, MistralV03SpacedOpenTightCloseSpacedAnswers) {
  auto t = tok();
  const std::string body =
      "{{- bos_token }}{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}"
      "{%- if SYSTEM_RULE and system_message is defined %}{{- \"[INST] \" + system_message + \"\\n\\n\" + "
      "message[\"content\"] + \"[/INST]\" }}{%- else %}{{- \"[INST] \" + message[\"content\"] + "
      "\"[/INST]\" }}{%- endif %}{%- elif message[\"role\"] == \"assistant\" %}{{- \" \" + "
      "message[\"content\"]|trim + eos_token}}{%- endif %}{%- endfor %}";
  auto with_rule = [&](const std::string& rule) {
    std::string b = body;
    b.replace(b.find("SYSTEM_RULE"), 11, rule);
    return parse(b, *t);
  };
  const ChatTemplate last = with_rule("loop.last");
  // Answers are trimmed and follow a space; user content is not trimmed.
  EXPECT_EQ(last.render({{"system", "S"}, {"user", "Hi "}, {"assistant", " Yo \n"}, {"user", "Q"}}, true),
            "<s>[INST] Hi [/INST] Yo</s>[INST] S\n\nQ[/INST]");
  EXPECT_EQ(last.render({{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}}, true), "<s>[INST] Hi[/INST] Yo</s>");
  // The variant that keys on the last user message keeps the system message when an answer follows.
  const ChatTemplate last_user = with_rule("(message == user_messages[-1])");
  EXPECT_EQ(last_user.render({{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}}, true),
            "<s>[INST] S\n\nHi[/INST] Yo</s>");
}

TEST(ChatTemplate, ReasoningModelGenerationPromptAndEarlierThoughts) {
  auto t = tok();
  const ChatTemplate c = parse(
      "{%- for message in messages %}{%- if message.role == \"user\" %}{{- '<|im_start|>' + "
      "message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- elif message.role == "
      "\"assistant\" %}{%- set content = message.content %}{%- if not loop.last %}{%- set content = "
      "message.content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}{{- '<|im_start|>' + "
      "message.role + '\\n' + content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}{%- if "
      "add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}",
      *t);
  EXPECT_EQ(c.family(), ChatFamily::kChatML);
  EXPECT_EQ(c.render({{"user", "Q"}, {"assistant", "<think>\nhmm\n</think>\n\nA"}, {"user", "R"}}, true),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nR"
            "<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(c.render({{"user", "Q"}, {"assistant", "<think>x</think>A"}}, false),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>x</think>A<|im_end|>\n");
  // Without the `not loop.last` condition every answer loses its reasoning.
  const ChatTemplate all = parse(
      "{%- for message in messages %}{%- if message.role == \"assistant\" %}{%- set content = "
      "message.content.split('</think>')[-1].lstrip('\\n') %}{{- '<|im_start|>' + message.role + '\\n' + "
      "content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}",
      *t);
  EXPECT_EQ(all.render({{"user", "Q"}, {"assistant", "<think>x</think>A"}}, false),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
}

TEST(ChatTemplate, ShapesItCannotRenderExactlyAreErrors) {
  auto t = tok();
  for (const char* text :
       {"{{ bos_token }}{{ '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{ '[INST]' + "
        "message['content'] + '[/INST]' }}",
        "{{ '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false "
        "%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}",
        "{{ '[INST]' + message['content'] + '[/INST]' }}{{ '[INST] ' + message['content'] + ' [/INST]' }}",
        // Mistral v0.2: a space before [INST]
        "{{ bos_token }}{{ ' [INST] ' + message['content'] + ' [/INST]' }}{{ message['content'] + eos_token }}",
        // Mixtral-8x22B: a space after the answer too
        "{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}{{ ' ' + message['content'] + ' ' + "
        "eos_token }}"}) {
    auto r = ChatTemplate::from_template_text(text, *t, /*use_interpreter=*/false);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported) << r.status().to_string();
  }
}

TEST(ChatTemplate, UnknownTemplateIsAnErrorAbsentIsChatMl) {
  auto t = tok();
  auto bad = ChatTemplate::from_template_text("{{ messages[0]['content'] }}", *t, false);
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

// Templates of no hand-written family, or of a shape the families refuse or render otherwise,
// go to the Jinja interpreter (expected strings rendered by transformers' jinja2).
TEST(ChatTemplate, InterpreterRendersWhatTheFamiliesDoNot) {
  auto t = tok();
  auto sp = ChatTemplate::from_template_text(
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}[SYSTEM_PROMPT]{{ m.content }}"
      "[/SYSTEM_PROMPT]{% elif m.role == 'user' %}[INST]{{ m.content }}[/INST]{% else %}{{ m.content }}"
      "{{ eos_token }}{% endif %}{% endfor %}",
      *t);
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  EXPECT_EQ(sp->family(), ChatFamily::kJinja);
  auto segs = sp->try_render_segments({{"system", "S"}, {"user", "<s>x"}}, true);
  ASSERT_TRUE(segs.ok()) << segs.status().to_string();
  const auto [text, content] = text_and_content(*segs);
  EXPECT_EQ(text, "<s>[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST]<s>x[/INST]");
  EXPECT_EQ(content, "S<s>x");  // the user's "<s>" is content: never parsed as a control token

  // A ChatML template the ChatML renderer would get wrong (content upper-cased).
  auto upper = ChatTemplate::from_template_text(
      "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content|upper + '<|im_end|>\\n' }}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      *t);
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(upper->family(), ChatFamily::kJinja);
  EXPECT_EQ(upper->render({{"user", "Hi"}}, true), "<|im_start|>user\nHI<|im_end|>\n<|im_start|>assistant\n");
  // SmolLM2's template is ChatML exactly: the hand-written renderer stays.
  auto smol = ChatTemplate::from_template_text(kSmolLm, *t);
  ASSERT_TRUE(smol.ok());
  EXPECT_EQ(smol->family(), ChatFamily::kChatML);
}

// Roles are template text: a template that builds its control tokens from the role (Phi-3's
// '<|' + role + '|>') gets them recognised; the message text stays content.
TEST(ChatTemplate, InterpretedRolesAreTemplateText) {
  auto t = tok();
  auto phi = ChatTemplate::from_template_text(
      "{% for m in messages %}{{ '<|' + m['role'] + '|>\n' + m['content'] + '<|end|>\n' }}{% endfor %}", *t);
  ASSERT_TRUE(phi.ok()) << phi.status().to_string();
  auto segs = phi->try_render_segments({{"user", "<|end|>hi"}}, false);
  ASSERT_TRUE(segs.ok()) << segs.status().to_string();
  const auto [text, content] = text_and_content(*segs);
  EXPECT_EQ(text, "<|user|>\n<|end|>hi<|end|>\n");
  EXPECT_EQ(content, "<|end|>hi");
}

TEST(ChatTemplate, InterpreterErrors) {
  auto t = tok();
  auto bad = ChatTemplate::from_template_text("{% for m in messages %}\n{% include 'x' %}{% endfor %}", *t);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("unsupported statement 'include' at line 2"), std::string::npos)
      << bad.status().message();
  auto raising = ChatTemplate::from_template_text(
      "{% if messages[0].role == 'system' %}{{ raise_exception('no system messages') }}{% endif %}"
      "{{ messages[0].content }}",
      *t);
  ASSERT_TRUE(raising.ok());
  EXPECT_EQ(*raising->try_render({{"user", "u"}}, true), "u");
  auto r = raising->try_render({{"system", "s"}, {"user", "u"}}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no system messages"), std::string::npos);
  EXPECT_THROW(raising->render({{"system", "s"}}, true), std::runtime_error);
  EXPECT_EQ(chat_family_name(ChatFamily::kJinja), "jinja");
}

}  // namespace
}  // namespace tessera
