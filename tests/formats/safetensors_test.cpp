// safetensors reader: valid files, every rule of the hostile-input validation, sharded indexes.
#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessera::safetensors {
namespace {

// File bytes from a header text and a data section (header padded with spaces to 8 bytes, as
// writers do, unless pad is false).
std::vector<uint8_t> make_file(std::string header, size_t data_bytes, bool pad = true) {
  if (pad)
    while (header.size() % 8) header += ' ';
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + n + data_bytes);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  for (size_t i = 0; i < n; ++i) out[8 + i] = static_cast<uint8_t>(header[i]);
  for (size_t i = 0; i < data_bytes; ++i) out[8 + n + i] = static_cast<uint8_t>(i * 7 + 1);
  return out;
}

std::unique_ptr<File> parse_ok(const std::vector<uint8_t>& bytes) {
  auto f = File::parse(bytes.data(), bytes.size());
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f) return nullptr;
  return std::move(f).value();
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& substr,
                  ErrorCode code = ErrorCode::kCorruptData, const OpenOptions& opt = {}) {
  auto f = File::parse(bytes.data(), bytes.size(), opt);
  ASSERT_FALSE(f.ok()) << "accepted a file that should fail with: " << substr;
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  EXPECT_NE(f.status().message().find(substr), std::string::npos)
      << "message: " << f.status().message() << "\nexpected substring: " << substr;
}

// One tensor "w" of `dtype` and `shape` at [b, e), data section of `data` bytes.
std::vector<uint8_t> one(const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e,
                         size_t data) {
  return make_file(R"({"w":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":[)" +
                       std::to_string(b) + "," + std::to_string(e) + "]}}",
                   data);
}

TEST(safetensors, ParsesTensorsAndMetadata) {
  auto bytes = make_file(R"({"__metadata__":{"format":"pt","b":"x"},)"
                         R"("b":{"dtype":"BF16","shape":[3,2],"data_offsets":[8,20]},)"
                         R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("c":{"dtype":"I64","shape":[],"data_offsets":[20,28]},)"
                         R"("e":{"dtype":"F16","shape":[0,5],"data_offsets":[28,28]}})",
                         28);
  auto f = parse_ok(bytes);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "a");  // data order
  const TensorInfo* b = f->find_tensor("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(b->numel(), 6);
  EXPECT_EQ(b->nbytes(), 12u);
  EXPECT_EQ(f->tensor_data(*b), bytes.data() + f->data_offset() + 8);
  const TensorInfo* c = f->find_tensor("c");
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->dtype.has_value());  // I64: listed, not computed with
  EXPECT_EQ(c->numel(), 1);            // a scalar
  EXPECT_EQ(f->find_tensor("e")->numel(), 0);
  EXPECT_EQ(f->find_tensor("zz"), nullptr);
  EXPECT_EQ(f->find_metadata("format"), "pt");
  EXPECT_EQ(f->find_metadata("b"), "x");
  EXPECT_FALSE(f->find_metadata("nope"));
}

TEST(safetensors, EmptyHeaderAndUnpaddedHeader) {
  EXPECT_TRUE(parse_ok(make_file("{}", 0)));
  EXPECT_TRUE(parse_ok(make_file("{}", 0, /*pad=*/false)));
  EXPECT_TRUE(parse_ok(one("F32", "[1]", 0, 4, 4)));
}

TEST(safetensors, HeaderLengthBounds) {
  expect_error({1, 2, 3}, "fewer than the 8-byte header length");
  auto bytes = make_file("{}", 0);
  bytes[0] = 200;  // length past the end of the file
  expect_error(bytes, "runs past the end of the file");
  bytes = make_file("{}", 0);
  bytes[7] = 0x80;  // 2^63 + ...
  expect_error(bytes, "exceeds the limit");
  OpenOptions small;
  small.max_header_bytes = 4;
  expect_error(make_file("{}", 0), "exceeds the limit", ErrorCode::kCorruptData, small);
}

TEST(safetensors, HeaderMustBeAJsonObject) {
  expect_error(make_file("[1,2]", 0), "does not start with a JSON object");
  expect_error(make_file(" {}", 0), "does not start with a JSON object");
  expect_error(make_file("{\"a\":", 0), "not valid JSON");
  expect_error(make_file("{\"\xff\":1}", 0), "not valid JSON");
  expect_error(make_file("{} {}", 0), "not valid JSON");
  expect_error(make_file("{\"a\":[[[[[[1]]]]]]}", 0), "nests deeper");
  expect_error(make_file(R"({"w":1})", 0), "entry is not an object");
}

TEST(safetensors, DuplicateNamesAreRejected) {
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8),
               "duplicate key 'w'");
}

TEST(safetensors, FieldTypes) {
  expect_error(make_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4), "dtype");
  expect_error(make_file(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4), "dtype");
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4), "shape");
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
               "data_offsets must be an array of two");
  expect_error(one("F32", "[-1]", 0, 4, 4), "non-negative integers");
  expect_error(one("F32", "[1.0]", 0, 4, 4), "non-negative integers");
  expect_error(one("F32", "[\"1\"]", 0, 4, 4), "non-negative integers");
  expect_error(one("F32", "[18446744073709551616]", 0, 4, 4), "non-negative integers");
  expect_error(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-1,4]}})", 4),
               "non-negative integers");
  expect_error(make_file(R"({"__metadata__":{"k":1}})", 0), "is not a string");
  expect_error(make_file(R"({"__metadata__":[]})", 0), "__metadata__ is not an object");
}

