// The projections of the CUDA Llama model (models/cuda/llama_cuda): y (+)= x W^T for each of its
// weights, by weight type and row count.
//   bf16 weights: one row takes the bandwidth-bound GEMV (launched with PDL, so its weight loads
//     start while the previous kernel finishes); more rows cuBLASLt.
//   Quantized weights: up to cuda::kMmqGemvMaxRows rows the integer-dot GEMV on 8-bit
//     activations (weights read once for all rows); then up to TESSERA_DEQUANT_GEMM_MAX_ROWS
//     (kDequantGemmMaxRows; 0 turns it off) dequant_gemm, Hopper tensor cores fed from the
//     quantized bytes; more rows, or shapes dequant_gemm cannot run, dequantize the weight to
//     bf16 a slice at a time for cuBLASLt (faster than the int8 tensor-core kernel for 16..2048
//     rows, docs/design/cuda_engine.md; TESSERA_MMQ_GEMM=1 selects that kernel instead, for
//     benchmarks and tests).
// Enqueues on the caller's stream; never synchronizes (but prepare_rows, at start-up). Scratch
// buffers are the caller's (a CUDA graph holds their addresses); this class says which ones a
// call needs and how large.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "backend/cuda/gemm_bf16.h"
#include "backend/cuda/op_profiler.h"
#include "kernels/cuda/mmq.h"
#include "models/causal_lm.h"
#include "models/cuda/llama_cuda_weights.h"

namespace tessera::models::cuda_llama {

class Projections {
 public:
  Projections(const LlmConfig& cfg, const Weights& w);

  // The input of a quantized projection: RMSNorm of f32 rows (x, norm weight), f32 rows,
  // SwiGLU of an f32 gate|up output, the split partials a decode attention launch left
  // (only for calls on 8-bit rows: quantized_input()), or bf16 rows already in Scratch::h (only
  // for calls on bf16 rows: bf16_input_rows()); turned into what the
  // chosen kernel reads (8-bit rows per part type family, or bf16 rows) just before it. Or
  // (normed) one RMSNorm row already quantized without its 1 / rms by the previous projection's
  // epilogue or the embedding gather (cuda::MmqResidualNorm, cuda::embedding_gather_norm; one row,
  // any quantized parts).
  // Or (half) one f16 row that project_swiglu_half wrote (cuda::mmq_gemv_half).
  struct In {
    enum Kind { kNorm, kRows, kSwiglu, kAttention, kNormed, kBf16, kHalf } kind;
    const float* x;
    const float* w;
    cuda::PagedAttentionPartials partials;
    const int8_t* qx = nullptr;
    const cuda::MmqActMeta* meta = nullptr;
    cuda::MmqRowNorm row_norm{};
    const __half* h = nullptr;
    static In norm(const float* x, const float* w) { return {kNorm, x, w, {}}; }
    static In rows(const float* x) { return {kRows, x, nullptr, {}}; }
    static In swiglu(const float* gu) { return {kSwiglu, gu, nullptr, {}}; }
    static In attention(const cuda::PagedAttentionPartials& p) { return {kAttention, nullptr, nullptr, p}; }
    static In bf16_rows() { return {kBf16, nullptr, nullptr, {}}; }  // already in Scratch::h
    static In normed(const int8_t* qx, const cuda::MmqActMeta* meta, const cuda::MmqRowNorm& row_norm) {
      return {kNormed, nullptr, nullptr, {}, qx, meta, row_norm};
    }
    static In half(const __half* h) { return {kHalf, nullptr, nullptr, {}, nullptr, nullptr, {}, h}; }
  };
  // Scratch of one call (device): bf16 input rows, 8-bit rows and their scales, a dequantized
  // weight slice (null where slices() says none is needed), dequant_gemm's split sums.
  struct Scratch {
    bf16* h;
    int8_t* qx;
    cuda::MmqActMeta* meta;
    bf16* wdq;
    void* dg_ws;
  };
  static constexpr int64_t kSliceElems = int64_t{32} << 20;  // a weight slice: 64 MB of bf16
  // dequant_gemm's row bound. Session 47 (H100, tessera bench, Llama-3-8B shapes): prefill of
  // 256 / 512 rows 1.42-1.65x / 1.02-1.21x faster on dequant_gemm than on the bf16 slices, 1024
  // rows 0.76-0.95x (it was 128 since session 17, when dequant_gemm was 2x slower).
  static constexpr int64_t kDequantGemmMaxRows = 512;

