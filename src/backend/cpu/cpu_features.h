// Runtime CPU ISA detection; kernels pick their SIMD path from this once.
#pragma once

#include <string>

namespace tessera {

struct CpuFeatures {
  bool avx2 = false;  // implies FMA and F16C were also checked
  bool avx512f = false;
  bool avx512_vnni = false;
  bool neon = false;
};

const CpuFeatures& cpu_features();
// Tests only: makes cpu_features() return *f (e.g. CpuFeatures{} for the scalar paths) until
// called again with nullptr. Not synchronized: call it while no kernel runs. Requesting an ISA
// the host lacks is the caller's bug.
void cpu_features_override(const CpuFeatures* f);
// e.g. "avx2 fma f16c avx512f"; TESSERA_ISA=scalar forces the portable path.
std::string cpu_features_string();

}  // namespace tessera
