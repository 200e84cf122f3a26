// GGUF reader: round trips of every value type, layout rules, hostile files, the real model.
#include "formats/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "formats/gguf_builder.h"

namespace tessera::gguf {
namespace {

using gguf_testing::Builder;
using gguf_testing::Writer;
namespace tt = gguf_testing;

std::unique_ptr<File> parse_ok(const std::vector<uint8_t>& bytes) {
  auto f = File::parse(bytes.data(), bytes.size());
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f) return nullptr;
  return std::move(f).value();
}

// Asserts the file is rejected as corrupt with a message containing `substr`.
void expect_corrupt(const std::vector<uint8_t>& bytes, const std::string& substr,
                    const OpenOptions& opt = {}) {
  auto f = File::parse(bytes.data(), bytes.size(), opt);
  ASSERT_FALSE(f.ok()) << "accepted a file that should fail with: " << substr;
  EXPECT_EQ(f.status().code(), ErrorCode::kCorruptData) << f.status().to_string();
  EXPECT_NE(f.status().message().find(substr), std::string::npos)
      << "message: " << f.status().message() << "\nexpected substring: " << substr;
}

void expect_code(const std::vector<uint8_t>& bytes, ErrorCode code, const std::string& substr) {
  auto f = File::parse(bytes.data(), bytes.size());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  EXPECT_NE(f.status().message().find(substr), std::string::npos) << f.status().message();
}

// A small valid file used as the base of most corruptions.
Builder valid_builder() {
  Builder b;
  b.kv_str("general.architecture", "llama").kv_u32("llama.block_count", 2);
  b.tensor("tok", {64, 3}, tt::kTQ8_0).tensor("norm", {5}, tt::kTF32);
  return b;
}

TEST(gguf, MinimalFileWithNothingInIt) {
  Builder b;
  auto f = parse_ok(b.build());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());
}

