// Integer-dot projections (kernels/cuda/mmq.h) on Llama-3-8B shapes, as a fraction of the floor.
//
// Ceilings measured at start on this device: copy bandwidth (2 GiB device-to-device copy, bytes
// read + written / time) and the int8 mma.sync rate (a register-only kernel of independent
// m16n8k32 chains). Floor of one call = max(weight bytes (GGUF sizes) + activation bytes /
// copy bandwidth, 2 n k m / int8 rate). Compared with dequantized bf16 weights through cuBLASLt
// (the engine's path for float weights). Each point: CUDA graph of 20 back-to-back launches
// rotating over weight copies totalling >= 4x the L2, median of 15 replays after warm-up,
// random data (dummy quant blocks, uniform activations).
//
//   mmq_bench [--k-split | --dequant-gemm] [--rows 16,128] [--shapes 'qkv,gate|up'] [q4_0 q8_0 ...]
//   (default types q4_0 q8_0 q4_k; --rows / --shapes narrow the --dequant-gemm table, e.g. for ncu)
//
// --dequant-gemm: the dequantizing tensor-core GEMM (dequant_gemm.h) at 16..512 rows (--rows: up
// to 4096) against the
// engine's other path for those rows (each weight dequantized to a bf16 copy, then cuBLASLt) and
// against cuBLASLt on bf16 weights; floor = max(bytes / copy, 2 n k m / cuBLASLt's 8192^3 rate).
//
// --k-split: instead of the table, the GEMV at 1, 2 and 4 rows with 1, 2 and 4 warps per row
// group (mmq_gemv's k_split) and its default, to tune the default; at one row also the GEMV that
// adds to the residual and forms the next RMSNorm's quantized input (mmq_gemv_residual_norm, the
// batch-1 o / down projection) and its % of the floor.
//
// --few-rows: 2..8 rows: the few-row tensor-core GEMV (mmq_tc_gemv) at its default k split and
// at each forced one, the DP4A GEMV (<= 8 rows) and dequant_gemm on bf16 rows (the engine's path
// above 8 rows). --rows and --shapes narrow it too.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/ceilings.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_bf16.h"
#include "bench_timing.cuh"
#include "kernels/cuda/dequant_gemm.h"
#include "kernels/cuda/dequant_packed.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/mmq.h"

using namespace tessera;