  // Whether a call of `rows` rows may need the weight-slice buffer (kSliceElems).
  bool slices(int64_t rows) const;
  // Plans a call whose layers run at `rows` rows and whose head runs at `logit_rows`: the bytes
  // of dequant_gemm split sums it needs (Scratch::dg_ws; 0 when none).
  size_t plan_call(int64_t rows, int64_t logit_rows);

  // Whether a call of `rows` rows through p's quantized weights reads 8-bit activation rows (the
  // integer-dot GEMVs: up to kMmqGemvMaxRows, and 9..16 where tc_takes_rows), so its input may be
  // In::attention.
  bool quantized_input(const Proj& p, int64_t rows) const {
    return rows <= cuda::kMmqGemvMaxRows || tc_takes_rows(p, rows);
  }
  // Whether a call of `rows` rows through quantized p reads bf16 rows (Scratch::h: dequant_gemm
  // or the weight slices), so its input may be In::bf16_rows. Neither this nor quantized_input
  // holds past 16 rows under TESSERA_MMQ_GEMM=1 (the int8 GEMM quantizes f32 rows itself).
  bool bf16_input_rows(const Proj& p, int64_t rows) const {
    return on_slices(p, rows) || (!tc_takes_rows(p, rows) && dequant_gemm_takes(p, rows));
  }
  // Whether one row's RMSNorm between producer and consumer can ride in the producer's epilogue
  // (cuda::MmqResidualNorm): the producer quantized in one part, the consumer quantized (K
  // weights then take 32-element activation blocks instead of Q8_K's 256: mmq.h).
  static bool norm_fusable(const Proj& producer, const Proj& consumer);
  // Whether p holds Q4_1 weights: the default model's type, whose GPU greedy text must follow the
  // CPU's (first differing only where the CPU's top-2 margin < 0.1). Roundings other than the
  // CPU's moved one prompt's first difference past that (the f16 SwiGLU row: 0.118, session 53;
  // the norms at a step's ends: 0.190, session 64), so the fused forms that round otherwise
  // (half_swiglu, the end norms) leave such projections out unless asked for them ("all").
  static bool keeps_cpu_rounding(const Proj& p);
  // Whether one row's SwiGLU between gate|up and down rides in gate|up's GEMV epilogue, down then
  // reading f16 (cuda::mmq_gemv_swiglu_half): both quantized in one part, down's type one that
  // takes f16 rows (cuda::mmq_half_act_supported). Llama-3-8B shapes, batch-1 decode at a 512-token
  // context against the 8-bit quantizer kernel, two rounds in one call each: H200
  // (docs/design/gpu_runs/s49_half_swiglu_ab.txt) Q4_0 1.63-1.64 -> 1.61 ms, Q8_0 2.36 -> 2.35, but
  // then Q4_K 1.68 -> 1.71; since down on the f16 row takes one weight block per lane per step
  // (session 52), H100 (s52_half_swiglu_k_formats.txt) Q4_K 1.96 -> 1.94-1.95, Q6_K 2.69-2.71 -> 2.55.
  // Q4_1 down weights (keeps_cpu_rounding) only with `with_q4_1` (TESSERA_HALF_SWIGLU=all): H100
  // Q4_1 2.13 -> 2.07 ms (s53_q4_1_half_row.txt); the 8-bit row is the CPU's rounding.
  static bool half_swiglu(const Proj& gate_up, const Proj& down, bool with_q4_1 = false);
  // Whether a call of `rows` rows through p takes dequant_gemm (at these rows, every part's type).
  bool dequant_gemm_takes(const Proj& p, int64_t rows) const;
  // Whether a call of `rows` rows through quantized p dequantizes its weights to bf16 slices for
  // cuBLASLt (past kDequantGemmMaxRows, or a type dequant_gemm cannot run).
  bool on_slices(const Proj& p, int64_t rows) const;
  // Whether a call of 9..16 rows through p takes the tensor-core GEMV's two tiles on 8-bit rows
  // (every part's type up to cuda::mmq_tc_wide_rows; TESSERA_MMQ_TC_WIDE) instead of bf16 rows.
  bool tc_takes_rows(const Proj& p, int64_t rows) const;
  // What a call must at least move and compute, for the profiler's floors: the weights once,
  // rows of in / out bytes per element, 2 FLOPs per multiply-add.
  static cuda::OpCost cost(const Proj& p, int64_t rows, double in_bytes, double out_bytes);