TEST(safetensors, DTypes) {
  expect_error(one("Q4", "[1]", 0, 4, 4), "unknown dtype 'Q4'");
  expect_error(one("F4", "[2]", 0, 1, 1), "unsupported dtype 'F4'", ErrorCode::kUnsupported);
  EXPECT_TRUE(parse_ok(one("F8_E4M3", "[3]", 0, 3, 3)));
  EXPECT_TRUE(parse_ok(one("F64", "[1]", 0, 8, 8)));
  EXPECT_EQ(dtype_element_bytes("BF16"), 2);
  EXPECT_EQ(dtype_from_name("I64"), std::nullopt);
}

TEST(safetensors, ShapeArithmeticIsOverflowChecked) {
  expect_error(one("F32", "[1,2,3,4,5,6,7,8,9]", 0, 4, 4), "dimensions, more than 8");
  expect_error(one("U8", "[4294967296,4294967296]", 0, 4, 4), "element count overflows");
  expect_error(one("F32", "[4611686018427387904]", 0, 4, 4), "byte size overflows");
  expect_error(one("F32", "[9223372036854775808]", 0, 4, 4), "non-negative integers");
  // A zero dimension makes any other dimensions harmless.
  EXPECT_TRUE(parse_ok(one("F32", "[9223372036854775807,0,9223372036854775807]", 0, 0, 0)));
}

TEST(safetensors, OffsetsMustMatchShapeAndStayInside) {
  expect_error(one("F32", "[2]", 0, 4, 8), "span 4 bytes but F32 shape needs 8");
  expect_error(one("F32", "[1]", 4, 0, 8), "begin 4 > end 0");
  expect_error(one("F32", "[1]", 0, 4, 2), "past the data section");
  expect_error(one("F32", "[1]", 18446744073709551612ull, 18446744073709551615ull, 4),
               "past the data section");
}

TEST(safetensors, TensorsTileTheDataSection) {
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8),
               "overlaps");
  // Two names for the same bytes.
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                         4),
               "overlaps");
  expect_error(one("F32", "[1]", 4, 8, 8), "gap of 4 bytes");
  expect_error(one("F32", "[1]", 0, 4, 12), "8 bytes after the last tensor");
  expect_error(make_file("{}", 3), "3 bytes after the last tensor");
}

TEST(safetensors, TooManyTensors) {
  OpenOptions opt;
  opt.max_tensors = 1;
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8),
               "more than the limit", ErrorCode::kCorruptData, opt);
}

TEST(safetensors, IndexValidation) {
  auto ok = parse_index(
      R"({"metadata":{"total_size":12},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors","c":"m-1.safetensors"}})");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->shards, (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  EXPECT_EQ(ok->total_size, 12u);
  EXPECT_EQ(ok->weight_map.at("b"), "m-2.safetensors");
  for (const char* bad : {"../x.safetensors", "/etc/passwd", "a/b", "..", ".", "", "a\\\\b"}) {
    auto r = parse_index(std::string(R"({"weight_map":{"a":")") + bad + "\"}}");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("plain file names"), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(parse_index(R"({"metadata":{}})").ok());
  EXPECT_FALSE(parse_index(R"({"weight_map":{"a":1}})").ok());
  EXPECT_FALSE(parse_index(R"({"weight_map":[]})").ok());
  EXPECT_FALSE(parse_index(R"({"weight_map":{"a":"x"},"weight_map":{"a":"y"}})").ok());
  EXPECT_FALSE(parse_index("not json").ok());
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tessera_st_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name, const std::string& bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string file(const std::string& name, const std::vector<uint8_t>& bytes) const {
    return file(name, std::string(bytes.begin(), bytes.end()));
  }

 private:
  std::string path_;
};

TEST(safetensors, ShardedCheckpoint) {
  TempDir dir;
  dir.file("m-1.safetensors", one("F32", "[2]", 0, 8, 8));
  dir.file("m-2.safetensors",
           make_file(R"({"v":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                     R"("extra":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})",
                     6));
  const std::string index = dir.file(
      "model.safetensors.index.json",
      R"({"metadata":{"total_size":12},"weight_map":{"w":"m-1.safetensors","v":"m-2.safetensors"}})");
  auto c = Checkpoint::open(index);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->files().size(), 2u);
  ASSERT_EQ((*c)->entries().size(), 2u);  // "extra" is not listed, so not reachable
  EXPECT_EQ((*c)->entries()[0].first, "v");
  const auto* w = (*c)->find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->info->dtype, DType::kF32);
  EXPECT_EQ(w->data()[0], 1);
  EXPECT_EQ((*c)->find("extra"), nullptr);

  const std::string bad = dir.file("bad.index.json", R"({"weight_map":{"w":"m-2.safetensors"}})");
  auto b = Checkpoint::open(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("is not in shard"), std::string::npos)
      << b.status().message();
  const std::string missing =
      dir.file("missing.index.json", R"({"weight_map":{"w":"nope.safetensors"}})");
  auto m = Checkpoint::open(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kNotFound);
}

TEST(safetensors, SingleFileCheckpointAndOpenErrors) {
  TempDir dir;
  const std::string p = dir.file("model.safetensors", one("F16", "[3]", 0, 6, 6));
  auto c = Checkpoint::open(p);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_TRUE((*c)->find("w"));
  EXPECT_EQ((*c)->find("w")->info->dtype, DType::kF16);
  auto none = File::open(p + ".nope");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound);
  const std::string corrupt = dir.file("c.safetensors", one("F16", "[3]", 0, 6, 4));
  auto bad = File::open(corrupt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(corrupt), std::string::npos);  // names the file
}

}  // namespace
}  // namespace tessera::safetensors