TEST(gguf, EveryScalarTypeRoundTrips) {
  Builder b;
  b.kv("u8", tt::kU8, [](Writer& w) { w.le<uint8_t>(255); });
  b.kv("i8", tt::kI8, [](Writer& w) { w.le<int8_t>(-128); });
  b.kv("u16", tt::kU16, [](Writer& w) { w.le<uint16_t>(65535); });
  b.kv("i16", tt::kI16, [](Writer& w) { w.le<int16_t>(-32768); });
  b.kv("u32", tt::kU32, [](Writer& w) { w.le<uint32_t>(4000000000u); });
  b.kv("i32", tt::kI32, [](Writer& w) { w.le<int32_t>(-2000000000); });
  b.kv("f32", tt::kF32, [](Writer& w) { w.le<float>(-1.25e-5f); });
  b.kv("bool_t", tt::kBool, [](Writer& w) { w.u8(1); });
  b.kv("bool_f", tt::kBool, [](Writer& w) { w.u8(0); });
  b.kv_str("str", "h\xc3\xa9llo\n{{ x }}");
  b.kv_str("empty_str", "");
  b.kv("u64", tt::kU64, [](Writer& w) { w.le<uint64_t>(~uint64_t{0}); });
  b.kv("i64", tt::kI64, [](Writer& w) { w.le<int64_t>(std::numeric_limits<int64_t>::min()); });
  b.kv("f64", tt::kF64, [](Writer& w) { w.le<double>(3.141592653589793); });
  auto f = parse_ok(b.build());
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->metadata()[0].key, "u8");  // file order is kept

  EXPECT_EQ(f->find("u8")->type, ValueType::kU8);
  EXPECT_EQ(f->get_u32("u8"), 255u);
  EXPECT_EQ(f->get_i64("i8"), -128);
  EXPECT_EQ(f->get_u32("u16"), 65535u);
  EXPECT_EQ(f->get_i64("i16"), -32768);
  EXPECT_EQ(f->get_u32("u32"), 4000000000u);
  EXPECT_EQ(f->get_i64("i32"), -2000000000);
  EXPECT_EQ(f->get_f32("f32"), -1.25e-5f);
  EXPECT_EQ(f->get_bool("bool_t"), true);
  EXPECT_EQ(f->get_bool("bool_f"), false);
  EXPECT_EQ(f->get_string("str"), "h\xc3\xa9llo\n{{ x }}");
  EXPECT_EQ(f->get_string("empty_str"), "");
  EXPECT_EQ(f->get_u64("u64"), ~uint64_t{0});
  EXPECT_EQ(f->get_i64("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_FLOAT_EQ(*f->get_f32("f64"), 3.14159265f);
  EXPECT_DOUBLE_EQ(f->find("f64")->f64, 3.141592653589793);

  // Integer conversions succeed only in range.
  EXPECT_EQ(f->get_u64("u8"), 255u);
  EXPECT_EQ(f->get_i64("u32"), 4000000000);
  EXPECT_FALSE(f->get_u32("i8"));     // negative
  EXPECT_FALSE(f->get_u64("i64"));    // negative
  EXPECT_FALSE(f->get_i64("u64"));    // above int64 max
  EXPECT_FALSE(f->get_u32("u64"));    // above uint32 max
  EXPECT_EQ(f->find("u64")->i64, 0);  // not representable, left unset
  EXPECT_EQ(f->find("i16")->u64, 0u);
  EXPECT_EQ(f->find("u16")->i64, 65535);
  // Type mismatches and missing keys.
  EXPECT_FALSE(f->get_f32("u32"));
  EXPECT_FALSE(f->get_bool("u8"));
  EXPECT_FALSE(f->get_string("u8"));
  EXPECT_FALSE(f->get_u32("str"));
  EXPECT_FALSE(f->get_u32("f32"));
  EXPECT_FALSE(f->get_u32("missing"));
  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_EQ(f->get_string_array("str"), nullptr);
  EXPECT_FALSE(f->get_i32_array("u32"));
}

template <class E>
std::function<void(Writer&)> array_of(uint32_t et, std::vector<E> v) {
  return [et, v](Writer& w) {
    w.u32(et).u64(v.size());
    for (E x : v) w.le<E>(x);
  };
}

TEST(gguf, ArraysOfEveryElementType) {
  Builder b;
  b.kv("a_u8", tt::kArr, array_of<uint8_t>(tt::kU8, {0, 7, 255}));
  b.kv("a_i8", tt::kArr, array_of<int8_t>(tt::kI8, {-128, 1, 127}));
  b.kv("a_u16", tt::kArr, array_of<uint16_t>(tt::kU16, {65535, 3}));
  b.kv("a_i16", tt::kArr, array_of<int16_t>(tt::kI16, {-32768, 9}));
  b.kv("a_u32", tt::kArr, array_of<uint32_t>(tt::kU32, {2147483647u, 5}));
  b.kv("a_u32_big", tt::kArr, array_of<uint32_t>(tt::kU32, {1, 2147483648u}));
  b.kv("a_i32", tt::kArr, array_of<int32_t>(tt::kI32, {-2147483647 - 1, 2147483647, 0}));
  b.kv("a_u64", tt::kArr, array_of<uint64_t>(tt::kU64, {11, 12}));
  b.kv("a_i64", tt::kArr, array_of<int64_t>(tt::kI64, {-3, 4}));
  b.kv("a_i64_big", tt::kArr, array_of<int64_t>(tt::kI64, {-3, int64_t{1} << 40}));
  b.kv("a_f32", tt::kArr, array_of<float>(tt::kF32, {0.5f, -2.75f, 1e30f}));
  b.kv("a_f64", tt::kArr, array_of<double>(tt::kF64, {0.25, -8.0}));
  b.kv("a_bool", tt::kArr, array_of<uint8_t>(tt::kBool, {1, 0, 1}));
  b.kv("a_empty", tt::kArr, array_of<int32_t>(tt::kI32, {}));
  b.kv("a_str", tt::kArr, [](Writer& w) { w.u32(tt::kStr).u64(3).str("a").str("").str("<s>"); });
  auto f = parse_ok(b.build());
  ASSERT_TRUE(f);

  using V = std::vector<int32_t>;
  EXPECT_EQ(f->get_i32_array("a_u8"), (V{0, 7, 255}));
  EXPECT_EQ(f->get_i32_array("a_i8"), (V{-128, 1, 127}));
  EXPECT_EQ(f->get_i32_array("a_u16"), (V{65535, 3}));
  EXPECT_EQ(f->get_i32_array("a_i16"), (V{-32768, 9}));
  EXPECT_EQ(f->get_i32_array("a_u32"), (V{2147483647, 5}));
  EXPECT_FALSE(f->get_i32_array("a_u32_big"));  // 2^31 does not fit int32
  EXPECT_EQ(f->get_i32_array("a_i32"), (V{-2147483647 - 1, 2147483647, 0}));
  EXPECT_EQ(f->get_i32_array("a_u64"), (V{11, 12}));
  EXPECT_EQ(f->get_i32_array("a_i64"), (V{-3, 4}));
  EXPECT_FALSE(f->get_i32_array("a_i64_big"));
  EXPECT_EQ(f->get_i32_array("a_empty"), V{});
  EXPECT_FALSE(f->get_i32_array("a_f32"));
  EXPECT_FALSE(f->get_i32_array("a_bool"));
  EXPECT_EQ(f->get_f32_array("a_f32"), (std::vector<float>{0.5f, -2.75f, 1e30f}));
  EXPECT_EQ(f->get_f32_array("a_f64"), (std::vector<float>{0.25f, -8.0f}));
  EXPECT_FALSE(f->get_f32_array("a_i32"));

  const Value* bools = f->find("a_bool");
  ASSERT_TRUE(bools);
  EXPECT_EQ(bools->type, ValueType::kArray);
  EXPECT_EQ(bools->array_type, ValueType::kBool);
  ASSERT_EQ(bools->array_len, 3u);
  EXPECT_EQ(bools->array_data[0], 1);
  EXPECT_EQ(bools->array_data[1], 0);

  const auto* strs = f->get_string_array("a_str");
  ASSERT_TRUE(strs);
  EXPECT_EQ(*strs, (std::vector<std::string_view>{"a", "", "<s>"}));
  EXPECT_EQ(f->find("a_str")->array_len, 3u);
  EXPECT_EQ(f->get_string_array("a_i32"), nullptr);
}

TEST(gguf, VersionTwoAndThreeReadTheSame) {
  for (uint32_t version : {2u, 3u}) {
    Builder b = valid_builder();
    b.version = version;
    auto f = parse_ok(b.build());
    ASSERT_TRUE(f);
    EXPECT_EQ(f->version(), version);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_u32("llama.block_count"), 2u);
    EXPECT_EQ(f->tensors().size(), 2u);
  }
}

