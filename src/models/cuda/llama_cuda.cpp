#include "models/cuda/llama_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_bf16.h"
#include "backend/cuda/op_profiler.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/sample.h"
#include "kernels/cuda/row_ops.h"
#include "models/llama.h"
#include "models/llama_hf.h"
#include "models/weight_source.h"

namespace tessera::models {
namespace {

using bf16 = __nv_bfloat16;

// Device allocations of one model, freed together.
class DeviceArena {
 public:
  ~DeviceArena() {
    for (void* p : blocks_) cudaFree(p);
  }
  template <class T>
  T* alloc(int64_t n) {
    void* p = nullptr;
    TESSERA_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T)));
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  std::vector<void*> blocks_;
};

// A device buffer that only grows (activations sized for the largest batch seen).
template <class T>
class Grow {
 public:
  ~Grow() {
    if (p_) cudaFree(p_);
  }
  T* get(int64_t n) {
    if (n > cap_) {
      if (p_) TESSERA_CUDA_CHECK(cudaFree(p_));
      p_ = nullptr;
      TESSERA_CUDA_CHECK(cudaMalloc(&p_, static_cast<size_t>(n) * sizeof(T)));
      cap_ = n;
    }
    return p_;
  }

 private:
  T* p_ = nullptr;
  int64_t cap_ = 0;
};

struct Layer {
  float *attn_norm = nullptr, *ffn_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr;
  bf16 *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr, *wd = nullptr;
  bf16* wgu = nullptr;  // gate rows then up rows: [2 d_ff][d_model], one GEMM
};

class CudaLlama final : public CausalLm {
 public:
  explicit CudaLlama(LlmConfig cfg) : cfg_(std::move(cfg)) {
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    layers_.resize(cfg_.n_layers);
  }
  ~CudaLlama() override {
    drop_graphs();
    if (stream_) cudaStreamDestroy(stream_);
    for (void* p : pinned_) cudaFreeHost(p);
  }

  // Real weights, by their GGUF names, through the same source the CPU model loads from (which
  // checks presence, shape and type).
  void load(const WeightSource& w) {
    const int64_t d = cfg_.d_model, qd = cfg_.n_heads * cfg_.head_dim,
                  kvd = cfg_.n_kv_heads * cfg_.head_dim, ff = cfg_.d_ff;
    const Tensor embd = w.matrix("token_embd.weight", cfg_.vocab, d);
    embd_type_ = embd.dtype();
    if (embd_type_ == DType::kF32 || embd_type_ == DType::kF16 || embd_type_ == DType::kBF16 ||
        embd_type_ == DType::kQ8_0) {  // the gather kernel reads these as stored
      const size_t bytes = static_cast<size_t>(cfg_.vocab) * *dtype_row_bytes(embd_type_, d);
      uint8_t* t = arena_.alloc<uint8_t>(static_cast<int64_t>(bytes));
      TESSERA_CUDA_CHECK(cudaMemcpy(t, embd.raw_data(), bytes, cudaMemcpyHostToDevice));
      embd_ = t;
    } else {  // other types: a bf16 copy
      embd_type_ = DType::kBF16;
      embd_ = matrix(embd);
    }
    output_ = cfg_.tied_embeddings ? matrix(embd) : matrix(w.matrix("output.weight", cfg_.vocab, d));
    out_norm_ = vector(w, "output_norm.weight", d);
    if (w.has("rope_freqs.weight")) rope_freqs_ = vector(w, "rope_freqs.weight", cfg_.rope.n_rot / 2);
    for (int64_t i = 0; i < cfg_.n_layers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      Layer& l = layers_[i];
      l.attn_norm = vector(w, p + "attn_norm.weight", d);
      l.wq = matrix(w.matrix(p + "attn_q.weight", qd, d));
      l.wk = matrix(w.matrix(p + "attn_k.weight", kvd, d));
      l.wv = matrix(w.matrix(p + "attn_v.weight", kvd, d));
      l.wo = matrix(w.matrix(p + "attn_output.weight", d, qd));
      if (cfg_.qkv_bias) {
        l.bq = vector(w, p + "attn_q.bias", qd);
        l.bk = vector(w, p + "attn_k.bias", kvd);
        l.bv = vector(w, p + "attn_v.bias", kvd);
      }
      l.ffn_norm = vector(w, p + "ffn_norm.weight", d);
      l.wgu = arena_.alloc<bf16>(2 * ff * d);
      upload_bf16(w.matrix(p + "ffn_gate.weight", ff, d), l.wgu);
      upload_bf16(w.matrix(p + "ffn_up.weight", ff, d), l.wgu + ff * d);
      l.wd = matrix(w.matrix(p + "ffn_down.weight", d, ff));
    }
  }

