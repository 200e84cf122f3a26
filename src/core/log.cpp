#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tessera {
namespace {
LogLevel initial_level() {
  const char* env = std::getenv("TESSERA_LOG");
  if (!env) return LogLevel::kWarn;
  if (!std::strcmp(env, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(env, "info")) return LogLevel::kInfo;
  if (!std::strcmp(env, "error")) return LogLevel::kError;
  return LogLevel::kWarn;
}
std::atomic<int> g_level{static_cast<int>(initial_level())};
}  // namespace

void log_set_level(LogLevel level) { g_level = static_cast<int>(level); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void log_message(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "[tessera %s] %.*s\n", kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace tessera