TEST(gguf, TensorsSizesTypesAndData) {
  Builder b;
  b.tensor("q8", {64, 3}, tt::kTQ8_0)
      .tensor("f32", {7, 1, 2, 3}, tt::kTF32)
      .tensor("q2k", {512}, tt::kTQ2_K)
      .tensor("i8", {3, 5}, tt::kTI8)
      .tensor("iq4", {256, 2}, tt::kTIQ4_XS)
      .tensor("bf16", {9}, tt::kTBF16)
      .tensor("empty", {32, 0}, tt::kTQ4_1);
  const auto bytes = b.build();
  auto f = parse_ok(bytes);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->tensors().size(), 7u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  const auto offs = b.offsets();
  for (size_t i = 0; i < b.tensors.size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    SCOPED_TRACE(b.tensors[i].name);
    EXPECT_EQ(t.name, b.tensors[i].name);
    EXPECT_EQ(t.ggml_type, b.tensors[i].type.id);
    EXPECT_EQ(t.nbytes, b.tensors[i].nbytes());
    EXPECT_EQ(t.offset, offs[i]);
    ASSERT_EQ(t.dims.size(), b.tensors[i].dims.size());
    for (size_t d = 0; d < t.dims.size(); ++d)
      EXPECT_EQ(static_cast<uint64_t>(t.dims[d]), b.tensors[i].dims[d]);
    EXPECT_EQ(f->find_tensor(t.name), &t);
    const uint8_t* data = f->tensor_data(t);
    EXPECT_EQ(data, bytes.data() + f->data_offset() + offs[i]);
    for (uint64_t k = 0; k < t.nbytes; ++k) ASSERT_EQ(data[k], Builder::pattern(i, k));
  }
  EXPECT_EQ(f->tensors()[0].dtype, DType::kQ8_0);
  EXPECT_EQ(f->tensors()[0].numel(), 192);
  EXPECT_EQ(f->tensors()[1].dtype, DType::kF32);
  EXPECT_EQ(f->tensors()[1].numel(), 42);
  EXPECT_EQ(f->tensors()[2].dtype, std::nullopt);  // Q2_K: listed, not computable
  EXPECT_EQ(f->tensors()[3].dtype, std::nullopt);  // I8
  EXPECT_EQ(f->tensors()[5].dtype, DType::kBF16);
  EXPECT_EQ(f->tensors()[6].numel(), 0);
  EXPECT_EQ(f->tensors()[6].nbytes, 0u);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

// Found by fuzzing: an empty tensor may carry dims whose product (before the zero) overflows.
TEST(gguf, EmptyTensorWithHugeDims) {
  Builder b;
  b.tensor("e", {32, uint64_t{1} << 40, uint64_t{1} << 40, 0}, tt::kTQ8_0);
  auto f = parse_ok(b.build());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->tensors()[0].numel(), 0);
  EXPECT_EQ(f->tensors()[0].nbytes, 0u);
}

