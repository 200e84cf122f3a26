#include "backend/cuda/gemm_bf16.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tessera::cuda {

namespace {
void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw_error(ErrorCode::kInternal, std::string("cuBLASLt ") + what + " failed: status " +
                                          std::to_string(static_cast<int>(st)));
}
}  // namespace

GemmBf16::GemmBf16(size_t workspace_bytes, int split_k)
    : workspace_bytes_(workspace_bytes), split_k_(split_k) {
  if (const char* v = std::getenv("TESSERA_GEMM_SPLITK"); v && split_k_ == kSplitAuto && std::strcmp(v, "0") == 0)
    split_k_ = 1;
  TESSERA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

GemmBf16::~GemmBf16() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  cudaFree(workspace_);
}

// Column-major view: C (m x n, ld m) = op(A) * B with A = w seen as k x m (ld k), transposed,
// and B = x seen as k x n (ld k). C is then exactly row-major y[n][m].
const GemmBf16::Plan& GemmBf16::plan(int64_t n, int64_t m, int64_t k, int64_t ldy,
                                     bool accumulate, bool bf16_out) {
  const auto key = std::make_tuple(n, m, k, ldy, accumulate, bf16_out);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc create");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
  check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, m, k), "layout a");
  check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, n, k), "layout b");
  check(cublasLtMatrixLayoutCreate(&p.c, bf16_out ? CUDA_R_16BF : CUDA_R_32F, m, n, ldy), "layout c");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes_, sizeof workspace_bytes_),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.op, p.a, p.b, p.c,
                                                           p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
    throw_error(ErrorCode::kUnsupported, "cuBLASLt has no algorithm for a bf16 GEMM of n " +
                                             std::to_string(n) + " m " + std::to_string(m) +
                                             " k " + std::to_string(k));
  }
  p.algo = result.algo;
  choose_split(p, result.wavesCount);
  return plans_.emplace(key, p).first->second;
}

// The heuristic's kernel (tile, stages, cluster) with K split, the partial products reduced in
// f32 (compute type) where the kernel offers it, else in place.
void GemmBf16::choose_split(Plan& p, float waves) {
  if (split_k_ == 1 || (split_k_ == kSplitAuto && waves >= kSplitBelowWaves)) return;
  auto cap = [&](cublasLtMatmulAlgoCapAttributes_t attr) {
    uint32_t v = 0;
    size_t written = 0;
    return cublasLtMatmulAlgoCapGetAttribute(&p.algo, attr, &v, sizeof v, &written) == CUBLAS_STATUS_SUCCESS ? v : 0;
  };
  if (cap(CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) return;
  const uint32_t schemes = cap(CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  const uint32_t scheme = (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                          : (schemes & CUBLASLT_REDUCTION_SCHEME_INPLACE)    ? CUBLASLT_REDUCTION_SCHEME_INPLACE
                                                                             : 0;
  if (scheme == 0) return;
  const int lo = split_k_ == kSplitAuto ? 2 : split_k_, hi = split_k_ == kSplitAuto ? kMaxSplit : split_k_;
  for (int s = hi; s >= lo; --s) {
    cublasLtMatmulAlgo_t a = p.algo;
    const int32_t splits = s;
    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits);
    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme);
    cublasLtMatmulHeuristicResult_t r{};
    if (cublasLtMatmulAlgoCheck(handle_.get(), p.op, p.a, p.b, p.c, p.c, &a, &r) != CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > workspace_bytes_ || (split_k_ == kSplitAuto && r.wavesCount > 1.0f + 1e-3f))
      continue;
    p.algo = a;
    p.split = s;
    return;
  }
}

int GemmBf16::split_k(int64_t n, int64_t m, int64_t k, bool accumulate, bool bf16_out) {
  return plan(n, m, k, m, accumulate, bf16_out).split;
}

void GemmBf16::launch(const Plan& p, const void* x, const void* w, void* y, bool accumulate,
                      cudaStream_t stream) {
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  check(cublasLtMatmul(handle_.get(), p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                       &p.algo, workspace_, workspace_bytes_, stream),
        "matmul");
}

void GemmBf16::run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t n,
                   int64_t m, int64_t k, bool accumulate, cudaStream_t stream, int64_t ldy) {
  TESSERA_CHECK_ARG(n >= 1 && m >= 1 && k >= 1 && (ldy == 0 || ldy >= m),
                    "gemm_bf16: empty product or ldy < m");
  launch(plan(n, m, k, ldy > 0 ? ldy : m, accumulate, false), x, w, y, accumulate, stream);
}

void GemmBf16::run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t n,
                   int64_t m, int64_t k, cudaStream_t stream) {
  TESSERA_CHECK_ARG(n >= 1 && m >= 1 && k >= 1, "gemm_bf16: empty product");
  launch(plan(n, m, k, m, false, true), x, w, y, false, stream);
}

}  // namespace tessera::cuda
