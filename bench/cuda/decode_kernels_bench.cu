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
#include "kernels/cuda/decode_attention.h"
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

void row(const std::string& name, const std::string& shape, double bytes, double flops, double us) {
  const double gbs = bytes / us * 1e-3;
  const double floor_bw = bytes / (g_copy_gbs * 1e3), floor_fl = flops / (g_ffma_tflops * 1e6);
  std::printf("| %-22s | %-26s | %9.2f | %8.2f | %7.0f | %5.1f%% | %8.2f | %7.2f |\n", name.c_str(),
              shape.c_str(), bytes / 1e6, us, gbs, 100.0 * gbs / g_copy_gbs, floor_bw, floor_fl);
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
  std::printf("| %-22s | %-26s | %9s | %8s | %7s | %6s | %8s | %7s |\n", "kernel", "shape", "MB moved",
              "time us", "GB/s", "% copy", "floor us", "FMA us");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(28, '-').c_str(),
              std::string(11, '-').c_str(), std::string(10, '-').c_str(), std::string(9, '-').c_str(),
              std::string(8, '-').c_str(), std::string(10, '-').c_str(), std::string(9, '-').c_str());

  // --- GEMVs (bf16 activations) on the Llama-3-8B projection shapes: y[n] = W[n][k] x[k].
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  for (auto [n, k] : shapes) {
    const std::string shape = std::to_string(n) + "x" + std::to_string(k);
    const double act = 2.0 * (k + n), flops = 2.0 * n * k;
    {
      const double bytes = n * k + n * k / 16.0 + act;  // int8 + f16 scale per 32
      const int sets = rotation_sets(static_cast<size_t>(bytes));
      std::vector<int8_t*> qs;
      std::vector<uint16_t*> sc;
      std::vector<bf16*> x, y;
      for (int i = 0; i < sets; ++i) {
        qs.push_back(rand_bytes<int8_t>(n * k, 100 + i));
        sc.push_back(reinterpret_cast<uint16_t*>(rand_buf<__half>(n * k / 32, 200 + i, 1e-3f, 2e-2f)));
        x.push_back(rand_buf<bf16>(k, 300 + i));
        y.push_back(pool.alloc<bf16>(n));
      }
      const double us = time_graph([&](int i, cudaStream_t s) {
        cuda::gemv_q8_0<bf16>(qs[i], sc[i], x[i], n, k, y[i], s); }, sets, stream);
      row("gemv_q8_0", shape, bytes, flops, us);
    }
    {
      const double bytes = n * k / 2.0 + n * k / 16.0 + act;
      const int sets = rotation_sets(static_cast<size_t>(bytes));
      std::vector<uint8_t*> qs;
      std::vector<uint16_t*> sc;
      std::vector<bf16*> x, y;
      for (int i = 0; i < sets; ++i) {
        qs.push_back(rand_bytes<uint8_t>(n * k / 2, 400 + i));
        sc.push_back(reinterpret_cast<uint16_t*>(rand_buf<__half>(n * k / 32, 500 + i, 1e-3f, 2e-2f)));
        x.push_back(rand_buf<bf16>(k, 600 + i));
        y.push_back(pool.alloc<bf16>(n));
      }
      const double us = time_graph([&](int i, cudaStream_t s) {
        cuda::gemv_q4_0<bf16>(qs[i], sc[i], x[i], n, k, y[i], s); }, sets, stream);
      row("gemv_q4_0", shape, bytes, flops, us);
    }
    {
      const double bytes = 2.0 * n * k + act;
      const int sets = rotation_sets(static_cast<size_t>(bytes));
      std::vector<uint16_t*> w;
      std::vector<bf16*> x, y;
      for (int i = 0; i < sets; ++i) {
        w.push_back(reinterpret_cast<uint16_t*>(rand_buf<bf16>(n * k, 700 + i)));
        x.push_back(rand_buf<bf16>(k, 800 + i));
        y.push_back(pool.alloc<bf16>(n));
      }
      const double us = time_graph([&](int i, cudaStream_t s) {
        cuda::gemv_bf16<bf16>(w[i], x[i], n, k, y[i], s); }, sets, stream);
      row("gemv_bf16", shape, bytes, flops, us);
    }
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
    const double us = time_graph([&](int i, cudaStream_t s) {
      cuda::decode_attention<bf16>(q[i], kc[i], vc[i], lens, 1, ctx, H, KVH, HD,
                                   0.08838834764831845f, ws[i], ws_bytes, o[i], s); }, sets, stream);
    row("decode_attention", "ctx " + std::to_string(ctx) + " splits " +
        std::to_string(cuda::decode_attention_splits(1, KVH, ctx)), bytes, flops, us);
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
