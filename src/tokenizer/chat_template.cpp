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

namespace {

// Appends segments, merging neighbours of the same kind; strip_* trim whitespace at the edges
// of a run of segments the template trims as one string.
class SegmentWriter {
 public:
  void tmpl(std::string_view t) { add(t, false); }
  void content(std::string_view t) { add(t, true); }
  size_t mark() const { return out_.size(); }
  // Jinja's trim over everything written since `from` (which starts a fresh segment).
  void strip_since(size_t from) {
    constexpr std::string_view kWs = " \t\n\r\v\f";
    for (size_t i = from; i < out_.size(); ++i) {  // leading
      std::string& t = out_[i].text;
      const size_t b = t.find_first_not_of(kWs);
      t.erase(0, b == std::string::npos ? t.size() : b);
      if (!t.empty()) break;
    }
    for (size_t i = out_.size(); i-- > from;) {  // trailing
      std::string& t = out_[i].text;
      const size_t e = t.find_last_not_of(kWs);
      t.erase(e == std::string::npos ? 0 : e + 1);
      if (!t.empty()) break;
    }
  }
  void barrier() { fresh_ = true; }  // next add starts a new segment
  std::vector<ChatSegment> take() {
    std::vector<ChatSegment> r;
    for (auto& s : out_)
      if (!s.text.empty()) {
        if (!r.empty() && r.back().is_content == s.is_content)
          r.back().text += s.text;
        else
          r.push_back(std::move(s));
      }
    return r;
  }

 private:
  void add(std::string_view t, bool is_content) {
    if (t.empty()) return;
    if (!fresh_ && !out_.empty() && out_.back().is_content == is_content) {
      out_.back().text.append(t);
    } else {
      out_.push_back({std::string(t), is_content});
    }
    fresh_ = false;
  }
  std::vector<ChatSegment> out_;
  bool fresh_ = false;
};

}  // namespace

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  std::string out;
  for (const ChatSegment& s : render_segments(messages, add_generation_prompt)) out += s.text;
  return out;
}

std::vector<ChatSegment> ChatTemplate::render_segments(const std::vector<ChatMessage>& messages,
                                                       bool add_generation_prompt) const {
  SegmentWriter w;
  auto content = [&](const std::string& c) { w.content(trims_content_ ? strip(c) : c); };
  const bool needs_default =
      !default_system_.empty() && !messages.empty() && messages[0].role != "system";
  switch (family_) {
    case ChatFamily::kChatML:
      if (needs_default) w.tmpl("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
      for (const ChatMessage& m : messages) {
        w.tmpl("<|im_start|>" + m.role + "\n");
        content(m.content);
        w.tmpl("<|im_end|>\n");
      }
      if (add_generation_prompt) w.tmpl("<|im_start|>assistant\n");
      break;
    case ChatFamily::kLlama3: {
      auto turn = [&](const std::string& role, auto&& write_content) {
        w.tmpl("<|start_header_id|>" + role + "<|end_header_id|>\n\n");
        write_content();
        w.tmpl("<|eot_id|>");
      };
      if (emits_bos_ && !messages.empty()) w.tmpl(bos_text_);
      if (needs_default) turn("system", [&] { w.tmpl(default_system_); });
      for (const ChatMessage& m : messages) turn(m.role, [&] { content(m.content); });
      if (add_generation_prompt) w.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case ChatFamily::kLlama2: {
      size_t first = 0;
      std::string system;
      if (!messages.empty() && messages[0].role == "system")
        system = messages[0].content, first = 1;
      if (!llama2_sys_) w.tmpl(bos_text_);  // Mistral: one BOS for the whole conversation
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        // The turn text c = [system prefix] + content, written as segments.
        auto write_c = [&] {
          if (i == first && !system.empty()) {
            if (llama2_sys_) {
              w.tmpl("<<SYS>>\n");
              w.content(system);
              w.tmpl("\n<</SYS>>\n\n");
            } else {
              w.content(system);
              w.tmpl("\n\n");
            }
          }
          w.content(m.content);
        };
        if (llama2_sys_) {  // Llama-2 strips every turn
          if (m.role == "user") {
            w.tmpl(bos_text_ + "[INST] ");
            w.barrier();
            const size_t from = w.mark();
            write_c();
            w.strip_since(from);
            w.tmpl(" [/INST]");
          } else if (m.role == "assistant") {
            w.tmpl(" ");
            w.barrier();
            const size_t from = w.mark();
            write_c();
            w.strip_since(from);
            w.tmpl(" " + eos_text_);
          }
        } else {
          if (m.role == "user") {
            w.tmpl("[INST] ");
            write_c();
            w.tmpl(" [/INST]");
          } else if (m.role == "assistant") {
            write_c();
            w.tmpl(eos_text_);
          }
        }
      }
      break;  // neither template writes a generation prompt
    }
  }
  return w.take();
}

}  // namespace tessera
