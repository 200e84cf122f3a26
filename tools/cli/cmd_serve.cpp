// `tessera serve`: an OpenAI-compatible HTTP server on the CPU engine (docs/design/serving.md).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "command.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "tessera/engine.h"

namespace tessera::cli {
namespace {

const char* kUsage =
    "usage: tessera serve [-m MODEL.gguf|HF_DIR] [--host H] [--port P] [--api-key-file F]\n"
    "                     [--model-name NAME] [--ctx N] [--threads N] [--max-queue N]\n"
    "                     [--allow-priority] [--kv-cache-tokens N] [--max-running N]\n"
    "                     [--max-step-tokens N] [--no-prefix-cache] [--device cpu|cuda]\n"
    "                     [--dummy ARCH] [--dummy-type bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k]\n"
    "                     [--max-connections N] [--drain-timeout SECONDS] [--read-timeout SECONDS]\n"
    "                     [--chat-template FILE]\n"
    "Serves POST /v1/chat/completions, POST /v1/completions, GET /v1/models, /health, /ready,\n"
    "/metrics. --port 0 picks a free port; the chosen address is printed to stderr.\n";

// One key per line; blank lines and lines starting with '#' are skipped.
bool read_api_keys(const std::string& path, std::vector<std::string>* keys, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = "cannot read --api-key-file " + path;
    return false;
  }
  std::string line;
  while (std::getline(in, line)) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const auto e = line.find_last_not_of(" \t\r");
    keys->push_back(line.substr(b, e - b + 1));
  }
  if (keys->empty()) *why = "--api-key-file " + path + " holds no keys";
  return !keys->empty();
}

std::string model_id_from_path(std::string path) {
  // A Hugging Face checkpoint is named by its folder ("dir/", "dir/config.json").
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path == "config.json" || (path.size() > 12 && path.ends_with("/config.json")))
    path = path.size() > 12 ? path.substr(0, path.size() - 12) : ".";
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (auto dot = name.rfind(".gguf"); dot != std::string::npos && dot + 5 == name.size())
    name.resize(dot);
  return name;
}

int cmd_serve(int argc, char** argv) {
  Args args(argc, argv);
  if (args.flag("help") || args.flag("h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string model = default_model_path(), v, bad, key_file, model_name;
  args.value("m", &model);
  args.value("model", &model);
  server::ServerOptions so;
  EngineOptions eo;
  server::EngineLoopOptions lo;
  args.value("host", &so.host);
  args.value("model-name", &model_name);
  auto num = [&](const char* name, long min, long max, auto apply) {
    if (!args.value(name, &v)) return;
    long n;
    if (!parse_int(v, min, max, &n)) {
      if (bad.empty()) bad = std::string("invalid value for --") + name + ": " + v;
      return;
    }
    apply(n);
  };
  num("port", 0, 65535, [&](long n) { so.port = static_cast<uint16_t>(n); });
  num("ctx", 16, 1 << 20, [&](long n) { eo.context_length = static_cast<int32_t>(n); });
  num("threads", 1, 1024, [&](long n) { eo.threads = static_cast<int32_t>(n); });
  num("max-queue", 1, 1 << 16, [&](long n) { lo.max_queue = static_cast<size_t>(n); });
  // Continuous batching: the KV cache all sequences share (default: 4 full contexts' worth,
  // at least 16k tokens), the batch size and the per-step token budget (chunked prefill).
  eo.kv_cache_tokens = -1;
  num("kv-cache-tokens", 16, 1L << 30, [&](long n) { eo.kv_cache_tokens = n; });
  num("max-running", 1, 4096, [&](long n) { eo.max_running = static_cast<int32_t>(n); });
  num("max-step-tokens", 1, 1 << 16, [&](long n) { eo.max_step_tokens = static_cast<int32_t>(n); });
  eo.prefix_caching = !args.flag("no-prefix-cache");
  args.value("device", &eo.device);
  args.value("dummy", &eo.dummy);
  args.value("dummy-type", &eo.dummy_type);
  num("max-connections", 1, 1 << 16, [&](long n) { so.max_connections = static_cast<size_t>(n); });
  num("drain-timeout", 0, 3600, [&](long n) { so.drain_timeout = std::chrono::seconds(n); });
  num("read-timeout", 1, 3600, [&](long n) { so.read_timeout = std::chrono::seconds(n); });
  so.parse.allow_priority = args.flag("allow-priority");
  const bool have_keys = args.value("api-key-file", &key_file);
  std::string template_file;
  if (args.value("chat-template", &template_file) && bad.empty())
    read_text_file(template_file, &eo.chat_template, &bad);
  std::vector<std::string> pos = args.positionals(&bad);
  if (bad.empty() && !pos.empty()) bad = "unexpected argument " + pos[0];
  if (bad.empty() && have_keys) read_api_keys(key_file, &so.api_keys, &bad);
  if (!bad.empty()) {
    std::fprintf(stderr, "tessera serve: %s\n%s", bad.c_str(), kUsage);
    return 2;
  }

  // SIGTERM/SIGINT are taken by one waiting thread (sigwait), so block them before any thread
  // (the engine's pool included) exists; every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  if (eo.kv_cache_tokens < 0) {
    const int64_t ctx = eo.context_length > 0 ? eo.context_length : 4096;
    eo.kv_cache_tokens = std::max<int64_t>(16384, 4 * ctx);
  }
  auto engine = Engine::load(model, eo);
  if (!engine) {
    std::fprintf(stderr, "tessera serve: cannot load %s: %s\n", model.c_str(),
                 engine.status().to_string().c_str());
    return 1;
  }
  server::Metrics metrics;
  so.parse.model_id = model_name.empty() ? model_id_from_path(model) : model_name;
  so.parse.context_length = static_cast<int32_t>((*engine)->summary().context_length);
  const EngineStats kv = (*engine)->stats();
  server::EngineLoop loop(std::move(*engine), lo, &metrics, eo.max_running);
  server::HttpServer http(so, &loop, &metrics);
  if (auto st = http.listen(); !st.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", st.message().c_str());
    return 1;
  }
  loop.start();
  std::thread([&http, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "tessera serve: signal %d, draining\n", sig);
    http.request_stop();
  }).detach();
  std::fprintf(stderr,
               "tessera serve: model %s (context %d, KV cache %lld tokens in %lld blocks, batch "
               "%d) listening on http://%s:%u\n",
               so.parse.model_id.c_str(), so.parse.context_length,
               static_cast<long long>(kv.kv_blocks_total * kv.kv_block_size),
               static_cast<long long>(kv.kv_blocks_total), eo.max_running, so.host.c_str(),
               static_cast<unsigned>(http.port()));
  http.run();
  std::fprintf(stderr, "tessera serve: stopped\n");
  return 0;
}

}  // namespace
TESSERA_CLI_COMMAND("serve", "OpenAI-compatible HTTP server (chat/completions, models, metrics)",
                    cmd_serve);
}  // namespace tessera::cli
