// The CUDA Llama model (models/cuda/llama_cuda.h) on the default GGUF model against the CPU
// model (the reference path, itself checked against llama.cpp): teacher-forced next-token
// distributions, batch composition (a sequence alone vs. with others in one forward call), and
// dummy weights of a named architecture (quantized projections past one row:
// llama_cuda_quant_test.cpp). Skipped without a GPU or without the default model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "cuda/cuda_test_util.h"
#include "cuda/llama_cuda_test_util.h"
#include "cuda/quant_test_util.h"
#include "kernels/cuda/decode_persistent.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mmq.h"
#include "models/cuda/llama_cuda.h"
#include "models/registry.h"
#include "support/test_util.h"
#include "tessera/engine.h"

namespace tessera {
namespace {

using namespace test;  // cuda/llama_cuda_test_util.h

std::string model_path() { return test::default_model_path(); }

#define SKIP_WITHOUT_MODEL() \
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not present"

class LlamaCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_SKIP_WITHOUT_GPU();
    SKIP_WITHOUT_MODEL();
    auto f = gguf::File::open(model_path());
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    file_ = std::move(*f);
    auto eng = Engine::load(model_path());
    ASSERT_TRUE(eng.ok());
    auto ids = (*eng)->tokenize(
        "The history of astronomy is long. Ancient people watched the sky and tracked the "
        "motion of the Sun, the Moon and the planets. They built calendars, predicted eclipses "
        "and named the constellations. Later, telescopes revealed moons around Jupiter, the "
        "phases of Venus and countless faint stars, and astronomers learned that the Earth "
        "moves around the Sun.");
    ASSERT_TRUE(ids.ok());
    ids_ = *ids;
  }
  std::unique_ptr<gguf::File> file_;
  std::vector<int32_t> ids_;
};

TEST_F(LlamaCuda, TeacherForcedDistributionsMatchTheCpuModel) {
  ThreadPool pool(2);
  auto cpu = models::load_causal_lm(*file_);
  ASSERT_TRUE(cpu.ok());
  auto gpu = models::cuda_llama_create(*file_);
  const int64_t n = static_cast<int64_t>(ids_.size());
  const int64_t bs = 16, nb = (n + bs - 1) / bs;
  std::vector<int32_t> blocks(nb);
  std::iota(blocks.rbegin(), blocks.rend(), 3);  // not the identity mapping
  auto cpu_cache = (*cpu)->make_kv_cache(nb + 3, bs);
  auto gpu_cache = gpu->make_kv_cache(nb + 3, bs);
  const auto want = run_alone(**cpu, cpu_cache, ids_, blocks, 512, pool);
  const auto got = run_alone(*gpu, gpu_cache, ids_, blocks, 512, pool);
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  const Agreement a = compare(want, got, gpu->config().vocab);
  std::printf("GPU vs CPU model, %lld teacher-forced positions: top-1 %.1f%%, mean KL %.5f\n",
              static_cast<long long>(n), 100 * a.top1, a.mean_kl);
  // The GPU keeps the file's Q4_1 / Q8_0 weights and quantizes activations exactly as the CPU
  // does (same integers for the same inputs), but its norms, attention, RoPE, SiLU and block
  // sums run in other f32 orders; the 8-bit requantization before every projection turns those
  // last-bit differences into whole-quantum flips that compound over 30 layers, so agreement
  // saturates near the int8 noise level: measured (H200) top-1 100.0 % (96.9 % in a build that
  // differed only in FMA contraction of the block epilogue), mean KL 0.0029 (the bf16 path:
  // 96.9 %, 0.0030). Bit-exact agreement would need every op in the CPU's float order.
  EXPECT_GE(a.top1, 0.93);
  EXPECT_LE(a.mean_kl, 0.006);
  // Chunked prefill (7-row chunks take the GEMV, one chunk the tensor-core GEMM: another f32
  // order of the block sums) agrees up to the same rounding flips (measured: top-1 98.5 %,
  // mean KL 0.0030, nMSE 1.2e-3).
  const auto chunked = run_alone(*gpu, gpu_cache, ids_, blocks, 7, pool);
  const Agreement c = compare(got, chunked, gpu->config().vocab);
  std::printf("chunks of 7 vs one chunk: top-1 %.1f%%, mean KL %.6f, nMSE %.2e\n", 100 * c.top1,
              c.mean_kl, test::nmse(chunked, got));
  EXPECT_GE(c.top1, 0.9);
  EXPECT_LE(c.mean_kl, 0.01);
}

TEST_F(LlamaCuda, SequenceInABatchMatchesItAlone) {
  ThreadPool pool(1);
  auto gpu = models::cuda_llama_create(*file_);
  const int64_t V = gpu->config().vocab, bs = 16;
  auto cache = gpu->make_kv_cache(64, bs);
  const std::vector<int32_t> a(ids_.begin(), ids_.begin() + 40), b(ids_.begin() + 5, ids_.begin() + 30);
  const std::vector<int32_t> blocks_a = {0, 1, 2}, blocks_b = {10, 11}, blocks_c = {20};
  // a alone: its whole prompt in one call, logits of the last row only (the head then takes the
  // same kernel as in the batched call below: for quantized weights the kernel, and so the
  // numerics, depend on the number of logits rows; docs/design/cuda_engine.md).
  std::vector<float> alone(V);
  const models::SeqChunk alone_chunk{0, 40, blocks_a, true};
  gpu->forward(a, {&alone_chunk, 1}, cache, alone.data(), false, pool);
  // b is prefilled first; then one call runs a's whole prompt, b's next token and a 1-token c.
  run_alone(*gpu, cache, b, blocks_b, 64, pool);
  std::vector<int32_t> tokens = a;
  tokens.push_back(ids_[30]);
  tokens.push_back(ids_[0]);
  const models::SeqChunk chunks[3] = {{0, 40, blocks_a, true}, {25, 1, blocks_b, true},
                                      {0, 1, blocks_c, true}};
  std::vector<float> logits(3 * V);
  gpu->forward(tokens, chunks, cache, logits.data(), false, pool);
  const std::vector<float> batched_a(logits.begin(), logits.begin() + V);
  const std::vector<float> alone_a(alone.end() - V, alone.end());
  EXPECT_LE(test::nmse(batched_a, alone_a), 1e-5);
  EXPECT_EQ(std::max_element(batched_a.begin(), batched_a.end()) - batched_a.begin(),
            std::max_element(alone_a.begin(), alone_a.end()) - alone_a.begin());
}

