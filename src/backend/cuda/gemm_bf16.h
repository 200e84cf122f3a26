// Row-major GEMM through cuBLASLt for the model's linear layers (tensor cores, bf16 inputs):
//
//   y[n][m] (f32) = (accumulate ? y : 0) + x[n][k] (bf16) * w[m][k]^T (bf16)
//
// `accumulate` folds a residual add into the product (cuBLASLt's beta = 1). One plan (layouts +
// algorithm) is cached per (n, m, k, ldy, accumulate, output type); the workspace is owned here.
// Plans are built on a shape's first call: run each shape once before capturing a CUDA graph.
//
// Split-K: the heuristic's top pick for decode shapes (few rows, few output tiles) fills only
// part of the GPU (its wave count < kSplitBelowWaves), so a weight-streaming GEMM runs below the
// memory bandwidth. Such a plan takes the same kernel with K split in s parts, s the largest of
// 2..kMaxSplit that cuBLASLt accepts (AlgoCheck, within the workspace) with at most one wave;
// the parts are reduced in f32 (gemm_decode_bench measures the shapes). TESSERA_GEMM_SPLITK=0
// turns it off (A/B runs); `split_k` in the constructor forces a count (tests).
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

#include "backend/cuda/cublaslt_handle.h"

namespace tessera::cuda {

class GemmBf16 {
 public:
  static constexpr int kSplitAuto = -1;  // the rule above; 1: never split; >= 2: that count
  static constexpr float kSplitBelowWaves = 0.75f;
  static constexpr int kMaxSplit = 8;

  explicit GemmBf16(size_t workspace_bytes = size_t{32} << 20, int split_k = kSplitAuto);
  ~GemmBf16();
  GemmBf16(const GemmBf16&) = delete;
  GemmBf16& operator=(const GemmBf16&) = delete;

  // ldy: elements between rows of y (0: m), e.g. to write a column slice of a wider output.
  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t n, int64_t m,
           int64_t k, bool accumulate, cudaStream_t stream, int64_t ldy = 0);
  // Same product rounded to bf16 (no accumulate): halves the output traffic for GEMM results
  // that only feed another bf16 GEMM (e.g. the fused gate|up projection).
  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t n,
           int64_t m, int64_t k, cudaStream_t stream);
  // The K split of the plan for n rows x m outputs (building it if needed; ldy = m, f32 out
  // unless bf16_out).
  int split_k(int64_t n, int64_t m, int64_t k, bool accumulate, bool bf16_out);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    int split = 1;
  };
  void choose_split(Plan& p, float waves);
  const Plan& plan(int64_t n, int64_t m, int64_t k, int64_t ldy, bool accumulate, bool bf16_out);
  void launch(const Plan& p, const void* x, const void* w, void* y, bool accumulate,
              cudaStream_t stream);

  CublasLtHandle handle_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  int split_k_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>, Plan> plans_;
};

}  // namespace tessera::cuda
