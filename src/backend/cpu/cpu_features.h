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
// e.g. "avx2 fma f16c avx512f"; TESSERA_ISA=scalar forces the portable path.
std::string cpu_features_string();

}  // namespace tessera