// Decode-only steps replay CUDA graphs (captured on a shape's second step); a step that asks for
// every row's logits runs eagerly. Both must give the same logits, step after step, including
// after a larger eager step moved the activation buffers (graphs are then recaptured).
TEST_F(LlamaCuda, GraphReplayedDecodeStepsMatchEagerSteps) {
  ThreadPool pool(1);
  auto gpu = models::cuda_llama_create(*file_);
  const int64_t V = gpu->config().vocab, bs = 16;
  auto eager_cache = gpu->make_kv_cache(16, bs);
  auto graph_cache = gpu->make_kv_cache(16, bs);
  auto argmax_cache = gpu->make_kv_cache(16, bs);
  const std::vector<int32_t> blocks = {0, 1, 2, 3, 4, 5};
  const std::vector<int32_t> prompt(ids_.begin(), ids_.begin() + 12);
  for (auto* c : {&eager_cache, &graph_cache, &argmax_cache}) run_alone(*gpu, *c, prompt, blocks, 64, pool);
  int32_t tok = ids_[12];
  std::vector<float> a(V), b(V);
  for (int32_t pos = 12; pos < 40; ++pos) {
    if (pos == 25) {  // a big eager call in between grows every activation buffer
      const std::vector<int32_t> big(ids_.begin(), ids_.begin() + 60);
      auto scratch = gpu->make_kv_cache(8, bs);
      run_alone(*gpu, scratch, big, {0, 1, 2, 3}, 64, pool);
    }
    const models::SeqChunk c{pos, 1, blocks, true};
    gpu->forward({&tok, 1}, {&c, 1}, eager_cache, a.data(), /*all_logits=*/true, pool);  // eager
    gpu->forward({&tok, 1}, {&c, 1}, graph_cache, b.data(), /*all_logits=*/false, pool);  // graph
    ASSERT_LE(test::nmse(b, a), 1e-10) << "position " << pos;
    int32_t id = -1;
    const SampleRow greedy{.temperature = 0.f, .top_k = 0, .top_p = 1.f, .min_p = 0.f,
                           .repetition_penalty = 1.f, .presence_penalty = 0.f, .frequency_penalty = 0.f,
                           .n_penalties = 0, .n_banned = 0, .penalty_offset = 0, .banned_offset = 0, .u = 0.0};
    ASSERT_TRUE(gpu->forward_sample({&tok, 1}, {&c, 1}, argmax_cache, {{&greedy, 1}, {}, {}}, &id, pool));
    tok = static_cast<int32_t>(std::max_element(a.begin(), a.end()) - a.begin());
    ASSERT_EQ(id, tok) << "position " << pos;
  }
}

TEST(LlamaCudaDummy, NamedArchitectureRunsAndRejectsUnknownNames) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  auto run = [&](models::CausalLm& m) {
    auto cache = m.make_kv_cache(8, 16);
    const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
    const std::vector<int32_t> blocks = {0};
    const models::SeqChunk c{0, 5, blocks, true};
    std::vector<float> logits(m.config().vocab);
    m.forward(ids, {&c, 1}, cache, logits.data(), false, pool);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    EXPECT_GT(*std::max_element(logits.begin(), logits.end()),
              *std::min_element(logits.begin(), logits.end()));
  };
  auto m = models::cuda_llama_create_dummy("smollm2-135m");
  run(*m);
  const int64_t bf16_bytes = m->decode_weight_bytes();
  EXPECT_THROW(models::cuda_llama_create_dummy("no-such-model"), Error);
  // Quantized dummy weights: the decode bytes are the GGUF bytes of the type.
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1}) {
    auto q = models::cuda_llama_create_dummy("smollm2-135m", 0, t);
    run(*q);
    const double ratio = static_cast<double>(q->decode_weight_bytes()) / static_cast<double>(bf16_bytes);
    EXPECT_NEAR(ratio, *dtype_row_bytes(t, 32) / 64.0, 0.01) << dtype_name(t);
  }
  // K types need widths that are multiples of 256 (SmolLM2's 576 is not).
  EXPECT_THROW(models::cuda_llama_create_dummy("smollm2-135m", 0, DType::kQ4_K), Error);
  EXPECT_THROW(models::cuda_llama_create_dummy("smollm2-135m", 0, DType::kF16), Error);
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    auto q = models::cuda_llama_create_dummy("llama3-8b", 0, t);
    run(*q);
  }
}

// One-row steps take the GEMVs (bf16: gemv_bf16_f32; quantized: the integer-dot GEMV), a
// prompt in one chunk cuBLASLt (quantized: dequantized slices): two independent kernels for the
// same products. Teacher-forced over 40 tokens of random smollm2-135m weights, every position's
// logits must agree to bf16 rounding. (Quantized weights: the one-row path also quantizes the
// activations to 8 bits, so the bound is looser.)
TEST(LlamaCudaDummy, OneRowStepsMatchOneChunk) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  const std::vector<int32_t> ids = prompt_ids(40, 40000);
  const std::vector<int32_t> blocks = {3, 1, 2};
  for (DType t : {DType::kBF16, DType::kQ8_0, DType::kQ5_0, DType::kQ5_1}) {
    auto m = models::cuda_llama_create_dummy("smollm2-135m", 0, t);
    auto cache = m->make_kv_cache(4, 16);
    const auto one_chunk = run_alone(*m, cache, ids, blocks, 40, pool);
    const auto rows = run_alone(*m, cache, ids, blocks, 1, pool);
    for (float v : rows) ASSERT_TRUE(std::isfinite(v));
    const Agreement a = compare(one_chunk, rows, m->config().vocab);
    const double e = test::nmse(rows, one_chunk);
    const std::string name(dtype_name(t));
    std::printf("%s one-row steps vs one chunk: top-1 %.1f%%, mean KL %.2e, nMSE %.2e\n",
                name.c_str(), 100 * a.top1, a.mean_kl, e);
    EXPECT_LE(e, t == DType::kBF16 ? 1e-4 : 1e-2) << name;
    EXPECT_GE(a.top1, t == DType::kBF16 ? 0.95 : 0.85) << name;
  }
}

