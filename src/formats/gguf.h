// GGUF (v2, v3) reader over a memory-mapped file.
//
// Every count, length and offset in the file is untrusted: they are bounds- and
// overflow-checked against the file size before any allocation, and a bad file yields a
// kCorruptData Status that names what was wrong and where (never a crash). Well-formed files
// this reader does not handle (v1, big-endian, nested arrays, unknown ggml type ids) yield
// kUnsupported. Tensors must be aligned, inside the file and must not overlap; keys and tensor
// names are unique.
//
//   auto f = gguf::File::open("model.gguf");
//   if (!f) return f.status();
//   uint32_t layers = (*f)->get_u32("llama.block_count").value_or(0);
//   const gguf::TensorInfo* t = (*f)->find_tensor("token_embd.weight");
//   const uint8_t* bytes = (*f)->tensor_data(*t);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "tessera/status.h"

namespace tessera::gguf {

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view value_type_name(ValueType t);

// Block geometry of a ggml type id, including types Tessera cannot compute (Q2_K, IQ*, I8, ...),
// so every tensor of any file can be sized and listed. nullptr for ids ggml never assigned
// (or retired: 4, 5, 31-33, 36-38).
struct GgmlTypeTraits {
  uint32_t id;
  std::string_view name;
  int64_t block_size;   // elements per block
  int64_t block_bytes;  // bytes per block
};
const GgmlTypeTraits* ggml_type_traits(uint32_t ggml_type);

// One metadata value. Strings and array payloads point into the mapped file.
struct Value {
  ValueType type = ValueType::kU8;
  // Scalars (the one matching `type` is set; integers also fill the other integer field when
  // representable).
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  bool b = false;
  std::string_view str;
  // Arrays: element type, length and, for numeric/bool elements, the packed little-endian
  // payload. String arrays are materialised as views.
  ValueType array_type = ValueType::kU8;
  uint64_t array_len = 0;
  const uint8_t* array_data = nullptr;
  std::vector<std::string_view> array_strings;
};

struct KeyValue {
  std::string_view key;
  Value value;
};

struct TensorInfo {
  std::string_view name;
  uint32_t ggml_type = 0;
  std::optional<DType> dtype;   // nullopt when Tessera does not implement this ggml type
  std::vector<int64_t> dims;    // GGUF order: dims[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;          // relative to the start of the tensor data section
  uint64_t nbytes = 0;          // validated: offset + nbytes lies inside the file
  int64_t numel() const;
};

struct OpenOptions {
  // Reject metadata arrays/strings/tensor counts beyond these (defence against absurd values).
  uint64_t max_tensors = 1u << 20;
  uint64_t max_kv = 1u << 20;
  uint64_t max_string_bytes = 64u << 20;
  uint64_t max_array_len = 1u << 26;
};

class File {
 public:
  // mmaps `path` read-only.
  static Expected<std::unique_ptr<File>> open(const std::string& path, const OpenOptions& opt = {});
  // Parses bytes owned by the caller, who keeps them alive (tests, fuzzing).
  static Expected<std::unique_ptr<File>> parse(const uint8_t* data, size_t size,
                                               const OpenOptions& opt = {});
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of tensor data
  size_t file_size() const { return size_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed getters: nullopt when the key is missing or its type does not convert losslessly
  // (any integer type converts to another when in range; f32/f64 convert to double/float).
  std::optional<uint64_t> get_u64(std::string_view key) const;
  std::optional<uint32_t> get_u32(std::string_view key) const;
  std::optional<int64_t> get_i64(std::string_view key) const;
  std::optional<float> get_f32(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  // Arrays: nullopt when missing or of another element type.
  const std::vector<std::string_view>* get_string_array(std::string_view key) const;
  std::optional<std::vector<int32_t>> get_i32_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const TensorInfo& t) const { return base_ + data_offset_ + t.offset; }

  // Keeps the mapping alive for tensors viewing it after the File object is gone.
  std::shared_ptr<void> keepalive() const { return mapping_; }

 private:
  File() = default;
  Status parse_all(const OpenOptions& opt);

  std::shared_ptr<void> mapping_;  // owns the mmap (null for parse())
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
  friend class Parser;
};

}  // namespace tessera::gguf
