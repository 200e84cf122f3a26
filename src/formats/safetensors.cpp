#include "formats/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "formats/file_util.h"

namespace tessera::safetensors {

namespace {

using json = nlohmann::json;
using formats::printable;

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// {"name": {"shape": [..]}} and {"__metadata__": {..}}: three levels. One spare level is
// tolerated; anything deeper is not a safetensors header.
constexpr int kMaxHeaderDepth = 4;
// {"metadata": {..}, "weight_map": {..}}: two levels; metadata values may be small objects.
constexpr int kMaxIndexDepth = 4;

struct DTypeEntry {
  std::string_view name;
  int64_t bytes;
};
// Every dtype of the format with a whole number of bytes per element.
constexpr DTypeEntry kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
};
// Defined by the format but packed below one byte per element.
constexpr std::string_view kSubByteDTypes[] = {"F4", "F6_E2M3", "F6_E3M2"};

[[noreturn]] void corrupt(const std::string& msg) { throw_error(ErrorCode::kCorruptData, msg); }

std::string num(uint64_t v) { return std::to_string(v); }

// A JSON number that is a non-negative integer representable as uint64.
std::optional<uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// Parses JSON text without exceptions; duplicate keys of the top-level object are an error
// (nlohmann would silently keep the last one, and two readers could disagree on which tensor a
// name means).
json parse_object(std::string_view text, int max_depth, const std::string& what) {
  if (formats::json_nesting_depth(text) > max_depth)
    corrupt(what + " nests deeper than " + std::to_string(max_depth) + " levels");
  std::set<std::string> seen;
  std::string duplicate;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      std::string k = parsed.get<std::string>();
      if (!seen.insert(std::move(k)).second) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) corrupt(what + " is not valid JSON (or not valid UTF-8)");
  if (!j.is_object()) corrupt(what + " is not a JSON object");
  if (!duplicate.empty()) corrupt(what + " has duplicate key '" + printable(duplicate) + "'");
  return j;
}

}  // namespace

std::optional<int64_t> dtype_element_bytes(std::string_view name) {
  for (const auto& e : kDTypes)
    if (e.name == name) return e.bytes;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "I32") return DType::kI32;
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  // Validated at parse time: the product fits int64 (a zero dimension short-circuits).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

File::~File() = default;

