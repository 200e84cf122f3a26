#include "formats/gguf.h"

#include "formats/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>
#include <system_error>

#include "core/error.h"

namespace tessera::gguf {

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr uint32_t kLastValueType = static_cast<uint32_t>(ValueType::kF64);
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// Smallest possible encodings. Counts read from the file are bounded by the bytes left divided
// by these before anything is reserved, so memory stays proportional to the file size.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;                   // name len, n_dims, 1 dim, type, offset
constexpr uint64_t kMinStringBytes = 8;  // length prefix

// ggml block geometry of every type id that has ever been written to GGUF files. Kept here (not
// in core/dtype) because the reader must size tensors Tessera cannot compute, so `info` can
// list any file. Q8_1 is 36 bytes (two halves + 32 quants) as in current ggml; the gguf Python
// package still lists 40, from the era when d and s were floats.
constexpr GgmlTypeTraits kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
};

// Size of one element of a fixed-size value type (0 for string/array).
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

bool is_unsigned(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64;
}
bool is_signed(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}

// Endian-independent little-endian load of n <= 8 bytes.
uint64_t load_le(const uint8_t* p, uint64_t n) {
  uint64_t v = 0;
  for (uint64_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Sign-extends an n-byte two's complement value.
int64_t sign_extend(uint64_t v, uint64_t n) {
  if (n >= 8) return static_cast<int64_t>(v);
  const uint64_t sign = uint64_t{1} << (8 * n - 1);
  return static_cast<int64_t>((v ^ sign) - sign);
}

using formats::printable;  // file-controlled text in messages: bounded, printable

std::string num(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kU8:
      return "u8";
    case ValueType::kI8:
      return "i8";
    case ValueType::kU16:
      return "u16";
    case ValueType::kI16:
      return "i16";
    case ValueType::kU32:
      return "u32";
    case ValueType::kI32:
      return "i32";
    case ValueType::kF32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "str";
    case ValueType::kArray:
      return "arr";
    case ValueType::kU64:
      return "u64";
    case ValueType::kI64:
      return "i64";
    case ValueType::kF64:
      return "f64";
  }
  return "?";
}

const GgmlTypeTraits* ggml_type_traits(uint32_t ggml_type) {
  for (const auto& t : kGgmlTypes)
    if (t.id == ggml_type) return &t;
  return nullptr;
}

int64_t TensorInfo::numel() const {
  // The parser rejected any non-empty shape whose product overflows int64. An empty shape may
  // still hold huge dims ([32, 2^40, 2^40, 0]), so a zero must short-circuit the product.
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Cursor over the untrusted bytes. Every read goes through need(), which checks the remaining
// length; failures throw Error, which File::parse_all turns into a Status.
class Parser {
 public:
  Parser(File& f, const OpenOptions& opt) : f_(f), opt_(opt), p_(f.base_), size_(f.size_) {}
  void run();

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw_error(ErrorCode::kCorruptData, ctx_.empty() ? msg : ctx_ + ": " + msg);
  }
  [[noreturn]] void unsupported(const std::string& msg) const {
    throw_error(ErrorCode::kUnsupported, ctx_.empty() ? msg : ctx_ + ": " + msg);
  }
  uint64_t remaining() const { return size_ - pos_; }
  void need(uint64_t n, const char* field) const {
    if (n > remaining())
      fail(std::string(field) + " truncated: needs " + num(n) + " bytes at offset " + num(pos_) +
           ", only " + num(remaining()) + " left (file size " + num(size_) + ")");
  }
  uint64_t read(uint64_t n, const char* field) {
    need(n, field);
    uint64_t v = load_le(p_ + pos_, n);
    pos_ += n;
    return v;
  }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(read(4, field)); }
  uint64_t u64(const char* field) { return read(8, field); }
  std::string_view str(const char* field);
  ValueType value_type(const char* field);
  void read_value(ValueType t, Value& v);
  void read_array(Value& v);
  void read_header();
  void read_kv(uint64_t index);
  void read_tensor_info(uint64_t index);
  void apply_alignment();
  void check_tensors();

  File& f_;
  const OpenOptions& opt_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::string ctx_;  // what is being parsed, prefixed to every message
};

