// libFuzzer target for the GGUF reader: parse arbitrary bytes and, when they are accepted,
// touch everything the reader promises is valid (every value, every tensor byte), so ASan
// catches any bound the parser forgot.
#include <cstdint>
#include <cstdlib>

#include "formats/gguf.h"

namespace {

using tessera::gguf::File;
using tessera::gguf::ValueType;

// Folds into a volatile sink so the reads are not optimised away.
volatile uint64_t g_sink;

void touch_metadata(const File& f) {
  uint64_t acc = 0;
  for (const auto& kv : f.metadata()) {
    const auto& v = kv.value;
    // find() must return this entry: keys are unique.
    if (f.find(kv.key) != &v) std::abort();
    acc += kv.key.size() + v.str.size() + v.u64 + static_cast<uint64_t>(v.i64) + v.b;
    acc += f.get_u64(kv.key).value_or(0) + f.get_u32(kv.key).value_or(0);
    acc += static_cast<uint64_t>(f.get_i64(kv.key).value_or(0));
    acc += static_cast<uint64_t>(f.get_f32(kv.key).value_or(0) != 0);
    acc += f.get_bool(kv.key).value_or(false);
    if (auto s = f.get_string(kv.key)) {
      for (char c : *s) acc += static_cast<unsigned char>(c);
    }
    if (v.type != ValueType::kArray) continue;
    if (const auto* strs = f.get_string_array(kv.key)) {
      if (strs->size() != v.array_len) std::abort();
      for (auto s : *strs)
        for (char c : s) acc += static_cast<unsigned char>(c);
    } else {
      if (v.array_len && !v.array_data) std::abort();
      if (auto ints = f.get_i32_array(kv.key))
        for (int32_t x : *ints) acc += static_cast<uint32_t>(x);
      if (auto floats = f.get_f32_array(kv.key))
        for (float x : *floats) acc += x != 0;
    }
  }
  g_sink = acc;
}

void touch_tensors(const File& f) {
  uint64_t acc = 0;
  for (const auto& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) std::abort();  // names are unique
    if (t.dims.empty() || t.dims.size() > 4 || t.offset % f.alignment() != 0) std::abort();
    // The reader's promise: the data lies inside the file.
    if (f.data_offset() > f.file_size() || t.offset + t.nbytes > f.file_size() - f.data_offset())
      std::abort();
    acc += static_cast<uint64_t>(t.numel()) + t.ggml_type;
    const uint8_t* d = f.tensor_data(t);
    for (uint64_t i = 0; i < t.nbytes; ++i) acc += d[i];
  }
  g_sink = acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = File::parse(data, size);
  if (!f) {
    if (f.status().message().empty()) std::abort();  // every rejection must say why
    return 0;
  }
  touch_metadata(**f);
  touch_tensors(**f);
  return 0;
}
