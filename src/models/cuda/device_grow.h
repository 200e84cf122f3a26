// A device buffer that only grows (activations and staging sized for the largest call seen).
// Growing frees the old buffer: cudaFree waits for the device, so work still reading it ends first.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace tessera::models::cuda_llama {

template <class T>
class Grow {
 public:
  Grow() = default;
  Grow(const Grow&) = delete;
  Grow& operator=(const Grow&) = delete;
  ~Grow() {
    if (p_) cudaFree(p_);
  }
  T* get(int64_t n, bool* fresh = nullptr) {  // fresh: set when this call allocated
    if (fresh) *fresh = false;
    if (n > cap_) {
      if (p_) TESSERA_CUDA_CHECK(cudaFree(p_));
      p_ = nullptr;
      TESSERA_CUDA_CHECK(cudaMalloc(&p_, static_cast<size_t>(n) * sizeof(T)));
      cap_ = n;
      if (fresh) *fresh = true;
    }
    return p_;
  }

 private:
  T* p_ = nullptr;
  int64_t cap_ = 0;
};

}  // namespace tessera::models::cuda_llama