std::string_view Parser::str(const char* field) {
  const uint64_t at = pos_;
  const uint64_t len = u64(field);
  if (len > opt_.max_string_bytes)
    fail(std::string(field) + " length " + num(len) + " at offset " + num(at) +
         " exceeds the limit of " + num(opt_.max_string_bytes) + " bytes");
  if (len > remaining())
    fail(std::string(field) + " length " + num(len) + " at offset " + num(at) + " exceeds the " +
         num(remaining()) + " bytes left in the file");
  std::string_view s(reinterpret_cast<const char*>(p_ + pos_), len);
  pos_ += len;
  return s;
}

ValueType Parser::value_type(const char* field) {
  const uint64_t at = pos_;
  const uint32_t t = u32(field);
  if (t > kLastValueType)
    fail("unknown " + std::string(field) + " " + num(t) + " at offset " + num(at));
  return static_cast<ValueType>(t);
}

void Parser::read_value(ValueType t, Value& v) {
  v.type = t;
  if (t == ValueType::kString) {
    v.str = str("string value");
    return;
  }
  if (t == ValueType::kArray) {
    read_array(v);
    return;
  }
  const uint64_t n = scalar_size(t);
  const uint64_t raw = read(n, "value");
  if (is_unsigned(t)) {
    v.u64 = raw;
    if (raw <= kInt64Max) v.i64 = static_cast<int64_t>(raw);
  } else if (is_signed(t)) {
    v.i64 = sign_extend(raw, n);
    if (v.i64 >= 0) v.u64 = static_cast<uint64_t>(v.i64);
  } else if (t == ValueType::kF32) {
    v.f64 = std::bit_cast<float>(static_cast<uint32_t>(raw));
  } else if (t == ValueType::kF64) {
    v.f64 = std::bit_cast<double>(raw);
  } else {  // kBool: GGUF writes 0/1; any nonzero byte reads as true, as in other readers
    v.b = raw != 0;
  }
}

void Parser::read_array(Value& v) {
  const ValueType et = value_type("array element type");
  if (et == ValueType::kArray)
    unsupported("nested arrays are not supported (element type array at offset " + num(pos_ - 4) +
                ")");
  const uint64_t at = pos_;
  const uint64_t len = u64("array length");
  v.array_type = et;
  if (len > opt_.max_array_len)
    fail("array length " + num(len) + " at offset " + num(at) + " exceeds the limit of " +
         num(opt_.max_array_len));
  if (et == ValueType::kString) {
    if (len > remaining() / kMinStringBytes)
      fail("array of " + num(len) + " strings at offset " + num(at) + " cannot fit in the " +
           num(remaining()) + " bytes left");
    v.array_strings.reserve(len);
    for (uint64_t i = 0; i < len; ++i) v.array_strings.push_back(str("array string"));
  } else {
    const uint64_t es = scalar_size(et);
    if (len > remaining() / es)
      fail("array of " + num(len) + " " + std::string(value_type_name(et)) + " at offset " +
           num(at) + " needs more than the " + num(remaining()) + " bytes left");
    v.array_data = p_ + pos_;
    pos_ += len * es;
  }
  v.array_len = len;
}

