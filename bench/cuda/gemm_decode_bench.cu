// cuBLASLt configurations for the bf16 GEMMs of a Llama-3-8B decode step (y = x W^T, row-major;
// the layouts GemmBf16 builds), as a fraction of the floor.
//
// Per shape (qkv f32 out, o accumulating into f32, gate|up bf16 out, down accumulating, head) and
// row count m, times: the heuristic's top pick (GemmBf16's default plan), GemmBf16 with its
// timed selection (TESSERA_GEMM_TUNE=1 in the engine), and every candidate of a search: the
// heuristic's top 32, split-K 2/3/4/6/8 x each supported reduction scheme and cluster-shape
// variants of its top 8, and a grid over
// every algorithm id x its reported tiles x stages x split-K 1/2/4; a candidate runs only if
// cublasLtMatmulAlgoCheck accepts it within the 32 MB workspace. Each candidate is screened
// (one or two replays) within a time budget per point (the grid, shuffled, is cut first; the
// table says how many were timed), the best 6 are timed again like the references.
//
// Ceilings measured at start (backend/cuda/ceilings): copy bandwidth and cuBLASLt's 8192^3 bf16
// rate. Floor = max(bytes / bandwidth, 2 m n k / rate), bytes = weights + x + y (read and
// written when accumulating). Timing: a CUDA graph of back-to-back launches rotating over weight
// copies totalling >= 4x the L2 (every launch streams its weight from HBM), median of the graph's
// replays after a warm-up, per launch. The best candidate's output is checked against the
// heuristic's (max |diff| / max |ref|).
//
//   gemm_decode_bench [--budget-ms 1500] [--m 16,32,...] [--shapes qkv,o,gate_up,down,head] [-v]
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/ceilings.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_bf16.h"
#include "bench_timing.cuh"
#include "kernels/cuda/fill_random.h"

using namespace tessera;

namespace {

constexpr size_t kWorkspace = size_t{32} << 20;  // GemmBf16's
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Shape {
  const char* name;
  int64_t n, k;  // output features, input features
  bool accumulate, bf16_out;
};

// The operation and layouts of GemmBf16 (column-major view: C (n x m) = W^T-as-A * x-as-B).
struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cudaDataType_t ctype;
  Problem(int64_t m, const Shape& sh) : ctype(sh.bf16_out ? CUDA_R_16BF : CUDA_R_32F) {
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, sh.k, sh.n, sh.k);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, sh.k, m, sh.k);
    cublasLtMatrixLayoutCreate(&c, ctype, sh.n, m, sh.n);
  }
  ~Problem() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(op);
  }
};

template <class T>
T config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &w);
  return v;
}
template <class T>
void set_config(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &v, sizeof v);
}
template <class T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS)
    return {};
  std::vector<T> v(bytes / sizeof(T));
  if (!v.empty()) cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes);
  return v;
}
template <class T>
T cap(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t w = 0;
  cublasLtMatmulAlgoCapGetAttribute(&a, attr, &v, sizeof v, &w);
  return v;
}

// "algo id / tile id / stages id / split-K x reduction scheme / cluster shape id / swizzle /
// custom option" (ids of cublasLt.h's enums).
std::string describe(const cublasLtMatmulAlgo_t& a) {
  char buf[128];
  const int split = config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  std::snprintf(
      buf, sizeof buf, "a%d t%u s%u k%d%s c%u w%u o%u", config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
      config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
      config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), split,
      split > 1 ? ("r" + std::to_string(config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)))
                      .c_str()
                : "",
      static_cast<unsigned>(config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)),
      config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
      config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  return buf;
}

struct Cand {
  cublasLtMatmulAlgo_t algo;
  float waves = 0;
  std::string desc;
  float screen_us = kInf, us = kInf;
};

class Search {
 public:
  Search(cublasLtHandle_t h, const Problem& p) : h_(h), p_(p) {}
  // Adds `a` if AlgoCheck accepts it within the workspace and it is new.
  bool add(const cublasLtMatmulAlgo_t& a) {
    ++checks_;
    cublasLtMatmulHeuristicResult_t r{};
    if (cublasLtMatmulAlgoCheck(h_, p_.op, p_.a, p_.b, p_.c, p_.c, &a, &r) !=
            CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > kWorkspace)
      return false;
    std::string d = describe(a);
    if (!seen_.insert(d).second) return false;
    cands_.push_back({a, r.wavesCount, std::move(d)});
    return true;
  }
  std::vector<Cand>& cands() { return cands_; }
  long checks() const { return checks_; }

