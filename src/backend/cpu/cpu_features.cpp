#include "backend/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

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
    // clang < 15 rejects "f16c" in __builtin_cpu_supports, so read CPUID.1:ECX directly.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
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