TEST(gguf, CustomAlignment) {
  for (uint32_t align : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(align);
    Builder b = valid_builder();
    b.alignment = align;
    b.kv_u32("general.alignment", align);
    const auto bytes = b.build();
    auto f = parse_ok(bytes);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->data_offset() % align, 0u);
    const TensorInfo* norm = f->find_tensor("norm");
    ASSERT_TRUE(norm);
    EXPECT_EQ(norm->offset % align, 0u);
    EXPECT_EQ(f->tensor_data(*norm)[0], Builder::pattern(1, 0));
  }
}

TEST(gguf, TypeTableAgreesWithCoreDTypes) {
  for (DType t : kAllDTypes) {
    const GgmlTypeTraits* g = ggml_type_traits(dtype_to_ggml(t));
    ASSERT_TRUE(g) << dtype_name(t);
    EXPECT_EQ(g->name, dtype_name(t));
    EXPECT_EQ(g->block_size, dtype_info(t).block_size);
    EXPECT_EQ(g->block_bytes, dtype_info(t).block_bytes);
  }
  EXPECT_EQ(ggml_type_traits(4), nullptr);  // retired Q4_2
  EXPECT_EQ(ggml_type_traits(1000), nullptr);
  EXPECT_EQ(ggml_type_traits(10)->block_bytes, 84);
}