void Parser::read_header() {
  ctx_ = "GGUF header";
  if (size_ < 4) fail("file of " + num(size_) + " bytes is too small to hold the GGUF magic");
  if (std::memcmp(p_, "GGUF", 4) != 0)
    fail("bad magic '" + printable(std::string_view(reinterpret_cast<const char*>(p_), 4)) +
         "' at offset 0 (expected 'GGUF'); not a GGUF file");
  pos_ = 4;
  const uint32_t version = u32("version");
  // A big-endian file stores its version byte-swapped; say so rather than "unknown version".
  if ((version & 0xffffu) == 0 && (version >> 24) >= 1 && (version >> 24) <= 3)
    unsupported("big-endian GGUF (version " + num(version >> 24) + ") is not supported");
  if (version == 1)
    unsupported("GGUF version 1 is not supported (32-bit counts; re-convert the model to v3)");
  if (version == 0) fail("invalid GGUF version 0 at offset 4");
  if (version > 3) unsupported("GGUF version " + num(version) + " is not supported (2 or 3)");
  f_.version_ = version;
  n_tensors_ = u64("tensor_count");
  n_kv_ = u64("metadata_kv_count");
  if (n_tensors_ > opt_.max_tensors)
    fail("tensor_count " + num(n_tensors_) + " at offset 8 exceeds the limit of " +
         num(opt_.max_tensors));
  if (n_kv_ > opt_.max_kv)
    fail("metadata_kv_count " + num(n_kv_) + " at offset 16 exceeds the limit of " +
         num(opt_.max_kv));
  if (n_kv_ > remaining() / kMinKvBytes)
    fail("metadata_kv_count " + num(n_kv_) + " at offset 16 cannot fit in the " + num(remaining()) +
         " bytes left");
  if (n_tensors_ > remaining() / kMinTensorInfoBytes)
    fail("tensor_count " + num(n_tensors_) + " at offset 8 cannot fit in the " + num(remaining()) +
         " bytes left");
}

void Parser::read_kv(uint64_t index) {
  const uint64_t at = pos_;
  ctx_ = "metadata entry " + num(index) + " at offset " + num(at);
  KeyValue kv;
  kv.key = str("key");
  ctx_ = "metadata key '" + printable(kv.key) + "' at offset " + num(at);
  read_value(value_type("value type"), kv.value);
  f_.kv_.push_back(std::move(kv));
}

void Parser::read_tensor_info(uint64_t index) {
  const uint64_t at = pos_;
  ctx_ = "tensor info " + num(index) + " at offset " + num(at);
  TensorInfo t;
  t.name = str("tensor name");
  ctx_ = "tensor '" + printable(t.name) + "' (info at offset " + num(at) + ")";
  const uint32_t n_dims = u32("n_dims");
  if (n_dims < 1 || n_dims > kMaxDims)
    fail("n_dims " + num(n_dims) + " at offset " + num(pos_ - 4) + " is outside 1.." +
         num(kMaxDims));
  t.dims.reserve(n_dims);
  for (uint32_t i = 0; i < n_dims; ++i) {
    const uint64_t d = u64("dim");
    if (d > kInt64Max)
      fail("dim " + num(i) + " = " + num(d) + " at offset " + num(pos_ - 8) +
           " is negative or exceeds int64");
    t.dims.push_back(static_cast<int64_t>(d));
  }
  t.ggml_type = u32("ggml type");
  t.offset = u64("data offset");
  const GgmlTypeTraits* traits = ggml_type_traits(t.ggml_type);
  if (!traits) unsupported("unknown ggml type " + num(t.ggml_type));
  t.dtype = dtype_from_ggml(t.ggml_type);

  if (t.dims[0] % traits->block_size != 0)
    fail("innermost dim " + num(t.dims[0]) + " is not a multiple of the " +
         std::string(traits->name) + " block size " + num(traits->block_size));
  // Zero-sized dims are legal (empty tensor); otherwise both the element count and the byte
  // count must fit int64, checked by division so nothing overflows on the way.
  const bool empty = std::find(t.dims.begin(), t.dims.end(), 0) != t.dims.end();
  if (!empty) {
    uint64_t numel = 1;
    uint64_t nbytes =
        static_cast<uint64_t>(t.dims[0] / traits->block_size);  // blocks per row, for now
    if (nbytes > kInt64Max / traits->block_bytes) fail("row byte count overflows int64");
    nbytes *= traits->block_bytes;
    for (size_t i = 0; i < t.dims.size(); ++i) {
      const uint64_t d = static_cast<uint64_t>(t.dims[i]);
      if (numel > kInt64Max / d) fail("element count overflows int64");
      numel *= d;
      if (i == 0) continue;
      if (nbytes > kInt64Max / d) fail("byte count overflows int64");
      nbytes *= d;
    }
    t.nbytes = nbytes;
  }
  if (t.offset % f_.alignment_ != 0)
    fail("data offset " + num(t.offset) + " at offset " + num(pos_ - 8) +
         " is not a multiple of the alignment " + num(f_.alignment_));
  f_.tensors_.push_back(std::move(t));
}

