// `tessera bench`: how close the engine runs a model to this machine's hardware limits.
// Measures the ceilings first (copy bandwidth, FMA rate), then batch-1 decode, prefill and
// batched decode through the same Engine API the server uses, and prints every result with its
// floor (DESIGN.md section 5). Writes a Markdown report (default out/tessera_bench.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "command.h"
#include "kernels/cpu/ceilings.h"
#ifdef TESSERA_HAVE_CUDA
#include "backend/cuda/ceilings.h"
#endif
#include "tessera/engine.h"

namespace tessera::cli {
namespace {

const char* kUsage =
    "usage: tessera bench [-m MODEL.gguf] [--threads N] [--decode-tokens N] [--decode-ctx N]\n"
    "                     [--prefill N,N..] [--batch N,N..] [--batch-gen N] [--batch-ctx N]\n"
    "                     [--max-step-tokens N] [--json] [--out FILE.md] [--device cpu|cuda]\n"
    "                     [--profile]\n"
    "                     [--dummy ARCH] [--dummy-type bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k]\n"
    "Prints batch-1 decode ms/token (greedy, and sampled at temperature 0.8, top-p 0.95), prefill\n"
    "tokens/s and batched decode tokens/s, each as a percentage of its floor (weights + KV bytes\n"
    "at the measured copy bandwidth; FLOPs at the measured FMA rate). Batch-1 decode generates\n"
    "--decode-tokens tokens after a --decode-ctx-token prompt. Batched decode: N sequences with\n"
    "--batch-ctx-token prompts each generate --batch-gen tokens; the rate counts only steps that\n"
    "decode all N together; the largest N runs again sampled (temperature 0.8, top-p 0.95).\n"
    "Defaults: --decode-tokens 64 --decode-ctx 16 --prefill 512,2048 --batch 16,64,128\n"
    "--batch-gen 16 --batch-ctx 512 on cuda, 32 on cpu; --max-step-tokens max(2048, longest\n"
    "prefill); --out out/tessera_bench.md\n"
    "--profile (or TESSERA_CUDA_PROFILE=1), cuda: the GPU time of every op per step shape and its\n"
    "% of floor (stderr; steps run eagerly, without CUDA graphs).\n";

using Clock = std::chrono::steady_clock;

// "512,2048" -> {512, 2048}; empty (with *ok false) on any bad item.
std::vector<int> parse_list(const std::string& s, bool* ok) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  long v = 0;
  while (std::getline(in, item, ',')) {
    if (!parse_int(item, 1, 1 << 20, &v)) {
      *ok = false;
      return {};
    }
    out.push_back(static_cast<int>(v));
  }
  *ok = !out.empty();
  return out;
}

std::vector<int32_t> random_prompt(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(100, static_cast<int32_t>(vocab) - 100);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = pick(rng);
  return ids;
}

struct Row {
  std::string what, value, floor, pct;
  double ratio = 0;  // floor / measured time (fraction of speed of light)
};

// The steps of a batched run that decoded every prompt's sequence together.
struct BatchTiming {
  double decode_seconds = 0;
  int64_t decode_steps = 0;
};

// A chat's sampling, for the bench's sampled rows (named by kChatSampling).
constexpr const char* kChatSampling = "temperature 0.8 top-p 0.95";
void sample_like_a_chat(GenerationParams& p, uint64_t seed) {
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.seed = seed;
}

// Runs `prompts` to `max_tokens` each with continuous batching; greedy, or sampled like a chat
// (a seed per request).
BatchTiming run_batch(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                      bool sampled = false) {
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  int done = 0;
  uint64_t seed = 0;
  for (const auto& ids : prompts) {
    if (sampled) sample_like_a_chat(p, ++seed);
    auto id = e.submit(ids, p, {.on_text = {}, .on_done = [&](Expected<GenerationResult>) { ++done; }, .on_logprob = {}});
    if (!id) throw std::runtime_error(id.status().to_string());
  }
  BatchTiming r;
  const int64_t n = static_cast<int64_t>(prompts.size());
  for (auto s0 = Clock::now();; s0 = Clock::now()) {
    if (!e.step()) break;
    const EngineStats st = e.stats();
    if (st.last_step_tokens == n && st.last_step_sequences == n) {
      r.decode_seconds += std::chrono::duration<double>(Clock::now() - s0).count();
      ++r.decode_steps;
    }
  }
  if (done != static_cast<int>(prompts.size())) throw std::runtime_error("bench: requests lost");
  return r;
}

int cmd_bench(int argc, char** argv) {
  Args args(argc, argv);
  if (args.flag("help") || args.flag("h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string model = default_model_path(), v, bad, out_path = "out/tessera_bench.md";
  args.value("m", &model);
  args.value("model", &model);
  args.value("out", &out_path);
  const bool json = args.flag("json");
  const bool profile = args.flag("profile");
  if (profile) setenv("TESSERA_CUDA_PROFILE", "1", 1);  // read when the model loads
  std::string device = "cpu", dummy, dummy_type = "bf16";
  args.value("device", &device);
  args.value("dummy", &dummy);
  args.value("dummy-type", &dummy_type);
  int threads = 0, decode_tokens = 64, decode_ctx = 16, batch_gen = 16, batch_ctx = -1,
      max_step_tokens = -1;
  std::vector<int> prefill = {512, 2048}, batches = {16, 64, 128};
  auto int_arg = [&](const char* name, long lo, long hi, int* dst) {
    long n = 0;
    if (!args.value(name, &v)) return;
    if (parse_int(v, lo, hi, &n)) *dst = static_cast<int>(n);
    else bad = std::string("invalid --") + name + " " + v;
  };
  int_arg("threads", 1, 1024, &threads);
  int_arg("decode-tokens", 2, 1 << 16, &decode_tokens);
  int_arg("decode-ctx", 1, 1 << 20, &decode_ctx);
  int_arg("batch-gen", 2, 1 << 16, &batch_gen);
  int_arg("batch-ctx", 1, 1 << 20, &batch_ctx);
  int_arg("max-step-tokens", 1, 1 << 20, &max_step_tokens);
  for (auto [name, dst] : {std::pair{"prefill", &prefill}, std::pair{"batch", &batches}}) {
    if (!args.value(name, &v)) continue;
    bool ok = true;
    *dst = parse_list(v, &ok);
    if (!ok) bad = std::string("invalid --") + name + " " + v;
  }
  if (auto pos = args.positionals(&bad); bad.empty() && !pos.empty()) bad = "unexpected " + pos[0];
  if (!bad.empty()) {
    std::fprintf(stderr, "tessera bench: %s\n%s", bad.c_str(), kUsage);
    return 2;
  }

  ThreadPool own(threads > 0 ? threads : default_thread_pool().size());
  double bw = 0, fma = 0;  // bytes/s; FLOP/s of the matrix ceiling
  std::string hw, peak_name;
  if (device == "cuda") {
#ifdef TESSERA_HAVE_CUDA
    std::fprintf(stderr, "bench: measuring GPU ceilings...\n");
    bw = cuda::measure_copy_bandwidth_gbs() * 1e9;
    fma = cuda::measure_bf16_gemm_tflops() * 1e12;
    hw = "CUDA device 0";
    peak_name = "bf16 GEMM (cuBLASLt 8192^3)";
#else
    std::fprintf(stderr, "tessera bench: this build has no CUDA backend\n");
    return 1;
#endif
  } else {
    std::fprintf(stderr, "bench: measuring ceilings (%d threads, %s)...\n", own.size(),
                 cpu_features_string().c_str());
    bw = cpu::measure_copy_bandwidth(own) * 1e9;
    fma = cpu::measure_fma_peak(own) * 1e9;
    hw = std::to_string(own.size()) + " threads, " + cpu_features_string();
    peak_name = "f32 FMA";
  }

  if (profile && device != "cuda") std::fprintf(stderr, "bench: --profile applies to --device cuda only\n");
  if (batch_ctx < 0) batch_ctx = device == "cuda" ? 512 : 32;
  const int max_prefill = *std::max_element(prefill.begin(), prefill.end());
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  EngineOptions eo;
  eo.threads = own.size();
  // One step takes the longest prefill whole (GEMM efficiency), and at least 2048 tokens.
  if (max_step_tokens <= 0) max_step_tokens = std::max(max_prefill, 2048);
  // While later prompts of a batched run are still in prefill, the first ones already decode:
  // generating batch_gen tokens more than the prefill steps leaves ~batch_gen steps with all b.
  auto prefill_steps = [&](int b) {
    return static_cast<int>((static_cast<int64_t>(b) * batch_ctx + max_step_tokens - 1) / max_step_tokens);
  };
  const int64_t max_batch_len = batch_ctx + batch_gen + prefill_steps(max_batch) + 16;
  eo.context_length = static_cast<int32_t>(
      std::max<int64_t>({max_prefill + 8, decode_ctx + decode_tokens + 8, max_batch_len}));
  eo.kv_cache_tokens = std::max<int64_t>(static_cast<int64_t>(max_batch) * max_batch_len,
                                         eo.context_length);
  eo.max_running = max_batch;
  eo.max_step_tokens = max_step_tokens;
  eo.prefix_caching = false;  // every run computes its prompts
  eo.device = device;
  eo.dummy = dummy;
  eo.dummy_type = dummy_type;
  auto engine = Engine::load(model, eo);
  if (!engine) {
    std::fprintf(stderr, "tessera bench: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  Engine& e = **engine;
  const ModelSummary& s = e.summary();
  const double W = static_cast<double>(s.decode_weight_bytes);
  const double kv_tok = static_cast<double>(s.kv_bytes_per_token);
  std::vector<Row> rows;
  char buf[160];
  auto fmt = [&](const char* f, double x) {
    std::snprintf(buf, sizeof buf, f, x);
    return std::string(buf);
  };
  auto pct = [&](double r) { return fmt("%.1f%%", 100 * r); };
  try {
    // Warm-up (page in weights, size buffers), on the batch-1 run's shapes: a decode shape's
    // first step builds plans and its second captures a CUDA graph, outside the timed runs.
    run_batch(e, {random_prompt(decode_ctx, s.vocab, 1)}, 4);

    // Batch-1 decode, greedy, then with a chat's sampling (temperature 0.8, top-p 0.95): the
    // second row is what a sampled token adds (on CUDA, the device sampler's passes).
    for (const bool sampled : {false, true}) {
      std::fprintf(stderr, "bench: batch-1 decode%s...\n", sampled ? ", sampled" : "");
      GenerationParams p;
      p.max_tokens = decode_tokens;
      p.ignore_eos = true;
      if (sampled) sample_like_a_chat(p, 1);
      auto r = e.generate_from_tokens(random_prompt(decode_ctx, s.vocab, 2), p);
      if (!r) throw std::runtime_error(r.status().to_string());
      const double ms = r->generation_seconds / (r->generated_tokens - 1) * 1e3;
      const double mean_ctx = decode_ctx + decode_tokens / 2.0;
      const double floor_ms = (W + kv_tok * mean_ctx) / bw * 1e3;
      rows.push_back({sampled ? std::string("decode, batch 1, ") + kChatSampling + " (ms/token)"
                              : std::string("decode, batch 1 (ms/token)"),
                      fmt("%.2f", ms), fmt("%.2f", floor_ms), pct(floor_ms / ms), floor_ms / ms});
    }
    for (int n : prefill) {
      std::fprintf(stderr, "bench: prefill %d...\n", n);
      GenerationParams p;
      p.max_tokens = 1;
      // A first run of the same length builds this shape's GEMM plans and loads its kernels.
      if (auto w = e.generate_from_tokens(random_prompt(n, s.vocab, 7 + n), p); !w)
        throw std::runtime_error(w.status().to_string());
      auto r = e.generate_from_tokens(random_prompt(n, s.vocab, 3 + n), p);
      if (!r) throw std::runtime_error(r.status().to_string());
      const double tps = n / r->prompt_seconds;
      const double flops = static_cast<double>(s.matmul_flops_per_token) * n +
                           2.0 * n * n * static_cast<double>(s.d_model * s.n_layers);
      const double floor_s = flops / fma;
      rows.push_back({"prefill " + std::to_string(n) + " (tokens/s)", fmt("%.0f", tps),
                      fmt("%.0f", n / floor_s), pct(floor_s / r->prompt_seconds),
                      floor_s / r->prompt_seconds});
    }
    // Every batch size greedy, then the largest sampled: what the device sampler's passes add.
    std::vector<std::pair<int, bool>> batch_runs;
    for (int b : batches) batch_runs.push_back({b, false});
    if (!batches.empty()) batch_runs.push_back({*std::max_element(batches.begin(), batches.end()), true});
    for (const auto& [b, sampled] : batch_runs) {
      std::fprintf(stderr, "bench: batched decode, %d sequences%s...\n", b, sampled ? ", sampled" : "");
      std::vector<std::vector<int32_t>> first, second;
      for (int i = 0; i < b; ++i) {
        first.push_back(random_prompt(batch_ctx, s.vocab, 1000 + i));
        second.push_back(random_prompt(batch_ctx, s.vocab, 5000 + i));
      }
      // Only the steps that decode all b sequences together count (not the prefill steps,
      // nor mixed ones); a first run on other prompts reaches a few such steps too, so the
      // shape's plans and CUDA graph are built before the timed run.
      run_batch(e, first, prefill_steps(b) + 4, sampled);
      const BatchTiming tg = run_batch(e, second, batch_gen + prefill_steps(b), sampled);
      if (tg.decode_steps == 0) throw std::runtime_error("bench: no step decoded all sequences");
      const double tps = static_cast<double>(b) * tg.decode_steps / tg.decode_seconds;
      const double mean_ctx = batch_ctx + (batch_gen + prefill_steps(b)) / 2.0;
      const double step_floor_s = (W + b * kv_tok * mean_ctx) / bw;
      const double floor_tps = b / step_floor_s;
      const std::string how = sampled ? std::string(", ") + kChatSampling : "";
      rows.push_back({"decode, batch " + std::to_string(b) + how + " (tokens/s)", fmt("%.0f", tps),
                      fmt("%.0f", floor_tps), pct(tps / floor_tps), tps / floor_tps});
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "tessera bench: %s\n", ex.what());
    return 1;
  }

  std::ostringstream md;
  md << "# tessera bench\n\nmodel: " << model << (dummy.empty() ? "" : " (dummy " + dummy + " " + dummy_type + " weights)")
     << " on " << device << " (" << s.architecture << ", " << s.n_layers
     << " layers, d " << s.d_model << ")\n\n"
     << "ceilings: copy bandwidth " << fmt("%.1f", bw / 1e9) << " GB/s, " << peak_name << " "
     << fmt("%.1f", fma / 1e9) << " GFLOP/s (" << hw << ")\n"
     << "weights read per decode step: " << fmt("%.1f", W / 1e6) << " MB; KV cache "
     << s.kv_bytes_per_token << " B/token\n\n"
     << "| benchmark | measured | floor | % of speed of light |\n|---|---|---|---|\n";
  for (const Row& r : rows)
    md << "| " << r.what << " | " << r.value << " | " << r.floor << " | " << r.pct << " |\n";
  md << "\nFloors: decode = (weights + KV bytes read) / copy bandwidth; prefill = matmul and "
        "attention FLOPs / the matrix ceiling (on CPUs an f32 FMA ceiling, which integer-dot "
        "kernels can exceed). Batch-1 decode: a "
     << decode_ctx << "-token prompt, " << decode_tokens << " tokens generated. Batched decode: "
     << batch_ctx << "-token prompts, " << batch_gen
     << " tokens generated each; only steps that decode every sequence together count.\n";
  if (profile && device == "cuda")
    md << "\nProfiled run (--profile): steps ran eagerly, without CUDA graphs, with an event after "
          "every op; these numbers are slower than an unprofiled run's.\n";
  if (json) {
    std::printf("{\"copy_gbs\": %.2f, \"fma_gflops\": %.2f, \"results\": [", bw / 1e9, fma / 1e9);
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf("%s{\"name\": \"%s\", \"measured\": %s, \"floor\": %s, \"fraction\": %.4f}",
                  i ? ", " : "", rows[i].what.c_str(), rows[i].value.c_str(),
                  rows[i].floor.c_str(), rows[i].ratio);
    std::printf("]}\n");
  } else {
    std::fputs(md.str().c_str(), stdout);
  }
  if (!out_path.empty()) {
    std::error_code ec;
    const auto parent = std::filesystem::path(out_path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    std::ofstream(out_path) << md.str();
    std::fprintf(stderr, "bench: report written to %s\n", out_path.c_str());
  }
  return 0;
}

}  // namespace
TESSERA_CLI_COMMAND("bench", "benchmark a model against this machine's speed of light", cmd_bench);
}  // namespace tessera::cli
