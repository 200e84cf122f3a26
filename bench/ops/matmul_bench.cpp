// Quantized/float matmul benchmark: decode (m = 1) shapes of SmolLM2-135M and Llama-7B as GB/s of
// weight bytes against the measured host read bandwidth, and prefill (m = 64) as GFLOP/s
// against the measured f32 FMA peak. Weights rotate over copies totalling >= 4x the LLC so every
// call streams from DRAM; each figure is the median over several full rotations.
//
//   ./build/matmul_bench [--quick] [--type Q4_1]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/half.h"
#include "kernels/cpu/matmul.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int64_t llc_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string s;
  if (f >> s && !s.empty()) {
    int64_t v = std::stoll(s);
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    if (v > 0) return v;
  }
  return 32 << 20;
}

// Read-only streaming sum: the floor for a kernel that must read its weights once.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  return out[0] + out[1] + out[2] + out[3];
}

uint64_t sum_scalar(const uint8_t* p, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

double read_bandwidth(ThreadPool& pool, int64_t bytes) {
  uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
  std::mt19937_64 rng(1);
  for (int64_t i = 0; i < bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(buf + i, &v, 8);
  }
  const bool avx2 = cpu_features().avx2;
  volatile uint64_t sink = 0;
  std::vector<double> t;
  for (int rep = 0; rep < 21; ++rep) {
    const auto t0 = Clock::now();
    pool.parallel_for(
        bytes / 4096,
        [&](int64_t b, int64_t e, int) {
          const uint8_t* p = buf + b * 4096;
          sink = sink + (avx2 ? sum_avx2(p, (e - b) * 4096) : sum_scalar(p, (e - b) * 4096));
        },
        1);
    if (rep > 0) t.push_back(seconds_since(t0));
  }
  std::free(buf);
  // A ceiling: the best run (the median would let noise from other tenants lower the bar).
  return bytes / *std::min_element(t.begin(), t.end()) / 1e9;
}

// Peak f32 FMA rate: 10 independent accumulator chains per thread.
__attribute__((target("avx2,fma"))) float fma_loop(int64_t iters) {
  __m256 a[10];
  for (int i = 0; i < 10; ++i) a[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
  float s = 0;
  for (int i = 0; i < 10; ++i) s += _mm256_cvtss_f32(a[i]);
  return s;
}

double fma_peak_gflops(ThreadPool& pool) {
  if (!cpu_features().avx2) return 0;
  const int64_t iters = 20'000'000;
  volatile float sink = 0;
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool.parallel_for(
        pool.size(), [&](int64_t, int64_t, int) { sink = sink + fma_loop(iters); }, 1);
    t.push_back(seconds_since(t0));
  }
  return 2.0 * 8 * 10 * iters * pool.size() / *std::min_element(t.begin(), t.end()) / 1e9;
}

// Peak int8 dot-product rate of the instruction sequence every quantized kernel is built on
// (vpmaddubsw + vpmaddwd + vpaddd: 32 u8 x s8 multiply-adds). Only the adds form dependency
// chains; the empty asm makes `b` opaque each iteration so the products cannot be hoisted.
__attribute__((target("avx2"))) int int8_loop(int64_t iters) {
  constexpr int kChains = 6;
  __m256i acc[kChains], a[kChains];
  for (int i = 0; i < kChains; ++i) {
    acc[i] = _mm256_set1_epi32(i);
    a[i] = _mm256_set1_epi8(static_cast<char>(3 + i));
  }
  __m256i b = _mm256_set1_epi8(-2);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
    asm volatile("" : "+x"(b));
    for (int i = 0; i < kChains; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a[i], b), ones));
  }
  int s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm256_cvtsi256_si32(acc[i]);
  return s;
}

