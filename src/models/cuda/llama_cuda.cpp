#include "models/cuda/llama_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_bf16.h"
#include "backend/cuda/op_profiler.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/dequant_packed.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"
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

// One projection y[rows][n] = x W^T, W [n][k]: bf16 (cuBLASLt), or quantized (integer dots on
// activations quantized like the CPU's, kernels/cuda/mmq.h) as row ranges `parts` of the output
// (one part unless fused matrices of different quant types, e.g. q|k|v of a Q4_K_M file).
struct Proj {
  struct Part {
    DType type;
    const uint8_t* packed;  // gemv.h repacked layout of rows [row0, row0 + n)
    int64_t row0, n;
  };
  int64_t n = 0, k = 0;
  bf16* w = nullptr;
  std::vector<Part> parts;
  bool quant() const { return !parts.empty(); }
};

struct Layer {
  float *attn_norm = nullptr, *ffn_norm = nullptr, *bqkv = nullptr;
  Proj qkv;  // q rows | k rows | v rows, one projection
  Proj wo, wd;
  Proj wgu;  // gate rows then up rows: [2 d_ff][d_model], one projection
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
      bf16* t = arena_.alloc<bf16>(cfg_.vocab * d);
      upload_bf16(embd, t);
      embd_ = t;
    }
    output_ = proj({cfg_.tied_embeddings ? embd : w.matrix("output.weight", cfg_.vocab, d)});
    out_norm_ = vector(w, "output_norm.weight", d);
    if (w.has("rope_freqs.weight")) rope_freqs_ = vector(w, "rope_freqs.weight", cfg_.rope.n_rot / 2);
    for (int64_t i = 0; i < cfg_.n_layers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      Layer& l = layers_[i];
      l.attn_norm = vector(w, p + "attn_norm.weight", d);
      l.qkv = proj({w.matrix(p + "attn_q.weight", qd, d), w.matrix(p + "attn_k.weight", kvd, d),
                    w.matrix(p + "attn_v.weight", kvd, d)});
      l.wo = proj({w.matrix(p + "attn_output.weight", d, qd)});
      if (cfg_.qkv_bias) {
        l.bqkv = arena_.alloc<float>(qd + 2 * kvd);
        upload_vector(w, p + "attn_q.bias", qd, l.bqkv);
        upload_vector(w, p + "attn_k.bias", kvd, l.bqkv + qd);
        upload_vector(w, p + "attn_v.bias", kvd, l.bqkv + qd + kvd);
      }
      l.ffn_norm = vector(w, p + "ffn_norm.weight", d);
      l.wgu = proj({w.matrix(p + "ffn_gate.weight", ff, d), w.matrix(p + "ffn_up.weight", ff, d)});
      l.wd = proj({w.matrix(p + "ffn_down.weight", d, ff)});
    }
    finish_load();
  }

  // Random weights of type `type` (bf16, or a quantized type of kernels/cuda/mmq.h) generated on
  // the device: bf16 uniform, scaled by sqrt(3 / fan-in) so activations keep unit scale; quant
  // blocks from fill_random_quant at dummy_quant_scale. The embedding table is bf16.
  void fill_dummy(uint64_t seed, DType type) {
    const int64_t d = cfg_.d_model, qd = cfg_.n_heads * cfg_.head_dim,
                  kvd = cfg_.n_kv_heads * cfg_.head_dim, ff = cfg_.d_ff;
    auto bf16_mat = [&](int64_t rows, int64_t cols) {
      bf16* w = arena_.alloc<bf16>(rows * cols);
      const float a = std::sqrt(3.f / static_cast<float>(cols));
      cuda::fill_uniform_bf16(reinterpret_cast<uint16_t*>(w), rows * cols, -a, a, seed++, stream_);
      return w;
    };
    auto mat = [&](int64_t rows, int64_t cols) {
      Proj p;
      p.n = rows;
      p.k = cols;
      if (type == DType::kBF16) {
        p.w = bf16_mat(rows, cols);
        weight_bytes_ += 2 * rows * cols;
      } else {
        const size_t bytes = cuda::gemv_quant_layout(type, rows, cols).bytes;
        uint8_t* q = arena_.alloc<uint8_t>(static_cast<int64_t>(bytes));
        cuda::fill_random_quant(type, q, rows, cols, cuda::dummy_quant_scale(type, cols), seed++, stream_);
        p.parts.push_back({type, q, 0, rows});
        weight_bytes_ += rows * *dtype_row_bytes(type, cols);
      }
      return p;
    };
    auto vec = [&](int64_t n, float lo, float hi) {
      float* v = arena_.alloc<float>(n);
      cuda::fill_uniform_f32(v, n, lo, hi, seed++, stream_);
      return v;
    };
    embd_type_ = DType::kBF16;
    embd_ = bf16_mat(cfg_.vocab, d);
    output_ = mat(cfg_.vocab, d);
    out_norm_ = vec(d, 0.9f, 1.1f);
    for (Layer& l : layers_) {
      l.attn_norm = vec(d, 0.9f, 1.1f);
      l.qkv = mat(qd + 2 * kvd, d);
      l.wo = mat(d, qd);
      if (cfg_.qkv_bias) l.bqkv = vec(qd + 2 * kvd, -0.1f, 0.1f);
      l.ffn_norm = vec(d, 0.9f, 1.1f);
      l.wgu = mat(2 * ff, d);
      l.wd = mat(d, ff);
    }
    finish_load();
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  const LlmConfig& config() const override { return cfg_; }

  // Bytes a decode step reads: every projection and the head as stored (quantized: GGUF block
  // bytes), the norms, one embedding row (negligible, not counted).
  int64_t decode_weight_bytes() const override {
    return weight_bytes_ +
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

  bool samples_on_device() const override { return true; }

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
    const int64_t widest = std::max({d, qd, ff});
    b.h = h_.get(n * widest);
    b.gu = any_bf16_gu_ ? gu_.get(n * 2 * ff) : nullptr;
    b.guf = any_f32_gu_ ? guf_.get(n * 2 * ff) : nullptr;
    b.qkv = qkv_.get(n * (qd + 2 * kvd));
    b.q = q_.get(n * qd);
    b.attn = any_quant_ ? attn_.get(n * qd) : nullptr;
    b.qx = any_quant_ ? qx_.get(n * widest) : nullptr;
    b.meta = any_quant_ ? meta_.get(n * widest / 32) : nullptr;
    b.wdq = any_quant_ && n > cuda::kMmqGemvMaxRows && !mmq_gemm_ ? wdq_.get(kDequantSliceElems)
                                                                 : nullptr;
    b.out = logits_.get(n_logits * V);
    b.tokens = d_tokens;
    b.pos = d_pos;
    b.rows = d_rows;
    b.tiles = d_tiles;
    b.tables = d_tables;
    b.logit_rows = d_logit_rows;
    // Split-KV attention scratch: its size depends on (rows, table stride) only, as graphs need.
    b.attn_ws_bytes = cuda::paged_attention_workspace_bytes(
        n, cfg_.n_heads, hd,
        cuda::paged_attention_splits(static_cast<int64_t>(tiles_.size()), cfg_.n_kv_heads,
                                     table_stride_, cache.block_size()));
    b.attn_ws = b.attn_ws_bytes > 0 ? attn_ws_.get(static_cast<int64_t>(b.attn_ws_bytes / 4)) : nullptr;

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
    float *x, *normed, *qkv, *q, *attn, *guf, *out;
    bf16 *h, *gu;
    int8_t* qx;
    cuda::MmqActMeta* meta;
    bf16* wdq;  // a dequantized weight slice (quantized projections of many rows)
    int32_t *tokens, *pos, *tables, *logit_rows;
    int64_t* rows;
    cuda::PagedAttentionTile* tiles;
    float* attn_ws;
    size_t attn_ws_bytes;
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
    float *x = b.x, *normed = b.normed, *q = b.q, *out = b.out;
    bf16 *h = b.h, *gu = b.gu;
    const int32_t *d_tokens = b.tokens, *d_pos = b.pos, *d_tables = b.tables,
                  *d_logit_rows = b.logit_rows;
    const int64_t* d_rows = b.rows;
    const cuda::PagedAttentionTile* d_tiles = b.tiles;
    cuda::RopeConfig rope{cfg_.rope.layout, cfg_.rope.n_rot, cfg_.rope.theta_base,
                          cfg_.rope.position_scale, rope_freqs_};
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    cuda::embedding_gather<float>(embd_type_, embd_, V, d, d_tokens, n, x, s);
    prof_.mark("embedding", {static_cast<double>(n) * d * 6});
    const int64_t qkvd = qd + 2 * kvd;
    const cuda::OpCost attn_cost = prof_.enabled() ? attention_cost() : cuda::OpCost{};
    const cuda::OpCost norm_cost{static_cast<double>(n) * d * 6};  // f32 in, bf16 out
    for (int64_t li = 0; li < cfg_.n_layers; ++li) {
      const Layer& l = layers_[li];
      __half* kc = static_cast<__half*>(cache.k(li).raw_data());
      __half* vc = static_cast<__half*>(cache.v(li).raw_data());
      // One row: RoPE and the KV write ride in the QKV GEMV's epilogue (one weight type).
      const bool rope_in_qkv =
          n == 1 && rope_inv_freq_ &&
          (l.qkv.quant() ? l.qkv.parts.size() == 1 : cuda::gemv_bf16_f32_supported(l.qkv.w, h, d));
      const cuda::QkvRope qkv_rope{qd, kvd, hd, cfg_.rope.n_rot, rope_inv_freq_, d_pos, d_rows, kc, vc};
      // q|k|v = norm(x) Wqkv^T (f32 rows of qkvd)
      if (l.qkv.quant()) {
        if (rope_in_qkv) {
          const Proj::Part& part = l.qkv.parts[0];
          cuda::mmq_rms_norm_quantize_rows(part.type, x, l.attn_norm, cfg_.norm_eps, 1, d, b.qx, b.meta, s);
          cuda::mmq_gemv_qkv_rope(part.type, part.packed, d, b.qx, b.meta, q, qkv_rope, s);
        } else {
          project(l.qkv, In::norm(x, l.attn_norm), n, b, b.qkv, qkvd, false);
        }
      } else {
        cuda::rms_norm_rows_bf16(x, l.attn_norm, cfg_.norm_eps, n, d, h, s);
        prof_.mark("norm", norm_cost);
        if (rope_in_qkv)
          cuda::gemv_bf16_qkv_rope_f32(reinterpret_cast<const uint16_t*>(l.qkv.w), d, h, q, qkv_rope, s);
        else
          matmul(h, l.qkv, n, b.qkv, false);
      }
      prof_.mark(rope_in_qkv ? (l.qkv.quant() ? "norm + qkv + rope + kv write" : "qkv + rope + kv write")
                             : (l.qkv.quant() ? "norm + qkv" : "qkv"),
                 proj_cost(l.qkv, n, l.qkv.quant() ? 4 : 2, 4));
      if (!rope_in_qkv) {
        if (cfg_.qkv_bias) cuda::add_bias_rows(b.qkv, l.bqkv, n, qkvd, s);
        cuda::rope_kv_write_strided<float>(b.qkv, qkvd, b.qkv + qd, b.qkv + qd + kvd, qkvd, q, d_pos,
                                           d_rows, n, cfg_.n_heads, cfg_.n_kv_heads, hd, rope, kc, vc, s);
        prof_.mark("bias + rope + kv write", {static_cast<double>(n) * (qkvd * 4 + qd * 4 + kvd * 4)});
      }
      if (l.wo.quant()) {  // attention in f32, quantized for the integer dots
        cuda::paged_attention<float, float>(q, d_pos, d_tiles, static_cast<int64_t>(tiles_.size()),
                                            d_tables, table_stride_, cache.block_size(), kc, vc,
                                            cfg_.n_heads, cfg_.n_kv_heads, hd, scale, b.attn, s,
                                            {b.attn_ws, b.attn_ws_bytes, n});
        prof_.mark("attention", attn_cost);
        project(l.wo, In::rows(b.attn), n, b, x, d, /*accumulate=*/true);
      } else {  // attention writes bf16: it only feeds the output projection
        cuda::paged_attention<float, bf16>(q, d_pos, d_tiles, static_cast<int64_t>(tiles_.size()),
                                           d_tables, table_stride_, cache.block_size(), kc, vc,
                                           cfg_.n_heads, cfg_.n_kv_heads, hd, scale, h, s,
                                           {b.attn_ws, b.attn_ws_bytes, n});
        prof_.mark("attention", attn_cost);
        matmul(h, l.wo, n, x, /*accumulate=*/true);  // residual += attention out
      }
      prof_.mark("o", proj_cost(l.wo, n, l.wo.quant() ? 4 : 2, 8));
      // gate|up, bf16 when both it and down are bf16, else f32
      const bool f32_gu = l.wgu.quant() || l.wd.quant();
      if (l.wgu.quant()) {
        project(l.wgu, In::norm(x, l.ffn_norm), n, b, b.guf, 2 * ff, false);
      } else {
        cuda::rms_norm_rows_bf16(x, l.ffn_norm, cfg_.norm_eps, n, d, h, s);
        prof_.mark("norm", norm_cost);
        if (f32_gu) matmul(h, l.wgu, n, b.guf, false);
        else matmul(h, l.wgu, n, gu);
      }
      prof_.mark(l.wgu.quant() ? "norm + gate|up" : "gate|up",
                 proj_cost(l.wgu, n, l.wgu.quant() ? 4 : 2, f32_gu ? 4 : 2));
      if (l.wd.quant()) {
        project(l.wd, In::swiglu(b.guf), n, b, x, d, /*accumulate=*/true);
      } else {
        if (f32_gu) cuda::swiglu_rows_f32_bf16(b.guf, n, ff, h, s);
        else cuda::swiglu_rows_bf16(gu, n, ff, h, s);
        prof_.mark("swiglu", {static_cast<double>(n) * ff * (f32_gu ? 10 : 6)});
        matmul(h, l.wd, n, x, /*accumulate=*/true);  // residual += MLP out
      }
      prof_.mark(l.wd.quant() ? "swiglu + down" : "down",
                 proj_cost(l.wd, n, l.wd.quant() ? 8 : 2, 8));
    }
    if (n_logits > 0) {  // a step of prefill chunks only has no logits to compute
      cuda::gather_rows_f32(x, d_logit_rows, n_logits, d, normed, s);  // only rows that need logits
      if (output_.quant()) {
        project(output_, In::norm(normed, out_norm_), n_logits, b, out, V, false);
      } else {
        cuda::rms_norm_rows_bf16(normed, out_norm_, cfg_.norm_eps, n_logits, d, h, s);
        matmul(h, output_, n_logits, out, false);
      }
      prof_.mark("output norm + head", proj_cost(output_, n_logits, 4, 4));
    }
  }

  // What an op must at least move and compute, for the profiler's floors: the weights once, rows
  // of in / out bytes per element, 2 FLOPs per multiply-add.
  static cuda::OpCost proj_cost(const Proj& p, int64_t rows, double in_bytes, double out_bytes) {
    double w = p.quant() ? 0.0 : 2.0 * static_cast<double>(p.n) * p.k;
    for (const Proj::Part& part : p.parts) w += static_cast<double>(part.n) * *dtype_row_bytes(part.type, p.k);
    return {w + static_cast<double>(rows) * (p.k * in_bytes + p.n * out_bytes), 2.0 * rows * p.n * p.k};
  }
  // Attention of one layer for this call: each sequence's K and V rows once (f16), 4 FLOPs per
  // head dim, query head and visible key.
  cuda::OpCost attention_cost() const {
    const int64_t kvd = cfg_.n_kv_heads * cfg_.head_dim, qd = cfg_.n_heads * cfg_.head_dim;
    std::map<int32_t, int64_t> ctx;  // sequence -> keys it reads
    double flops = 0;
    for (const cuda::PagedAttentionTile& t : tiles_) {
      const int64_t last = positions_[t.row0 + t.n_rows - 1] + 1;
      ctx[t.seq] = std::max(ctx[t.seq], last);
      for (int32_t r = t.row0; r < t.row0 + t.n_rows; ++r) flops += 4.0 * (positions_[r] + 1) * qd;
    }
    double bytes = 0;
    for (const auto& [seq, keys] : ctx) bytes += 4.0 * keys * kvd;
    return {bytes, flops};
  }

  // y (+)= x W^T for a bf16 projection: one row takes the bandwidth-bound GEMV (launched with
  // PDL, so its weight loads start while the previous kernel finishes); more rows cuBLASLt.
  void matmul(const bf16* x, const Proj& p, int64_t rows, float* y, bool accumulate) {
    const auto* w = reinterpret_cast<const uint16_t*>(p.w);
    if (rows == 1 && cuda::gemv_bf16_f32_supported(w, x, p.k))
      cuda::gemv_bf16_f32(w, x, p.n, p.k, y, accumulate, stream_);
    else
      gemm_.run(x, p.w, y, rows, p.n, p.k, accumulate, stream_);
  }
  void matmul(const bf16* x, const Proj& p, int64_t rows, bf16* y) {  // rounded to bf16
    const auto* w = reinterpret_cast<const uint16_t*>(p.w);
    if (rows == 1 && cuda::gemv_bf16_f32_supported(w, x, p.k))
      cuda::gemv_bf16<bf16>(w, x, p.n, p.k, y, stream_);
    else
      gemm_.run(x, p.w, y, rows, p.n, p.k, stream_);
  }

  // The input of a quantized projection: RMSNorm of f32 rows (x, norm weight), f32 rows, or
  // SwiGLU of an f32 gate|up output; quantized per part type family just before its GEMM.
  struct In {
    enum Kind { kNorm, kRows, kSwiglu } kind;
    const float* x;
    const float* w;
    static In norm(const float* x, const float* w) { return {kNorm, x, w}; }
    static In rows(const float* x) { return {kRows, x, nullptr}; }
    static In swiglu(const float* gu) { return {kSwiglu, gu, nullptr}; }
  };
  //
  // Few rows (<= kMmqGemvMaxRows): the integer-dot GEMV reads each weight once. More rows: the
  // weight is dequantized to bf16 a slice at a time and multiplied by cuBLASLt, which today is
  // 2-5x faster than the int8 tensor-core kernel for 16..2048 rows (docs/design/cuda_engine.md);
  // TESSERA_MMQ_GEMM=1 selects the int8 kernel instead (benchmarks, tests).
  void project(const Proj& p, const In& in, int64_t rows, const Bufs& b, float* y, int64_t ldy,
               bool accumulate) {
    if (rows > cuda::kMmqGemvMaxRows && b.wdq) {
      bf16* h = b.h;  // the bf16 input rows
      switch (in.kind) {
        case In::kNorm:
          cuda::rms_norm_rows_bf16(in.x, in.w, cfg_.norm_eps, rows, p.k, h, stream_);
          break;
        case In::kRows:
          cuda::f32_to_bf16_rows(in.x, rows * p.k, h, stream_);
          break;
        case In::kSwiglu:
          cuda::swiglu_rows_f32_bf16(in.x, rows, p.k, h, stream_);
          break;
      }
      const int64_t slice = std::max<int64_t>(64, kDequantSliceElems / p.k / 64 * 64);
      for (const Proj::Part& part : p.parts)
        for (int64_t r0 = 0; r0 < part.n; r0 += slice) {
          const int64_t sn = std::min(slice, part.n - r0);
          cuda::dequantize_packed_bf16(part.type, part.packed, part.n, p.k, r0, sn, b.wdq, stream_);
          gemm_.run(h, b.wdq, y + part.row0 + r0, rows, sn, p.k, accumulate, stream_, ldy);
        }
      return;
    }
    int64_t quantized_for = 0;  // activation block (32 / 256) of the rows now in b.qx
    for (const Proj::Part& part : p.parts) {
      const int64_t blk = cuda::mmq_act_block(part.type);
      if (blk != quantized_for) {
        switch (in.kind) {
          case In::kNorm:
            cuda::mmq_rms_norm_quantize_rows(part.type, in.x, in.w, cfg_.norm_eps, rows, p.k, b.qx, b.meta, stream_);
            break;
          case In::kRows:
            cuda::mmq_quantize_rows(part.type, in.x, p.k, rows, p.k, b.qx, b.meta, stream_);
            break;
          case In::kSwiglu:
            cuda::mmq_swiglu_quantize_rows(part.type, in.x, rows, p.k, b.qx, b.meta, stream_);
            break;
        }
        quantized_for = blk;
      }
      cuda::mmq_matmul(part.type, part.packed, part.n, p.k, b.qx, b.meta, rows, y + part.row0, ldy,
                       accumulate, stream_);
    }
  }

  // After load / fill_dummy: which intermediate buffers the projections need.
  void finish_load() {
    // One-row bf16 steps rotate q / k in the QKV GEMV's epilogue (interleaved pairs, no bias).
    if (cfg_.rope.layout == ref::RopeLayout::kInterleaved && !cfg_.qkv_bias && cfg_.rope.n_rot > 0) {
      const int64_t pairs = cfg_.rope.n_rot / 2;
      std::vector<float> factors;
      if (rope_freqs_) {
        factors.resize(pairs);
        TESSERA_CUDA_CHECK(cudaMemcpy(factors.data(), rope_freqs_, pairs * sizeof(float), cudaMemcpyDeviceToHost));
      }
      const std::vector<double> inv = cuda::rope_inv_freq(cfg_.rope.n_rot, cfg_.rope.theta_base,
                                                          cfg_.rope.position_scale,
                                                          rope_freqs_ ? factors.data() : nullptr);
      rope_inv_freq_ = arena_.alloc<double>(pairs);
      TESSERA_CUDA_CHECK(cudaMemcpy(rope_inv_freq_, inv.data(), pairs * sizeof(double), cudaMemcpyHostToDevice));
    }
    any_quant_ = output_.quant();
    for (const Layer& l : layers_) {
      any_quant_ |= l.qkv.quant() || l.wo.quant() || l.wgu.quant() || l.wd.quant();
      const bool f32_gu = l.wgu.quant() || l.wd.quant();
      any_f32_gu_ |= f32_gu;
      any_bf16_gu_ |= !f32_gu;
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
  // Host weights [rows_i][k] stacked by rows into one projection. All of a quantized type the
  // integer-dot kernels take: kept quantized, repacked (one matrix when all types are equal,
  // else one part per tensor); otherwise all dequantized to one bf16 matrix.
  Proj proj(std::initializer_list<Tensor> ts) {
    Proj p;
    p.k = ts.begin()->dim(1);
    bool quant = true, same = true;
    for (const Tensor& t : ts) {
      p.n += t.dim(0);
      quant &= cuda::mmq_supported(t.dtype()) && t.dim(1) % cuda::mmq_act_block(t.dtype()) == 0;
      same &= t.dtype() == ts.begin()->dtype();
    }
    if (!quant) {
      p.w = arena_.alloc<bf16>(p.n * p.k);
      int64_t row = 0;
      for (const Tensor& t : ts) {
        upload_bf16(t, p.w + row * p.k);
        row += t.dim(0);
      }
      weight_bytes_ += 2 * p.n * p.k;
      return p;
    }
    auto upload = [&](DType type, const uint8_t* blocks, int64_t row0, int64_t n) {
      const size_t bytes = cuda::gemv_quant_layout(type, n, p.k).bytes;
      std::vector<uint8_t> packed(bytes);
      cuda::repack_quant(type, blocks, n, p.k, packed.data());
      uint8_t* dev = arena_.alloc<uint8_t>(static_cast<int64_t>(bytes));
      TESSERA_CUDA_CHECK(cudaMemcpy(dev, packed.data(), bytes, cudaMemcpyHostToDevice));
      p.parts.push_back({type, dev, row0, n});
      weight_bytes_ += n * *dtype_row_bytes(type, p.k);
    };
    if (same && ts.size() > 1) {  // concatenated GGUF rows are one block matrix
      const DType type = ts.begin()->dtype();
      const int64_t row_bytes = *dtype_row_bytes(type, p.k);
      std::vector<uint8_t> blocks(static_cast<size_t>(p.n * row_bytes));
      int64_t row = 0;
      for (const Tensor& t : ts) {
        std::memcpy(blocks.data() + row * row_bytes, t.raw_data(), static_cast<size_t>(t.dim(0) * row_bytes));
        row += t.dim(0);
      }
      upload(type, blocks.data(), 0, p.n);
      return p;
    }
    int64_t row = 0;
    for (const Tensor& t : ts) {
      upload(t.dtype(), static_cast<const uint8_t*>(t.raw_data()), row, t.dim(0));
      row += t.dim(0);
    }
    return p;
  }
  float* vector(const WeightSource& w, const std::string& name, int64_t n) {
    float* dst = arena_.alloc<float>(n);
    upload_vector(w, name, n, dst);
    return dst;
  }
  static void upload_vector(const WeightSource& w, const std::string& name, int64_t n, float* dst) {
    const Tensor host = weight_vector_f32(w, name, n);
    TESSERA_CUDA_CHECK(cudaMemcpy(dst, host.data<float>(), static_cast<size_t>(n) * 4,
                                  cudaMemcpyHostToDevice));
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
  Proj output_;
  float* out_norm_ = nullptr;
  float* rope_freqs_ = nullptr;  // device, or null
  double* rope_inv_freq_ = nullptr;  // device angle per position of each pair (gemv.h), or null
  std::vector<Layer> layers_;
  Grow<float> residual_, normed_, qkv_, q_, attn_, guf_, logits_, attn_ws_;
  Grow<bf16> h_, gu_;
  Grow<int8_t> qx_;
  Grow<bf16> wdq_;
  static constexpr int64_t kDequantSliceElems = int64_t{32} << 20;  // 64 MB of bf16
  const bool mmq_gemm_ = [] {
    const char* v = std::getenv("TESSERA_MMQ_GEMM");
    return v && std::strcmp(v, "1") == 0;
  }();
  Grow<cuda::MmqActMeta> meta_;
  int64_t weight_bytes_ = 0;
  // Which intermediate buffers the layers' projection types need (set by finish_load()).
  bool any_quant_ = false, any_bf16_gu_ = false, any_f32_gu_ = false;
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

}  // namespace

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

std::unique_ptr<CausalLm> cuda_llama_create_dummy(const std::string& name, int64_t vocab, DType type) {
  LlmConfig cfg = dummy_config(name);
  if (vocab > 0) cfg.vocab = vocab;
  TESSERA_CHECK_ARG(type == DType::kBF16 || cuda::mmq_supported(type),
                    "dummy weights: type " + std::string(dtype_name(type)) +
                        " (supported: bf16, q8_0, q4_0, q4_1, q4_k, q6_k)");
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

}  // namespace tessera::models