  // Random weights (uniform, scaled by sqrt(3 / fan-in) so activations keep unit scale).
  void fill_dummy(uint64_t seed) {
    const int64_t d = cfg_.d_model, qd = cfg_.n_heads * cfg_.head_dim,
                  kvd = cfg_.n_kv_heads * cfg_.head_dim, ff = cfg_.d_ff;
    auto mat = [&](int64_t rows, int64_t cols) {
      bf16* w = arena_.alloc<bf16>(rows * cols);
      const float a = std::sqrt(3.f / static_cast<float>(cols));
      cuda::fill_uniform_bf16(reinterpret_cast<uint16_t*>(w), rows * cols, -a, a, seed++, stream_);
      return w;
    };
    auto vec = [&](int64_t n, float lo, float hi) {
      float* v = arena_.alloc<float>(n);
      cuda::fill_uniform_f32(v, n, lo, hi, seed++, stream_);
      return v;
    };
    embd_type_ = DType::kBF16;
    embd_ = mat(cfg_.vocab, d);
    output_ = mat(cfg_.vocab, d);
    out_norm_ = vec(d, 0.9f, 1.1f);
    for (Layer& l : layers_) {
      l.attn_norm = vec(d, 0.9f, 1.1f);
      l.wq = mat(qd, d);
      l.wk = mat(kvd, d);
      l.wv = mat(kvd, d);
      l.wo = mat(d, qd);
      if (cfg_.qkv_bias) {
        l.bq = vec(qd, -0.1f, 0.1f);
        l.bk = vec(kvd, -0.1f, 0.1f);
        l.bv = vec(kvd, -0.1f, 0.1f);
      }
      l.ffn_norm = vec(d, 0.9f, 1.1f);
      l.wgu = mat(2 * ff, d);
      l.wd = mat(d, ff);
    }
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  const LlmConfig& config() const override { return cfg_; }

  int64_t decode_weight_bytes() const override {
    return 2 * matmul_params() +
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
    const int64_t n_logits = run(tokens, chunks, cache, all_logits);
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

  bool forward_sample(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks,
                      KvCache& cache, const SampleBatch& batch, int32_t* ids, ThreadPool&) override {
    const int64_t n_logits = run(tokens, chunks, cache, false);
    TESSERA_CHECK_ARG(static_cast<int64_t>(batch.rows.size()) == n_logits,
                      "forward_sample: one sampling row per logits row");
    // After the forward pass on the same stream (a replayed graph does not hold these).
    const SampleRow* d_params = stage(batch.rows.data(), n_logits, kSampleRows);
    const SamplePenalty* d_pen = stage(batch.penalties.data(),
                                       static_cast<int64_t>(batch.penalties.size()), kPenalties);
    const int32_t* d_banned = stage(batch.banned.data(), static_cast<int64_t>(batch.banned.size()), kBanned);
    int32_t* d_ids = ids_.get(std::max<int64_t>(n_logits, 1));
    cuda::sample_rows(logits_.get(n_logits * cfg_.vocab), n_logits, cfg_.vocab, d_params, d_pen,
                      d_banned, d_ids, stream_);
    prof_.mark("sample");
    int32_t* host = pinned<int32_t>(kIds, n_logits);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(host, d_ids, static_cast<size_t>(n_logits) * 4,
                                       cudaMemcpyDeviceToHost, stream_));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    prof_.collect();
    std::memcpy(ids, host, static_cast<size_t>(n_logits) * 4);
    return true;
  }

 private:
  // The forward pass up to device logits (logits_ holds n_logits x vocab); returns n_logits.
  int64_t run(std::span<const int32_t> tokens, std::span<const SeqChunk> chunks, KvCache& cache,
              bool all_logits) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    TESSERA_CHECK_ARG(n >= 1, "forward: no tokens");
    TESSERA_CHECK_ARG(cache.n_layers() == cfg_.n_layers && cache.k(0).device() == Device::kCuda &&
                          cache.dtype() == DType::kF16,
                      "forward: the CUDA model needs its own device KV cache");
    for (int32_t t : tokens)
      TESSERA_CHECK_ARG(t >= 0 && t < cfg_.vocab, "forward: token id outside the vocabulary");
    const int64_t n_logits = plan(chunks, cache, n, all_logits);
    const int64_t d = cfg_.d_model, hd = cfg_.head_dim, qd = cfg_.n_heads * hd,
                  kvd = cfg_.n_kv_heads * hd, ff = cfg_.d_ff, V = cfg_.vocab;
    cudaStream_t s = stream_;

    // Per-step tables to the device (pinned staging, one stream: ordered before the kernels).
    int32_t* d_tokens = stage(tokens.data(), n, kTokens);
    int32_t* d_pos = stage(positions_.data(), n, kPositions);
    int64_t* d_rows = stage(cache_rows_.data(), n, kCacheRows);
    cuda::PagedAttentionTile* d_tiles = stage(tiles_.data(), static_cast<int64_t>(tiles_.size()), kTiles);
    int32_t* d_tables = stage(tables_.data(), static_cast<int64_t>(tables_.size()), kTables);
    int32_t* d_logit_rows = stage(logit_rows_.data(), n_logits, kLogitRows);

    Bufs b{};
    b.x = residual_.get(n * d);
    b.normed = normed_.get(std::max<int64_t>(n_logits, 1) * d);
    b.h = h_.get(n * std::max({d, qd, ff}));
    b.gu = gu_.get(n * 2 * ff);
    b.q = q_.get(n * qd);
    b.k = k_.get(n * kvd);
    b.v = v_.get(n * kvd);
    b.out = logits_.get(n_logits * V);
    b.tokens = d_tokens;
    b.pos = d_pos;
    b.rows = d_rows;
    b.tiles = d_tiles;
    b.tables = d_tables;
    b.logit_rows = d_logit_rows;

    // Decode-only steps (one token per sequence) replay a CUDA graph per (rows, table stride):
    // ~10 launches per layer collapse into one. Graphs hold buffer addresses, so any buffer
    // that moved since they were captured invalidates them all. A shape is captured the
    // second time it is seen (the first eager run loads kernels and builds GEMM plans).
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
      return n_logits;
    }
    if (decode_only) {
      if (std::memcmp(&b, &graph_bufs_, sizeof b) != 0 || graph_cache_ != &cache) {
        drop_graphs();
        graph_bufs_ = b;
        graph_cache_ = &cache;
      }
      const auto key = std::make_pair(n, table_stride_);
      if (auto it = graphs_.find(key); it != graphs_.end()) {
        TESSERA_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
        return n_logits;
      }
      if (seen_shapes_.count(key)) {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        try {
          enqueue(b, n, n_logits, cache);
        } catch (...) {
          cudaStreamEndCapture(stream_, &graph);
          if (graph) cudaGraphDestroy(graph);
          throw;
        }
        TESSERA_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        TESSERA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        cudaGraphDestroy(graph);
        graphs_.emplace(key, exec);
        TESSERA_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
        return n_logits;
      }
      seen_shapes_.insert(key);
    }
    enqueue(b, n, n_logits, cache);
    return n_logits;
  }

  // Device buffers of one forward call (graphs capture these addresses).
  struct Bufs {
    float *x, *normed, *q, *k, *v, *out;
    bf16 *h, *gu;
    int32_t *tokens, *pos, *tables, *logit_rows;
    int64_t* rows;
    cuda::PagedAttentionTile* tiles;
  };

  void drop_graphs() {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
    seen_shapes_.clear();
  }

  // Every kernel of the forward pass on stream_ (eager, or recorded by a capture).
  void enqueue(const Bufs& b, int64_t n, int64_t n_logits, KvCache& cache) {
    const int64_t d = cfg_.d_model, hd = cfg_.head_dim, qd = cfg_.n_heads * hd,
                  kvd = cfg_.n_kv_heads * hd, ff = cfg_.d_ff, V = cfg_.vocab;
    cudaStream_t s = stream_;
    float *x = b.x, *normed = b.normed, *q = b.q, *k = b.k, *v = b.v, *out = b.out;
    bf16 *h = b.h, *gu = b.gu;
    const int32_t *d_tokens = b.tokens, *d_pos = b.pos, *d_tables = b.tables,
                  *d_logit_rows = b.logit_rows;
    const int64_t* d_rows = b.rows;
    const cuda::PagedAttentionTile* d_tiles = b.tiles;
    cuda::RopeConfig rope{cfg_.rope.layout, cfg_.rope.n_rot, cfg_.rope.theta_base,
                          cfg_.rope.position_scale, rope_freqs_};
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    cuda::embedding_gather<float>(embd_type_, embd_, V, d, d_tokens, n, x, s);
    prof_.mark("embedding");
    for (int64_t li = 0; li < cfg_.n_layers; ++li) {
      const Layer& l = layers_[li];
      __half* kc = static_cast<__half*>(cache.k(li).raw_data());
      __half* vc = static_cast<__half*>(cache.v(li).raw_data());
      cuda::rms_norm_rows_bf16(x, l.attn_norm, cfg_.norm_eps, n, d, h, s);
      prof_.mark("norm");
      gemm_.run(h, l.wq, q, n, qd, d, false, s);
      gemm_.run(h, l.wk, k, n, kvd, d, false, s);
      gemm_.run(h, l.wv, v, n, kvd, d, false, s);
      prof_.mark("gemm qkv");
      if (cfg_.qkv_bias) {
        cuda::add_bias_rows(q, l.bq, n, qd, s);
        cuda::add_bias_rows(k, l.bk, n, kvd, s);
        cuda::add_bias_rows(v, l.bv, n, kvd, s);
      }
      cuda::rope_kv_write<float>(q, k, v, d_pos, d_rows, n, cfg_.n_heads, cfg_.n_kv_heads, hd,
                                 rope, kc, vc, s);
      prof_.mark("bias + rope + kv write");
      // Attention writes bf16: it only feeds the output projection.
      cuda::paged_attention<float, bf16>(q, d_pos, d_tiles, static_cast<int64_t>(tiles_.size()),
                                         d_tables, table_stride_, cache.block_size(), kc, vc,
                                         cfg_.n_heads, cfg_.n_kv_heads, hd, scale, h, s);
      prof_.mark("attention");
      gemm_.run(h, l.wo, x, n, d, qd, /*accumulate=*/true, s);  // residual += attention out
      prof_.mark("gemm o");
      cuda::rms_norm_rows_bf16(x, l.ffn_norm, cfg_.norm_eps, n, d, h, s);
      prof_.mark("norm");
      gemm_.run(h, l.wgu, gu, n, 2 * ff, d, s);  // gate | up, bf16
      prof_.mark("gemm gate|up");
      cuda::swiglu_rows_bf16(gu, n, ff, h, s);
      prof_.mark("swiglu");
      gemm_.run(h, l.wd, x, n, d, ff, /*accumulate=*/true, s);  // residual += MLP out
      prof_.mark("gemm down");
    }
    if (n_logits > 0) {  // a step of prefill chunks only has no logits to compute
      cuda::gather_rows_f32(x, d_logit_rows, n_logits, d, normed, s);  // only rows that need logits
      cuda::rms_norm_rows_bf16(normed, out_norm_, cfg_.norm_eps, n_logits, d, h, s);
      gemm_.run(h, output_, out, n_logits, V, d, false, s);
      prof_.mark("output norm + head");
    }
  }

  // A host weight {rows, cols} of any type, dequantized and rounded to bf16 into device dst.
  static void upload_bf16(const Tensor& t, bf16* dst) {
    const int64_t rows = t.dim(0), cols = t.dim(1);
    const int64_t row_bytes = *dtype_row_bytes(t.dtype(), cols);
    const auto* src = static_cast<const uint8_t*>(t.raw_data());
    std::vector<float> row(cols);
    std::vector<uint16_t> host(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      cpu::dequantize_row(t.dtype(), src + r * row_bytes, row.data(), cols);
      for (int64_t c = 0; c < cols; ++c) host[r * cols + c] = f32_to_bf16(row[c]);
    }
    TESSERA_CUDA_CHECK(cudaMemcpy(dst, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  }
  bf16* matrix(const Tensor& t) {
    bf16* dst = arena_.alloc<bf16>(t.numel());
    upload_bf16(t, dst);
    return dst;
  }
  float* vector(const WeightSource& w, const std::string& name, int64_t n) {
    const Tensor host = weight_vector_f32(w, name, n);
    float* dst = arena_.alloc<float>(n);
    TESSERA_CUDA_CHECK(cudaMemcpy(dst, host.data<float>(), static_cast<size_t>(n) * 4,
                                  cudaMemcpyHostToDevice));
    return dst;
  }

  // Pinned host buffers: per-step tables staged to the device (with a device twin each), and the
  // results coming back.
  enum Slot {
    kTokens, kPositions, kCacheRows, kTiles, kTables, kLogitRows, kSampleRows, kPenalties, kBanned,
    kStaged, kLogits = kStaged, kIds
  };

  // Pinned host buffer `slot`, grown to at least n elements of T.
  template <class T>
  T* pinned(int slot, int64_t n) {
    if (pinned_.size() <= static_cast<size_t>(slot)) {
      pinned_.resize(slot + 1, nullptr);
      pinned_cap_.resize(slot + 1, 0);
    }
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T);
    if (bytes > pinned_cap_[slot]) {
      if (pinned_[slot]) TESSERA_CUDA_CHECK(cudaFreeHost(pinned_[slot]));
      pinned_[slot] = nullptr;
      TESSERA_CUDA_CHECK(cudaMallocHost(&pinned_[slot], bytes));
      pinned_cap_[slot] = bytes;
    }
    return static_cast<T*>(pinned_[slot]);
  }

  // Copies n values through pinned slot `slot` to a device buffer of the same slot.
  template <class T>
  T* stage(const T* src, int64_t n, int slot) {
    T* host = pinned<T>(slot, n);
    if (n > 0) std::memcpy(host, src, static_cast<size_t>(n) * sizeof(T));
    T* dev = reinterpret_cast<T*>(staged_[slot].get(static_cast<int64_t>(std::max<int64_t>(n, 1) * sizeof(T))));
    if (n > 0)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(dev, host, static_cast<size_t>(n) * sizeof(T),
                                         cudaMemcpyHostToDevice, stream_));
    return dev;
  }

  // Rows of this call: positions, cache rows, attention tiles and block tables; validates the
  // chunks like the CPU model. Returns the number of logit rows.
  int64_t plan(std::span<const SeqChunk> chunks, const KvCache& cache, int64_t n, bool all_logits) {
    const int64_t bs = cache.block_size();
    positions_.clear();
    cache_rows_.clear();
    logit_rows_.clear();
    std::vector<cuda::PagedAttentionChunk> pchunks;
    table_stride_ = 1;
    bool decode_only = true;
    for (const SeqChunk& c : chunks) {
      table_stride_ = std::max<int64_t>(table_stride_, c.blocks.size());
      decode_only &= c.n_tokens == 1;
    }
    // Decode steps round the stride up to a power of two: few distinct graph shapes.
    if (decode_only) {
      int64_t p = 8;
      while (p < table_stride_) p *= 2;
      table_stride_ = p;
    }
    tables_.assign(chunks.size() * table_stride_, 0);
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const SeqChunk& c = chunks[ci];
      const int64_t end = int64_t{c.start} + c.n_tokens;
      TESSERA_CHECK_ARG(c.start >= 0 && c.n_tokens >= 1 &&
                            end <= static_cast<int64_t>(c.blocks.size()) * bs,
                        "forward: a chunk is not covered by its KV blocks");
      for (size_t b = 0; b < c.blocks.size(); ++b) {
        TESSERA_CHECK_ARG(c.blocks[b] >= 0 && c.blocks[b] < cache.n_blocks(),
                          "forward: KV block out of range");
        tables_[ci * table_stride_ + b] = c.blocks[b];
      }
      pchunks.push_back({static_cast<int32_t>(ci), static_cast<int32_t>(positions_.size()), c.n_tokens});
      for (int64_t p = c.start; p < end; ++p) {
        if (all_logits || (c.logits && p == end - 1))
          logit_rows_.push_back(static_cast<int32_t>(positions_.size()));
        positions_.push_back(static_cast<int32_t>(p));
        cache_rows_.push_back(int64_t{c.blocks[p / bs]} * bs + p % bs);
      }
    }
    TESSERA_CHECK_ARG(static_cast<int64_t>(positions_.size()) == n,
                      "forward: chunks do not cover the tokens given");
    tiles_ = cuda::paged_attention_tiles(pchunks, cfg_.n_heads / cfg_.n_kv_heads);
    return static_cast<int64_t>(logit_rows_.size());
  }

  LlmConfig cfg_;
  cudaStream_t stream_ = nullptr;
  cuda::OpProfiler prof_;  // TESSERA_CUDA_PROFILE
  DeviceArena arena_;
  cuda::GemmBf16 gemm_;
  DType embd_type_ = DType::kBF16;
  void* embd_ = nullptr;
  bf16* output_ = nullptr;
  float* out_norm_ = nullptr;
  float* rope_freqs_ = nullptr;  // device, or null
  std::vector<Layer> layers_;
  Grow<float> residual_, normed_, q_, k_, v_, logits_;
  Grow<bf16> h_, gu_;
  Grow<int32_t> ids_;
  static constexpr int64_t kMaxGraphRows = 512;
  std::map<std::pair<int64_t, int64_t>, cudaGraphExec_t> graphs_;
  std::set<std::pair<int64_t, int64_t>> seen_shapes_;
  Bufs graph_bufs_{};
  const KvCache* graph_cache_ = nullptr;
  Grow<uint8_t> staged_[kStaged];
  std::vector<void*> pinned_;
  std::vector<size_t> pinned_cap_;
  // plan() output
  std::vector<int32_t> positions_, logit_rows_, tables_;
  std::vector<int64_t> cache_rows_;
  std::vector<cuda::PagedAttentionTile> tiles_;
  int64_t table_stride_ = 1;
};

