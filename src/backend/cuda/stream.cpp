#include "backend/cuda/stream.h"

#include <utility>

#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {

Event::Event(bool timing) {
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
void Event::record(cudaStream_t s) { TESSERA_CUDA_CHECK(cudaEventRecord(e_, s)); }
void Event::synchronize() const { TESSERA_CUDA_CHECK(cudaEventSynchronize(e_)); }
bool Event::query() const {
  const cudaError_t err = cudaEventQuery(e_);
  if (err == cudaErrorNotReady) return false;
  TESSERA_CUDA_CHECK(err);
  return true;
}
float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.f;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, stop.e_));
  return ms;
}

Stream::Stream() { TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
void Stream::synchronize() const { TESSERA_CUDA_CHECK(cudaStreamSynchronize(s_)); }
void Stream::wait(const Event& e) const { TESSERA_CUDA_CHECK(cudaStreamWaitEvent(s_, e.get(), 0)); }

}  // namespace tessera::cuda
