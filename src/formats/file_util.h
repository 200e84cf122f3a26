// Small helpers shared by the model-file readers: read-only memory maps, bounded whole-file
// reads of small text files (JSON), and safe quoting of file-controlled text in messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera::formats {

struct MappedFile {
  std::shared_ptr<void> mapping;  // munmaps when the last reference goes
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// mmaps a regular, non-empty file read-only. kNotFound when it does not exist, kIo otherwise.
Expected<MappedFile> map_file(const std::string& path);

// Reads a whole regular file of at most max_bytes (kCorruptData naming the limit when larger).
Expected<std::string> read_small_file(const std::string& path, size_t max_bytes);

// File-controlled text for messages: printable ASCII only (other bytes as \xNN) and at most
// max_chars, so a hostile name can neither flood a log nor inject terminal escapes.
std::string printable(std::string_view s, size_t max_chars = 96);

// Depth of [ and { nesting of JSON text, ignoring brackets inside strings. Checked before
// parsing so absurd nesting is rejected in one linear pass without allocation.
int json_nesting_depth(std::string_view text);

}  // namespace tessera::formats
