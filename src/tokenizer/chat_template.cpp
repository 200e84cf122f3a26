#include "tokenizer/chat_template.h"

#include <algorithm>
#include <ctime>
#include <stdexcept>

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
std::string strip(std::string_view s) { return std::string(jinja::py_strip(s)); }

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// The string literal the template assigns last to `name` (`{% set name = "..." %}`), or "".
std::string assigned_literal(std::string_view t, std::string_view name) {
  const std::string key = "set " + std::string(name) + " = ";
  std::string out;
  for (size_t at = t.find(key); at != std::string_view::npos; at = t.find(key, at + 1)) {
    const size_t q = at + key.size();
    if (q >= t.size() || (t[q] != '"' && t[q] != '\'')) continue;
    const size_t end = t.find(t[q], q + 1);
    if (end != std::string_view::npos) out = std::string(t.substr(q + 1, end - q - 1));
  }
  return out;
}

// content.split('</think>')[-1].lstrip('\n'): an answer without its reasoning.
std::string after_reasoning(std::string_view c) {
  constexpr std::string_view kEnd = "</think>";
  if (const size_t end = c.rfind(kEnd); end != std::string_view::npos) c.remove_prefix(end + kEnd.size());
  while (!c.empty() && c.front() == '\n') c.remove_prefix(1);
  return std::string(c);
}

// Today's date as the templates' strftime_now("%d %b %Y") gives it (local time, C locale).
std::string today_dmy() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  return std::string(buf, std::strftime(buf, sizeof buf, "%d %b %Y", &tm));
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
    case ChatFamily::kJinja:
      return "jinja";
  }
  return "unknown";
}

Expected<ChatTemplate> ChatTemplate::from_template_text(std::optional<std::string_view> text,
                                                        const Tokenizer& tok, bool use_interpreter) {
  ChatTemplate t;
  if (tok.bos_id() >= 0) t.bos_text_ = std::string(tok.piece(tok.bos_id()));
  if (tok.eos_id() >= 0) t.eos_text_ = std::string(tok.piece(tok.eos_id()));
  if (!text) {
    log_warn("model has no tokenizer.chat_template; using ChatML");
    t.family_ = ChatFamily::kChatML;
    return t;
  }
  if (!use_interpreter) {
    if (Status st = t.recognise_family(*text); !st.ok()) return st;
    return t;
  }
  auto parsed = jinja::Template::parse(*text);
  if (parsed) t.jinja_ = std::make_shared<const jinja::Template>(std::move(*parsed));
  // A hand-written family where the text is one and it renders as the template does; the
  // interpreter for everything else.
  const Status family = t.recognise_family(*text);
  if (family.ok() && (!t.jinja_ || t.family_agrees_with_jinja())) return t;
  if (!t.jinja_) return parsed.status();
  t.family_ = ChatFamily::kJinja;
  return t;
}

Status ChatTemplate::recognise_family(std::string_view s) {
  ChatTemplate& t = *this;
  t.emits_bos_ = contains(s, "bos_token");
  t.trims_content_ = contains(s, "| trim") || contains(s, "|trim") || contains(s, ".strip()");
  if (contains(s, "enable_thinking"))
    return Status(ErrorCode::kUnsupported,
                  "chat template with an enable_thinking switch is not supported (its rendering "
                  "depends on a flag the chat API does not have)");
  const std::vector<std::string> constants = template_constants(s);
  if (contains(s, "<|im_start|>")) {
    t.family_ = ChatFamily::kChatML;
    t.default_system_ = find_default_system(s, "<|im_start|>system\n", "<|im_end|>");
    constexpr std::string_view kThink = "<|im_start|>assistant\n<think>\n";
    if (std::ranges::find(constants, kThink) != constants.end()) t.generation_prompt_ = kThink;
    t.strips_reasoning_ = contains(s, "split('</think>')");
    t.reasoning_kept_in_last_ = t.strips_reasoning_ && contains(s, "if not loop.last");
  } else if (contains(s, "<|start_header_id|>")) {
    t.family_ = ChatFamily::kLlama3;
    t.default_system_ =
        find_default_system(s, "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>");
    for (const std::string& c : constants)
      if (c.starts_with("Cutting Knowledge Date:")) t.dated_head_ = c;
    if (!t.dated_head_.empty()) {
      t.date_today_ = contains(s, "strftime_now");
      t.fixed_date_ = assigned_literal(s, "date_string");
      if (!contains(s, "\"Today Date: \" + date_string") || (!t.date_today_ && t.fixed_date_.empty()))
        return Status(ErrorCode::kUnsupported,
                      "Llama-3 chat template with a knowledge-date system header of an unknown shape "
                      "(supported: Llama-3.1 / 3.2 / 3.3's)");
    }
  } else if (contains(s, "[INST]")) {
    t.family_ = ChatFamily::kLlama2;
    t.llama2_sys_ = contains(s, "<<SYS>>");
    if (contains(s, "[SYSTEM_PROMPT]"))
      return Status(ErrorCode::kUnsupported,
                    "Mistral chat template with [SYSTEM_PROMPT] (Mistral Small 3.x / Devstral style) "
                    "is not supported (supported [INST] templates: Llama-2, Mistral v0.1, v0.3, Nemo)");
    if (!t.llama2_sys_) {
      if (Status st = read_mistral_shape(s, constants); !st.ok()) return st;
    }
  } else {
    return Status(ErrorCode::kUnsupported,
                  "unrecognised chat template (supported families: ChatML '<|im_start|>', "
                  "Llama-3 '<|start_header_id|>', Llama-2/Mistral '[INST]')");
  }
  return Status::ok_status();
}

