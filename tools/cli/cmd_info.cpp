// `tessera info [MODEL]`: prints a GGUF file's header, metadata and tensor table (a Hugging Face
// checkpoint folder: cmd_info_hf.cpp).
//
// The output is line-oriented so scripts (tests/reference/test_gguf_reader.py) can parse it:
//   version 3
//   kv <key> <type> <value>          type: u32, f32, str, ..., arr[<elem type>,<length>]
//   tokenizer <field> <value>
//   tensor <name> <ggml type> [d0, d1, ...] <bytes> at <absolute file offset>
//   total <n> tensors <params> params <bytes> bytes
// Strings are JSON-escaped and quoted; long strings and arrays are elided with their size.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "command.h"
#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"

namespace tessera::cli {
namespace {

using gguf::ValueType;

constexpr size_t kMaxStringShown = 160;  // bytes of a string value before eliding
constexpr uint64_t kMaxElementsShown = 8;

// JSON-style quoting. Bytes >= 0x80 pass through (UTF-8 text); a cut never splits a UTF-8
// sequence, so the output stays valid whenever the input was.
std::string quote(std::string_view s, size_t max = std::string_view::npos) {
  size_t n = s.size();
  if (n > max) {
    n = max;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  }
  std::string out = "\"";
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// Names (keys, tensor names) are printed bare, as one whitespace-free token.
std::string bare(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c > 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out.empty() ? "\"\"" : out;
}

std::string float_text(double v, bool is_f32) {
  char buf[40];
  std::snprintf(buf, sizeof buf, is_f32 ? "%.9g" : "%.17g", v);  // round-trips the value
  return buf;
}

// Reads element i of a fixed-size array payload (little-endian, unaligned).
std::string element_text(const gguf::Value& v, uint64_t i) {
  const ValueType t = v.array_type;
  if (t == ValueType::kString) return quote(v.array_strings[i], kMaxStringShown);
  const uint64_t size = t == ValueType::kU8 || t == ValueType::kI8 || t == ValueType::kBool    ? 1
                        : t == ValueType::kU16 || t == ValueType::kI16                         ? 2
                        : t == ValueType::kU32 || t == ValueType::kI32 || t == ValueType::kF32 ? 4
                                                                                               : 8;
  uint64_t raw = 0;
  for (uint64_t b = 0; b < size; ++b)
    raw |= static_cast<uint64_t>(v.array_data[i * size + b]) << (8 * b);
  const uint64_t sign = uint64_t{1} << (8 * size - 1);
  const int64_t sraw =
      size == 8 ? static_cast<int64_t>(raw) : static_cast<int64_t>((raw ^ sign) - sign);
  switch (t) {
    case ValueType::kU8:
    case ValueType::kU16:
    case ValueType::kU32:
    case ValueType::kU64:
      return std::to_string(raw);
    case ValueType::kI8:
    case ValueType::kI16:
    case ValueType::kI32:
    case ValueType::kI64:
      return std::to_string(sraw);
    case ValueType::kF32: {
      uint32_t bits = static_cast<uint32_t>(raw);
      float f;
      std::memcpy(&f, &bits, 4);
      return float_text(f, true);
    }
    case ValueType::kF64: {
      double d;
      std::memcpy(&d, &raw, 8);
      return float_text(d, false);
    }
    case ValueType::kBool:
      return raw ? "true" : "false";
    case ValueType::kString:
    case ValueType::kArray:
      break;  // handled above / rejected by the reader
  }
  return "?";
}

// "<type> <value>" for one metadata value.
std::string value_text(const gguf::Value& v) {
  std::string type(gguf::value_type_name(v.type));
  switch (v.type) {
    case ValueType::kU8:
    case ValueType::kU16:
    case ValueType::kU32:
    case ValueType::kU64:
      return type + " " + std::to_string(v.u64);
    case ValueType::kI8:
    case ValueType::kI16:
    case ValueType::kI32:
    case ValueType::kI64:
      return type + " " + std::to_string(v.i64);
    case ValueType::kF32:
      return type + " " + float_text(v.f64, true);
    case ValueType::kF64:
      return type + " " + float_text(v.f64, false);
    case ValueType::kBool:
      return type + (v.b ? " true" : " false");
    case ValueType::kString:
      return type + " " + quote(v.str, kMaxStringShown);
    case ValueType::kArray:
      break;
  }
  std::string out = "arr[" + std::string(gguf::value_type_name(v.array_type)) + "," +
                    std::to_string(v.array_len) + "] [";
  for (uint64_t i = 0; i < v.array_len && i < kMaxElementsShown; ++i)
    out += (i ? ", " : "") + element_text(v, i);
  if (v.array_len > kMaxElementsShown) out += ", ...";
  return out + "]";
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

void print_kv_section(const gguf::File& f, const char* title, std::string_view prefix,
                      bool (*also_skip)(std::string_view, std::string_view),
                      std::string_view arch) {
  bool any = false;
  for (const auto& kv : f.metadata()) {
    if (!starts_with(kv.key, prefix) || (also_skip && also_skip(kv.key, arch))) continue;
    if (!any) std::printf("\n[%s]\n", title);
    any = true;
    std::printf("kv %s %s\n", bare(kv.key).c_str(), value_text(kv.value).c_str());
  }
}

void print_tokenizer_summary(const gguf::File& f) {
  if (auto m = f.get_string("tokenizer.ggml.model"))
    std::printf("tokenizer model %s\n", quote(*m, kMaxStringShown).c_str());
  if (auto p = f.get_string("tokenizer.ggml.pre"))
    std::printf("tokenizer pre %s\n", quote(*p, kMaxStringShown).c_str());
  if (const gguf::Value* t = f.find("tokenizer.ggml.tokens"); t && t->type == ValueType::kArray)
    std::printf("tokenizer vocab_size %" PRIu64 "\n", t->array_len);
  if (const gguf::Value* m = f.find("tokenizer.ggml.merges"); m && m->type == ValueType::kArray)
    std::printf("tokenizer merges %" PRIu64 "\n", m->array_len);
  for (const char* id : {"bos", "eos", "unknown", "padding"}) {
    const std::string key = std::string("tokenizer.ggml.") + id + "_token_id";
    if (auto v = f.get_i64(key)) std::printf("tokenizer %s_token_id %" PRId64 "\n", id, *v);
  }
  if (auto t = f.get_string("tokenizer.chat_template"))
    std::printf("tokenizer chat_template yes (%zu bytes)\n", t->size());
  else
    std::printf("tokenizer chat_template no\n");
}

int cmd_info(int argc, char** argv) {
  Args args(argc, argv);
  if (args.flag("help")) {
    std::printf("usage: tessera info [MODEL]\n  MODEL: a .gguf file or a Hugging Face checkpoint "
                "folder; defaults to %s\n",
                default_model_path().c_str());
    return 0;
  }
  std::string err;
  auto pos = args.positionals(&err);
  if (!err.empty() || pos.size() > 1) {
    std::fprintf(stderr, "tessera info: error: %s\nusage: tessera info [MODEL]\n",
                 err.empty() ? "expected at most one MODEL path" : err.c_str());
    return 1;
  }
  const std::string path = pos.empty() ? default_model_path() : pos[0];
  if (hf::is_checkpoint_path(path)) return info_hf(path);
  auto opened = gguf::File::open(path);
  if (!opened) {
    std::fprintf(stderr, "tessera info: error: %s\n", opened.status().to_string().c_str());
    return 1;
  }
  const gguf::File& f = **opened;

  std::printf("file %s\nversion %u\nalignment %" PRIu64 "\nfile_size %zu\ndata_offset %" PRIu64
              "\nkv_count %zu\ntensor_count %zu\n",
              path.c_str(), f.version(), f.alignment(), f.file_size(), f.data_offset(),
              f.metadata().size(), f.tensors().size());

  const std::string arch(f.get_string("general.architecture").value_or(""));
  print_kv_section(f, "general", "general.", nullptr, arch);
  if (!arch.empty()) {
    std::printf("\narchitecture %s\n", quote(arch).c_str());
    print_kv_section(f, "architecture", arch + ".", nullptr, arch);
  }
  if (f.find("tokenizer.ggml.model") || f.find("tokenizer.ggml.tokens")) {
    std::printf("\n[tokenizer summary]\n");
    print_tokenizer_summary(f);
  }
  print_kv_section(f, "tokenizer", "tokenizer.", nullptr, arch);
  print_kv_section(
      f, "other", "",
      [](std::string_view key, std::string_view a) {
        return starts_with(key, "general.") || starts_with(key, "tokenizer.") ||
               (!a.empty() && starts_with(key, a) && key.size() > a.size() && key[a.size()] == '.');
      },
      arch);

  std::printf("\n[tensors]\n");
  uint64_t total_bytes = 0, total_params = 0;
  for (const auto& t : f.tensors()) {
    const gguf::GgmlTypeTraits* traits = gguf::ggml_type_traits(t.ggml_type);
    std::string shape = "[";
    for (size_t i = 0; i < t.dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.dims[i]);
    shape += "]";
    std::printf("tensor %s %s %s %" PRIu64 " at %" PRIu64 "\n", bare(t.name).c_str(),
                traits ? std::string(traits->name).c_str() : "?", shape.c_str(), t.nbytes,
                f.data_offset() + t.offset);
    total_bytes += t.nbytes;
    total_params += static_cast<uint64_t>(t.numel());
  }
  std::printf("total %zu tensors %" PRIu64 " params %" PRIu64 " bytes\n", f.tensors().size(),
              total_params, total_bytes);
  return 0;
}

}  // namespace

TESSERA_CLI_COMMAND("info", "print a GGUF model's metadata and tensor table", cmd_info);

}  // namespace tessera::cli