 private:
  cublasLtHandle_t h_;
  const Problem& p_;
  std::set<std::string> seen_;
  std::vector<Cand> cands_;
  long checks_ = 0;
};

const int kSplits[] = {2, 3, 4, 6, 8};
const uint32_t kSchemes[] = {CUBLASLT_REDUCTION_SCHEME_INPLACE,
                             CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                             CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE};
const uint16_t kClusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                              CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                              CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1};

void add_split_variants(Search& s, cublasLtMatmulAlgo_t a, const int* splits, int n_splits) {
  if (cap<int32_t>(a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) return;
  const uint32_t mask = cap<uint32_t>(a, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  for (int i = 0; i < n_splits; ++i)
    for (uint32_t r : kSchemes) {
      if (!(mask & r)) continue;
      set_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits[i]);
      set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, r);
      s.add(a);
    }
}

// Mean time per launch (us) of a graph of `launches` calls of fn(i): median of `reps` replays
// after one warm-up; +inf if a call fails.
template <class F>
float graph_us(F&& fn, int launches, int reps, cudaStream_t s) {
  return 1e3f * bench::graph_median_ms(fn, launches, s, 1, reps);
}

std::vector<float> to_host_f32(const void* y, int64_t count, bool bf16) {
  std::vector<float> out(count);
  if (bf16) {
    std::vector<uint16_t> h(count);
    TESSERA_CUDA_CHECK(cudaMemcpy(h.data(), y, count * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; ++i) {
      const uint32_t bits = uint32_t{h[i]} << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  } else {
    TESSERA_CUDA_CHECK(cudaMemcpy(out.data(), y, count * 4, cudaMemcpyDeviceToHost));
  }
  return out;
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  double budget_ms = 1500;
  std::vector<int64_t> ms = {16, 32, 64, 128, 256, 512};
  std::string shape_filter = "qkv,o,gate_up,down,head";
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--budget-ms" && i + 1 < argc)
      budget_ms = std::stod(argv[++i]);
    else if (a == "--m" && i + 1 < argc)
      ms = parse_list(argv[++i]);
    else if (a == "--shapes" && i + 1 < argc)
      shape_filter = argv[++i];
    else if (a == "-v")
      verbose = true;
    else {
      std::fprintf(stderr,
                   "usage: gemm_decode_bench [--budget-ms MS] [--m 16,32] [--shapes "
                   "qkv,o,gate_up,down,head] [-v]\n");
      return 2;
    }
  }
  const double bw = cuda::measure_copy_bandwidth_gbs() * 1e9;
  const double rate = cuda::measure_bf16_gemm_tflops() * 1e12;
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
  std::printf("ceilings: copy %.0f GB/s, bf16 GEMM (cuBLASLt 8192^3) %.0f TFLOP/s; L2 %d MB\n",
              bw / 1e9, rate / 1e12, l2 >> 20);

  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasLtHandle_t h;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  void* ws;
  TESSERA_CUDA_CHECK(cudaMalloc(&ws, kWorkspace));
  cuda::GemmBf16 gemm(kWorkspace, 0,
                      /*select=*/true);  // its timed selection (opt-in in the engine)

  const Shape shapes[] = {{"qkv", 6144, 4096, false, false},
                          {"o", 4096, 4096, true, false},
                          {"gate_up", 28672, 4096, false, true},
                          {"down", 4096, 14336, true, false},
                          {"head", 128256, 4096, false, false}};
  const int64_t mmax = *std::max_element(ms.begin(), ms.end());
  std::printf(
      "\n| shape | m | floor us | heuristic us (%% floor) | GemmBf16 us (%% floor) | best us (%% "
      "floor) | "
      "best vs heuristic | best config (waves) | heuristic config (waves) | best split of "
      "heuristic | "
      "check | candidates |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (const Shape& sh : shapes) {
    if (("," + shape_filter + ",").find(std::string(",") + sh.name + ",") == std::string::npos)
      continue;
    const size_t wbytes = static_cast<size_t>(sh.n) * sh.k * 2;
    const int copies =
        static_cast<int>(std::max<size_t>(2, (size_t{4} * l2 + wbytes - 1) / wbytes));
    std::vector<uint16_t*> w(copies);
    for (int c = 0; c < copies; ++c) {
      TESSERA_CUDA_CHECK(cudaMalloc(&w[c], wbytes));
      cuda::fill_uniform_bf16(w[c], sh.n * sh.k, -0.02f, 0.02f, 100 + c, s);
    }
    const size_t ybytes = static_cast<size_t>(mmax) * sh.n * (sh.bf16_out ? 2 : 4);
    uint16_t* x;
    void *y, *y0, *yref;
    TESSERA_CUDA_CHECK(cudaMalloc(&x, mmax * sh.k * 2));
    TESSERA_CUDA_CHECK(cudaMalloc(&y, ybytes));
    TESSERA_CUDA_CHECK(cudaMalloc(&y0, ybytes));
    TESSERA_CUDA_CHECK(cudaMalloc(&yref, ybytes));
    cuda::fill_uniform_bf16(x, mmax * sh.k, -1.f, 1.f, 3, s);
    if (sh.bf16_out)
      cuda::fill_uniform_bf16(static_cast<uint16_t*>(y0), mmax * sh.n, -1.f, 1.f, 5, s);
    else
      cuda::fill_uniform_f32(static_cast<float*>(y0), mmax * sh.n, -1.f, 1.f, 5, s);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(y, y0, ybytes, cudaMemcpyDeviceToDevice, s));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));

    for (int64_t m : ms) {
      const auto t0 = std::chrono::steady_clock::now();
      Problem p(m, sh);
      const float alpha = 1.f, beta = sh.accumulate ? 1.f : 0.f;
      auto matmul = [&](const cublasLtMatmulAlgo_t& a, const void* wp, void* yp, cudaStream_t st) {
        return cublasLtMatmul(h, p.op, &alpha, wp, p.a, x, p.b, &beta, yp, p.c, yp, p.c, &a, ws,
                              kWorkspace, st) == CUBLAS_STATUS_SUCCESS;
      };
      const int screen_launches = std::max(4, copies), launches = std::max(8, copies);
      auto time_algo = [&](const cublasLtMatmulAlgo_t& a, int nl, int reps) {
        // One eager call first: kernels load outside the capture, and a refused config is skipped.
        if (!matmul(a, w[0], y, s)) return kInf;
        return graph_us([&](int i, cudaStream_t st) { return matmul(a, w[i % copies], y, st); }, nl,
                        reps, s);
      };

      // Candidates: the heuristic's list first (its top pick is the reference).
      Search search(h, p);
      cublasLtMatmulPreference_t pref;
      cublasLtMatmulPreferenceCreate(&pref);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &kWorkspace, sizeof kWorkspace);
      cublasLtMatmulHeuristicResult_t heur[32];
      int found = 0;
      cublasLtMatmulAlgoGetHeuristic(h, p.op, p.a, p.b, p.c, p.c, pref, 32, heur, &found);
      cublasLtMatmulPreferenceDestroy(pref);
      if (found == 0) {
        std::printf("| %s | %lld | no heuristic result |\n", sh.name, static_cast<long long>(m));
        continue;
      }
      const cublasLtMatmulAlgo_t top = heur[0].algo;
      const std::string top_desc = describe(top);
      const float top_waves = heur[0].wavesCount;
      for (int i = 0; i < found; ++i) search.add(heur[i].algo);
      const size_t n_heur = search.cands().size();
      // Split-K variants of the top pick (all splits), then of the next 7; cluster variants.
      std::vector<std::string> split_of_top;
      {
        cublasLtMatmulAlgo_t a = top;
        const size_t before = search.cands().size();
        add_split_variants(search, a, kSplits, 5);
        for (size_t i = before; i < search.cands().size(); ++i)
          split_of_top.push_back(search.cands()[i].desc);
      }
      for (int i = 0; i < std::min(found, 8); ++i) {
        add_split_variants(search, heur[i].algo, kSplits, 5);
        for (uint16_t c : kClusters) {
          cublasLtMatmulAlgo_t a = heur[i].algo;
          set_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c);
          search.add(a);
        }
      }
      const size_t n_variants = search.cands().size();
      // Grid: every algorithm id x tiles x stages, split-K 1, 2, 4 (first supported scheme).
      int ids[128];
      int n_ids = 0;
      cublasLtMatmulAlgoGetIds(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, p.ctype,
                               p.ctype, 128, ids, &n_ids);
      std::vector<Cand> grid;
      {
        Search g(h, p);
        // AlgoCheck costs host time: the grid stops growing after a third of the budget.
        auto grid_over = [&] {
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count() > budget_ms / 3;
        };
        for (int i = 0; i < n_ids && !grid_over(); ++i) {
          cublasLtMatmulAlgo_t a;
          if (cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                                     p.ctype, p.ctype, ids[i], &a) != CUBLAS_STATUS_SUCCESS)
            continue;
          std::vector<uint32_t> tiles = cap_list<uint32_t>(a, CUBLASLT_ALGO_CAP_TILE_IDS);
          std::vector<uint32_t> stages = cap_list<uint32_t>(a, CUBLASLT_ALGO_CAP_STAGES_IDS);
          if (tiles.empty()) tiles = {CUBLASLT_MATMUL_TILE_UNDEFINED};
          if (stages.empty()) stages = {CUBLASLT_MATMUL_STAGES_UNDEFINED};
          for (uint32_t t : tiles)
            for (uint32_t st : stages) {
              if (grid_over()) break;
              set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID, t);
              set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, st);
              set_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
              set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                   CUBLASLT_REDUCTION_SCHEME_NONE);
              g.add(a);
              const int more[] = {2, 4};
              if (cap<int32_t>(a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) continue;
              const uint32_t mask = cap<uint32_t>(a, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
              for (uint32_t r : kSchemes)
                if (mask & r) {
                  for (int sp : more) {
                    cublasLtMatmulAlgo_t b = a;
                    set_config<int32_t>(b, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, sp);
                    set_config<uint32_t>(b, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, r);
                    g.add(b);
                  }
                  break;
                }
            }
        }
        grid = std::move(g.cands());
        // A fixed shuffle, so that a budget cut does not drop whole algorithms.
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (size_t i = grid.size(); i > 1; --i) {
          r = r * 6364136223846793005ull + 1442695040888963407ull;
          std::swap(grid[i - 1], grid[(r >> 33) % i]);
        }
        for (Cand& c : grid) search.add(c.algo);
      }
      std::vector<Cand>& cands = search.cands();
      const double enum_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

      // Screen in order (heuristic, variants, grid) within the budget; the slowest configs are
      // dropped after a first replay.
      const auto t1 = std::chrono::steady_clock::now();
      size_t screened = 0;
      float best_screen = kInf;
      for (Cand& c : cands) {
        if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1)
                    .count() > budget_ms &&
            screened >= n_variants)
          break;
        c.screen_us = time_algo(c.algo, screen_launches, 1);
        if (c.screen_us < 3 * best_screen)
          c.screen_us = std::min(c.screen_us, time_algo(c.algo, screen_launches, 1));
        best_screen = std::min(best_screen, c.screen_us);
        ++screened;
      }
      std::vector<Cand*> order;
      for (Cand& c : cands)
        if (c.screen_us < kInf) order.push_back(&c);
      std::sort(order.begin(), order.end(),
                [](const Cand* a, const Cand* b) { return a->screen_us < b->screen_us; });
      if (order.size() > 6) order.resize(6);
      for (Cand* c : order) c->us = time_algo(c->algo, launches, 9);
      std::sort(order.begin(), order.end(),
                [](const Cand* a, const Cand* b) { return a->us < b->us; });

      const float heur_us = time_algo(top, launches, 9);
      auto gemm_run = [&](const void* wp, cudaStream_t st) {
        const auto* wb = static_cast<const __nv_bfloat16*>(wp);
        const auto* xp = reinterpret_cast<const __nv_bfloat16*>(x);
        if (sh.bf16_out)
          gemm.run(xp, wb, static_cast<__nv_bfloat16*>(y), m, sh.n, sh.k, st);
        else
          gemm.run(xp, wb, static_cast<float*>(y), m, sh.n, sh.k, sh.accumulate, st);
      };
      gemm_run(w[0], s);  // the plan is built eagerly, as in the engine
      int gi = 0;
      const float gemm_us = graph_us(
          [&](int, cudaStream_t st) {
            gemm_run(w[gi++ % copies], st);
            return true;
          },
          launches, 9, s);
      float split_best = kInf;
      std::string split_desc = "-";
      for (const Cand& c : cands)
        if (std::find(split_of_top.begin(), split_of_top.end(), c.desc) != split_of_top.end() &&
            c.screen_us < split_best) {
          split_best = c.screen_us;
          split_desc = c.desc;
        }

      // Check: the best candidate vs the heuristic's pick, from the same y0.
      double rel = -1;
      const Cand* best = order.empty() ? nullptr : order[0];
      if (best) {
        const size_t yb = static_cast<size_t>(m) * sh.n * (sh.bf16_out ? 2 : 4);
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(yref, y0, yb, cudaMemcpyDeviceToDevice, s));
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(y, y0, yb, cudaMemcpyDeviceToDevice, s));
        const bool ok = matmul(top, w[0], yref, s) && matmul(best->algo, w[0], y, s);
        TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
        if (ok) {
          const auto a = to_host_f32(yref, m * sh.n, sh.bf16_out),
                     b = to_host_f32(y, m * sh.n, sh.bf16_out);
          double mx = 0, md = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            mx = std::max(mx, std::fabs(static_cast<double>(a[i])));
            md = std::max(md, std::fabs(static_cast<double>(a[i]) - b[i]));
          }
          rel = md / std::max(mx, 1e-30);
        }
      }

      const double bytes = static_cast<double>(wbytes) + m * sh.k * 2.0 +
                           m * sh.n * (sh.bf16_out ? 2.0 : 4.0) * (sh.accumulate ? 2 : 1);
      const double floor_us = std::max(bytes / bw, 2.0 * m * sh.n * sh.k / rate) * 1e6;
      auto pct = [&](float us) { return 100.0 * floor_us / us; };
      const float best_us = best ? std::min(best->us, heur_us) : heur_us;
      std::printf(
          "| %s %lldx%lld%s | %lld | %.1f | %.1f (%.0f%%) | %.1f (%.0f%%) | %.1f (%.0f%%) | %.2fx "
          "| %s (%.2f) | "
          "%s (%.2f) | %s %.1f | %.1e | %zu heur + %zu var + %zu grid, %zu timed, %ld checks, %.0f "
          "ms enum |\n",
          sh.name, static_cast<long long>(sh.n), static_cast<long long>(sh.k),
          sh.accumulate ? " +=" : (sh.bf16_out ? " bf16" : ""), static_cast<long long>(m), floor_us,
          heur_us, pct(heur_us), gemm_us, pct(gemm_us), best_us, pct(best_us), heur_us / best_us,
          best ? best->desc.c_str() : "-", best ? best->waves : 0.f, top_desc.c_str(), top_waves,
          split_desc.c_str(), split_best, rel, n_heur, n_variants - n_heur,
          cands.size() - n_variants, screened, search.checks(), enum_ms);
      if (verbose) {
        for (const Cand* c : order)
          std::printf("    %-40s waves %.2f screen %.1f us, timed %.1f us (%.0f%%)\n",
                      c->desc.c_str(), c->waves, c->screen_us, c->us, pct(c->us));
        for (const Cand& c : cands)
          if (std::find(split_of_top.begin(), split_of_top.end(), c.desc) != split_of_top.end())
            std::printf("    split of top: %-40s waves %.2f screen %.1f us\n", c.desc.c_str(),
                        c.waves, c.screen_us);
      }
      std::fflush(stdout);
    }
    for (auto* p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(y);
    cudaFree(y0);
    cudaFree(yref);
  }
  cudaFree(ws);
  cublasLtDestroy(h);
  return 0;
}