  // Quantized projection p (p.quant()). next_norm (one row, one part, y = next_norm->x,
  // accumulate): the GEMV also forms the next RMSNorm's input (cuda::mmq_gemv_residual_norm).
  void project(const Proj& p, const In& in, int64_t rows, const Scratch& b, float* y, int64_t ldy,
               bool accumulate, cudaStream_t s, const cuda::MmqResidualNorm* next_norm = nullptr);
  // One row through gate|up (half_swiglu) from In::normed or In::norm, SwiGLU in the GEMV's
  // epilogue: h [ff] f16 for down's In::half(h).
  void project_swiglu_half(const Proj& gate_up, const In& in, const Scratch& b, __half* h, cudaStream_t s);
  // The same through the bf16 slices (on_slices(p, rows)), the product rounded to bf16 (ldy =
  // p.n): the gate|up output of a prompt chunk, which SwiGLU reads once (half the bytes of f32).
  void project(const Proj& p, const In& in, int64_t rows, const Scratch& b, bf16* y, cudaStream_t s);
  // bf16 projection p: f32 out, written or added to; or rounded to bf16 (the gate|up output).
  void matmul(const bf16* x, const Proj& p, int64_t rows, float* y, bool accumulate, cudaStream_t s);
  void matmul(const bf16* x, const Proj& p, int64_t rows, bf16* y, cudaStream_t s);

  // The bf16 projections' cuBLASLt kernels for each power-of-two row count from 16 up to
  // max_rows (at most GemmBf16::kTuneMaxRows), timed now (GemmBf16::prepare_rows) so that no
  // serving step stalls on it; every row count in a bucket then reuses its winner. Only
  // weights that stream from HBM take part (Llama-3-8B: gate|up, down, the head).
  // TESSERA_GEMM_PREPARE=0 skips it (A/B benchmarks). Synchronizes s.
  void prepare_rows(int64_t max_rows, cudaStream_t s);

 private:
  bool dequant_gemm_rows(int64_t rows) const;
  // Scratch::h = the bf16 input rows of a call on bf16 rows (norm, conversion or SwiGLU).
  void bf16_input(const In& in, int64_t rows, int64_t k, const Scratch& b, cudaStream_t s);
  // y (+)= x W^T through W dequantized a slice of rows at a time into Scratch::wdq.
  template <class Out>
  void through_slices(const Proj& p, int64_t rows, const Scratch& b, Out* y, int64_t ldy,
                      bool accumulate, cudaStream_t s);
  size_t dequant_gemm_ws_bytes(int64_t rows, bool head);

  const LlmConfig& cfg_;
  const Weights& w_;
  cuda::GemmBf16 gemm_;
  const int64_t dequant_gemm_max_rows_;
  const bool mmq_gemm_;
  const int tc_wide_;  // tc_wide_from_env: 0 off, 1 per type, 2 every supported type
  std::map<std::pair<int64_t, bool>, size_t> dg_ws_need_;  // Weights' answer per (rows, head)
  size_t dg_ws_bytes_ = 0;                                   // this call's (plan_call)
};

}  // namespace tessera::models::cuda_llama
