// Tokenizer of a model path for the tools that need only the tokenizer (tokenize): a GGUF file,
// a Hugging Face checkpoint folder (or its config.json), or a tokenizer.json itself.
#include <filesystem>

#include "command.h"
#include "formats/file_util.h"
#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"

namespace tessera::cli {

Expected<std::unique_ptr<Tokenizer>> open_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string tok_json;
  if (fs::path(path).filename() == "tokenizer.json") {
    tok_json = path;
  } else if (hf::is_checkpoint_path(path)) {
    const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
    tok_json = (dir / "tokenizer.json").string();
  }
  if (tok_json.empty()) {
    auto file = gguf::File::open(path);
    if (!file) return file.status();
    return Tokenizer::from_gguf(**file);
  }
  auto text = formats::read_small_file(tok_json, hf::kMaxJsonBytes);
  if (!text) return text.status();
  std::string cfg_text;
  const fs::path cfg = fs::path(tok_json).parent_path() / "tokenizer_config.json";
  if (fs::is_regular_file(cfg, ec)) {
    auto c = formats::read_small_file(cfg.string(), hf::kMaxJsonBytes);
    if (!c) return c.status();
    cfg_text = std::move(*c);
  }
  return Tokenizer::from_hf_json(*text, cfg_text);
}

}  // namespace tessera::cli
