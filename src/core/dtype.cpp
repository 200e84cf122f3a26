#include "core/dtype.h"

#include <limits>

namespace tessera {

const DTypeInfo& dtype_info(DType t) {
  static const DTypeInfo kF32{"F32", 1, 4, false}, kF16{"F16", 1, 2, false},
      kBF16{"BF16", 1, 2, false}, kI32{"I32", 1, 4, false}, kQ8_0{"Q8_0", 32, 34, true},
      kQ4_0{"Q4_0", 32, 18, true}, kQ4_1{"Q4_1", 32, 20, true}, kQ5_0{"Q5_0", 32, 22, true},
      kQ5_1{"Q5_1", 32, 24, true}, kQ4_K{"Q4_K", 256, 144, true}, kQ5_K{"Q5_K", 256, 176, true},
      kQ6_K{"Q6_K", 256, 210, true};
  switch (t) {
    case DType::kF32: return kF32;
    case DType::kF16: return kF16;
    case DType::kBF16: return kBF16;
    case DType::kI32: return kI32;
    case DType::kQ8_0: return kQ8_0;
    case DType::kQ4_0: return kQ4_0;
    case DType::kQ4_1: return kQ4_1;
    case DType::kQ5_0: return kQ5_0;
    case DType::kQ5_1: return kQ5_1;
    case DType::kQ4_K: return kQ4_K;
    case DType::kQ5_K: return kQ5_K;
    case DType::kQ6_K: return kQ6_K;
  }
  return kF32;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes) {
    std::string_view n = dtype_name(t);
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size(); ++i) {
      char a = n[i], b = name[i];
      if (b >= 'a' && b <= 'z') b = static_cast<char>(b - 'a' + 'A');
      if (a != b) eq = false;
    }
    if (eq) return t;
  }
  return std::nullopt;
}

std::optional<int64_t> dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n < 0 || n % info.block_size != 0) return std::nullopt;
  int64_t blocks = n / info.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / info.block_bytes) return std::nullopt;
  return blocks * info.block_bytes;
}

namespace {
struct GgmlName {
  uint32_t id;
  std::string_view name;
};
constexpr GgmlName kGgmlNames[] = {
    {0, "F32"},     {1, "F16"},      {2, "Q4_0"},     {3, "Q4_1"},    {6, "Q5_0"},
    {7, "Q5_1"},    {8, "Q8_0"},     {9, "Q8_1"},     {10, "Q2_K"},   {11, "Q3_K"},
    {12, "Q4_K"},   {13, "Q5_K"},    {14, "Q6_K"},    {15, "Q8_K"},   {16, "IQ2_XXS"},
    {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"},   {20, "IQ4_NL"}, {21, "IQ3_S"},
    {22, "IQ2_S"},  {23, "IQ4_XS"},  {24, "I8"},      {25, "I16"},    {26, "I32"},
    {27, "I64"},    {28, "F64"},     {29, "IQ1_M"},   {30, "BF16"},   {34, "TQ1_0"},
    {35, "TQ2_0"},  {39, "MXFP4"},
};
}  // namespace

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 3: return DType::kQ4_1;
    case 6: return DType::kQ5_0;
    case 7: return DType::kQ5_1;
    case 8: return DType::kQ8_0;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 26: return DType::kI32;
    case 30: return DType::kBF16;
    default: return std::nullopt;
  }
}

uint32_t dtype_to_ggml(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kBF16: return 30;
    case DType::kI32: return 26;
    case DType::kQ8_0: return 8;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ5_0: return 6;
    case DType::kQ5_1: return 7;
    case DType::kQ4_K: return 12;
    case DType::kQ5_K: return 13;
    case DType::kQ6_K: return 14;
  }
  return 0;
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  for (const auto& g : kGgmlNames)
    if (g.id == ggml_type) return g.name;
  return "unknown ggml type";
}

}  // namespace tessera
