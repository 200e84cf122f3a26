// Decode-path CUDA kernels on Llama-3-8B shapes, as a fraction of the measured ceilings.
//
// Ceilings measured at start on this device:
//   copy bandwidth: a large device-to-device cudaMemcpyAsync (bytes read + written) / time;
//   FP32 FMA rate: a register-only FFMA kernel (the GEMV/attention kernels use CUDA-core FMAs,
//   not tensor cores, so this, not the bf16 matrix rate, is their arithmetic ceiling).
// Each kernel is timed as CUDA-graph replays of many back-to-back launches (decode runs as a
// graph, DESIGN section 3), rotating over enough input sets to exceed 4x the L2, median of 21
// replays after warm-up, on random data. Bytes are the floor: each input read once, output once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/stream.h"
#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/fill_random.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/rope_kv.h"
#include "kernels/cuda/swiglu.h"

using namespace tessera;
using bf16 = __nv_bfloat16;

namespace {

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
__global__ void fill_bytes(uint32_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = hash32(seed * 0x9E3779B97F4A7C15ULL + i);
}
template <class T>
__global__ void fill_uniform(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float u = hash32(seed * 0x9E3779B97F4A7C15ULL + i) * (1.f / 4294967296.f);
    p[i] = static_cast<T>(lo + (hi - lo) * u);
  }
}
__global__ void fill_i32(int32_t* p, size_t n, int32_t v) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) p[i] = v;
}
// 8 independent FMA chains per thread: enough ILP to saturate the FP32 pipes.
__global__ void ffma_peak(float* out, int iters, float a, float b) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = threadIdx.x + j;
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = fmaf(x[j], a, b);
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += x[j];
  if (s == 12345.f) out[0] = s;  // keeps the chains alive
}

struct Pool {  // every buffer the bench allocates, freed at exit
  std::vector<void*> ptrs;
  template <class T> T* alloc(size_t n) {
    void* p;
    TESSERA_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    ptrs.push_back(p);
    return static_cast<T*>(p);
  }
  ~Pool() { for (void* p : ptrs) cudaFree(p); }
};
Pool pool;

template <class T> T* rand_buf(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  T* p = pool.alloc<T>(n);
  fill_uniform<T><<<1024, 256>>>(p, n, seed, lo, hi);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  return p;
}
template <class T> T* rand_bytes(size_t n, uint64_t seed) {
  const size_t words = (n * sizeof(T) + 3) / 4;
  auto* p = pool.alloc<uint32_t>(words);
  fill_bytes<<<1024, 256>>>(p, words, seed);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  return reinterpret_cast<T*>(p);
}

size_t g_l2 = 50u << 20;
double g_copy_gbs = 0, g_ffma_tflops = 0;

// Sets needed so that rotating through them touches >= 4x L2 (min 2, max 64).
int rotation_sets(size_t bytes_per_set) {
  const size_t want = 4 * g_l2;
  return static_cast<int>(std::clamp<size_t>((want + bytes_per_set - 1) / bytes_per_set, 2, 64));
}

// Median time (us) of one launch: graph of `per_graph` launches (launch(i) for i in rotation).
double time_graph(const std::function<void(int, cudaStream_t)>& launch, int sets, cudaStream_t s) {
  const int per_graph = std::max(sets, 64 / sets * sets);
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());  // random fills ran on the legacy stream
  for (int i = 0; i < sets; ++i) launch(i, s);  // warm-up outside capture (attributes, modules)
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < per_graph; ++i) launch(i % sets, s);
  TESSERA_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  TESSERA_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int w = 0; w < 3; ++w) TESSERA_CUDA_CHECK(cudaGraphLaunch(ge, s));
  cuda::Event a, b;
  std::vector<double> t;
  for (int r = 0; r < 21; ++r) {
    a.record(s);
    TESSERA_CUDA_CHECK(cudaGraphLaunch(ge, s));
    b.record(s);
    b.synchronize();
    t.push_back(cuda::Event::elapsed_ms(a, b) * 1e3 / per_graph);
  }
  TESSERA_CUDA_CHECK(cudaGraphExecDestroy(ge));
  TESSERA_CUDA_CHECK(cudaGraphDestroy(g));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// us: launches serialized (PDL off); us_pdl (< 0: not measured): with PDL, as in a decode step.
