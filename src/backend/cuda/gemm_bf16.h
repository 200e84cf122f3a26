// Row-major GEMM through cuBLASLt for the model's linear layers (tensor cores, bf16 inputs):
//
//   y[n][m] (f32) = (accumulate ? y : 0) + x[n][k] (bf16) * w[m][k]^T (bf16)
//
// `accumulate` folds a residual add into the product (cuBLASLt's beta = 1). One plan (layouts +
// heuristic algorithm) is cached per (n, m, k, accumulate); the workspace is owned here.
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
  explicit GemmBf16(size_t workspace_bytes = size_t{32} << 20);
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

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(int64_t n, int64_t m, int64_t k, int64_t ldy, bool accumulate, bool bf16_out);
  void launch(const Plan& p, const void* x, const void* w, void* y, bool accumulate,
              cudaStream_t stream);

  CublasLtHandle handle_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>, Plan> plans_;
};

}  // namespace tessera::cuda
