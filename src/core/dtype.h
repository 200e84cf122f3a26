// Element types, including GGML block-quantized weight formats.
//
// A quantized type packs `block_size` elements into `block_bytes` bytes; a row of n elements
// (n a multiple of block_size) takes n / block_size * block_bytes bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kI32,
                                       DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                       DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

struct DTypeInfo {
  std::string_view name;
  int64_t block_size;   // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
  bool quantized;
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool dtype_is_quantized(DType t) { return dtype_info(t).quantized; }
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes for a row of n elements, or nullopt when n is not a multiple of the block size or the
// byte count would overflow int64.
std::optional<int64_t> dtype_row_bytes(DType t, int64_t n);

// GGML's on-disk type ids (ggml_type). Only the ones Tessera reads map to a DType.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
uint32_t dtype_to_ggml(DType t);
// Name of any ggml type id ("Q2_K", "IQ4_XS", ...) for messages, or "type <id>".
std::string_view ggml_type_name(uint32_t ggml_type);

}  // namespace tessera