void row(const std::string& name, const std::string& shape, double bytes, double flops, double us,
         double us_pdl = -1) {
  const double gbs = bytes / us * 1e-3;
  const double floor_bw = bytes / (g_copy_gbs * 1e3), floor_fl = flops / (g_ffma_tflops * 1e6);
  char pdl[64] = "-";
  if (us_pdl > 0)
    std::snprintf(pdl, sizeof pdl, "%.2f (%.1f%%)", us_pdl, 100.0 * floor_bw / us_pdl);
  std::printf("| %-22s | %-26s | %9.2f | %8.2f | %7.0f | %5.1f%% | %8.2f | %7.2f | %-16s |\n", name.c_str(),
              shape.c_str(), bytes / 1e6, us, gbs, 100.0 * gbs / g_copy_gbs, floor_bw, floor_fl, pdl);
}

void measure_ceilings(cudaStream_t s) {
  const size_t n = size_t{2} << 30;  // 2 GiB each way
  auto* src = rand_bytes<uint8_t>(n, 1);
  auto* dst = pool.alloc<uint8_t>(n);
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  cuda::Event a, b;
  std::vector<double> t;
  for (int r = 0; r < 13; ++r) {
    a.record(s);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
    b.record(s);
    b.synchronize();
    if (r >= 3) t.push_back(cuda::Event::elapsed_ms(a, b));
  }
  std::sort(t.begin(), t.end());
  g_copy_gbs = 2.0 * n / (t[t.size() / 2] * 1e-3) / 1e9;

  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  float* out = pool.alloc<float>(1);
  const int iters = 1 << 16, blocks = sms * 8, threads = 256;
  t.clear();
  for (int r = 0; r < 8; ++r) {
    a.record(s);
    ffma_peak<<<blocks, threads, 0, s>>>(out, iters, 0.999f, 0.001f);
    b.record(s);
    b.synchronize();
    if (r >= 2) t.push_back(cuda::Event::elapsed_ms(a, b));
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  g_ffma_tflops = 2.0 * iters * 8 * double(blocks) * threads / (t[t.size() / 2] * 1e-3) / 1e12;
}

}  // namespace

