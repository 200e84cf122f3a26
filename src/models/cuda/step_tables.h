// A forward call's small host tables (positions, cache rows, attention tiles, block tables,
// logit rows, sampling rows) packed back to back into one pinned buffer and sent to the device
// with one copy. Each cudaMemcpyAsync in the stream between two steps' kernels is a few
// microseconds in which the GPU runs nothing, and a decode step used to send six.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace tessera::models::cuda_llama {

class StepTables {
 public:
  // Where one table lies in the packed buffer (16-byte aligned; an empty one shares the next
  // one's offset and is never read).
  template <class T>
  struct Section {
    size_t offset = 0;
    T* on(uint8_t* base) const { return reinterpret_cast<T*>(base + offset); }
  };

  template <class T>
  Section<T> add(std::span<const T> values) {
    const Section<T> sec{bytes_};
    pieces_.push_back({bytes_, values.data(), values.size_bytes()});
    bytes_ += (values.size_bytes() + 15) / 16 * 16;
    return sec;
  }

  // The packed size: at least 16 bytes, so that buffers of it are never empty.
  size_t bytes() const { return bytes_ > 16 ? bytes_ : 16; }

  // Packs every table into `host` (pinned, bytes() long) and copies it to `dev` on `s`.
  void send(uint8_t* host, uint8_t* dev, cudaStream_t s) const {
    for (const Piece& p : pieces_)
      if (p.size > 0) std::memcpy(host + p.offset, p.src, p.size);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes(), cudaMemcpyHostToDevice, s));
  }

 private:
  struct Piece {
    size_t offset;
    const void* src;
    size_t size;
  };
  size_t bytes_ = 0;
  std::vector<Piece> pieces_;
};

}  // namespace tessera::models::cuda_llama
