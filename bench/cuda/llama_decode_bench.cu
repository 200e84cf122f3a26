// Batch-1 decode of a Llama-3-8B-shaped model (dummy weights generated on the device) for bf16,
// Q8_0, Q4_0, Q4_K (and, when named on the command line, Q4_1 / Q6_K) projection weights: one
// CUDA graph per step, timed over ~100 replays against the bandwidth floor.
// Usage: llama_decode_bench [bf16|q8_0|q4_0|q4_1|q4_k|q6_k ...]   (default: bf16 q8_0 q4_0 q4_k)
// Besides the tables it prints one "RESULT type=... ms=..." line per type for scripts
// (bench/cuda/peer_llama_cpp.sh).
//
// Floor: a decode step must read every weight byte (7 projection matrices x 32 layers, the
// output head, norms, one embedding row) and the KV rows 0..p of every layer once. The copy
// ceiling is a 2 GiB device-to-device cudaMemcpyAsync, counted as bytes read + bytes written per
// second (the device's total traffic rate); the floor is bytes read per token / that rate (a
// decode step's traffic is almost all reads, its writes are a few KB).
// The context is filled with 512 random KV rows; the graph then advances the position on the
// device, so 100 replays cover positions 512..611 and the KV term uses their mean.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.h"
#include "models/cuda/llama_decode.h"

using namespace tessera;
using namespace tessera::cuda;

namespace {

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&a, bytes));
  TESSERA_CUDA_CHECK(cudaMalloc(&b, bytes));
  fill_uniform_f16(static_cast<uint16_t*>(a), bytes / 2, -1.f, 1.f, 1, nullptr);
  cudaEvent_t e0, e1;
  TESSERA_CUDA_CHECK(cudaEventCreate(&e0));
  TESSERA_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < 13; ++i) {
    TESSERA_CUDA_CHECK(cudaEventRecord(e0));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice));
    TESSERA_CUDA_CHECK(cudaEventRecord(e1));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) t.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (median(t) * 1e-3) / 1e9;
}

// Median per-replay time of a graph holding only `parts` of a step (the time breakdown).
float time_parts(LlamaDecodeRunner& r, unsigned parts, int32_t tok, int32_t pos, int replays) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ex = nullptr;
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(r.stream(), cudaStreamCaptureModeRelaxed));
  r.enqueue_step(parts);
  TESSERA_CUDA_CHECK(cudaStreamEndCapture(r.stream(), &g));
  TESSERA_CUDA_CHECK(cudaGraphInstantiate(&ex, g, 0));
  r.set_state(tok, pos);
  std::vector<cudaEvent_t> ev(replays + 1);
  for (auto& e : ev) TESSERA_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < 3; ++i) TESSERA_CUDA_CHECK(cudaGraphLaunch(ex, r.stream()));
  TESSERA_CUDA_CHECK(cudaEventRecord(ev[0], r.stream()));
  for (int i = 0; i < replays; ++i) {
    TESSERA_CUDA_CHECK(cudaGraphLaunch(ex, r.stream()));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev[i + 1], r.stream()));
  }
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(r.stream()));
  std::vector<float> per;
  for (int i = 0; i < replays; ++i) {
    float ms;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    per.push_back(ms);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  return median(per);
}

struct Row {
  const char* type;
  double weight_gb, kv_mb, floor_ms, graph_ms, b2b_ms, eager_ms, nopdl_ms, rows4_ms;
  double gemv_ms, gemv_floor_ms, others_ms;
  int32_t last_token;
};