void Parser::apply_alignment() {
  const Value* v = f_.find("general.alignment");
  if (!v) return;
  ctx_ = "metadata key 'general.alignment'";
  if (v->type != ValueType::kU32) fail("must be u32, got " + std::string(value_type_name(v->type)));
  if (v->u64 == 0 || !std::has_single_bit(v->u64))
    fail("value " + num(v->u64) + " is not a nonzero power of two");
  f_.alignment_ = v->u64;
}

void Parser::check_tensors() {
  auto& ts = f_.tensors_;
  const uint64_t data = f_.data_offset_;
  if (!ts.empty() && data > size_)
    fail("tensor data section starts at offset " + num(data) + ", past the end of the file (size " +
         num(size_) + ")");
  const uint64_t avail = size_ - std::min<uint64_t>(data, size_);
  for (const TensorInfo& t : ts) {
    if (t.offset > avail || t.nbytes > avail - t.offset)
      fail("tensor '" + printable(t.name) + "' data [offset " + num(t.offset) + ", " +
           num(t.nbytes) + " bytes] extends past end of file (data section at " + num(data) +
           ", file size " + num(size_) + ")");
  }
  // Sorting index arrays keeps duplicate/overlap detection O(n log n) whatever the names are.
  std::vector<size_t> idx(ts.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return ts[a].name < ts[b].name; });
  for (size_t i = 1; i < idx.size(); ++i)
    if (ts[idx[i]].name == ts[idx[i - 1]].name)
      fail("duplicate tensor name '" + printable(ts[idx[i]].name) + "'");

  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return ts[a].offset < ts[b].offset; });
  uint64_t end = 0;  // furthest end of the non-empty tensors seen so far
  size_t end_owner = 0;
  for (size_t i : idx) {
    const TensorInfo& t = ts[i];
    if (t.nbytes == 0) continue;  // an empty tensor occupies no bytes
    if (t.offset < end) {
      const TensorInfo& o = ts[end_owner];
      fail("tensors '" + printable(o.name) + "' [offset " + num(o.offset) + ", " + num(o.nbytes) +
           " bytes] and '" + printable(t.name) + "' [offset " + num(t.offset) + ", " +
           num(t.nbytes) + " bytes] overlap");
    }
    end = t.offset + t.nbytes;
    end_owner = i;
  }
}

void Parser::run() {
  read_header();
  f_.kv_.reserve(n_kv_);
  for (uint64_t i = 0; i < n_kv_; ++i) read_kv(i);

  ctx_ = "metadata";
  std::vector<size_t> idx(f_.kv_.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  const auto& kv = f_.kv_;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return kv[a].key < kv[b].key; });
  for (size_t i = 1; i < idx.size(); ++i)
    if (kv[idx[i]].key == kv[idx[i - 1]].key)
      fail("duplicate key '" + printable(kv[idx[i]].key) + "'");
  apply_alignment();

  // The header bound counted all remaining bytes; the infos must fit in what the metadata left.
  ctx_ = "GGUF header";
  if (n_tensors_ > remaining() / kMinTensorInfoBytes)
    fail("tensor_count " + num(n_tensors_) + " cannot fit in the " + num(remaining()) +
         " bytes left after the metadata (offset " + num(pos_) + ")");
  f_.tensors_.reserve(n_tensors_);
  for (uint64_t i = 0; i < n_tensors_; ++i) read_tensor_info(i);

  ctx_.clear();
  // pos_ <= size_ and alignment <= 2^31, so this cannot overflow.
  f_.data_offset_ = (pos_ + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
  check_tensors();
}

File::~File() = default;

Status File::parse_all(const OpenOptions& opt) {
  try {
    Parser(*this, opt).run();
    return Status::ok_status();
  } catch (const Error& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "out of memory while parsing GGUF metadata");
  }
}

