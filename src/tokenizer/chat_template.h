// Chat templates: render conversations in the format of the model's own
// `tokenizer.chat_template`, byte-identical to transformers' apply_chat_template.
//
//   auto tmpl = ChatTemplate::from_template_text(file.get_string("tokenizer.chat_template"), tok);
//   auto prompt = tmpl->try_render({{"user", "Hi"}}, /*add_generation_prompt=*/true);
//
// Every template is rendered by a Jinja2 interpreter (jinja.h; family kJinja), except where the
// text is one of three hand-written families and that renderer gives the interpreter's text on
// probe conversations (all of llama.cpp's published templates are checked against transformers'
// jinja2 in tests/reference/test_jinja_templates.py). The hand-written families:
//   ChatML   <|im_start|>ROLE\nCONTENT<|im_end|>\n ..., optional constant default system block
//            (SmolLM2, Qwen2.5 without tools), optionally a reasoning model's "<think>\n"
//            generation prompt with reasoning stripped from assistant turns (QwQ)
//   Llama-3  [bos]<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ... (Llama-3.0);
//            Llama-3.1 / 3.2 / 3.3's dated system turn ("Cutting Knowledge Date: ...")
//   [INST]   Llama-2 (<<SYS>> block, BOS per user turn) or Mistral v0.1 / v0.3 / Nemo
// Message content stays content through the interpreter (ChatSegment::is_content), so a user
// cannot inject control tokens. A template the interpreter cannot parse (include, call blocks,
// ...) is refused with kUnsupported naming the construct and position; a template that raises
// (raise_exception) or exceeds the interpreter's limits makes try_render fail.
// Tools, documents and images are not modelled (the template sees tools=None, documents=None).
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
