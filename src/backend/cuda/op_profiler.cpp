#include "backend/cuda/op_profiler.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {

OpProfiler::OpProfiler() {
  const char* v = std::getenv("TESSERA_CUDA_PROFILE");
  enabled_ = v && *v && std::strcmp(v, "0") != 0;
}

OpProfiler::~OpProfiler() {
  if (!phases_.empty()) std::fputs(report().c_str(), stderr);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    TESSERA_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[i];
}

void OpProfiler::begin(std::string phase, cudaStream_t stream) {
  if (!enabled_) return;
  phase_ = std::move(phase);
  stream_ = stream;
  ops_.clear();
  TESSERA_CUDA_CHECK(cudaEventRecord(event(0), stream_));
}

void OpProfiler::mark(const char* op) {
  if (!enabled_ || !stream_) return;
  ops_.push_back(op);
  TESSERA_CUDA_CHECK(cudaEventRecord(event(ops_.size()), stream_));
}

void OpProfiler::collect() {
  if (!enabled_ || !stream_) return;
  Phase& ph = phases_[phase_];
  if (!ph.warmed) {  // a shape's first call builds GEMM plans and loads kernels: not counted
    ph.warmed = true;
    stream_ = nullptr;
    return;
  }
  ++ph.calls;
  for (size_t i = 0; i < ops_.size(); ++i) {
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    OpTotal* t = nullptr;
    for (OpTotal& o : ph.ops)
      if (o.op == ops_[i]) t = &o;
    if (!t) t = &ph.ops.emplace_back(OpTotal{ops_[i]});
    t->ms += ms;
    ++t->count;
  }
  stream_ = nullptr;
}

std::string OpProfiler::report() const {
  std::string out =
      "\nGPU time per op (TESSERA_CUDA_PROFILE; eager, no graphs; each shape's first call not "
      "counted)\n";
  char line[256];
  for (const auto& [name, ph] : phases_) {
    if (ph.calls == 0) continue;
    double total = 0;
    for (const OpTotal& o : ph.ops) total += o.ms;
    std::snprintf(line, sizeof line, "\n%s: %ld calls, %.3f ms per call\n", name.c_str(), ph.calls,
                  total / ph.calls);
    out += line;
    for (const OpTotal& o : ph.ops) {
      std::snprintf(line, sizeof line, "  %-22s %9.3f ms/call %6.1f %%  (%ld launches/call)\n",
                    o.op.c_str(), o.ms / ph.calls, 100 * o.ms / total, o.count / ph.calls);
      out += line;
    }
  }
  return out;
}

}  // namespace tessera::cuda
