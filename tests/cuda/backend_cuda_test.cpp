// CUDA backend resources: caching allocator, stream/event wrappers, cuBLASLt handle, the bf16
// GEMM (split-K plans included) against a host reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cublaslt_handle.h"
#include "backend/cuda/device_allocator.h"
#include "backend/cuda/gemm_bf16.h"
#include "backend/cuda/stream.h"
#include "cuda/cuda_test_util.h"

namespace tessera {
namespace {

TEST(CachingDeviceAllocator, SizeClasses) {  // pure host logic: runs without a GPU too
  using A = cuda::CachingDeviceAllocator;
  EXPECT_EQ(A::size_class(1), 256u);
  EXPECT_EQ(A::size_class(256), 256u);
  EXPECT_EQ(A::size_class(257), 512u);
  EXPECT_EQ(A::size_class(1000), 1024u);
  EXPECT_EQ(A::size_class((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(A::size_class(100u << 20), 104u << 20);
  for (size_t b : {1ul, 255ul, 4097ul, 3000001ul, 70000001ul, 999999999ul}) {
    const size_t c = A::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LT(c, b < (1u << 20) ? 2 * b + 256 : b + (8u << 20));  // waste bounds in the header
    EXPECT_EQ(c % 256, 0u);
  }
}

TEST(CachingDeviceAllocator, ReusesFreedBlocksWithoutCudaMalloc) {
  TESSERA_SKIP_WITHOUT_GPU();
  cuda::CachingDeviceAllocator alloc;
  std::vector<void*> ps;
  for (size_t b : {100ul, 5000ul, 3000001ul, 1ul << 20}) ps.push_back(alloc.allocate(b));
  EXPECT_EQ(alloc.allocate(0), nullptr);
  auto s = alloc.stats();
  EXPECT_EQ(s.device_mallocs, 4u);
  EXPECT_EQ(s.bytes_in_use, 256u + 8192u + (3u << 20) + (1u << 20));
  for (void* p : ps) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  // The memory is real device memory: write it and read it back.
  TESSERA_CUDA_CHECK(cudaMemset(ps[2], 0x5A, 3000001));
  std::vector<unsigned char> h(3000001);
  TESSERA_CUDA_CHECK(cudaMemcpy(h.data(), ps[2], h.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(h.front(), 0x5A);
  EXPECT_EQ(h.back(), 0x5A);

  for (void* p : ps) alloc.free(p);
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_cached, 256u + 8192u + (3u << 20) + (1u << 20));
  // Steady state: the same request sizes again (and sizes in the same classes) hit the cache.
  for (int step = 0; step < 10; ++step) {
    void* a = alloc.allocate(200);
    void* b = alloc.allocate(3000000);
    void* c = alloc.allocate(5000);
    alloc.free(a);
    alloc.free(b);
    alloc.free(c);
  }
  s = alloc.stats();
  EXPECT_EQ(s.device_mallocs, 4u);
  EXPECT_EQ(s.cache_hits, 30u);
  EXPECT_EQ(s.device_frees, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, 256u + 8192u + (3u << 20) + (1u << 20));

  alloc.release_cached();
  s = alloc.stats();
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.device_frees, 4u);
  int local = 0;
  EXPECT_THROW(alloc.free(&local), Error);
}

TEST(CudaStream, EventsOrderAndTimeWork) {
  TESSERA_SKIP_WITHOUT_GPU();
  cuda::Stream s1, s2;
  cuda::Event start, stop, done(false);
  test::DevBuf<float> a(1 << 22), b(1 << 22);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(a.get(), 0x3F, (1 << 22) * sizeof(float), s1));
  start.record(s1);
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(b.get(), a.get(), (1 << 22) * sizeof(float), cudaMemcpyDeviceToDevice, s1));
  stop.record(s1);
  s1.record(done);
  s2.wait(done);  // s2's copy must see s1's result without any host synchronization
  std::vector<float> h(1 << 22);
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(h.data(), b.get(), h.size() * sizeof(float), cudaMemcpyDeviceToHost, s2));
  s2.synchronize();
  EXPECT_TRUE(done.query());
  unsigned bits;
  std::memcpy(&bits, &h.back(), 4);
  EXPECT_EQ(bits, 0x3F3F3F3Fu);
  EXPECT_GT(cuda::Event::elapsed_ms(start, stop), 0.f);
  cuda::Stream moved(std::move(s1));
  EXPECT_NE(moved.get(), nullptr);
  EXPECT_EQ(s1.get(), nullptr);
}

TEST(CublasLtHandle, CreatesAndDestroys) {
  TESSERA_SKIP_WITHOUT_GPU();
  cuda::CublasLtHandle h;
  EXPECT_NE(h.get(), nullptr);
}

// y[:, col0 : col0 + n] (+)= x w^T for GemmBf16 with each K-split policy in `splits`, against
// a double-precision reference on sampled output columns (every row); columns outside the
// slice must keep y0. bf16_out: y is bf16 (no accumulate, no slice).
struct GemmCase {
  int64_t m, n, k;
  bool accumulate, bf16_out;
  int64_t ldy = 0, col0 = 0;
};
// Policy -1: the default plan (the heuristic's pick unless TESSERA_GEMM_TUNE=1); -2: the
// default plan after prepare_rows for the power-of-two row bucket holding c.m (its winner must
// serve this row count); 0: the timed selection (the heuristic's pick where it does not apply);
// >= 1: a forced K split.
std::vector<cuda::GemmBf16::PlanInfo> check_gemm(const GemmCase& c,
                                                 const std::vector<int>& splits) {
  std::vector<cuda::GemmBf16::PlanInfo> chosen;
  const int64_t ldy = c.ldy ? c.ldy : c.n;
  std::mt19937 rng(static_cast<uint32_t>(c.m * 31 + c.n * 7 + c.k));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> x(c.m * c.k), w(c.n * c.k), y0b(c.m * ldy);
  std::vector<float> y0(c.m * ldy);
  for (auto& v : x) v = f32_to_bf16(u(rng));
  for (auto& v : w) v = f32_to_bf16(0.05f * u(rng));
  for (size_t i = 0; i < y0.size(); ++i) {
    y0b[i] = f32_to_bf16(u(rng));
    y0[i] = c.bf16_out ? bf16_to_f32(y0b[i]) : u(rng);
  }
  std::vector<int64_t> cols = {0, c.n - 1};
  for (int64_t i = 0; i < 96; ++i) cols.push_back((i * 7919) % c.n);
  std::vector<float> xf(x.size()), wf(cols.size() * c.k);
  for (size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_f32(x[i]);
  for (size_t j = 0; j < cols.size(); ++j)
    for (int64_t i = 0; i < c.k; ++i) wf[j * c.k + i] = bf16_to_f32(w[cols[j] * c.k + i]);
  std::vector<double> ref(c.m * cols.size());
  for (int64_t r = 0; r < c.m; ++r)
    for (size_t j = 0; j < cols.size(); ++j) {
      double acc = c.accumulate ? y0[r * ldy + c.col0 + cols[j]] : 0.0;
      const float *xr = &xf[r * c.k], *wr = &wf[j * c.k];
      for (int64_t i = 0; i < c.k; ++i) acc += static_cast<double>(xr[i]) * wr[i];
      ref[r * cols.size() + j] = acc;
    }
  test::DevBuf<uint16_t> dx(x), dw(w), dyb(y0b);
  test::DevBuf<float> dy(y0);
  const auto* xp = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  const auto* wp = reinterpret_cast<const __nv_bfloat16*>(dw.get());
  for (int split : splits) {
    SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
                 std::to_string(c.k) + " split policy " + std::to_string(split));
    auto g = split < 0
                 ? std::make_unique<cuda::GemmBf16>()  // the engine's default: no selection
                 : std::make_unique<cuda::GemmBf16>(size_t{32} << 20, split, /*select=*/split == 0);
    cuda::GemmBf16& gemm = *g;
    bool prepared = false;
    if (split == -2) {
      int64_t bucket = 1;
      while (bucket < c.m) bucket *= 2;
      prepared = gemm.prepare_rows(wp, bucket, c.n, c.k, c.accumulate, c.bf16_out, nullptr);
    }
    dy.upload(y0);
    dyb.upload(y0b);
    if (c.bf16_out)
      gemm.run(xp, wp, reinterpret_cast<__nv_bfloat16*>(dyb.get()), c.m, c.n, c.k, nullptr);
    else
      gemm.run(xp, wp, dy.get() + c.col0, c.m, c.n, c.k, c.accumulate, nullptr, c.ldy);
    test::check_launch();
    const auto info = gemm.plan_info(c.m, c.n, c.k, c.accumulate, c.bf16_out);
    chosen.push_back(info);
    if (split == -2) EXPECT_EQ(info.selected, prepared) << "the bucket's winner was not reused";
    std::printf("gemm m %lld n %lld k %lld%s%s: policy %d -> split %d, selected %d\n",
                static_cast<long long>(c.m), static_cast<long long>(c.n),
                static_cast<long long>(c.k), c.accumulate ? " +=" : "", c.bf16_out ? " bf16" : "",
                split, info.split_k, info.selected);
    std::vector<float> y(c.m * ldy);
    if (c.bf16_out) {
      const auto yb = dyb.download();
      for (size_t i = 0; i < y.size(); ++i) y[i] = bf16_to_f32(yb[i]);
    } else {
      y = dy.download();
    }
    int bad = 0;
    for (int64_t r = 0; r < c.m; ++r)
      for (size_t j = 0; j < cols.size(); ++j) {
        const double want = ref[r * cols.size() + j], got = y[r * ldy + c.col0 + cols[j]];
        const double tol =
            c.bf16_out ? 8e-3 * std::fabs(want) + 1e-3 : 2e-4 * (1 + std::fabs(want));
        if (!(std::fabs(got - want) <= tol) && ++bad <= 5)
          ADD_FAILURE() << "row " << r << " col " << cols[j] << ": " << got << " vs " << want;
      }
    for (int64_t r = 0; r < c.m && ldy > c.n; ++r)
      for (int64_t j = 0; j < ldy; ++j)
        if ((j < c.col0 || j >= c.col0 + c.n) && y[r * ldy + j] != y0[r * ldy + j] && ++bad <= 5)
          ADD_FAILURE() << "row " << r << " col " << j << " outside the slice changed";
    EXPECT_EQ(bad, 0);
  }
  return chosen;
}

// The decode shapes of a Llama-3-8B step (o and down accumulate into the residual) with the
// default plan, the timed selection and forced K splits (f32 or in-place reductions). down,
// gate|up and the head stream more than 1.5x the L2 per call, so with selection their first
// call times candidates on the real operands (an accumulating y restored afterwards);
// prefill-sized products keep the heuristic's pick.
TEST(GemmBf16, DecodeShapesMatchHostReference) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto o = check_gemm({128, 4096, 4096, true, false}, {0, 1, 2, 3, 4, 8});
  EXPECT_FALSE(o[0].selected) << "o's 33.5 MB weight fits the L2: no timing";
  EXPECT_EQ(o[1].split_k, 1);
  EXPECT_EQ(o[2].split_k, 2);
  EXPECT_EQ(o[4].split_k, 4);
  check_gemm({16, 6144, 4096, false, false}, {0, 4});
  auto down = check_gemm({128, 4096, 14336, true, false}, {-1, 0, 4});
  EXPECT_FALSE(down[0].selected) << "no timed selection unless asked for";
  check_gemm({64, 28672, 4096, false, true}, {0, 2});
  check_gemm({128, 4096, 4096, false, true}, {0, 1, 2, 4});
  auto prefill = check_gemm({1024, 4096, 14336, true, false}, {0});
  EXPECT_FALSE(prefill[0].selected) << "prefill-sized products keep the heuristic's pick";
}

// prepare_rows (what the engine runs at start) times a row bucket once; a later plan of any row
// count in the bucket takes its winner and must still compute the product exactly.
TEST(GemmBf16, PreparedRowBucketServesEveryRowCountInIt) {
  TESSERA_SKIP_WITHOUT_GPU();
  check_gemm({100, 4096, 14336, true, false}, {-2});   // down, bucket 128
  check_gemm({100, 28672, 4096, false, true}, {-2});   // gate|up, bf16 out
  check_gemm({40, 28672, 4096, false, true}, {-2});    // bucket 64
  auto small = check_gemm({100, 4096, 4096, true, false}, {-2});
  EXPECT_FALSE(small[0].selected) << "o fits the L2: nothing to prepare";
}

TEST(GemmBf16, WritesOnlyItsColumnSlice) {
  TESSERA_SKIP_WITHOUT_GPU();
  check_gemm({32, 1024, 4096, true, false, 3072, 1024}, {0, 1, 4});
  // A weight past 1.5x the L2 (timed selection) into a slice of a wider accumulating output.
  check_gemm({64, 14336, 8192, true, false, 3 * 14336, 14336}, {0});
}

}  // namespace
}  // namespace tessera