std::optional<std::string_view> File::find_metadata(std::string_view key) const {
  auto it = std::lower_bound(metadata_.begin(), metadata_.end(), key,
                             [](const auto& kv, std::string_view k) { return kv.first < k; });
  if (it == metadata_.end() || it->first != key) return std::nullopt;
  return std::string_view(it->second);
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Status File::parse_all(const OpenOptions& opt) {
  try {
    if (size_ < 8)
      corrupt("file has " + num(size_) + " bytes, fewer than the 8-byte header length");
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(base_[i]) << (8 * i);
    if (n > opt.max_header_bytes)
      corrupt("header length " + num(n) + " exceeds the limit of " + num(opt.max_header_bytes) +
              " bytes");
    if (n > size_ - 8)
      corrupt("header length " + num(n) + " runs past the end of the file (" + num(size_) +
              " bytes)");
    if (n < 2 || base_[8] != '{') corrupt("header does not start with a JSON object ('{')");
    header_size_ = n;
    const std::string_view text(reinterpret_cast<const char*>(base_ + 8), n);
    json header = parse_object(text, kMaxHeaderDepth, "header");

    const uint64_t data_size = size_ - 8 - n;
    const uint64_t n_tensors = header.size() - (header.contains("__metadata__") ? 1 : 0);
    if (n_tensors > opt.max_tensors)
      corrupt("header lists " + num(n_tensors) + " tensors, more than the limit of " +
              num(opt.max_tensors));
    tensors_.reserve(header.size());
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const json& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) corrupt("__metadata__ is not an object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string())
            corrupt("__metadata__ value of '" + printable(m.key()) + "' is not a string");
          metadata_.emplace_back(m.key(), m.value().get<std::string>());
        }
        continue;
      }
      const std::string where = "tensor '" + printable(name) + "'";
      if (!v.is_object()) corrupt(where + ": entry is not an object");
      const auto dt = v.find("dtype");
      const auto shape = v.find("shape");
      const auto offs = v.find("data_offsets");
      if (dt == v.end() || !dt->is_string()) corrupt(where + ": missing or non-string dtype");
      if (shape == v.end() || !shape->is_array()) corrupt(where + ": missing or non-array shape");
      if (offs == v.end() || !offs->is_array() || offs->size() != 2)
        corrupt(where + ": data_offsets must be an array of two integers");

      TensorInfo t;
      t.name = name;
      t.dtype_name = dt->get<std::string>();
      const auto elem = dtype_element_bytes(t.dtype_name);
      if (!elem) {
        const bool sub_byte = std::find(std::begin(kSubByteDTypes), std::end(kSubByteDTypes),
                                        t.dtype_name) != std::end(kSubByteDTypes);
        throw_error(sub_byte ? ErrorCode::kUnsupported : ErrorCode::kCorruptData,
                    where + ": " + (sub_byte ? "unsupported" : "unknown") + " dtype '" +
                        printable(t.dtype_name) + "'");
      }
      t.element_bytes = *elem;
      t.dtype = dtype_from_name(t.dtype_name);

      if (shape->size() > static_cast<size_t>(opt.max_dims))
        corrupt(where + ": " + num(shape->size()) + " dimensions, more than " +
                std::to_string(opt.max_dims));
      uint64_t numel = 1;
      bool zero = false, overflow = false;
      for (const json& d : *shape) {
        const auto dim = as_u64(d);
        if (!dim || *dim > kInt64Max)
          corrupt(where + ": shape entries must be non-negative integers");
        t.shape.push_back(static_cast<int64_t>(*dim));
        if (*dim == 0) zero = true;
        if (!overflow && *dim != 0 && numel > kInt64Max / *dim) overflow = true;
        if (!overflow) numel *= *dim;
      }
      // [2^40, 2^40, 0] is empty, not an overflow; without a zero the product must fit int64
      // and so must its size in bytes.
      if (zero) numel = 0;
      if (!zero && overflow) corrupt(where + ": element count overflows int64");
      if (numel > kInt64Max / static_cast<uint64_t>(t.element_bytes))
        corrupt(where + ": byte size overflows int64");
      const uint64_t nbytes = numel * static_cast<uint64_t>(t.element_bytes);

      const auto b = as_u64((*offs)[0]), e = as_u64((*offs)[1]);
      if (!b || !e) corrupt(where + ": data_offsets must be non-negative integers");
      if (*b > *e) corrupt(where + ": data_offsets begin " + num(*b) + " > end " + num(*e));
      if (*e > data_size)
        corrupt(where + ": data_offsets end " + num(*e) + " is past the data section (" +
                num(data_size) + " bytes)");
      if (*e - *b != nbytes)
        corrupt(where + ": data_offsets span " + num(*e - *b) + " bytes but " + t.dtype_name + " " +
                "shape needs " + num(nbytes));
      t.begin = *b;
      t.end = *e;
      tensors_.push_back(std::move(t));
    }
    std::sort(metadata_.begin(), metadata_.end());

    // The tensors must tile the data section: no overlap (two names for the same bytes, or
    // bytes that mean two things), no gap and nothing after the last tensor.
    std::stable_sort(tensors_.begin(), tensors_.end(),
                     [](const TensorInfo& a, const TensorInfo& b) {
                       return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                     });
    uint64_t expect = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorInfo& t = tensors_[i];
      if (t.begin < expect)
        corrupt("tensor '" + printable(t.name) + "' [" + num(t.begin) + ", " + num(t.end) +
                ") overlaps tensor '" + printable(tensors_[i - 1].name) + "'");
      if (t.begin > expect)
        corrupt("data section has a gap of " + num(t.begin - expect) + " bytes before tensor '" +
                printable(t.name) + "'");
      expect = t.end;
    }
    if (expect != data_size)
      corrupt("data section has " + num(data_size - expect) +
              " bytes after the last tensor (tensors end at " + num(expect) + " of " +
              num(data_size) + ")");
    by_name_.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
    return Status::ok_status();
  } catch (const Error& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "out of memory while parsing a safetensors header");
  }
}

Expected<std::unique_ptr<File>> File::parse(const uint8_t* data, size_t size,
                                            const OpenOptions& opt) {
  std::unique_ptr<File> f(new File());
  f->base_ = data;
  f->size_ = data ? size : 0;
  if (Status s = f->parse_all(opt); !s.ok()) return s;
  return Expected<std::unique_ptr<File>>(std::move(f));
}

