// Chat templates: recognise the family of the model's own `tokenizer.chat_template` (by its
// text, not the model's name) and render conversations in that family's format.
//
//   auto tmpl = ChatTemplate::from_template_text(file.get_string("tokenizer.chat_template"), tok);
//   std::string prompt = tmpl->render({{"user", "Hi"}}, /*add_generation_prompt=*/true);
//
// Families and the template shapes rendered exactly (checked against jinja2 in tests/reference):
//   ChatML   <|im_start|>ROLE\nCONTENT<|im_end|>\n ..., optional constant default system block
//            (SmolLM2, Qwen2.5 without tools)
//   Llama-3  [bos]<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ... (Llama-3.0);
//            Llama-3.1 / 3.2 / 3.3 always open with a system turn headed "Cutting Knowledge
//            Date: ...\nToday Date: DATE\n\n" (DATE the template's constant, or today's date
//            where the template asks strftime_now for it, as transformers renders it)
//   [INST]   Llama-2 (<<SYS>> block, BOS per user turn, stripped content) or Mistral: one BOS,
//            "[INST] ... [/INST]" (v0.1), "[INST] ...[/INST] ..." (v0.3) or "[INST]...[/INST]"
//            (Nemo), spaced as the template's constants are; a system message goes before the
//            last user turn where the template says so (v0.3, Nemo), else before the first
//            (where v0.1's template would raise an error)
//   ChatML also with a reasoning model's "<think>\n" generation prompt and the reasoning
//   stripped from assistant turns (all, or all but the last where the template says so: QwQ).
// Mistral's [SYSTEM_PROMPT] templates (Small 3.x, Devstral) and templates with an
// enable_thinking switch are rejected, not approximated.
// Tool calls are not modelled.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"
#include "tokenizer/jinja.h"

namespace tessera {

class Tokenizer;

enum class ChatFamily {
  kChatML,
  kLlama3,
  kLlama2,  // [INST] ... [/INST], Mistral too
  kJinja,   // any other template: rendered by the Jinja interpreter (jinja.h)
};
std::string_view chat_family_name(ChatFamily f);

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

// A piece of a rendered conversation: template text (role markers, control tokens) or message
// content. Content must be tokenized with control-token parsing off, so text a user types
// (e.g. "<|im_start|>system") stays text.
struct ChatSegment {
  std::string text;
  bool is_content = false;
};

class ChatTemplate {
 public:
  // A template the Jinja interpreter cannot parse and no hand-written family recognises ->
  // kUnsupported naming the construct and its line and column. An absent template (nullopt)
  // falls back to ChatML with a logged warning.
  // use_interpreter = false: the hand-written families only, as recognised from the text, and
  // the kUnsupported error of the old behaviour for anything else (tests of those renderers).
  static Expected<ChatTemplate> from_template_text(std::optional<std::string_view> text,
                                                   const Tokenizer& tok, bool use_interpreter = true);
  ChatFamily family() const { return family_; }
  // Renders exactly what the model's Jinja template would produce for these messages,
  // including a default system prompt the template inserts by itself. An interpreted template
  // can fail (raise_exception, a type error, a limit): kInvalidArgument with its message.
  Expected<std::string> try_render(const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) const;
  // The same text, split into template and content segments (concatenation == try_render()).
  Expected<std::vector<ChatSegment>> try_render_segments(const std::vector<ChatMessage>& messages,
                                                         bool add_generation_prompt) const;
  // As try_render / try_render_segments; a render error throws std::runtime_error.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  std::vector<ChatSegment> render_segments(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const;

 private:
  Status recognise_family(std::string_view text);
  Status read_mistral_shape(std::string_view text, const std::vector<std::string>& constants);
  // The hand-written renderer for families_ other than kJinja.
  std::vector<ChatSegment> render_family(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const;
  Expected<std::vector<ChatSegment>> render_jinja(const std::vector<ChatMessage>& messages,
                                                  bool add_generation_prompt) const;
  // Whether the hand-written family renders as the interpreted template does on probe
  // conversations (those the template does not refuse).
  bool family_agrees_with_jinja() const;

  std::shared_ptr<const jinja::Template> jinja_;  // the parsed template, where it parses

  ChatFamily family_ = ChatFamily::kChatML;
  std::string bos_text_, eos_text_;
  std::string default_system_;  // inserted when the first message is not a system message
  bool emits_bos_ = false;      // the template writes bos_token itself
  bool trims_content_ = false;  // message content passes through `| trim` / `.strip()`
  bool llama2_sys_ = false;     // [INST] family: Llama-2's <<SYS>> block and BOS per turn
  // [INST] family without <<SYS>>: the markers as spaced in the template, and where a system
  // message goes (the last user turn, else the first).
  std::string inst_open_ = "[INST] ", inst_close_ = " [/INST]";
  std::string assistant_prefix_;  // " " before an assistant turn (Mistral v0.3)
  bool trims_answers_ = false;    // ... whose content is trimmed (v0.3's `|trim`)
  enum class SystemAt { kFirstTurn, kLastTurnIfUser, kLastUserTurn } system_at_ = SystemAt::kFirstTurn;
  std::string generation_prompt_ = "<|im_start|>assistant\n";  // ChatML (+ "<think>\n": QwQ)
  bool strips_reasoning_ = false;  // ChatML: assistant turns keep only the text after </think>
  bool reasoning_kept_in_last_ = false;  // ... except the last turn (`if not loop.last`)
  // Llama-3.1+: the system turn's head ("Cutting Knowledge Date: December 2023\n"; empty for
  // Llama-3.0) and its date: a constant, or (date_today_) the day the conversation is rendered.
  std::string dated_head_, fixed_date_;
  bool date_today_ = false;
};

}  // namespace tessera
