// libFuzzer target for the safetensors reader: parse arbitrary bytes as a file and as an index
// (model.safetensors.index.json text). When a file is accepted, check the promises the reader
// makes (unique names, tensors tiling the data section, sizes consistent with shapes) and read
// every tensor byte, so ASan catches any bound the parser forgot.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "formats/safetensors.h"

namespace {

using tessera::safetensors::File;

volatile uint64_t g_sink;

void touch(const File& f) {
  uint64_t acc = 0, expect = 0;
  for (const auto& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) std::abort();  // names are unique
    if (t.begin != expect || t.end < t.begin) std::abort();
    expect = t.end;
    if (static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(t.element_bytes) != t.nbytes())
      std::abort();
    const uint8_t* d = f.tensor_data(t);
    for (uint64_t i = 0; i < t.nbytes(); ++i) acc += d[i];
  }
  if (f.data_offset() + expect != f.file_size()) std::abort();
  for (const auto& [k, v] : f.metadata()) {
    if (f.find_metadata(k) != std::string_view(v)) std::abort();
    acc += k.size() + v.size();
  }
  g_sink = acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = File::parse(data, size);
  if (f) {
    touch(**f);
  } else if (f.status().message().empty()) {
    std::abort();  // every rejection must say why
  }
  auto idx = tessera::safetensors::parse_index(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (idx) {
    for (const auto& [name, shard] : idx->weight_map)
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") std::abort();
  } else if (idx.status().message().empty()) {
    std::abort();
  }
  return 0;
}
