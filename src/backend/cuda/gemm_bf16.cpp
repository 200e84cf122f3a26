#include "backend/cuda/gemm_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
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

template <class T>
void set_config(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &v, sizeof v);
}
template <class T>
T config_of(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &written);
  return v;
}
template <class T>
T cap(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t written = 0;
  return cublasLtMatmulAlgoCapGetAttribute(&a, attr, &v, sizeof v, &written) ==
                 CUBLAS_STATUS_SUCCESS
             ? v
             : T{};
}
std::vector<uint32_t> cap_ids(const cublasLtMatmulAlgo_t& a,
                              cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS)
    return {};
  std::vector<uint32_t> v(bytes / sizeof(uint32_t));
  if (!v.empty() &&
      cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes) != CUBLAS_STATUS_SUCCESS)
    return {};
  return v;
}

constexpr float kTuneMinGain = 0.97f;  // a candidate must take <= 97 % of the heuristic pick's time
}  // namespace

bool GemmBf16::select_from_env() {
  const char* v = std::getenv("TESSERA_GEMM_TUNE");
  return v && std::strcmp(v, "1") == 0;
}

GemmBf16::GemmBf16(size_t workspace_bytes, int split_k, bool select)
    : workspace_bytes_(workspace_bytes), split_k_(split_k), tune_(select && split_k < 1) {
  TESSERA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  int dev = 0, l2 = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  l2_bytes_ = static_cast<size_t>(l2);
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
GemmBf16::Plan& GemmBf16::plan(int64_t n, int64_t m, int64_t k, int64_t ldy, bool accumulate,
                               bool bf16_out) {
  const auto key = std::make_tuple(n, m, k, ldy, accumulate, bf16_out);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  p.bf16_out = bf16_out;
  check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc create");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
        "transa");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
        "transb");
  check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, m, k), "layout a");
  check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, n, k), "layout b");
  check(cublasLtMatrixLayoutCreate(&p.c, bf16_out ? CUDA_R_16BF : CUDA_R_32F, m, n, ldy),
        "layout c");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes_, sizeof workspace_bytes_),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.op, p.a, p.b, p.c, p.c,
                                                           pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
    throw_error(ErrorCode::kUnsupported, "cuBLASLt has no algorithm for a bf16 GEMM of n " +
                                             std::to_string(n) + " m " + std::to_string(m) + " k " +
                                             std::to_string(k));
  }
  p.algo = result.algo;
  if (split_k_ >= 2) force_split(p);
  return plans_.emplace(key, p).first->second;
}

// The heuristic's kernel with K split in split_k_ parts, reduced in f32 (compute type) where
// the kernel offers it, else in place; unchanged if cuBLASLt refuses it.
void GemmBf16::force_split(Plan& p) {
  if (cap<int32_t>(p.algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) return;
  const uint32_t schemes = cap<uint32_t>(p.algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  const uint32_t scheme =
      (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
      : (schemes & CUBLASLT_REDUCTION_SCHEME_INPLACE)    ? CUBLASLT_REDUCTION_SCHEME_INPLACE
                                                         : 0;
  if (scheme == 0) return;
  cublasLtMatmulAlgo_t a = p.algo;
  set_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split_k_);
  set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme);
  cublasLtMatmulHeuristicResult_t r{};
  if (cublasLtMatmulAlgoCheck(handle_.get(), p.op, p.a, p.b, p.c, p.c, &a, &r) ==
          CUBLAS_STATUS_SUCCESS &&
      r.workspaceSize <= workspace_bytes_)
    p.algo = a;
}

// The heuristic's results (first: its top pick), each unsplit where it splits k and with the
// cluster shapes 1x1, 2x1, 4x1, 1x2, 2x2, and the top algorithm's tile x stages grid (custom
// option 0, no split); the configurations AlgoCheck accepts within the workspace, without
// repeats.
std::vector<cublasLtMatmulAlgo_t> GemmBf16::candidates(const Plan& p) {
  std::vector<cublasLtMatmulAlgo_t> out;
  auto add = [&](const cublasLtMatmulAlgo_t& a) {
    for (const auto& o : out)
      if (std::memcmp(&o, &a, sizeof a) == 0) return;
    cublasLtMatmulHeuristicResult_t r{};
    if (cublasLtMatmulAlgoCheck(handle_.get(), p.op, p.a, p.b, p.c, p.c, &a, &r) ==
            CUBLAS_STATUS_SUCCESS &&
        r.workspaceSize <= workspace_bytes_)
      out.push_back(a);
  };
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes_, sizeof workspace_bytes_);
  cublasLtMatmulHeuristicResult_t heur[8];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.op, p.a, p.b, p.c, p.c, pref, 8, heur, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  out.push_back(p.algo);
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                               CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                               CUBLASLT_CLUSTER_SHAPE_2x2x1};
  for (int i = 0; i < found; ++i) {
    add(heur[i].algo);
    // Unsplit: at 128 rows the heuristic splits the down projection's k in 2 (+ a reduce
    // kernel); the same configuration unsplit streams faster (gemm_decode_bench: 34.6 vs 39.3 us).
    if (config_of<int32_t>(heur[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) {
      cublasLtMatmulAlgo_t a = heur[i].algo;
      set_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
      set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_REDUCTION_SCHEME_NONE);
      add(a);
    }
    for (uint16_t c : clusters) {
      cublasLtMatmulAlgo_t a = heur[i].algo;
      set_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c);
      add(a);
    }
  }
  int32_t id = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written);
  const cudaDataType_t ct = p.bf16_out ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatmulAlgo_t g;
  if (cublasLtMatmulAlgoInit(handle_.get(), CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF,
                             CUDA_R_16BF, ct, ct, id, &g) == CUBLAS_STATUS_SUCCESS) {
    std::vector<uint32_t> tiles = cap_ids(g, CUBLASLT_ALGO_CAP_TILE_IDS),
                          stages = cap_ids(g, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (stages.empty()) stages = {CUBLASLT_MATMUL_STAGES_UNDEFINED};
    for (uint32_t t : tiles)
      for (uint32_t s : stages) {
        set_config<uint32_t>(g, CUBLASLT_ALGO_CONFIG_TILE_ID, t);
        set_config<uint32_t>(g, CUBLASLT_ALGO_CONFIG_STAGES_ID, s);
        add(g);
      }
  }
  return out;
}