int main() {
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  g_l2 = prop.l2CacheSize;
  cuda::Stream stream;
  measure_ceilings(stream);
  std::printf("device: %s, %d SMs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount, g_l2 / 1e6);
  std::printf("measured copy bandwidth (D2D 2 GiB, read+write): %.0f GB/s\n", g_copy_gbs);
  std::printf("measured FP32 FFMA rate: %.1f TFLOP/s\n\n", g_ffma_tflops);
  std::printf("| %-22s | %-26s | %9s | %8s | %7s | %6s | %8s | %7s | %-16s |\n", "kernel", "shape", "MB moved",
              "time us", "GB/s", "% copy", "floor us", "FMA us", "PDL us (% floor)");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(28, '-').c_str(),
              std::string(11, '-').c_str(), std::string(10, '-').c_str(), std::string(9, '-').c_str(),
              std::string(8, '-').c_str(), std::string(10, '-').c_str(), std::string(9, '-').c_str(),
              std::string(18, '-').c_str());

  // --- GEMVs on the Llama-3-8B projection shapes: y[n] = W[n][k] x[k]. Quantized weights take
  // int8-quantized activations (qx + meta, made once per set by quantize_act); bf16 weights bf16 x.
  // Timed without PDL (each launch waits for the previous one: the kernel alone) and with PDL
  // (the next launch's weight prefetch overlaps this one's tail, as inside a decode step).
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {6144, 4096}, {14336, 4096}, {4096, 14336}};
  std::vector<std::string> rows_note;
  const DType types[] = {DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  for (auto [n_, k_] : shapes) {
    const int64_t n = n_, k = k_;  // plain copies: lambdas below capture them
    const std::string shape = std::to_string(n) + "x" + std::to_string(k);
    const double flops = 2.0 * n * k;
    for (DType t : types) {
      const bool quant = t != DType::kBF16;
      const double wbytes = static_cast<double>(n) * *dtype_row_bytes(t, k);
      const double act = (quant ? k + k / 32.0 * 8 : 2.0 * k) + 2.0 * n;
      const double bytes = wbytes + act;
      const int sets = rotation_sets(static_cast<size_t>(bytes));
      std::vector<void*> w;
      std::vector<bf16*> x, y;
      std::vector<int8_t*> qx;
      std::vector<cuda::ActQ8Meta*> xm;
      for (int i = 0; i < sets; ++i) {
        x.push_back(rand_buf<bf16>(k, 300 + i));
        y.push_back(pool.alloc<bf16>(n));
        if (quant) {
          w.push_back(pool.alloc<uint8_t>(cuda::gemv_quant_layout(t, n, k).bytes));
          cuda::fill_random_quant(t, w.back(), n, k, cuda::dummy_quant_scale(t, k), 100 + i, nullptr);
          qx.push_back(pool.alloc<int8_t>(k));
          xm.push_back(pool.alloc<cuda::ActQ8Meta>(k / 32));
          cuda::quantize_act<bf16>(x.back(), k, qx.back(), xm.back(), nullptr);
        } else {
          w.push_back(rand_buf<bf16>(n * k, 700 + i, -0.02f, 0.02f));
        }
      }
      auto launch = [&](int i, cudaStream_t s) {
        if (quant) cuda::gemv_quant<bf16>(t, w[i], n, k, qx[i], xm[i], y[i], s);
        else cuda::gemv_bf16<bf16>(static_cast<const uint16_t*>(w[i]), x[i], n, k, y[i], s);
      };
      cuda::set_pdl_enabled(false);
      const double us = time_graph(launch, sets, stream);
      cuda::set_gemv_rows_per_warp(4);
      const double us4 = time_graph(launch, sets, stream);
      cuda::set_gemv_rows_per_warp(2);
      const double us2 = time_graph(launch, sets, stream);
      cuda::set_gemv_rows_per_warp(0);
      cuda::set_pdl_enabled(true);
      const double us_pdl = time_graph(launch, sets, stream);
      row("gemv_" + std::string(dtype_name(t)), shape, bytes, flops, us, us_pdl);
      rows_note.push_back("gemv_" + std::string(dtype_name(t)) + " " + shape + ": rows/warp 4: " +
                          std::to_string(us4) + " us, 2: " + std::to_string(us2) + " us");
    }
  }
  // QKV projection with RoPE + KV write fused in (6144 x 4096; llama3-8b heads).
  for (const auto& s : rows_note) std::printf("  (PDL off, forced) %s\n", s.c_str());
  for (DType t : types) {
    const int64_t n = 6144, k = 4096, H0 = 32, KV0 = 8, HD0 = 128, ctx = 1024;
    const bool quant = t != DType::kBF16;
    const double bytes = static_cast<double>(n) * *dtype_row_bytes(t, k) + (quant ? k * 1.25 : 2.0 * k) + 2.0 * n;
    const int sets = rotation_sets(static_cast<size_t>(bytes));
    std::vector<void*> w;
    std::vector<bf16*> x, q;
    std::vector<int8_t*> qx;
    std::vector<cuda::ActQ8Meta*> xm;
    std::vector<__half*> kc, vc;
    int32_t* pos = pool.alloc<int32_t>(1);
    fill_i32<<<1, 32>>>(pos, 1, 1000);
    int64_t* crow = pool.alloc<int64_t>(1);
    TESSERA_CUDA_CHECK(cudaMemset(crow, 0, sizeof(int64_t)));
    const auto f = cuda::rope_inv_freq(HD0, 500000.f, 1.f, nullptr);
    double* freq = pool.alloc<double>(f.size());
    TESSERA_CUDA_CHECK(cudaMemcpy(freq, f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice));
    for (int i = 0; i < sets; ++i) {
      x.push_back(rand_buf<bf16>(k, 300 + i));
      q.push_back(pool.alloc<bf16>(H0 * HD0));
      kc.push_back(pool.alloc<__half>(ctx * KV0 * HD0));
      vc.push_back(pool.alloc<__half>(ctx * KV0 * HD0));
      if (quant) {
        w.push_back(pool.alloc<uint8_t>(cuda::gemv_quant_layout(t, n, k).bytes));
        cuda::fill_random_quant(t, w.back(), n, k, cuda::dummy_quant_scale(t, k), 100 + i, nullptr);
        qx.push_back(pool.alloc<int8_t>(k));
        xm.push_back(pool.alloc<cuda::ActQ8Meta>(k / 32));
        cuda::quantize_act<bf16>(x.back(), k, qx.back(), xm.back(), nullptr);
      } else {
        w.push_back(rand_buf<bf16>(n * k, 700 + i, -0.02f, 0.02f));
      }
    }
    auto launch = [&](int i, cudaStream_t s) {
      cuda::QkvRope r;
      r.q_rows = H0 * HD0; r.kv_rows = KV0 * HD0; r.head_dim = HD0; r.n_rot = HD0;
      r.inv_freq = freq; r.pos = pos; r.cache_row = crow; r.k_cache = kc[i]; r.v_cache = vc[i];
      if (quant) cuda::gemv_quant_qkv_rope<bf16>(t, w[i], k, qx[i], xm[i], q[i], r, s);
      else cuda::gemv_bf16_qkv_rope<bf16>(static_cast<const uint16_t*>(w[i]), k, x[i], q[i], r, s);
    };
    cuda::set_pdl_enabled(false);
    const double us = time_graph(launch, sets, stream);
    cuda::set_pdl_enabled(true);
    const double us_pdl = time_graph(launch, sets, stream);
    row("qkv_rope_" + std::string(dtype_name(t)), "6144x4096 +RoPE+KV", bytes, 2.0 * n * k, us, us_pdl);
  }

  // --- Decode attention, batch 1: 32 heads / 8 kv heads / head_dim 128, f16 KV.
  const int64_t H = 32, KVH = 8, HD = 128;
  for (int64_t ctx : {512, 4096, 32768}) {
    const double kv_bytes = 2.0 * ctx * KVH * HD * 2;
    const double bytes = kv_bytes + 2.0 * 2 * H * HD;
    const double flops = 4.0 * ctx * H * HD;
    const int sets = rotation_sets(static_cast<size_t>(bytes));
    const size_t ws_bytes = cuda::decode_attention_workspace_bytes(1, H, KVH, HD, ctx);
    std::vector<bf16*> q, o;
    std::vector<__half*> kc, vc;
    std::vector<void*> ws;
    int32_t* lens = pool.alloc<int32_t>(1);
    fill_i32<<<1, 32>>>(lens, 1, static_cast<int32_t>(ctx));
    for (int i = 0; i < sets; ++i) {
      q.push_back(rand_buf<bf16>(H * HD, 900 + i, -4.f, 4.f));
      kc.push_back(rand_buf<__half>(ctx * KVH * HD, 1000 + i));
      vc.push_back(rand_buf<__half>(ctx * KVH * HD, 1100 + i));
      ws.push_back(pool.alloc<uint8_t>(ws_bytes));
      o.push_back(pool.alloc<bf16>(H * HD));
    }
    auto launch = [&](int i, cudaStream_t s) {
      cuda::decode_attention<bf16>(q[i], kc[i], vc[i], lens, 1, ctx, H, KVH, HD,
                                   0.08838834764831845f, ws[i], ws_bytes, o[i], s); };
    cuda::set_pdl_enabled(false);
    const double us = time_graph(launch, sets, stream);
    cuda::set_pdl_enabled(true);
    const double us_pdl = time_graph(launch, sets, stream);
    row("decode_attention", "ctx " + std::to_string(ctx) + " splits " +
        std::to_string(cuda::decode_attention_splits(1, KVH, ctx)), bytes, flops, us, us_pdl);
  }

  // --- Small per-token kernels (latency-bound by design; shown for the step budget).
  {
    const int64_t n = 14336;
    const int sets = 64;
    std::vector<bf16*> g, u, o;
    for (int i = 0; i < sets; ++i) {
      g.push_back(rand_buf<bf16>(n, 1200 + i, -8.f, 8.f));
      u.push_back(rand_buf<bf16>(n, 1300 + i));
      o.push_back(pool.alloc<bf16>(n));
    }
    const double us = time_graph([&](int i, cudaStream_t s) {
      cuda::swiglu<bf16>(g[i], u[i], n, o[i], s); }, sets, stream);
    row("swiglu", "14336", 6.0 * n, 4.0 * n, us);
    int8_t* qx = pool.alloc<int8_t>(n);
    auto* xm = pool.alloc<cuda::ActQ8Meta>(n / 32);
    auto launch = [&](int i, cudaStream_t s) {
      cuda::swiglu_quant<bf16>(g[i], u[i], n, nullptr, qx, xm, s); };
    cuda::set_pdl_enabled(false);
    const double us2 = time_graph(launch, sets, stream);
    cuda::set_pdl_enabled(true);
    row("swiglu_quant", "14336", 4.0 * n + 1.25 * n, 4.0 * n, us2, time_graph(launch, sets, stream));
  }
  {
    const int64_t d = 4096;
    const int sets = 64;
    std::vector<bf16*> x, dl;
    float* w = rand_buf<float>(d, 1250, 0.9f, 1.1f);
    for (int i = 0; i < sets; ++i) {
      x.push_back(rand_buf<bf16>(d, 1260 + i));
      dl.push_back(rand_buf<bf16>(d, 1360 + i, -0.01f, 0.01f));
    }
    int8_t* qx = pool.alloc<int8_t>(d);
    auto* xm = pool.alloc<cuda::ActQ8Meta>(d / 32);
    auto launch = [&](int i, cudaStream_t s) {
      cuda::rms_norm_quant<bf16>(x[i], dl[i], w, 1e-5f, d, nullptr, qx, xm, s); };
    cuda::set_pdl_enabled(false);
    const double us = time_graph(launch, sets, stream);
    cuda::set_pdl_enabled(true);
    row("add_rms_norm_quant", "4096", 6.0 * d + 4.0 * d + 1.25 * d, 4.0 * d, us, time_graph(launch, sets, stream));
  }
  {
    const int64_t ctx = 4096;
    const int sets = 16;
    std::vector<bf16*> q, k, v;
    std::vector<__half*> kc, vc;
    int32_t* pos = pool.alloc<int32_t>(1);
    fill_i32<<<1, 32>>>(pos, 1, 4000);
    int64_t* crow = pool.alloc<int64_t>(1);
    TESSERA_CUDA_CHECK(cudaMemset(crow, 0, sizeof(int64_t)));
    for (int i = 0; i < sets; ++i) {
      q.push_back(rand_buf<bf16>(H * HD, 1400 + i));
      k.push_back(rand_buf<bf16>(KVH * HD, 1500 + i));
      v.push_back(rand_buf<bf16>(KVH * HD, 1600 + i));
      kc.push_back(pool.alloc<__half>(ctx * KVH * HD));
      vc.push_back(pool.alloc<__half>(ctx * KVH * HD));
    }
    cuda::RopeConfig cfg{ref::RopeLayout::kInterleaved, HD, 500000.f, 1.f, nullptr};
    const double us = time_graph([&](int i, cudaStream_t s) {
      cuda::rope_kv_write<bf16>(q[i], k[i], v[i], pos, crow, 1, H, KVH, HD, cfg, kc[i], vc[i], s);
    }, sets, stream);
    row("rope_kv_write", "1 tok, 32/8 heads x128", 2.0 * (2 * H * HD + 2 * KVH * HD) + 2.0 * 2 * KVH * HD, 0, us);
  }
  {
    const int64_t vocab = 128256, d = 4096;
    const int sets = 2;
    std::vector<uint8_t*> tab;
    std::vector<bf16*> o;
    int32_t* ids = pool.alloc<int32_t>(1);
    fill_i32<<<1, 32>>>(ids, 1, 77777);
    for (int i = 0; i < sets; ++i) {
      tab.push_back(rand_bytes<uint8_t>(vocab * d / 32 * 34, 1700 + i));
      o.push_back(pool.alloc<bf16>(d));
    }
    // Random bytes make some Q8_0 scales NaN/inf; the gather moves bits, so timing is unaffected.
    const double us = time_graph([&](int i, cudaStream_t s) {
      cuda::embedding_gather<bf16>(DType::kQ8_0, tab[i], vocab, d, ids, 1, o[i], s); }, sets, stream);
    row("embedding_gather q8_0", "1 tok, d 4096", d / 32.0 * 34 + 2.0 * d, 0, us);
  }
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
