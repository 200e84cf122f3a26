// Row-major GEMM through cuBLASLt for the model's linear layers (tensor cores, bf16 inputs):
//
//   y[n][m] (f32) = (accumulate ? y : 0) + x[n][k] (bf16) * w[m][k]^T (bf16)
//
// `accumulate` folds a residual add into the product (cuBLASLt's beta = 1). One plan (layouts +
// algorithm) is cached per (n, m, k, ldy, accumulate, output type); the workspace is owned here.
//
// Kernel selection: the heuristic's top pick. Optionally (TESSERA_GEMM_TUNE=1, or `select` in
// the constructor), for decode-sized products (n <= kTuneMaxRows) whose weight streams from HBM
// on every call (>= 1.5x the L2), where that pick is often not the fastest configuration
// (bench/cuda/gemm_decode_bench on an H200 at 128-512 rows: gate|up, down and the head 7-23 %
// slower than the best found): the first call of such a shape times, on its own operands, the
// heuristic's results, each with other thread-block-cluster shapes, and the top algorithm's
// other tile x stages configurations (all accepted by AlgoCheck within the workspace), and
// keeps the fastest if it beats the heuristic's pick by >= 3 %. That first call synchronizes
// its stream and takes ~0.1-0.3 s (an accumulating call's y is saved and restored around the
// trials), so it is off by default: in the engine it stalls the first step of every new row
// count. Inside a CUDA-graph capture there is no timing (the heuristic's pick is kept).
// prepare_rows() runs the same selection ahead of time, once per power-of-two row bucket (the
// engine does it at start for its batch sizes), and every later plan in the bucket reuses it.
//
//   cuda::GemmBf16 gemm;
//   gemm.run(x, w, y, n, m, k, /*accumulate=*/false, stream);
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "backend/cuda/cublaslt_handle.h"

namespace tessera::cuda {

class GemmBf16 {
 public:
  static constexpr int64_t kTuneMaxRows = 512;

  // split_k >= 1 forces that K split on the heuristic's kernel (f32 or in-place reduction) and
  // no selection (tests); select: the timed selection above (default: TESSERA_GEMM_TUNE=1).
  explicit GemmBf16(size_t workspace_bytes = size_t{32} << 20, int split_k = 0,
                    bool select = select_from_env());
  static bool select_from_env();
  ~GemmBf16();
  GemmBf16(const GemmBf16&) = delete;
  GemmBf16& operator=(const GemmBf16&) = delete;

  // ldy: elements between rows of y (0: m), e.g. to write a column slice of a wider output.
  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t n, int64_t m,
           int64_t k, bool accumulate, cudaStream_t stream, int64_t ldy = 0);
  // Same product rounded to bf16 (no accumulate): halves the output traffic for GEMM results
  // that only feed another bf16 GEMM (e.g. the fused gate|up projection).
  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t n, int64_t m,
           int64_t k, cudaStream_t stream, int64_t ldy = 0);

  // Runs the timed selection now for n rows of this product (y = x w^T, ldy = m), on scratch
  // activations and the caller's weight w (it must stream from HBM: >= 1.5x the L2, and n <=
  // kTuneMaxRows, else nothing happens), synchronizing the stream. The winner serves the plan
  // of n rows and the first call of every plan whose rows round up to the same power of two
  // (if cublasLtMatmulAlgoCheck accepts it there), with or without TESSERA_GEMM_TUNE. Returns
  // whether a configuration other than the heuristic's won.
  bool prepare_rows(const __nv_bfloat16* w, int64_t n, int64_t m, int64_t k, bool accumulate,
                    bool bf16_out, cudaStream_t stream);
  // Whether an m x k weight is large enough for the selection (>= 1.5x the L2).
  bool selects_for(int64_t m, int64_t k) const { return static_cast<size_t>(m) * k * 2 >= l2_bytes_ * 3 / 2; }

  // The plan of n rows x m outputs (ldy = m) after its first call: its K split, and whether
  // the selection replaced the heuristic's pick. {0, false} when there is no such plan.
  struct PlanInfo {
    int split_k = 0;
    bool selected = false;
  };
  PlanInfo plan_info(int64_t n, int64_t m, int64_t k, bool accumulate, bool bf16_out) const;

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool bf16_out = false;
    bool first_call_done = false;
    bool selected = false;
  };
  Plan& plan(int64_t n, int64_t m, int64_t k, int64_t ldy, bool accumulate, bool bf16_out);
  void force_split(Plan& p);
  std::vector<cublasLtMatmulAlgo_t> candidates(const Plan& p);
  void select(Plan& p, const void* x, const void* w, void* y, int64_t n, int64_t m, int64_t ldy,
              bool accumulate, cudaStream_t stream);
  // Both run()s: y as f32 or (bf16_out) bf16.
  void run_any(const void* x, const void* w, void* y, int64_t n, int64_t m, int64_t k, int64_t ldy,
               bool accumulate, bool bf16_out, cudaStream_t stream);
  void first_call(Plan& p, const void* x, const void* w, void* y, int64_t n, int64_t m, int64_t k,
                  int64_t ldy, bool accumulate, cudaStream_t stream);
  cublasStatus_t launch(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* x,
                        const void* w, void* y, bool accumulate, cudaStream_t stream);

  CublasLtHandle handle_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  int split_k_;
  bool tune_;
  size_t l2_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>, Plan> plans_;
  // prepare_rows' winners by (rows rounded up to a power of two, m, k, ldy, accumulate,
  // bf16 out); absent: not prepared, or the heuristic's pick won.
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>, cublasLtMatmulAlgo_t> prepared_;
};

}  // namespace tessera::cuda