cublasStatus_t GemmBf16::launch(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* x,
                                const void* w, void* y, bool accumulate, cudaStream_t stream) {
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  return cublasLtMatmul(handle_.get(), p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &algo,
                        workspace_, workspace_bytes_, stream);
}

// Times the candidates on this call's operands (the weight exceeds the L2, so every launch
// streams it): a warm-up launch and 2 timed ones each, then the 4 fastest and the heuristic's
// pick again, best of 3 rounds of 4 launches.
void GemmBf16::select(Plan& p, const void* x, const void* w, void* y, int64_t n, int64_t m,
                      int64_t ldy, bool accumulate, cudaStream_t stream) {
  const std::vector<cublasLtMatmulAlgo_t> cands = candidates(p);
  if (cands.size() < 2) return;
  const size_t row_bytes = static_cast<size_t>(m) * (p.bf16_out ? 2 : 4),
               pitch = ldy * (p.bf16_out ? 2 : 4);
  void* saved = nullptr;  // the trials accumulate into y: keep the caller's
  if (accumulate) {
    TESSERA_CUDA_CHECK(cudaMalloc(&saved, row_bytes * n));
    TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(saved, row_bytes, y, pitch, row_bytes, n,
                                         cudaMemcpyDeviceToDevice, stream));
  }
  cudaEvent_t e0, e1;
  TESSERA_CUDA_CHECK(cudaEventCreate(&e0));
  TESSERA_CUDA_CHECK(cudaEventCreate(&e1));
  const float inf = std::numeric_limits<float>::infinity();
  auto time_ms = [&](const cublasLtMatmulAlgo_t& a, int launches) {
    TESSERA_CUDA_CHECK(cudaEventRecord(e0, stream));
    for (int i = 0; i < launches; ++i)
      if (launch(p, a, x, w, y, accumulate, stream) != CUBLAS_STATUS_SUCCESS) return inf;
    TESSERA_CUDA_CHECK(cudaEventRecord(e1, stream));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  };
  std::vector<std::pair<float, size_t>> screen;
  for (size_t i = 0; i < cands.size(); ++i)
    if (launch(p, cands[i], x, w, y, accumulate, stream) == CUBLAS_STATUS_SUCCESS)
      screen.push_back({time_ms(cands[i], 2), i});
  std::sort(screen.begin(), screen.end());
  std::vector<size_t> finalists = {0};
  for (size_t i = 0; i < screen.size() && finalists.size() < 5; ++i)
    if (screen[i].second != 0 && screen[i].first < inf) finalists.push_back(screen[i].second);
  std::vector<float> best(finalists.size(), inf);
  for (int round = 0; round < 3; ++round)
    for (size_t f = 0; f < finalists.size(); ++f)
      best[f] = std::min(best[f], time_ms(cands[finalists[f]], 4));
  size_t win = 0;
  for (size_t f = 1; f < finalists.size(); ++f)
    if (best[f] < best[win]) win = f;
  if (win != 0 && best[win] <= kTuneMinGain * best[0]) {
    p.algo = cands[finalists[win]];
    p.selected = true;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (saved) {
    TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(y, pitch, saved, row_bytes, row_bytes, n,
                                         cudaMemcpyDeviceToDevice, stream));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaFree(saved);
  }
}

