// Test-only GGUF writer: builds well-formed files byte by byte, with knobs to break any field.
// Its tensor sizes come from its own small table (not the reader's) so it is an independent
// oracle for the reader's size computation.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::gguf::gguf_testing {

// Little-endian byte writer.
struct Writer {
  std::vector<uint8_t> bytes;

  Writer& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  template <class T>
  Writer& le(T v) {
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    for (size_t i = 0; i < sizeof v; ++i) bytes.push_back(static_cast<uint8_t>(u >> (8 * i)));
    return *this;
  }
  Writer& u8(uint8_t v) { return le(v); }
  Writer& u32(uint32_t v) { return le(v); }
  Writer& u64(uint64_t v) { return le(v); }
  Writer& str(std::string_view s) { return u64(s.size()).raw(s.data(), s.size()); }
  Writer& pad(uint64_t align) {
    while (bytes.size() % align) bytes.push_back(0);
    return *this;
  }
};

// Value type ids as written on disk (kept separate from the reader's enum on purpose).
enum T : uint32_t {
  kU8 = 0,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kStr,
  kArr,
  kU64,
  kI64,
  kF64
};

// ggml ids and block geometry for the types the tests use.
struct TestType {
  uint32_t id;
  uint64_t block, bytes;
};
inline constexpr TestType kTF32{0, 1, 4}, kTF16{1, 1, 2}, kTQ4_1{3, 32, 20}, kTQ8_0{8, 32, 34},
    kTQ2_K{10, 256, 84}, kTI8{24, 1, 1}, kTIQ4_XS{23, 256, 136}, kTBF16{30, 1, 2};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
  TestType type;
  std::optional<uint64_t> offset;  // default: packed, aligned after the previous tensor
  uint64_t nbytes() const {
    uint64_t n = dims.empty() ? 0 : dims[0] / type.block * type.bytes;
    for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
    return n;
  }
};

class Builder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // used for layout; add a general.alignment kv to make it effective
  std::optional<uint64_t> tensor_count, kv_count;  // override the true counts
  std::vector<std::pair<std::string, std::function<void(Writer&)>>> kvs;  // key -> type+payload
  std::vector<TensorSpec> tensors;

  Builder& kv(std::string key, uint32_t type, std::function<void(Writer&)> payload) {
    kvs.emplace_back(std::move(key), [type, payload](Writer& w) {
      w.u32(type);
      payload(w);
    });
    return *this;
  }
  Builder& kv_u32(std::string key, uint32_t v) {
    return kv(std::move(key), kU32, [v](Writer& w) { w.u32(v); });
  }
  Builder& kv_str(std::string key, std::string v) {
    return kv(std::move(key), kStr, [v](Writer& w) { w.str(v); });
  }
  Builder& tensor(std::string name, std::vector<uint64_t> dims, TestType type) {
    tensors.push_back({std::move(name), std::move(dims), type, std::nullopt});
    return *this;
  }

  // Offset of each tensor's data relative to the data section.
  std::vector<uint64_t> offsets() const {
    std::vector<uint64_t> out;
    uint64_t at = 0;
    for (const auto& t : tensors) {
      at = (at + alignment - 1) / alignment * alignment;
      out.push_back(t.offset.value_or(at));
      at = out.back() + t.nbytes();
    }
    return out;
  }

  // Tensor data bytes are (tensor index * 31 + byte index) mod 251: never all zero, and
  // distinct between tensors so a wrong offset is caught.
  static uint8_t pattern(size_t tensor, uint64_t i) {
    return static_cast<uint8_t>((tensor * 31 + i) % 251);
  }

  std::vector<uint8_t> build() const {
    Writer w;
    w.raw("GGUF", 4).u32(version);
    w.u64(tensor_count.value_or(tensors.size())).u64(kv_count.value_or(kvs.size()));
    for (const auto& [key, payload] : kvs) {
      w.str(key);
      payload(w);
    }
    const auto offs = offsets();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      w.str(t.name).u32(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) w.u64(d);
      w.u32(t.type.id).u64(offs[i]);
    }
    w.pad(alignment);
    const size_t data = w.bytes.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const uint64_t n = tensors[i].nbytes();
      if (n > (1u << 20) || offs[i] > (1u << 20)) continue;  // absurd: header only
      if (w.bytes.size() < data + offs[i]) w.bytes.resize(data + offs[i], 0);
      for (uint64_t b = 0; b < n; ++b) {
        if (data + offs[i] + b < w.bytes.size())
          w.bytes[data + offs[i] + b] = pattern(i, b);
        else
          w.bytes.push_back(pattern(i, b));
      }
    }
    return w.bytes;
  }
};

}  // namespace tessera::gguf::gguf_testing
