// Stop strings over streamed text: finds the first stop string and tells how much text is
// safe to emit now (text that could still become the start of a stop string is held back).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::runtime {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends generated text. Returns the text now safe to emit.
  std::string push(std::string_view text);
  // True once a stop string was seen; the text before it has been returned by push().
  bool stopped() const { return stopped_; }
  // Text held back at the end of generation (no stop string will complete it).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string text_;     // all generated text (before any stop string)
  size_t emitted_ = 0;   // bytes of text_ already returned
  bool stopped_ = false;
};

}  // namespace tessera::runtime
