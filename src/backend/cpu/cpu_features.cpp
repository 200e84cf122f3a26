#include "backend/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tessera {

namespace {
std::atomic<const CpuFeatures*> g_override{nullptr};
}

void cpu_features_override(const CpuFeatures* f) { g_override.store(f, std::memory_order_relaxed); }

const CpuFeatures& cpu_features() {
  if (const CpuFeatures* o = g_override.load(std::memory_order_relaxed)) return *o;
  static const CpuFeatures features = [] {
    CpuFeatures f;
    const char* force = std::getenv("TESSERA_ISA");
    if (force && std::strcmp(force, "scalar") == 0) return f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__)
    f.neon = true;
#endif
    return f;
  }();
  return features;
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  if (f.avx2) s += "avx2 fma f16c ";
  if (f.avx512f) s += "avx512f ";
  if (f.avx512_vnni) s += "avx512_vnni ";
  if (f.neon) s += "neon ";
  if (s.empty()) return "scalar";
  s.pop_back();
  return s;
}

}  // namespace tessera