double int8_peak_gops(ThreadPool& pool) {
  if (!cpu_features().avx2) return 0;
  const int64_t iters = 10'000'000;
  volatile int sink = 0;
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool.parallel_for(
        pool.size(), [&](int64_t, int64_t, int) { sink = sink + int8_loop(iters); }, 1);
    t.push_back(seconds_since(t0));
  }
  return 2.0 * 32 * 6 * iters * pool.size() / *std::min_element(t.begin(), t.end()) / 1e9;
}

// One row-major weight matrix of random valid data: random quant bits with finite, O(1)-result
// scales, random floats for float types.
std::vector<uint8_t> random_weights(DType t, int64_t n, int64_t k, std::mt19937_64& rng) {
  const int64_t bytes = *dtype_row_bytes(t, k) * n;
  std::vector<uint8_t> w(static_cast<size_t>(bytes));
  for (int64_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(w.data() + i, &v, 8);
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto put16 = [&](int64_t off, uint16_t v) { std::memcpy(w.data() + off, &v, 2); };
  const DTypeInfo& info = dtype_info(t);
  const int64_t nel = n * k, nblk = bytes / info.block_bytes;
  switch (t) {
    case DType::kF32:
      for (int64_t i = 0; i < nel; ++i) {
        const float v = u(rng);
        std::memcpy(w.data() + 4 * i, &v, 4);
      }
      break;
    case DType::kF16:
      for (int64_t i = 0; i < nel; ++i) put16(2 * i, f32_to_f16(u(rng)));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < nel; ++i) put16(2 * i, f32_to_bf16(u(rng)));
      break;
    case DType::kI32:
      break;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
      for (int64_t b = 0; b < nblk; ++b) put16(b * info.block_bytes, f32_to_f16(0.01f * u(rng)));
      break;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      for (int64_t b = 0; b < nblk; ++b) {
        put16(b * info.block_bytes, f32_to_f16(0.01f * u(rng)));
        put16(b * info.block_bytes + 2, f32_to_f16(0.01f * u(rng)));
      }
      break;
    case DType::kQ6_K:
      for (int64_t b = 0; b < nblk; ++b)
        put16(b * info.block_bytes + 208, f32_to_f16(0.001f * u(rng)));
      break;
  }
  return w;
}

struct Result {
  double us_per_call, gbps, gflops;
};

