#include "models/cuda/llama_cuda_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/dequant_gemm.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"
#include "models/llama.h"

namespace tessera::models::cuda_llama {

DeviceArena::~DeviceArena() {
  for (void* p : blocks_) cudaFree(p);
}

void* DeviceArena::alloc_bytes(size_t bytes) {
  void* p = nullptr;
  TESSERA_CUDA_CHECK(cudaMalloc(&p, bytes));
  blocks_.push_back(p);
  return p;
}

namespace {

// A host weight {rows, cols} of any type, dequantized and rounded to bf16 into device dst.
void upload_bf16(const Tensor& t, bf16* dst) {
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

void upload_vector(const WeightSource& w, const std::string& name, int64_t n, float* dst) {
  const Tensor host = weight_vector_f32(w, name, n);
  TESSERA_CUDA_CHECK(
      cudaMemcpy(dst, host.data<float>(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
}
}  // namespace

void Weights::load(const WeightSource& w) {
  const int64_t d = cfg_.d_model, qd = cfg_.n_heads * cfg_.head_dim,
                kvd = cfg_.n_kv_heads * cfg_.head_dim, ff = cfg_.d_ff;
  const Tensor table = w.matrix("token_embd.weight", cfg_.vocab, d);
  embd_type = table.dtype();
  if (embd_type != DType::kI32) {  // the gather kernel reads every weight type as stored
    const size_t bytes = static_cast<size_t>(cfg_.vocab) * *dtype_row_bytes(embd_type, d);
    uint8_t* t = arena_.alloc<uint8_t>(static_cast<int64_t>(bytes));
    TESSERA_CUDA_CHECK(cudaMemcpy(t, table.raw_data(), bytes, cudaMemcpyHostToDevice));
    embd = t;
  } else {  // I32 (not a weight type): a bf16 copy by value
    embd_type = DType::kBF16;
    bf16* t = arena_.alloc<bf16>(cfg_.vocab * d);
    upload_bf16(table, t);
    embd = t;
  }
  output = proj({cfg_.tied_embeddings ? table : w.matrix("output.weight", cfg_.vocab, d)});
  out_norm = upload_f32(w, "output_norm.weight", d);
  // Per-pair divisors (Llama-3.1's stored factors, YaRN's), or none.
  const std::vector<float> rope_factors = llama_rope_freq_divisors(cfg_, w);
  for (int64_t i = 0; i < cfg_.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    Layer& l = layers[i];
    l.attn_norm = upload_f32(w, p + "attn_norm.weight", d);
    l.qkv = proj({w.matrix(p + "attn_q.weight", qd, d), w.matrix(p + "attn_k.weight", kvd, d),
                  w.matrix(p + "attn_v.weight", kvd, d)});
    l.wo = proj({w.matrix(p + "attn_output.weight", d, qd)});
    if (cfg_.qkv_bias) {
      l.bqkv = arena_.alloc<float>(qd + 2 * kvd);
      upload_vector(w, p + "attn_q.bias", qd, l.bqkv);
      upload_vector(w, p + "attn_k.bias", kvd, l.bqkv + qd);
      upload_vector(w, p + "attn_v.bias", kvd, l.bqkv + qd + kvd);
    }
    if (cfg_.qk_norm) {
      l.q_norm = upload_f32(w, p + "attn_q_norm.weight", cfg_.head_dim);
      l.k_norm = upload_f32(w, p + "attn_k_norm.weight", cfg_.head_dim);
    }
    l.ffn_norm = upload_f32(w, p + "ffn_norm.weight", d);
    l.wgu = proj({w.matrix(p + "ffn_gate.weight", ff, d), w.matrix(p + "ffn_up.weight", ff, d)});
    l.wd = proj({w.matrix(p + "ffn_down.weight", d, ff)});
  }
  finish_load(rope_factors.empty() ? nullptr : rope_factors.data());
}

void Weights::fill_dummy(uint64_t seed, DType type, cudaStream_t stream) {
  const int64_t d = cfg_.d_model, qd = cfg_.n_heads * cfg_.head_dim,
                kvd = cfg_.n_kv_heads * cfg_.head_dim, ff = cfg_.d_ff;
  auto bf16_mat = [&](int64_t rows, int64_t cols) {
    bf16* w = arena_.alloc<bf16>(rows * cols);
    const float a = std::sqrt(3.f / static_cast<float>(cols));
    cuda::fill_uniform_bf16(reinterpret_cast<uint16_t*>(w), rows * cols, -a, a, seed++, stream);
    return w;
  };
  auto mat = [&](int64_t rows, int64_t cols) {
    Proj p;
    p.n = rows;
    p.k = cols;
    if (type == DType::kBF16) {
      p.w = bf16_mat(rows, cols);
      weight_bytes += 2 * rows * cols;
    } else {
      const size_t bytes = cuda::gemv_quant_layout(type, rows, cols).bytes;
      uint8_t* q = arena_.alloc<uint8_t>(static_cast<int64_t>(bytes));
      cuda::fill_random_quant(type, q, rows, cols, cuda::dummy_quant_scale(type, cols), seed++,
                              stream);
      p.parts.push_back({type, q, 0, rows});
      weight_bytes += rows * *dtype_row_bytes(type, cols);
    }
    return p;
  };
  auto vec = [&](int64_t n, float lo, float hi) {
    float* v = arena_.alloc<float>(n);
    cuda::fill_uniform_f32(v, n, lo, hi, seed++, stream);
    return v;
  };
  embd_type = DType::kBF16;
  embd = bf16_mat(cfg_.vocab, d);
  output = mat(cfg_.vocab, d);
  out_norm = vec(d, 0.9f, 1.1f);
  for (Layer& l : layers) {
    l.attn_norm = vec(d, 0.9f, 1.1f);
    l.qkv = mat(qd + 2 * kvd, d);
    l.wo = mat(d, qd);
    if (cfg_.qkv_bias) l.bqkv = vec(qd + 2 * kvd, -0.1f, 0.1f);
    l.ffn_norm = vec(d, 0.9f, 1.1f);
    l.wgu = mat(2 * ff, d);
    l.wd = mat(d, ff);
  }
  finish_load(nullptr);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// After load / fill_dummy: the RoPE angle table, and which intermediate buffers the projections
// need.
void Weights::finish_load(const float* rope_factors) {
  // Each rotated pair's angle per position, for the RoPE kernel and the QKV GEMV epilogue.
  if (cfg_.rope.n_rot > 0) {
    const int64_t pairs = cfg_.rope.n_rot / 2;
    const std::vector<double> inv = cuda::rope_inv_freq(cfg_.rope.n_rot, cfg_.rope.theta_base,
                                                        cfg_.rope.position_scale, rope_factors);
    rope_inv_freq = arena_.alloc<double>(pairs);
    TESSERA_CUDA_CHECK(cudaMemcpy(rope_inv_freq, inv.data(), pairs * sizeof(double), cudaMemcpyHostToDevice));
  }
  any_quant = output.quant();
  for (const Layer& l : layers) {
    any_quant |= l.qkv.quant() || l.wo.quant() || l.wgu.quant() || l.wd.quant();
    const bool f32_gu = l.wgu.quant() || l.wd.quant();
    any_f32_gu |= f32_gu;
    any_bf16_gu |= !f32_gu;
  }
  all_dequant_gemm = true;
  auto check = [&](const Proj& p) {
    for (const Proj::Part& part : p.parts) all_dequant_gemm &= cuda::dequant_gemm_supported(part.type, p.k);
  };
  for_each_layer_proj(check);
  check(output);
}

size_t Weights::dequant_gemm_workspace_bytes(int64_t rows, bool head) const {
  size_t need = 0;
  auto add = [&](const Proj& p) {
    for (const Proj::Part& part : p.parts)
      need = std::max(need, cuda::dequant_gemm_workspace_bytes(part.type, part.n, p.k, rows));
  };
  if (head) add(output);
  else for_each_layer_proj(add);
  return need;
}

// Host weights [rows_i][k] stacked by rows into one projection. All of a quantized type the
// integer-dot kernels take: kept quantized, repacked (one matrix when all types are equal,
// else one part per tensor); otherwise all dequantized to one bf16 matrix.
Proj Weights::proj(std::initializer_list<Tensor> ts) {
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
    weight_bytes += 2 * p.n * p.k;
    return p;
  }
  auto upload = [&](DType type, const uint8_t* blocks, int64_t row0, int64_t n) {
    const size_t bytes = cuda::gemv_quant_layout(type, n, p.k).bytes;
    std::vector<uint8_t> packed(bytes);
    cuda::repack_quant(type, blocks, n, p.k, packed.data());
    uint8_t* dev = arena_.alloc<uint8_t>(static_cast<int64_t>(bytes));
    TESSERA_CUDA_CHECK(cudaMemcpy(dev, packed.data(), bytes, cudaMemcpyHostToDevice));
    p.parts.push_back({type, dev, row0, n});
    weight_bytes += n * *dtype_row_bytes(type, p.k);
  };
  if (same && ts.size() > 1) {  // concatenated GGUF rows are one block matrix
    const DType type = ts.begin()->dtype();
    const int64_t row_bytes = *dtype_row_bytes(type, p.k);
    std::vector<uint8_t> blocks(static_cast<size_t>(p.n * row_bytes));
    int64_t row = 0;
    for (const Tensor& t : ts) {
      std::memcpy(blocks.data() + row * row_bytes, t.raw_data(),
                  static_cast<size_t>(t.dim(0) * row_bytes));
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
float* Weights::upload_f32(const WeightSource& w, const std::string& name, int64_t n) {
  float* dst = arena_.alloc<float>(n);
  upload_vector(w, name, n, dst);
  return dst;
}

}  // namespace tessera::models::cuda_llama