// Decode-only steps replay CUDA graphs, which hold the KV cache's buffers. A cache destroyed
// and another constructed at the same address (other buffers) must not replay the old graphs:
// they would read the first sequence's K/V. The second sequence's logits must equal those of a
// model of the same weights running it on its own cache (each model's second sequence: a
// model's first call builds its GEMM plans, whose rounding later calls need not share).
TEST(LlamaCudaDummy, DecodeGraphsFollowANewCacheAtTheSameAddress) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  auto m = models::cuda_llama_create_dummy("smollm2-135m", 0, DType::kBF16);
  auto twin = models::cuda_llama_create_dummy("smollm2-135m", 0, DType::kBF16);
  const int64_t V = m->config().vocab;
  const std::vector<int32_t> blocks = {2, 0, 5};
  auto decode = [&](models::CausalLm& model, models::KvCache& cache, int seed) {
    std::vector<int32_t> prompt(9);
    for (int i = 0; i < 9; ++i) prompt[i] = (i * 7919 + 131 * seed) % 40000;
    std::vector<float> logits(V), all;
    const models::SeqChunk first{0, 9, blocks, true};
    model.forward(prompt, {&first, 1}, cache, logits.data(), false, pool);
    for (int step = 0; step < 8; ++step) {  // captured at the second step, then replayed
      const int32_t tok = (step * 313 + 71 * seed) % 40000;
      const models::SeqChunk c{9 + step, 1, blocks, true};
      model.forward(std::span<const int32_t>(&tok, 1), {&c, 1}, cache, logits.data(), false, pool);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  std::optional<models::KvCache> slot;
  slot.emplace(m->make_kv_cache(8, 16));
  decode(*m, *slot, 1);
  models::KvCache other = m->make_kv_cache(8, 16);  // made while the first lives: other buffers
  const void* const old_k0 = slot->k(0).raw_data();
  slot.reset();
  slot.emplace(std::move(other));  // the same object address
  ASSERT_NE(slot->k(0).raw_data(), old_k0);
  const std::vector<float> got = decode(*m, *slot, 2);
  auto twin_first = twin->make_kv_cache(8, 16), twin_cache = twin->make_kv_cache(8, 16);
  decode(*twin, twin_first, 1);
  const std::vector<float> want = decode(*twin, twin_cache, 2);
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// A decode step's tables (positions, cache rows, tiles, block tables, logit rows) go to the
// device packed in one buffer, so where each lies depends on the step's row count, and each
// shape's graph holds its own layout. Steps of two sequences and of one alternate (each shape
// captured on its second step, then replayed while the other shape runs in between); every
// step's logits must match the same step run eagerly (all rows' logits: no graph) on a second
// cache (a graph replaying another layout's tables reads other positions and blocks: far off).
// A third cache takes the same steps through forward_sample with greedy rows, whose graphs end
// in the argmax: its ids must be the eager logits' argmax. Default bf16 and Q8_0 weights (the
// integer-dot GEMVs at one row, the few-row ones at two).
TEST(LlamaCudaDummy, DecodeGraphsOfAlternatingRowCountsKeepTheirOwnTables) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  const SampleRow greedy{.temperature = 0.f, .top_k = 0, .top_p = 1.f, .min_p = 0.f,
                         .repetition_penalty = 1.f, .presence_penalty = 0.f,
                         .frequency_penalty = 0.f, .n_penalties = 0, .n_banned = 0,
                         .penalty_offset = 0, .banned_offset = 0, .u = 0.0};
  const SampleRow greedy2[2] = {greedy, greedy};
  for (DType t : {DType::kBF16, DType::kQ8_0}) {
    auto m = models::cuda_llama_create_dummy("smollm2-135m", 0, t);
    const int64_t V = m->config().vocab;
    auto graph_cache = m->make_kv_cache(8, 16), eager_cache = m->make_kv_cache(8, 16),
         argmax_cache = m->make_kv_cache(8, 16);
    const std::vector<int32_t> blocks_a = {4, 1}, blocks_b = {0, 6};
    const std::vector<int32_t> prompt_a = prompt_ids(7, 40000), prompt_b = prompt_ids(5, 30011);
    for (auto* c : {&graph_cache, &eager_cache, &argmax_cache}) {
      run_alone(*m, *c, prompt_a, blocks_a, 7, pool);
      run_alone(*m, *c, prompt_b, blocks_b, 5, pool);
    }
    int32_t pos_a = 7, pos_b = 5;
    std::vector<float> got(2 * V), want(2 * V);
    for (int step = 0; step < 12; ++step) {
      const bool both = step % 2 == 0;
      const std::vector<int32_t> toks = {(step * 977 + 3) % 40000, (step * 131 + 17) % 40000};
      std::vector<models::SeqChunk> chunks = {{pos_a, 1, blocks_a, true}};
      if (both) chunks.push_back({pos_b, 1, blocks_b, true});
      const size_t rows = chunks.size();
      const auto tok_span = std::span<const int32_t>(toks).first(rows);
      m->forward(tok_span, chunks, graph_cache, got.data(), /*all_logits=*/false, pool);
      m->forward(tok_span, chunks, eager_cache, want.data(), /*all_logits=*/true, pool);
      const std::string where = std::string(dtype_name(t)) + " step " + std::to_string(step);
      const std::vector<float> g(got.begin(), got.begin() + rows * V);
      const std::vector<float> w(want.begin(), want.begin() + rows * V);
      for (float v : g) ASSERT_TRUE(std::isfinite(v));
      ASSERT_LE(test::nmse(g, w), 1e-10) << where << (both ? " (two rows)" : " (one row)");
      int32_t ids[2] = {-1, -1};
      ASSERT_TRUE(
          m->forward_sample(tok_span, chunks, argmax_cache, {{greedy2, rows}, {}, {}}, ids, pool));
      for (size_t r = 0; r < rows; ++r) {
        const auto row = w.begin() + r * V;
        ASSERT_EQ(ids[r], std::max_element(row, row + V) - row) << where << " row " << r;
      }
      ++pos_a;
      if (both) ++pos_b;
    }
  }
}

// Decode-only steps of several sequences take RoPE and the KV write inside attention
// (paged_attention.h, PagedAttentionNewRows); TESSERA_ROPE_IN_ATTENTION=0 keeps the RoPE kernel.
// Two models of the same random weights, one each way, over the same steps: 3 sequences
// prefilled, then 12 decode-only steps (graph-replayed from the second), each sequence's
// logits the same bits; then a step with 12 consecutive 1-row chunks of one sequence (which
// must keep the RoPE kernel); and the same KV cache.
TEST(LlamaCudaDummy, DecodeStepsWithRopeInAttentionMatchTheRopeKernel) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  auto [fused, plain] = model_pair("TESSERA_ROPE_IN_ATTENTION", "0", [] {
    return models::cuda_llama_create_dummy("smollm2-135m", 0, DType::kBF16);
  });
  const int64_t V = fused->config().vocab, bs = 16;
  auto cache_f = fused->make_kv_cache(16, bs), cache_p = plain->make_kv_cache(16, bs);
  for (auto* c : {&cache_f, &cache_p})  // rows never written compare equal too
    for (int64_t li = 0; li < c->n_layers(); ++li)
      for (Tensor* t : {&c->k(li), &c->v(li)})
        ASSERT_EQ(cudaMemset(t->raw_data(), 0, static_cast<size_t>(t->numel()) * 2), cudaSuccess);
  const std::vector<std::vector<int32_t>> blocks = {{0, 1, 2}, {5, 6, 7}, {9, 11, 13}};
  const int32_t lens[3] = {20, 7, 33};
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> ids(lens[s]);
    for (int i = 0; i < lens[s]; ++i) ids[i] = (i * 7919 + 131 * s + 13) % 40000;
    run_alone(*fused, cache_f, ids, blocks[s], 64, pool);
    run_alone(*plain, cache_p, ids, blocks[s], 64, pool);
  }
  std::vector<float> a(3 * V), b(3 * V);
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> toks;
    std::vector<models::SeqChunk> chunks;
    for (int s = 0; s < 3; ++s) {
      toks.push_back((step * 101 + s * 7) % 40000);
      chunks.push_back({lens[s] + step, 1, blocks[s], true});
    }
    fused->forward(toks, chunks, cache_f, a.data(), false, pool);
    plain->forward(toks, chunks, cache_p, b.data(), false, pool);
    for (float v : a) ASSERT_TRUE(std::isfinite(v));
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << step;
  }
  // A recomputed (preempted) sequence's generated positions come as consecutive 1-row chunks
  // of one step, logits on the last only: each row reads the rows before it, so this step must
  // not take the in-attention write (blocks do not wait for each other).
  {
    std::vector<int32_t> toks;
    std::vector<models::SeqChunk> chunks;
    for (int i = 0; i < 12; ++i) {
      toks.push_back((i * 37 + 5) % 40000);
      chunks.push_back({lens[0] + 12 + i, 1, blocks[0], i == 11});
    }
    toks.push_back(77);
    chunks.push_back({lens[1] + 12, 1, blocks[1], true});
    std::vector<float> c(2 * V), d(2 * V);
    fused->forward(toks, chunks, cache_f, c.data(), false, pool);
    plain->forward(toks, chunks, cache_p, d.data(), false, pool);
    ASSERT_EQ(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)), 0) << "recompute step";
  }
  for (int64_t li = 0; li < fused->config().n_layers; ++li)
    for (auto [x, y] : {std::pair{&cache_f.k(li), &cache_p.k(li)}, std::pair{&cache_f.v(li), &cache_p.v(li)}}) {
      const size_t bytes = static_cast<size_t>(x->numel()) * 2;
      std::vector<char> hx(bytes), hy(bytes);
      ASSERT_EQ(cudaMemcpy(hx.data(), x->raw_data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(hy.data(), y->raw_data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(std::memcmp(hx.data(), hy.data(), bytes), 0) << "layer " << li;
    }
}

// Decode-only steps of <= 8 rows leave attention's split partials unmerged
// (PagedAttentionWorkspace::leave_partials) for the next kernel to merge: a quantized o's input
// quantizer as it reads them, or (one row) before a bf16 o a merge kernel
// (paged_attention_merge_partials);
// TESSERA_ATTN_LEAVE_PARTIALS=0 has attention merge them. So do steps of 9..16 rows whose o
// projection takes the two-tile tensor-core GEMV (Projections::tc_takes_rows). Two models of the
// same random weights, one each way, bf16 and every quantized type: twelve sequences prefilled
// into tables wide enough to split (16 blocks of 16: 4 splits), then decode steps of all twelve,
// of the first three (the few-row GEMV) and of one alone (the one-row GEMV), graph-replayed from
// the second: the same logits, bit for bit.
TEST(LlamaCudaDummy, LeftAttentionPartialsMatchTheMergingAttention) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  models::LlmConfig cfg = small_llama(512, 8, 2, 1536);
  constexpr int kSeqs = 12, kBlocks = 16;
  ASSERT_GT(cuda::paged_attention_splits(kSeqs, cfg.n_kv_heads, kBlocks, 16), 1);
  ASSERT_GT(cuda::paged_attention_splits(3, cfg.n_kv_heads, kBlocks, 16), 1);
  ASSERT_GT(cuda::paged_attention_splits(1, cfg.n_kv_heads, kBlocks, 16), 1);
  std::vector<DType> types(std::begin(test::kQuantTypes), std::end(test::kQuantTypes));
  types.push_back(DType::kBF16);
  for (DType t : types) {
    SCOPED_TRACE(dtype_name(t));
    // The default leaves them.
    auto [left, merging] =
        model_pair("TESSERA_ATTN_LEAVE_PARTIALS", "0", [&] { return models::cuda_llama_create_dummy(cfg, t); });
    const int64_t V = cfg.vocab;
    auto cache_l = left->make_kv_cache(kSeqs * kBlocks, 16), cache_m = merging->make_kv_cache(kSeqs * kBlocks, 16);
    std::vector<std::vector<int32_t>> blocks(kSeqs);
    for (int s = 0; s < kSeqs; ++s)
      for (int b = 0; b < kBlocks; ++b)
        blocks[s].push_back(kSeqs * kBlocks - 1 - (s + kSeqs * b));  // interleaved, descending
    std::vector<int32_t> pos(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
      const int32_t len = 7 + (s * 13) % 29;
      std::vector<int32_t> ids(len);
      for (int i = 0; i < len; ++i) ids[i] = (i * 7919 + 131 * s + 13) % 4000;
      run_alone(*left, cache_l, ids, blocks[s], 64, pool);
      run_alone(*merging, cache_m, ids, blocks[s], 64, pool);
      pos[s] = len;
    }
    std::vector<float> a(kSeqs * V), b(kSeqs * V);
    const uint64_t wide_before = cuda::mmq_quantize_attention_wide_calls();
    for (int step = 0; step < 12; ++step) {
      if (step == 4 && t != DType::kBF16 && cuda::mmq_tc_wide_rows(t) >= kSeqs && cuda::mmq_tc_enabled()) {
        const char* wide = std::getenv("TESSERA_MMQ_TC_WIDE");
        if (!(wide && std::string(wide) == "0"))  // the twelve-row steps left their partials to o's quantizer
          EXPECT_GT(cuda::mmq_quantize_attention_wide_calls(), wide_before);
      }
      const int seqs = step < 4 ? kSeqs : step < 8 ? 3 : 1;  // twelve at once, then three, then one
      std::vector<int32_t> toks;
      std::vector<models::SeqChunk> chunks;
      for (int s = 0; s < seqs; ++s) {
        toks.push_back((step * 101 + s * 7) % 4000);
        chunks.push_back({pos[s]++, 1, blocks[s], true});
      }
      left->forward(toks, chunks, cache_l, a.data(), false, pool);
      merging->forward(toks, chunks, cache_m, b.data(), false, pool);
      for (int64_t i = 0; i < seqs * V; ++i) ASSERT_TRUE(std::isfinite(a[i]));
      ASSERT_EQ(std::memcmp(a.data(), b.data(), seqs * V * sizeof(float)), 0) << "step " << step;
    }
  }
}

// Logits a of a path under test against b of the reference path, over the same steps: the
// agreement printed as "what:[ bit for bit,] top-1 .., mean KL .., nMSE ..", nMSE <= max_nmse and
// top-1 >= min_top1. Returns whether a and b hold the same bits.
bool expect_logits_close(const std::vector<float>& a, const std::vector<float>& b, int64_t V,
                         const std::string& what, double max_nmse, double min_top1) {
  const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  const Agreement ag = compare(b, a, V);
  const double e = test::nmse(a, b);
  std::printf("%s:%s top-1 %.1f%%, mean KL %.2e, nMSE %.2e\n", what.c_str(), same ? " bit for bit," : "",
              100 * ag.top1, ag.mean_kl, e);
  EXPECT_LE(e, max_nmse) << what;
  EXPECT_GE(ag.top1, min_top1) << what;
  return same;
}

// One-row steps of m over ids from a fresh 3-block cache, from the second step on replayed from
// CUDA graphs, give the eager steps' logits (run_alone's, one row of V per position).
void expect_graph_steps_equal(models::CausalLm& m, const std::vector<int32_t>& ids, const std::vector<int32_t>& blocks,
                              const std::vector<float>& eager, const std::string& name, ThreadPool& pool) {
  const int64_t V = m.config().vocab;
  auto cache = m.make_kv_cache(3, 16);
  std::vector<float> row(V);
  for (int32_t pos = 0; pos < static_cast<int32_t>(ids.size()); ++pos) {
    const models::SeqChunk ch{pos, 1, blocks, true};
    m.forward({&ids[pos], 1}, {&ch, 1}, cache, row.data(), /*all_logits=*/false, pool);
    const std::vector<float> want(eager.begin() + pos * V, eager.begin() + (pos + 1) * V);
    ASSERT_LE(test::nmse(row, want), 1e-12) << name << " graph step at position " << pos;
  }
}

// One-row steps of weights with 32-element activation blocks form each RMSNorm's quantized
// input in the o / down GEMV's epilogue (cuda::MmqResidualNorm: 2 n_layers calls a step, the
// last down GEMV forming the head's but for Q4_1: EndNormStepsMatchTheNormKernels) unless
// TESSERA_FUSED_NORM=0 keeps the norm kernels. The consumer rounds each block's scale after
// the norm's 1 / rms, as the norm kernel does: the same logits up to rare rounding-edge moves
// (mmq.h; other orders of the same sums give 7e-4 to 1e-3 on these models: one-row steps vs one
// chunk). K weights: every one-row input in the legacy 32-element blocks with f32 scales (mmq.h,
// k32), fused or not, so the same bound holds. With down on the f16 SwiGLU row (the default for
// every type with an f16 dot) no 8-bit requantization between gate|up and down rounds those moves
// away: H100, nMSE 3.0e-5 .. 1.0e-4 there against 0 .. 6.0e-5 on 8-bit rows, and 2 of 24 top-1
// flips for Q6_K (random weights: near ties), hence nMSE <= 2e-4 and top-1 >= 90 %.
// Eager one-row steps, then the same steps replayed from CUDA graphs.
TEST(LlamaCudaDummy, FusedNormStepsMatchTheNormKernels) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  models::LlmConfig cfg = small_llama(512, 8, 2, 1536);
  cfg.n_layers = 3;
  const int n = 24;
  const std::vector<int32_t> ids = prompt_ids(n);
  const std::vector<int32_t> blocks = {2, 0, 1};
  for (DType t : test::kQuantTypes) {
    const std::string name(dtype_name(t));
    auto [fused, kernels] =
        model_pair("TESSERA_FUSED_NORM", "0", [&] { return models::cuda_llama_create_dummy(cfg, t); });
    const int64_t V = cfg.vocab;
    const uint64_t calls = cuda::mmq_gemv_residual_norm_calls();
    const uint64_t gathers = cuda::embedding_gather_norm_calls();
    const auto a = run_alone(*fused, 3, ids, blocks, 1, pool);
    const bool q4_1 = t == DType::kQ4_1;  // the end norms leave it out (EndNormSteps...)
    const int fused_calls = n * (2 * cfg.n_layers - (q4_1 ? 1 : 0));
    EXPECT_EQ(cuda::mmq_gemv_residual_norm_calls() - calls, fused_calls) << name;
    EXPECT_EQ(cuda::embedding_gather_norm_calls() - gathers, q4_1 ? 0 : n) << name;
    const auto b = run_alone(*kernels, 3, ids, blocks, 1, pool);
    EXPECT_EQ(cuda::mmq_gemv_residual_norm_calls() - calls, fused_calls)
        << name << ": TESSERA_FUSED_NORM=0 took the fused path";
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << name;
    expect_logits_close(a, b, V, name + " fused norms vs norm kernels", 2e-4, 0.9);
    expect_graph_steps_equal(*fused, ids, blocks, a, name, pool);
  }
}

