#include "runtime/llm/stop_matcher.h"

#include <algorithm>

namespace tessera::runtime {

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  const size_t old_size = text_.size();
  text_.append(text);
  // A stop string ending in the new text starts at most (len - 1) bytes before it.
  size_t first_hit = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    const size_t p = text_.find(s, from);
    if (p != std::string::npos) first_hit = std::min(first_hit, p);
  }
  if (first_hit != std::string::npos) {
    stopped_ = true;
    text_.resize(first_hit);
    std::string out = text_.substr(std::min(emitted_, text_.size()));
    emitted_ = text_.size();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    for (size_t len = std::min(s.size() - 1, text_.size()); len > hold; --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  const size_t safe = text_.size() - hold;
  std::string out;
  if (safe > emitted_) {
    out = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
  }
  return out;
}

std::string StopMatcher::flush() {
  std::string out = text_.substr(std::min(emitted_, text_.size()));
  emitted_ = text_.size();
  return out;
}

}  // namespace tessera::runtime
