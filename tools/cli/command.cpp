#include "command.h"

#include <cerrno>
#include <cstdlib>

#include "formats/file_util.h"

namespace tessera::cli {

static std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

bool register_command(const Command& c) {
  registry().push_back(c);
  return true;
}

const std::vector<Command>& commands() { return registry(); }

Args::Args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
  used_.assign(args_.size(), false);
}

// "--name", or "-n" for one-letter names.
static bool matches(const std::string& a, std::string_view name) {
  if (name.size() == 1) return a.size() == 2 && a[0] == '-' && a[1] == name[0];
  return a.size() == name.size() + 2 && a.rfind("--", 0) == 0 && std::string_view(a).substr(2) == name;
}

bool Args::flag(std::string_view name) {
  bool found = false;
  for (size_t i = 0; i < args_.size(); ++i)
    if (!used_[i] && matches(args_[i], name)) used_[i] = found = true;
  return found;
}

bool Args::value(std::string_view name, std::string* out) {
  auto all = values(name);
  if (all.empty()) return false;
  *out = all.back();
  return true;
}

std::vector<std::string> Args::values(std::string_view name) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < args_.size(); ++i) {
    if (!used_[i] && matches(args_[i], name)) {
      used_[i] = used_[i + 1] = true;
      out.push_back(args_[i + 1]);
      ++i;
    }
  }
  return out;
}

std::vector<std::string> Args::positionals(std::string* error) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    if (args_[i].size() > 1 && args_[i][0] == '-' && !(args_[i][1] >= '0' && args_[i][1] <= '9')) {
      if (error && error->empty()) *error = "unknown or incomplete option " + args_[i];
      continue;
    }
    out.push_back(args_[i]);
  }
  return out;
}

bool parse_int(const std::string& s, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool read_text_file(const std::string& path, std::string* out, std::string* why) {
  auto text = formats::read_small_file(path, kMaxTextFileBytes);
  if (!text) {
    *why = text.status().message();
    return false;
  }
  *out = std::move(*text);
  return true;
}

std::string default_model_path() {
  if (const char* m = std::getenv("TESSERA_MODEL"); m && *m) return m;
  std::string base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = std::string(h) + "/.cache";
  } else {
    base = ".cache";
  }
  return base + "/tessera/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace tessera::cli
