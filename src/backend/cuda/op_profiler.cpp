#include "backend/cuda/op_profiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "backend/cuda/ceilings.h"
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

void OpProfiler::mark(const char* op, OpCost cost) {
  if (!enabled_ || !stream_) return;
  ops_.emplace_back(op, cost);
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
    const auto& [op, cost] = ops_[i];
    OpTotal* t = nullptr;
    for (OpTotal& o : ph.ops)
      if (o.op == op) t = &o;
    if (!t) t = &ph.ops.emplace_back(OpTotal{op});
    t->ms += ms;
    ++t->count;
    t->cost.bytes += cost.bytes;
    t->cost.flops += cost.flops;
  }
  stream_ = nullptr;
}

std::string OpProfiler::report() const {
  bool costed = false;
  for (const auto& [name, ph] : phases_)
    for (const OpTotal& o : ph.ops) costed |= o.cost.bytes > 0 || o.cost.flops > 0;
  double bw = 0, peak = 0;
  if (costed) {
    try {  // the report is made at destruction: a failed measurement drops the floors only
      bw = measure_copy_bandwidth_gbs() * 1e9;
      peak = measure_bf16_gemm_tflops() * 1e12;
    } catch (const std::exception&) {
      costed = false;
    }
  }
  std::string out =
      "\nGPU time per op (TESSERA_CUDA_PROFILE; eager, no graphs; each shape's first call not "
      "counted)\n";
  char line[256];
  if (costed) {
    std::snprintf(line, sizeof line,
                  "floor = max(bytes / %.0f GB/s copy bandwidth, FLOPs / %.0f TFLOP/s bf16 GEMM)\n",
                  bw / 1e9, peak / 1e12);
    out += line;
  }
  for (const auto& [name, ph] : phases_) {
    if (ph.calls == 0) continue;
    double total = 0;
    for (const OpTotal& o : ph.ops) total += o.ms;
    std::snprintf(line, sizeof line, "\n%s: %ld calls, %.3f ms per call\n", name.c_str(), ph.calls,
                  total / ph.calls);
    out += line;
    for (const OpTotal& o : ph.ops) {
      const double ms = o.ms / ph.calls;
      std::snprintf(line, sizeof line, "  %-28s %9.3f ms/call %6.1f %%  (%ld launches/call)", o.op.c_str(),
                    ms, 100 * o.ms / total, o.count / ph.calls);
      out += line;
      if (costed && (o.cost.bytes > 0 || o.cost.flops > 0)) {
        const double floor_ms = std::max(o.cost.bytes / bw, o.cost.flops / peak) * 1e3 / ph.calls;
        std::snprintf(line, sizeof line, "  floor %8.3f ms  %5.1f %% of floor", floor_ms, 100 * floor_ms / ms);
        out += line;
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace tessera::cuda
