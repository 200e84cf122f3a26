// RAII CUDA stream and event wrappers. Non-copyable, movable; destruction never throws.
//
// Streams are created non-blocking so they never serialize against the legacy default stream
// (which a library or a stray cudaMemcpy could be using).
//
// Example:
//   cuda::Stream s;                 // on the current device
//   cuda::Event start, stop(true);  // stop: timing-enabled
//   start.record(s); kernel<<<..., s.get()>>>(); stop.record(s);
//   s.synchronize(); float ms = cuda::Event::elapsed_ms(start, stop);
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

class Event {
 public:
  // timing=false creates a cudaEventDisableTiming event (cheaper for pure dependencies).
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t s);
  void synchronize() const;
  bool query() const;  // true when all work before the record has completed
  cudaEvent_t get() const { return e_; }
  // Milliseconds between two recorded timing events (both must have completed).
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  cudaEvent_t e_ = nullptr;
};

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }  // pass straight to kernel launchers
  void synchronize() const;
  void record(Event& e) const { e.record(s_); }
  // Later work on this stream waits for `e` (cross-stream dependency without a host sync).
  void wait(const Event& e) const;

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace tessera::cuda