// One-row steps form the norms' inputs at the step's two ends too: the embedding gather forms
// layer 0's qkv input (cuda::embedding_gather_norm) and, with the row's logits wanted, the last
// down GEMV the head's (cuda::MmqResidualNorm with the output norm's weights; no row gather and
// no norm kernel before the head), with TESSERA_END_NORMS=all (the default leaves Q4_1 out:
// checked) against =0 (the norm kernels there). Only those two inputs move, by the fused norms'
// rounding-edge moves and the last down GEMV's other k split (FusedNormStepsMatchTheNormKernels):
// nMSE <= 2e-4, top-1 >= 90 % (H100: bit for bit for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; nMSE 5e-8 ..
// 7e-5 for K weights). Eager one-row steps, then the same steps replayed from CUDA graphs.
TEST(LlamaCudaDummy, EndNormStepsMatchTheNormKernels) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  models::LlmConfig cfg = small_llama(512, 8, 2, 1536);
  cfg.n_layers = 2;
  const int n = 24;
  const std::vector<int32_t> ids = prompt_ids(n);
  const std::vector<int32_t> blocks = {2, 0, 1};
  for (DType t : test::kQuantTypes) {
    const std::string name(dtype_name(t));
    const auto create = [&] { return models::cuda_llama_create_dummy(cfg, t); };
    auto fused = with_env("TESSERA_END_NORMS", "all", create);
    auto kernels = with_env("TESSERA_END_NORMS", "0", create);
    const int64_t V = cfg.vocab;
    if (t == DType::kQ4_1) {  // the default leaves the default model's type out
      auto dflt = with_env("TESSERA_END_NORMS", nullptr, create);
      const uint64_t g0 = cuda::embedding_gather_norm_calls();
      run_alone(*dflt, 3, ids, blocks, 1, pool);
      EXPECT_EQ(cuda::embedding_gather_norm_calls(), g0) << "Q4_1 took the end norms by default";
    }
    const uint64_t calls = cuda::mmq_gemv_residual_norm_calls();
    const uint64_t gathers = cuda::embedding_gather_norm_calls();
    const auto a = run_alone(*fused, 3, ids, blocks, 1, pool);
    EXPECT_EQ(cuda::mmq_gemv_residual_norm_calls() - calls, n * 2 * cfg.n_layers) << name;
    EXPECT_EQ(cuda::embedding_gather_norm_calls() - gathers, n) << name;
    const uint64_t calls_b = cuda::mmq_gemv_residual_norm_calls();
    const uint64_t gathers_b = cuda::embedding_gather_norm_calls();
    const auto b = run_alone(*kernels, 3, ids, blocks, 1, pool);
    EXPECT_EQ(cuda::mmq_gemv_residual_norm_calls() - calls_b, n * (2 * cfg.n_layers - 1))
        << name << ": TESSERA_END_NORMS=0 formed the head's input in the down GEMV";
    EXPECT_EQ(cuda::embedding_gather_norm_calls(), gathers_b)
        << name << ": TESSERA_END_NORMS=0 took the gather's norm";
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << name;
    expect_logits_close(a, b, V, name + " end norms vs the norm kernels", 2e-4, 0.9);
    expect_graph_steps_equal(*fused, ids, blocks, a, name, pool);
  }
}