// A Mistral [INST] template's shape from its text: marker spacing, where the system message goes,
// the answer's form. Shapes this renderer does not write are errors.
Status ChatTemplate::read_mistral_shape(std::string_view s, const std::vector<std::string>& constants) {
  auto any_constant = [&](auto&& pred) { return std::any_of(constants.begin(), constants.end(), pred); };
  auto ends = [&](std::string_view m) { return any_constant([&](const std::string& c) { return c.ends_with(m); }); };
  auto starts = [&](std::string_view m) { return any_constant([&](const std::string& c) { return c.starts_with(m); }); };
  if (ends(" [INST] ") || ends(" [INST]"))  // Mistral v0.2's ' [INST] ': not written here
    return Status(ErrorCode::kUnsupported,
                  "[INST] chat template with a space before [INST] (Mistral v0.2 style) is not supported");
  const bool open_spaced = ends("[INST] "), open_tight = ends("[INST]");
  const bool close_spaced = starts(" [/INST]"), close_tight = starts("[/INST]");
  if (open_spaced == open_tight || close_spaced == close_tight)
    return Status(ErrorCode::kUnsupported,
                  "[INST] chat template whose marker spacing cannot be read from its constants");
  inst_open_ = open_spaced ? "[INST] " : "[INST]";
  inst_close_ = close_spaced ? " [/INST]" : "[/INST]";
  if (contains(s, "loop.last and system_message"))
    system_at_ = SystemAt::kLastTurnIfUser;
  else if (contains(s, "user_messages[-1]) and system_message") || contains(s, "last_user_message and system_message"))
    system_at_ = SystemAt::kLastUserTurn;
  // The answer: content + eos (v0.1, Nemo), " " + content + eos, or " " + trimmed content + eos
  // (v0.3); most specific first, with quotes and the spaces around '|' normalised.
  std::string norm;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ' ' && ((i + 1 < s.size() && s[i + 1] == '|') || (i > 0 && s[i - 1] == '|'))) continue;
    norm.push_back(s[i] == '\'' ? '"' : s[i]);
  }
  if (contains(norm, "\" \" + message[\"content\"]|trim + eos_token")) {
    assistant_prefix_ = " ";
    trims_answers_ = true;
  } else if (contains(norm, "\" \" + message[\"content\"] + eos_token")) {
    assistant_prefix_ = " ";
  } else if (!contains(norm, "message[\"content\"] + eos_token")) {
    return Status(ErrorCode::kUnsupported,
                  "[INST] chat template whose assistant turn has a shape this renderer does not know");
  }
  return Status::ok_status();
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

Expected<std::vector<ChatSegment>> ChatTemplate::try_render_segments(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  if (family_ == ChatFamily::kJinja) return render_jinja(messages, add_generation_prompt);
  return render_family(messages, add_generation_prompt);
}

Expected<std::string> ChatTemplate::try_render(const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt) const {
  auto segs = try_render_segments(messages, add_generation_prompt);
  if (!segs) return segs.status();
  std::string out;
  for (const ChatSegment& s : *segs) out += s.text;
  return out;
}

std::vector<ChatSegment> ChatTemplate::render_segments(const std::vector<ChatMessage>& messages,
                                                       bool add_generation_prompt) const {
  auto segs = try_render_segments(messages, add_generation_prompt);
  if (!segs) throw std::runtime_error(segs.status().message());
  return std::move(*segs);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  auto out = try_render(messages, add_generation_prompt);
  if (!out) throw std::runtime_error(out.status().message());
  return std::move(*out);
}

Expected<std::vector<ChatSegment>> ChatTemplate::render_jinja(const std::vector<ChatMessage>& messages,
                                                              bool add_generation_prompt) const {
  // The variables transformers' apply_chat_template passes: the conversation (message text
  // marked as content), the generation flag, the special tokens, and tools / documents as
  // None (their default).
  jinja::Value msgs = jinja::Value::list();
  for (const ChatMessage& m : messages) {
    jinja::Value d = jinja::Value::dict();
    // Roles are template text: templates build control tokens from them ('<|' + role + '|>',
    // Phi-3 style); the server accepts only the known roles.
    d.set("role", jinja::Value::string(m.role));
    d.set("content", jinja::Value::string(m.content, /*content=*/true));
    msgs.items().push_back(std::move(d));
  }
  jinja::Value ctx = jinja::Value::dict();
  ctx.set("messages", std::move(msgs));
  ctx.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  ctx.set("tools", jinja::Value::none());
  ctx.set("documents", jinja::Value::none());
  if (!bos_text_.empty()) ctx.set("bos_token", jinja::Value::string(bos_text_));
  if (!eos_text_.empty()) ctx.set("eos_token", jinja::Value::string(eos_text_));
  auto text = jinja_->render(ctx);
  if (!text) return text.status();
  std::vector<ChatSegment> out;
  for (auto& [piece, is_content] : text->runs()) out.push_back({std::move(piece), is_content});
  return out;
}

