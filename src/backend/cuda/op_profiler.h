// Per-op GPU time of a model's forward passes, for finding where a step's time goes
// (`TESSERA_CUDA_PROFILE=1 tessera bench --device cuda ...`). Off unless the environment
// variable is set; when on, the model runs eagerly (no CUDA graphs) and records one event after
// each op, so every op's time is the gap between two events on the model's stream (launch gaps
// included, which is what the op costs inside a step).
//
//   OpProfiler prof;                       // reads TESSERA_CUDA_PROFILE once
//   prof.begin("decode x128", stream);     // phase of this forward call
//   ... launch op ...; prof.mark("gemm o");
//   cudaStreamSynchronize(stream); prof.collect();
// The table (per phase: op, ms per call, share of the phase) goes to stderr at destruction.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cuda {

class OpProfiler {
 public:
  OpProfiler();
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  bool enabled() const { return enabled_; }
  void begin(std::string phase, cudaStream_t stream);
  void mark(const char* op);
  // After the stream finished: adds this call's op times to the totals.
  void collect();
  // Per phase: calls, then (op, total ms, count) in first-seen order.
  std::string report() const;

 private:
  cudaEvent_t event(size_t i);
  bool enabled_ = false;
  cudaStream_t stream_ = nullptr;
  std::string phase_;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> ops_;  // ops_[i] ends at events_[i + 1]
  struct OpTotal {
    std::string op;
    double ms = 0;
    long count = 0;
  };
  struct Phase {
    bool warmed = false;
    long calls = 0;
    std::vector<OpTotal> ops;
  };
  std::map<std::string, Phase> phases_;
};

}  // namespace tessera::cuda
