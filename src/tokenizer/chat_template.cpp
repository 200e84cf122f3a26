#include "tokenizer/chat_template.h"

#include "core/log.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

// Text the template can emit as constants: string literals inside {{ }} / {% %} blocks
// (unescaped as Jinja does) and the raw text between blocks.
std::vector<std::string> template_constants(std::string_view t) {
  std::vector<std::string> out;
  size_t i = 0;
  std::string raw;
  while (i < t.size()) {
    const bool block = t[i] == '{' && i + 1 < t.size() && (t[i + 1] == '{' || t[i + 1] == '%');
    if (!block) {
      raw.push_back(t[i++]);
      continue;
    }
    if (!raw.empty()) out.push_back(std::move(raw)), raw.clear();
    const char close = t[i + 1] == '{' ? '}' : '%';
    i += 2;
    while (i < t.size() && !(t[i] == close && i + 1 < t.size() && t[i + 1] == '}')) {
      if (t[i] != '\'' && t[i] != '"') {
        ++i;
        continue;
      }
      const char q = t[i++];
      std::string lit;
      while (i < t.size() && t[i] != q) {
        if (t[i] == '\\' && i + 1 < t.size()) {
          const char e = t[i + 1];
          switch (e) {
            case 'n':
              lit.push_back('\n');
              break;
            case 't':
              lit.push_back('\t');
              break;
            case 'r':
              lit.push_back('\r');
              break;
            case '\\':
            case '\'':
            case '"':
              lit.push_back(e);
              break;
            default:
              lit.push_back('\\'), lit.push_back(e);
          }
          i += 2;
        } else {
          lit.push_back(t[i++]);
        }
      }
      ++i;  // closing quote
      out.push_back(std::move(lit));
    }
    i += 2;
  }
  if (!raw.empty()) out.push_back(std::move(raw));
  return out;
}

// A system turn written out as one constant, e.g. '<|im_start|>system\nYou are ...<|im_end|>\n':
// the template inserts it on its own when the conversation has no system message.
std::string find_default_system(std::string_view text, std::string_view open,
                                std::string_view close) {
  for (const std::string& c : template_constants(text)) {
    const size_t a = c.find(open);
    if (a == std::string::npos) continue;
    const size_t b = c.find(close, a + open.size());
    if (b == std::string::npos || b == a + open.size()) continue;
    return c.substr(a + open.size(), b - a - open.size());
  }
  return {};
}

// Jinja's `trim` filter / Python's str.strip(): leading and trailing whitespace.
std::string strip(std::string_view s) {
  constexpr std::string_view kWs = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(kWs) - b + 1));
}

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

}  // namespace

std::string_view chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::kChatML:
      return "chatml";
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kLlama2:
      return "llama2";
  }
  return "unknown";
}

Expected<ChatTemplate> ChatTemplate::from_template_text(std::optional<std::string_view> text,
                                                        const Tokenizer& tok) {
  ChatTemplate t;
  if (tok.bos_id() >= 0) t.bos_text_ = std::string(tok.piece(tok.bos_id()));
  if (tok.eos_id() >= 0) t.eos_text_ = std::string(tok.piece(tok.eos_id()));
  if (!text) {
    log_warn("model has no tokenizer.chat_template; using ChatML");
    t.family_ = ChatFamily::kChatML;
    return t;
  }
  const std::string_view s = *text;
  t.emits_bos_ = contains(s, "bos_token");
  t.trims_content_ = contains(s, "| trim") || contains(s, "|trim") || contains(s, ".strip()");
  if (contains(s, "<|im_start|>")) {
    t.family_ = ChatFamily::kChatML;
    t.default_system_ = find_default_system(s, "<|im_start|>system\n", "<|im_end|>");
  } else if (contains(s, "<|start_header_id|>")) {
    t.family_ = ChatFamily::kLlama3;
    t.default_system_ =
        find_default_system(s, "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>");
  } else if (contains(s, "[INST]")) {
    t.family_ = ChatFamily::kLlama2;
    t.llama2_sys_ = contains(s, "<<SYS>>");
  } else {
    return Status(ErrorCode::kUnsupported,
                  "unrecognised chat template (supported families: ChatML '<|im_start|>', "
                  "Llama-3 '<|start_header_id|>', Llama-2/Mistral '[INST]')");
  }
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  std::string out;
  auto content = [&](const std::string& c) { return trims_content_ ? strip(c) : c; };
  const bool needs_default =
      !default_system_.empty() && !messages.empty() && messages[0].role != "system";
  switch (family_) {
    case ChatFamily::kChatML:
      if (needs_default) out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      for (const ChatMessage& m : messages)
        out += "<|im_start|>" + m.role + "\n" + content(m.content) + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatFamily::kLlama3: {
      auto turn = [&](const std::string& role, const std::string& c) {
        return "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + c + "<|eot_id|>";
      };
      if (emits_bos_ && !messages.empty()) out += bos_text_;
      if (needs_default) out += turn("system", default_system_);
      for (const ChatMessage& m : messages) out += turn(m.role, content(m.content));
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatFamily::kLlama2: {
      size_t first = 0;
      std::string system;
      if (!messages.empty() && messages[0].role == "system")
        system = messages[0].content, first = 1;
      if (!llama2_sys_) out += bos_text_;  // Mistral: one BOS for the whole conversation
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        std::string c = m.content;
        if (i == first && !system.empty())
          c = llama2_sys_ ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + c : system + "\n\n" + c;
        if (llama2_sys_) {  // Llama-2 strips every turn
          if (m.role == "user")
            out += bos_text_ + "[INST] " + strip(c) + " [/INST]";
          else if (m.role == "assistant")
            out.append(" ").append(strip(c)).append(" ").append(eos_text_);
        } else {
          if (m.role == "user")
            out += "[INST] " + c + " [/INST]";
          else if (m.role == "assistant")
            out += c + eos_text_;
        }
      }
      break;  // neither template writes a generation prompt
    }
  }
  return out;
}

}  // namespace tessera