TEST(gguf, OpenMapsAFile) {
  const auto bytes = valid_builder().build();
  const std::string path =
      ::testing::TempDir() + "gguf_open_test_" + std::to_string(::getpid()) + ".gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->file_size(), bytes.size());
  EXPECT_EQ((*f)->tensors().size(), 2u);
  auto keep = (*f)->keepalive();
  EXPECT_TRUE(keep);
  std::filesystem::remove(path);

  auto missing = File::open(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

TEST(gguf, UnsupportedButWellFormed) {
  Builder v1;
  v1.version = 1;
  expect_code(v1.build(), ErrorCode::kUnsupported, "version 1 is not supported");
  Builder v4;
  v4.version = 4;
  expect_code(v4.build(), ErrorCode::kUnsupported, "version 4");
  Builder big_endian;
  big_endian.version = 0x03000000;
  expect_code(big_endian.build(), ErrorCode::kUnsupported, "big-endian");
  Builder nested;
  nested.kv("n", tt::kArr, [](Writer& w) { w.u32(tt::kArr).u64(1).u32(tt::kU8).u64(1).u8(1); });
  expect_code(nested.build(), ErrorCode::kUnsupported, "nested arrays");
  Builder unknown_type;
  unknown_type.tensor("t", {4}, tt::TestType{99, 1, 1});
  expect_code(unknown_type.build(), ErrorCode::kUnsupported, "unknown ggml type 99");
}

// ---- corruptions: each must be kCorruptData with a message naming the problem ----

TEST(gguf_corrupt, BadMagic) {
  auto bytes = valid_builder().build();
  bytes[0] = 'X';
  expect_corrupt(bytes, "bad magic 'XGUF' at offset 0");
}

TEST(gguf_corrupt, TooSmallForMagic) { expect_corrupt({'G', 'G'}, "too small"); }

TEST(gguf_corrupt, TruncatedHeader) {
  auto bytes = valid_builder().build();
  bytes.resize(12);
  expect_corrupt(bytes, "tensor_count truncated: needs 8 bytes at offset 8");
}

TEST(gguf_corrupt, VersionZero) {
  Builder b;
  b.version = 0;
  expect_corrupt(b.build(), "invalid GGUF version 0");
}

TEST(gguf_corrupt, AbsurdKvCount) {
  Builder b = valid_builder();
  b.kv_count = uint64_t{1} << 19;  // under the limit, but the file cannot hold that many
  expect_corrupt(b.build(), "metadata_kv_count 524288 at offset 16 cannot fit");
  b.kv_count = ~uint64_t{0};
  expect_corrupt(b.build(), "exceeds the limit");
}

TEST(gguf_corrupt, AbsurdTensorCount) {
  Builder b = valid_builder();
  b.tensor_count = 1000;
  expect_corrupt(b.build(), "tensor_count 1000 at offset 8 cannot fit");
  b.tensor_count = 12;  // 12 * 32 bytes fit after the header, not after the metadata
  expect_corrupt(b.build(), "bytes left after the metadata");
}

TEST(gguf_corrupt, HugeKeyLength) {
  Writer w;
  w.raw("GGUF", 4).u32(3).u64(0).u64(1).u64(~uint64_t{0} - 3).u32(tt::kU8).u8(0);
  expect_corrupt(w.bytes, "key length 18446744073709551612 at offset 24");
}

TEST(gguf_corrupt, StringOverTheConfiguredLimit) {
  Builder b;
  b.kv_str("k", std::string(100, 'x'));
  OpenOptions opt;
  opt.max_string_bytes = 64;
  expect_corrupt(b.build(), "metadata key 'k' at offset 24: string value length 100", opt);
}

TEST(gguf_corrupt, StringPastEndOfFile) {
  Builder b;
  b.kv("k", tt::kStr, [](Writer& w) { w.u64(1000).raw("abc", 3); });
  expect_corrupt(b.build(), "string value length 1000 at offset 37 exceeds the");
}

TEST(gguf_corrupt, UnknownValueType) {
  Builder b;
  b.kv("k", 13, [](Writer& w) { w.u32(0); });
  expect_corrupt(b.build(), "unknown value type 13 at offset 33");
}

TEST(gguf_corrupt, UnknownArrayElementType) {
  Builder b;
  b.kv("k", tt::kArr, [](Writer& w) { w.u32(77).u64(0); });
  expect_corrupt(b.build(), "unknown array element type 77");
}

TEST(gguf_corrupt, ArrayLongerThanFile) {
  Builder b;
  b.kv("k", tt::kArr, [](Writer& w) { w.u32(tt::kF64).u64(uint64_t{1} << 24).u64(0); });
  expect_corrupt(b.build(), "array of 16777216 f64 at offset 41 needs more than");
  Builder s;
  s.kv("k", tt::kArr, [](Writer& w) { w.u32(tt::kStr).u64(uint64_t{1} << 24).str("a"); });
  expect_corrupt(s.build(), "array of 16777216 strings");
  Builder limit;
  limit.kv("k", tt::kArr, [](Writer& w) { w.u32(tt::kU8).u64(~uint64_t{0}); });
  expect_corrupt(limit.build(), "array length 18446744073709551615 at offset 41 exceeds the limit");
}

TEST(gguf_corrupt, DuplicateKey) {
  Builder b = valid_builder();
  b.kv_u32("llama.block_count", 3);
  expect_corrupt(b.build(), "duplicate key 'llama.block_count'");
}

TEST(gguf_corrupt, AlignmentWrongTypeOrNotPowerOfTwo) {
  Builder t = valid_builder();
  t.kv("general.alignment", tt::kU64, [](Writer& w) { w.u64(32); });
  expect_corrupt(t.build(), "'general.alignment': must be u32, got u64");
  for (uint32_t bad : {0u, 3u, 48u}) {
    Builder b = valid_builder();
    b.kv_u32("general.alignment", bad);
    expect_corrupt(b.build(), "value " + std::to_string(bad) + " is not a nonzero power of two");
  }
}

TEST(gguf_corrupt, DimensionCount) {
  Builder b;
  b.tensor("t5", {1, 1, 1, 1, 1}, tt::kTF32);
  expect_corrupt(b.build(),
                 "tensor 't5' (info at offset 24): n_dims 5 at offset 34 is outside 1..4");
  Builder z;
  z.tensor("t0", {}, tt::kTF32);
  expect_corrupt(z.build(), "n_dims 0");
}

TEST(gguf_corrupt, NegativeDim) {
  Builder b;
  b.tensor("t", {4, ~uint64_t{0}}, tt::kTF32);
  expect_corrupt(b.build(), "dim 1 = 18446744073709551615 at offset 45 is negative");
}

TEST(gguf_corrupt, ElementCountOverflow) {
  Builder b;
  b.tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, tt::kTF32);
  expect_corrupt(b.build(), "element count overflows int64");
  Builder r;
  r.tensor("t", {uint64_t{1} << 62}, tt::kTF32);  // numel fits, bytes do not
  expect_corrupt(r.build(), "byte count overflows int64");
}

TEST(gguf_corrupt, InnermostDimNotAMultipleOfTheBlock) {
  Builder b;
  b.tensor("q", {33, 2}, tt::kTQ8_0);
  expect_corrupt(b.build(),
                 "tensor 'q' (info at offset 24): innermost dim 33 is not a multiple "
                 "of the Q8_0 block size 32");
}

TEST(gguf_corrupt, MisalignedOffset) {
  Builder b = valid_builder();
  b.tensors[1].offset = 8 * 34 + 4;
  expect_corrupt(b.build(), "data offset 276 at offset");
  expect_corrupt(b.build(), "is not a multiple of the alignment 32");
}

TEST(gguf_corrupt, DataPastEndOfFile) {
  auto bytes = valid_builder().build();
  bytes.resize(bytes.size() - 1);
  expect_corrupt(bytes, "tensor 'norm' data [offset 224, 20 bytes] extends past end of file");
}

TEST(gguf_corrupt, OffsetThatWouldOverflow) {
  Builder b = valid_builder();
  b.tensors[1].offset = ~uint64_t{0} - 31;  // aligned, and offset + nbytes wraps around
  expect_corrupt(b.build(), "[offset 18446744073709551584, 20 bytes] extends past end of file");
}

TEST(gguf_corrupt, OverlappingTensors) {
  Builder b = valid_builder();
  b.tensors[1].offset = 192;  // inside 'tok' [0, 204)
  expect_corrupt(b.build(),
                 "tensors 'tok' [offset 0, 204 bytes] and 'norm' [offset 192, 20 "
                 "bytes] overlap");
}

TEST(gguf_corrupt, DuplicateTensorName) {
  Builder b = valid_builder();
  b.tensor("tok", {5}, tt::kTF32);
  expect_corrupt(b.build(), "duplicate tensor name 'tok'");
}

TEST(gguf_corrupt, DataSectionPastEndWithOnlyEmptyTensors) {
  Builder b;
  b.tensor("e", {0}, tt::kTF32);
  auto bytes = b.build();
  bytes.resize(bytes.size() - 1);  // cuts the alignment padding
  expect_corrupt(bytes, "tensor data section starts at offset 64, past the end");
}

TEST(gguf_corrupt, NonPrintableNamesAreEscaped) {
  Builder b = valid_builder();
  b.tensor(std::string("to\x1b[2Jk\0", 8), {64, 3}, tt::kTQ8_0);
  b.tensors.back().offset = 0;
  expect_corrupt(b.build(), "'to\\x1b[2Jk\\x00'");
}

TEST(gguf_corrupt, EveryTruncationIsRejected) {
  Builder b = valid_builder();
  b.kv("arr", tt::kArr, [](Writer& w) { w.u32(tt::kStr).u64(2).str("x").str("yz"); });
  const auto bytes = b.build();
  ASSERT_TRUE(parse_ok(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = File::parse(bytes.data(), n);
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes accepted";
    ASSERT_EQ(f.status().code(), ErrorCode::kCorruptData) << f.status().to_string();
    // Either a read ran out ("truncated"/"left") or a tensor ran past the end.
    const std::string& m = f.status().message();
    EXPECT_TRUE(m.find("truncated") != std::string::npos || m.find("left") != std::string::npos ||
                m.find("past") != std::string::npos || m.find("too small") != std::string::npos)
        << n << ": " << m;
  }
}

// ---- the real default model ----

std::string default_model() {
  if (const char* m = std::getenv("TESSERA_MODEL"); m && *m) return m;
  std::string base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    base = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = std::string(h) + "/.cache";
  return base + "/tessera/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(gguf_model, SmolLM2) {
  const std::string path = default_model();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  auto r = File::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const File& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.block_count"), 30u);
  EXPECT_EQ(f.get_u32("llama.embedding_length"), 576u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count"), 9u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f.get_u32("llama.context_length"), 8192u);
  EXPECT_FLOAT_EQ(*f.get_f32("llama.rope.freq_base"), 100000.0f);
  EXPECT_NEAR(*f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f, 1e-9f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_u32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), false);
  const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  EXPECT_EQ(tokens->size(), 49152u);
  EXPECT_EQ((*tokens)[0], "<|endoftext|>");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges")->size(), 48900u);
  auto types = f.get_i32_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types);
  EXPECT_EQ(types->size(), 49152u);
  EXPECT_TRUE(f.get_string("tokenizer.chat_template"));

  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_TRUE(emb);
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(emb->nbytes, 30081024u);
  const TensorInfo* down = f.find_tensor("blk.0.ffn_down.weight");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->dtype, DType::kQ4_1);
  EXPECT_EQ(down->dims, (std::vector<int64_t>{1536, 576}));
  EXPECT_EQ(down->nbytes, 552960u);
  uint64_t total = 0, params = 0;
  for (const TensorInfo& t : f.tensors()) {
    ASSERT_TRUE(t.dtype) << t.name;
    total += t.nbytes;
    params += static_cast<uint64_t>(t.numel());
  }
  EXPECT_EQ(f.data_offset(), 1785664u);
  EXPECT_LE(f.data_offset() + total, f.file_size());
  EXPECT_GT(params, 134000000u);
  EXPECT_LT(params, 136000000u);
}

}  // namespace
}  // namespace tessera::gguf
