// Jinja lexer: template source -> tokens. Whitespace handling follows jinja2 with trim_blocks
// and lstrip_blocks on, as transformers compiles chat templates.
#include <cerrno>
#include <cstring>

#include "tokenizer/jinja_internal.h"

namespace tessera::jinja {
namespace {

constexpr int kMaxBrackets = 200;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

class Lexer {
 public:
  explicit Lexer(const std::string& s) : s_(s) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous tag's end consumed a newline (or template start)
    while (pos < s_.size()) {
      size_t t = pos;
      while (true) {
        t = s_.find('{', t);
        if (t == std::string::npos || t + 1 >= s_.size()) {
          t = std::string::npos;
          break;
        }
        const char k = s_[t + 1];
        if (k == '{' || k == '%' || k == '#') break;
        ++t;
      }
      std::string text = s_.substr(pos, t == std::string::npos ? std::string::npos : t - pos);
      if (t == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      const char kind = s_[t + 1];
      const char sign = t + 2 < s_.size() && (s_[t + 2] == '-' || s_[t + 2] == '+') ? s_[t + 2] : 0;
      if (sign == '-') {  // jinja2 strips \s: Python's whitespace, Unicode included
        size_t e = text.size();
        while (size_t n = space_before(text, e)) e -= n;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const size_t nl = text.rfind('\n');
        const size_t l = nl == std::string::npos ? 0 : nl + 1;
        if ((l > 0 || line_starting) && l < text.size()) {
          bool ws = true;
          for (size_t i = l; i < text.size(); ++i) ws = ws && is_space(text[i]);
          if (ws) text.resize(l);
        }
      }
      emit_text(std::move(text), pos);
      pos = t + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t e = s_.find("#}", pos);
        if (e == std::string::npos) throw ParseError{"unclosed comment", t};
        pos = finish_tag(e, '#', &line_starting);
        continue;
      }
      toks_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, {}, t});
      pos = lex_tag(pos, kind == '{' ? '}' : '%', &line_starting);
    }
    toks_.push_back({Tok::kEof, {}, s_.size()});
    return std::move(toks_);
  }

 private:
  void emit_text(std::string text, size_t pos) {
    if (!text.empty()) toks_.push_back({Tok::kText, std::move(text), pos});
  }

  // The tag's closing delimiter starts at e (the '%}' / '}}' / '#}', possibly after a '-' or
  // '+' at e - 1 that belongs to it): applies its whitespace control, returns the position
  // after it.
  size_t finish_tag(size_t e, char kind, bool* line_starting) {
    const char before = e > 0 ? s_[e - 1] : 0;
    size_t p = e + 2;
    bool consumed_newline = false;
    if (before == '-') {
      for (size_t n; (n = space_at(s_, p)) != 0; p += n) consumed_newline = s_[p] == '\n';
    } else if (before == '+' && kind != '}') {
      // keep the newline
    } else if (kind != '}' && p < s_.size() && s_[p] == '\n') {  // trim_blocks
      ++p;
      consumed_newline = true;
    }
    *line_starting = consumed_newline;
    return p;
  }

  size_t lex_tag(size_t p, char close, bool* line_starting) {
    int depth = 0;
    std::string brackets;
    while (true) {
      if (depth == 0) {
        // The end delimiter, optionally with its whitespace-control sign.
        size_t e = std::string::npos;
        if (p + 1 < s_.size() && s_[p] == close && s_[p + 1] == '}')
          e = p;
        else if (p + 2 < s_.size() && (s_[p] == '-' || (s_[p] == '+' && close == '%')) &&
                 s_[p + 1] == close && s_[p + 2] == '}')
          e = p + 1;
        if (e != std::string::npos) {
          toks_.push_back({close == '}' ? Tok::kVarEnd : Tok::kBlockEnd, {}, p});
          return finish_tag(e, close, line_starting);
        }
      }
      if (p >= s_.size())
        throw ParseError{close == '}' ? "unexpected end of template, expected '}}'"
                                      : "unexpected end of template, expected '%}'",
                         p};
      const char c = s_[p];
      if (is_space(c)) {
        ++p;
        continue;
      }
      if (c == '\'' || c == '"') {
        p = lex_string(p);
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
        continue;
      }
      if (is_name_start(c)) {
        size_t e = p;
        while (e < s_.size() && is_name_char(s_[e])) ++e;
        toks_.push_back({Tok::kName, s_.substr(p, e - p), p});
        p = e;
        continue;
      }
      static const char* const kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (const char* o : kOps2)
        if (s_.compare(p, 2, o) == 0) op = o;
      if (op.empty() && std::strchr("+-/*%~[](){}><=.:|,;", c)) op = std::string(1, c);
      if (op.empty()) throw ParseError{std::string("unexpected character '") + c + "'", p};
      if (op == "(" || op == "[" || op == "{") {
        brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        if (++depth > kMaxBrackets) throw ParseError{"brackets nested too deeply", p};
      } else if (op == ")" || op == "]" || op == "}") {
        if (brackets.empty()) throw ParseError{"unexpected '" + op + "'", p};
        if (brackets.back() != op[0])
          throw ParseError{"unexpected '" + op + "', expected '" + brackets.back() + "'", p};
        brackets.pop_back();
        --depth;
      }
      toks_.push_back({Tok::kOp, op, p});
      p += op.size();
    }
  }

  // Python-style escapes, as jinja2 decodes string literals ("unicode-escape"); unknown
  // escapes stay as written.
  size_t lex_string(size_t p) {
    const char q = s_[p];
    std::string out;
    size_t i = p + 1;
    auto hex = [&](size_t at, int n, uint32_t* cp) {
      if (at + n > s_.size()) return false;
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        const char h = s_[at + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
        v = v * 16 +
            (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      *cp = v;
      return true;
    };
    while (true) {
      if (i >= s_.size()) throw ParseError{"unterminated string", p};
      const char c = s_[i];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= s_.size()) throw ParseError{"unterminated string", p};
      const char e = s_[i + 1];
      i += 2;
      uint32_t cp = 0;
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(e);
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (!hex(i, n, &cp) || cp > 0x10FFFF)
            throw ParseError{std::string("bad \\") + e + " escape in string", i - 2};
          append_utf8(out, cp);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            cp = e - '0';
            for (int k = 0; k < 2 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k)
              cp = cp * 8 + (s_[i++] - '0');
            append_utf8(out, cp);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    toks_.push_back({Tok::kString, std::move(out), p});
    return i + 1;
  }

  size_t lex_number(size_t p) {
    auto digits = [&](size_t i) {  // (\d+_)*\d+
      size_t e = i;
      while (e < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[e])) ||
                               (s_[e] == '_' && e + 1 < s_.size() &&
                                std::isdigit(static_cast<unsigned char>(s_[e + 1])) && e > i)))
        ++e;
      return e;
    };
    size_t e = digits(p);
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && std::isdigit(static_cast<unsigned char>(s_[x]))) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string num;
    for (size_t i = p; i < e; ++i)
      if (s_[i] != '_') num.push_back(s_[i]);
    Token t{is_float ? Tok::kFloat : Tok::kInt, num, p};
    if (is_float) {
      t.d = std::strtod(num.c_str(), nullptr);
    } else {
      errno = 0;
      t.i = std::strtoll(num.c_str(), nullptr, 10);
      if (errno == ERANGE) throw ParseError{"integer literal out of range", p};
    }
    toks_.push_back(std::move(t));
    return e;
  }

  const std::string& s_;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace tessera::jinja