struct DummyArch {
  const char* name;
  LlmConfig cfg;
};

LlmConfig make_cfg(const char* arch, int64_t layers, int64_t d, int64_t heads, int64_t kv_heads,
                   int64_t ff, int64_t vocab, float theta, bool bias) {
  LlmConfig c;
  c.architecture = arch;
  c.n_layers = layers;
  c.d_model = d;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = d / heads;
  c.d_ff = ff;
  c.vocab = vocab;
  c.context_length = 8192;
  c.norm_eps = 1e-5f;
  c.qkv_bias = bias;
  c.rope.layout = bias ? ref::RopeLayout::kHalfSplit : ref::RopeLayout::kInterleaved;
  c.rope.n_rot = c.head_dim;
  c.rope.theta_base = theta;
  return c;
}

const std::vector<DummyArch>& dummy_archs() {
  static const std::vector<DummyArch> archs = {
      {"llama3-8b", make_cfg("llama", 32, 4096, 32, 8, 14336, 128256, 500000.f, false)},
      {"llama3-70b", make_cfg("llama", 80, 8192, 64, 8, 28672, 128256, 500000.f, false)},
      {"llama2-7b", make_cfg("llama", 32, 4096, 32, 32, 11008, 32000, 10000.f, false)},
      {"qwen2.5-7b", make_cfg("qwen2", 28, 3584, 28, 4, 18944, 152064, 1000000.f, true)},
      {"smollm2-135m", make_cfg("llama", 30, 576, 9, 3, 1536, 49152, 100000.f, false)},
  };
  return archs;
}

}  // namespace

