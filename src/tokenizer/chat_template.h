// Chat templates: recognise the family of the model's own `tokenizer.chat_template` (by its
// text, not the model's name) and render conversations in that family's format.
//
//   auto tmpl = ChatTemplate::from_template_text(file.get_string("tokenizer.chat_template"), tok);
//   std::string prompt = tmpl->render({{"user", "Hi"}}, /*add_generation_prompt=*/true);
//
// Families and the template shapes rendered exactly (checked against jinja2 in tests/reference):
//   ChatML   <|im_start|>ROLE\nCONTENT<|im_end|>\n ..., optional constant default system block
//            (SmolLM2, Qwen2.5 without tools)
//   Llama-3  [bos]<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ... (Llama-3.0)
//   [INST]   Llama-2 (<<SYS>> block, BOS per user turn, stripped content) or Mistral v0.1 (one
//            BOS, no system role: a system message is prepended to the first user turn where the
//            template itself would raise an error)
// Tool calls and the date-stamped Llama-3.1 system header are not modelled.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

namespace tessera {

class Tokenizer;

enum class ChatFamily { kChatML, kLlama3, kLlama2 /* [INST] ... [/INST], Mistral too */ };
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
  // Unrecognised template text -> kUnsupported error naming the supported families. An absent
  // template (nullopt) falls back to ChatML with a logged warning.
  static Expected<ChatTemplate> from_template_text(std::optional<std::string_view> text,
                                                   const Tokenizer& tok);
  ChatFamily family() const { return family_; }
  // Renders exactly what the model's Jinja template would produce for these messages,
  // including a default system prompt the template inserts by itself.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // The same text, split into template and content segments (concatenation == render()).
  std::vector<ChatSegment> render_segments(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const;

 private:
  ChatFamily family_ = ChatFamily::kChatML;
  std::string bos_text_, eos_text_;
  std::string default_system_;  // inserted when the first message is not a system message
  bool emits_bos_ = false;      // the template writes bos_token itself
  bool trims_content_ = false;  // message content passes through `| trim` / `.strip()`
  bool llama2_sys_ = false;     // [INST] family: Llama-2's <<SYS>> block and BOS per turn
};

}  // namespace tessera
