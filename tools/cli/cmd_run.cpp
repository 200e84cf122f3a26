// `tessera run`: generate text from a prompt, streaming tokens to stdout and timings to stderr.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "command.h"
#include "tessera/engine.h"

namespace tessera::cli {
namespace {

const char* kUsage =
    "usage: tessera run [-m MODEL.gguf|HF_DIR] [--chat] [--system TEXT] [-n N] [--temp T]\n"
    "                   [--top-k K] [--top-p P] [--min-p M] [--seed S] [--repeat-penalty R]\n"
    "                   [--presence-penalty X] [--frequency-penalty X] [--repeat-last-n N]\n"
    "                   [--no-repeat-ngram N] [--stop STR]... [--ctx N] [--threads N]\n"
    "                   [--kv-f32] [--ignore-eos] [--no-bos] [--print-token-ids]\n"
    "                   [--chat-template FILE]\n"
    "                   [--device cpu|cuda] [--dummy ARCH] [--dummy-type TYPE] PROMPT\n";

// "LABEL: 1 2 3" on stderr (--print-token-ids).
void print_id_list(const char* label, const std::vector<int32_t>& ids) {
  std::fprintf(stderr, "%s:", label);
  for (int32_t id : ids) std::fprintf(stderr, " %d", id);
  std::fprintf(stderr, "\n");
}

bool parse_number(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0';
}

int cmd_run(int argc, char** argv) {
  Args args(argc, argv);
  if (args.flag("help") || args.flag("h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string model = default_model_path(), system, v;
  args.value("m", &model);
  args.value("model", &model);
  const bool chat = args.flag("chat");
  const bool print_ids = args.flag("print-token-ids");
  args.value("system", &system);
  GenerationParams p;
  EngineOptions eo;
  std::string bad;
  auto num = [&](const char* name, auto* field, double lo, double hi) {
    if (!args.value(name, &v)) return;
    double d;
    if (!parse_number(v, &d) || d < lo || d > hi) {
      if (bad.empty()) bad = std::string("invalid value for --") + name + ": " + v;
      return;
    }
    *field = static_cast<std::remove_pointer_t<decltype(field)>>(d);
  };
  num("n", &p.max_tokens, 0, 1 << 20);
  num("temp", &p.temperature, 0, 100);
  num("top-k", &p.top_k, 0, 1 << 30);
  num("top-p", &p.top_p, 0, 1);
  num("min-p", &p.min_p, 0, 1);
  num("seed", &p.seed, 0, 1.8e19);
  num("repeat-penalty", &p.repetition_penalty, 0, 100);
  num("presence-penalty", &p.presence_penalty, -100, 100);
  num("frequency-penalty", &p.frequency_penalty, -100, 100);
  num("repeat-last-n", &p.penalty_last_n, -1, 1 << 30);
  num("no-repeat-ngram", &p.no_repeat_ngram, 0, 1024);
  num("ctx", &eo.context_length, 16, 1 << 20);
  num("threads", &eo.threads, 1, 1024);
  p.stop = args.values("stop");
  p.ignore_eos = args.flag("ignore-eos");
  eo.kv_cache_f32 = args.flag("kv-f32");
  args.value("device", &eo.device);
  args.value("dummy", &eo.dummy);
  args.value("dummy-type", &eo.dummy_type);
  if (args.flag("no-bos")) p.add_bos = false;
  std::string template_file;
  if (args.value("chat-template", &template_file) && bad.empty())
    read_text_file(template_file, &eo.chat_template, &bad);
  std::vector<std::string> pos = args.positionals(&bad);
  if (bad.empty() && pos.size() != 1) bad = "expected exactly one PROMPT argument";
  if (!bad.empty()) {
    std::fprintf(stderr, "tessera run: %s\n%s", bad.c_str(), kUsage);
    return 2;
  }

  auto engine = Engine::load(model, eo);
  if (!engine) {
    std::fprintf(stderr, "tessera run: cannot load %s: %s\n", model.c_str(),
                 engine.status().to_string().c_str());
    return 1;
  }
  const std::string& prompt = pos[0];
  std::vector<int32_t> ids;
  if (chat) {
    std::vector<Message> msgs;
    if (!system.empty()) msgs.push_back({"system", system});
    msgs.push_back({"user", prompt});
    auto t = (*engine)->tokenize_chat(msgs);
    if (!t) {
      std::fprintf(stderr, "tessera run: %s\n", t.status().to_string().c_str());
      return 1;
    }
    ids = std::move(*t);
  } else {
    auto t = (*engine)->tokenize(prompt, p.add_bos, p.parse_special);
    if (!t) {
      std::fprintf(stderr, "tessera run: %s\n", t.status().to_string().c_str());
      return 1;
    }
    ids = std::move(*t);
  }
  if (print_ids) print_id_list("prompt ids", ids);
  const int64_t n_prompt = static_cast<int64_t>(ids.size());
  if (n_prompt > 512) {  // long prefills show progress on stderr
    p.on_prompt_progress = [n_prompt](int64_t done) {
      std::fprintf(stderr, "\rprompt: %lld/%lld tokens%s", static_cast<long long>(done),
                   static_cast<long long>(n_prompt), done == n_prompt ? "\n" : "");
    };
  }
  auto r = (*engine)->generate_from_tokens(std::move(ids), p, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!r) {
    std::fprintf(stderr, "tessera run: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (print_ids) print_id_list("token ids", r->tokens);
  const char* finish = r->finish_reason == FinishReason::kStop ? "stop" : "length";
  std::fprintf(stderr,
               "load: %.2f s | prompt: %d tokens, %.1f tokens/s | generation: %d tokens, %.1f "
               "tokens/s | finish: %s\n",
               (*engine)->load_seconds(), r->prompt_tokens,
               r->prompt_tokens / std::max(r->prompt_seconds, 1e-9), r->generated_tokens,
               r->generated_tokens / std::max(r->generation_seconds, 1e-9), finish);
  return 0;
}

}  // namespace
TESSERA_CLI_COMMAND("run", "generate text from a prompt (streams to stdout)", cmd_run);
}  // namespace tessera::cli
