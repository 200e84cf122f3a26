#include "models/cuda/llama_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_bf16.h"
#include "backend/cuda/op_profiler.h"
#include "core/error.h"
#include "kernels/cuda/decode_persistent.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/cuda/sample.h"
#include "models/cuda/decode_graphs.h"
#include "models/cuda/device_grow.h"
#include "models/cuda/llama_cuda_project.h"
#include "models/cuda/llama_cuda_weights.h"
#include "models/cuda/step_plan.h"
#include "models/cuda/step_tables.h"
#include "models/llama.h"
#include "models/llama_hf.h"
#include "models/weight_source.h"

namespace tessera::models {
namespace {

// Whether environment variable `name` is set to `value` (the engine's A/B switches).
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

using cuda_llama::bf16;
using cuda_llama::Grow;
using cuda_llama::Layer;
using cuda_llama::Proj;
using cuda_llama::Projections;
using cuda_llama::StepTables;

class CudaLlama final : public CausalLm {
 public:
  explicit CudaLlama(LlmConfig cfg) : cfg_(std::move(cfg)), w_(cfg_) {
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : sampled_)
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }

  void load(const WeightSource& w) { w_.load(w); }
  void fill_dummy(uint64_t seed, DType type) { w_.fill_dummy(seed, type, stream_); }
  ~CudaLlama() override {
    if (stream_) cudaStreamSynchronize(stream_);  // launches nobody waited for
    graphs_.clear();
    for (cudaEvent_t e : sampled_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
    for (const auto& set : pinned_)
      for (void* p : set) cudaFreeHost(p);
  }

  const LlmConfig& config() const override { return cfg_; }

  // Bytes a decode step reads: every projection and the head as stored (quantized: GGUF block
  // bytes), the norms, one embedding row (negligible, not counted).
  int64_t decode_weight_bytes() const override {
    return w_.weight_bytes +
           static_cast<int64_t>(sizeof(float)) * cfg_.d_model * (2 * cfg_.n_layers + 1);
  }
  int64_t matmul_params() const override {
    const int64_t d = cfg_.d_model, qd = cfg_.n_heads * cfg_.head_dim,
                  kvd = cfg_.n_kv_heads * cfg_.head_dim;
    return cfg_.n_layers * (d * qd * 2 + 2 * d * kvd + 3 * d * cfg_.d_ff) + cfg_.vocab * d;
  }

  KvCache make_kv_cache(int64_t n_blocks, int64_t block_size, DType dtype) const override {
    TESSERA_CHECK_ARG(dtype == DType::kF16, "the CUDA KV cache is f16");
    const int64_t rows = n_blocks * block_size;
    const int64_t shape[3] = {rows, cfg_.n_kv_heads, cfg_.head_dim};
    const size_t bytes = static_cast<size_t>(rows * cfg_.n_kv_heads * cfg_.head_dim) * 2;
    std::vector<Tensor> k, v;
    for (int64_t i = 0; i < 2 * cfg_.n_layers; ++i) {
      void* p = nullptr;
      TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes));
      std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });
      (i % 2 ? v : k).push_back(Tensor::view(DType::kF16, shape, 3, p, owner, Device::kCuda));
    }
    return KvCache(std::move(k), std::move(v), block_size);
  }

  void forward(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks, KvCache& cache,
               float* logits, bool all_logits, ThreadPool&) override {
    TESSERA_CHECK_ARG(launched_.size() < 2, "forward: two launches are outstanding");
    pick_pinned_set();
    const int64_t n_logits = run(tokens, chunks, cache, all_logits, false, nullptr).n_logits;
    const int64_t V = cfg_.vocab;
    float* host = pinned<float>(kLogits, n_logits * V);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(host, logits_.get(n_logits * V),
                                       static_cast<size_t>(n_logits * V) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    prof_.collect();
    std::memcpy(logits, host, static_cast<size_t>(n_logits * V) * sizeof(float));
  }

  bool samples_on_device() const override { return true; }

  // The bf16 projections' cuBLASLt kernels timed ahead (Projections::prepare_rows).
  void prepare_rows(int64_t max_rows) override { proj_.prepare_rows(max_rows, stream_); }

  bool forward_sample(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks,
                      KvCache& cache, const SampleBatch& batch, int32_t* ids, ThreadPool& pool) override {
    TESSERA_CHECK_ARG(launched_.empty(), "forward_sample: a launch is still outstanding");
    launch_sample(tokens, chunks, cache, batch, false, pool);
    wait_sampled(ids);
    return true;
  }

  // The profiler times each op of a step eagerly, so a profiled model waits step by step.
  // TESSERA_LAUNCH_AHEAD=0 makes every step wait too (A/B benchmarks).
  bool launches_ahead() const override { return !prof_.enabled() && launch_ahead_on_; }

  void launch_sample(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks,
                     KvCache& cache, const SampleBatch& batch, bool tokens_from_last,
                     ThreadPool&) override {
    TESSERA_CHECK_ARG(launched_.size() < 2, "launch_sample: two launches are already outstanding");
    pick_pinned_set();
    const SampleTables st = run(tokens, chunks, cache, false, tokens_from_last, &batch);
    const int64_t n_logits = st.n_logits;
    // The ids go where the next step's tokens are read (tokens_from_last: no copy).
    int32_t* d_ids = tokens_.get(std::max<int64_t>(n_logits, 1));
    if (!st.drawn) {
      cuda::sample_rows(logits_.get(n_logits * cfg_.vocab), n_logits, cfg_.vocab, st.rows,
                        st.penalties, st.banned, d_ids, stream_);
      prof_.mark("sample");
    }
    int32_t* host = pinned<int32_t>(kIds, n_logits);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(host, d_ids, static_cast<size_t>(n_logits) * 4,
                                       cudaMemcpyDeviceToHost, stream_));
    TESSERA_CUDA_CHECK(cudaEventRecord(sampled_[set_], stream_));
    launched_.push_back({set_, n_logits});
    last_sampled_rows_ = n_logits;
  }

  void wait_sampled(int32_t* ids) override {
    TESSERA_CHECK_ARG(!launched_.empty(), "wait_sampled: nothing was launched");
    const Launch l = launched_.front();
    launched_.pop_front();
    TESSERA_CUDA_CHECK(cudaEventSynchronize(sampled_[l.set]));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    prof_.collect();
    std::memcpy(ids, pinned_[l.set][kIds], static_cast<size_t>(l.rows) * 4);
  }

 private:
  // A call's sampling tables on the device (run() sends them with the step's own tables).
  struct SampleTables {
    int64_t n_logits = 0;
    const SampleRow* rows = nullptr;
    const SamplePenalty* penalties = nullptr;
    const int32_t* banned = nullptr;
    bool drawn = false;  // the ids are drawn already: plain greedy rows' argmax, in the step
  };

  // Greedy rows with nothing to apply take a plain argmax over every SM (sample.h).
  bool plain_greedy(const SampleBatch& batch) const {
    return greedy_argmax_on_ && batch.rows.size() <= 65535 && batch.penalties.empty() &&
           batch.banned.empty() &&
           std::all_of(batch.rows.begin(), batch.rows.end(),
                       [](const SampleRow& r) { return r.temperature <= 0.f; });
  }

  // The forward pass up to device logits (logits_ holds n_logits x vocab). With tokens_from_last
  // the tokens are the ids of the last launch_sample (see CausalLm), already in tokens_. `batch`
  // (launch_sample's) travels in the same copy as the step's tables; plain greedy rows get their
  // argmax at the step's end, into tokens_.
  SampleTables run(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks,
                   KvCache& cache, bool all_logits, bool tokens_from_last,
                   const SampleBatch* batch) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    TESSERA_CHECK_ARG(n >= 1, "forward: no tokens");
    TESSERA_CHECK_ARG(cache.n_layers() == cfg_.n_layers && cache.k(0).device() == Device::kCuda &&
                          cache.dtype() == DType::kF16,
                      "forward: the CUDA model needs its own device KV cache");
    if (tokens_from_last)
      TESSERA_CHECK_ARG(n == last_sampled_rows_,
                        "forward: the tokens from the last launch are a different count");
    else
      for (int32_t t : tokens)
        TESSERA_CHECK_ARG(t >= 0 && t < cfg_.vocab, "forward: token id outside the vocabulary");
    const int64_t n_logits = plan_.build(chunks, cache, n, all_logits, cfg_.n_heads, cfg_.n_kv_heads);
    const SampleBatch sampling = batch ? *batch : SampleBatch{};  // none: empty tables
    if (batch)
      TESSERA_CHECK_ARG(static_cast<int64_t>(sampling.rows.size()) == n_logits,
                        "forward_sample: one sampling row per logits row");
    const bool greedy = batch && plain_greedy(sampling);
    const int64_t d = cfg_.d_model, hd = cfg_.head_dim, qd = cfg_.n_heads * hd,
                  kvd = cfg_.n_kv_heads * hd, ff = cfg_.d_ff, V = cfg_.vocab;
    cudaStream_t s = stream_;

    // The tokens: the last call's sampled ids where they come from it (in stream order after
    // their sampling; no copy), else copied in, replacing them.
    int32_t* d_tokens = tokens_.get(n);
    if (!tokens_from_last) {
      int32_t* host = pinned<int32_t>(kTokens, n);
      std::memcpy(host, tokens.data(), static_cast<size_t>(n) * 4);
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(d_tokens, host, static_cast<size_t>(n) * 4,
                                         cudaMemcpyHostToDevice, s));
      last_sampled_rows_ = -1;
    }
    // The step's tables, then the sampling ones, in one copy (StepTables).
    StepTables tables;
    const auto pos_t = tables.add(std::span<const int32_t>(plan_.positions));
    const auto rows_t = tables.add(std::span<const int64_t>(plan_.cache_rows));
    const auto tiles_t = tables.add(std::span<const cuda::PagedAttentionTile>(plan_.tiles));
    const auto tables_t = tables.add(std::span<const int32_t>(plan_.tables));
    const auto logit_rows_t =
        tables.add(std::span<const int32_t>(plan_.logit_rows.data(), n_logits));
    const auto sample_t = tables.add(sampling.rows);
    const auto pen_t = tables.add(sampling.penalties);
    const auto banned_t = tables.add(sampling.banned);
    uint8_t* host_tables = pinned<uint8_t>(kTables, static_cast<int64_t>(tables.bytes()));
    // Grown in powers of two (from 4 KB): its address is in the graphs' Bufs.
    const size_t dev_bytes = std::bit_ceil(std::max<size_t>(tables.bytes(), 4096));
    uint8_t* dev_tables = tables_dev_.get(static_cast<int64_t>(dev_bytes));
    tables.send(host_tables, dev_tables, s);
    int32_t* d_pos = pos_t.on(dev_tables);
    int64_t* d_rows = rows_t.on(dev_tables);
    cuda::PagedAttentionTile* d_tiles = tiles_t.on(dev_tables);
    int32_t* d_tables = tables_t.on(dev_tables);
    int32_t* d_logit_rows = logit_rows_t.on(dev_tables);
    const SampleTables out{n_logits, sample_t.on(dev_tables), pen_t.on(dev_tables),
                           banned_t.on(dev_tables), greedy};

    Bufs b{};
    b.x = residual_.get(n * d);
    b.normed = normed_.get(std::max<int64_t>(n_logits, 1) * d);
    const int64_t widest = std::max({d, qd, ff});
    b.h = h_.get(n * widest);
    b.gu = w_.any_bf16_gu ? gu_.get(n * 2 * ff) : nullptr;
    b.guf = w_.any_f32_gu ? guf_.get(n * 2 * ff) : nullptr;
    b.qkv = qkv_.get(n * (qd + 2 * kvd));
    b.q = q_.get(n * qd);
    b.attn = w_.any_quant ? attn_.get(n * qd) : nullptr;
    b.qx = w_.any_quant ? qx_.get(n * widest) : nullptr;
    b.meta = w_.any_quant ? meta_.get(n * widest / 32) : nullptr;
    // The next RMSNorm's input formed by a one-row GEMV's epilogue (enqueue's fuse_norms).
    b.qx2 = w_.any_quant ? qx2_.get(d) : nullptr;
    b.meta2 = w_.any_quant ? meta2_.get(std::max<int64_t>(d / 32, 1)) : nullptr;
    b.block_ss = w_.any_quant ? block_ss_.get(std::max<int64_t>(d / 32, 1)) : nullptr;
    // The bf16 weight slices, where a quantized projection of more than kMmqGemvMaxRows rows may
    // not take dequant_gemm (more rows than it takes, or a shape it cannot run).
    b.wdq = proj_.slices(n) ? wdq_.get(Projections::kSliceElems) : nullptr;
    b.out = logits_.get(n_logits * V);
    b.tokens = d_tokens;
    b.pos = d_pos;
    b.rows = d_rows;
    b.tiles = d_tiles;
    b.tables = d_tables;
    b.logit_rows = d_logit_rows;
    // Split-KV attention scratch. Its size follows from (rows, table stride), a decode graph's
    // key, so only the buffer's address is in Bufs: it moves (and graphs are dropped) only when
    // the buffer grows, not whenever a small batch's split count changes.
    attn_ws_bytes_ = cuda::paged_attention_workspace_bytes(
        n, cfg_.n_heads, hd,
        cuda::paged_attention_splits(static_cast<int64_t>(plan_.tiles.size()), cfg_.n_kv_heads,
                                     plan_.table_stride, cache.block_size()));
    bool fresh_ws = false;
    b.attn_ws =
        attn_ws_.get(std::max<int64_t>(1, static_cast<int64_t>(attn_ws_bytes_ / 4)), &fresh_ws);
    if (fresh_ws)  // a new buffer: zero its split counters, in stream order (launches keep them 0)
      cuda::paged_attention_workspace_reset(b.attn_ws, attn_ws_bytes_, stream_);

    // Set for every call once enabled (not only one-row ones): a graph replays only on the Bufs
    // it was captured on, and a field that came and went with the row count would have each
    // graph captured again at every switch.
    if (persistent_ok()) prepare_persistent(b, cache);
    // The layers' projections run at n rows, the head at n_logits (either may take dequant_gemm).
    const size_t dg_ws_bytes = proj_.plan_call(n, n_logits);
    b.dg_ws = w_.any_quant ? dg_ws_.get(static_cast<int64_t>(std::max<size_t>(dg_ws_bytes, 16))) : nullptr;
    if (greedy) {
      const size_t ws_bytes = cuda::sample_greedy_workspace_bytes(n_logits, V);
      b.greedy_ws = greedy_ws_.get(static_cast<int64_t>((ws_bytes + 7) / 8));
    }

    // Decode-only steps (one token per sequence) replay a CUDA graph per (rows, table stride,
    // argmax) (decode_graphs.h): ~10 launches per layer collapse into one.
    const bool decode_only = !all_logits && n_logits == n && n <= kMaxGraphRows &&
                             std::all_of(chunks.begin(), chunks.end(),
                                         [](const SeqChunk& c) { return c.n_tokens == 1; });
    if (prof_.enabled()) {  // eager, one phase per step shape
      int64_t bucket = 1;
      while (bucket < n) bucket *= 2;
      prof_.begin(decode_only ? "decode x" + std::to_string(n)
                              : "prefill/mixed <= " + std::to_string(bucket) + " rows",
                  s);
      enqueue(b, n, n_logits, cache);
      return out;
    }
    if (decode_only) {
      graphs_.follow(cache);
      const Graphs::Key key{n, plan_.table_stride, greedy};
      if (graphs_.launch(key, b, s)) return out;
      if (graphs_.seen_before(key)) {
        graphs_.capture(key, b, s, [&] { enqueue(b, n, n_logits, cache); });
        return out;
      }
    }
    enqueue(b, n, n_logits, cache);
    return out;
  }

  // Device buffers of one forward call (graphs capture these addresses).
  struct Bufs {
    float *x, *normed, *qkv, *q, *attn, *guf, *out;
    bf16 *h, *gu;
    int8_t* qx;
    cuda::MmqActMeta* meta;
    int8_t* qx2;  // one row: x * w of the next RMSNorm, quantized by the o / down GEMV (fuse_norms)
    cuda::MmqActMeta* meta2;
    double* block_ss;  // and its 32-element blocks' sums of squares
    bf16* wdq;  // a dequantized weight slice (quantized projections of many rows)
    int32_t *tokens, *pos, *tables, *logit_rows;
    int64_t* rows;
    cuda::PagedAttentionTile* tiles;
    float* attn_ws;
    cuda::PersistentLayer* player;  // one-row steps through decode_persistent: its layer table
    float* pws;                     // and workspace (null otherwise)
    void* dg_ws;                    // quantized projections through dequant_gemm: split-k sums
    uint64_t* greedy_ws;            // the greedy argmax's workspace (null: no argmax)
  };

  // Whether one-row steps take decode_persistent: asked for (TESSERA_PERSISTENT_DECODE=1, read
  // when the model is created: it is still slower than the kernel chain, see
  // docs/design/cuda_engine.md), every layer's four projections quantized, one part each, all
  // of one type it handles, and RoPE in the QKV epilogue's form (interleaved, no bias).
  bool persistent_ok() {
    if (persistent_ok_) return *persistent_ok_;
    bool ok = persistent_on_ && w_.rope_inv_freq != nullptr && !cfg_.qkv_bias && !cfg_.qk_norm &&
              cfg_.rope.layout == ref::RopeLayout::kInterleaved && !w_.layers.empty();
    const DType t = ok && w_.layers[0].qkv.parts.size() == 1 ? w_.layers[0].qkv.parts[0].type : DType::kBF16;
    ok = ok && cuda::decode_persistent_supported(t, cfg_.n_layers, cfg_.d_model, cfg_.n_heads, cfg_.n_kv_heads,
                                                 cfg_.head_dim, cfg_.d_ff);
    bool aligned = true;
    for (const Layer& l : w_.layers) {
      for (const Proj* p : {&l.qkv, &l.wo, &l.wgu, &l.wd})
        ok = ok && p->parts.size() == 1 && p->parts[0].type == t &&
             reinterpret_cast<uintptr_t>(p->parts[0].packed) % 16 == 0;
      for (const float* w : {l.attn_norm, l.ffn_norm}) aligned = aligned && reinterpret_cast<uintptr_t>(w) % 16 == 0;
    }
    persistent_norms_aligned_ = aligned;
    persistent_ok_ = ok;
    return ok;
  }

  // The persistent step's layer table (this cache's K/V pointers; uploaded when they change)
  // and workspace (grown to this call's table capacity) into b.
  void prepare_persistent(Bufs& b, KvCache& cache) {
    std::vector<cuda::PersistentLayer> table(cfg_.n_layers);
    for (int64_t li = 0; li < cfg_.n_layers; ++li) {
      const Layer& l = w_.layers[li];
      table[li] = {l.qkv.parts[0].packed, l.wo.parts[0].packed, l.wgu.parts[0].packed, l.wd.parts[0].packed,
                   l.attn_norm, l.ffn_norm, static_cast<__half*>(cache.k(li).raw_data()),
                   static_cast<__half*>(cache.v(li).raw_data())};
    }
    bool fresh = false;
    b.player = player_.get(cfg_.n_layers, &fresh);
    if (fresh || std::memcmp(table.data(), player_host_.data(), table.size() * sizeof(table[0])) != 0) {
      player_host_ = std::move(table);  // stays alive (unchanged) until the copy has run
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(b.player, player_host_.data(), player_host_.size() * sizeof(player_host_[0]),
                                         cudaMemcpyHostToDevice, stream_));
    }
    const size_t bytes = cuda::decode_persistent_workspace_bytes(
        cfg_.n_kv_heads, cfg_.n_heads, cfg_.head_dim, plan_.table_stride * cache.block_size());
    b.pws = pws_.get(static_cast<int64_t>((bytes + 3) / 4), &fresh);
    if (fresh) cuda::decode_persistent_workspace_reset(b.pws, stream_);
  }

  // Every kernel of the forward pass on stream_ (eager, or recorded by a capture).
  void enqueue(const Bufs& b, int64_t n, int64_t n_logits, KvCache& cache) {
    const int64_t d = cfg_.d_model, hd = cfg_.head_dim, qd = cfg_.n_heads * hd,
                  kvd = cfg_.n_kv_heads * hd, ff = cfg_.d_ff, V = cfg_.vocab;
    cudaStream_t s = stream_;
    float *x = b.x, *normed = b.normed, *q = b.q, *out = b.out;
    bf16 *h = b.h, *gu = b.gu;
    const int32_t *d_tokens = b.tokens, *d_pos = b.pos, *d_tables = b.tables,
                  *d_logit_rows = b.logit_rows;
    const int64_t* d_rows = b.rows;
    const cuda::PagedAttentionTile* d_tiles = b.tiles;
    cuda::RopeConfig rope{cfg_.rope.layout, cfg_.rope.n_rot, cfg_.rope.theta_base,
                          cfg_.rope.position_scale, nullptr, w_.rope_inv_freq};  // angles: the table
    const float scale = attention_scale(cfg_);
    const bool persistent = n == 1 && b.pws != nullptr;
    // One row: the o GEMV forms gate|up's input and the down GEMV the next layer's qkv input in
    // their epilogues (x * w quantized without the norm's 1 / rms, which the consumer applies:
    // cuda::MmqRowNorm), so no norm kernel runs between them. Through b.qx2 / meta2 / block_ss:
    // b.qx holds the producer's own input.
    const bool fuse_norms = n == 1 && fused_norm_on_ && w_.any_quant;
    const auto fusable = [&](const Proj& producer, const Proj& consumer) {
      return fuse_norms && Projections::norm_fusable(producer, consumer);
    };
    const cuda::MmqRowNorm row_norm{b.block_ss, d, cfg_.norm_eps};
    // And at the step's two ends: the embedding gather forms layer 0's qkv input, and with the
    // row's logits wanted the last down GEMV forms the head's (no row gather, no norm kernel).
    const Proj &qkv0 = w_.layers[0].qkv, &down_last = w_.layers.back().wd;
    const bool first_normed = !persistent && fuse_norms && qkv0.quant() && end_norm_takes(qkv0);
    const bool head_normed = !persistent && n_logits == 1 && fusable(down_last, w_.output) &&
                             end_norm_takes(down_last) && end_norm_takes(w_.output);
    const cuda::MmqResidualNorm qkv0_in{x, w_.layers[0].attn_norm, b.qx2, b.meta2, b.block_ss};
    if (first_normed) cuda::embedding_gather_norm(w_.embd_type, w_.embd, V, d, d_tokens, qkv0_in, s);
    else cuda::embedding_gather<float>(w_.embd_type, w_.embd, V, d, d_tokens, n, x, s);
    prof_.mark(first_normed ? "embedding + norm" : "embedding", {static_cast<double>(n) * d * 6});
    const int64_t qkvd = qd + 2 * kvd;
    const cuda::OpCost attn_cost =
        prof_.enabled() ? plan_.attention_cost(cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim) : cuda::OpCost{};
    const cuda::OpCost norm_cost{static_cast<double>(n) * d * 6};  // f32 in, bf16 out
    if (persistent) {  // one row: every layer in one persistent kernel
      cuda::PersistentDecode p{};
      p.type = w_.layers[0].qkv.parts[0].type;
      p.layers = b.player;
      p.n_layers = cfg_.n_layers;
      p.d = d;
      p.n_heads = cfg_.n_heads;
      p.n_kv_heads = cfg_.n_kv_heads;
      p.head_dim = hd;
      p.ff = ff;
      p.norm_eps = cfg_.norm_eps;
      p.norms_aligned = persistent_norms_aligned_;
      p.scale = scale;
      p.n_rot = cfg_.rope.n_rot;
      p.inv_freq = w_.rope_inv_freq;
      p.pos = b.pos;
      p.cache_row = b.rows;
      p.block_table = b.tables;
      p.block_size = cache.block_size();
      p.table_capacity = plan_.table_stride * cache.block_size();
      p.x = x;
      p.q = q;
      p.attn = b.attn;
      p.gu = b.guf;
      p.qx = b.qx;
      p.meta = b.meta;
      p.ws = b.pws;
      cuda::decode_persistent(p, s);
      if (prof_.enabled()) {
        double bytes = attn_cost.bytes * cfg_.n_layers;
        w_.for_each_layer_proj([&](const Proj& pr) { bytes += Projections::cost(pr, 1, 0, 0).bytes; });
        prof_.mark("layers (persistent)", {bytes});
      }
    }
    // Interleaved RoPE from the angle table: the form the fused epilogues and attention apply.
    const bool rope_table = w_.rope_inv_freq && cfg_.rope.layout == ref::RopeLayout::kInterleaved;
    // Rows of one token each, one per sequence (a decode-only attention launch): attention may
    // rotate q and k and write the new K/V rows itself (paged_attention.h), no RoPE kernel between.
    const bool rope_fits_attention = rope_table && rope_in_attention_on_ && plan_.one_row_per_sequence &&
                                     cfg_.n_heads / cfg_.n_kv_heads <= 16;
    const cuda::PagedAttentionNewRows new_rows{qkvd, d_rows, w_.rope_inv_freq,
                                               static_cast<int>(cfg_.rope.n_rot)};
    bool qkv_normed = first_normed;  // the gather or the previous down GEMV formed qkv's input
    for (int64_t li = 0; li < cfg_.n_layers && !persistent; ++li) {
      const Layer& l = w_.layers[li];
      __half* kc = static_cast<__half*>(cache.k(li).raw_data());
      __half* vc = static_cast<__half*>(cache.v(li).raw_data());
      // One row: RoPE and the KV write ride in the QKV GEMV's epilogue (one weight type).
      const bool rope_in_qkv =
          n == 1 && rope_table && !cfg_.qkv_bias && !cfg_.qk_norm &&
          (l.qkv.quant() ? l.qkv.parts.size() == 1 : cuda::gemv_bf16_f32_supported(l.qkv.w, h, d));
      const cuda::QkvRope qkv_rope{qd, kvd, hd, cfg_.rope.n_rot, w_.rope_inv_freq, d_pos, d_rows, kc, vc};
      const bool rope_in_attention = !rope_in_qkv && rope_fits_attention;
      const bool ffn_normed = fusable(l.wo, l.wgu);  // the o GEMV forms gate|up's input
      const cuda::PagedAttentionNewRows* attn_new_rows = rope_in_attention ? &new_rows : nullptr;
      const float* attn_q = rope_in_attention ? b.qkv : q;
      // q|k|v = norm(x) Wqkv^T (f32 rows of qkvd)
      if (l.qkv.quant()) {
        if (rope_in_qkv) {
          const Proj::Part& part = l.qkv.parts[0];
          if (qkv_normed) {
            cuda::mmq_gemv_qkv_rope(part.type, part.packed, d, b.qx2, b.meta2, q, qkv_rope, s, 0, &row_norm);
          } else {
            cuda::mmq_rms_norm_quantize_rows(part.type, x, l.attn_norm, cfg_.norm_eps, 1, d, b.qx, b.meta, s,
                                             /*k32=*/true);
            cuda::mmq_gemv_qkv_rope(part.type, part.packed, d, b.qx, b.meta, q, qkv_rope, s);
          }
        } else {
          project(l.qkv, qkv_normed ? In::normed(b.qx2, b.meta2, row_norm) : In::norm(x, l.attn_norm), n, b, b.qkv,
                  qkvd, false);
        }
      } else {
        cuda::rms_norm_rows_bf16(x, l.attn_norm, cfg_.norm_eps, n, d, h, s);
        prof_.mark("norm", norm_cost);
        if (rope_in_qkv)
          cuda::gemv_bf16_qkv_rope_f32(reinterpret_cast<const uint16_t*>(l.qkv.w), d, h, q, qkv_rope, s);
        else
          matmul(h, l.qkv, n, b.qkv, false);
      }
      // else a kernel before, the last down GEMV or (layer 0) the embedding gather formed it
      const bool norm_in_qkv = l.qkv.quant() && !qkv_normed;
      prof_.mark(rope_in_qkv ? (norm_in_qkv ? "norm + qkv + rope + kv write" : "qkv + rope + kv write")
                             : (norm_in_qkv ? "norm + qkv" : "qkv"),
                 Projections::cost(l.qkv, n, l.qkv.quant() ? 4 : 2, 4));
      if (!rope_in_qkv) {
        if (cfg_.qkv_bias) cuda::add_bias_rows(b.qkv, l.bqkv, n, qkvd, s);
        if (cfg_.qk_norm)  // Qwen3: each q / k head normed before RoPE
          cuda::head_rms_norm_rows(b.qkv, qkvd, n, cfg_.n_heads, cfg_.n_kv_heads, hd, l.q_norm, l.k_norm,
                                   cfg_.norm_eps, s);
        if (!rope_in_attention)
          cuda::rope_kv_write_strided<float>(b.qkv, qkvd, b.qkv + qd, b.qkv + qd + kvd, qkvd, q, d_pos, d_rows,
                                             n, cfg_.n_heads, cfg_.n_kv_heads, hd, rope, kc, vc, s);
        if (cfg_.qkv_bias || !rope_in_attention)
          prof_.mark(rope_in_attention ? "bias" : "bias + rope + kv write",
                     {static_cast<double>(n) * (qkvd * 4 + qd * 4 + kvd * 4)});
      }
      const bool o_f32_rows = l.wo.quant() && !proj_.bf16_input_rows(l.wo, n);
      if (o_f32_rows) {  // f32, quantized for the integer dots
        // A split decode-only launch may leave its partials' merge to o's input quantizer where o
        // reads 8-bit rows (paged_attention.h): the fence, count and merge off the critical path.
        const bool leave = leave_partials_on_ && proj_.quantized_input(l.wo, n);
        const cuda::PagedAttentionWorkspace ws{b.attn_ws, attn_ws_bytes_, n, 0, leave, plan_.one_row_per_sequence};
        const cuda::PagedAttentionPartials left = cuda::paged_attention<float, float>(
            attn_q, d_pos, d_tiles, static_cast<int64_t>(plan_.tiles.size()), d_tables, plan_.table_stride,
            cache.block_size(), kc, vc, cfg_.n_heads, cfg_.n_kv_heads, hd, scale, b.attn, s, ws, attn_new_rows);
        prof_.mark("attention", attn_cost);
        const cuda::MmqResidualNorm ffn_in{x, l.ffn_norm, b.qx2, b.meta2, b.block_ss};
        project(l.wo, left.o ? In::attention(left) : In::rows(b.attn), n, b, x, d, /*accumulate=*/true,
                ffn_normed ? &ffn_in : nullptr);
      } else {  // attention writes bf16: it only feeds the output projection (on bf16 rows)
        // One row: the partials left to a merge kernel before the o GEMV (batch 1: 4.14 -> 4.06 ms,
        // s26); at 4 / 8 rows (cuBLASLt, no PDL) that kernel cost 1.5 % (gpu_runs/s26_bf16_left_partials.txt).
        const cuda::PagedAttentionWorkspace ws{b.attn_ws, attn_ws_bytes_, n, 0, leave_partials_on_ && n == 1,
                                               plan_.one_row_per_sequence};
        const cuda::PagedAttentionPartials left = cuda::paged_attention<float, bf16>(
            attn_q, d_pos, d_tiles, static_cast<int64_t>(plan_.tiles.size()), d_tables, plan_.table_stride,
            cache.block_size(), kc, vc, cfg_.n_heads, cfg_.n_kv_heads, hd, scale, h, s, ws, attn_new_rows);
        if (left.o) cuda::paged_attention_merge_partials(left, n, h, s);  // the same bits, off attention's path
        prof_.mark("attention", attn_cost);
        if (l.wo.quant()) project(l.wo, In::bf16_rows(), n, b, x, d, /*accumulate=*/true);
        else matmul(h, l.wo, n, x, /*accumulate=*/true);  // residual += attention out
      }
      prof_.mark(ffn_normed ? "o + next norm" : "o", Projections::cost(l.wo, n, o_f32_rows ? 4 : 2, 8));
      // gate|up, bf16 when both it and down are bf16, else f32
      const bool f32_gu = l.wgu.quant() || l.wd.quant();
      const bf16* down_in = h;  // a bf16 down's input: the SwiGLU output
      // Quantized gate|up on the weight slices (prompt chunks past dequant_gemm's rows) and down on
      // bf16 rows: gate|up rounded to bf16, in guf's storage (half of it), as for bf16 weights;
      // SwiGLU then writes down's bf16 input rows.
      const bool bf16_slices_gu =
          l.wgu.quant() && l.wd.quant() && proj_.on_slices(l.wgu, n) && proj_.bf16_input_rows(l.wd, n);
      // One row: SwiGLU in gate|up's epilogue, down on its f16 row h16 (in guf's storage).
      const bool half_down = n == 1 && half_swiglu_on_ && Projections::half_swiglu(l.wgu, l.wd, half_swiglu_all_);
      auto* h16 = reinterpret_cast<__half*>(b.guf);
      if (bf16_slices_gu) {
        auto* gu_rows = reinterpret_cast<bf16*>(b.guf);
        proj_.project(l.wgu, In::norm(x, l.ffn_norm), n, scratch(b), gu_rows, stream_);
        prof_.mark("norm + gate|up", Projections::cost(l.wgu, n, 4, 2));
        cuda::swiglu_rows_bf16(gu_rows, n, ff, h, s);
        prof_.mark("swiglu", {static_cast<double>(n) * ff * 6});
      } else if (l.wgu.quant()) {
        const In gu_in = ffn_normed ? In::normed(b.qx2, b.meta2, row_norm) : In::norm(x, l.ffn_norm);
        if (half_down) proj_.project_swiglu_half(l.wgu, gu_in, scratch(b), h16, s);
        else project(l.wgu, gu_in, n, b, b.guf, 2 * ff, false);
        prof_.mark(ffn_normed ? "gate|up" : "norm + gate|up", Projections::cost(l.wgu, n, 4, half_down ? 1 : 4));
      } else {
        cuda::rms_norm_rows_bf16(x, l.ffn_norm, cfg_.norm_eps, n, d, h, s);
        prof_.mark("norm", norm_cost);
        const auto* w = reinterpret_cast<const uint16_t*>(l.wgu.w);
        // One row: SwiGLU in the GEMV's epilogue.
        if (!f32_gu && n == 1 && cuda::gemv_bf16_f32_supported(w, h, d)) {
          cuda::gemv_bf16_swiglu(w, h, ff, d, gu, s);
          down_in = gu;
        } else if (f32_gu) {
          matmul(h, l.wgu, n, b.guf, false);
        } else {
          matmul(h, l.wgu, n, gu);
        }
        const bool fused = down_in == gu;
        const double out_bytes = fused ? 1 : f32_gu ? 4 : 2;  // per gate|up output
        prof_.mark(fused ? "gate|up + swiglu" : "gate|up", Projections::cost(l.wgu, n, 2, out_bytes));
      }
      if (!l.wd.quant() && down_in == h) {
        if (f32_gu) cuda::swiglu_rows_f32_bf16(b.guf, n, ff, h, s);
        else cuda::swiglu_rows_bf16(gu, n, ff, h, s);
        prof_.mark("swiglu", {static_cast<double>(n) * ff * (f32_gu ? 10 : 6)});
      }
      const Layer* next = li + 1 < cfg_.n_layers ? &w_.layers[li + 1] : nullptr;
      qkv_normed = next != nullptr && fusable(l.wd, next->qkv);
      const bool next_normed = qkv_normed || (next == nullptr && head_normed);
      if (l.wd.quant()) {
        const float* next_norm_w = next ? next->attn_norm : w_.out_norm;
        const cuda::MmqResidualNorm next_in{x, next_norm_w, b.qx2, b.meta2, b.block_ss};
        project(l.wd, half_down ? In::half(h16) : bf16_slices_gu ? In::bf16_rows() : In::swiglu(b.guf), n, b, x, d, true,
                next_normed ? &next_in : nullptr);
      } else {
        matmul(down_in, l.wd, n, x, /*accumulate=*/true);  // residual += MLP out
      }
      const char* down_label = !l.wd.quant() || bf16_slices_gu || half_down ? "down"
                               : next_normed                   ? "swiglu + down + next norm"
                                                               : "swiglu + down";
      prof_.mark(down_label, Projections::cost(l.wd, n, l.wd.quant() && !bf16_slices_gu ? 8 : 2, 8));
    }
    if (head_normed) {
      project(w_.output, In::normed(b.qx2, b.meta2, row_norm), 1, b, out, V, false);
      prof_.mark("head", Projections::cost(w_.output, 1, 1, 4));
    } else if (n_logits > 0) {  // a step of prefill chunks only has no logits to compute
      cuda::gather_rows_f32(x, d_logit_rows, n_logits, d, normed, s);  // only rows that need logits
      if (w_.output.quant()) {
        project(w_.output, In::norm(normed, w_.out_norm), n_logits, b, out, V, false);
      } else {
        cuda::rms_norm_rows_bf16(normed, w_.out_norm, cfg_.norm_eps, n_logits, d, h, s);
        matmul(h, w_.output, n_logits, out, false);
      }
      prof_.mark("output norm + head", Projections::cost(w_.output, n_logits, 4, 4));
    }
    if (b.greedy_ws && n_logits > 0) {  // the ids over the tokens (already embedded)
      cuda::sample_greedy_rows(out, n_logits, V, b.greedy_ws, b.tokens, s);
      prof_.mark("sample");
    }
  }

  // The projections (llama_cuda_project.h), on this call's scratch and stream.
  using In = Projections::In;
  void project(const Proj& p, const In& in, int64_t rows, const Bufs& b, float* y, int64_t ldy, bool accumulate,
               const cuda::MmqResidualNorm* next_norm = nullptr) {
    proj_.project(p, in, rows, scratch(b), y, ldy, accumulate, stream_, next_norm);
  }
  static Projections::Scratch scratch(const Bufs& b) { return {b.h, b.qx, b.meta, b.wdq, b.dg_ws}; }
  void matmul(const bf16* x, const Proj& p, int64_t rows, float* y, bool accumulate) {
    proj_.matmul(x, p, rows, y, accumulate, stream_);
  }
  void matmul(const bf16* x, const Proj& p, int64_t rows, bf16* y) { proj_.matmul(x, p, rows, y, stream_); }

  // Pinned host buffers: a call's tokens and packed tables on their way to the device, and the
  // results coming back.
  enum Slot { kTokens, kTables, kLogits, kIds };

  // Two sets of pinned buffers: a call stages into (and its ids come back through) the set that
  // the outstanding launch does not use, whose copies may not have run yet.
  void pick_pinned_set() { set_ = launched_.empty() ? 0 : 1 - launched_.front().set; }

  // Pinned host buffer `slot` of the current set, grown to at least n elements of T.
  template <class T>
  T* pinned(int slot, int64_t n) {
    std::vector<void*>& bufs = pinned_[set_];
    std::vector<size_t>& caps = pinned_cap_[set_];
    if (bufs.size() <= static_cast<size_t>(slot)) {
      bufs.resize(slot + 1, nullptr);
      caps.resize(slot + 1, 0);
    }
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T);
    if (bytes > caps[slot]) {
      if (bufs[slot]) TESSERA_CUDA_CHECK(cudaFreeHost(bufs[slot]));
      bufs[slot] = nullptr;
      TESSERA_CUDA_CHECK(cudaMallocHost(&bufs[slot], bytes));
      caps[slot] = bytes;
    }
    return static_cast<T*>(bufs[slot]);
  }

  LlmConfig cfg_;
  cudaStream_t stream_ = nullptr;
  cuda::OpProfiler prof_;  // TESSERA_CUDA_PROFILE
  cuda_llama::Weights w_;  // holds a reference to cfg_: declared after it
  Projections proj_{cfg_, w_};  // after w_
  Grow<float> residual_, normed_, qkv_, q_, attn_, guf_, logits_, attn_ws_;
  Grow<bf16> h_, gu_;
  Grow<int8_t> qx_, qx2_;
  Grow<bf16> wdq_;
  Grow<uint8_t> dg_ws_;
  Grow<cuda::MmqActMeta> meta_, meta2_;
  Grow<double> block_ss_;
  // A call's tokens, and the ids launch_sample draws there (the next call's tokens).
  Grow<int32_t> tokens_;
  static constexpr int64_t kMaxGraphRows = 512;
  using Graphs = cuda_llama::DecodeGraphs<Bufs>;
  Graphs graphs_;  // of decode-only steps
  Grow<uint8_t> tables_dev_;  // a call's StepTables on the device
  std::vector<void*> pinned_[2];
  std::vector<size_t> pinned_cap_[2];
  int set_ = 0;  // the pinned set of the call being enqueued
  struct Launch {
    int set;       // its pinned set (the ids come back there)
    int64_t rows;  // its sampled ids
  };
  std::deque<Launch> launched_;  // launch_sample() calls not yet waited for, oldest first
  cudaEvent_t sampled_[2] = {};  // per pinned set: its launch's ids are on the host
  int64_t last_sampled_rows_ = -1;
  // TESSERA_ROPE_IN_ATTENTION=0: the RoPE kernel (A/B)
  const bool rope_in_attention_on_ = !env_is("TESSERA_ROPE_IN_ATTENTION", "0");
  // TESSERA_GREEDY_ARGMAX=0: greedy rows take sample_rows too (A/B runs).
  const bool greedy_argmax_on_ = !env_is("TESSERA_GREEDY_ARGMAX", "0");
  Grow<uint64_t> greedy_ws_;
  const bool launch_ahead_on_ = !env_is("TESSERA_LAUNCH_AHEAD", "0");
  cuda_llama::StepPlan plan_;  // this call's tables (run())
  size_t attn_ws_bytes_ = 0;  // this call's split-KV workspace need (run())
  // A decode-only call's split attention leaves its partials to the kernel after it: the
  // quantized o projection's input quantizer, or before a one-row bf16 o the merge kernel
  // (TESSERA_ATTN_LEAVE_PARTIALS=0: attention merges).
  const bool leave_partials_on_ = !env_is("TESSERA_ATTN_LEAVE_PARTIALS", "0");
  // One-row steps: the o and down GEMVs form the next RMSNorm's quantized input in their epilogue
  // (cuda::MmqResidualNorm) where the next weights allow it (TESSERA_FUSED_NORM=0: norm kernels).
  const bool fused_norm_on_ = !env_is("TESSERA_FUSED_NORM", "0");
  // One-row steps form the norms' inputs at the step's ends as between layers (H100 Q8_0 2.92 ->
  // 2.91 ms, Q4_0 1.85 -> 1.84, Q4_K 1.88 -> 1.87; cuda_engine_history.md, session 64), but not
  // for Projections::keeps_cpu_rounding; TESSERA_END_NORMS=0 keeps the norm kernels, =all takes all.
  bool end_norm_takes(const Proj& p) const {
    return end_norms_all_ || (end_norms_on_ && !Projections::keeps_cpu_rounding(p));
  }
  const bool end_norms_on_ = !env_is("TESSERA_END_NORMS", "0");
  const bool end_norms_all_ = env_is("TESSERA_END_NORMS", "all");
  // One-row steps: down on gate|up's f16 SwiGLU row (Projections::half_swiglu; =0 off, =all Q4_1 too).
  const bool half_swiglu_on_ = !env_is("TESSERA_HALF_SWIGLU", "0");
  const bool half_swiglu_all_ = env_is("TESSERA_HALF_SWIGLU", "all");
  // decode_persistent (one-row steps)
  const bool persistent_on_ = env_is("TESSERA_PERSISTENT_DECODE", "1");
  std::optional<bool> persistent_ok_;
  bool persistent_norms_aligned_ = false;
  Grow<cuda::PersistentLayer> player_;
  std::vector<cuda::PersistentLayer> player_host_;
  Grow<float> pws_;
};

}  // namespace