Expected<std::unique_ptr<File>> File::parse(const uint8_t* data, size_t size,
                                            const OpenOptions& opt) {
  std::unique_ptr<File> f(new File());
  f->base_ = data;
  f->size_ = data ? size : 0;
  Status s = f->parse_all(opt);
  if (!s.ok()) return s;
  return Expected<std::unique_ptr<File>>(std::move(f));
}

Expected<std::unique_ptr<File>> File::open(const std::string& path, const OpenOptions& opt) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                  "cannot open '" + path + "': " + std::generic_category().message(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(ErrorCode::kIo, "'" + path + "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Status(ErrorCode::kCorruptData, "'" + path + "' is empty, not a GGUF file");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  if (m == MAP_FAILED)
    return Status(ErrorCode::kIo,
                  "cannot mmap '" + path + "': " + std::generic_category().message(err));
  std::unique_ptr<File> f(new File());
  f->mapping_ = std::shared_ptr<void>(m, [size](void* p) { ::munmap(p, size); });
  f->base_ = static_cast<const uint8_t*>(m);
  f->size_ = size;
  Status s = f->parse_all(opt);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return Expected<std::unique_ptr<File>>(std::move(f));
}

// ---- lookups and typed getters ----

const Value* File::find(std::string_view key) const {
  for (const KeyValue& kv : kv_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::optional<uint64_t> File::get_u64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (is_unsigned(v->type)) return v->u64;
  if (is_signed(v->type) && v->i64 >= 0) return static_cast<uint64_t>(v->i64);
  return std::nullopt;
}

std::optional<uint32_t> File::get_u32(std::string_view key) const {
  auto v = get_u64(key);
  if (!v || *v > std::numeric_limits<uint32_t>::max()) return std::nullopt;
  return static_cast<uint32_t>(*v);
}

std::optional<int64_t> File::get_i64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (is_signed(v->type)) return v->i64;
  if (is_unsigned(v->type) && v->u64 <= kInt64Max) return static_cast<int64_t>(v->u64);
  return std::nullopt;
}

std::optional<float> File::get_f32(std::string_view key) const {
  const Value* v = find(key);
  if (!v || (v->type != ValueType::kF32 && v->type != ValueType::kF64)) return std::nullopt;
  return static_cast<float>(v->f64);
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kBool) return std::nullopt;
  return v->b;
}

std::optional<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kString) return std::nullopt;
  return v->str;
}

const std::vector<std::string_view>* File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kArray || v->array_type != ValueType::kString) return nullptr;
  return &v->array_strings;
}

std::optional<std::vector<int32_t>> File::get_i32_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kArray) return std::nullopt;
  const ValueType et = v->array_type;
  const bool sgn = is_signed(et);
  if (!sgn && !is_unsigned(et)) return std::nullopt;
  const uint64_t es = scalar_size(et);
  std::vector<int32_t> out(v->array_len);
  for (uint64_t i = 0; i < v->array_len; ++i) {
    const uint64_t raw = load_le(v->array_data + i * es, es);
    if (sgn) {
      const int64_t x = sign_extend(raw, es);
      if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
        return std::nullopt;
      out[i] = static_cast<int32_t>(x);
    } else {
      if (raw > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) return std::nullopt;
      out[i] = static_cast<int32_t>(raw);
    }
  }
  return out;
}

std::optional<std::vector<float>> File::get_f32_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kArray) return std::nullopt;
  const ValueType et = v->array_type;
  if (et != ValueType::kF32 && et != ValueType::kF64) return std::nullopt;
  const uint64_t es = scalar_size(et);
  std::vector<float> out(v->array_len);
  for (uint64_t i = 0; i < v->array_len; ++i) {
    const uint64_t raw = load_le(v->array_data + i * es, es);
    out[i] = et == ValueType::kF32 ? std::bit_cast<float>(static_cast<uint32_t>(raw))
                                   : static_cast<float>(std::bit_cast<double>(raw));
  }
  return out;
}

}  // namespace tessera::gguf
