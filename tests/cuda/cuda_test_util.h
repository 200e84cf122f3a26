// Helpers for GPU tests: RAII device buffers, poisoned outputs, host <-> device copies, the
// dtype traits (rounding, tolerances of DESIGN section 4) for __half / __nv_bfloat16, and a
// runner for kernels chained under programmatic dependent launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "core/half.h"
#include "kernels/cuda/launch.h"

namespace tessera::test {

#define TESSERA_SKIP_WITHOUT_GPU() \
  if (::tessera::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

template <class T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) {
    if (n) TESSERA_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
  }
  explicit DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  ~DevBuf() {
    if (p_) cudaFree(p_);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& h) {
    TESSERA_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // 0xFF bytes: NaN for f32, f16 and bf16, so an unwritten element fails every comparison.
  void poison() { TESSERA_CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T))); }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
    TESSERA_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline void check_launch() {
  TESSERA_CUDA_CHECK(cudaGetLastError());
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
}

// Runs pair(i, out, stream) for i < n on a non-blocking stream twice: back to back under
// programmatic dependent launch (launch.h) writing `chained`, where each pair's kernels may start
// before the previous ones finish; then each pair alone, PDL off and synchronized, writing
// `alone` (the reference). Restores the PDL switch.
template <class Pair>
void run_chained_then_alone(int n, float* chained, float* alone, Pair&& pair) {
  const bool pdl = cuda::pdl_enabled();
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cuda::set_pdl_enabled(true);
  for (int i = 0; i < n; ++i) pair(i, chained, s);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
  cuda::set_pdl_enabled(false);
  for (int i = 0; i < n; ++i) {
    pair(i, alone, s);
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  check_launch();
  TESSERA_CUDA_CHECK(cudaStreamDestroy(s));
  cuda::set_pdl_enabled(pdl);
}

template <class T> struct Dt;
template <> struct Dt<__half> {
  static __half from(float v) { return __half_raw{f32_to_f16(v)}; }
  static float to(__half v) { return f16_to_f32(static_cast<__half_raw>(v).x); }
  static constexpr float atol = 1e-3f, rtol = 1e-3f, nmse = 1e-5f;
  static constexpr const char* name = "f16";
};
template <> struct Dt<__nv_bfloat16> {
  static __nv_bfloat16 from(float v) { return __nv_bfloat16_raw{f32_to_bf16(v)}; }
  static float to(__nv_bfloat16 v) { return bf16_to_f32(static_cast<__nv_bfloat16_raw>(v).x); }
  static constexpr float atol = 1e-2f, rtol = 2e-2f, nmse = 1e-4f;
  static constexpr const char* name = "bf16";
};

// Device-typed copy of f32 values, rounding `v` in place so the reference sees what the GPU sees.
template <class T>
std::vector<T> to_device_type(std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = Dt<T>::from(v[i]);
    v[i] = Dt<T>::to(out[i]);
  }
  return out;
}
template <class T>
std::vector<float> to_f32(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Dt<T>::to(v[i]);
  return out;
}
// The reference rounded to the output dtype (DESIGN section 4).
template <class T>
std::vector<float> round_to(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Dt<T>::to(Dt<T>::from(v[i]));
  return out;
}
// Every element finite: poison (NaN) left anywhere means an element was never written.
inline ::testing::AssertionResult all_written(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return ::testing::AssertionFailure() << "index " << i << " not written: " << v[i];
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::test
