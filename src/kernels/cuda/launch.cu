#include "kernels/cuda/launch.h"

#include <atomic>

namespace tessera::cuda {
namespace {
std::atomic<bool> g_pdl{true};
}
bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }
}  // namespace tessera::cuda