// One-row steps with SwiGLU in the gate|up GEMV's epilogue and down on its f16 row (mmq.h:
// mmq_gemv_swiglu_half) against the 8-bit quantizer kernel between them (TESSERA_HALF_SWIGLU=0):
// Q4_0 / Q8_0 / Q4_K / Q6_K / Q5_0 / Q5_K / Q4_1 down weights (TESSERA_HALF_SWIGLU=all; the default
// for every type with an f16 dot but Q4_1, whose default steps must be the 8-bit path's bits).
// Down's input rounds to 2^-11 of each element instead of amax / 254 of its block, so the logits
// move by about the 8-bit path's own rounding (nMSE <= 1e-3; top-1 >= 90 %: random weights have
// near ties, and with the norms at the step's ends formed like the others (session 64) Q4_K's top-1
// moved at 2 of the 24 positions, 91.7 %, nMSE 3.5e-4 on an H100). Eager steps, then the same steps
// replayed from CUDA graphs.
TEST(LlamaCudaDummy, HalfSwigluStepsMatchTheQuantizerPath) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  models::LlmConfig cfg = small_llama(512, 8, 2, 1536);
  cfg.n_layers = 3;
  const int n = 24;
  const std::vector<int32_t> ids = prompt_ids(n);
  const std::vector<int32_t> blocks = {2, 0, 1};
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_0, DType::kQ5_K, DType::kQ4_1}) {
    const std::string name(dtype_name(t));
    auto create = [&] { return models::cuda_llama_create_dummy(cfg, t); };
    const auto half_model = with_env("TESSERA_HALF_SWIGLU", "all", create);
    const auto quantizer_model = with_env("TESSERA_HALF_SWIGLU", "0", create);
    models::CausalLm& half = *half_model;
    models::CausalLm& quantizer = *quantizer_model;
    const int64_t V = cfg.vocab;
    const auto a = run_alone(half, 3, ids, blocks, 1, pool);
    const auto b = run_alone(quantizer, 3, ids, blocks, 1, pool);
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << name;
    const bool same = expect_logits_close(a, b, V, name + " f16 SwiGLU row vs 8-bit", 1e-3, 0.9);
    EXPECT_FALSE(same) << name << ": the f16 path did not run";
    expect_graph_steps_equal(half, ids, blocks, a, name, pool);
    const auto default_model = with_env("TESSERA_HALF_SWIGLU", nullptr, create);
    const auto c = run_alone(*default_model, 3, ids, blocks, 1, pool);
    const bool q4_1 = t == DType::kQ4_1;  // the default's path: the 8-bit row for Q4_1, else the f16 row
    EXPECT_EQ(0, std::memcmp(c.data(), (q4_1 ? b : a).data(), c.size() * sizeof(float)))
        << name << (q4_1 ? ": the default took the f16 row" : ": the default did not take the f16 row");
  }
}

