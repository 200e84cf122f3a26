// safetensors reader over memory-mapped files, single or sharded.
//
// Layout of a file: an 8-byte little-endian header length N, N bytes of JSON (UTF-8, may be
// padded with trailing spaces), then the data section. The JSON maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) plus
// an optional "__metadata__" object of string values.
//
// Everything in the file is untrusted. Before anything is used: N is bounded (OpenOptions) and
// lies inside the file, the JSON is valid UTF-8 and nests no deeper than the format needs,
// tensor names are unique, dtypes are known, every dimension is a non-negative integer, the
// element count and byte size are computed with overflow checks and must equal
// end - begin, and the tensors tile the data section exactly (sorted by offset they start at 0,
// do not overlap, leave no gap and end at the end of the file: the reference implementation's
// rule). A bad file yields kCorruptData naming what was wrong; a valid file with a dtype this
// reader does not know (sub-byte float formats) yields kUnsupported.
//
//   auto f = safetensors::File::open("model.safetensors");
//   if (!f) return f.status();
//   const safetensors::TensorInfo* t = (*f)->find_tensor("model.embed_tokens.weight");
//   const uint8_t* bytes = (*f)->tensor_data(*t);
//
//   auto ckpt = safetensors::Checkpoint::open("dir/model.safetensors.index.json");  // sharded
//   const safetensors::Checkpoint::Entry* e = (*ckpt)->find("lm_head.weight");
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "tessera/status.h"

namespace tessera::safetensors {

struct OpenOptions {
  uint64_t max_header_bytes = 100u << 20;  // the reference implementation's limit
  uint64_t max_tensors = 1u << 20;
  int max_dims = 8;
  // Index files (model.safetensors.index.json): size and number of distinct shards.
  uint64_t max_index_bytes = 64u << 20;
  uint64_t max_shards = 1u << 16;
};

// Element size of a safetensors dtype name ("F32", "BF16", "I64", "F8_E4M3", ...), or nullopt
// for names the format does not define or that pack several elements per byte.
std::optional<int64_t> dtype_element_bytes(std::string_view name);
// The Tessera DType a safetensors dtype maps to (F32, F16, BF16, I32), or nullopt.
std::optional<DType> dtype_from_name(std::string_view name);

struct TensorInfo {
  std::string name;
  std::string dtype_name;      // as written ("BF16")
  std::optional<DType> dtype;  // nullopt: a dtype Tessera does not compute with (I64, F8_*, ...)
  int64_t element_bytes = 0;
  std::vector<int64_t> shape;   // outermost first (row-major)
  uint64_t begin = 0, end = 0;  // byte range inside the data section, validated
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
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

  const std::string& path() const { return path_; }  // "" for parse()
  size_t file_size() const { return size_; }
  uint64_t header_size() const { return header_size_; }
  uint64_t data_offset() const { return 8 + header_size_; }  // absolute offset of the data

  // "__metadata__" entries, sorted by key.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  std::optional<std::string_view> find_metadata(std::string_view key) const;

  // Tensors in data order (ascending offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const TensorInfo& t) const { return base_ + data_offset() + t.begin; }

  // Keeps the mapping alive for tensors viewing it after the File object is gone.
  std::shared_ptr<void> keepalive() const { return mapping_; }

 private:
  File() = default;
  Status parse_all(const OpenOptions& opt);

  std::shared_ptr<void> mapping_;  // null for parse()
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint64_t header_size_ = 0;
  std::string path_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;  // views into tensors_[i].name
};

// Parsed model.safetensors.index.json: tensor name -> shard file name. Shard names must be
// plain file names (no directory part, no "." or ".."): they are opened next to the index.
struct Index {
  std::map<std::string, std::string> weight_map;
  std::optional<uint64_t> total_size;  // metadata.total_size when present
  std::vector<std::string> shards;     // distinct shard names, sorted
};
Expected<Index> parse_index(std::string_view json_text, const OpenOptions& opt = {});

// All tensors of a checkpoint: one .safetensors file, or the shards an index names.
class Checkpoint {
 public:
  // `path`: a .safetensors file or a model.safetensors.index.json.
  static Expected<std::unique_ptr<Checkpoint>> open(const std::string& path,
                                                    const OpenOptions& opt = {});

  struct Entry {
    const File* file;
    const TensorInfo* info;
    const uint8_t* data() const { return file->tensor_data(*info); }
  };
  // nullptr when the checkpoint has no tensor of that name.
  const Entry* find(std::string_view name) const;
  // Every reachable tensor, sorted by name.
  const std::vector<std::pair<std::string_view, Entry>>& entries() const { return sorted_; }
  const std::vector<std::unique_ptr<File>>& files() const { return files_; }

 private:
  Checkpoint() = default;
  void finish();

  std::vector<std::unique_ptr<File>> files_;
  std::unordered_map<std::string_view, Entry> entries_;  // names view File-owned strings
  std::vector<std::pair<std::string_view, Entry>> sorted_;
};

}  // namespace tessera::safetensors