namespace {
int64_t pow2_ceil(int64_t n) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}
}  // namespace

bool GemmBf16::prepare_rows(const __nv_bfloat16* w, int64_t n, int64_t m, int64_t k, bool accumulate,
                            bool bf16_out, cudaStream_t stream) {
  TESSERA_CHECK_ARG(n >= 1 && m >= 1 && k >= 1, "gemm_bf16: empty product");
  if (n > kTuneMaxRows || !selects_for(m, k)) return false;
  Plan& p = plan(n, m, k, m, accumulate, bf16_out);
  const size_t x_bytes = static_cast<size_t>(n * k) * 2, y_bytes = static_cast<size_t>(n * m) * (bf16_out ? 2 : 4);
  struct Scratch {  // freed on every path out
    void* p = nullptr;
    ~Scratch() { cudaFree(p); }
  } x, y;
  if (cudaMalloc(&x.p, x_bytes) != cudaSuccess || cudaMalloc(&y.p, y_bytes) != cudaSuccess) {
    cudaGetLastError();  // no memory to spare: keep the heuristic's pick
    return false;
  }
  TESSERA_CUDA_CHECK(cudaMemsetAsync(x.p, 0, x_bytes, stream));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(y.p, 0, y_bytes, stream));
  select(p, x.p, w, y.p, n, m, m, accumulate, stream);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  p.first_call_done = true;
  if (p.selected) prepared_[std::make_tuple(pow2_ceil(n), m, k, m, accumulate, bf16_out)] = p.algo;
  return p.selected;
}

void GemmBf16::first_call(Plan& p, const void* x, const void* w, void* y, int64_t n, int64_t m,
                          int64_t k, int64_t ldy, bool accumulate, cudaStream_t stream) {
  p.first_call_done = true;
  if (const auto it = prepared_.find(std::make_tuple(pow2_ceil(n), m, k, ldy, accumulate, p.bf16_out));
      it != prepared_.end()) {  // prepare_rows' winner for this row bucket, if it fits this plan
    cublasLtMatmulHeuristicResult_t r{};
    if (cublasLtMatmulAlgoCheck(handle_.get(), p.op, p.a, p.b, p.c, p.c, &it->second, &r) ==
            CUBLAS_STATUS_SUCCESS &&
        r.workspaceSize <= workspace_bytes_) {
      p.algo = it->second;
      p.selected = true;
      return;
    }
  }
  if (!tune_ || n > kTuneMaxRows || !selects_for(m, k)) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone)
    return;
  select(p, x, w, y, n, m, ldy, accumulate, stream);
}

void GemmBf16::run_any(const void* x, const void* w, void* y, int64_t n, int64_t m, int64_t k, int64_t ldy,
                       bool accumulate, bool bf16_out, cudaStream_t stream) {
  TESSERA_CHECK_ARG(n >= 1 && m >= 1 && k >= 1 && (ldy == 0 || ldy >= m),
                    "gemm_bf16: empty product or ldy < m");
  if (ldy == 0) ldy = m;
  Plan& p = plan(n, m, k, ldy, accumulate, bf16_out);
  if (!p.first_call_done) first_call(p, x, w, y, n, m, k, ldy, accumulate, stream);
  check(launch(p, p.algo, x, w, y, accumulate, stream), "matmul");
}

void GemmBf16::run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t n, int64_t m,
                   int64_t k, bool accumulate, cudaStream_t stream, int64_t ldy) {
  run_any(x, w, y, n, m, k, ldy, accumulate, /*bf16_out=*/false, stream);
}

void GemmBf16::run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t n,
                   int64_t m, int64_t k, cudaStream_t stream, int64_t ldy) {
  run_any(x, w, y, n, m, k, ldy, /*accumulate=*/false, /*bf16_out=*/true, stream);
}

GemmBf16::PlanInfo GemmBf16::plan_info(int64_t n, int64_t m, int64_t k, bool accumulate,
                                       bool bf16_out) const {
  const auto it = plans_.find(std::make_tuple(n, m, k, m, accumulate, bf16_out));
  if (it == plans_.end() || !it->second.first_call_done) return {};
  int32_t split = 1;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&it->second.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                       sizeof split, &written);
  return {std::max(1, static_cast<int>(split)), it->second.selected};
}

}  // namespace tessera::cuda