// Median over rotations through `copies` weight copies (each rotation timed as a whole).
Result bench_shape(DType t, int64_t n, int64_t k, int64_t m, int64_t min_rotation_bytes,
                   ThreadPool& pool, bool quick) {
  std::mt19937_64 rng(42);
  const int64_t bytes = *dtype_row_bytes(t, k) * n;
  const int64_t copies = std::max<int64_t>(1, (min_rotation_bytes + bytes - 1) / bytes);
  // One random matrix replicated: distinct addresses are what defeats the caches.
  std::vector<uint8_t> proto = random_weights(t, n, k, rng);
  uint8_t* w = static_cast<uint8_t*>(std::aligned_alloc(64, ((bytes * copies + 63) / 64) * 64));
  for (int64_t c = 0; c < copies; ++c) std::memcpy(w + c * bytes, proto.data(), bytes);
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  std::vector<uint8_t> ws(cpu::matmul_workspace_bytes(t, m, k) + 64);
  auto call = [&](int64_t c) {
    cpu::matmul(t, w + c * bytes, n, k, x.data(), m, y.data(), n, ws.data(), ws.size(), pool);
  };
  const double flop = 2.0 * m * n * k;
  // Enough calls per rotation for timer resolution even when one copy covers the LLC.
  const int64_t per_rot = std::max<int64_t>(copies, m > 1 ? 3 : 20);
  const int rotations = quick ? 3 : (m > 1 ? 5 : 11);
  for (int64_t c = 0; c < copies; ++c) call(c);  // warm-up: page faults, pool threads
  std::vector<double> t_call;
  for (int r = 0; r < rotations; ++r) {
    const auto t0 = Clock::now();
    for (int64_t c = 0; c < per_rot; ++c) call(c % copies);
    t_call.push_back(seconds_since(t0) / per_rot);
  }
  std::free(w);
  const double s = median(t_call);
  return {s * 1e6, bytes / s / 1e9, flop / s / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--type") && i + 1 < argc) only = argv[++i];
  }
  ThreadPool& pool = default_thread_pool();
  const int64_t llc = llc_bytes();
  const int64_t stream = std::max<int64_t>(4 * llc, 256 << 20);
  const double bw = read_bandwidth(pool, stream);
  const double peak = fma_peak_gflops(pool);
  const double peak_i8 = int8_peak_gops(pool);
  std::printf("matmul_bench: %d threads, ISA %s, LLC %lld MiB\n", pool.size(),
              cpu_features_string().c_str(), static_cast<long long>(llc >> 20));
  std::printf(
      "ceilings (best of runs): read bandwidth %.1f GB/s (streaming sum over %lld MiB), "
      "f32 FMA %.0f GFLOP/s, int8 maddubs+madd %.0f GOP/s\n\n",
      bw, static_cast<long long>(stream >> 20), peak, peak_i8);

  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape decode[] = {{"attn_q/o 576x576", 576, 576}, {"attn_k/v 192x576", 192, 576},
                          {"ffn_up 1536x576", 1536, 576}, {"ffn_down 576x1536", 576, 1536},
                          {"head 49152x576", 49152, 576}, {"llama7b 4096x4096", 4096, 4096}};
  const DType types[] = {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0,
                         DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                         DType::kF16,  DType::kBF16, DType::kF32};
  std::printf("decode m=1 (GB/s of weight bytes, %% of read bandwidth)\n");
  std::printf("%-6s %-20s %10s %10s %9s %7s\n", "type", "shape", "MiB", "us/call", "GB/s", "%bw");
  for (DType t : types) {
    if (!only.empty() && only != dtype_name(t)) continue;
    for (const Shape& s : decode) {
      if (s.k % dtype_info(t).block_size) {
        std::printf("%-6s %-20s %10s\n", std::string(dtype_name(t)).c_str(), s.name,
                    "n/a (k not a multiple of the block)");
        continue;
      }
      if (quick && s.n == 4096 && dtype_info(t).block_bytes <= 4 && t != DType::kF16) continue;
      const Result r = bench_shape(t, s.n, s.k, 1, 4 * llc, pool, quick);
      const double mib = *dtype_row_bytes(t, s.k) * s.n / 1048576.0;
      std::printf("%-6s %-20s %10.2f %10.1f %9.1f %6.0f%%\n", std::string(dtype_name(t)).c_str(),
                  s.name, mib, r.us_per_call, r.gbps, 100 * r.gbps / bw);
    }
  }
  std::printf(
      "\nprefill m=64 (GFLOP/s; %% of the int8 peak for quantized weights, f32 FMA peak "
      "for float weights)\n");
  std::printf("%-6s %-20s %10s %9s %7s\n", "type", "shape", "ms/call", "GFLOP/s", "%peak");
  const Shape prefill[] = {{"ffn_up 1536x576", 1536, 576}, {"llama7b 4096x4096", 4096, 4096}};
  for (DType t : types) {
    if (!only.empty() && only != dtype_name(t)) continue;
    for (const Shape& s : prefill) {
      if (s.k % dtype_info(t).block_size) continue;
      if (quick && s.n == 4096) continue;
      const Result r = bench_shape(t, s.n, s.k, 64, 0, pool, quick);
      const double ceil = dtype_is_quantized(t) ? peak_i8 : peak;
      std::printf("%-6s %-20s %10.2f %9.1f %6.0f%%\n", std::string(dtype_name(t)).c_str(), s.name,
                  r.us_per_call / 1e3, r.gflops, ceil > 0 ? 100 * r.gflops / ceil : 0.0);
    }
  }
  return 0;
}