std::unique_ptr<CausalLm> cuda_llama_create(const gguf::File& file) {
  LlmConfig cfg = llama_config(file);  // validated; the weights load once, in Weights::load
  auto m = std::make_unique<CudaLlama>(cfg);
  m->load(GgufWeights(file));
  return m;
}

std::unique_ptr<CausalLm> cuda_llama_create_hf(const hf::TextConfig& config,
                                               const safetensors::Checkpoint& checkpoint) {
  LlmConfig cfg = llm_config_from_hf(config);
  const SafetensorsWeights w = llama_hf_weights(config, cfg, checkpoint);
  auto m = std::make_unique<CudaLlama>(cfg);
  m->load(w);
  return m;
}

namespace {
bool dummy_type(DType type) { return type == DType::kBF16 || cuda::mmq_supported(type); }

// Random weights for cfg; name labels the errors.
std::unique_ptr<CausalLm> make_dummy(const LlmConfig& cfg, DType type, const std::string& name) {
  TESSERA_CHECK_ARG(dummy_type(type), "dummy weights: type " + std::string(dtype_name(type)) +
                                          " (supported: " + cuda_llama_dummy_types() + ")");
  const int64_t d = cfg.d_model, qd = cfg.n_heads * cfg.head_dim, kvd = cfg.n_kv_heads * cfg.head_dim;
  if (type != DType::kBF16) {
    const int64_t blk = cuda::mmq_act_block(type);
    TESSERA_CHECK_ARG(d % blk == 0 && qd % blk == 0 && cfg.d_ff % blk == 0,
                      "dummy " + name + ": its widths are not multiples of " + std::to_string(blk) +
                          " (the block of " + std::string(dtype_name(type)) + ")");
  }
  // Bytes per weight element (GGUF block bytes / elements per block for quant types).
  const double per = type == DType::kBF16 ? 2.0 : static_cast<double>(*dtype_row_bytes(type, 256)) / 256.0;
  const double weight_bytes =
      per * (cfg.n_layers * (2.0 * d * qd + 2.0 * d * kvd + 3.0 * d * cfg.d_ff) + 1.0 * cfg.vocab * d) +
      2.0 * cfg.vocab * d;
  size_t free_bytes = 0, total = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (weight_bytes > 0.95 * static_cast<double>(free_bytes))
    throw_error(ErrorCode::kOutOfMemory,
                "dummy " + name + " needs " + std::to_string(static_cast<int64_t>(weight_bytes / 1e9)) +
                    " GB of " + std::string(dtype_name(type)) + " weights; the device has " +
                    std::to_string(static_cast<int64_t>(free_bytes / 1e9)) + " GB free");
  auto m = std::make_unique<CudaLlama>(cfg);
  m->fill_dummy(0x5eed, type);
  return m;
}
}  // namespace

std::string cuda_llama_dummy_types() {  // lower case, as the CLI's --dummy-type takes them
  std::string names;
  for (DType t : kAllDTypes) {
    if (!dummy_type(t)) continue;
    if (!names.empty()) names += ", ";
    for (char c : dtype_name(t)) names += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return names;
}

std::unique_ptr<CausalLm> cuda_llama_create_dummy(const std::string& name, int64_t vocab, DType type) {
  LlmConfig cfg = dummy_config(name);
  if (vocab > 0) cfg.vocab = vocab;
  return make_dummy(cfg, type, name);
}

std::unique_ptr<CausalLm> cuda_llama_create_dummy(const LlmConfig& cfg, DType type) {
  return make_dummy(cfg, type, cfg.architecture);
}

}  // namespace tessera::models
