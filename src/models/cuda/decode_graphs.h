// The CUDA graphs of the CUDA Llama's decode-only steps (llama_cuda.cpp): one per key (rows,
// table stride, whether the step ends in the greedy argmax), captured the second time a key is
// seen (the first eager run loads kernels and builds GEMM plans). Graphs hold buffer addresses:
// one is replayed only while the call's buffers (Bufs, compared byte for byte) are those it was
// captured on, else captured again; and all are dropped when the KV cache's buffers change.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "models/causal_lm.h"

namespace tessera::models::cuda_llama {

template <class Bufs>
class DecodeGraphs {
 public:
  using Key = std::tuple<int64_t, int64_t, bool>;  // rows, table stride, argmax

  DecodeGraphs() = default;
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  ~DecodeGraphs() { clear(); }

  // Drops every graph unless they were captured on this cache's K/V buffers. The graphs hold
  // those addresses, so they key them (not the cache object's address: one destroyed and another
  // constructed in its place holds other buffers).
  void follow(const KvCache& cache) {
    if (holds(cache)) return;
    clear();
    kv_.clear();
    for (int64_t li = 0; li < cache.n_layers(); ++li) {
      kv_.push_back(cache.k(li).raw_data());
      kv_.push_back(cache.v(li).raw_data());
    }
  }

  // Launches key's graph on s if it was captured on b (a graph on other buffers is dropped).
  bool launch(const Key& key, const Bufs& b, cudaStream_t s) {
    auto it = graphs_.find(key);
    if (it == graphs_.end()) return false;
    if (std::memcmp(&b, &it->second.bufs, sizeof b) == 0) {
      TESSERA_CUDA_CHECK(cudaGraphLaunch(it->second.exec, s));
      return true;
    }
    cudaGraphExecDestroy(it->second.exec);  // captured on buffers that have moved since
    graphs_.erase(it);
    return false;
  }

  // Whether key was seen before (time to capture it); the first time, notes it and says no.
  bool seen_before(const Key& key) { return !seen_.insert(key).second; }

  // Records enqueue() on s as key's graph on buffers b, then launches it.
  template <class Enqueue>
  void capture(const Key& key, const Bufs& b, cudaStream_t s, Enqueue&& enqueue) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    TESSERA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(s, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    TESSERA_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    TESSERA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    graphs_.emplace(key, Graph{exec, b});
    TESSERA_CUDA_CHECK(cudaGraphLaunch(exec, s));
  }

  void clear() {
    for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
    graphs_.clear();
    seen_.clear();
  }

 private:
  bool holds(const KvCache& cache) const {
    if (kv_.size() != static_cast<size_t>(2 * cache.n_layers())) return false;
    for (int64_t li = 0; li < cache.n_layers(); ++li)
      if (kv_[2 * li] != cache.k(li).raw_data() || kv_[2 * li + 1] != cache.v(li).raw_data())
        return false;
    return true;
  }

  struct Graph {
    cudaGraphExec_t exec;
    Bufs bufs;  // the buffers it was captured on
  };
  std::map<Key, Graph> graphs_;
  std::set<Key> seen_;
  std::vector<const void*> kv_;  // the K/V buffers the graphs hold, per layer k, v
};

}  // namespace tessera::models::cuda_llama
