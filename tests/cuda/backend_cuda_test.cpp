// CUDA backend resources: caching allocator, stream/event wrappers, cuBLASLt handle.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/cublaslt_handle.h"
#include "backend/cuda/device_allocator.h"
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
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), (1 << 22) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, s1));
  stop.record(s1);
  s1.record(done);
  s2.wait(done);  // s2's copy must see s1's result without any host synchronization
  std::vector<float> h(1 << 22);
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(h.data(), b.get(), h.size() * sizeof(float),
                                     cudaMemcpyDeviceToHost, s2));
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

}  // namespace
}  // namespace tessera
