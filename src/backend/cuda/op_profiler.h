// Per-op GPU time of a model's forward passes, for finding where a step's time goes
// (`TESSERA_CUDA_PROFILE=1 tessera bench --device cuda ...`). Off unless the environment
// variable is set; when on, the model runs eagerly (no CUDA graphs) and records one event after
// each op, so every op's time is the gap between two events on the model's stream (launch gaps
// included, which is what the op costs inside a step). An op marked with its cost (bytes it must
// move, FLOPs it must do) also gets its floor, max(bytes / copy bandwidth, FLOPs / bf16 GEMM
// rate), both measured on the device (ceilings.h) when the report is made, and its % of floor.
//
//   OpProfiler prof;                       // reads TESSERA_CUDA_PROFILE once
//   prof.begin("decode x128", stream);     // phase of this forward call
//   ... launch op ...; prof.mark("gemm o", {weight_bytes + io_bytes, 2.0 * m * n * k});
//   cudaStreamSynchronize(stream); prof.collect();
// The table (per phase: op, ms per call, share of the phase, floor ms, % of floor) goes to
// stderr at destruction.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cuda {

// What an op must at least move and compute (0: unknown).
struct OpCost {
  double bytes = 0;
  double flops = 0;
};

class OpProfiler {
 public:
  OpProfiler();
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  bool enabled() const { return enabled_; }
  void begin(std::string phase, cudaStream_t stream);
  void mark(const char* op, OpCost cost = {});
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
  std::vector<std::pair<const char*, OpCost>> ops_;  // ops_[i] ends at events_[i + 1]
  struct OpTotal {
    std::string op;
    double ms = 0;
    long count = 0;
    OpCost cost;  // summed over calls
  };
  struct Phase {
    bool warmed = false;
    long calls = 0;
    std::vector<OpTotal> ops;
  };
  std::map<std::string, Phase> phases_;
};

}  // namespace tessera::cuda
