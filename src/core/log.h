// Minimal leveled logging to stderr. TESSERA_LOG=debug|info|warn|error sets the threshold.
#pragma once

#include <string_view>

namespace tessera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void log_set_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_message(LogLevel level, std::string_view message);

inline void log_info(std::string_view m) { log_message(LogLevel::kInfo, m); }
inline void log_warn(std::string_view m) { log_message(LogLevel::kWarn, m); }
inline void log_debug(std::string_view m) { log_message(LogLevel::kDebug, m); }

}  // namespace tessera