bool ChatTemplate::family_agrees_with_jinja() const {
  using M = std::vector<ChatMessage>;
  const M probes[] = {
      {{"user", "Hi"}},
      {{"system", "Be brief."}, {"user", " What is 2+2? "}},
      {{"user", "  padded \n"}, {"assistant", " Four.\n\n"}, {"user", "Thanks!"}},
      {{"system", "S\nrules"}, {"user", "u1"}, {"assistant", "<think>r</think>\n\na1"}, {"user", "u2"}},
      {{"system", "S"}, {"user", "q"}, {"assistant", "a"}},
      {{"user", "\u3000hi\u00a0"}, {"assistant", "\u2028ok\u0085"}, {"user", "\u00a0bye"}},  // Unicode spaces
  };
  int compared = 0;
  for (const M& m : probes)
    for (bool gen : {true, false}) {
      auto want = render_jinja(m, gen);
      if (!want) continue;  // the template refuses this conversation
      std::string a, b;
      for (const ChatSegment& s : *want) a += s.text;
      for (const ChatSegment& s : render_family(m, gen)) b += s.text;
      if (a != b) return false;
      ++compared;
    }
  // A template that refuses every probe (it needs tools, or is broken) is not that family.
  return compared > 0;
}

std::vector<ChatSegment> ChatTemplate::render_family(const std::vector<ChatMessage>& messages,
                                                     bool add_generation_prompt) const {
  SegmentWriter w;
  auto content = [&](const std::string& c) { w.content(trims_content_ ? strip(c) : c); };
  const bool needs_default =
      !default_system_.empty() && !messages.empty() && messages[0].role != "system";
  switch (family_) {
    case ChatFamily::kChatML:
      if (needs_default) w.tmpl("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        w.tmpl("<|im_start|>" + m.role + "\n");
        const bool cut = strips_reasoning_ && m.role == "assistant" &&
                         !(reasoning_kept_in_last_ && i + 1 == messages.size());
        content(cut ? after_reasoning(m.content) : m.content);
        w.tmpl("<|im_end|>\n");
      }
      if (add_generation_prompt) w.tmpl(generation_prompt_);
      break;
    case ChatFamily::kLlama3: {
      auto turn = [&](const std::string& role, auto&& write_content) {
        w.tmpl("<|start_header_id|>" + role + "<|end_header_id|>\n\n");
        write_content();
        w.tmpl("<|eot_id|>");
      };
      if (emits_bos_ && !messages.empty()) w.tmpl(bos_text_);
      size_t first = 0;
      if (!dated_head_.empty()) {  // Llama-3.1+: the system turn is always there
        const bool has_system = !messages.empty() && messages[0].role == "system";
        first = has_system ? 1 : 0;
        w.tmpl("<|start_header_id|>system<|end_header_id|>\n\n" + dated_head_ + "Today Date: " +
               (date_today_ ? today_dmy() : fixed_date_) + "\n\n");
        if (has_system) w.content(strip(messages[0].content));
        w.tmpl("<|eot_id|>");
      } else if (needs_default) {
        turn("system", [&] { w.tmpl(default_system_); });
      }
      for (size_t i = first; i < messages.size(); ++i) turn(messages[i].role, [&] { content(messages[i].content); });
      if (add_generation_prompt) w.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case ChatFamily::kLlama2: {
      size_t first = 0;
      std::string system;
      if (!messages.empty() && messages[0].role == "system")
        system = messages[0].content, first = 1;
      if (!llama2_sys_) w.tmpl(bos_text_);  // Mistral: one BOS for the whole conversation
      // Mistral v0.3 / Nemo templates add the system message to the last message only if a user
      // wrote it; others to the last user message wherever it is.
      size_t system_at = first;
      if (system_at_ == SystemAt::kLastTurnIfUser) {
        system_at = !messages.empty() && messages.back().role == "user" ? messages.size() - 1
                                                                         : std::string::npos;
      } else if (system_at_ == SystemAt::kLastUserTurn) {
        system_at = std::string::npos;
        for (size_t i = first; i < messages.size(); ++i)
          if (messages[i].role == "user") system_at = i;
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        // The turn text c = [system prefix] + content, written as segments.
        auto write_c = [&] {
          if (i == system_at && !system.empty()) {
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
            w.tmpl(inst_open_);
            write_c();
            w.tmpl(inst_close_);
          } else if (m.role == "assistant") {
            w.tmpl(assistant_prefix_);
            w.barrier();
            const size_t from = w.mark();
            write_c();
            if (trims_answers_) w.strip_since(from);
            w.tmpl(eos_text_);
          }
        }
      }
      break;  // neither template writes a generation prompt
    }
    case ChatFamily::kJinja:
      break;
  }
  return w.take();
}

}  // namespace tessera
