// `tessera score`: teacher-forced logits of a token sequence, written as raw f32 for reference
// comparisons (tests/reference compares them with llama.cpp's).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "command.h"
#include "tessera/engine.h"

namespace tessera::cli {
namespace {

int cmd_score(int argc, char** argv) {
  Args args(argc, argv);
  std::string model = default_model_path(), ids_text, out_path, err;
  args.value("m", &model);
  const bool have_ids = args.value("ids", &ids_text);
  const bool have_out = args.value("out", &out_path);
  const bool kv_f32 = args.flag("kv-f32");
  std::string device = "cpu";
  args.value("device", &device);
  auto pos = args.positionals(&err);
  if (!err.empty() || !have_ids || !have_out || !pos.empty()) {
    std::fprintf(stderr, "usage: tessera score [-m MODEL] [--kv-f32] [--device cpu|cuda] --ids 1,2,3 --out LOGITS.f32\n%s\n", err.c_str());
    return 2;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < ids_text.size();) {
    char* end = nullptr;
    const long v = std::strtol(ids_text.c_str() + i, &end, 10);
    if (end == ids_text.c_str() + i || v < 0 || v > INT32_MAX) {
      std::fprintf(stderr, "tessera score: bad token id list\n");
      return 2;
    }
    ids.push_back(static_cast<int32_t>(v));
    i = static_cast<size_t>(end - ids_text.c_str());
    if (i < ids_text.size() && ids_text[i] == ',') ++i;
  }
  EngineOptions eo;
  eo.context_length = static_cast<int32_t>(ids.size()) + 16;
  eo.kv_cache_f32 = kv_f32;
  eo.device = device;
  auto engine = Engine::load(model, eo);
  if (!engine) {
    std::fprintf(stderr, "tessera score: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  auto logits = (*engine)->score(ids);
  if (!logits) {
    std::fprintf(stderr, "tessera score: %s\n", logits.status().to_string().c_str());
    return 1;
  }
  FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f || std::fwrite(logits->data(), sizeof(float), logits->size(), f) != logits->size()) {
    std::fprintf(stderr, "tessera score: cannot write %s\n", out_path.c_str());
    if (f) std::fclose(f);
    return 1;
  }
  std::fclose(f);
  return 0;
}

}  // namespace
TESSERA_CLI_COMMAND("score", "write teacher-forced logits of token ids (raw f32)", cmd_score);
}  // namespace tessera::cli