// With TESSERA_PERSISTENT_DECODE=1, one-row steps of quantized models take the persistent
// decode kernel (every layer in one launch, kernels/cuda/decode_persistent.h) instead of the
// kernel chain (norm + quantize, GEMVs, paged attention, ...). Same random weights, teacher-forced
// one-row steps: the logits must agree closely (they differ by attention's rounding, f32 here
// vs f16 q and probabilities on tensor cores there, and the GEMVs' summation order).
// smollm2-135m: head_dim 64, 3 query heads per kv head; llama3-8b-shaped Q4_K (32-element
// activations): head_dim 128, group 4 (a 32000-token head to keep it light); group 1 (every
// query head its own kv head); group 8 with 8 kv heads over enough positions that attention has
// more items (chunks x kv heads) than the grid has blocks (2 per SM), so blocks take several.
TEST(LlamaCudaDummy, PersistentDecodeMatchesTheKernelChain) {
  TESSERA_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  struct Case {
    const char* name;
    DType type;
    int positions;
    std::function<models::LlmConfig()> cfg;  // null: the named architecture
  };
  // The grid is 2 blocks per SM; 8 kv heads x 32-key chunks: 4 chunks more than the grid holds.
  const int grid = 2 * cuda::sm_count(), long_positions = (grid / 8 + 4) * 32;
  const std::vector<Case> cases = {
      {"smollm2-135m", DType::kQ8_0, 40, nullptr},
      {"smollm2-135m", DType::kQ4_0, 40, nullptr},
      {"smollm2-135m", DType::kQ4_1, 40, nullptr},
      {"llama3-8b", DType::kQ4_K, 40, nullptr},
      {"group 1 (4 heads of 128)", DType::kQ4_0, 40, [] { return small_llama(512, 4, 4, 1024); }},
      {"group 8, attention items > blocks", DType::kQ8_0, long_positions,
       [] { return small_llama(4096, 64, 8, 2048); }},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> ids = prompt_ids(c.positions);
    const int64_t block_size = 16, n_blocks = (c.positions + block_size - 1) / block_size + 1;
    int64_t mul = 7;  // a shuffled table: block i at (mul i + 3) mod n_blocks, mul coprime to it
    while (std::gcd(mul, n_blocks) != 1) mul += 2;
    std::vector<int32_t> blocks(n_blocks);
    for (int64_t i = 0; i < n_blocks; ++i) blocks[i] = static_cast<int32_t>((mul * i + 3) % n_blocks);
    auto create = [&] {
      if (c.cfg) return models::cuda_llama_create_dummy(c.cfg(), c.type);
      return models::cuda_llama_create_dummy(c.name, std::string(c.name) == "llama3-8b" ? 32000 : 0, c.type);
    };
    // Both on 8-bit SwiGLU rows, as the persistent step quantizes them (the chain's default f16
    // row for Q4_0 / Q8_0 / Q4_K / Q6_K down weights rounds them otherwise:
    // Projections::half_swiglu), and with the norm kernels at the step's ends, as the persistent
    // step forms those rows (TESSERA_END_NORMS=0; EndNormStepsMatchTheNormKernels covers the
    // chain's default).
    auto create_8bit = [&] {
      const auto no_end_norms = [&] { return with_env("TESSERA_END_NORMS", "0", create); };
      return with_env("TESSERA_HALF_SWIGLU", "0", no_end_norms);
    };
    auto [chain, persistent] = model_pair("TESSERA_PERSISTENT_DECODE", "1", create_8bit);  // off by default (still slower)
    auto cache_a = chain->make_kv_cache(n_blocks, block_size);
    auto cache_b = persistent->make_kv_cache(n_blocks, block_size);
    const uint64_t launches = cuda::decode_persistent_launches();
    const auto want = run_alone(*chain, cache_a, ids, blocks, 1, pool);
    EXPECT_EQ(cuda::decode_persistent_launches(), launches) << "the chain model took the persistent step";
    const auto got = run_alone(*persistent, cache_b, ids, blocks, 1, pool);
    EXPECT_EQ(cuda::decode_persistent_launches() - launches, ids.size()) << "one launch per one-row step";
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    const int64_t V = chain->config().vocab;
    {  // the engine's way: one-row steps replayed from CUDA graphs, the same bits as eager
      auto cache_g = persistent->make_kv_cache(n_blocks, block_size);
      std::vector<float> row(V);
      for (int32_t pos = 0; pos < static_cast<int32_t>(ids.size()); ++pos) {
        const models::SeqChunk ch{pos, 1, blocks, true};
        persistent->forward({&ids[pos], 1}, {&ch, 1}, cache_g, row.data(), /*all_logits=*/false, pool);
        const std::vector<float> eager(got.begin() + pos * V, got.begin() + (pos + 1) * V);
        ASSERT_LE(test::nmse(row, eager), 1e-10) << c.name << " graph step at position " << pos;
      }
    }
    // Position 0 attends to one key (its output is v exactly on both paths): only the GEMVs'
    // summation order differs.
    const std::vector<float> want0(want.begin(), want.begin() + V), got0(got.begin(), got.begin() + V);
    EXPECT_LE(test::nmse(got0, want0), 1e-6) << c.name << " position 0";
    const Agreement a = compare(want, got, V);
    const double e = test::nmse(got, want);
    const std::string name = std::string(c.name) + " " + std::string(dtype_name(c.type));
    std::printf("%s persistent vs kernel chain: top-1 %.1f%%, mean KL %.2e, nMSE %.2e\n", name.c_str(),
                100 * a.top1, a.mean_kl, e);
    EXPECT_LE(e, 2e-3) << name;
    EXPECT_GE(a.top1, 0.85) << name;
    // The positions whose attention has more items (chunks x kv heads) than the grid has
    // blocks, on their own (blocks take several items there).
    const int64_t kv = chain->config().n_kv_heads, first_multi = (grid + kv - 1) / kv * 32;
    if (first_multi < c.positions) {
      const std::vector<float> tw(want.begin() + first_multi * V, want.end()),
          tg(got.begin() + first_multi * V, got.end());
      EXPECT_LE(test::nmse(tg, tw), 2e-3) << name << " positions >= " << first_multi;
    }
  }
}