Row bench(DecodeWeightType t, double bw_gbs) {
  const int64_t ctx = 512, replays = 100;
  const auto cfg = LlamaDecodeConfig::llama3_8b(t, 1024);
  DummyLlamaWeights dummy(cfg, 2026, nullptr);
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  LlamaDecodeRunner r(cfg, dummy.weights());
  for (int64_t l = 0; l < cfg.n_layers; ++l) {  // every cache row random (rows >= p+1 unread)
    const int64_t n = cfg.max_ctx * cfg.n_kv_heads * cfg.head_dim;
    fill_uniform_f16(reinterpret_cast<uint16_t*>(r.k_cache(l)), n, -1.f, 1.f, 500 + l, r.stream());
    fill_uniform_f16(reinterpret_cast<uint16_t*>(r.v_cache(l)), n, -1.f, 1.f, 900 + l, r.stream());
  }
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(r.stream()));
  const int32_t tok0 = 128000;
  r.set_state(tok0, ctx);
  r.capture();
  for (int i = 0; i < 5; ++i) r.replay();  // warm-up
  r.set_state(tok0, ctx);

  std::vector<cudaEvent_t> ev(replays + 1);
  for (auto& e : ev) TESSERA_CUDA_CHECK(cudaEventCreate(&e));
  // Back-to-back replays with an event between each: per-step times and the total.
  TESSERA_CUDA_CHECK(cudaEventRecord(ev[0], r.stream()));
  for (int64_t i = 0; i < replays; ++i) {
    r.replay();
    TESSERA_CUDA_CHECK(cudaEventRecord(ev[i + 1], r.stream()));
  }
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(r.stream()));
  std::vector<float> per;
  for (int64_t i = 0; i < replays; ++i) {
    float ms;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    per.push_back(ms);
  }
  float total;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&total, ev[0], ev[replays]));
  const int32_t last = r.last_token();
  const int32_t end_pos = r.position();
  // Logits of the last step must be finite (no NaN from a broken chain being timed).
  std::vector<uint16_t> lg(cfg.vocab);
  TESSERA_CUDA_CHECK(cudaMemcpy(lg.data(), r.logits(), lg.size() * 2, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (uint16_t b : lg) bad += ((b & 0x7f80) == 0x7f80);
  if (bad || last < 0 || last >= cfg.vocab || end_pos != ctx + replays)
    std::printf("!! %s: %lld non-finite logits, last token %d, end position %d\n",
                weight_type_name(t), static_cast<long long>(bad), last, end_pos);

  // Eager (no graph): the launch overhead the graph removes.
  r.set_state(tok0, ctx);
  const int eager_steps = 20;
  TESSERA_CUDA_CHECK(cudaEventRecord(ev[0], r.stream()));
  for (int i = 0; i < eager_steps; ++i) r.enqueue_step();
  TESSERA_CUDA_CHECK(cudaEventRecord(ev[1], r.stream()));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(r.stream()));
  float eager;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&eager, ev[0], ev[1]));
  for (auto& e : ev) cudaEventDestroy(e);
  const float gemv_ms = time_parts(r, LlamaDecodeRunner::kGemvs, tok0, ctx, static_cast<int>(replays));
  const float others_ms = time_parts(r, LlamaDecodeRunner::kOthers, tok0, ctx, static_cast<int>(replays));
  set_pdl_enabled(false);  // the same full step captured without programmatic dependent launch
  const float nopdl_ms = time_parts(r, LlamaDecodeRunner::kAll, tok0, ctx, static_cast<int>(replays));
  set_pdl_enabled(true);
  set_gemv_rows_per_warp(4);  // and with 4 rows per warp in every GEMV (no automatic 2)
  const float rows4_ms = time_parts(r, LlamaDecodeRunner::kAll, tok0, ctx, static_cast<int>(replays));
  set_gemv_rows_per_warp(0);

  double kv = 0;
  for (int64_t p = ctx; p < ctx + replays; ++p) kv += static_cast<double>(r.kv_bytes_read(p));
  kv /= replays;
  const double wbytes = static_cast<double>(dummy.weights().bytes_per_token());
  Row row;
  row.type = weight_type_name(t);
  row.weight_gb = wbytes / 1e9;
  row.kv_mb = kv / 1e6;
  row.floor_ms = (wbytes + kv) / (bw_gbs * 1e9) * 1e3;
  row.graph_ms = median(per);
  row.b2b_ms = total / replays;
  row.eager_ms = eager / eager_steps;
  row.nopdl_ms = nopdl_ms;
  row.rows4_ms = rows4_ms;
  row.last_token = last;
  row.gemv_ms = gemv_ms;
  row.gemv_floor_ms = wbytes / (bw_gbs * 1e9) * 1e3;
  row.others_ms = others_ms;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<DecodeWeightType> types;
  const DecodeWeightType all[] = {DecodeWeightType::kBF16, DecodeWeightType::kQ8_0, DecodeWeightType::kQ4_0,
                                  DecodeWeightType::kQ4_1, DecodeWeightType::kQ4_K, DecodeWeightType::kQ6_K};
  for (int a = 1; a < argc; ++a) {
    bool found = false;
    for (auto t : all)
      if (std::strcmp(argv[a], weight_type_name(t)) == 0) types.push_back(t), found = true;
    if (!found) {
      std::fprintf(stderr, "unknown weight type '%s' (bf16 q8_0 q4_0 q4_1 q4_k q6_k)\n", argv[a]);
      return 2;
    }
  }
  if (types.empty())
    types = {DecodeWeightType::kBF16, DecodeWeightType::kQ8_0, DecodeWeightType::kQ4_0, DecodeWeightType::kQ4_K};
  cudaDeviceProp prop;
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double bw = copy_bandwidth_gbs();
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("copy bandwidth (2 GiB D2D, read + write bytes / time, median of 10): %.0f GB/s\n", bw);
  std::printf("model: llama3-8b shape (32 x 4096, 32/8 heads x 128, ff 14336, vocab 128256), dummy "
              "weights, bf16 activations (int8 GEMV inputs for quantized weights), f16 KV, batch 1, "
              "context 512 -> 611 over 100 replays\n");
  std::vector<Row> rows;
  for (auto t : types) rows.push_back(bench(t, bw));
  std::printf("\n| weights | weight GB/tok | KV MB/tok | floor ms | graph ms/tok (median) | back-to-back ms/tok "
              "| %% of floor | tok/s | graph without PDL ms | graph, GEMVs 4 rows/warp ms | eager ms/tok |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    std::printf("| %s | %.3f | %.1f | %.3f | %.3f | %.3f | %.1f%% | %.0f | %.3f | %.3f | %.3f |\n", r.type,
                r.weight_gb, r.kv_mb, r.floor_ms, r.graph_ms, r.b2b_ms, 100.0 * r.floor_ms / r.graph_ms,
                1e3 / r.b2b_ms, r.nopdl_ms, r.rows4_ms, r.eager_ms);
  std::printf("\nbreakdown (graphs holding only part of a step, median of 100 replays):\n");
  std::printf("| weights | GEMVs only ms (129 kernels, QKV with RoPE+KV write) | weight floor ms | GEMV %% of floor "
              "| everything else ms (norms, attention, SwiGLU, argmax) | sum ms | full step ms |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    std::printf("| %s | %.3f | %.3f | %.1f%% | %.3f | %.3f | %.3f |\n", r.type, r.gemv_ms,
                r.gemv_floor_ms, 100.0 * r.gemv_floor_ms / r.gemv_ms, r.others_ms,
                r.gemv_ms + r.others_ms, r.graph_ms);
  std::printf("\n%% of floor = floor / graph median.\n");
  for (const auto& r : rows)
    std::printf("RESULT type=%s ms=%.4f floor_ms=%.4f tok_s=%.1f\n", r.type, r.graph_ms, r.floor_ms,
                1e3 / r.graph_ms);
  return 0;
}