Expected<std::unique_ptr<File>> File::open(const std::string& path, const OpenOptions& opt) {
  auto m = formats::map_file(path);
  if (!m) return m.status();
  std::unique_ptr<File> f(new File());
  f->mapping_ = m->mapping;
  f->base_ = m->data;
  f->size_ = m->size;
  f->path_ = path;
  if (Status s = f->parse_all(opt); !s.ok()) return Status(s.code(), path + ": " + s.message());
  return Expected<std::unique_ptr<File>>(std::move(f));
}

// ---- sharded checkpoints ----

namespace {

bool plain_file_name(std::string_view s) {
  if (s.empty() || s.size() > 255 || s == "." || s == "..") return false;
  for (char c : s)
    if (c == '/' || c == '\\' || c == '\0') return false;
  return true;
}

}  // namespace

Expected<Index> parse_index(std::string_view text, const OpenOptions& opt) {
  try {
    if (text.size() > opt.max_index_bytes)
      corrupt("index has " + num(text.size()) + " bytes, more than the limit of " +
              num(opt.max_index_bytes));
    json j = parse_object(text, kMaxIndexDepth, "index");
    Index idx;
    const auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) corrupt("index has no weight_map object");
    if (wm->size() > opt.max_tensors)
      corrupt("index lists " + num(wm->size()) + " tensors, more than the limit of " +
              num(opt.max_tensors));
    std::set<std::string> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        corrupt("weight_map entry of '" + printable(it.key()) + "' is not a string");
      const std::string shard = it.value().get<std::string>();
      if (!plain_file_name(shard))
        corrupt("weight_map names shard '" + printable(shard) + "' for tensor '" +
                printable(it.key()) + "': shards must be plain file names in the index's folder");
      shards.insert(shard);
      if (shards.size() > opt.max_shards)
        corrupt("index names more than " + num(opt.max_shards) + " shards");
      idx.weight_map.emplace(it.key(), shard);
    }
    if (const auto md = j.find("metadata"); md != j.end() && md->is_object()) {
      if (const auto ts = md->find("total_size"); ts != md->end()) {
        // Some writers store it as a float; only an exact integer is used.
        if (auto v = as_u64(*ts)) idx.total_size = *v;
      }
    }
    idx.shards.assign(shards.begin(), shards.end());
    return idx;
  } catch (const Error& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "out of memory while parsing a safetensors index");
  }
}

const Checkpoint::Entry* Checkpoint::find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

void Checkpoint::finish() {
  sorted_.assign(entries_.begin(), entries_.end());
  std::sort(sorted_.begin(), sorted_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

Expected<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& path,
                                                       const OpenOptions& opt) {
  namespace fs = std::filesystem;
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  const bool is_index = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (!is_index) {
    auto f = File::open(path, opt);
    if (!f) return f.status();
    c->files_.push_back(std::move(*f));
    for (const TensorInfo& t : c->files_[0]->tensors())
      c->entries_.emplace(t.name, Entry{c->files_[0].get(), &t});
    c->finish();
    return c;
  }
  auto text = formats::read_small_file(path, opt.max_index_bytes);
  if (!text) return text.status();
  auto idx = parse_index(*text, opt);
  if (!idx) return Status(idx.status().code(), path + ": " + idx.status().message());
  const fs::path dir = fs::path(path).parent_path();
  std::unordered_map<std::string, const File*> by_shard;
  for (const std::string& shard : idx->shards) {
    auto f = File::open((dir / shard).string(), opt);
    if (!f) return f.status();
    by_shard.emplace(shard, f->get());
    c->files_.push_back(std::move(*f));
  }
  uint64_t total = 0;
  for (const auto& [name, shard] : idx->weight_map) {
    const File* f = by_shard.at(shard);
    const TensorInfo* t = f->find_tensor(name);
    if (!t)
      return Status(ErrorCode::kCorruptData, path + ": tensor '" + printable(name) +
                                                 "' is not in shard '" + printable(shard) +
                                                 "' where the index puts it");
    c->entries_.emplace(t->name, Entry{f, t});
    total += t->nbytes();
  }
  if (idx->total_size && *idx->total_size != total)
    log_warn(path + ": metadata.total_size is " + num(*idx->total_size) +
             " but the listed tensors hold " + num(total) + " bytes");
  c->finish();
  return c;
}

}  // namespace tessera::safetensors