// The criterion: greedy text equal, or first different where the CPU's top-2 margin is
// < 0.1 logit. The margin is the CPU generation's own (its logprobs at that token, from the
// decode path that chose it). Scoring the prefix in one batched pass instead (as this test did
// until session 11) is another computation: on "def fibonacci(n):" it gives 0.334 where the
// CPU's decode step that picked the token had 0.065, and on "The three primary colors are" 0.003
// where it had 0.062; both are printed. On this Q4_1 model the outcome is a draw over equally
// valid f32 summation orders (session 26: 2 of 8 settings of the GEMVs' orders pass, the others
// first differ at margins 0.11-0.27; docs/design/cuda_engine_history.md, "Session 26"); the test
// keeps the threshold. Session 32: with the norms fused into the o / down GEMVs (the sum of
// squares added in another order) it passes (first differences at margins 0.091, 0.065, 0.061);
// TESSERA_FUSED_NORM=0 fails as before (0.269, 0.112): still a draw, not a property.
TEST(LlamaCudaEngine, GreedyTextOnGpuFollowsCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_MODEL();
  EngineOptions gpu_opt;
  gpu_opt.device = "cuda";
  auto cpu = Engine::load(model_path());
  auto gpu = Engine::load(model_path(), gpu_opt);
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().to_string();
  const char* prompts[] = {"The capital of France is", "Write a haiku about the sea.",
                           "def fibonacci(n):", "Once upon a time", "The three primary colors are"};
  for (const char* p : prompts) {
    GenerationParams gp;
    gp.max_tokens = 64;
    auto ids = (*cpu)->tokenize(p);
    GenerationParams cpu_gp = gp;
    cpu_gp.logprobs = 2;  // reported only: the tokens are the same greedy choices
    auto a = (*cpu)->generate_from_tokens(*ids, cpu_gp);
    auto b = (*gpu)->generate_from_tokens(*ids, gp);
    ASSERT_TRUE(a.ok() && b.ok());
    // One entry per generated token, and one for the end-of-generation token that stopped it.
    ASSERT_GE(a->logprobs.size(), a->tokens.size());
    size_t k = 0;
    while (k < a->tokens.size() && k < b->tokens.size() && a->tokens[k] == b->tokens[k]) ++k;
    if (k == a->tokens.size() && k == b->tokens.size()) {
      std::printf("prompt %-30s: identical (%zu tokens)\n", p, k);
      continue;
    }
    std::vector<int32_t> prefix = *ids;
    prefix.insert(prefix.end(), a->tokens.begin(), a->tokens.begin() + k);
    auto logits = (*cpu)->score(prefix);
    ASSERT_TRUE(logits.ok());
    const int64_t V = (*cpu)->summary().vocab;
    std::vector<float> last(logits->end() - V, logits->end());
    std::partial_sort(last.begin(), last.begin() + 2, last.end(), std::greater<float>());
    const float batched_margin = last[0] - last[1];
    // The CPU's margin where it chose token k (k == its token count: where it chose to stop).
    float margin = batched_margin;
    if (k < a->logprobs.size()) {
      const auto& top = a->logprobs[k].top;
      ASSERT_GE(top.size(), 2u);
      margin = top[0].second - top[1].second;
    }
    std::printf("prompt %-30s: first difference at token %zu (CPU %zu tokens), CPU top-2 margin %.3f "
                "(batched scoring of the prefix: %.3f)\n",
                p, k, a->tokens.size(), margin, batched_margin);
    EXPECT_LT(margin, 0.1f) << p << ": the GPU's text left the CPU's where the CPU was not near a tie";
  }
}

}  // namespace
}  // namespace tessera
