// A CUPTI kernel tracer loaded by the CUDA driver into any process (CUDA_INJECTION64_PATH): it
// records the GPU start and end time of every kernel (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
// kernels are not serialized, so kernels overlapping under programmatic dependent launch show
// as overlapping, and kernels inside CUDA graphs are recorded too) and writes them at exit as
// CSV lines "start_ns,end_ns,stream,grid_x,grid_y,grid_z,block_x,name" to $KERNEL_TRACE_OUT.
// bench/cuda/kernel_trace_table.py turns a trace into per-kernel exposed times of a decode step.
//
//   CUDA_INJECTION64_PATH=libkernel_trace.so KERNEL_TRACE_OUT=trace.csv
//     [KERNEL_TRACE_CUPTI=/path/libcupti.so.13] tessera bench ...   (one command line)
//
// libcupti is opened at run time ($KERNEL_TRACE_CUPTI, else libcupti.so.13 from the library
// path), so the tracer has no link-time dependency on it; only cupti_activity.h is needed to
// build it.
#include <cupti_activity.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

using EnableFn = CUptiResult (*)(CUpti_ActivityKind);
using RegisterFn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
using NextFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);
using FlushFn = CUptiResult (*)(uint32_t);

NextFn g_next = nullptr;
FlushFn g_flush = nullptr;
std::mutex g_mu;
// Never destroyed: a buffer CUPTI hands back during exit, after static destructors ran, still
// finds it alive.
std::vector<std::string>& g_lines = *new std::vector<std::string>;
constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<std::string> lines;
  while (g_next(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    // The fields read here sit in the prefix every CUpti_ActivityKernelN version shares (Kernel9:
    // in the headers of CUDA 12.x-13.x).
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel9*>(rec);
    if (k->end <= k->start) continue;  // not completed (a forced flush)
    char head[160];
    std::snprintf(head, sizeof head, "%llu,%llu,%u,%d,%d,%d,%d,", static_cast<unsigned long long>(k->start),
                  static_cast<unsigned long long>(k->end), k->streamId, k->gridX, k->gridY, k->gridZ, k->blockX);
    std::string line = head;  // the name may be long (cuBLASLt's): no fixed buffer
    line += k->name ? k->name : "?";
    line += '\n';
    lines.push_back(std::move(line));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_lines.insert(g_lines.end(), lines.begin(), lines.end());
}

void write_out() {
  if (g_flush) g_flush(1);
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  FILE* f = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lock(g_mu);
  for (const std::string& l : g_lines) std::fputs(l.c_str(), f);
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels -> %s\n", g_lines.size(), path ? path : "kernel_trace.csv");
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* lib = std::getenv("KERNEL_TRACE_CUPTI");
  void* h = dlopen(lib ? lib : "libcupti.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    std::fprintf(stderr, "kernel_trace: cannot open libcupti (%s)\n", dlerror());
    return 0;
  }
  auto enable = reinterpret_cast<EnableFn>(dlsym(h, "cuptiActivityEnable"));
  auto reg = reinterpret_cast<RegisterFn>(dlsym(h, "cuptiActivityRegisterCallbacks"));
  g_next = reinterpret_cast<NextFn>(dlsym(h, "cuptiActivityGetNextRecord"));
  g_flush = reinterpret_cast<FlushFn>(dlsym(h, "cuptiActivityFlushAll"));
  if (!enable || !reg || !g_next || !g_flush) {
    std::fprintf(stderr, "kernel_trace: libcupti lacks the activity API\n");
    return 0;
  }
  if (reg(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: enabling kernel activity failed\n");
    return 0;
  }
  std::atexit(write_out);
  return 1;
}