namespace {

// The Llama-3-8B projections of a layer.
struct Shape { const char* name; int64_t n, k; };
constexpr Shape kShapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate|up", 28672, 4096}, {"down", 4096, 14336}};

__global__ void int8_mma_peak(int* out, int iters) {
  int c[8][4] = {};
  uint32_t a0 = threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 * 11, b1 = a0 * 13;
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+r"(c[j][0]), "+r"(c[j][1]), "+r"(c[j][2]), "+r"(c[j][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  int s = 0;
  for (int j = 0; j < 8; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (s == 0x7fffffff) out[0] = s;
}

// Median time per launch (ms) of `launches` calls of fn(stream) replayed as one graph.
template <class F>
float time_ms(F&& fn, cudaStream_t s, int launches) {
  return bench::graph_median_ms(
      [&](int, cudaStream_t st) {
        fn(st);
        return true;
      },
      launches, s, 3, 15);
}

// Random repacked weights of one shape, in enough copies (>= 256 MB) that rotating over them
// streams from HBM, not the L2.
std::vector<uint8_t*> random_weight_copies(DType t, int64_t n, int64_t k, cudaStream_t s) {
  const size_t wbytes = cuda::gemv_quant_layout(t, n, k).bytes;
  std::vector<uint8_t*> w(std::max<size_t>(1, (size_t{256} << 20) / wbytes + 1));
  for (size_t c = 0; c < w.size(); ++c) {
    TESSERA_CUDA_CHECK(cudaMalloc(&w[c], wbytes));
    cuda::fill_random_quant(t, w[c], n, k, cuda::dummy_quant_scale(t, k), 100 + c, s);
  }
  return w;
}

// Whether --shapes (",name,name,"; empty: every shape) names sh.
bool selected(const std::string& shapes, const Shape& sh) {
  return shapes.empty() || shapes.find("," + std::string(sh.name) + ",") != std::string::npos;
}

// Bytes one integer-dot call must move: GGUF weights, int8 rows with their scales, f32 outputs.
double call_bytes(DType t, const Shape& sh, int64_t m) {
  return static_cast<double>(sh.n) * *dtype_row_bytes(t, sh.k) + m * sh.k * 1.25 + m * sh.n * 4.0;
}

// mmax uniform activation rows of a shape, quantized for weights of type t (qx, meta), and an f32
// output y of mmax rows; device memory, freed with the object.
struct QuantRows {
  float *x = nullptr, *y = nullptr;
  int8_t* qx = nullptr;
  cuda::MmqActMeta* meta = nullptr;
  QuantRows(DType t, const Shape& sh, int64_t mmax, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMalloc(&x, mmax * sh.k * 4));
    TESSERA_CUDA_CHECK(cudaMalloc(&y, mmax * sh.n * 4));
    TESSERA_CUDA_CHECK(cudaMalloc(&qx, mmax * sh.k));
    TESSERA_CUDA_CHECK(cudaMalloc(&meta, mmax * sh.k / 32 * 8));
    cuda::fill_uniform_f32(x, mmax * sh.k, -1.f, 1.f, 3, s);
    cuda::mmq_quantize_rows(t, x, sh.k, mmax, sh.k, qx, meta, s);
  }
  ~QuantRows() {
    cudaFree(x);
    cudaFree(y);
    cudaFree(qx);
    cudaFree(meta);
  }
  QuantRows(const QuantRows&) = delete;
  QuantRows& operator=(const QuantRows&) = delete;
};

std::string us_text(float us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", us);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<DType> types;
  bool k_split_table = false, dequant_table = false, few_rows_table = false, rows_given = false;
  std::vector<int64_t> dg_rows = {16, 32, 64, 128, 256, 512};
  std::string dg_shapes;  // comma-separated names; empty: all
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--rows" && i + 1 < argc) {
      rows_given = true;
      dg_rows.clear();
      bool bad = false;
      for (const char* p = argv[++i]; *p && !bad;) {
        char* end;
        dg_rows.push_back(std::strtoll(p, &end, 10));
        bad = end == p || dg_rows.back() <= 0 || dg_rows.back() > 4096;
        p = *end == ',' ? end + 1 : end;
      }
      if (bad || dg_rows.empty()) {
        std::fprintf(stderr, "--rows: a comma-separated list of 1..4096\n");
        return 2;
      }
      continue;
    }
    if (std::string(argv[i]) == "--shapes" && i + 1 < argc) {
      dg_shapes = "," + std::string(argv[++i]) + ",";
      for (size_t a = 1, b; (b = dg_shapes.find(',', a)) != std::string::npos; a = b + 1) {
        const std::string name = dg_shapes.substr(a, b - a);
        if (std::none_of(std::begin(kShapes), std::end(kShapes), [&](const Shape& sh) { return name == sh.name; })) {
          std::fprintf(stderr, "--shapes: comma-separated names of qkv, o, gate|up, down\n");
          return 2;
        }
      }
      continue;
    }
    if (std::string(argv[i]) == "--k-split") {
      k_split_table = true;
      continue;
    }
    if (std::string(argv[i]) == "--few-rows") {
      few_rows_table = true;
      continue;
    }
    if (std::string(argv[i]) == "--dequant-gemm") {
      dequant_table = true;
      continue;
    }
    auto t = dtype_from_name(argv[i]);
    if (!t || !cuda::mmq_supported(*t)) {
      std::fprintf(stderr, "unknown type %s\n", argv[i]);
      return 2;
    }
    types.push_back(*t);
  }
  if (types.empty()) types = {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K};
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Ceilings.
  const double bw = cuda::measure_copy_bandwidth_gbs() * 1e9;
  int* dummy;
  TESSERA_CUDA_CHECK(cudaMalloc(&dummy, 4));
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int iters = 4096;
  const float mma_ms = time_ms([&](cudaStream_t st) { int8_mma_peak<<<sms * 8, 128, 0, st>>>(dummy, iters); }, s, 2);
  const double int8_rate = 2.0 * 16 * 8 * 32 * 8.0 * iters * (sms * 8 * 4) / (mma_ms * 1e-3);
  std::printf("ceilings: copy %.0f GB/s, int8 mma.sync %.0f TOPS\n", bw / 1e9, int8_rate / 1e12);
  if (dequant_table) {
    const double bf16_rate = cuda::measure_bf16_gemm_tflops() * 1e12;
    std::printf("cuBLASLt bf16 8192^3: %.0f TFLOP/s\n", bf16_rate / 1e12);
    std::printf("| type | shape | rows | floor us | dequant_gemm us | %% of floor | bf16 copy + cuBLASLt us | "
                "speed-up | cuBLASLt on bf16 weights us |\n|---|---|---|---|---|---|---|---|---|\n");
    cuda::GemmBf16 gemm;
    for (DType t : types)
      for (const Shape& sh : kShapes) {
        if (!selected(dg_shapes, sh)) continue;
        const std::vector<uint8_t*> w = random_weight_copies(t, sh.n, sh.k, s);
        const int copies = static_cast<int>(w.size());
        const int64_t mmax = *std::max_element(dg_rows.begin(), dg_rows.end());
        __nv_bfloat16 *xb, *wb;
        float* y;
        void* ws;
        const size_t ws_bytes = 64 << 20;
        TESSERA_CUDA_CHECK(cudaMalloc(&xb, mmax * sh.k * 2));
        TESSERA_CUDA_CHECK(cudaMalloc(&wb, sh.n * sh.k * 2));
        TESSERA_CUDA_CHECK(cudaMalloc(&y, mmax * sh.n * 4));
        TESSERA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
        cuda::fill_uniform_bf16(reinterpret_cast<uint16_t*>(xb), mmax * sh.k, -1.f, 1.f, 4, s);
        for (int64_t m : dg_rows) {
          int it = 0;
          const float us = 1e3f * time_ms([&](cudaStream_t st) {
            cuda::dequant_gemm_bf16(t, w[it++ % copies], sh.n, sh.k, xb, m, y, sh.n, false, ws, ws_bytes, st);
          }, s, 20);
          it = 0;
          const float slice_us = 1e3f * time_ms([&](cudaStream_t st) {
            cuda::dequantize_packed_bf16(t, w[it++ % copies], sh.n, sh.k, 0, sh.n, wb, st);
            gemm.run(xb, wb, y, m, sh.n, sh.k, false, st);
          }, s, 10);
          const float bf_us = 1e3f * time_ms([&](cudaStream_t st) { gemm.run(xb, wb, y, m, sh.n, sh.k, false, st); }, s, 20);
          const double bytes = static_cast<double>(sh.n) * *dtype_row_bytes(t, sh.k) + m * sh.k * 2.0 + m * sh.n * 4.0;
          const double floor_us = std::max(bytes / bw, 2.0 * sh.n * sh.k * m / bf16_rate) * 1e6;
          std::printf("| %s | %s %lldx%lld | %lld | %.2f | %.2f | %.1f%% | %.2f | %.2fx | %.2f |\n",
                      std::string(dtype_name(t)).c_str(),
                      sh.name, static_cast<long long>(sh.n), static_cast<long long>(sh.k), static_cast<long long>(m),
                      floor_us, us, 100.0 * floor_us / us, slice_us, slice_us / us, bf_us);
          std::fflush(stdout);
        }
        for (auto* p : w) cudaFree(p);
        cudaFree(xb);
        cudaFree(wb);
        cudaFree(y);
        cudaFree(ws);
      }
    return 0;
  }

  if (few_rows_table) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // rows survive a failure later in the table
    std::printf("| type | shape | rows | floor us | tc us | %% of floor | tc k split 1 / 2 / 4 / 8 us | dp4a GEMV us | "
                "dequant_gemm us |\n|---|---|---|---|---|---|---|---|---|\n");
    std::vector<int64_t> few_rows;
    for (int64_t m : dg_rows)
      if (rows_given && m >= 2 && m <= cuda::kMmqTcMaxStagedRows) few_rows.push_back(m);
    if (few_rows.empty()) few_rows = {2, 4, 8};
    for (DType t : types)
      for (const Shape& sh : kShapes) {
        if (!selected(dg_shapes, sh)) continue;
        const std::vector<uint8_t*> w = random_weight_copies(t, sh.n, sh.k, s);
        const int copies = static_cast<int>(w.size());
        const int64_t mmax = cuda::kMmqTcMaxStagedRows;
        const QuantRows rows(t, sh, mmax, s);
        float* y = rows.y;
        __nv_bfloat16* xb;  // dequant_gemm's bf16 rows
        TESSERA_CUDA_CHECK(cudaMalloc(&xb, mmax * sh.k * 2));
        cuda::fill_uniform_bf16(reinterpret_cast<uint16_t*>(xb), mmax * sh.k, -1.f, 1.f, 4, s);
        size_t ws_bytes = 0;
        for (int64_t m : few_rows)
          ws_bytes = std::max(ws_bytes, cuda::dequant_gemm_workspace_bytes(t, sh.n, sh.k, m));
        void* ws = nullptr;
        if (ws_bytes) TESSERA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
        TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
        for (int64_t m : few_rows) {
          auto tc = [&](int ks) {
            int it = 0;
            return 1e3f * time_ms([&](cudaStream_t st) {
              cuda::mmq_tc_gemv(t, w[it++ % copies], sh.n, sh.k, rows.qx, rows.meta, m, y, sh.n, false, st, ks);
            }, s, 20);
          };
          const float def = tc(0);
          std::string per_ks;
          for (int ks : {1, 2, 4, 8}) per_ks += (ks > 1 ? " / " : "") + us_text(tc(ks));
          std::string dp4a = "-", dg = "-";
          if (m <= cuda::kMmqGemvMaxRows) {
            int it = 0;
            dp4a = us_text(1e3f * time_ms([&](cudaStream_t st) {
              cuda::mmq_gemv(t, w[it++ % copies], sh.n, sh.k, rows.qx, rows.meta, m, y, sh.n, false, st);
            }, s, 20));
          }
          if (cuda::dequant_gemm_supported(t, sh.k) && cuda::dequant_gemm_workspace_bytes(t, sh.n, sh.k, m) <= ws_bytes) {
            int it = 0;
            dg = us_text(1e3f * time_ms([&](cudaStream_t st) {
              cuda::dequant_gemm_bf16(t, w[it++ % copies], sh.n, sh.k, xb, m, y, sh.n, false, ws, ws_bytes, st);
            }, s, 20));
          }
          const double floor_us = call_bytes(t, sh, m) / bw * 1e6;
          std::printf("| %s | %s %lldx%lld | %lld | %.2f | %.2f | %.1f%% | %s | %s | %s |\n", std::string(dtype_name(t)).c_str(), sh.name,
                      static_cast<long long>(sh.n), static_cast<long long>(sh.k), static_cast<long long>(m), floor_us,
                      def, 100.0 * floor_us / def, per_ks.c_str(), dp4a.c_str(), dg.c_str());
          std::fflush(stdout);
        }
        for (auto* p : w) cudaFree(p);
        cudaFree(xb);
        if (ws) cudaFree(ws);
      }
    return 0;
  }

  const int64_t ms[] = {1, 4, 8, 16, 32, 64, 128, 256, 512, 2048};
  cuda::GemmBf16 gemm;
  std::map<std::pair<int64_t, int64_t>, float> bf16_us;  // (n * k + k, rows): type-independent
  if (k_split_table) {
    std::printf("| type | shape | rows | floor us | k split 1 us | 2 us | 4 us | default us | %% of floor "
                "| + next norm us | %% of floor |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  } else {
    std::printf("| type | shape | rows | MB | floor us | mmq us | %% of floor | TOPS | bf16 cuBLASLt us | speed-up |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (DType t : types)
    for (const Shape& sh : kShapes) {
      const std::vector<uint8_t*> w = random_weight_copies(t, sh.n, sh.k, s);
      const int copies = static_cast<int>(w.size());
      const int64_t mmax = 2048;
      const QuantRows rows(t, sh, mmax, s);
      const int8_t* qx = rows.qx;
      const cuda::MmqActMeta* meta = rows.meta;
      float* y = rows.y;
      TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
      const std::string type(dtype_name(t));
      const auto name = [&] { return std::string(sh.name) + " " + std::to_string(sh.n) + "x" + std::to_string(sh.k); };
      const auto bytes = [&](int64_t m) { return call_bytes(t, sh, m); };
      if (k_split_table) {
        for (int64_t m : {1, 2, 4}) {
          float us[4];
          for (int ks : {1, 2, 4, 0}) {
            int it = 0;
            us[ks == 0 ? 3 : ks / 2] = 1e3f * time_ms([&](cudaStream_t st) {
              cuda::mmq_gemv(t, w[it++ % copies], sh.n, sh.k, qx, meta, m, y, sh.n, false, st, ks);
            }, s, 20);
          }
          const double floor_us = bytes(m) / bw * 1e6;
          std::string norm_cols = "- | -";
          if (m == 1) {  // x read back, w read, x * w quantized and the block sums: 9.5 bytes per output row more
            float *x, *nw;
            int8_t* q2;
            cuda::MmqActMeta* m2;
            double* ss;
            TESSERA_CUDA_CHECK(cudaMalloc(&x, sh.n * 4));
            TESSERA_CUDA_CHECK(cudaMalloc(&nw, sh.n * 4));
            TESSERA_CUDA_CHECK(cudaMalloc(&q2, sh.n));
            TESSERA_CUDA_CHECK(cudaMalloc(&m2, sh.n / 32 * sizeof(cuda::MmqActMeta)));
            TESSERA_CUDA_CHECK(cudaMalloc(&ss, sh.n / 32 * sizeof(double)));
            cuda::fill_uniform_f32(x, sh.n, -1.f, 1.f, 5, s);
            cuda::fill_uniform_f32(nw, sh.n, 0.9f, 1.1f, 6, s);
            const cuda::MmqResidualNorm out{x, nw, q2, m2, ss};
            int it = 0;
            const float nus = 1e3f * time_ms([&](cudaStream_t st) {
              cuda::mmq_gemv_residual_norm(t, w[it++ % copies], sh.n, sh.k, qx, meta, out, st);
            }, s, 20);
            const double nfloor = (bytes(1) + 9.5 * sh.n) / bw * 1e6;
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.2f | %.1f%%", nus, 100.0 * nfloor / nus);
            norm_cols = buf;
            for (void* p : {static_cast<void*>(x), static_cast<void*>(nw), static_cast<void*>(q2),
                            static_cast<void*>(m2), static_cast<void*>(ss)})
              cudaFree(p);
          }
          std::printf("| %s | %s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f%% | %s |\n", type.c_str(),
                      name().c_str(), static_cast<long long>(m), floor_us, us[0], us[1], us[2], us[3],
                      100.0 * floor_us / us[3], norm_cols.c_str());
          std::fflush(stdout);
        }
      } else {
        uint16_t* wb;  // one bf16 copy (bf16 weights of these shapes exceed the L2 by themselves)
        __nv_bfloat16* xb;
        TESSERA_CUDA_CHECK(cudaMalloc(&wb, sh.n * sh.k * 2));
        TESSERA_CUDA_CHECK(cudaMalloc(&xb, mmax * sh.k * 2));
        cuda::fill_uniform_bf16(wb, sh.n * sh.k, -0.02f, 0.02f, 7, s);
        cuda::fill_uniform_bf16(reinterpret_cast<uint16_t*>(xb), mmax * sh.k, -1.f, 1.f, 4, s);
        for (int64_t m : ms) {
          int it = 0;
          const float us = 1e3f * time_ms([&](cudaStream_t st) {
            cuda::mmq_matmul(t, w[it++ % copies], sh.n, sh.k, qx, meta, m, y, sh.n, false, st);
          }, s, 20);
          float& bf_us = bf16_us[{sh.n * sh.k + sh.k, m}];
          if (bf_us == 0.f)
            bf_us = 1e3f * time_ms([&](cudaStream_t st) {
              gemm.run(xb, reinterpret_cast<const __nv_bfloat16*>(wb), y, m, sh.n, sh.k, false, st);
            }, s, 20);
          const double ops = 2.0 * sh.n * sh.k * m;
          const double floor_us = std::max(bytes(m) / bw, ops / int8_rate) * 1e6;
          std::printf("| %s | %s | %lld | %.1f | %.2f | %.2f | %.1f%% | %.0f | %.2f | %.2fx |\n", type.c_str(),
                      name().c_str(), static_cast<long long>(m), bytes(m) / 1e6, floor_us, us,
                      100.0 * floor_us / us, ops / (us * 1e-6) / 1e12, bf_us, bf_us / us);
          std::fflush(stdout);
        }
        cudaFree(wb);
        cudaFree(xb);
      }
      for (auto* p : w) cudaFree(p);
    }
  return 0;
}