std::vector<std::string> dummy_architectures() {
  std::vector<std::string> out;
  for (const auto& a : dummy_archs()) out.push_back(a.name);
  return out;
}

LlmConfig dummy_config(const std::string& name) {
  for (const auto& a : dummy_archs())
    if (name == a.name) return a.cfg;
  std::string known;
  for (const auto& a : dummy_archs()) known += (known.empty() ? "" : ", ") + std::string(a.name);
  throw_error(ErrorCode::kInvalidArgument, "unknown dummy architecture '" + name + "' (known: " + known + ")");
}

std::unique_ptr<CausalLm> cuda_llama_create(const gguf::File& file) {
  // The CPU model parses and validates the hyperparameters (and maps nothing but views).
  LlmConfig cfg = llama_create(file)->config();
  cfg.rope.freq_factors = nullptr;  // host pointer of the CPU model; the GPU copy is loaded
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

std::unique_ptr<CausalLm> cuda_llama_create_dummy(const std::string& name, int64_t vocab) {
  LlmConfig cfg = dummy_config(name);
  if (vocab > 0) cfg.vocab = vocab;
  const int64_t d = cfg.d_model, qd = cfg.n_heads * cfg.head_dim, kvd = cfg.n_kv_heads * cfg.head_dim;
  const double weight_bytes =
      2.0 * (cfg.n_layers * (2.0 * d * qd + 2.0 * d * kvd + 3.0 * d * cfg.d_ff) + 2.0 * cfg.vocab * d);
  size_t free_bytes = 0, total = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (weight_bytes > 0.95 * static_cast<double>(free_bytes))
    throw_error(ErrorCode::kOutOfMemory,
                "dummy " + name + " needs " + std::to_string(static_cast<int64_t>(weight_bytes / 1e9)) +
                    " GB of bf16 weights; the device has " +
                    std::to_string(static_cast<int64_t>(free_bytes / 1e9)) + " GB free");
  auto m = std::make_unique<CudaLlama>(cfg);
  m->fill_dummy(0x5eed);
  return m;
}

}  // namespace tessera::models
